"""Fixed-size cohorts: a fixed m of N clients drawn each round (Flower).

For each design the test builds an explicit neighbouring pair and
re-accounts it with Google's dp-accounting PLD accountant (not paretofl's),
then checks that the ε paretofl reports, and the ε Flower's own accountant
reports through the bridge, is never below it.

* Add/remove (``framework="flower-accounted"``): every one of the N clients
  sends a with |a| = C; the added client sends -a.  Drawing m of the N + 1,
  the added client is drawn with probability m/(N + 1) and displaces a
  client that sends a: the sum moves by 2C.  The release is then exactly a
  Poisson-subsampled Gaussian of rate m/(N + 1) and noise multiplier z/2,
  so its ε (optimistic PLD: a lower bound) is a lower bound on the truth.
* Replace-one (``framework="flower"``): every client sends a, and the
  neighbour replaces one client's data so that it sends -a; the pair is a
  Poisson-subsampled Gaussian of rate m/N and z/2 in the same way.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import paretofl

dp_accounting = pytest.importorskip("dp_accounting")


def witness_epsilon(rate: float, noise_multiplier: float, rounds: int, delta: float) -> float:
    """ε of T rounds of the witness pair: a Poisson-subsampled Gaussian of
    ``rate`` and ``noise_multiplier`` (relative to the shift), by
    dp-accounting's optimistic PLD accountant (a lower bound on its ε)."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    ev = dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(noise_multiplier))
    acc.compose(dp_event.SelfComposedDpEvent(ev, rounds))
    return acc.get_epsilon(delta)


def _random_designs(framework: str, n: int, seed: int):
    """(N, m, design) for random N, m < N, budgets and round caps."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        N = int(rng.choice([5, 10, 20, 60, 100, 400]))
        m = int(rng.integers(1, N))
        eps = float(rng.choice([0.5, 1, 2, 4, 8]))
        cap = int(rng.choice([1, 5, 20, 100]))
        delta = float(rng.choice([1e-3, 1e-5])) if N < 1000 else 1e-5
        if delta >= 1.0 / N:
            delta = 0.1 / N
        try:
            d = paretofl.design(N, eps, delta=delta, max_rounds=cap, q=m / N, framework=framework, sigma_min=0.05)
        except paretofl.InfeasibleBudget:
            continue
        out.append((N, m, d))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_add_remove_fixed_cohort_never_under_reports(seed):
    """flower-accounted designs with m < N: the reported ε is at least the
    witness pair's (rate m/(N+1), z/2), re-accounted by dp-accounting."""
    for N, m, d in _random_designs("flower-accounted", 4, seed):
        z = d.noise_multiplier
        truth = witness_epsilon(m / (N + 1), z / 2.0, d.rounds, d.delta)
        assert d.epsilon >= truth, (N, m, d.rounds, z, d.epsilon, truth)
        assert d.epsilon <= d.budget * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(2))
def test_replace_one_fixed_cohort_never_under_reports(seed):
    """flower designs (replace-one, sampling without replacement): the
    reported ε (Wang, Balle, Kasiviswanathan 2019, Thm 27, at z/2) is at
    least the witness pair's (rate m/N, z/2)."""
    for N, m, d in _random_designs("flower", 3, 10 + seed):
        truth = witness_epsilon(m / N, d.noise_multiplier / 2.0, d.rounds, d.delta)
        assert d.epsilon >= truth, (N, m, d.rounds, d.noise_multiplier, d.epsilon, truth)


def test_the_issues_designs_now_charge_at_least_the_truth():
    """The designs of the issue that under-reported by up to half (reported
    5.000 where the truth was at least 9.44): designed again, each spends
    its budget and its witness ε stays within it."""
    cases = [((10, 5), dict(max_rounds=10, q=0.5)), ((20, 8), dict(max_rounds=20, q=0.5)),
             ((60, 4), dict(max_rounds=40, q_max=0.5)), ((100, 2), dict(max_rounds=50, q=0.5)),
             ((50, 3), dict(max_rounds=50, q=0.1))]
    for (N, eps), kw in cases:
        d = paretofl.design(N, eps, framework="flower-accounted", **kw)
        m = round(d.q * N)
        assert m < N
        assert d.charged_noise_multiplier == pytest.approx(d.noise_multiplier / 2)
        truth = witness_epsilon(m / (N + 1), d.noise_multiplier / 2, d.rounds, d.delta)
        assert truth <= d.epsilon <= eps * (1 + 1e-9)


def test_everyone_every_round_keeps_sensitivity_c():
    """With m = N there is no one to displace: the charge stays a Gaussian
    of z, and the witness of an added client (rate 1, shift C) equals it."""
    d = paretofl.design(100, 2.0, max_rounds=50, framework="flower-accounted")
    assert d.q == 1.0 and d.charged_noise_multiplier == pytest.approx(d.noise_multiplier)
    truth = witness_epsilon(1.0, d.noise_multiplier, d.rounds, d.delta)
    assert truth <= d.epsilon <= 2.0 * (1 + 1e-9)


def test_flowers_accountant_through_the_bridge_never_under_reports():
    """Flower's own RdpAccountant as the bridge builds it, fed the events
    Flower's accounted strategy feeds it (the strategy's z, m, N each
    round): its ε is at least the witness pair's and within the budget."""
    pytest.importorskip("flwr")
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

    from paretofl.integrations import flower as bridge

    for N, m, d in _random_designs("flower-accounted", 5, 7):
        plan = bridge.plan(d, 1.0)
        acc = bridge.accountant(plan)
        ev = GaussianPrivacyEvent(noise_multiplier=plan.noise_multiplier, sample_size=m, population_size=N)
        for _ in range(plan.num_rounds):
            assert not acc.would_exceed(ev)
            acc.compose(ev)
        flower_eps = acc.get_privacy_spent().epsilon
        truth = witness_epsilon(m / (N + 1), plan.noise_multiplier / 2, plan.num_rounds, plan.delta)
        assert truth <= flower_eps <= d.budget * (1 + 1e-9), (N, m, truth, flower_eps)
        assert flower_eps == pytest.approx(d.epsilon, rel=1e-6)     # the design reports what Flower reports
        restored = bridge.accountant(plan)                         # its state restores the same ε
        restored.load_state_dict(acc.state_dict())
        assert restored.get_privacy_spent().epsilon == pytest.approx(flower_eps, rel=1e-12)


def test_cohort_size_is_m_for_every_q_equal_m_over_n_and_leaves_fractions_alone():
    """Brute force over N up to 5000 and m up to 20, and at the most clients a design takes (10^6): (m/N)·N
    misses m by an ulp in thousands of pairs, and cohort_size gives m in every one; a cohort that is not whole
    stays as it is, down to 1e-6 of a client from a whole one (a q that asks for that is no whole cohort)."""
    from paretofl.recommendation import MAX_CLIENTS
    from paretofl.theory.privacy import cohort_size

    missed = 0
    for n in [*range(2, 5001), MAX_CLIENTS]:
        for m in [*range(1, min(n, 20) + 1), *range(n - 20, n + 1)]:
            if m >= 1:
                missed += (m / n) * n != m
                assert cohort_size(m / n, n) == m
    assert missed > 5_000
    assert cohort_size(0.123, 100) == 0.123 * 100 and cohort_size(None, cohort=12.3) == 12.3
    assert cohort_size(None, cohort=7 - 1e-6) == 7 - 1e-6 and cohort_size(None, cohort=1e6 - 1e-6) < 1e6
    assert list(cohort_size([1 / 3400, 0.5], 3400)) == [1.0, 1700.0]         # arrays stay arrays
    from paretofl.theory.privacy import whole_cohort_rate

    assert whole_cohort_rate(1e-12, 100) == 1e-12          # a cohort of no client is no whole cohort: q kept
    assert paretofl.design(100, 2.0, max_rounds=50, q=1e-12, mechanism="client-local").q == 1e-12


@pytest.mark.parametrize("n,m", [(1000, 10), (3400, 7), (3400, 1), (22, 15)])
def test_a_whole_cohort_is_charged_at_the_rate_it_is_drawn_at(n, m):
    """A fixed-size draw takes m = qN clients, each with probability m/N: a q within 1e-9 of m/N (an ulp of
    (m/N)·N, or a hand-typed q) is charged at m/N, on either side of it (charged at q just below m/N, the
    draw of m exceeded the rate charged), and a design made at such a q is made at m/N.  The TFF export
    draws the largest m with m/N <= q (its note's claim; m/N as a float, the nearest to the fraction)."""
    from paretofl.integrations import tff
    from paretofl.mechanisms import get

    for q in (m / n, (m - 5e-10) / n, (m + 5e-10) / n):
        assert get("flower").charge(q, 0.5, n).rate == m / n
        d = paretofl.design(n, 2.0, 1e-5, max_rounds=50, q=q, framework="flower")
        assert (d.q, d.clients_per_round) == (m / n, m)
    d = paretofl.design(n, 4.0, 1e-5, max_rounds=50, q=(m - 5e-10) / n, mechanism="distributed",
                        mechanism_options={"dim": 7850})
    assert d.q == m / n and tff.plan(d, 1.0).clients_per_round == m
    for q, want in ((m / n, m), ((m - 5e-9) / n, m - 1)):          # a design file's q, as it was written
        if want >= 1:
            p = tff.plan(replace(d, q=q), 1.0)
            assert p.clients_per_round == want and want / n <= q < (want + 1) / n
