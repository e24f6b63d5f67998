"""The distributed (Skellam + secure aggregation) mechanism's accounting,
each number re-derived independently: the Skellam RDP against the brute-force
Rényi divergence of shifted Skellam pmfs (scipy.stats.skellam), the rounding
bound against brute-force rounding of random vectors, the wrap bound against
simulation, the charged ε against the Skellam closed form composed by hand
and against dp-accounting's Gaussian (docs/theory.md §8)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import skellam

from paretofl import mechanisms as M
from paretofl.theory import privacy as P
from paretofl.theory import skellam as sk


def _renyi_1d(variance, shift, alpha):
    """D_α(Sk + shift || Sk), Sk = Poisson(μ/2) − Poisson(μ/2), by summing the pmfs."""
    lam = variance / 2
    width = int(80 + 40 * math.sqrt(variance) + 4 * abs(shift))
    k = np.arange(-width, width + 1)
    lp, lq = skellam.logpmf(k - shift, lam, lam), skellam.logpmf(k, lam, lam)
    ok = np.isfinite(lp) & np.isfinite(lq)
    return float(logsumexp(alpha * lp[ok] + (1 - alpha) * lq[ok]) / (alpha - 1))


@pytest.mark.parametrize("variance", [0.5, 2.0, 8.0, 50.0])
def test_skellam_rdp_bounds_the_brute_force_divergence(variance):
    """Theorem 3.5 of Agarwal et al. 2021 at every integer shift vector in 1-3
    coordinates with entries up to 3: the divergence of a product is the sum
    of the coordinates' divergences, computed from the pmfs."""
    for alpha in (1.5, 2, 3, 5, 10, 32):
        for d in (1, 2, 3):
            for v in itertools.product(range(0, 4 if d < 3 else 3), repeat=d):
                v = np.array(v)
                if not v.any():
                    continue
                exact = sum(_renyi_1d(variance, int(x), alpha) for x in v if x)
                bound = float(sk.skellam_rdp(alpha, float(np.abs(v).sum()), float(np.linalg.norm(v)), variance))
                assert exact <= bound * (1 + 1e-9), (variance, alpha, v, exact, bound)


def test_skellam_rdp_is_tight_for_large_variance():
    """At a large variance the bound and the exact divergence both approach the Gaussian's αΔ²/(2μ)."""
    exact = _renyi_1d(400.0, 3, 8)
    assert exact == pytest.approx(float(sk.skellam_rdp(8, 3, 3, 400.0)), rel=0.02)


@pytest.mark.parametrize("c,d", [(0.5, 16), (3.0, 64), (50.0, 1024), (2000.0, 8192)])
def test_effective_sensitivity_dominates_the_skellam_bound(c, d):
    """α·Δ²/(2μ), Δ = √(Δ₂² + 3Δ₁), is at least Theorem 3.5's bound at every order ≥ 1."""
    l2 = sk.rounded_l2_bound(c, d)
    l1 = sk.rounded_l1_bound(l2, d)
    delta = sk.effective_sensitivity(c, d)
    for mu in (0.1, 1.0, 100.0, 1e6):
        a = np.linspace(1.0, 200.0, 800)
        assert np.all(sk.skellam_rdp(a, l1, l2, mu) <= a * delta ** 2 / (2 * mu) * (1 + 1e-12))


@pytest.mark.parametrize("c,d,z", [(1.2, 4, 0.5), (1.2, 4, 2.0), (2.5, 2, 1.0), (0.6, 4, 4.0)])
def test_noise_at_delta_of_z_is_a_gaussian_of_z_by_brute_force(c, d, z):
    """Skellam of variance (zΔ(z))² per coordinate: the exact Rényi divergence
    of every integer shift of L2 norm at most Δ₂ (the rounding's bound) is at
    most the Gaussian's α/(2z²), at integer orders 2-24."""
    l2 = sk.rounded_l2_bound(c, d)
    mu = (z * sk.effective_sensitivity(c, d, z=z)) ** 2
    top = int(math.floor(l2))
    shifts = [v for v in itertools.product(range(0, top + 1), repeat=d)
              if any(v) and math.sqrt(sum(x * x for x in v)) <= l2 + 1e-12]
    assert shifts
    worst = {}
    for alpha in (2, 3, 5, 8, 16, 24):
        div = {x: _renyi_1d(mu, x, alpha) for x in range(1, top + 1)}
        worst[alpha] = max(sum(div[x] for x in v if x) for v in shifts)
        assert worst[alpha] <= alpha / (2 * z * z) * (1 + 1e-9), (alpha, worst[alpha], alpha / (2 * z * z))


@pytest.mark.parametrize("c,d", [(0.5, 16), (3.0, 64), (50.0, 1024), (2000.0, 8192)])
def test_delta_of_z_dominates_the_theorem_and_never_exceeds_the_linear_bound(c, d):
    """Theorem 3.5 at μ = (zΔ(z))² is at most α/(2z²) at every order in [1, 200];
    Δ(z) <= the z-free Δ, and is it where z is small."""
    l2 = sk.rounded_l2_bound(c, d)
    l1 = sk.rounded_l1_bound(l2, d)
    a = np.linspace(1.0, 200.0, 800)
    for z in (0.05, 0.3, 1.0, 5.0, 40.0):
        delta = sk.effective_sensitivity(c, d, z=z)
        assert delta <= sk.effective_sensitivity(c, d) * (1 + 1e-15)
        mu = (z * delta) ** 2
        assert np.all(sk.skellam_rdp(a, l1, l2, mu) <= a / (2 * z * z) * (1 + 1e-12))


def _randomised_round(x, rng):
    lo = np.floor(x)
    return lo + (rng.random(x.shape) < (x - lo))


@pytest.mark.parametrize("c,d", [(1.0, 64), (8.0, 256), (100.0, 1024)])
def test_rounding_bound_against_brute_force(c, d):
    """Random vectors of norm c (Gaussian directions, and a spread vector at
    the worst fractional parts) rounded 4000 times each: the unconditioned
    rounding exceeds Δ₂ at most a share β of the time (Kairouz et al. 2021),
    and every integer vector within Δ₂ has L1 norm within Δ₁."""
    rng = np.random.default_rng(0)
    l2 = sk.rounded_l2_bound(c, d, sk.DEFAULT_BETA)
    l1 = sk.rounded_l1_bound(l2, d)
    half = np.full(d, 0.5) if c * c >= d / 4 else np.zeros(d)
    for x in [rng.normal(size=d), half]:
        if not x.any():
            continue
        x = c * x / np.linalg.norm(x)
        r = _randomised_round(np.repeat(x[None], 4000, axis=0), rng)
        n2 = np.linalg.norm(r, axis=1)
        over = float(np.mean(n2 > l2))
        assert over <= sk.DEFAULT_BETA + 0.03
        assert np.all(n2 <= c + math.sqrt(d) + 1e-9)          # the deterministic branch
        kept = r[n2 <= l2]
        assert np.all(np.abs(kept).sum(1) <= l1 + 1e-9)


def test_wrap_probability_bounds_simulation():
    """One coordinate of m clients' rotated signal plus rounding and Skellam
    noise: the Chernoff bound is above the simulated rate of |S| >= 2^(b-1)."""
    rng = np.random.default_rng(1)
    m, bits, mu = 20, 8, 900.0
    s = 20.0                         # the signal's standard deviation (its sub-Gaussian proxy)
    n = 400_000
    signal = rng.choice([-1.0, 1.0], size=(n, 64)).sum(1) * s / 8     # Rademacher sum: proxy s²
    rounding = (rng.random((n, m)) - 0.5).sum(1)
    noise = rng.poisson(mu / 2, n) - rng.poisson(mu / 2, n)
    total = signal + rounding + noise
    for b in (bits, bits + 1):
        rate = float(np.mean(np.abs(total) >= 2 ** (b - 1)))
        bound = sk.wrap_probability(b, s, m / 4, mu)
        assert rate <= bound, (b, rate, bound)
        assert bound < 50 * max(rate, 1e-5)          # and not vacuous


def _independent_epsilon(q, l1, l2, mu, rounds, delta):
    """Theorem 3.5's ε(α) at integer orders, each participation's mixture
    (1 − q) + q·e^{(α−1)ε(α)} composed over the rounds, and the improved
    conversion (Balle et al. 2020, Thm. 21), written out here."""
    best = math.inf
    for a in range(2, 2000):
        e = float(sk.skellam_rdp(a, l1, l2, mu))
        per = math.log1p(q * math.expm1((a - 1) * e)) / (a - 1) if (a - 1) * e < 700 else e + math.log(q) / (a - 1)
        eps = rounds * per + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        best = min(best, eps)
    return best


@pytest.mark.parametrize("q,sigma,rounds,c", [(1.0, 0.5, 50, 1000.0), (0.1, 0.3, 200, 2000.0), (0.5, 2.0, 10, 3.0),
                                              (0.02, 1.0, 500, 500.0)])
def test_charge_is_never_below_the_skellam_closed_form(q, sigma, rounds, c):
    """The mechanism's ε (its charge on paretofl's accountant) against the
    Skellam bound at the noise it releases, composed by hand: never below,
    and close."""
    n, delta = 1000, 1e-5
    mech = M.get("distributed", bits=16, scaled_clip=c, dim=7850)
    ours = mech.epsilon(q, sigma, rounds, delta, n)
    z = sigma * math.sqrt(q * n)
    l2 = sk.rounded_l2_bound(c, 8192)
    l1 = sk.rounded_l1_bound(l2, 8192)
    indep = _independent_epsilon(q, l1, l2, mech.noise_variance(z), rounds, delta)
    assert ours >= indep * (1 - 1e-9)
    if c >= 100:          # where rounding leaves Δ₁ << Δ₂², the linearised charge costs little
        assert ours <= indep * 1.25 + 0.02


def test_charge_at_q1_against_dp_accounting():
    """Everyone every round: a Gaussian of noise multiplier z per round at
    integer orders, at least dp-accounting's Gaussian ε (which the Skellam
    release's ε is below, by the dominance above) and within 2 %."""
    dpa = pytest.importorskip("dp_accounting")
    mech = M.get("distributed", bits=16, scaled_clip=1000.0, dim=7850)
    for sigma, rounds in ((0.1, 100), (0.05, 400)):
        z = sigma * math.sqrt(1000)
        acc = dpa.rdp.RdpAccountant(orders=list(range(2, 256)))
        acc.compose(dpa.GaussianDpEvent(z), rounds)
        ref = acc.get_epsilon(1e-5)
        ours = mech.epsilon(1.0, sigma, rounds, 1e-5, 1000)
        assert ref * (1 - 1e-9) <= ours <= ref * 1.02


def test_attributed_integer_is_the_mixture_at_the_ceiling():
    """The sampling kind reads the attributed curve at ⌈α⌉: equal at integers, never below the curve at α."""
    a = np.array([1.3, 2.0, 2.5, 7.0, 15.2, 40.0])
    got = P.rdp_curve("attributed-integer", 0.2, 1.7, a)
    assert np.allclose(got, P.rdp_attributed_gaussian(0.2, 1.7, np.ceil(a)))
    assert np.all(got >= P.rdp_attributed_gaussian(0.2, 1.7, a) - 1e-15)
    # the mixture at q: log(1 - q + q e^{α(α-1)/(2z²)})/(α-1), written out
    al, q, z = 3.0, 0.2, 1.7
    assert got[1 + 0] == pytest.approx(math.log(1 - q + q * math.exp(2 * 1 / (2 * z * z))) / 1)
    assert P.rdp_curve("attributed-integer", q, z, [al])[0] == pytest.approx(
        math.log(1 - q + q * math.exp(al * (al - 1) / (2 * z * z))) / (al - 1))


def test_mechanism_options_are_checked():
    with pytest.raises(ValueError, match="bits"):
        M.get("distributed", bits=1)
    with pytest.raises(ValueError, match="dim"):
        M.get("distributed").charge(0.1, 1.0, 100) and M.get("distributed").inflation
    with pytest.raises(ValueError, match="dropout"):
        M.get("distributed", dropout=1.0)
    m = M.get("distributed", bits=12, scaled_clip=10.0, dim=100, dropout=0.2, rounding_beta=0.5)
    assert m.padded == 128
    assert m.error_ratio(5) == pytest.approx(m.inflation ** 2 / 0.8)
    assert m.inflation > 1


# ---------------------------------------------------------------- the trainer's release
def _release(**params):
    from dataclasses import replace

    from paretofl.fl.audit import _policy, _synthetic

    s = M.audit_setting("distributed")
    s = replace(s, params=dict(s.params, **params))
    p = s.params
    pol = _policy(s, _synthetic(p["samples"] * p["clients"], 12345, p["features"]), p["clients"], 3, 7)
    return pol


def test_release_dequantises_the_mean_and_wraps_with_too_few_bits():
    """No noise (σ tiny), 20 bits: the dequantised mean is the clipped
    updates' mean within the rounding's error; 4 bits: the modular sum wraps."""
    import torch

    pol = _release(sigma=1e-9, scaled_clip=4096.0, clients=4)
    eng, rel = pol.engine, pol.release
    glob = [torch.zeros_like(g) for g in eng.init_global()]
    c = rel.select(np.ones(eng.R, dtype=bool))
    upd = torch.randn(c.size, eng.net.n_params, generator=torch.Generator().manual_seed(0)) * 0.01
    clipped, _ = eng.clip_rows(upd, 1.0)
    want = eng.replica_sum(clipped, c) / torch.as_tensor(c.counts, dtype=clipped.dtype)[:, None]
    got = eng.flat(rel.release(glob, upd, c, np.ones(eng.R, dtype=bool)))
    assert not rel.aborted.any()
    assert float((got - want).abs().max()) < 2.0 / 4096          # rounding: < 1 grid step per client
    rel.modulus_bits = 4
    wrapped = eng.flat(rel.release(glob, upd * 100, c, np.ones(eng.R, dtype=bool)))
    assert float((wrapped - want * 100).abs().max()) > 0.01


def test_release_aborts_below_the_dropout_bound_and_noise_carries_the_charge():
    """Dropout bound 0.5, every client dropping with probability 0.9: rounds
    with fewer than half of the cohort surviving release nothing; those that
    release carry at least the charged variance (z Δ / γ per coordinate)."""
    import torch

    pol = _release(clients=4, dropout=0.5, sigma=1.0, scaled_clip=64.0)
    eng, rel = pol.engine, pol.release
    glob = [torch.zeros_like(g) for g in eng.init_global()]
    rel.drop_rate = 0.9
    c = rel.select(np.ones(eng.R, dtype=bool))
    upd = torch.zeros(c.size, eng.net.n_params)
    out = eng.flat(rel.release(glob, upd, c, np.ones(eng.R, dtype=bool)))
    for r in range(eng.R):
        if rel.survived[r] < 2:
            assert rel.aborted[r] and float(out[r].abs().max()) == 0.0
    rel.drop_rate = 0.0
    out = eng.flat(rel.release(glob, upd, c, np.ones(eng.R, dtype=bool)))
    std = float(out.std()) * 4 * 64.0                              # back to the sum on the grid (k = 4, C = 1)
    want = math.sqrt(rel.variance(0))
    assert std >= want * 0.95                                       # 4 noisers of mu/2 each: 2 mu
    assert std == pytest.approx(want * math.sqrt(2), rel=0.05)


@pytest.mark.parametrize("s", [1.0, 3.0, 250.0])
def test_skellam_rdp_is_the_authors_bound_in_grid_units(s):
    """Agarwal et al.'s own accounting (google-research/federated,
    distributed_dp/accounting_utils.py, _skellam_rdp), written out here in
    model units (sensitivities l1, l2, central variance v, scale s): the same
    as paretofl's bound on the integer grid (Δ₁ = s·l1, Δ₂ = s·l2, μ = s²v)."""
    for a in (2, 5, 32):
        for l1, l2, v in ((3.0, 1.0, 0.5), (40.0, 2.0, 9.0), (1e3, 5.0, 1e-3)):
            theirs = a / (2 * v) * l2 ** 2 + min(((2 * a - 1) * s * l2 ** 2 + 6 * l1) / (4 * s ** 3 * v ** 2),
                                                  3 * l1 / (2 * s * v))
            assert float(sk.skellam_rdp(a, s * l1, s * l2, s * s * v)) == pytest.approx(theirs, rel=1e-12)
