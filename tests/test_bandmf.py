"""Banded matrix factorization (bandmf, bandmf-amplified; docs/theory.md §7):
the strategy against dense linear algebra, binomials and JAX Privacy; the
sensitivity by brute force over participation patterns; ε re-accounted by
dp-accounting; the trainer's noise covariance across rounds and its
participation schedule; the design reducing to DP-FedAvg's at b = 1 and
optimal against a brute-force scan; the command line's answer."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

import paretofl
from paretofl import mechanisms as M
from paretofl.cli import main
from paretofl.theory import bandmf as mf
from paretofl.theory.privacy import calibrate_noise, compute_epsilon

# --------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------


@pytest.mark.parametrize("b", [1, 2, 5, 17, 64])
def test_coefficients_are_the_central_binomials_over_four_to_the_k_scaled_to_unit_norm(b):
    raw = np.array([math.comb(2 * k, k) / 4 ** k for k in range(b)])
    assert np.allclose(mf.coefficients(b), raw / np.linalg.norm(raw), rtol=1e-13, atol=0)


def test_the_unbanded_strategy_is_the_square_root_of_the_prefix_sum_matrix():
    """With b = T the strategy (before scaling) squares to A, the prefix sums."""
    for T in (1, 4, 13, 40):
        raw = np.array([math.comb(2 * k, k) / 4 ** k for k in range(T)])
        C = mf.strategy(T, T) * np.linalg.norm(raw)
        assert np.allclose(C @ C, np.tril(np.ones((T, T))), atol=1e-10)


@pytest.mark.parametrize("seed", range(6))
def test_inverse_error_and_noise_factors_against_dense_linear_algebra(seed):
    rng = np.random.default_rng(seed)
    T = int(rng.integers(2, 60))
    b = int(rng.integers(1, T + 5))
    C = mf.strategy(T, b)
    assert np.allclose(np.tril(C, -b), 0)                       # b-banded
    assert np.linalg.norm(C, axis=0).max() <= 1 + 1e-12          # columns of norm at most 1
    Cinv = np.linalg.inv(C)
    assert np.allclose(mf.inverse_coefficients(b, T), Cinv[:, 0], atol=1e-10)
    A = np.tril(np.ones((T, T)))
    assert mf.error_ratio(b, T) == pytest.approx(np.sum((A @ Cinv) ** 2) / (T * (T + 1) / 2), rel=1e-10)
    assert np.allclose(mf.round_noise_factors(b, T), np.linalg.norm(Cinv, axis=1), rtol=1e-10)


def test_one_band_is_independent_noise():
    assert np.allclose(mf.strategy(9, 1), np.eye(9))
    assert np.allclose(mf.error_ratios(1, 500), 1.0)
    assert mf.participations(10, 1) == 10


def test_the_error_ratio_never_rises_with_the_rounds():
    """The design's search takes the most rounds the budget allows at each σ
    and bounds intervals by r's value at their end: both need r(T)
    non-increasing in T at every b."""
    for b in list(range(1, 40)) + [64, 100, 128, 256, 500, 1000, 2048]:
        r = mf.error_ratios(b, 3000)
        assert np.all(np.diff(r) <= 1e-12), b


def _patterns(T, sep, k=None):
    """Every set of rounds whose members are at least ``sep`` apart."""
    out = []
    for size in range(1, T + 1):
        for p in itertools.combinations(range(T), size):
            if all(y - x >= sep for x, y in zip(p, p[1:])) and (k is None or size <= k):
                out.append(p)
    return out


@pytest.mark.parametrize("T,b", [(6, 2), (8, 3), (9, 4), (10, 1), (7, 7), (11, 5)])
def test_sensitivity_by_brute_force_over_participation_patterns(T, b):
    """The largest change in CG one client can make, over every set of
    rounds b or more apart (each update a unit vector in one direction, the
    worst case for positive C), is at most k = ceil(T/b) - what is
    charged - and at least k - 1 (the bound is nearly tight); a client
    joining rounds closer than b apart (as many, or two where k = 1) exceeds k."""
    C = mf.strategy(T, b)
    k = mf.participations(T, b)
    worst = max(np.sum(C[:, list(p)].sum(1) ** 2) for p in _patterns(T, b))
    assert worst <= k + 1e-12
    assert worst >= k - 1 - 1e-12
    if b > 1:
        closer = max(np.sum(C[:, list(p)].sum(1) ** 2) for p in _patterns(T, 1, max(k, 2)))
        assert closer > k


# --------------------------------------------------------------------------
# JAX Privacy's reference code as an oracle (installed with the dev extras)
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jp():
    pytest.importorskip("jax_privacy")
    import jax

    jax.config.update("jax_enable_x64", True)
    from jax_privacy.matrix_factorization import sensitivity, toeplitz

    return toeplitz, sensitivity


@pytest.mark.parametrize("seed", range(5))
def test_strategy_error_and_sensitivity_match_jax_privacy(jp, seed):
    toeplitz, sensitivity = jp
    rng = np.random.default_rng(100 + seed)
    T = int(rng.integers(8, 200))
    b = int(rng.integers(1, T))
    c = mf.coefficients(b)
    ref = np.asarray(toeplitz.optimal_max_error_strategy_coefs(b))
    assert np.allclose(c, ref / np.linalg.norm(ref), rtol=1e-12)
    assert np.allclose(mf.inverse_coefficients(b, T), np.asarray(toeplitz.inverse_coef(c, T)), atol=1e-12)
    per_query = np.asarray(toeplitz.per_query_error(strategy_coef=c, n=T))
    assert mf.error_ratio(b, T) == pytest.approx(per_query.sum() / (T * (T + 1) / 2), rel=1e-10)
    sens2 = float(sensitivity.get_sensitivity_banded(mf.strategy(T, b), min_sep=b)) ** 2
    assert sens2 == pytest.approx(float(toeplitz.minsep_sensitivity_squared(c, min_sep=b, n=T)), rel=1e-9)
    assert sens2 <= mf.participations(T, b) + 1e-9      # what paretofl charges is never less


def test_the_trainers_noise_is_jax_privacys_streaming_inverse(jp, monkeypatch):
    """Fed the same standard normals, the trainer's recurrence gives the rows
    of C⁻¹Z that JAX Privacy's streaming C⁻¹ (what the export's snippet
    uses) gives."""
    import jax.numpy as jnp

    toeplitz, _ = jp
    b, T, d = 5, 13, 7
    rel = _release("bandmf", bands=b, replicas=2, clients=10)
    z = np.random.default_rng(0).standard_normal((T, 2, d))
    draws = iter(z)
    monkeypatch.setattr(rel.engine, "normal", lambda shape: _torch().as_tensor(next(draws), dtype=rel.engine.dtype))
    ours = []
    for _ in range(T):
        ours.append(rel.correlated_noise(d).double().numpy())
        rel.t += 1
    cinv = toeplitz.inverse_as_streaming_matrix(jnp.asarray(mf.coefficients(b)))
    state = cinv.init_multiply(jnp.zeros((2, d)))
    for t in range(T):
        row, state = cinv.multiply_next(jnp.asarray(z[t]), state)
        assert np.allclose(ours[t], np.asarray(row), atol=1e-5)


# --------------------------------------------------------------------------
# accounting: the charge re-accounted by dp-accounting
# --------------------------------------------------------------------------
dp_accounting = pytest.importorskip("dp_accounting")


def _pld(event, delta):
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("seed", range(6))
def test_epsilon_reaccounted_by_dp_accounting(seed):
    """Random (T, b, z): bandmf's whole run is one Gaussian of noise
    multiplier z over its sensitivity √k (brute force below k where the last
    columns are cut: k is charged), bandmf-amplified k Poisson-subsampled
    Gaussians at the group's rate.  dp-accounting's PLD (tighter than RDP)
    never exceeds what paretofl reports, and RDP's price stays within 30 %."""
    from dp_accounting import dp_event

    rng = np.random.default_rng(seed)
    T = int(rng.integers(5, 400))
    b = int(rng.integers(1, min(T, 64) + 1))
    n = b * int(rng.integers(2, 50))
    z = float(rng.uniform(0.8, 8.0))
    delta = 1e-5
    k = mf.participations(T, b)
    m = n / b
    ours = M.get("bandmf", bands=b).epsilon(1 / b, z / math.sqrt(m), T, delta, n)
    pld = _pld(dp_event.GaussianDpEvent(z / math.sqrt(k)), delta)
    assert pld <= ours * (1 + 1e-6) and ours <= 1.3 * pld + 0.05, (T, b, z, ours, pld)
    qg = float(rng.uniform(0.05, 1.0))
    ours = M.get("bandmf-amplified", bands=b).epsilon(qg / b, z / math.sqrt(qg * m), T, delta, n)
    ev = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(qg, dp_event.GaussianDpEvent(z)), k)
    pld = _pld(ev, delta)
    assert pld <= ours * (1 + 1e-6) and ours <= 1.3 * pld + 0.05, (T, b, z, qg, ours, pld)


# --------------------------------------------------------------------------
# the trainer
# --------------------------------------------------------------------------
def _torch():
    import torch

    return torch


def _release(mechanism, bands, replicas, clients, q=None, sigma=1.0):
    from paretofl.fl import audit as A
    from paretofl.fl.build import assemble

    setup = A._setup(A._synthetic(4 * clients, 1, 2), clients)
    q = 1 / bands if q is None else q
    return assemble(setup, "dpfedavg", replicas=range(replicas), mechanism=mechanism, bands=bands,
                    client_rate=q, sigma=sigma, clip=1.0, lr=0.1).policy.release


def test_the_released_noise_has_the_strategys_covariance_across_rounds():
    """Many replicas of T rounds with every update zero: the noise each round
    releases on the sum, in units of zC, has covariance C⁻¹C⁻ᵀ over the
    rounds (C inverted here by numpy), not the identity."""
    torch = _torch()
    b, T, R, N = 3, 7, 3000, 9
    rel = _release("bandmf", b, R, N, sigma=0.8)
    eng = rel.engine
    glob = eng.init_global()
    active = np.ones(R, dtype=bool)
    zc = 0.8 * math.sqrt(N / b) * 1.0
    ys = []
    for _ in range(T):
        c = rel.select(active)
        upd = torch.zeros(c.size, eng.net.n_params)
        new = rel.release(glob, upd, c, active)
        ys.append(((eng.flat(new) - eng.flat(glob)) * (N / b) / zc).double().numpy())
    y = np.stack(ys, axis=1)                                   # (R, T, d)
    emp = np.einsum("rtd,rsd->ts", y, y) / (R * y.shape[2])
    Cinv = np.linalg.inv(mf.strategy(T, b))
    assert np.allclose(emp, Cinv @ Cinv.T, atol=0.03), np.round(emp - Cinv @ Cinv.T, 3)
    assert abs(emp[1, 0]) > 0.2                                # correlated, unlike independent noise


@pytest.mark.parametrize("mechanism,q", [("bandmf", 0.25), ("bandmf-amplified", 0.125)])
def test_no_client_joins_twice_within_b_rounds_and_group_zero_is_charged(mechanism, q):
    b, T, N, R = 4, 13, 22, 3
    rel = _release(mechanism, b, R, N, q=q)
    active = np.ones(R, dtype=bool)
    last = np.full((R, N), -10**6)
    steps = []
    for t in range(T):
        steps.append(int(rel.charges()[0].steps[0]))
        c = rel.select(active)
        rep, cli = c.replica.numpy(), c.client.numpy()
        assert np.all(cli % b == t % b)                        # only group t mod b
        assert np.all(t - last[rep, cli] >= b)                 # b or more rounds since its last
        last[rep, cli] = t
        if mechanism == "bandmf":
            assert np.all(c.counts == np.sum(np.arange(N) % b == t % b))   # all of the group
        rel.t += 1
    assert steps == [1 if t % b == 0 else 0 for t in range(T)]
    assert sum(steps) == mf.participations(T, b)


def test_training_a_design_spends_what_it_says():
    d = paretofl.design(200, 4.0, max_rounds=60, mechanism="bandmf", mechanism_options={"bands": 4}, sigma_min=0.01)
    r = paretofl.train(design=d, dataset="digits", model="lr", replicas=2)
    assert r.rounds == d.rounds and r.epsilon == pytest.approx(d.epsilon, rel=1e-9)
    assert r.epsilon <= 4.0 and r.accuracy > 0.5


# --------------------------------------------------------------------------
# the design
# --------------------------------------------------------------------------
def test_one_band_gives_back_dpfedavgs_design():
    """b = 1: bandmf is every client every round (client-aggregate at
    q = 1), bandmf-amplified Poisson sampling (client-aggregate at its q):
    the same T, σ, ε and bound, so a κ fitted for DP-FedAvg carries over."""
    kw = dict(max_rounds=300, sigma_min=0.01)
    for mech, q in (("bandmf", 1.0), ("bandmf-amplified", 0.1)):
        ours = paretofl.design(500, 3.0, q=q, mechanism=mech, mechanism_options={"bands": 1}, **kw)
        theirs = paretofl.design(500, 3.0, q=q, **kw)
        assert (ours.rounds, ours.q) == (theirs.rounds, theirs.q)
        for f in ("sigma", "epsilon", "utility_bound"):
            assert getattr(ours, f) == pytest.approx(getattr(theirs, f), rel=1e-9), f


def test_the_design_is_the_best_point_of_a_brute_force_scan():
    """bandmf at N = 240, ε = 2, at most 40 rounds: every b dividing into
    cohorts the q range allows and every T, z calibrated by bisection to
    the budget over k = ceil(T/b) Gaussians: the design's bound is the
    scan's least (to the search's tolerance) and spends at most ε."""
    n, eps, delta, t_cap, kappa, smin, smax = 240, 2.0, 1e-5, 40, 16.0, 0.01, 30.0
    d = paretofl.design(n, eps, delta=delta, max_rounds=t_cap, kappa=kappa, mechanism="bandmf", sigma_min=smin,
                        sigma_max=smax, q_min=1 / 60)
    assert d.epsilon <= eps * (1 + 1e-12)
    best = math.inf
    z_of = {k: calibrate_noise(eps, 1.0, k, delta, sampling="none") for k in range(1, t_cap + 1)}
    for b in range(1, 61):
        m = n / b
        for T in range(1, t_cap + 1):
            k = mf.participations(T, b)
            z = max(z_of[k], smin * math.sqrt(m))
            if z > smax * math.sqrt(m):
                continue
            best = min(best, 1 / T + kappa * z * z / (m * m) * mf.error_ratio(b, T))
    assert d.utility_bound <= best * (1 + 2e-3)
    assert d.utility_bound >= best * (1 - 2e-3) or d.details["bands"] not in range(1, 61)


def test_a_bandmf_design_says_where_b_came_from_and_compares_with_dpfedavg():
    d = paretofl.design(10000, 2.0, max_rounds=1000, q_max=0.01, mechanism="bandmf", sigma_min=0.01)
    x = d.details
    assert d.q == pytest.approx(1 / x["bands"]) and x["groups"] == x["bands"] and x["bands"] >= 100
    assert x["participations"] == mf.participations(d.rounds, x["bands"])
    assert min(x["bands_searched"].values()) == pytest.approx(d.utility_bound)
    assert d.epsilon == pytest.approx(compute_epsilon(1.0, d.noise_multiplier, x["participations"], 1e-5,
                                                      "none"), rel=1e-9)
    assert "q" in x["dpfedavg"] and any("DP-FedAvg design" in n for n in d.notes)
    assert len(x["coefficients"]) == x["bands"]
    d2 = paretofl.Design.load(_saved(d))
    assert d2.details == json.loads(json.dumps(d.details)) and d2.mechanism_options == {"bands": x["bands"]}


def _saved(d):
    import tempfile

    path = tempfile.mkdtemp() + "/d.json"
    d.save(path)
    return path


def test_auto_picks_the_lowest_bound_of_the_families():
    d = paretofl.design(10000, 2.0, max_rounds=1000, q_max=0.01, mechanism="auto", sigma_min=0.01)
    each = d.details["compared"]
    assert set(each) == {"client-aggregate", "bandmf", "bandmf-amplified"}
    assert d.utility_bound == pytest.approx(min(each.values()))
    assert d.mechanism == min(each, key=each.get)


@pytest.mark.parametrize("call,match", [
    (dict(mechanism="bandmf", q=0.3), "one over a whole number"),
    (dict(mechanism="bandmf", mechanism_options={"bands": 3}, q=0.5), "1/b"),
    (dict(mechanism="bandmf-amplified", mechanism_options={"bands": 4}, q=0.5), "share of at most"),
    (dict(mechanism="bandmf", mechanism_options={"bands": 0}), "bands"),
    (dict(mechanism="bandmf", mechanism_options={"bands": 2.5}), "bands"),
    (dict(mechanism="auto", mechanism_options={"bands": 2}), "auto"),
    (dict(mechanism="bandmf", max_rounds=200_000), "at most"),
])
def test_bad_banded_designs_are_refused_in_one_line(call, match):
    kw = dict(max_rounds=50)
    kw.update(call)
    with pytest.raises(ValueError, match=match) as e:
        paretofl.design(100, 2.0, **kw)
    assert "\n" not in str(e.value)


def test_exports_go_where_the_noise_can_run():
    d = paretofl.design(10000, 2.0, max_rounds=1000, q_max=0.01, mechanism="bandmf", sigma_min=0.01)
    p, code = paretofl.api.export(d, "jax-privacy")
    assert p.bands == d.details["bands"] and p.coefficients == d.details["coefficients"]
    assert p.stddev == pytest.approx(d.noise_multiplier * d.clip) and p.expected_cohort == pytest.approx(d.cohort)
    assert "inverse_as_streaming_matrix" in code and "matrix_factorization_privatizer" in code
    with pytest.raises(ValueError, match="jax-privacy"):
        paretofl.api.export(d, "flower")
    with pytest.raises(ValueError, match="independent noise"):
        paretofl.api.export(paretofl.design(100, 2.0, max_rounds=50), "jax-privacy")


def test_the_command_prints_b_t_the_cohort_z_epsilon_and_the_comparison(capsys):
    main(["design", "--clients", "10000", "--budget", "2", "--max-rounds", "1000", "--q-max", "0.01",
          "--mechanism", "bandmf"])
    out = capsys.readouterr().out
    for words in ("bands b", "groups", "participations k", "about 100 clients a round", "noise multiplier on the",
                  "epsilon spent", "compositions of the Gaussian", "has the lowest utility bound of the",
                  "DP-FedAvg design with Poisson sampling", "--to jax-privacy"):
        assert words in out, words
    main(["design", "--clients", "10000", "--budget", "2", "--max-rounds", "1000", "--q-max", "0.01",
          "--mechanism", "auto", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert d["mechanism"] in ("client-aggregate", "bandmf", "bandmf-amplified")
    assert d["utility_bound"] == pytest.approx(min(d["details"]["compared"].values()))


def test_the_statement_says_the_participation_assumption():
    d = paretofl.design(10000, 2.0, max_rounds=1000, q_max=0.01, mechanism="bandmf", sigma_min=0.01)
    text = d.statement()
    assert f"at most once in any {d.details['bands']} consecutive rounds" in text
    assert "C^-1 Z" in text and "no amplification" in text


def test_the_run_audits_canary_moves_the_sum_only_in_its_groups_rounds():
    """Premise of the whole-run audit, without noise: absent, the canary
    coordinate is 0 in every round; present, the canary client (clipped to
    C = 1, divided by the expected cohort m = 2) shows in exactly its
    group's k rounds; the broken copy that lets it join every round shows in
    all T."""
    from paretofl.fl import audit as A

    s = M.audit_setting("bandmf")
    p = {**s.params, "sigma": 0.0}
    zero = M.AuditSetting("t", s.mechanism, s.canary, "", p)
    k, m, T = mf.participations(p["rounds"], p["bands"]), p["clients"] / p["bands"], p["rounds"]
    out = A._scores_run(zero, "out", 20, 1, "none")
    inn = A._scores_run(zero, "in", 20, 2, "none")
    assert np.all(out["rounds"] == 0) and np.all(out["norm"] == 0)
    assert np.allclose(inn["rounds"], k / m) and np.allclose(inn["norm"], k / m ** 2)
    every = A._scores_run(zero, "in", 20, 2, "every-round")
    assert np.allclose(every["norm"], T / m ** 2)


def test_the_exported_snippets_calls_run_in_jax_privacy(jp):
    """The snippet's JAX Privacy calls, with the plan's numbers: the
    privatizer is built, and over many rounds of zero sums its noise has
    std z C times the norms of the rows of C⁻¹ (JAX's own random numbers)."""
    import jax.numpy as jnp
    from jax_privacy import noise_addition

    toeplitz, _ = jp
    d = paretofl.design(400, 2.0, max_rounds=30, mechanism="bandmf", mechanism_options={"bands": 4}, sigma_min=0.01)
    p, code = paretofl.api.export(d, "jax-privacy")
    assert "privatizer.update(total, state)" in code
    noising = toeplitz.inverse_as_streaming_matrix(jnp.asarray(p.coefficients))
    privatizer = noise_addition.matrix_factorization_privatizer(noising, stddev=p.stddev, prng_key=0)
    state = privatizer.init(jnp.zeros(20000))
    rows = []
    for _ in range(6):
        noisy, state = privatizer.update(jnp.zeros(20000), state)
        rows.append(np.asarray(noisy))
    std = np.std(np.stack(rows), axis=1)
    assert np.allclose(std, p.stddev * mf.round_noise_factors(p.bands, 6), rtol=0.03)


def test_auto_says_which_families_it_could_not_compare_and_why():
    """With a fitted utility model the banded families cannot be designed:
    auto dropped them without a word; it now says so, with each reason."""
    from pathlib import Path

    store = Path(__file__).resolve().parent.parent / "pretrials" / "lr_fmnist.sqlite"
    d = paretofl.design(100, 2.0, max_rounds=200, mechanism="auto", from_store=str(store))
    assert set(d.details["not_compared"]) == {"bandmf", "bandmf-amplified"}
    assert any(n.startswith("not compared: bandmf (") and "closed form" in n for n in d.notes)
    assert "not_compared" not in paretofl.design(100, 2.0, max_rounds=200, mechanism="auto", kappa=1.0).details


def test_bandmf_amplified_tries_smaller_cohorts_before_it_refuses():
    """The banded search tried each band count at its largest cohort first and refused where none fitted there:
    a budget of 0.02 at N = 1000 was refused (the refusal itself named q = 0.006 reaching 0.0168) though a smaller
    cohort meets it.  Its design now spends within the budget, checked here with the plain accountant at one band
    (b = 1: Poisson sampling of the sum, z = σ√(qN), one charge a round)."""
    kw = dict(max_rounds=5, delta=1e-5, sigma_max=3.0, mechanism="bandmf-amplified")
    d = paretofl.design(1000, 0.02, **kw)
    assert d.epsilon <= 0.02 and d.q < 0.2
    if d.details["bands"] == 1:
        z = d.sigma * math.sqrt(d.q * 1000)
        assert compute_epsilon(d.q, z, d.rounds, 1e-5) == pytest.approx(d.epsilon, rel=1e-9)
    with pytest.raises(paretofl.InfeasibleBudget) as err:       # below every count's least: the least of them named
        paretofl.design(1000, 0.001, **kw)
    assert paretofl.design(1000, err.value.min_epsilon * 1.001, **kw).epsilon <= err.value.min_epsilon * 1.001


@pytest.mark.parametrize("mechanism", ["bandmf", "bandmf-amplified"])
def test_a_banded_plan_is_never_believed(mechanism):
    """attack 79: a BandMFPlan took any epsilon and any rounds or noise, and its snippet printed them (jax-privacy
    does not account): it re-derives its spend where it is made, the noise's std is z C, the coefficients and
    participations are its mechanism's at its bands; a plan from a design stands, at the design's epsilon."""
    import dataclasses

    from paretofl.integrations import jax_privacy as jp

    d = paretofl.design(10_000, 2.0, 1e-6, max_rounds=1000, q_max=0.01, mechanism=mechanism)
    p = jp.plan(d, 1.0)
    assert p.epsilon == d.epsilon and p.bands > 1
    for change, says in (({"epsilon": d.epsilon * 0.9}, "where its parameters spend"),
                         ({"num_rounds": p.num_rounds * 10}, "participations"),
                         ({"stddev": p.stddev / 10}, "stddev"),
                         ({"noise_multiplier": p.noise_multiplier / 10, "stddev": p.stddev / 10},
                          "where its parameters spend"),
                         ({"coefficients": [1.0] + [0.0] * (p.bands - 1)}, "coefficients")):
        with pytest.raises(ValueError, match=says):
            dataclasses.replace(p, **change)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.num_rounds = 1
    # attack 80: a delta that protects no one, and rounds or clients that are not whole, as the Flower plan refuses
    for change, says in (({"delta": 0.5, "epsilon": 1e-9}, "not below 1/10,000"),
                         ({"num_rounds": p.num_rounds + 0.5}, "num_rounds must be an integer"),
                         ({"num_clients": float(p.num_clients)}, "num_clients must be an integer")):
        with pytest.raises(ValueError, match=says):
            dataclasses.replace(p, **change)
