"""The least σ that reaches a new number of rounds, found without a bisection's
many questions (issue 47's start-up): a guess from a few orders' RDP
(:func:`least_noise_guess`), the 16-way bisection replayed against it, and
its last bracket's two ends asked of the accountant.

Checked against brute force: a plain bisection on :func:`max_steps` itself
(to 1e-13) for the guess, and the bisection that asks the accountant at
every point for the σ the design uses, which must be the same float."""

from __future__ import annotations

import math

import numpy as np
import pytest

from paretofl.recommendation import _Acct, _bisect, _least_sigma
from paretofl.theory.privacy import Charge, calibrate_noise, least_noise_guess, max_steps

CASES = [  # (ε, q, steps, sampling)
    (2.0, 1.0, 12, "poisson"),
    (2.0, 0.5, 12, "poisson"),
    (1.0, 0.1, 100, "poisson"),
    (8.0, 0.05, 1000, "poisson"),
    (0.5, 0.02, 3000, "poisson"),
    (4.0, 0.3, 40, "attributed"),
    (3.0, 0.2, 60, "fixed-size"),
]


def _brute_least_z(eps, q, steps, lo, hi, sampling="poisson", prior=()):
    """The least noise multiplier at which max_steps reaches ``steps``, by plain bisection."""
    assert max_steps(eps, q, hi, 1e-5, sampling=sampling, prior=prior) >= steps
    assert max_steps(eps, q, lo, 1e-5, sampling=sampling, prior=prior) < steps
    while hi / lo > 1 + 1e-13:
        mid = math.sqrt(lo * hi)
        if max_steps(eps, q, mid, 1e-5, sampling=sampling, prior=prior) >= steps:
            hi = mid
        else:
            lo = mid
    return hi


@pytest.mark.parametrize("eps,q,steps,sampling", CASES)
def test_guess_is_the_accountants_root(eps, q, steps, sampling):
    z = calibrate_noise(eps, q, steps, 1e-5, sampling=sampling)
    lo, hi = z * 0.9, z * 1.05
    want = _brute_least_z(eps, q, steps, lo, hi, sampling)
    got = least_noise_guess(eps, q, steps, 1e-5, (lo, hi), sampling=sampling)
    assert got is not None and got == pytest.approx(want, rel=1e-11)


def test_guess_composes_with_a_spend_before():
    prior = (Charge("poisson", 0.1, 2.0, 10),)
    z = 1.0
    while max_steps(3.0, 0.2, z, 1e-5, prior=prior) < 50:
        z *= 1.2
        assert z < 100
    want = _brute_least_z(3.0, 0.2, 50, 0.3, z, prior=prior)
    got = least_noise_guess(3.0, 0.2, 50, 1e-5, (0.3, z), prior=prior)
    assert got == pytest.approx(want, rel=1e-11)
    # without the spend the root is lower: the guess is of the composed accountant
    assert least_noise_guess(3.0, 0.2, 50, 1e-5, (0.3, z)) < want * (1 - 1e-3)


def test_no_guess_where_no_order_reaches():
    z = calibrate_noise(2.0, 0.5, 12, 1e-5)
    assert least_noise_guess(2.0, 0.5, 12, 1e-5, (z * 0.5, z * 0.9)) is None


def _acct(q, bands=1, prior=()):
    return _Acct("poisson", 1.0, q, lambda k: k * bands, prior)


@pytest.mark.parametrize("eps,q,bands", [(2.0, 1.0, 1), (2.0, 0.5, 1), (1.0, 0.1, 1), (8.0, 0.05, 1),
                                         (2.0, 0.3, 3)])
def test_least_sigma_is_the_bisections_to_the_bit(eps, q, bands):
    """Over many (a, b] intervals holding one new T: the σ is the float the bisection that asks the
    accountant at every point finds."""
    acct = _acct(q, bands)
    rng = np.random.default_rng(0)
    asked, checked = [], 0
    for _ in range(12):
        steps = int(rng.integers(2, 200))
        tb = steps * bands
        z = calibrate_noise(eps, q, steps, 1e-5)
        a, b = z * (1 - rng.uniform(1e-6, 0.2)), z * (1 + rng.uniform(1e-6, 0.2))

        def reaches(pts):
            return np.asarray(max_steps(eps, q, np.asarray(pts), 1e-5)) * bands >= tb

        if reaches(np.array([a]))[0] or not reaches(np.array([b]))[0]:
            continue
        calls = []
        got = _least_sigma(a, b, tb, lambda pts: calls.append(len(pts)) or reaches(pts), eps, q, 1e-5, _orders(),
                           acct)
        assert got == _bisect(a, b, reaches)[0]
        asked.append(calls)
        checked += 1
    assert checked >= 8
    # the guess held: the accountant was asked once, at the last bracket's ends, not at each bisection step
    assert all(c == [2] for c in asked), asked


def _orders():
    from paretofl.theory.privacy import DEFAULT_ORDERS
    return DEFAULT_ORDERS


def test_a_wrong_guess_is_not_believed(monkeypatch):
    """A guess the accountant's two answers contradict is dropped: the bisection asks at every point."""
    import paretofl.recommendation as rec

    eps, q, steps = 2.0, 0.5, 30
    z = calibrate_noise(eps, q, steps, 1e-5)
    a, b = z * 0.9, z * 1.1

    def reaches(pts):
        return np.asarray(max_steps(eps, q, np.asarray(pts), 1e-5)) >= steps

    want = _bisect(a, b, reaches)[0]
    for wrong in (z * 0.95, z * 1.05, z * (1 + 1e-9), z * (1 - 1e-9)):
        monkeypatch.setattr(rec, "least_noise_guess", lambda *args, wrong=wrong, **kw: wrong)
        assert _least_sigma(a, b, steps, reaches, eps, q, 1e-5, _orders(), _acct(q)) == want


def test_no_guess_beyond_a_million_steps_nor_for_an_empty_range():
    """Past 10⁶ steps the most steps wobble with round-off as σ grows (an attack found 493475890 → 493475885
    → 493475896 near σ·zf ≈ 8.6e4): no guess, the bisection as it was.  A range that is not one is an error."""
    z = calibrate_noise(1.0, 0.001, 2_000_000, 1e-5)
    assert least_noise_guess(1.0, 0.001, 2_000_000, 1e-5, (z * 0.9, z * 1.1)) is None
    for lo, hi in ((0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)):
        with pytest.raises(ValueError, match="z_lo < z_hi"):
            least_noise_guess(1.0, 0.1, 10, 1e-5, (lo, hi))


def test_meets_is_the_searched_epsilons_answer():
    """``_Acct.meets`` answers from the grid of orders where it can; it must be the searched ε's answer,
    also where the budget is that ε to the last bit (an attack found the grid's yes one ulp over it)."""
    from paretofl.theory.privacy import FLOWER_ORDERS

    acct = _Acct("fixed-size", 1.0, 0.8323155747022939, lambda k: k,
                 (Charge("attributed", 0.8323155747022939, 22.893054335773858, 44),))
    z, steps, delta = 39.60209097970957, 872, 2.6848040096835706e-06
    eps = acct.epsilon(z, steps, delta, FLOWER_ORDERS)
    for e in (eps, np.nextafter(eps, 0), np.nextafter(eps, np.inf), eps * (1 - 1e-12), eps * (1 + 1e-12)):
        assert acct.meets(e, z, steps, delta, FLOWER_ORDERS) == (eps <= e), e
    rng = np.random.default_rng(1)
    for sampling in ("poisson", "attributed", "fixed-size"):
        a = _Acct(sampling, 1.0, float(rng.uniform(0.01, 0.5)), lambda k: k)
        for _ in range(6):
            z, steps = float(rng.uniform(0.5, 5)), int(rng.integers(1, 500))
            exact = a.epsilon(z, steps, 1e-5, _orders())
            for e in (exact, np.nextafter(exact, 0), exact * 1.001, exact * 0.999):
                assert a.meets(e, z, steps, 1e-5, _orders()) == (exact <= e)


# ------------------------------------------------------------------ answers remembered across a design's searches
def _forget():
    import paretofl.recommendation as rec
    from paretofl.theory import skellam

    for memo in (rec._MOST_STEPS, rec._LEAST_SIGMA, rec._EPSILONS):
        memo.clear()
    rec._grid_of.cache_clear()
    skellam._best_scaled_clip.cache_clear()


@pytest.mark.parametrize("request_", [
    dict(n_clients=100, epsilon=2.0, max_rounds=500, mechanism="bandmf-amplified"),
    dict(n_clients=100, epsilon=2.0, max_rounds=500, mechanism="auto"),
    dict(n_clients=100, epsilon=2.0, max_rounds=500, mechanism="distributed", mechanism_options={"dim": 7850}),
    dict(n_clients=100, epsilon=2.0, max_rounds=500, framework="flower"),
], ids=["bandmf-amplified", "auto", "distributed", "flower"])
def test_what_the_searches_remember_is_what_they_would_compute(request_):
    """A design choosing its local work searches once per K and remembers the accountant's answers (the most
    rounds, the least σ, ε at a point, the distributed scale) by every input of them.  Each K's candidate must
    be, to the bit, what a design held to that K computes with nothing remembered; and the whole design the
    same again with everything remembered."""
    import paretofl

    _forget()
    whole = paretofl.design(**request_)
    for c in whole.local_work["candidates"]:
        _forget()
        alone = paretofl.design(local_epochs=c["epochs"], **request_)
        assert (alone.q, alone.rounds, alone.sigma, alone.epsilon, alone.mechanism, alone.mechanism_options) == (
            c["q"], c["rounds"], c["sigma"], alone.epsilon, c["mechanism"], c["mechanism_options"])
        if c["epochs"] == whole.local_epochs:
            assert (alone.epsilon, alone.utility_bound, alone.details) == (whole.epsilon, whole.utility_bound,
                                                                           whole.details)
    again = paretofl.design(**request_)                                # everything remembered now
    assert again.to_dict() == whole.to_dict()


def test_a_remembered_least_sigma_is_not_another_charges():
    """Two questions that differ only in the charge per unit σ, the rate, the spend before, δ or the orders are
    answered apart: each as :func:`_least_sigma` computes it afresh."""
    from paretofl.recommendation import _least_sigma_remembered, _tmax
    from paretofl.theory.privacy import DEFAULT_ORDERS

    _forget()
    base = _Acct("poisson", 1.0, 0.5, lambda k: k)
    variants = [(base, 1e-5, DEFAULT_ORDERS),
                (_Acct("poisson", 0.8, 0.5, lambda k: k), 1e-5, DEFAULT_ORDERS),
                (_Acct("poisson", 1.0, 0.4, lambda k: k), 1e-5, DEFAULT_ORDERS),
                (_Acct("poisson", 1.0, 0.5, lambda k: k, prior=(Charge("poisson", 0.5, 6.0, 5),)), 1e-5,
                 DEFAULT_ORDERS),
                (base, 1e-6, DEFAULT_ORDERS),
                (base, 1e-5, DEFAULT_ORDERS[::2]),
                (_Acct("poisson", 1.0, 0.5, lambda k: 2 * k), 1e-5, DEFAULT_ORDERS)]
    a, b, tb = 0.5, 40.0, 20                                  # σ·zf about 5 reaches 20 rounds at ε 2
    got = []
    for acct, delta, orders in variants * 2:                  # the second pass answered from memory
        fresh = _least_sigma(a, b, tb, lambda pts, acct=acct, delta=delta, orders=orders: _tmax(
            2.0, acct.rate, pts, delta, orders, acct) >= tb, 2.0, acct.rate, delta, orders, acct)
        got.append(_least_sigma_remembered(a, b, tb, 2.0, acct.rate, delta, orders, acct))
        assert got[-1] == fresh
    assert len(set(got[:len(variants)])) == len(variants)           # seven questions, seven answers
