"""The engine's noise sampler (issue 44 item 6, docs/theory.md §5.4): float64
Box–Muller whose radius's uniform is re-drawn within its lowest cell, so
that its truncation is at 2⁻¹⁰¹³ and what it adds to δ,
(1 + e^ε)·n·2⁻¹⁰¹³, is provably negligible.  Checked here against scipy and
mpmath: the law (moments, KS, binned chi-square with the far tail), the law
of the re-drawn cells, the largest value it can give, each replica's stream,
and the bound's arithmetic."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from scipy import stats

from paretofl.fl import data as D
from paretofl.fl import engine as engine_mod
from paretofl.fl.engine import Engine, gaussian_pairs
from paretofl.fl.models import build_model
from paretofl.theory import float_noise as F

ONE_BELOW = 1.0 - 2.0 ** -53      # the largest float64 uniform below 1


@pytest.fixture(scope="module")
def digits():
    return D.load_dataset("digits")


def _engine(digits, seeds, secure=False, device="cpu"):
    return Engine(build_model("lr", digits.shape), digits, [np.arange(100)], len(seeds), seeds=seeds,
                  secure=secure, device=device)


def test_the_noise_is_gaussian_moments_ks_and_binned_tail(digits, device):
    """8·10⁶ values of two replicas: mean, variance, skewness and excess
    kurtosis within 5 standard errors of N(0, 1)'s; Kolmogorov–Smirnov
    against scipy's normal CDF; a binned chi-square over 40 bins whose end
    bins hold the tails beyond ±4.5 (expected counts from scipy)."""
    eng = _engine(digits, [21, 22], device=device)
    z = np.concatenate([eng.normal((2_000_000,)).cpu().double().numpy().ravel() for _ in range(2)])
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(stats.skew(z)) < 5 * math.sqrt(6 / n)
    assert abs(stats.kurtosis(z)) < 5 * math.sqrt(24 / n)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    edges = np.concatenate([[-np.inf], np.linspace(-4.5, 4.5, 39), [np.inf]])
    seen = np.histogram(z, edges)[0]
    want = n * np.diff(stats.norm.cdf(edges))
    assert stats.chisquare(seen, want).pvalue > 1e-3
    assert np.abs(z).max() < F.NOISE_BOUND


def test_each_value_of_a_pair_is_used_once_and_the_two_are_independent(digits):
    """A block of m values is ⌈m/2⌉ pairs, cosines then sines: the values are
    uncorrelated with one another, cosine half against sine half included,
    and the engine counts the pairs each replica drew."""
    eng = _engine(digits, [3, 4])
    z = eng.normal((1_000_001,))
    assert list(eng.pairs) == [500_001, 500_001]
    h = 500_001
    for r in range(2):
        a, b = z[r, :h - 1].double().numpy(), z[r, h:].double().numpy()
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(h)
        assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 5 / math.sqrt(h)
    assert abs(np.corrcoef(z[0].numpy(), z[1].numpy())[0, 1]) < 5 / math.sqrt(2 * h)


def test_the_redrawn_lowest_cell_keeps_the_law(monkeypatch):
    """The argument of docs/theory.md §5.4, run where it acts often: with
    the cell at 2⁻² instead of 2⁻⁴⁰ (a quarter of the radii re-drawn at
    each level, some through every level), u₁ = exp(−R²/2) is still uniform
    on (0, 1] and the pairs still normal (KS against scipy); with two
    levels the smallest u₁ is 2⁻⁽²·²⁺⁵³⁾ and is reached where every draw is
    the largest uniform below 1."""
    monkeypatch.setattr(engine_mod, "NOISE_CELL_BITS", 2)
    g = torch.Generator().manual_seed(9)
    more = lambda k: torch.empty(k, dtype=torch.float64).uniform_(generator=g)  # noqa: E731
    u = torch.empty((2, 1_000_000), dtype=torch.float64).uniform_(generator=g)
    c, s = gaussian_pairs(u, more)
    radius2 = (c * c + s * s).numpy()
    assert stats.kstest(np.exp(-radius2 / 2), "uniform").pvalue > 1e-3
    assert stats.kstest(np.concatenate([c.numpy(), s.numpy()]), "norm").pvalue > 1e-3
    assert radius2.max() > -2 * math.log(2.0 ** -12)          # some went three levels down
    monkeypatch.setattr(engine_mod, "NOISE_LEVELS", 2)
    u = torch.tensor([[ONE_BELOW, ONE_BELOW], [0.0, 0.25]], dtype=torch.float64)
    c, s = gaussian_pairs(u, lambda k: torch.full((k,), ONE_BELOW, dtype=torch.float64))
    bound = math.sqrt(-2 * math.log(2.0 ** -(2 * 2 + 53)))
    assert float(c[0]) == pytest.approx(bound, rel=1e-15) and float(s[1]) == pytest.approx(bound, rel=1e-15)


def test_the_largest_value_is_the_bound_and_the_bound_is_mpmaths():
    """Where every uniform is the largest below 1, each level's cell is
    re-drawn down to the last: u₁ = 2⁻¹⁰¹³, R = √(1013·2 ln 2) = 37.474...
    (mpmath at 50 digits), reached at θ = 0; no uniform in [0, 1) gives
    more (u₁ = 2⁻¹⁰¹³ is the smallest: at the last level 1 − U ≥ 2⁻⁵³)."""
    assert F.U_MIN_LOG2 == -(40 * 24 + 53) == -1013
    mpmath.mp.dps = 50
    exact = mpmath.sqrt(-2 * mpmath.log(mpmath.mpf(2) ** -1013))
    assert abs(F.NOISE_BOUND - float(exact)) <= 1e-14 * float(exact)
    u = torch.tensor([[ONE_BELOW] * 3, [0.0, 0.25, 0.5]], dtype=torch.float64)
    c, s = gaussian_pairs(u, lambda k: torch.full((k,), ONE_BELOW, dtype=torch.float64))
    assert float(c[0]) == pytest.approx(float(exact), rel=1e-15)
    assert float(s[1]) == pytest.approx(float(exact), rel=1e-15)
    assert float(c[2]) == pytest.approx(-float(exact), rel=1e-15)
    assert float(torch.cat([c, s]).abs().max()) <= F.NOISE_BOUND * (1 + 4e-16)
    # a generator that returned 1 (it cannot) is held at the bound, not sent to infinity
    c, _ = gaussian_pairs(torch.tensor([[1.0], [0.0]], dtype=torch.float64),
                          lambda k: torch.ones(k, dtype=torch.float64))
    assert float(c[0]) <= F.NOISE_BOUND * (1 + 4e-16)
    # without a re-draw (u₁ > 2⁻⁴⁰) the radius is at most √(80 ln 2): the re-draw is what lifts it
    u = torch.tensor([[1.0 - 2.0 ** -40 - 2.0 ** -53], [0.0]], dtype=torch.float64)
    c, _ = gaussian_pairs(u, lambda k: pytest.fail("no re-draw above the cell"))
    assert float(c[0]) < math.sqrt(80 * math.log(2))


@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0, 10.0, 100.0, 500.0, 700.0])
@pytest.mark.parametrize("pairs", [1, 10**12, 10**30])
def test_float_delta_is_mpmaths_bound_never_below(eps, pairs):
    """(1 + e^ε)·n·2⁻¹⁰¹³ at 50 digits: float_delta is it to 1e-9 and never below."""
    mpmath.mp.dps = 50
    exact = (1 + mpmath.exp(eps)) * pairs * mpmath.mpf(2) ** -1013
    got = F.float_delta(eps, pairs)
    assert got >= exact
    assert got <= exact * (1 + 1e-9) or (exact < mpmath.mpf("5e-324") and got == 5e-324)


def test_float_delta_is_negligible_wherever_paretofl_designs():
    """The worst case stated in docs/theory.md §5.4: 10³⁰ pairs, ε = 500,
    is 1.6e-58 — below a millionth of any δ ≥ 1e-50; at ε = 10 it is
    2.5e-271.  Past ε ≈ 608 (δ = 1e-5) it is no longer a millionth of δ,
    and training adds it to the δ it reports."""
    assert F.float_delta(500) < 2e-58 < 1e-6 * 1e-50
    assert F.float_delta(10) < 3e-271
    assert F.float_delta(600) < 1e-11 < F.float_delta(610)
    assert F.float_delta(math.inf) == math.inf == F.float_delta(2000) and F.float_delta(800) > 1
    with pytest.raises(ValueError):
        F.float_delta(-1)


def test_a_replicas_stream_is_its_own_and_its_seeds(digits):
    """Replica r of an engine draws what an engine of replica r alone draws
    (at its seed), the same again at the same seeds; under secure=True
    (entropy-seeded generators) two engines at the same seeds differ from
    each other and from the seeded one."""
    seeds = [5, 6, 7]
    eng = _engine(digits, seeds)
    both = [eng.normal((1001,)), eng.normal((3,))]
    for r, s in enumerate(seeds):
        alone = _engine(digits, [s])
        for z, shape in zip(both, [(1001,), (3,)]):
            assert torch.equal(z[r], alone.normal(shape)[0])
    again = _engine(digits, seeds)
    assert torch.equal(again.normal((1001,)), both[0])
    one, two = _engine(digits, seeds, secure=True), _engine(digits, seeds, secure=True)
    a, b = one.normal((1001,)), two.normal((1001,))
    assert not torch.equal(a, b) and not torch.equal(a, both[0])
    assert (a == b).float().mean() < 0.01


def test_training_reports_the_truncations_delta_and_adds_it_where_it_matters(digits, monkeypatch):
    """train's final dict carries δ_fp per replica (float_delta of its ε);
    δ is left as asked where δ_fp is below a millionth of it, and raised by
    it where it is not (here a coarse sampler, u₁ ≥ 2⁻³⁰, stands in for one)."""
    from paretofl.fl.algorithms import ALGORITHMS, train

    def run():
        eng = Engine(build_model("lr", digits.shape), digits, D.partition_iid(digits.y_train.numpy(), 10), 2,
                     seeds=[0, 1])
        pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", sigma=1.0, clip=1.0, lr=0.1,
                                     client_rate=1.0)
        return train(pol, rounds=3, epsilon=50.0, delta=1e-5)[2]

    fin = run()
    assert fin["delta"] == 1e-5
    assert np.all(fin["delta_float"] == [F.float_delta(e) for e in fin["epsilon"]])
    assert np.all(fin["delta_float"] < 1e-200)
    monkeypatch.setattr(F, "U_MIN_LOG2", -130)
    fin = run()
    assert 1e-5 * 1e-6 < fin["delta_float"].max() < 1
    assert fin["delta"] == pytest.approx(1e-5 + fin["delta_float"].max()) and fin["delta"] > 1e-5
    # a sampler so coarse (u₁ ≥ 2⁻³⁰) that δ_fp passes 1: δ is a probability, reported as 1 (no guarantee)
    monkeypatch.setattr(F, "U_MIN_LOG2", -30)
    fin = run()
    assert fin["delta_float"].max() > 1 and fin["delta"] == 1.0
