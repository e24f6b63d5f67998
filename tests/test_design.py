"""`design` against an independent scan: never over budget, never beaten."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

import paretofl
from paretofl import recommendation as D
from paretofl.theory import privacy as P


def _design(**kw):
    """The design layer's own entry point, with a Request of these fields."""
    return D.design(D.Request(**kw))


def scan(n, eps, delta, t_cap, qs, smin, smax, kappa, mechanism, n_sigma=600):
    """Brute force: every integer T × a dense σ grid × each q; ε of every
    point from the RDP curve composed T times (aggregate view: Poisson at
    σ√(qN); local view: the attributed curve at σ, its closed form written
    out here); the least utility bound among the points within budget."""
    orders = np.array(P.DEFAULT_ORDERS)
    c = np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    best = (math.inf, None)
    sig = np.geomspace(smin, smax, n_sigma)
    T = np.arange(1, t_cap + 1)
    for q in qs:
        if mechanism == "client-aggregate":
            R = P.rdp_subsampled_gaussian(q, sig * math.sqrt(q * n))     # (n_sigma, n_orders)
        else:
            y = orders * (orders - 1) / (2 * sig[:, None] ** 2)
            R = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + y) / (orders - 1)
        E = np.min(T[:, None, None] * R[None] + c[None, None], axis=2)  # (n_T, n_sigma)
        U = 1 / T[:, None] + kappa * sig[None, :] ** 2 / (q * n)
        U = np.where(E <= eps, U, np.inf)
        k = np.unravel_index(np.argmin(U), U.shape)
        if U[k] < best[0]:
            best = (U[k], (q, int(T[k[0]]), sig[k[1]]))
    return best


def opacus_epsilon(q, z, steps, delta):
    orders = list(P.DEFAULT_ORDERS)
    return get_privacy_spent(orders=orders, rdp=compute_rdp(q=q, noise_multiplier=z, steps=steps,
                                                             orders=orders), delta=delta)[0]


def independent_epsilon(mechanism, q, sigma, n, steps, delta):
    """The design's ε by an accountant that is not paretofl's: Opacus's RDP
    for the aggregate view; for the local view the binomial mixture's RDP
    written out here, E[e^{(α-1)·K·α/(2σ²)}] over K ~ Bin(T, q), on
    integer orders."""
    if mechanism == "client-aggregate":
        return opacus_epsilon(q, sigma * math.sqrt(q * n), steps, delta)
    a = np.arange(2, 257, dtype=float)
    y = a * (a - 1) / (2 * sigma**2)
    rdp = steps * np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + y) / (a - 1)
    return float(np.min(rdp + np.log((a - 1) / a) - (math.log(delta) + np.log(a)) / (a - 1)))


def random_budgets(n_cases, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_cases):
        n = int(rng.choice([10, 20, 50, 100, 400]))
        mech = "client-aggregate" if i % 3 else "client-local"
        fixed_q = i % 2 == 0
        q = float(rng.integers(1, n + 1) / n) if fixed_q else None
        out.append(dict(
            n_clients=n, epsilon=float(10 ** rng.uniform(-0.5, 1)), delta=float(10 ** rng.uniform(-7, -4)),
            max_rounds=int(rng.integers(5, 150)), q=q, q_min=None if fixed_q else 1.0 / n,
            q_max=None if fixed_q else float(min(1.0, rng.integers(1, 6) / n * 2)),
            sigma_min=float(10 ** rng.uniform(-0.5, 0.2)), sigma_max=float(10 ** rng.uniform(0.5, 1.5)),
            kappa=float(10 ** rng.uniform(-2.5, 0)), mechanism=mech))
    return out


@pytest.mark.parametrize("kw", random_budgets(18, seed=5))
def test_design_within_budget_and_optimal_against_scan(kw):
    try:
        d = _design(**kw)
    except D.InfeasibleBudget as exc:
        # then no scanned point may meet the budget either
        qs = D._q_candidates(kw["n_clients"], kw["q"], kw["q_min"], kw["q_max"] or 1.0)
        u, _ = scan(kw["n_clients"], kw["epsilon"], kw["delta"], kw["max_rounds"], qs, kw["sigma_min"],
                    kw["sigma_max"], kw["kappa"], kw["mechanism"], n_sigma=50)
        assert u == math.inf and exc.min_epsilon > kw["epsilon"]
        return
    n = kw["n_clients"]
    # never over budget, by our accountant; and an independent one on a grid of orders agrees
    z = d.sigma * (math.sqrt(d.q * n) if kw["mechanism"] == "client-aggregate" else 1.0)
    assert d.epsilon <= kw["epsilon"]
    other = independent_epsilon(kw["mechanism"], d.q, d.sigma, n, d.rounds, kw["delta"])
    assert d.epsilon <= other * (1 + 1e-9) and other <= kw["epsilon"] * 1.02
    # the reported bound is that of the reported point
    assert d.utility_bound == pytest.approx(1 / d.rounds + kw["kappa"] * d.sigma**2 / (d.q * n), rel=1e-12)
    assert kw["sigma_min"] <= d.sigma <= kw["sigma_max"] and 1 <= d.rounds <= kw["max_rounds"]
    # no scanned allowed point is better
    qs = D._q_candidates(n, kw["q"], kw["q_min"], kw["q_max"] or 1.0)
    assert d.q in qs
    u, where = scan(n, kw["epsilon"], kw["delta"], kw["max_rounds"], qs, kw["sigma_min"], kw["sigma_max"],
                    kw["kappa"], kw["mechanism"])
    assert d.utility_bound <= u * (1 + 1e-4)  # the search stops at a relative 1e-4
    # and the design's σ is tight: a hair less noise breaks the budget on the
    # order grid its search runs on (unless σ_min binds)
    if d.sigma > kw["sigma_min"] * (1 + 1e-6):
        rdp = d.rounds * P.rdp_curve(d.sampling, d.q, z * (1 - 1e-6), P.DEFAULT_ORDERS)
        assert P.rdp_to_epsilon(P.DEFAULT_ORDERS, rdp, kw["delta"])[0] > kw["epsilon"] or \
            d.rounds == kw["max_rounds"]


def test_infeasible_budget_reports_smallest_reachable_epsilon():
    kw = dict(n_clients=50, delta=1e-5, max_rounds=100, q=0.2, sigma_min=0.5, sigma_max=2.0, kappa=0.1)
    # the least ε of one round at σ_max on the grid of orders the search counts its rounds on (min over α of
    # RDP(α) + log((α−1)/α) − (log δ + log α)/(α − 1)): a budget of it designs a round, where the ε searched
    # between the orders (lower) did not (the refusal named a way out that did not work)
    z = 2.0 * math.sqrt(0.2 * 50)
    a = np.array(P.DEFAULT_ORDERS)
    eps_min = float(np.min(P.rdp_subsampled_gaussian(0.2, z, a) + np.log((a - 1) / a)
                           - (math.log(1e-5) + np.log(a)) / (a - 1)))
    assert eps_min >= P.compute_epsilon(0.2, z, 1, 1e-5)
    with pytest.raises(D.InfeasibleBudget) as info:
        _design(epsilon=eps_min * 0.99, **kw)
    assert info.value.min_epsilon == pytest.approx(eps_min, rel=1e-9)
    d = _design(epsilon=eps_min * (1 + 1e-9), **kw)
    assert d.rounds == 1 and d.sigma == pytest.approx(2.0, rel=1e-2) and d.epsilon <= eps_min * (1 + 1e-9)


def test_relation_and_case_reported():
    d = _design(n_clients=100, epsilon=2.0, max_rounds=500, q=0.1, kappa=0.05)
    assert d.case in ("I", "II", "III")
    assert d.sigma_relation == pytest.approx(math.sqrt(0.1 * 100 / (0.05 * d.rounds)))
    assert set(d.distance) >= {"sigma_rel", "rounds_rel", "utility_rel"}
    # the closed-form point is within budget too, and the exact search is no worse
    assert d.closed_form["epsilon"] <= 2.0
    assert d.utility_bound <= d.closed_form["utility_bound"] * (1 + 1e-9)


def test_time_budget_equals_max_rounds():
    a = _design(n_clients=100, epsilon=2.0, time_budget=600.0, round_time=3.0, q=0.1, kappa=0.05)
    b = _design(n_clients=100, epsilon=2.0, max_rounds=200, q=0.1, kappa=0.05)
    assert (a.rounds, a.sigma) == (b.rounds, b.sigma) and a.max_rounds == 200


@pytest.mark.parametrize("rounds,time_budget", [(500, 10.0), (7, 100.0)])
def test_both_efficiency_budgets_bind(rounds, time_budget):
    """max_rounds beside time_budget/round_time: the tighter one is the cap
    (an earlier version ignored the time budget)."""
    d = _design(n_clients=100, epsilon=8.0, max_rounds=rounds, time_budget=time_budget, round_time=1.0,
                 q=1.0, kappa=18.8)
    assert d.max_rounds == min(rounds, int(time_budget)) and d.rounds <= d.max_rounds


def test_q_and_a_q_range_exclude_each_other():
    with pytest.raises(ValueError, match="either q"):
        _design(n_clients=100, epsilon=2.0, max_rounds=50, q=0.5, q_min=0.1)
    with pytest.raises(ValueError, match="either q"):
        _design(n_clients=100, epsilon=2.0, max_rounds=50, q=0.5, q_max=0.8)


def test_notes_say_what_binds():
    """σ on its floor, a budget not spent, a budget too small to learn: each
    said, with the parameter that moves it; δ not below 1/N is refused."""
    d = _design(n_clients=100, epsilon=8.0, max_rounds=10, q=1.0, kappa=18.8)
    text = " ".join(d.notes)
    assert "floor" in text and "sigma_min" in text and "not spent" in text and "max_rounds" in text
    for delta in (0.1, 0.2, 0.9):
        with pytest.raises(ValueError, match=r"delta = .* is not below 1/10 .* e.g. 1e-03"):
            _design(n_clients=10, epsilon=2.0, max_rounds=50, delta=delta, q=1.0, kappa=18.8)
    # below 1/N but above 0.01: everyone's data published with probability delta meets it (issue 44)
    for n, delta in ((10, 0.099), (1, 0.5), (2, 0.3), (50, 0.0101)):
        with pytest.raises(ValueError, match=rf"delta = {delta:g} is above 0.01: publishing every client's data"):
            _design(n_clients=n, epsilon=2.0, max_rounds=50, delta=delta, q=1.0, kappa=18.8)
    assert _design(n_clients=10, epsilon=2.0, max_rounds=50, delta=0.01, q=1.0, kappa=18.8).delta == 0.01
    d = _design(n_clients=10, epsilon=0.05, max_rounds=50, q=1.0, kappa=18.8, sigma_max=1000)
    assert any("too small to learn" in n for n in d.notes)
    d = _design(n_clients=100, epsilon=2.0, max_rounds=500, kappa=18.8)
    assert not any("floor" in n or "not spent" in n for n in d.notes)


def test_fit_file_and_placeholder(tmp_path):
    f = tmp_path / "fit.json"
    f.write_text('{"kappa": 0.2}')
    assert _design(n_clients=20, epsilon=3.0, max_rounds=50, q=0.5, fit=str(f)).kappa == 0.2
    d = _design(n_clients=20, epsilon=3.0, max_rounds=50, q=0.5, local_epochs=1)
    # the shipped LR pre-trial's fit (package data) is the default, its kappa at its own one local epoch; at the
    # local epochs the design chooses, kappa scaled by A(1)/A(K) (docs/theory.md 4.E)
    shipped = json.loads(D.shipped_fit().read_text())
    assert d.kappa == shipped["kappa"] and "shipped" in d.kappa_source
    chosen = _design(n_clients=20, epsilon=3.0, max_rounds=50, q=0.5)
    lw = shipped["local_work"]
    k = lw["epochs"].index(chosen.local_epochs)
    assert chosen.kappa == pytest.approx(shipped["kappa"] * lw["A"][0] / lw["A"][k], rel=1e-12)
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not a paretofl fit"):
        _design(n_clients=20, epsilon=3.0, max_rounds=50, q=0.5, fit=str(bad))
    with pytest.raises(ValueError, match="does not exist"):
        _design(n_clients=20, epsilon=3.0, max_rounds=50, q=0.5, fit=str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match="folder"):
        _design(n_clients=20, epsilon=3.0, max_rounds=50, q=0.5, fit=str(tmp_path))


@pytest.mark.parametrize("bad", [dict(n_clients=0), dict(epsilon=-1.0), dict(epsilon=float("nan")),
                                 dict(delta=1.0), dict(q=0.0), dict(q=1.1), dict(sigma_min=5.0, sigma_max=1.0),
                                 dict(max_rounds=0), dict(mechanism="aggregate"), dict(q=0.01),
                                 dict(max_rounds=None), dict(q=None, q_min=0.5, q_max=0.2),
                                 dict(n_clients=2.5), dict(epsilon=True), dict(time_budget=10.0)])
def test_bad_input_is_a_valueerror(bad):
    kw = dict(n_clients=20, epsilon=2.0, max_rounds=50, q=0.5, kappa=0.1)
    kw.update(bad)
    with pytest.raises(ValueError):
        _design(**kw)


def test_what_a_user_sees_of_a_design_reads_plainly():
    """repr without numpy wrappers, a cohort of 100 as 100, notes without
    1e+03, a signature without the order grid; a Fit's repr without its front."""
    import inspect

    d = paretofl.design(n_clients=100, epsilon=2, max_rounds=500)
    assert "np." not in repr(d) and d.clients_per_round == 100 and isinstance(d.clients_per_round, int)
    big = paretofl.design(n_clients=10_000, epsilon=2, max_rounds=500, q_max=0.1)
    assert any("1,000 clients a round" in n for n in big.notes) and not any("e+0" in n for n in big.notes)
    assert len(str(inspect.signature(paretofl.design))) < 700      # the order grid alone would pass 1,000
    f = paretofl.fit(Path(__file__).resolve().parent.parent / "pretrials" / "lr_fmnist.sqlite", bootstrap=20)
    assert "front=[" not in repr(f) and len(repr(f)) < 2000


def test_the_remembered_most_rounds_answer_each_question_as_asked_afresh():
    """The design remembers the most rounds at each (q, σ grid) across its
    searches (one per candidate local epochs); each answer must be the one
    computed afresh for exactly that question: another prior spend, another
    rate or another conversion to rounds is another question, and a prior
    given as numpy numbers is the same question as one given as floats."""
    s = np.geomspace(0.8, 8.0, 15)
    orders = P.DEFAULT_ORDERS

    def fresh(acct):
        return acct.rounds_for(P.max_steps(2.0, acct.rate, s * acct.zf, 1e-5, orders, sampling=acct.sampling,
                                           prior=acct.prior))

    plain = D._Acct("poisson", 1.0, 0.5, lambda k: k)
    spent = D._Acct("poisson", 1.0, 0.5, lambda k: k, prior=(P.Charge("poisson", 0.5, 8.0, 5),))
    as_numpy = D._Acct("poisson", 1.0, 0.5, lambda k: k,
                       prior=(P.Charge("poisson", np.float64(0.5), np.array(8.0), np.int64(5)),))
    other_rate = D._Acct("poisson", 1.0, 0.25, lambda k: k)
    every_other = D._Acct("poisson", 1.0, 0.5, lambda k: 2 * np.asarray(k))
    D._MOST_STEPS.clear()
    for acct in (plain, spent, as_numpy, other_rate, every_other, plain, spent):    # asked twice: remembered
        got = D._tmax(2.0, acct.rate, s, 1e-5, orders, acct)
        np.testing.assert_array_equal(got, fresh(acct))
    before, after = D._tmax(2.0, 0.5, s, 1e-5, orders, plain), D._tmax(2.0, 0.5, s, 1e-5, orders, spent)
    assert np.all(after <= before) and 0 < after[-1] < before[-1], (before, after)
    # a scalar σ is answered as a number, as max_steps answers it
    one = D._tmax(2.0, 0.5, 1.0, 1e-5, orders, plain)
    assert isinstance(one, int) and one == P.max_steps(2.0, 0.5, 1.0, 1e-5, orders)
    # what is handed out is a copy: changing it changes no later answer
    got = D._tmax(2.0, 0.5, s, 1e-5, orders, plain)
    got[:] = 0
    np.testing.assert_array_equal(D._tmax(2.0, 0.5, s, 1e-5, orders, plain), fresh(plain))


def test_a_spend_before_the_training_given_in_numpy_numbers_is_the_same_spend():
    """A private pre-trial's charges as numpy 0-d arrays or scalars design exactly as the same charges in
    Python numbers (they are the same spend; hashing them had raised a TypeError); several ledgers' charges
    (arrays) are no one training's spend, refused in one line."""
    from paretofl.pretrial.private import Spend

    def spend(*charges):
        return Spend(tuple(charges), float("nan"), 1e-5, 100, "test", True)

    req = D.Request(n_clients=100, epsilon=2.0, max_rounds=200, local_epochs=1)
    plain = D.design(req, pretrial=spend(P.Charge("poisson", 0.1, 4.0, 30)))
    for numpy in (P.Charge("poisson", np.array(0.1), np.array(4.0), np.array(30)),
                  P.Charge("poisson", np.float64(0.1), np.float32(4.0), np.int64(30))):
        got = D.design(req, pretrial=spend(numpy))
        assert (got.q, got.rounds, got.sigma, got.epsilon) == (plain.q, plain.rounds, plain.sigma, plain.epsilon)
    assert plain.rounds < D.design(req).rounds           # the spend is charged
    with pytest.raises(ValueError, match="one ledger"):
        D.design(req, pretrial=spend(P.Charge("poisson", 0.1, np.array([4.0, 5.0]), 30)))


def test_a_budget_below_the_orders_conversion_floor_says_so():
    """Below the least cost of converting RDP to (ε, δ) on the accountant's orders (log((α−1)/α) − (log δ +
    log α)/(α − 1), its least over the orders), the search fits no round at any σ: the refusal names that
    floor, not a "smallest ε reachable" below the budget (which said 0 and contradicted itself); just above
    it a design is made."""
    floor = min(math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1) for a in P.DEFAULT_ORDERS)
    with pytest.raises(ValueError, match=rf"below epsilon {floor:.4g} no round fits .*up to {max(P.DEFAULT_ORDERS):g}"):
        paretofl.design(100, floor * 0.6, max_rounds=5, sigma_min=1, sigma_max=1e6)
    d = paretofl.design(100, floor * 1.7, max_rounds=5, sigma_min=1, sigma_max=1e6)
    assert floor < d.epsilon <= floor * 1.7


def test_the_floor_holds_on_the_fixed_orders_of_flower_accounted_too():
    """flower-accounted reports ε on Flower's fixed orders too: below their conversion floor the refusal named
    a smallest ε reachable and advised raising sigma_max or lowering q, which cannot help."""
    mech = paretofl.mechanisms.get("flower-accounted")
    floor = min(math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1) for a in mech.orders)
    with pytest.raises(ValueError, match=rf"below epsilon {floor:.4g} no round fits"):
        paretofl.design(1000, floor * 0.3, max_rounds=100, framework="flower-accounted", sigma_max=1e6)


def test_a_refusal_names_another_q_only_where_one_is_measured_to_help():
    """ε is not monotone in q: another cohort size is named only where a size the search skipped reaches less
    in one round (checked here on the grid of orders at z = σ_max·√(qN)); at one client a round nothing is
    named; where a skipped size meets the budget itself, it is designed, not refused (a false refusal of
    issue 47's attack: --q 0.072 designed a budget the searched range refused)."""
    with pytest.raises(paretofl.InfeasibleBudget, match=r"q=0\.01, .*raise epsilon or sigma_max$"):
        paretofl.design(100, 0.01, max_rounds=50, mechanism="client-local")
    with pytest.raises(paretofl.InfeasibleBudget, match=r"q=0\.2, .*or ask for q=0\.01 \(it reaches") as err:
        paretofl.design(100, 0.01, max_rounds=50, mechanism="client-local", q=0.2)
    assert err.value.where["other_q"][1] < err.value.min_epsilon
    with pytest.raises(paretofl.InfeasibleBudget, match=r"or ask for q=") as err:
        paretofl.design(20, 0.05, delta=1e-12, max_rounds=5, q=0.5, sigma_max=3.0)
    q_o, e_o = err.value.where["other_q"]
    a = np.array(P.DEFAULT_ORDERS)
    z = 3.0 * math.sqrt(q_o * 20)
    grid = np.min(P.rdp_subsampled_gaussian(q_o, z, a) + np.log((a - 1) / a) - (math.log(1e-12) + np.log(a)) / (a - 1))
    assert e_o == pytest.approx(grid, rel=1e-9) and e_o < err.value.min_epsilon
    # a budget only a skipped cohort size meets is designed there
    d = paretofl.design(1000, 0.0907, max_rounds=20, sigma_max=0.5, q_min=0.002, q_max=0.3)
    assert d.epsilon <= 0.0907
