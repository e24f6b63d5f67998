"""Limiting cases and optima of the ALI-DPFL and NbAFL bounds (docs/theory.md §6)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paretofl.theory import convergence as cv

ALI = dict(mu=0.5, eta=0.05, C=1.0, sigma=1.1, d=1000, B=32, gamma=0.3)
NB = dict(delta=1e-2, C=1.0, m=1000, N=50, constants=dict(rho=1.0, B=0.5, mu=5.0, l=0.5, beta=1.0, theta=10.0))


def test_ali_tau0_below_one_and_h_increasing_from_one():
    """Lemma 1: the vertex τ₀ < 1, so h grows for τ >= 1 and τ = 1 is best."""
    t0 = cv.ali_tau0(cv.ALIStep(**ALI), delta1=5.0)
    assert t0 < 1
    tau = np.arange(1, 60)
    h = cv.ali_h(tau, 1000, cv.ALIStep(**ALI), L=2.0, delta1=5.0)
    assert np.all(np.diff(h) > 0)


def test_ali_tau_star_minimises_G_by_scan():
    a, b, c = cv.ali_G_coefficients(cv.ALIStep(**ALI), L=2.0, delta1=5.0)
    tau = np.linspace(0.5, 200, 400_000)
    G = a * tau + b + c / tau
    ts = cv.ali_tau_star(cv.ALIStep(**ALI))
    assert ts == pytest.approx(tau[np.argmin(G)], rel=1e-3)
    assert ts == pytest.approx(math.sqrt(c / a))


@pytest.mark.parametrize("T", [10, 100, 1000])
def test_ali_eq9_equals_general_form_when_eta_is_one_over_mu_T(T):
    kw = {k: v for k, v in ALI.items() if k != "eta"}
    eq9 = cv.ali_tau_star_eq9(cv.ALIStep(**kw), T)
    general = cv.ali_tau_star(cv.ALIStep(eta=1 / (ALI["mu"] * T), **kw))
    assert eq9 == pytest.approx(general, rel=1e-12)
    # and differ for another η (the published form is a special case)
    assert cv.ali_tau_star(cv.ALIStep(eta=0.5, **kw)) != pytest.approx(eq9, rel=1e-3)


def test_ali_server_rules():
    kw = {k: v for k, v in ALI.items() if k != "eta"}
    step = cv.ALIStep(**kw)
    assert cv.ali_next_tau(R_s=100, R_c=50, s=step, tau_prev=3) == 1        # R_s >= R_c
    t = cv.ali_next_tau(R_s=10, R_c=500, s=step, tau_prev=2)
    assert t == max(1, round(cv.ali_tau_star_eq9(step, T=20)))             # T = min(R_s τ, R_c)
    # with η given, √(c/a) for it (the general minimiser), not Eq. (9)
    assert cv.ali_next_tau(10, 500, cv.ALIStep(eta=0.05, **kw), 2) == max(1, round(cv.ali_tau_star(cv.ALIStep(**ALI))))
    assert cv.ali_server_rounds(10, 500, 2) == 20 and cv.ali_server_rounds(10, 15, 2) == 15
    assert cv.ali_batch_hat(0.015, [600, 4000, 1200]) == pytest.approx(9.0)
    # μ estimate: for a quadratic F_i = μ_i/2‖w‖², the ratio is exactly μ_i
    assert cv.ali_estimate_mu([0.3 * 2, 0.7 * 4], [2, 4], [0.5, 0.5]) == pytest.approx(0.5)


def test_nbafl_theorem1_threshold_and_aggregate():
    L, N, eps = 3, 50, 60.0
    thr = L * math.sqrt(N)
    assert cv.nbafl_sigma_downlink(1.0, 1000, N, L, math.floor(thr), eps, 1e-2) == 0.0
    assert cv.nbafl_sigma_downlink(1.0, 1000, N, L, math.ceil(thr) + 5, eps, 1e-2) > 0.0
    T = 80
    c = cv.gaussian_c(1e-2)
    # above the threshold σ_A = cTΔs_D/ε with Δs_D = 2C/(mN) (Eq. 13)
    assert cv.nbafl_sigma_aggregate(1.0, 1000, N, L, T, eps, 1e-2) == pytest.approx(c * T * 2 / (1000 * N) / eps)
    # below it, only uplink noise reaches the model: σ_U/√N
    assert cv.nbafl_sigma_aggregate(1.0, 1000, N, L, 10, eps, 1e-2) == \
        pytest.approx(cv.nbafl_sigma_uplink(1.0, 1000, L, eps, 1e-2) / math.sqrt(N))


@pytest.mark.parametrize("T", [5, 30, 200])
def test_nbafl_k_equals_n_gives_theorem1(T):
    N, L, eps = 50, 3, 60.0
    assert cv.nbafl_b(N, N, T, eps) == pytest.approx(1.0, rel=1e-12)
    assert eps / cv.nbafl_gamma(N, N, L, eps) == pytest.approx(L * math.sqrt(N), rel=1e-12)
    assert cv.nbafl_sigma_downlink_k(1.0, 1000, N, N, L, T, eps, 1e-2) == \
        pytest.approx(cv.nbafl_sigma_downlink(1.0, 1000, N, L, T, eps, 1e-2), rel=1e-9, abs=1e-15)


@settings(max_examples=50, deadline=None)
@given(eps=st.floats(5, 200), f=st.floats(1.01, 4), T=st.integers(1, 400), K=st.integers(5, 50))
def test_nbafl_larger_eps_never_raises_a_bound(eps, f, T, K):
    b2 = cv.nbafl_theorem2_bound(T, eps, **NB)
    assert cv.nbafl_theorem2_bound(T, eps * f, **NB) <= b2 * (1 + 1e-12)
    try:
        b3 = cv.nbafl_theorem3_bound(T, K, eps, **NB)
    except ValueError:
        return  # undefined there (scheduling argument <= 0)
    assert cv.nbafl_theorem3_bound(T, K, eps * f, **NB) <= b3 * (1 + 1e-12)
    assert cv.nbafl_sigma_downlink_k(1.0, 1000, 50, K, 2, T, eps * f, 1e-2) <= \
        cv.nbafl_sigma_downlink_k(1.0, 1000, 50, K, 2, T, eps, 1e-2) + 1e-15


@pytest.mark.parametrize("eps", [20.0, 60.0, 100.0])
def test_nbafl_optimal_rounds_against_scan(eps):
    t = cv.nbafl_optimal_rounds(eps, **NB)
    T = np.arange(1, 20_000)
    h = cv.nbafl_theorem2_bound(T, eps, **NB)
    assert cv.nbafl_theorem2_bound(t, eps, **NB) <= h.min() * (1 + 1e-12)
    assert 1 < t < 20_000  # Remark 4: an interior optimum


def test_nbafl_optimal_rounds_grows_with_eps():
    ts = [cv.nbafl_optimal_rounds(e, **NB) for e in (20.0, 60.0, 100.0)]
    assert ts == sorted(ts)


def test_nbafl_optimal_k_is_interior_and_best():
    K, v = cv.nbafl_optimal_k(60, 60.0, **NB)
    for k in range(1, NB["N"] + 1):
        try:
            assert v <= cv.nbafl_theorem3_bound(60, k, 60.0, **NB) * (1 + 1e-12)
        except ValueError:
            pass
    assert 1 < K < NB["N"]  # Remark 5


def test_nbafl_bounds_reject_invalid_settings():
    with pytest.raises(ValueError, match="P"):
        cv.nbafl_theorem2_bound(10, 50.0, **dict(NB, constants=dict(NB["constants"], mu=0.1)))
    with pytest.raises(ValueError, match="1..N"):
        cv.nbafl_b(50, 51, 1, 100.0)
    # past the point where the scheduling argument reaches 0 the noise terms vanish
    assert cv.nbafl_b(50, 2, 1, 100.0) == math.inf
    assert cv.nbafl_sigma_downlink_k(1.0, 1000, 50, 2, 3, 1, 100.0, 1e-2) == 0.0


def test_nbafl_design_answers_are_the_bounds_minima_and_its_guarantees_re_account(capsys):
    """design --mechanism nbafl: T* is the integer minimum of Theorem 2's
    bound (a scan of every T here), K* the minimum of Theorem 3's at T* (a
    scan of every K), and each calibration's guarantee over T* uploads —
    T* Gaussians of noise multiplier σ_U/(2C) — re-accounted by
    dp-accounting: paretofl's ε is never below the tight (PLD) one, and its
    own calibration stays within the budget; the paper's is far above."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant as pld

    from paretofl.cli import main

    N, eps, delta, C, m = 50, 60.0, 1e-2, 15.0, 512
    r = cv.nbafl_design(N, eps, delta, C, m, max_rounds=2000)
    k = cv.NBAFL_CONSTANTS
    ts = np.arange(1, 2001)
    h = cv.nbafl_theorem2_bound(ts, eps, delta, C, m, N, k)
    assert r["rounds"] == int(ts[np.argmin(h)])
    scan = {}
    for K in range(1, N + 1):
        try:
            scan[K] = cv.nbafl_theorem3_bound(r["rounds"], K, eps, delta, C, m, N, k)
        except ValueError:
            pass
    assert r["clients_per_round"] == min(scan, key=scan.get) and 1 < r["clients_per_round"] < N

    def tight(z):
        acc = pld.PLDAccountant(value_discretization_interval=1e-3)
        acc.compose(dp_accounting.GaussianDpEvent(z), r["rounds"])
        return acc.get_epsilon(delta)

    ours = r["sigma_uplink_clipping"] / (2 * C)
    assert tight(ours) <= r["epsilon_guaranteed_clipping"] * (1 + 1e-6) <= eps * (1 + 1e-6)
    # the paper's noise is far too small for a PLD grid: the Gaussian's RDP T·α/(2z²) with the classic
    # conversion (Mironov 2017), minimised over α by hand, bounds it from above
    z = r["sigma_uplink_paper"] / (2 * C)
    alphas = np.linspace(1.0001, 10, 200001)
    classic = float(np.min(r["rounds"] * alphas / (2 * z * z) + np.log(1 / delta) / (alphas - 1)))
    assert 0.9 * classic <= r["epsilon_guaranteed_paper"] <= classic and r["epsilon_guaranteed_paper"] > 100 * eps
    assert main(["design", "--mechanism", "nbafl", "--clients", "50", "--budget", "60", "--delta", "0.01",
                 "--clip", "15", "--client-size", "512", "--max-rounds", "2000"]) == 0
    out = capsys.readouterr().out
    assert f"rounds T*           {r['rounds']}" in out and "stated defaults" in out
    assert main(["design", "--mechanism", "nbafl", "--clients", "50", "--budget", "60", "--delta", "0.01"]) == 2
    assert "needs --clip" in capsys.readouterr().err


@pytest.mark.parametrize("eps", [20.0, 60.0, 100.0])
def test_the_golden_section_search_finds_scipys_minimiser(eps):
    """NbAFL's T search (no scipy at design time) against scipy's bounded
    Brent on the same log-T objective."""
    from scipy import optimize

    def h(logt):
        return float(cv.nbafl_theorem2_bound(math.exp(logt), eps, **NB))

    mine = cv._golden_min(h, 0.0, math.log(100_000), 1e-10)
    ref = optimize.minimize_scalar(h, bounds=(0.0, math.log(100_000)), method="bounded", options={"xatol": 1e-10}).x
    assert math.exp(mine) == pytest.approx(math.exp(ref), rel=1e-6)
    assert h(mine) <= h(ref) * (1 + 1e-12)
