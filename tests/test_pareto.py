"""Theorem 2/3 Pareto sets against brute force (dense grid + pymoo's
non-dominated sorting) and against NSGA-II, plus Lemma 2 as a property."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from paretofl.theory import pareto


def objectives(sigma, T, kp):
    """Independent restatement of the normalised objectives (docs/theory.md §3)."""
    return np.column_stack([1.0 / T + sigma**2 / kp, np.sqrt(T) / sigma])


def random_instance(rng, case):
    N = int(rng.integers(5, 2000))
    q = float(rng.uniform(0.01, 1.0))
    kappa = float(10 ** rng.uniform(-2, 2))
    smin = float(10 ** rng.uniform(-1, 0.3))
    smax = smin * float(10 ** rng.uniform(0.2, 1.2))
    kp = q * N / kappa
    Ta, Tb = kp / smax**2, kp / smin**2
    lo = max(Ta, 1.0)
    if case == "I":
        Tt = Tb * float(rng.uniform(1.05, 3.0))
    elif case == "II":
        if Tb <= lo:
            return None
        Tt = float(np.exp(rng.uniform(np.log(lo), np.log(Tb))))
    else:
        Tt = Ta * float(rng.uniform(0.2, 0.95))
    Tt = max(Tt, 1.5)
    return dict(q=q, n_clients=N, kappa=kappa, sigma_min=smin, sigma_max=smax, max_rounds=Tt)


def instances(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        want = ("I", "II", "III")[len(out) % 3]
        inst = random_instance(rng, want)
        if inst is None or pareto.theorem3(pareto.Box(**inst)).case != want:
            continue
        kp = inst["q"] * inst["n_clients"] / inst["kappa"]
        if kp / inst["sigma_min"] ** 2 > 1e5:  # keep the brute-force grid finite
            continue
        out.append(inst)
    return out


def u_star(k, inst):
    """Independent statement of the front: the least utility bound at privacy
    level k, by minimising the convex u along the ray √T/σ = k inside the box."""
    kp = inst["q"] * inst["n_clients"] / inst["kappa"]
    sig_r = (kp / k**2) ** 0.25
    lo = np.maximum(inst["sigma_min"], 1.0 / k)
    hi = np.minimum(inst["sigma_max"], np.sqrt(inst["max_rounds"]) / k)
    sig = np.clip(sig_r, lo, hi)
    return objectives(sig, (k * sig) ** 2, kp)[:, 0]


def gap_to_front(F, inst):
    """Relative excess utility of points F over the front at the same privacy
    level (negative: the point beats the front)."""
    us = u_star(F[:, 1], inst)
    return (F[:, 0] - us) / us


@pytest.mark.parametrize("inst", instances(240, seed=1))
def test_continuous_front_matches_brute_force(inst):
    """No point of a dense (σ, T) grid beats the closed-form front, the
    grid's non-dominated points lie on it, and the pieces span the whole
    privacy range of the box."""
    ps = pareto.theorem3(pareto.Box(**inst))
    assert ps.case in ("I", "II", "III")
    s = np.geomspace(inst["sigma_min"], inst["sigma_max"], 300)
    T = np.geomspace(1.0, inst["max_rounds"], 300)
    S, TT = (m.ravel() for m in np.meshgrid(s, T))
    F = objectives(S, TT, ps.kappa_prime)
    gap = gap_to_front(F, inst)
    assert gap.min() > -1e-9  # nothing in the box is better than the front
    nd = NonDominatedSorting().do(F, only_non_dominated_front=True)
    step = max(np.log(s[1] / s[0]), np.log(T[1] / T[0]))
    assert gap[nd].max() < 2 * step  # the grid's front sits on the closed form, to grid resolution
    # every piece lies on the front, and together they span the privacy range
    pts = np.vstack([p.points for p in ps.pieces])
    Fp = objectives(pts[:, 0], pts[:, 1], ps.kappa_prime)
    assert np.max(np.abs(gap_to_front(Fp, inst))) < 1e-9
    pmin = 1.0 / inst["sigma_max"]
    pmax = math.sqrt(inst["max_rounds"]) / inst["sigma_min"]
    assert math.isclose(Fp[:, 1].min(), pmin, rel_tol=1e-9)
    assert math.isclose(Fp[:, 1].max(), pmax, rel_tol=1e-9)
    # walking the pieces in order, privacy rises and the utility bound falls
    assert np.all(np.diff(Fp[:, 1]) >= -1e-12 * Fp[:-1, 1])
    assert np.all(np.diff(Fp[:, 0]) <= 1e-12 * Fp[:-1, 0])


def test_cases_and_pieces_as_stated():
    """The pieces each case is made of (docs/theory.md §3)."""
    base = dict(q=0.1, n_clients=100, kappa=0.5, sigma_min=0.5, sigma_max=3.0)  # T_a=2.22, T_b=80
    kinds = lambda s: [p.kind for p in s.pieces]
    s1 = pareto.theorem3(pareto.Box(**base, max_rounds=500))
    assert s1.case == "I" and kinds(s1) == ["sigma_max", "relation", "sigma_min"]
    s2 = pareto.theorem3(pareto.Box(**base, max_rounds=50))
    assert s2.case == "II" and kinds(s2) == ["sigma_max", "relation", "rounds_max"]
    rm = s2.pieces[-1].points
    assert np.allclose(rm[:, 1], 50) and math.isclose(rm[0, 0], math.sqrt(s2.kappa_prime / 50))
    assert math.isclose(rm[-1, 0], 0.5)
    s3 = pareto.theorem3(pareto.Box(**base, max_rounds=2))
    assert s3.case == "III" and kinds(s3) == ["sigma_max", "rounds_max"]
    assert math.isclose(s3.pieces[-1].points[0, 0], 3.0)
    # curve reaches T_min inside the box: the front starts on T = T_min
    s4 = pareto.theorem3(pareto.Box(q=0.1, n_clients=10, kappa=2.0, sigma_min=0.1, sigma_max=3.0, max_rounds=100))
    assert s4.T_a < 1 and kinds(s4)[0] == "rounds_min"
    assert math.isclose(s4.pieces[0].points[-1, 0], math.sqrt(s4.kappa_prime))
    assert "sigma_max" in s4.empty


@pytest.mark.parametrize("inst", instances(60, seed=2))
def test_integer_front_matches_brute_force(inst):
    """Integer T: the σ-intervals are exactly the points no other integer T'
    dominates.  Brute force over every T' (no assumption that the neighbours
    T±1 bind); for each T' the only candidate that can dominate is the least
    σ' reaching the same privacy, max(σ_min, σ√(T'/T)), since the utility
    bound grows with σ'."""
    inst = dict(inst, max_rounds=min(inst["max_rounds"], 200.0))
    T, lo, hi = pareto.integer_pareto_intervals(pareto.Box(**inst))
    kp = inst["q"] * inst["n_clients"] / inst["kappa"]
    smin, smax = inst["sigma_min"], inst["sigma_max"]
    Ts = np.arange(1, int(inst["max_rounds"]) + 1, dtype=float)
    s = np.geomspace(smin, smax, 200)
    Tc, Sc, Tp = Ts[:, None, None], s[None, :, None], Ts[None, None, :]
    Sp = np.maximum(smin, Sc * np.sqrt(Tp / Tc))
    valid = (Sp <= smax * (1 + 1e-12)) & (Tp != Tc)
    u, p = 1 / Tc + Sc**2 / kp, np.sqrt(Tc) / Sc
    up, pp = 1 / Tp + Sp**2 / kp, np.sqrt(Tp) / Sp
    dom = valid & (pp <= p * (1 + 1e-12)) & ((up < u * (1 - 1e-12)) | ((up <= u) & (pp < p * (1 - 1e-12))))
    nd = ~dom.any(axis=2)  # (n_T, n_sigma)
    lo_of, hi_of = dict(zip(T.tolist(), lo)), dict(zip(T.tolist(), hi))
    for i, t in enumerate(Ts.astype(int)):
        if t not in lo_of:
            assert not nd[i].any(), t
            continue
        near_end = (np.abs(s / lo_of[t] - 1) < 1e-9) | (np.abs(s / hi_of[t] - 1) < 1e-9)
        inside = (s >= lo_of[t]) & (s <= hi_of[t])
        assert np.array_equal(inside[~near_end], nd[i][~near_end]), (t, lo_of[t], hi_of[t])


def test_integer_pieces_are_labelled_and_report_empty():
    s = pareto.theorem3(pareto.Box(q=0.1, n_clients=100, kappa=0.5, sigma_min=0.5, sigma_max=3.0, max_rounds=50),
                        integer=True)
    assert [p.kind for p in s.pieces] == ["sigma_max", "relation", "rounds_max"]
    assert set(s.empty) == {"rounds_min", "sigma_min"}
    assert np.all(s.pieces[-1].points[:, 1] == 50)
    # on the relation, the integer interval brackets the continuous point
    rel = s.pieces[1].points.reshape(-1, 2, 2)
    for (hi, T), (lo, _) in rel:
        assert lo <= math.sqrt(s.kappa_prime / T) <= hi


def _nsga_front(inst, seed):
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.problem import Problem
    from pymoo.optimize import minimize

    kp = inst["q"] * inst["n_clients"] / inst["kappa"]

    class P(Problem):
        def __init__(self):
            super().__init__(n_var=2, n_obj=2, xl=np.array([np.log(inst["sigma_min"]), 0.0]),
                             xu=np.array([np.log(inst["sigma_max"]), np.log(inst["max_rounds"])]))

        def _evaluate(self, x, out, *args, **kwargs):
            out["F"] = objectives(np.exp(x[:, 0]), np.exp(x[:, 1]), kp)

    res = minimize(P(), NSGA2(pop_size=80), ("n_gen", 200), seed=seed, verbose=False)
    return np.exp(res.X)


@pytest.mark.parametrize("inst", instances(9, seed=3))
def test_nsga2_agrees(inst):
    """NSGA-II's final non-dominated set lies on the closed-form pieces."""
    X = _nsga_front(inst, seed=7)
    kp = inst["q"] * inst["n_clients"] / inst["kappa"]
    gap = gap_to_front(objectives(X[:, 0], X[:, 1], kp), inst)
    assert gap.min() > -1e-9  # NSGA-II finds nothing better than the closed form
    assert np.median(gap) < 1e-2 and np.quantile(gap, 0.9) < 5e-2


@pytest.mark.slow
@pytest.mark.parametrize("inst", instances(150, seed=4))
def test_nsga2_agrees_many(inst):
    X = _nsga_front(inst, seed=11)
    kp = inst["q"] * inst["n_clients"] / inst["kappa"]
    gap = gap_to_front(objectives(X[:, 0], X[:, 1], kp), inst)
    assert gap.min() > -1e-9
    assert np.quantile(gap, 0.9) < 5e-2


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.01, 100), b=st.floats(-10, 10), c=st.floats(0.01, 100), d=st.floats(-10, 10),
       seed=st.integers(0, 10_000))
def test_lemma2_affine_invariance(a, b, c, d, seed):
    """Lemma 2: a·f + b (a > 0) on either objective leaves the Pareto set unchanged."""
    rng = np.random.default_rng(seed)
    inst = None
    while inst is None:
        inst = random_instance(rng, ("I", "II", "III")[seed % 3])
    kp = inst["q"] * inst["n_clients"] / inst["kappa"]
    s = np.geomspace(inst["sigma_min"], inst["sigma_max"], 40)
    T = np.geomspace(1.0, inst["max_rounds"], 40)
    S, TT = (m.ravel() for m in np.meshgrid(s, T))
    F = objectives(S, TT, kp)
    G = np.column_stack([a * F[:, 0] + b, c * F[:, 1] + d])
    nds = NonDominatedSorting()
    f1 = set(nds.do(F, only_non_dominated_front=True).tolist())
    f2 = set(nds.do(G, only_non_dominated_front=True).tolist())
    # affine maps can merge nearly tied values in floating point; allow that only
    assert len(f1 ^ f2) <= max(1, len(f1) // 50)


def test_utility_bound_and_theorem2_front():
    # along the relation the two terms of the bound are equal (AM–GM)
    q, N, kappa, delta = 0.2, 50, 0.3, 1e-5
    T = np.array([3.0, 10.0, 40.0])
    sig = pareto.relation_sigma(T, q, N, kappa)
    assert np.allclose(kappa * sig**2 * T, q * N)
    u = pareto.utility_bound(sig, T, q, N, kappa, A=2.0, D=0.1)
    eu, ep = pareto.theorem2_front(T, N, kappa, delta, A=2.0, D=0.1)
    assert np.allclose(u, eu)
    from paretofl.theory.privacy import asymptotic_epsilon
    assert np.allclose(asymptotic_epsilon(sig, T, q, N, delta), ep)
    # for fixed privacy level, the relation point minimises the bound
    k = ep[1]
    sig_ray = np.geomspace(0.01, 100, 20001)
    T_ray = (k * sig_ray) ** 2 * N / (q * math.log(1 / delta))
    ub = pareto.utility_bound(sig_ray, T_ray, q, N, kappa)
    j = np.argmin(ub)
    assert math.isclose(T_ray[j], T[1], rel_tol=2e-3)
    assert pareto.rounds_for_time(100.0, 3.0) == 33
    with pytest.raises(ValueError):
        pareto.rounds_for_time(1.0, 3.0)


@pytest.mark.parametrize("bad", [dict(q=0.0), dict(q=1.5), dict(sigma_min=-1.0),
                                 dict(sigma_min=5.0), dict(max_rounds=0.5), dict(kappa=float("nan"))])
def test_bad_boxes_raise(bad):
    args = dict(q=0.1, n_clients=100, kappa=0.5, sigma_min=0.5, sigma_max=3.0, max_rounds=50)
    args.update(bad)
    with pytest.raises(ValueError):
        pareto.theorem3(pareto.Box(**args))
