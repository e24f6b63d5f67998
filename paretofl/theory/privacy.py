"""Privacy accounting (docs/theory.md §1 and §5).  numpy only: nothing here
imports torch, Opacus or scipy.special (start-up time of ``paretofl design``).

Contents
--------
* RDP curves of the three releases paretofl charges, each per step and
  vectorised over noise multipliers:

  - :func:`rdp_subsampled_gaussian` -- a Gaussian sum over a Poisson sample
    whose membership the observer does not see (Mironov, Talwar, Zhang 2019,
    §3.3; theory (5.1)); add/remove-one neighbours.
  - :func:`rdp_attributed_gaussian` -- a Gaussian release in each step the
    individual takes part in (probability q), the participation itself seen
    by the observer (the local view of docs/theory.md §5): the RDP of the binomial
    mixture, in closed form.
  - :func:`rdp_fixed_size_gaussian` -- a Gaussian sum over m of n drawn
    without replacement, replace-one neighbours (Wang, Balle,
    Kasiviswanathan 2019, Theorem 27): the sampling Flower does.

* :func:`rdp_to_epsilon` -- the classic (Mironov 2017, Prop. 3) and the
  improved (Balle et al. 2020, Thm. 21) RDP -> (ε, δ) conversions, and
  :func:`best_epsilon`, which minimises over orders by a grid and then a
  search around its best order and past its ends (docs/theory.md §5.2).
* :func:`account` -- the one entry point: charges in, ε out.  Everything
  outside :mod:`paretofl.theory` reaches ε through it (or through
  :meth:`Charge.epsilon` and :meth:`paretofl.mechanisms.Mechanism.epsilon`,
  which call it); ``tests/test_layers.py`` holds that.
* :class:`RDPAccountant` -- the accountant under it (``step`` /
  ``get_epsilon``); steps with different σ or sampling compose.  Opacus's
  PRV accountant has the same interface in :mod:`paretofl.fl.prv`, which
  registers it in :data:`OTHER_ACCOUNTANTS`: ``account(..., accountant="prv")``.
* :func:`calibrate_noise`, :func:`max_steps` and :func:`max_steps_searched` (ALI-DPFL, Algorithm 3).
* :class:`Charge` -- what a round charges: the one form every mechanism
  gives its charge in (:mod:`paretofl.mechanisms`), and every ledger reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DEFAULT_ORDERS",
    "SAMPLINGS",
    "FLOWER_ORDERS",
    "asymptotic_epsilon",
    "rdp_gaussian",
    "rdp_subsampled_gaussian",
    "rdp_attributed_gaussian",
    "rdp_fixed_size_gaussian",
    "rdp_attributed_integer",
    "rdp_curve",
    "rdp_to_epsilon",
    "conversion_offset",
    "epsilon_on_grid",
    "best_epsilon",
    "RDPAccountant",
    "compute_epsilon",
    "calibrate_noise",
    "max_steps",
    "max_steps_searched",
    "least_noise_guess",
    "Charge",
    "account",
    "charges_as_data",
    "charges_from_data",
    "check_delta",
    "DELTA_MAX",
    "check_rate",
    "check_step",
]

#: RDP orders of the first pass: 1.01 to 2 spaced 12.5 % apart in α − 1, 2 to 12
#: spaced 8 % apart, then integers about 10 % apart up to 4096.  :func:`best_epsilon` refines
#: around the best one and goes past either end when the optimum lies there,
#: so the grid only has to be dense enough to find the right neighbourhood.
#: Fewer orders can only make ε larger (never under-reported).
DEFAULT_ORDERS: tuple[float, ...] = tuple(sorted(set(
    [round(1 + x, 4) for x in np.geomspace(0.01, 1.0, 40)[:-1]]
    + [round(x, 2) for x in np.geomspace(2.0, 12.0, 24)]
    + [float(int(round(x))) for x in np.geomspace(13, 4096, 60)]
)))

#: the largest order the search goes to (ε ≈ ln(1/δ)/α: certifies ε ≳ 1e-4)
MAX_ORDER = 1 << 17
#: fractional orders above this are rounded to integers (the quadrature's grid
#: grows with α/σ; integer orders are an exact finite sum)
_FRAC_MAX = 16.0


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------
def _number(x, name: str) -> float:
    """x as a float; a string, a boolean or anything that is not a real
    number is refused (the API checks what the command line's flags do)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {x!r}")
    return float(x)


#: how close qN must come to a whole number to be that many clients a round:
#: the tolerance every whole-cohort check here has used (absolute, so the
#: window stays far below one client: an ulp of a cohort up to the most
#: clients a design takes, 10^6, is 1.2e-10)
COHORT_ATOL = 1e-9


def cohort_size(q, n_clients=None, cohort=None):
    """m, the expected clients a round: ``cohort`` where given (Σ_i q_i where
    clients have rates of their own), else qN; snapped to the whole number
    it lies within COHORT_ATOL of.  q = m/N is a float, and (m/N)·N misses
    m by an ulp either way (1/3400 · 3400 = 0.9999999999999999): every place
    that needs m takes it from here, so a cohort of one client is one.  No
    checks (a search grid may hold cohorts below one).  Arrays stay arrays."""
    if cohort is None and n_clients is None:
        raise ValueError("the cohort m = qN needs the number of clients n_clients (or the cohort itself)")
    m = np.asarray(q, dtype=float) * int(n_clients) if cohort is None else np.asarray(cohort, dtype=float)
    r = np.rint(m)
    m = np.where(np.abs(m - r) <= COHORT_ATOL, r, m)
    return m if m.ndim else float(m)


def whole_cohort_rate(q, n_clients):
    """q, or m/N where qN lies within COHORT_ATOL of a whole m: the rate of
    the m >= 1 clients a fixed-size draw takes (each joins with probability m/N),
    so that what is charged is what is drawn, also where qN missed m by an
    ulp or a hand-typed q by 1e-9.  Arrays stay arrays."""
    m = np.asarray(cohort_size(q, n_clients), dtype=float)
    r = np.where((m == np.rint(m)) & (m >= 1), m / int(n_clients), np.asarray(q, dtype=float))
    return r if r.ndim else float(r)


def check_rate(q: float, name: str = "sampling rate q") -> float:
    q = _number(q, name)
    if not (0.0 < q <= 1.0) or math.isnan(q):
        raise ValueError(f"{name} must lie in (0, 1], got {q}")
    return q


def _check_positive(x: float, name: str) -> float:
    x = _number(x, name)
    if not (x > 0.0) or math.isinf(x):
        raise ValueError(f"{name} must be a positive finite number, got {x}")
    return x


#: the largest δ a guarantee about people may carry (with a population):
#: publishing every individual's data outright with probability δ meets
#: (0, δ)-DP whatever their number, so 1/N alone is no bar where N is small
#: (N = 1 admitted δ = 0.5)
DELTA_MAX = 0.01


def check_delta(delta: float, population: int | None = None, unit: str = "client") -> float:
    """δ as a float, refused outside (0, 1); with ``population`` (how many
    individuals the neighbouring relation protects: clients for client-level
    DP, samples for sample-level), also refused at 1/population or above
    (a mechanism that publishes one randomly chosen individual's data
    outright meets such a δ) and above :data:`DELTA_MAX` (one that publishes
    everyone's data with probability δ meets it): either way the guarantee
    says nothing."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.integer, np.floating)):
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    delta = float(delta)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if population is not None and delta >= 1.0 / population:
        raise ValueError(f"delta = {delta:g} is not below 1/{population:,} (one over the {unit}s protected): "
                         f"publishing one {unit}'s data outright meets it; use delta well below, e.g. "
                         f"{min(DELTA_MAX / 10, 1.0 / float(population) ** 2):.0e}")
    if population is not None and delta > DELTA_MAX:
        raise ValueError(f"delta = {delta:g} is above {DELTA_MAX:g}: publishing every {unit}'s data outright with "
                         f"probability delta meets it, however few the {unit}s ({population:,}); use delta well "
                         f"below, e.g. {min(DELTA_MAX / 10, 1.0 / float(population) ** 2):.0e}")
    return delta


def check_step(noise_multiplier: float, sample_rate: float, steps: int) -> None:
    """Validate one accountant charge (shared by every accountant)."""
    _check_positive(noise_multiplier, "noise_multiplier")
    check_rate(sample_rate, "sample_rate")
    if isinstance(steps, bool) or int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")


def _check_orders(orders: Iterable[float]) -> np.ndarray:
    a = np.asarray(list(orders), dtype=float)
    if a.ndim != 1 or a.size == 0 or np.any(~np.isfinite(a)) or np.any(a <= 1.0):
        raise ValueError("RDP orders must be a non-empty list of finite numbers > 1")
    if np.any((a > _FRAC_MAX) & (a != np.floor(a))):
        raise ValueError(f"RDP orders above {_FRAC_MAX:g} must be integers")
    if a.max() > MAX_ORDER:
        raise ValueError(f"RDP orders above {MAX_ORDER} are not supported")
    return a


def _check_noise(noise_multiplier) -> tuple[np.ndarray, bool]:
    scalar = np.ndim(noise_multiplier) == 0
    z = np.atleast_1d(np.asarray(noise_multiplier, dtype=float))
    if np.any(~(z > 0)) or np.any(~np.isfinite(z)):
        raise ValueError("noise_multiplier must be a positive finite number")
    if np.any(z < 1e-6):
        raise ValueError("noise_multiplier below 1e-6: no meaningful privacy (epsilon is astronomical)")
    return z, scalar


# --------------------------------------------------------------------------
# §1: the asymptotic leakage model
# --------------------------------------------------------------------------
def asymptotic_epsilon(sigma, rounds, q, n_clients, delta, c_p: float = 1.0):
    """Leakage model (1.1) of docs/theory.md §1 (Gu et al. 2023, Eq. 2, after
    Abadi et al. 2016): ``ε_p = c_p · sqrt(q · T · log(1/δ) / N) / σ``.

    ``c_p`` is a free constant; by Lemma 2 it never changes which
    configurations are Pareto optimal.  Broadcasts over arrays.
    """
    sigma = np.asarray(sigma, dtype=float)
    rounds = np.asarray(rounds, dtype=float)
    q = np.asarray(q, dtype=float)
    out = c_p * np.sqrt(q * rounds * math.log(1.0 / check_delta(delta)) / n_clients) / sigma
    return out if out.ndim else float(out)


# --------------------------------------------------------------------------
# §5: RDP curves
# --------------------------------------------------------------------------
def _lse(x: np.ndarray, axis: int, b: np.ndarray | None = None):
    """log Σ b·exp(x) along ``axis`` (b = ±1 signs, default 1); returns
    (value, sign)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    tot = np.sum(e if b is None else e * b, axis=axis)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(tot)) + np.squeeze(m, axis=axis), np.sign(tot)


_LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, 4097, dtype=float)))])


def _log_fact(n: int) -> np.ndarray:
    """The table of log k! for k <= n (grown on demand; scipy.special is not
    imported on purpose: it costs 0.2 s of start-up)."""
    global _LOG_FACT
    if n >= len(_LOG_FACT):
        _LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, max(n, 2 * len(_LOG_FACT)) + 1,
                                                                     dtype=float)))])
    return _LOG_FACT


def _log_binom(n, k):
    """log C(n, k) for integers 0 <= k <= n."""
    n = np.asarray(n, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    lf = _log_fact(int(np.max(n)))
    return lf[n] - lf[np.clip(k, 0, None)] - lf[np.clip(n - k, 0, None)]


def _log_a_int(q: float, z: np.ndarray, alphas: np.ndarray, need=None) -> np.ndarray:
    """log A_α for integer orders (theory (5.1)): a finite binomial sum,

    ``A_α = Σ_k C(α,k) (1-q)^(α-k) q^k exp((k²-k)/(2σ²))``,

    in log space.  Orders are summed in blocks of similar size (each padded to
    its own largest order) so that an order of 10⁵ does not pad the others.
    Returns an array of shape (len(z), len(alphas)).  ``need`` (a mask):
    only those orders, each exactly as without it (the blocks are those of
    all ``alphas``); the others are NaN.
    """
    out = np.full((z.size, alphas.size), np.nan)
    order = np.argsort(alphas)
    start = 0
    while start < len(order):
        top = alphas[order[start]]
        stop = start
        while stop < len(order) and alphas[order[stop]] <= max(64.0, 2.0 * top):
            stop += 1
        idx = order[start:stop]
        amax = int(alphas[idx].max())
        start = stop
        if need is not None:
            idx = idx[need[idx]]
            if idx.size == 0:
                continue
        A = alphas[idx]
        k = np.arange(amax + 1, dtype=float)
        with np.errstate(invalid="ignore"):
            base = _log_binom(A[:, None], k[None, :]) + k * math.log(q) + (A[:, None] - k) * math.log1p(-q)
        base = np.where(k[None, :] <= A[:, None], base, -np.inf)     # (n_a, amax+1)
        quad = (k * k - k)[None, :] / (2.0 * z[:, None] ** 2)         # (n_z, amax+1)
        if len(idx) * z.size * (amax + 1) > 4_000_000:                # large orders: one z at a time
            for j in range(z.size):
                out[j, idx] = _lse(base + quad[j][None, :], axis=1)[0]
        else:
            out[:, idx] = _lse(base[None, :, :] + quad[:, None, :], axis=2)[0]
    return out


_QUAD_STEP = 0.25       # largest trapezoid spacing, in standard units of x/σ
_QUAD_MIN_SIGMA = 0.02  # below this, fractional orders are skipped (RDP = +inf, a valid bound)
_QUAD_TAIL = 13.0       # integrate this many standard units beyond the mass (e^-84)


def _log_w(q: float, y: np.ndarray) -> np.ndarray:
    """log(1 - q + q·e^y), accurate for tiny and for huge y (no overflow)."""
    with np.errstate(over="ignore", invalid="ignore"):
        small = np.log1p(q * np.expm1(np.minimum(y, 700.0)))
    large = y + math.log(q) + np.log1p((1.0 - q) / q * np.exp(-np.maximum(y, 700.0)))
    return np.where(y < 700.0, small, large)


def _log_a_frac(q: float, z: np.ndarray, alphas: np.ndarray, need=None) -> np.ndarray:
    """log A_α for fractional orders, by quadrature of its definition.

    ``A_α = E_{u~N(0,1)}[(1 + q·expm1(u/σ - 1/(2σ²)))^α]`` (Mironov, Talwar,
    Zhang 2019, §3.3, with x = σu).  The integrand is analytic in a strip of
    half-width πσ around the real axis, so the trapezoid rule converges
    exponentially, with relative error about exp(-2π²σ/h); the step
    h = min(0.25, 0.3σ) keeps that below e^-65.  To avoid cancellation the
    sum is taken of ``(…)^α - 1`` (whose mean is A_α - 1, since the
    first-order term has mean zero), in log space with signs.  The grid is
    built per noise multiplier, so that a small σ in a batch does not
    stretch the others' grids.  Returns an array (len(z), len(alphas)).
    ``need`` (a mask): only those orders, each on the grid all ``alphas``
    give; the others are NaN.
    """
    out = np.full((z.size, alphas.size), np.nan)
    cols = np.arange(alphas.size) if need is None else np.flatnonzero(need)
    amax = float(np.max(alphas))
    for j, zj in enumerate(z):
        w, log_phi = _frac_grid(q, float(zj), amax)
        aw = alphas[cols, None] * w[None, :]                       # (n_a, n_u)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            # log|(…)^α - 1|: aw + log(1 - e^-aw) for aw > 0, log(1 - e^aw) for aw <= 0
            log_abs = np.log(-np.expm1(-np.abs(aw))) + np.maximum(aw, 0.0)
        log_s, s = _lse(log_abs + log_phi, axis=1, b=np.sign(aw))
        # A_α - 1 >= 0 (Jensen); a negative sum is round-off around zero
        out[j, cols] = np.where(s > 0, np.logaddexp(0.0, log_s), 0.0)
    return out


_FRAC_GRIDS: dict = {}


def _frac_grid(q: float, z: float, amax: float) -> tuple:
    """:func:`_log_a_frac`'s quadrature grid for one noise multiplier (the
    orders up to ``amax``): log(1-q+q e^y) and the log weights at its
    points, remembered for the last few thousand."""
    key = (q, z, amax)
    if key not in _FRAC_GRIDS:
        if len(_FRAC_GRIDS) >= 4096:
            _FRAC_GRIDS.clear()
        h = min(_QUAD_STEP, 0.3 * z)
        top = _QUAD_TAIL + amax / z
        u = np.arange(-_QUAD_TAIL, top + h, h)                    # (n_u,)
        w = _log_w(q, u / z - 1.0 / (2.0 * z * z))                 # log(1-q+q e^y)
        log_phi = -0.5 * u**2 - 0.5 * math.log(2 * math.pi) + math.log(h)
        _FRAC_GRIDS[key] = (w, log_phi)
    return _FRAC_GRIDS[key]


def rdp_gaussian(noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """RDP of the Gaussian mechanism, α/(2σ²) (Mironov 2017, Prop. 7)."""
    a = _check_orders(orders)
    z, scalar = _check_noise(noise_multiplier)
    with np.errstate(over="ignore"):
        out = a[None, :] / (2.0 * z[:, None] ** 2)
    return out[0] if scalar else out


def rdp_subsampled_gaussian(q: float, noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """Per-step RDP of the Poisson-subsampled Gaussian mechanism (docs/theory.md §5).

    Each individual is in the step's sample with probability ``q``,
    independently; the observer sees the noised sum, not who was in it.
    Neighbours: one individual added or removed (its contribution bounded by
    the sensitivity the noise multiplier is relative to).

    Returns an array ``(len(orders),)`` for a scalar noise multiplier, else
    ``(len(noise_multiplier), len(orders))``.  RDP(α) = log(A_α)/(α-1).
    """
    q = check_rate(q)
    a = _check_orders(orders)
    z, scalar = _check_noise(noise_multiplier)
    with np.errstate(over="ignore", under="ignore"):  # σ² may overflow to inf: RDP -> 0, correctly
        out = _rdp_matrix(q, z, a)
    return out[0] if scalar else out


def _rdp_matrix(q: float, z: np.ndarray, a: np.ndarray, need=None) -> np.ndarray:
    """The RDP of the orders ``a`` (or of those ``need`` marks, each
    exactly as when all are asked; the others NaN)."""
    out = np.empty((z.size, a.size))
    if q == 1.0:
        out[:] = a[None, :] / (2.0 * z[:, None] ** 2)
        return out
    is_int = a == np.floor(a)
    if is_int.any():
        out[:, is_int] = _log_a_int(q, z, a[is_int], None if need is None else need[is_int]) / (a[is_int] - 1.0)
    frac = ~is_int
    if frac.any():
        # below σ = 0.02 the quadrature grid grows as 1/σ²; there ε is
        # astronomically large anyway, so fractional orders are reported as
        # +inf (the bound stays valid: ε minimises over the others)
        out[:, frac] = np.inf
        ok = z >= _QUAD_MIN_SIGMA
        if ok.any():
            got = _log_a_frac(q, z[ok], a[frac], None if need is None else need[frac])
            out[np.ix_(ok, frac)] = got / (a[frac] - 1.0)
    return np.maximum(out, 0.0)  # RDP is non-negative; clears -1e-17 round-off


def rdp_attributed_gaussian(q: float, noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """Per-step RDP of a Gaussian release in each step an individual takes
    part in, with probability ``q``, where the observer sees whether it took
    part (the local view of docs/theory.md §5: the server receives each update with
    its sender, so subsampling hides nothing).

    Taking part is independent of the data, so the two neighbours' outputs
    are the mixtures (1-q)·[absent] + q·N(μ, σ²) and (1-q)·[absent] +
    q·N(0, σ²), whose Rényi divergence is exactly
    ``RDP(α) = log(1 - q + q·exp(α(α-1)/(2σ²))) / (α-1)``;
    T steps compose by addition, which is the exact RDP of the Bin(T, q)
    participations.  q = 1 is the Gaussian mechanism.
    """
    q = check_rate(q)
    a = _check_orders(orders)
    z, scalar = _check_noise(noise_multiplier)
    with np.errstate(over="ignore"):
        y = (a[None, :] * (a[None, :] - 1.0)) / (2.0 * z[:, None] ** 2)
    out = _log_w(q, y) / (a[None, :] - 1.0)
    out = np.maximum(out, 0.0)
    return out[0] if scalar else out


_WOR_TOP = 257          # forward differences up to this order (Theorem 27's exact terms for α <= 256)
_WOR_LOG_B = None      # log b[n, p]: (k(k-1))^n = Σ_p b[n, p] k^(p), k^(p) the falling factorial
_EPS = float(np.finfo(float).eps)


def _wor_log_b() -> np.ndarray:
    """log of the coefficients b[n, p] of (k(k-1))^n in falling factorials,
    n, p <= _WOR_TOP, by k^(p)·k^(2) = k^(p+2) + 2p·k^(p+1) + p(p-1)·k^(p):
    b[n+1, p] = b[n, p-2] + 2(p-1)·b[n, p-1] + p(p-1)·b[n, p].  All >= 0."""
    global _WOR_LOG_B
    if _WOR_LOG_B is None:
        top = _WOR_TOP
        p = np.arange(top + 1, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lin = np.where(p >= 2, np.log(np.maximum(2 * (p - 1), 1e-300)), -np.inf)
            quad = np.where(p >= 2, np.log(np.maximum(p * (p - 1), 1e-300)), -np.inf)
        b = np.full((top + 1, top + 1), -np.inf)
        b[0, 0] = 0.0
        ninf2 = np.array([-np.inf, -np.inf])
        for n in range(top):
            prev = b[n]
            t2 = np.concatenate([ninf2, prev[:-2]])
            t1 = np.concatenate([ninf2[:1], prev[:-1]]) + lin
            t0 = prev + quad
            b[n + 1] = np.logaddexp(np.logaddexp(t2, t1), t0)
        _WOR_LOG_B = b
    return _WOR_LOG_B


_WOR_BINOMIALS: dict = {}


def _wor_binomials(top: int) -> tuple:
    """For m = 2..top (rows) and i = 0..top: i <= m, log C(m, i) (-inf
    where i > m) and (-1)^(m-i); they do not depend on σ."""
    if top not in _WOR_BINOMIALS:
        ms = np.arange(2, top + 1)
        i = np.arange(top + 1)
        inside = i[None, :] <= ms[:, None]
        log_binom = np.where(inside, _log_binom(np.where(inside, ms[:, None], i[None, :]), i[None, :]), -np.inf)
        signs = np.where((ms[:, None] - i[None, :]) % 2 == 0, 1.0, -1.0)
        _WOR_BINOMIALS[top] = (inside, log_binom, signs)
    return _WOR_BINOMIALS[top]


def _wor_diffs_upper(z: float, top: int) -> np.ndarray:
    """Upper bounds on log Δ^m g(0), m = 0..top, g(k) = exp(k(k-1)/(2σ²)) =
    e^{(k-1)ε(k)} of the Gaussian mechanism: the forward differences of
    Wang, Balle, Kasiviswanathan 2019, Theorem 27.  They are used in a
    minimum with a term that needs none, so an upper bound is safe; an
    under-estimate would not be.  Two ways, the smaller bound kept:

    * the alternating binomial sum Σ_i (-1)^(m-i) C(m,i) g(i) in floating
      point, plus a bound on its rounding error (exact when g grows fast,
      small σ; it loses every digit for σ ≳ 20 at m ≳ 12);
    * with c = 1/(2σ²) and the exponential series, Δ^m g(0) = m!·Σ_n
      c^n/n!·b[n, m] (Δ^m of the falling factorial k^(p) at 0 is m! when
      p = m, else 0): positive terms, summed to n = _WOR_TOP, plus a bound on
      the rest from b[n, m] <= 2^m (m(m-1))^n / m! (accurate for large σ).
    """
    top = min(top, _WOR_TOP)
    c = 1.0 / (2.0 * z * z)
    out = np.full(top + 1, np.inf)
    out[0] = 0.0
    lf = _log_fact(2 * _WOR_TOP + 2)
    # series
    b = _wor_log_b()
    n = np.arange(b.shape[0], dtype=float)
    N = b.shape[0] - 1
    m = np.arange(2, top + 1, dtype=float)
    lam = c * m * (m - 1)
    # the series only where its tail bound holds (λ < N + 2: m = 2..last - 1); each column is summed on its
    # own, down the rows in turn, so these are the values all columns asked at once give (at least 8 columns,
    # whatever ``top``: a single one would be summed as a vector, pairwise)
    last = 2 + int(np.count_nonzero(lam < N + 2))
    series = np.full(top + 1, np.inf)
    if last > 2:
        cols = slice(2, max(last, 10))                 # the table has _WOR_TOP + 1 >= 10 columns
        got = _lse(b[:, cols] + (n * math.log(c) - lf[: b.shape[0]])[:, None], axis=0)[0] + lf[cols]
        series[2:last] = got[: last - 2]
    series = series + 4 * _WOR_TOP * _EPS                      # the table's own rounding
    # the alternating sums of every m at once, one row each (i <= m); each
    # row is summed on its own below, so each sum is the one a row alone gives
    i = np.arange(top + 1)
    inside, log_binom, signs = _wor_binomials(top)
    growth = c * i * (i - 1.0)
    top_v, mags = np.empty(top - 1), np.zeros((top - 1, top + 1))     # exp(-inf) = 0 outside (i > m)
    for r0 in range(0, top - 1, 32):            # in blocks of rows, each as wide as its largest m
        r1 = min(r0 + 32, top - 1)
        w = r1 + 2
        vals = log_binom[r0:r1, :w] + growth[:w]        # -inf outside
        top_v[r0:r1] = vals.max(axis=1)
        mags[r0:r1, :w] = np.exp(vals - top_v[r0:r1, None])
    signed = signs * mags
    big = top_v          # the largest |term| of each row: every term is log C(m, i) + c·i(i-1) >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = m * math.log(2) + (N + 1) * np.log(lam) - float(lf[N + 1]) - np.log1p(-lam / (N + 2))
    up = np.where(lam < N + 2, np.logaddexp(series[2:], np.where(lam < N + 2, tail, -np.inf)), np.inf)
    # each alternating sum with its rounding error (any order of summation: (m+2)·eps·Σ|terms| bounds it)
    s = np.add.reduce(signed, axis=1)
    err = (m + 2) * _EPS * np.add.reduce(mags, axis=1) * (8.0 + 2.0 * big)
    with np.errstate(divide="ignore", invalid="ignore"):
        alt = np.where(s + err > 0, top_v + np.log(np.where(s + err > 0, s + err, 1.0)), np.inf)
    out[2:] = np.minimum(up, alt)
    out = out + 1e-12 * (1.0 + np.abs(out))   # a last ulp of slack on the logs
    out[0], out[1] = 0.0, -np.inf             # Δg(0) = g(1) - g(0) = 0
    return out


_WOR_DIFFS: dict = {}


def _wor_diffs(z: float) -> np.ndarray:
    """:func:`_wor_diffs_upper` up to _WOR_TOP, remembered for the last few
    thousand noise multipliers (each difference is computed on its own, so
    the first m + 1 are those asked up to m)."""
    got = _WOR_DIFFS.get(z)          # read once: another thread may clear the book between two reads
    if got is None:
        if len(_WOR_DIFFS) >= 4096:
            _WOR_DIFFS.clear()
        got = _WOR_DIFFS[z] = _wor_diffs_upper(z, _WOR_TOP)
    return got


_WOR_BLOCK_BINOMIALS: dict = {}


def _wor_block_binomials(block: tuple) -> tuple:
    """For a block of integer orders α (rows) and j = 3..max α: j <= α,
    log C(α, 2) and log C(α, j) (where j > α: C(max α, j), masked by the
    first); they do not depend on q or σ, and the lazy accountant asks the
    same blocks for every σ (remembered, bounded)."""
    got = _WOR_BLOCK_BINOMIALS.get(block)
    if got is None:
        if len(_WOR_BLOCK_BINOMIALS) >= 256:
            _WOR_BLOCK_BINOMIALS.clear()
        b = np.array(block)
        jj = np.arange(3, int(b[-1]) + 1)
        inside = jj[None, :] <= b[:, None]
        got = (inside, _log_binom(b, 2), _log_binom(np.where(inside, b[:, None], jj), jj))
        for a in got:
            a.flags.writeable = False
        _WOR_BLOCK_BINOMIALS[block] = got
    return got


def _wor_log_a(q: float, z: float, alphas, diffs: np.ndarray) -> dict:
    """log of Wang, Balle, Kasiviswanathan 2019, Theorem 27's bound on
    E[(p/p')^α] for sampling without replacement, for the Gaussian mechanism
    (ε(j) = j/(2σ²), replace-one neighbours, sensitivity 1):

    1 + q² C(α,2) min{4(e^{ε(2)} - 1), 2e^{ε(2)}}
      + Σ_{j=3..α} q^j C(α,j) min{4 (Δ^{2⌊j/2⌋} g(0) · Δ^{2⌈j/2⌉} g(0))^{1/2}, 2e^{(j-1)ε(j)}}

    for each integer order α >= 2 of ``alphas``; returns {α: log A_α}.
    ``diffs`` from :func:`_wor_diffs_upper` (up to order 256 at least where
    used; beyond it only the second term of each min is used, which is
    larger, hence still a bound).  The orders share their terms' arrays
    (blocks of similar size, each padded to its largest order); each
    order's sum is taken over its own terms alone."""
    eps2 = 1.0 / (z * z)
    log_f2m1 = eps2 + math.log(-math.expm1(-eps2))
    pick = min(math.log(4) + log_f2m1, eps2 + math.log(2))
    ks = sorted({int(k) for k in alphas})
    out = {}
    for k in ks:
        if k < 3:
            out[k] = float(np.logaddexp(0.0, 2 * math.log(q) + float(_log_binom(k, 2)) + pick))
    ks = [k for k in ks if k >= 3]
    if not ks:
        return out
    # the terms j = 3..max α that do not depend on α
    j = np.arange(3, ks[-1] + 1)
    second = math.log(2) + (j - 1.0) * j / (2.0 * z * z)
    lo_i, hi_i = 2 * (j // 2), 2 * ((j + 1) // 2)
    ok = hi_i < len(diffs)
    lo = np.where(ok, diffs[np.minimum(lo_i, len(diffs) - 1)], np.inf)
    hi = np.where(ok, diffs[np.minimum(hi_i, len(diffs) - 1)], np.inf)
    with np.errstate(invalid="ignore"):
        diff_term = math.log(4) + 0.5 * (lo + hi)
    shared = np.minimum(np.where(np.isnan(diff_term), np.inf, diff_term), second) + j * math.log(q)
    start = 0
    while start < len(ks):
        stop = start
        while stop < len(ks) and ks[stop] <= max(64, 2 * ks[start]):
            stop += 1
        block = np.array(ks[start:stop])
        top = int(block[-1])
        inside, binom2, binoms = _wor_block_binomials(tuple(ks[start:stop]))
        t = np.full((block.size, top), -np.inf)
        t[:, 0] = 0.0
        t[:, 1] = 2 * math.log(q) + binom2 + pick
        t[:, 2:] = np.where(inside, shared[: top - 2] + binoms, -np.inf)
        m = t.max(axis=1)
        e = np.exp(t - m[:, None])
        for r, k in enumerate(block):
            out[int(k)] = float(m[r] + math.log(np.add.reduce(e[r, :k])))
        start = stop
    return out


def rdp_fixed_size_gaussian(q: float, noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """Per-step RDP bound of a Gaussian sum over a sample of m = q·n of n
    individuals drawn uniformly without replacement (Flower's client
    sampling), replace-one neighbours (n public), Wang, Balle,
    Kasiviswanathan 2019, Theorem 27.  The noise multiplier is relative to
    the replace-one sensitivity (2C for a sum of updates clipped to C).
    Fractional orders interpolate the cumulant linearly between integers
    (their Corollary 10), which is an upper bound since the cumulant is
    convex.  Checked against Google's dp-accounting in the tests.
    """
    q = check_rate(q)
    a = _check_orders(orders)
    z, scalar = _check_noise(noise_multiplier)
    out = np.empty((z.size, a.size))
    for i, zi in enumerate(z):
        if q == 1.0:
            out[i] = a / (2.0 * zi * zi)
            continue
        diffs = _wor_diffs(float(zi))[: min(_WOR_TOP, int(math.ceil(a.max())) + 1) + 1]
        ks = {math.floor(al) for al in a} | {math.ceil(al) for al in a}
        log_a = {1: 0.0, **_wor_log_a(q, float(zi), [k for k in ks if k > 1], diffs)}
        for j, al in enumerate(a):
            f, c = math.floor(al), math.ceil(al)
            t = al - f
            out[i, j] = ((1 - t) * log_a[f] + t * log_a[c]) / (al - 1.0) if f != c else log_a[int(al)] / (al - 1.0)
    out = np.maximum(out, 0.0)
    return out[0] if scalar else out


def rdp_attributed_integer(q: float, noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """:func:`rdp_attributed_gaussian` read at ⌈α⌉: the per-step RDP of a
    release whose own RDP is bounded by a Gaussian's α/(2σ²) at integer
    orders only (Skellam noise, Agarwal et al. 2021, Theorem 3.5), taken
    part in with probability ``q``, the participation seen.  Rényi
    divergence does not decrease with the order, so D_α <= D_⌈α⌉ <= the
    mixture's closed form at ⌈α⌉: valid at every order, equal at integers."""
    a = np.ceil(_check_orders(orders))
    return rdp_attributed_gaussian(q, noise_multiplier, a)


#: sampling schemes the accountant knows: what the observer can see of who took part
SAMPLINGS: dict[str, Callable] = {
    "poisson": rdp_subsampled_gaussian,       # hidden Poisson sample (add/remove)
    "attributed": rdp_attributed_gaussian,    # participation seen (local view)
    "fixed-size": rdp_fixed_size_gaussian,    # hidden sample of fixed size (replace-one)
    "none": lambda q, z, orders=DEFAULT_ORDERS: rdp_gaussian(z, orders),   # no amplification (q ignored)
    "attributed-integer": rdp_attributed_integer,   # participation seen, a bound at integer orders (Skellam)
}


def rdp_curve(sampling: str, q: float, noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """The per-step RDP curve of one of :data:`SAMPLINGS`."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"unknown sampling {sampling!r}; use one of {', '.join(SAMPLINGS)}")
    return SAMPLINGS[sampling](q, noise_multiplier, orders)


# --------------------------------------------------------------------------
# RDP -> (ε, δ)
# --------------------------------------------------------------------------
def conversion_offset(orders, delta: float, conversion: str = "improved") -> np.ndarray:
    """The additive term c_α with ε = RDP(α) + c_α, for each order."""
    orders = np.asarray(orders, dtype=float)
    if conversion == "classic":  # Mironov 2017, Prop. 3
        return math.log(1.0 / delta) / (orders - 1.0)
    if conversion == "improved":  # Balle et al. 2020, Thm. 21 (as Opacus)
        return np.log((orders - 1.0) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)
    raise ValueError(f"unknown RDP conversion {conversion!r}; use 'improved' or 'classic'")


def conversion_floor(delta: float, orders) -> float:
    """min_α c_α(δ): what converting RDP to (ε, δ) alone costs on these
    orders.  No mechanism accounted on them reaches an ε below it (its RDP
    is non-negative), so a budget below it allows no round at any noise:
    the one place a refusal reads that floor from."""
    return float(np.min(conversion_offset(np.asarray(orders, dtype=float), delta)))


def rdp_to_epsilon(orders, rdp, delta: float, conversion: str = "improved") -> tuple[float, float]:
    """Convert accumulated RDP at fixed orders to (ε, δ)-DP:
    ``ε = min_α [RDP(α) + c_α(δ)]``.  Returns ``(epsilon, best_order)``."""
    a = _check_orders(orders)
    delta = check_delta(delta)
    r = np.asarray(rdp, dtype=float)
    eps = r + conversion_offset(a, delta, conversion)
    eps = np.where(np.isnan(eps), np.inf, eps)
    idx = int(np.argmin(eps))
    return float(max(eps[idx], 0.0)), float(a[idx])


def epsilon_on_grid(rdp, delta: float, orders: Sequence[float] = DEFAULT_ORDERS,
                    conversion: str = "improved") -> np.ndarray:
    """ε of composed RDP (..., len(orders)) on the grid of ``orders``,
    unrefined: an upper bound on :func:`account`'s searched ε (what it
    reports where the grid is an outside accountant's).  Vectorised over
    the leading axes (a plot's points, a ledger's rows); NaN reads as +inf."""
    rdp = np.asarray(rdp, dtype=float)
    with np.errstate(invalid="ignore"):
        e = np.min(rdp + conversion_offset(orders, delta, conversion), axis=-1)
    return np.where(np.isnan(e), np.inf, np.maximum(e, 0.0))


def sorted_unique(a) -> np.ndarray:
    """``np.unique(a)`` (flattened, sorted, each value once) without NumPy
    2's import of numpy.ma that its first call makes (a few ms of every
    ``paretofl design``)."""
    a = np.sort(np.asarray(a).ravel())
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def _legal(a: np.ndarray) -> np.ndarray:
    """Orders the curves accept: fractional ones above _FRAC_MAX rounded."""
    a = np.where(a > _FRAC_MAX, np.round(a), a)
    return a[(a > 1.0) & (a <= MAX_ORDER)]


def best_epsilon(total_rdp: Callable[[np.ndarray], np.ndarray], delta: float, conversion: str = "improved",
                 orders: Sequence[float] = DEFAULT_ORDERS, refine: bool = True) -> tuple[float, float]:
    """min over orders α > 1 of ``total_rdp(α) + c_α(δ)``: first on ``orders``,
    then (``refine``) by a search around the best order and past the ends of
    the grid while the minimum lies there (up to α = MAX_ORDER, down to
    α = 1 + 1e-6).  Every order gives a valid bound, so searching can only
    lower ε towards the RDP optimum, never below it.  Returns (ε, order)."""
    delta = check_delta(delta)
    a = sorted_unique(_check_orders(orders))
    e = np.asarray(total_rdp(a), dtype=float) + conversion_offset(a, delta, conversion)
    e = np.where(np.isnan(e), np.inf, e)
    for _ in range(24 if refine else 0):
        i = int(np.argmin(e))
        if not np.isfinite(e[i]):
            break
        interior = False
        if i == len(a) - 1 and a[i] < MAX_ORDER:
            new = a[i] * np.array([1.25, 1.6, 2.0, 3.0, 4.0])
        elif i == 0 and a[0] > 1 + 1e-6:
            new = 1 + (a[0] - 1) * np.array([0.8, 0.6, 0.4, 0.2, 0.1])
        else:
            lo, hi = a[max(i - 1, 0)], a[min(i + 1, len(a) - 1)]
            new = 1 + np.geomspace(lo - 1, hi - 1, 10)[1:-1]
            interior = (hi - 1) / (lo - 1) < 1.05     # a narrow bracket: stop once it gains nothing
        new = _legal(new)
        new = new[~np.any(new[:, None] == a[None, :], axis=1)]     # not np.isin: see sorted_unique
        if new.size == 0:
            break
        en = np.asarray(total_rdp(new), dtype=float) + conversion_offset(new, delta, conversion)
        en = np.where(np.isnan(en), np.inf, en)
        before = e[i]
        a, e = np.concatenate([a, new]), np.concatenate([e, en])
        k = np.argsort(a)
        a, e = a[k], e[k]
        if interior and before - e.min() <= 1e-6 * abs(before):
            break
    i = int(np.argmin(e))
    return float(max(e[i], 0.0)), float(a[i])


# --------------------------------------------------------------------------
# the accountant interface
# --------------------------------------------------------------------------
@dataclass
class RDPAccountant:
    """RDP accountant for a sequence of Gaussian steps.

    ``step`` records ``steps`` applications of a Gaussian mechanism with a
    noise multiplier, a sampling rate and a sampling scheme (one of
    :data:`SAMPLINGS`); different steps compose by adding their RDP curves
    (heterogeneous σ: Adap DP-FL, Adap DP-FL Eq. 10).  ``get_epsilon``
    minimises over orders with :func:`best_epsilon`.
    """

    orders: tuple[float, ...] = DEFAULT_ORDERS
    conversion: str = "improved"
    history: list = field(default_factory=list)

    name = "rdp"

    def __post_init__(self):
        self.orders = tuple(_check_orders(self.orders))
        conversion_offset(np.asarray(self.orders), 0.5, self.conversion)  # validates

    def step(self, noise_multiplier: float, sample_rate: float, steps: int = 1,
             sampling: str = "poisson") -> RDPAccountant:
        check_step(noise_multiplier, sample_rate, steps)
        if sampling not in SAMPLINGS:
            raise ValueError(f"unknown sampling {sampling!r}; use one of {', '.join(SAMPLINGS)}")
        entry = (float(noise_multiplier), float(sample_rate), int(steps), sampling)
        if self.history and self.history[-1][:2] == entry[:2] and self.history[-1][3] == sampling:
            z, q, n, s = self.history[-1]
            self.history[-1] = (z, q, n + int(steps), s)
        elif steps:
            self.history.append(entry)
        return self

    def rdp(self, orders=None) -> np.ndarray:
        """The composed RDP at ``orders`` (default: the accountant's).  Sums
        over all but the last history entry are kept per order, so a long
        history with many different σ costs only its new entries."""
        a = np.asarray(self.orders if orders is None else orders, dtype=float)
        cache = self.__dict__.setdefault("_sums", {})
        settled = max(len(self.history) - 1, 0)    # the last entry may still grow (step merges)
        total = np.zeros(len(a))
        for j, al in enumerate(a):
            s, k = cache.get(al, (0.0, 0))
            total[j] = s
        start = np.array([cache.get(al, (0.0, 0))[1] for al in a], dtype=int)
        for i, (z, q, n, smp) in enumerate(self.history[:settled]):
            need = start <= i
            if need.any():
                total[need] += n * rdp_curve(smp, q, z, a[need])
        for j, al in enumerate(a):
            cache[al] = (total[j], settled)
        if len(self.history) > settled:
            z, q, n, smp = self.history[-1]
            total = total + n * rdp_curve(smp, q, z, a)
        return total

    def get_epsilon(self, delta: float) -> float:
        return self.epsilon_and_order(delta)[0]

    def epsilon_and_order(self, delta: float) -> tuple[float, float]:
        if not self.history:
            return 0.0, math.nan
        return best_epsilon(self.rdp, delta, self.conversion, self.orders)


#: accountants offered beside RDP, by name: ``f(charges, delta) -> ε``, each registered by the module that holds
#: it (Opacus's PRV by :mod:`paretofl.fl.prv`, on the torch side); :func:`account` reaches them by ``accountant``
OTHER_ACCOUNTANTS: dict = {}


def account(charges, delta: float, orders: Sequence[float] = DEFAULT_ORDERS, conversion: str = "improved",
            fixed: bool = False, order: bool = False, accountant: str = "rdp"):
    """The accountant's one entry point: charges in, ε out.

    ``charges``: scalar :class:`Charge` objects (each a mechanism's, or read
    back from a record), composed by adding their RDP curves; ε is the
    minimum over orders α of RDP(α) + c_α(δ), searched from ``orders``
    (:func:`best_epsilon`).  ``fixed``: ``orders`` are the fixed grid of an
    outside accountant that reports ε on them unrefined (Flower's,
    Opacus's): ε on that grid, which is the larger of the two (the search
    starts from the grid's minimum and only goes down), so paretofl never
    says less than the framework it runs in.  ``order``: return (ε, the
    best order).  The design, the pre-trial's composition, the bridges and
    the views all reach ε here; the trainer's
    :class:`~paretofl.theory.ledger.Ledger` keeps the same accountant's
    running books, round by round.  ``accountant``: "rdp" (this module's),
    or one of :data:`OTHER_ACCOUNTANTS` (its ε, with no order)."""
    if accountant != "rdp":
        if fixed or conversion != "improved" or tuple(orders) != tuple(DEFAULT_ORDERS):
            raise ValueError(f"orders, conversion and fixed are the RDP accountant's: accountant {accountant!r} takes "
                             "none (use accountant rdp for an outside accountant's fixed orders)")
        if accountant not in OTHER_ACCOUNTANTS:
            known = ", ".join(["rdp", *OTHER_ACCOUNTANTS])
            raise ValueError(f"accountant {accountant!r} is not loaded here ({known}; Opacus's prv is loaded by "
                             "importing paretofl.fl.prv, which needs torch)")
        eps = float(OTHER_ACCOUNTANTS[accountant](list(charges), check_delta(delta)))
        return (eps, math.nan) if order else eps
    acct = RDPAccountant(orders=tuple(orders), conversion=conversion)
    for c in charges:
        acct.step(float(c.noise_multiplier), float(c.rate), int(c.steps), c.sampling)
    if not acct.history:
        eps, alpha = 0.0, math.nan
    elif fixed:     # the same value as epsilon_on_grid, with its order
        eps, alpha = rdp_to_epsilon(acct.orders, acct.rdp(), delta, conversion)
    else:
        eps, alpha = acct.epsilon_and_order(delta)
    return (eps, alpha) if order else eps


def compute_epsilon(q: float, noise_multiplier: float, steps: int, delta: float, sampling: str = "poisson",
                    **kwargs) -> float:
    """ε after ``steps`` Gaussian steps of noise multiplier
    ``noise_multiplier`` at sampling rate ``q`` (:func:`account` of one
    charge; ``kwargs``: its orders, conversion)."""
    return account([Charge(sampling, q, noise_multiplier, steps)], delta, **kwargs)


# --------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------
def max_steps(target_epsilon: float, q: float, noise_multiplier, delta: float,
              orders: Sequence[float] = DEFAULT_ORDERS, conversion: str = "improved", sampling: str = "poisson",
              prior=()):
    """The largest number of steps whose ε stays within ``target_epsilon``.

    ALI-DPFL's Algorithm 3 finds R_c by binary search on the steps; with RDP
    the answer has a closed form on a set of orders, because
    ε(T) = min_α [T·RDP(α) + c_α]: ``T_max = max_α floor((ε - c_α) / RDP(α))``.
    Vectorised over the noise multiplier; where the best order is the grid's
    largest (small budgets), larger orders are tried.  That is the answer on
    the order grid (what the design's search uses: fast, and conservative;
    :func:`max_steps_searched` gives the answer for the order-searched ε).
    Returns 0 where even one step exceeds the budget.  ``prior``: charges
    (:class:`Charge`) already spent, composed with the steps (a private
    pre-trial before the training).
    """
    return _max_steps_grid(target_epsilon, q, noise_multiplier, delta, orders, conversion, sampling, prior)


def max_steps_searched(target_epsilon: float, q: float, noise_multiplier, delta: float,
                       orders: Sequence[float] = DEFAULT_ORDERS, conversion: str = "improved",
                       sampling: str = "poisson", prior=()):
    """:func:`max_steps` for the order-searched ε that :func:`compute_epsilon`
    reports (a few more steps than on the order grid, at most), found by
    stepping up from the grid's answer: the most steps a trainer that
    stops at its reported ε takes."""
    t = _max_steps_grid(target_epsilon, q, noise_multiplier, delta, orders, conversion, sampling, prior)
    z_all = np.atleast_1d(np.asarray(noise_multiplier, dtype=float))
    t_all = np.atleast_1d(t).copy()

    def ok(z, n):
        if n == 0:
            return True
        acct = RDPAccountant(orders=tuple(orders), conversion=conversion)
        for c in prior:
            acct.step(float(c.noise_multiplier), float(c.rate), int(c.steps), c.sampling)
        return acct.step(z, q, int(n), sampling).get_epsilon(delta) <= target_epsilon

    for i, (z, lo) in enumerate(zip(z_all, t_all)):
        lo = int(lo)
        hi = lo + max(1, lo // 1000)
        while ok(z, hi):
            lo, hi = hi, hi + 2 * (hi - lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(z, mid) else (lo, mid)
        t_all[i] = lo
    return t_all if np.ndim(noise_multiplier) else int(t_all[0])


def _prior_rdp(prior, orders) -> np.ndarray:
    """The RDP of charges already spent, at ``orders``."""
    out = np.zeros(len(orders))
    for c in prior:
        out = out + int(c.steps) * rdp_curve(c.sampling, float(c.rate), float(c.noise_multiplier), orders)
    return out


#: RDP values computed, by (sampling, q, orders): noise multiplier -> (values, known); the searches of one design
#: (one per number of local epochs) ask the same (q, σ, α) about twice each.  Bounded: cleared when full.
_RDP_BOOK: dict = {}
_RDP_BOOK_MAX = 8192


def _rdp_columns(sampling, q, z: np.ndarray, a: np.ndarray, need: np.ndarray) -> np.ndarray:
    """The per-step RDP at the orders ``need`` marks (the others NaN), each
    exactly as :func:`rdp_curve` gives it with all of ``a`` asked (so a value
    computed once, for any subset of the orders, is the value: remembered in
    :data:`_RDP_BOOK`, but for the samplings whose RDP is a formula)."""
    q = float(q)            # the value computed with is the value the book is keyed by
    if sampling == "poisson":
        check_rate(q)
    if sampling in _CLOSED_FORM_SAMPLINGS:
        out = np.full((z.size, a.size), np.nan)
        out[:, need] = np.atleast_2d(rdp_curve(sampling, q, z, a[need]))
        return out
    key = (sampling, q, a.tobytes())
    book = _RDP_BOOK.setdefault(key, {})
    out = np.full((z.size, a.size), np.nan)
    missing = np.repeat(need[None, :], z.size, axis=0)
    for i, zi in enumerate(z.tolist()):
        got = book.get(zi)
        if got is not None:
            have = got[1] & need
            out[i, have] = got[0][have]
            missing[i] &= ~got[1]
    rows, cols = missing.any(axis=1), missing.any(axis=0)
    if rows.any():
        if sampling == "poisson":
            with np.errstate(over="ignore", under="ignore"):
                new = _rdp_matrix(q, z[rows], a, cols)
        else:                        # order by order: no order changes another
            new = np.full((int(rows.sum()), a.size), np.nan)
            new[:, cols] = np.atleast_2d(rdp_curve(sampling, q, z[rows], a[cols]))
        if sum(len(b) for b in _RDP_BOOK.values()) + int(rows.sum()) > _RDP_BOOK_MAX:
            _RDP_BOOK.clear()
            book = _RDP_BOOK.setdefault(key, {})
        for i, row in zip(np.flatnonzero(rows).tolist(), new):
            vals, known = book.get(float(z[i]), (np.full(a.size, np.nan), np.zeros(a.size, dtype=bool)))
            vals, known = vals.copy(), known.copy()
            vals[cols], known[cols] = row[cols], True
            book[float(z[i])] = (vals, known)
            out[i, need] = vals[need]
    return out


#: the passes of :func:`_lazy_rdp`: every 8th order first, then every 4th, 2nd and each of those still needed
_LAZY_STRIDES = (8, 4, 2, 1)
#: samplings whose RDP is a formula per order: every order at once costs less than choosing
_CLOSED_FORM_SAMPLINGS = ("none", "attributed")
#: the first pass computes no order above this (an integer order α costs α terms): the RDP below bounds them
_LAZY_FIRST_MAX = 512


def _lazy_rdp(sampling, q, z: np.ndarray, a: np.ndarray, head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The RDP curves :func:`_max_steps_grid` needs for the most steps,
    max_α head_α / RDP(α) (``head`` = ε - c_α), without computing every
    order: every 8th order up to 512 first; then, every 4th, every 2nd,
    every order, only those whose room could still reach the best so far.
    RDP(α) does not decrease with α, so the room at an order not computed
    is at most head_α over the RDP at the computed order below it (less a
    margin for round-off); an order is left out of a σ's curve only where
    that bound is below the σ's best room (or its head is not positive and
    the best is), so the most steps and the best order are those of all
    orders.  ``head`` may be (G, len(a)): the orders any of the G need.
    Samplings with a closed-form RDP: every order at once.
    Returns (rdp, known), both (len(z), len(a)): what is left out is NaN in
    rdp and False in known.  Orders not increasing, or a best room that is
    not finite: every order is computed."""
    n = a.size
    idx = np.arange(n)
    if n <= 2 * _LAZY_STRIDES[0] or np.any(np.diff(a) <= 0) or sampling in _CLOSED_FORM_SAMPLINGS:
        every = np.ones(n, dtype=bool)
        return _rdp_columns(sampling, q, z, a, every), np.ones((z.size, n), dtype=bool)
    first = (idx % _LAZY_STRIDES[0] == 0) & (a <= _LAZY_FIRST_MAX)    # the large orders cost the most
    rdp = _rdp_columns(sampling, q, z, a, first)
    known = np.repeat(first[None, :], z.size, axis=0)
    heads = np.atleast_2d(head)[:, None, :]        # (G, 1, A): several heads (budgets) share the orders
    for stride in _LAZY_STRIDES[1:]:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            room = np.where(known, heads / rdp, -np.inf)
        best = np.max(np.where(np.isnan(room), -1.0, room), axis=2)[..., None]           # (G, Z, 1)
        # the RDP at the computed order at or below each order, less its round-off
        below = np.maximum.accumulate(np.where(known, idx, -1), axis=1)
        lower = np.take_along_axis(rdp, below, axis=1) * (1 - 1e-9) - 1e-12
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            bound = np.where(lower > 0, heads / lower, np.inf)
        bound = np.where(heads <= 0, np.where(best > 0, -np.inf, np.inf), bound)
        need = ~known & np.any(~(bound < best) | ~np.isfinite(best), axis=0) & (idx % stride == 0)
        need |= ~known & np.any(~np.isfinite(best), axis=0)
        rows, cols = need.any(axis=1), need.any(axis=0)
        if rows.any():
            rdp[np.ix_(rows, cols)] = _rdp_columns(sampling, q, z[rows], a, cols)[:, cols]
            known[np.ix_(rows, cols)] = True
        if known.all():
            break
    return rdp, known


def rdp_for_most_steps(heads, q: float, noise_multiplier, orders, sampling: str = "poisson"):
    """The RDP curves (len(noise_multiplier), len(orders)) that the most
    steps max_α heads[g, α] / RDP(α) of every row g need (:func:`_lazy_rdp`),
    and a mask of the orders computed: the others (NaN) cannot hold the
    maximum of any row and noise multiplier."""
    z, _ = _check_noise(noise_multiplier)
    return _lazy_rdp(sampling, check_rate(q), z, _check_orders(orders), np.asarray(heads, dtype=float))


def within(target_epsilon: float, q: float, noise_multiplier: float, steps: int, offset, orders,
           sampling: str = "poisson") -> bool:
    """``min_α steps·RDP(α) + offset_α <= target`` (the answer on the grid of
    orders), computing the orders lazily: every 8th up to 512 first, then
    only those that could still meet it (RDP does not decrease with α, so
    an order's value is at least steps·RDP at the computed order below it,
    plus its offset); yes as soon as one does.  The answer is that of all
    orders (each computed exactly as with all asked)."""
    a = np.asarray(orders, dtype=float)
    off = np.asarray(offset, dtype=float)
    z, _ = _check_noise(noise_multiplier)
    n, idx = a.size, np.arange(a.size)
    if n <= 2 * _LAZY_STRIDES[0] or np.any(np.diff(a) <= 0):
        return float(np.min(steps * _rdp_columns(sampling, q, z, a, np.ones(n, dtype=bool))[0] + off)) <= target_epsilon
    known = (idx % _LAZY_STRIDES[0] == 0) & (a <= _LAZY_FIRST_MAX)
    rdp = _rdp_columns(sampling, q, z, a, known)[0]
    for stride in (*_LAZY_STRIDES[1:], None):
        vals = steps * rdp[known] + off[known]
        if np.any(np.isnan(vals)):              # as np.min: NaN anywhere is no
            return False
        if float(np.min(vals)) <= target_epsilon:
            return True
        if stride is None or known.all():
            return False
        below = np.maximum.accumulate(np.where(known, idx, -1))
        lower = np.maximum(rdp[below] * (1 - 1e-9) - 1e-12, 0.0)
        need = ~known & ~(steps * lower + off > target_epsilon) & (idx % stride == 0)
        if need.any():
            rdp[need] = _rdp_columns(sampling, q, z, a, need)[0, need]
            known |= need


def _max_steps_grid(target_epsilon, q, noise_multiplier, delta, orders, conversion, sampling, prior=()):
    _check_positive(target_epsilon, "target_epsilon")
    delta = check_delta(delta)
    a = _check_orders(orders)
    z, _ = _check_noise(noise_multiplier)
    c = conversion_offset(a, delta, conversion) + _prior_rdp(prior, a)
    n_first = a.size
    rdp, known = _lazy_rdp(sampling, q, z, a, target_epsilon - c)
    for _ in range(8):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            room = (target_epsilon - c) / rdp
        room = np.where(np.isnan(room), -1.0, room)
        room = np.where(known, room, -np.inf)    # left out: below the best (_lazy_rdp)
        at_top = (np.argmax(room, axis=1) == len(a) - 1) & (np.max(room, axis=1) >= 1)
        if not at_top.any() or a[-1] >= MAX_ORDER or len(orders) != len(DEFAULT_ORDERS):
            break
        new = _legal(a[-1] * np.array([1.5, 2.0, 3.0, 4.0]))
        a = np.concatenate([a, new])
        c = conversion_offset(a, delta, conversion) + _prior_rdp(prior, a)
        rdp = np.concatenate([rdp, np.atleast_2d(rdp_curve(sampling, q, noise_multiplier, new))], axis=1)
        known = np.concatenate([known, np.ones((z.size, new.size), dtype=bool)], axis=1)
    t = np.floor(np.max(room, axis=-1) * (1 + 1e-12))
    t = np.clip(t, 0, 1e15)
    # guard the floor against round-off: the answer must satisfy ε(T) <= target
    with np.errstate(invalid="ignore", over="ignore"):
        over = np.min(np.where(known, rdp * t[:, None] + c, np.inf), axis=-1) > target_epsilon
    if np.any(over & (t > 0)) and not known.all():     # an order left out may hold it: compute them all
        rest = ~known[:, :n_first]
        rows, cols = rest.any(axis=1), rest.any(axis=0)
        part = _rdp_columns(sampling, q, z[rows], a[:n_first], cols)[:, cols]
        rdp[np.ix_(rows, np.flatnonzero(cols))] = np.where(rest[np.ix_(rows, cols)], part,
                                                           rdp[np.ix_(rows, np.flatnonzero(cols))])
        with np.errstate(invalid="ignore", over="ignore"):
            over = np.min(rdp * t[:, None] + c, axis=-1) > target_epsilon
    t = np.where(over & (t > 0), t - 1, t)
    t = t.astype(np.int64)
    return t if np.ndim(noise_multiplier) else int(t[0])


def least_noise_guess(target_epsilon: float, q: float, steps: int, delta: float, bracket: tuple[float, float],
                      orders: Sequence[float] = DEFAULT_ORDERS, sampling: str = "poisson",
                      prior=()) -> float | None:
    """A guess, to about 1e-12 relative, at the least noise multiplier z in
    ``bracket`` = (z_lo, z_hi] at which :func:`max_steps` (with its default,
    the improved conversion) reaches ``steps``: its answer is
    max_α floor((ε - c_α)/RDP_α(z)), so the least z is min_α of the z where
    RDP_α(z) = (ε - c_α)/steps.  That root is found (regula falsi in log z,
    Illinois' variant) for the few orders that hold the most steps at z_hi,
    not for all.  A guess, never an answer: a caller checks it with
    :func:`max_steps` on either side (a bisection replayed against it, then
    its two ends asked; :func:`paretofl.recommendation._least_sigma`).
    None where it cannot be made (no order at z_hi reaches ``steps``, or the
    best is the grid's largest, past which :func:`max_steps` goes).  Where
    another order reaches ``steps`` below the root found (the orders with
    the most room at z_hi need not be those with the least root), it is
    solved again from there, up to three times.  Guesses of T beyond 10⁶
    steps are not made: there the most steps wobble with round-off, not
    only rise, as σ grows."""
    z_lo, z_hi = bracket
    if not (0 < z_lo < z_hi and math.isfinite(z_hi)) or not (1 <= steps <= _GUESS_MAX_STEPS):
        if not 0 < z_lo < z_hi:
            raise ValueError(f"least_noise_guess: need 0 < z_lo < z_hi, got {z_lo!r}, {z_hi!r}")
        return None
    a = _check_orders(orders)
    head = target_epsilon - conversion_offset(a, check_delta(delta), "improved") - _prior_rdp(prior, a)
    for _ in range(3):
        z = _least_noise_root(float(q), int(steps), z_lo, z_hi, a, head, sampling)
        if z is None:
            return None
        below = z * (1 - 1e-9)
        if not below > z_lo:
            return z
        rdp, known = _lazy_rdp(sampling, float(q), np.array([below]), a, head)
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(known[0] & (head > 0) & (rdp[0] > 0), head / rdp[0], -np.inf)
        if not room.max() >= steps:          # no order reaches steps just below: the root is the least
            return z
        z_hi = below
    return None


#: the most steps :func:`least_noise_guess` guesses for
_GUESS_MAX_STEPS = 10**6


def _least_noise_root(q: float, steps: int, z_lo: float, z_hi: float, a: np.ndarray, head: np.ndarray,
                      sampling: str) -> float | None:
    """:func:`least_noise_guess`'s root for the orders with the most room at z_hi (None: none reaches
    ``steps`` there, or the best is the grid's largest)."""
    rdp, known = _lazy_rdp(sampling, q, np.array([float(z_hi)]), a, head)
    with np.errstate(divide="ignore", invalid="ignore"):
        room = np.where(known[0] & (head > 0) & (rdp[0] > 0), head / rdp[0], -np.inf)
    need = float(steps)                     # max_steps' floor of room·(1 + 1e-12), less its guard: room >= steps
    if not room.max() >= need or int(np.argmax(room)) == a.size - 1:
        return None
    top = np.argsort(room)[::-1][:_GUESS_ORDERS]
    top = top[room[top] >= need]
    alpha, target = a[top], np.log(head[top] / need)
    x_lo, x_hi = np.full(top.size, math.log(z_lo)), np.full(top.size, math.log(z_hi))

    def f(x):              # log RDP_α(e^x) - log(head_α / need): falls with x
        with np.errstate(divide="ignore", over="ignore", under="ignore"):
            vals = np.diagonal(np.atleast_2d(rdp_curve(sampling, float(q), np.exp(x), alpha)))
            return np.log(vals) - target

    f_lo, f_hi = f(x_lo), f(x_hi)
    keep = np.isfinite(f_lo) & np.isfinite(f_hi) & (f_lo > 0) & (f_hi <= 0)
    if not keep.any():
        return None
    x_lo, x_hi, f_lo, f_hi, alpha, target = (v[keep] for v in (x_lo, x_hi, f_lo, f_hi, alpha, target))
    side = np.zeros(alpha.size)
    root = x_hi.copy()
    todo = np.ones(alpha.size, dtype=bool)
    for _ in range(60):
        x = (x_lo * f_hi - x_hi * f_lo) / (f_hi - f_lo)
        x = np.where(np.isfinite(x) & (x > x_lo) & (x < x_hi), x, 0.5 * (x_lo + x_hi))
        fx = np.where(todo, f(np.where(todo, x, x_hi)), 0.0)
        up = fx > 0                               # the root lies above x
        f_hi = np.where(up & (side > 0), 0.5 * f_hi, f_hi)     # Illinois: halve the end kept twice
        f_lo = np.where(~up & (side < 0), 0.5 * f_lo, f_lo)
        x_lo, f_lo = np.where(up, x, x_lo), np.where(up, fx, f_lo)
        x_hi, f_hi = np.where(up, x_hi, x), np.where(up, f_hi, fx)
        side = np.where(up, 1.0, -1.0)
        # found: the log RDP within round-off of its target (z to about 1e-14), or the bracket closed
        done = todo & ((np.abs(fx) <= 1e-13) | (x_hi - x_lo <= 1e-13))
        root = np.where(done, np.where(np.abs(fx) <= 1e-13, x, x_hi), root)
        todo &= ~done
        if not todo.any():
            return float(np.exp(np.min(root)))
    return None


#: how many orders :func:`least_noise_guess` solves for (those with the most room at its upper end)
_GUESS_ORDERS = 4


#: the noise multipliers :func:`calibrate_noise` searches, and its bisection's relative tolerance
CALIBRATION_BRACKET, CALIBRATION_RTOL = (1e-3, 1e5), 1e-7


def calibrate_noise(target_epsilon: float, q: float, steps: int, delta: float,
                    orders: Sequence[float] = DEFAULT_ORDERS, conversion: str = "improved",
                    sampling: str = "poisson") -> float:
    """The smallest noise multiplier with ε(q, σ, steps, δ) <= target
    (bisection over :data:`CALIBRATION_BRACKET` to :data:`CALIBRATION_RTOL`).

    Returns the upper end of the final bracket, so the result always meets
    the target.  Raises ``ValueError`` if even the bracket's top does not.
    """
    (lo, hi), rtol = CALIBRATION_BRACKET, CALIBRATION_RTOL
    _check_positive(target_epsilon, "target_epsilon")
    check_rate(q)
    if isinstance(steps, bool) or int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps}")

    def eps(z):
        return compute_epsilon(q, z, int(steps), delta, sampling, orders=orders, conversion=conversion)

    if eps(hi) > target_epsilon:
        raise ValueError(f"no noise multiplier up to {hi:g} reaches epsilon {target_epsilon:g}; raise the budget")
    if eps(lo) <= target_epsilon:
        return lo
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------
# what a round charges
# --------------------------------------------------------------------------
#: the orders Flower's RdpAccountant uses (dp-accounting's default orders):
#: a design for Flower's own accountant is searched on these, so that the ε
#: Flower reports is the ε the design reports (a coarser set of orders can
#: only give a larger ε for the same releases)
FLOWER_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
                                         + [128, 256, 512, 1024])


@dataclass(frozen=True)
class Charge:
    """What one round (or step) charges an accountant: ``steps``
    compositions of the per-step RDP curve of ``sampling`` (one of
    :data:`SAMPLINGS`) at ``rate`` and ``noise_multiplier`` (noise std over
    the sensitivity of what is released).  Each mechanism says its own
    (:meth:`paretofl.mechanisms.Mechanism.charge`); the ledgers, the design
    and the accountant read nothing else.  ``rate``, ``noise_multiplier``
    and ``steps`` may be arrays, one value per ledger (replicas, groups):
    :meth:`at` picks one ledger's."""

    sampling: str
    rate: object
    noise_multiplier: object
    steps: object = 1

    def __post_init__(self):
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"unknown sampling {self.sampling!r}; use one of {', '.join(SAMPLINGS)}")
        for name in ("rate", "noise_multiplier", "steps"):
            v = getattr(self, name)
            kind = np.asarray(v).dtype.kind
            if isinstance(v, (str, bytes, bool)) or kind not in "iuf":
                raise ValueError(f"a charge's {name} must be a number (or numbers), got {v!r}")
        steps = np.asarray(self.steps)
        if not np.all(np.isfinite(steps)) or np.any(steps != np.floor(steps)) or np.any(steps < 0):
            raise ValueError(f"a charge's steps must be whole numbers >= 0, got {self.steps!r}")

    @property
    def size(self) -> int | None:
        """How many ledgers the charge has values for (None: scalars)."""
        sizes = {np.size(v) for v in (self.rate, self.noise_multiplier, self.steps) if np.ndim(v)}
        if len(sizes) > 1:
            raise ValueError(f"a charge's arrays differ in length: {sorted(sizes)}")
        return sizes.pop() if sizes else None

    def at(self, i: int) -> Charge:
        """Ledger i's charge, as scalars."""
        pick = lambda v: v[i] if np.ndim(v) else v  # noqa: E731
        return Charge(self.sampling, float(pick(self.rate)), float(pick(self.noise_multiplier)),
                      int(pick(self.steps)))

    def rdp(self, orders: Sequence[float] = DEFAULT_ORDERS) -> np.ndarray:
        """RDP of the whole charge (``steps`` compositions) at ``orders``, for
        a charge of scalars; a noise multiplier of 0 (no noise) is +inf."""
        if float(self.noise_multiplier) == 0:
            return np.full(len(orders), np.inf)
        return int(self.steps) * rdp_curve(self.sampling, float(self.rate), float(self.noise_multiplier), orders)

    def epsilon(self, delta: float, rounds: int = 1, orders: Sequence[float] = DEFAULT_ORDERS) -> float:
        """ε of ``rounds`` compositions of this (scalar) charge."""
        return account([Charge(self.sampling, float(self.rate), float(self.noise_multiplier),
                               int(rounds) * int(self.steps))], delta, orders)


def charges_as_data(charges) -> list[dict]:
    """Charges as plain numbers (JSON, a store's or a design's record)."""
    return [{"sampling": c.sampling, "rate": float(c.rate), "noise_multiplier": float(c.noise_multiplier),
             "steps": int(c.steps)} for c in charges]


def charges_from_data(rows) -> list[Charge]:
    """Charges read back from :func:`charges_as_data`'s rows, each checked."""
    if not isinstance(rows, list):
        raise ValueError("recorded charges must be a list")
    out = []
    for r in rows:
        try:
            if isinstance(r["steps"], bool) or float(r["steps"]) != int(float(r["steps"])):
                raise ValueError("steps must be a whole number")
            c = Charge(str(r["sampling"]), float(r["rate"]), float(r["noise_multiplier"]), int(r["steps"]))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"a recorded charge is damaged: {r!r} ({exc})") from None
        if not (0 < c.rate <= 1) or not (c.noise_multiplier > 0) or c.steps < 1:
            raise ValueError(f"a recorded charge is out of range: {r!r}")
        out.append(c)
    return out

