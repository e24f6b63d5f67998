"""Privacy accounting for DP federated learning (theory §1 and §5).

Everything here is numpy only; nothing here imports torch or Opacus.

Contents
--------
* :func:`asymptotic_epsilon` -- the leakage model (1.1) of paper 001.
* :func:`rdp_subsampled_gaussian` -- Rényi DP of the Poisson-subsampled
  Gaussian mechanism (Mironov, Talwar, Zhang 2019, §3.3; formula (5.1)),
  computed in log space, for integer and fractional orders, vectorised over
  noise multipliers.
* :func:`rdp_to_epsilon` -- the classic (Mironov 2017, Prop. 3) and the
  improved (Balle et al. 2020, Thm. 21) RDP -> (ε, δ) conversions.
* :class:`RDPAccountant` -- the accountant interface (``step`` /
  ``get_epsilon``); steps with different σ compose (Adap DP-FL).  Opacus's
  PRV accountant has the same interface in :mod:`paretofl.fl.prv` (it needs
  torch, which this package never imports).
* :func:`calibrate_noise` (σ for a target ε) and :func:`max_steps` (the
  largest number of steps for a target ε; paper 002, Algorithm 3).
* :func:`mechanism_params` -- the mechanism views of the table in §5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "DEFAULT_ORDERS",
    "asymptotic_epsilon",
    "rdp_subsampled_gaussian",
    "rdp_to_epsilon",
    "compute_epsilon",
    "RDPAccountant",
    "calibrate_noise",
    "max_steps",
    "mechanism_params",
    "MECHANISMS",
]

#: RDP orders used unless the caller passes others: fractional orders where
#: small budgets are decided, integers up to 64, a few large ones for weak
#: privacy.  Fewer orders can only make ε larger (never under-reported).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.25, 2.5, 2.75, 3.5, 4.5, 5.5, 6.5, 7.5]
    + list(range(2, 17)) + list(range(18, 33, 2)) + list(range(36, 65, 4))
    + [80, 96, 128, 192, 256]
)
DEFAULT_ORDERS = tuple(sorted(float(a) for a in DEFAULT_ORDERS))



# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------
def _check_rate(q: float, name: str = "sampling rate q") -> float:
    q = float(q)
    if not (0.0 < q <= 1.0) or math.isnan(q):
        raise ValueError(f"{name} must lie in (0, 1], got {q}")
    return q


def _check_positive(x: float, name: str) -> float:
    x = float(x)
    if not (x > 0.0) or math.isinf(x):
        raise ValueError(f"{name} must be a positive finite number, got {x}")
    return x


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    return delta


def check_step(noise_multiplier: float, sample_rate: float, steps: int) -> None:
    """Validate one accountant charge (shared by every accountant)."""
    _check_positive(noise_multiplier, "noise multiplier")
    _check_rate(sample_rate)
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")


def _check_orders(orders: Iterable[float]) -> np.ndarray:
    a = np.asarray(list(orders), dtype=float)
    if a.ndim != 1 or a.size == 0 or np.any(~np.isfinite(a)) or np.any(a <= 1.0):
        raise ValueError("RDP orders must be a non-empty list of finite numbers > 1")
    return a


# --------------------------------------------------------------------------
# §1: the asymptotic leakage model
# --------------------------------------------------------------------------
def asymptotic_epsilon(sigma, rounds, q, n_clients, delta, c_p: float = 1.0):
    """Leakage model (1.1) of theory §1 (paper 001, Eq. 2, after Abadi et al.).

    ``ε_p = c_p · sqrt(q · T · log(1/δ) / N) / σ``.  Broadcasts over arrays.
    ``c_p`` is a free constant; by Lemma 2 it never changes which
    configurations are Pareto optimal.
    """
    sigma = np.asarray(sigma, dtype=float)
    rounds = np.asarray(rounds, dtype=float)
    q = np.asarray(q, dtype=float)
    out = c_p * np.sqrt(q * rounds * math.log(1.0 / _check_delta(delta)) / n_clients) / sigma
    return out if out.ndim else float(out)


# --------------------------------------------------------------------------
# §5: RDP of the Poisson-subsampled Gaussian
# --------------------------------------------------------------------------
def _lse(x: np.ndarray, axis: int, b: np.ndarray | None = None):
    """log Σ b·exp(x) along ``axis`` (b = ±1 signs, default 1); returns
    (value, sign).  A lean stand-in for scipy's logsumexp on the hot path."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    tot = np.sum(e if b is None else e * b, axis=axis)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(tot)) + np.squeeze(m, axis=axis), np.sign(tot)


_LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, 4097, dtype=float)))])


def _log_binom(n, k):
    """log C(n, k) for integer n, k (n <= 4096) from a table of log k!.
    (scipy.special is avoided on purpose: it costs 0.2 s of start-up.)"""
    n = np.asarray(n, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    if np.any(n > 4096):
        raise ValueError("integer RDP orders above 4096 are not supported")
    return _LOG_FACT[n] - _LOG_FACT[np.clip(k, 0, None)] - _LOG_FACT[np.clip(n - k, 0, None)]


def _log_a_int(q: float, z: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """log A_α for integer orders (formula 5.1): a finite binomial sum.

    ``A_α = Σ_k C(α,k) (1-q)^(α-k) q^k exp((k²-k)/(2σ²))``, summed in log space
    for all orders at once (terms beyond k = α are masked).  Returns an
    array of shape (len(z), len(alphas)).
    """
    amax = int(alphas.max())
    k = np.arange(amax + 1, dtype=float)
    A = alphas[:, None]
    with np.errstate(invalid="ignore"):
        base = _log_binom(A, k[None, :]) + k * math.log(q) + (A - k) * math.log1p(-q)
    base = np.where(k[None, :] <= A, base, -np.inf)            # (n_a, amax+1)
    quad = (k * k - k)[None, :] / (2.0 * z[:, None] ** 2)      # (n_z, amax+1)
    return _lse(base[None, :, :] + quad[:, None, :], axis=2)[0]


_QUAD_STEP = 0.25   # largest trapezoid spacing, in standard units of x/σ
_QUAD_MIN_SIGMA = 0.02  # below this, fractional orders are skipped (RDP = +inf)
_QUAD_TAIL = 13.0   # integrate this many standard units beyond the mass (e^-84)


def _log_a_frac(q: float, z: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """log A_α for fractional orders, by quadrature of its definition.

    ``A_α = E_{u~N(0,1)}[(1 + q·expm1(u/σ - 1/(2σ²)))^α]`` (Mironov, Talwar,
    Zhang 2019, §3.3, with x = σu).  The integrand is analytic in a strip of
    half-width πσ around the real axis, so the trapezoid rule converges
    exponentially, with relative error about exp(-2π²σ/h); the step
    h = min(0.25, 0.3σ) keeps that below e^-65.  To avoid cancellation the sum is taken of
    ``(…)^α - 1`` (whose mean is A_α - 1, since the first-order term has mean
    zero), in log space with signs, so that tiny and huge RDP values are both
    accurate.  Returns an array of shape (len(z), len(alphas)).
    """
    h = min(_QUAD_STEP, 0.3 * float(np.min(z)))
    top = _QUAD_TAIL + float(np.max(alphas)) / float(np.min(z))
    u = np.arange(-_QUAD_TAIL, top + h, h)                       # (n_u,)
    y = u[None, :] / z[:, None] - 1.0 / (2.0 * z[:, None] ** 2)  # (n_z, n_u)
    w = np.log1p(q * np.expm1(y))                                # log(1-q+q e^y)
    aw = alphas[None, :, None] * w[:, None, :]                   # (n_z, n_a, n_u)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_abs = np.where(aw > 0, aw + np.log(-np.expm1(-aw)), np.log(-np.expm1(aw)))
    sign = np.sign(aw)
    log_phi = -0.5 * u**2 - 0.5 * math.log(2 * math.pi) + math.log(h)
    log_s, s = _lse(log_abs + log_phi, axis=2, b=sign)
    # A_α - 1 >= 0 (Jensen); a negative sum is round-off around zero
    return np.where(s > 0, np.logaddexp(0.0, log_s), 0.0)


def rdp_subsampled_gaussian(q: float, noise_multiplier, orders: Sequence[float] = DEFAULT_ORDERS):
    """Per-step RDP of the Poisson-subsampled Gaussian mechanism (theory §5).

    Parameters
    ----------
    q : sampling rate in (0, 1].
    noise_multiplier : noise std / L2 sensitivity; a scalar or a 1-d array.
    orders : RDP orders α > 1 (integer and fractional).

    Returns
    -------
    ndarray of shape ``(len(orders),)`` for a scalar noise multiplier, else
    ``(len(noise_multiplier), len(orders))``.  RDP(α) = log(A_α)/(α-1).
    """
    q = _check_rate(q)
    a = _check_orders(orders)
    scalar = np.ndim(noise_multiplier) == 0
    z = np.atleast_1d(np.asarray(noise_multiplier, dtype=float))
    if np.any(~(z > 0)) or np.any(~np.isfinite(z)):
        raise ValueError("noise multiplier must be a positive finite number")
    if np.any(z < 1e-6):
        raise ValueError("noise multiplier below 1e-6: no meaningful privacy (epsilon is astronomical)")
    with np.errstate(over="ignore", under="ignore"):  # σ² may overflow to inf: RDP -> 0, correctly
        out = _rdp_matrix(q, z, a)
    return out[0] if scalar else out


def _rdp_matrix(q: float, z: np.ndarray, a: np.ndarray) -> np.ndarray:
    out = np.empty((z.size, a.size))
    if q == 1.0:
        out[:] = a[None, :] / (2.0 * z[:, None] ** 2)
    else:
        is_int = a == np.floor(a)
        for block in (is_int & (a <= 64), is_int & (a > 64)):  # pad each block to its own size
            if block.any():
                out[:, block] = _log_a_int(q, z, a[block]) / (a[block] - 1.0)
        frac = ~is_int
        if frac.any():
            # below σ = 0.02 the quadrature grid grows as 1/σ²; there ε is
            # astronomically large anyway, so fractional orders are reported
            # as +inf (the bound stays valid: ε minimises over the others)
            out[:, frac] = np.inf
            ok = z >= _QUAD_MIN_SIGMA
            if ok.any():
                out[np.ix_(ok, frac)] = _log_a_frac(q, z[ok], a[frac]) / (a[frac] - 1.0)
    return np.maximum(out, 0.0)  # RDP is non-negative; clears -1e-17 round-off


def _conversion_offset(orders: np.ndarray, delta: float, conversion: str) -> np.ndarray:
    """The additive term c_α with ε = RDP(α) + c_α, for each order."""
    if conversion == "classic":  # Mironov 2017, Prop. 3
        return math.log(1.0 / delta) / (orders - 1.0)
    if conversion == "improved":  # Balle et al. 2020, Thm. 21 (as Opacus)
        return np.log((orders - 1.0) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)
    raise ValueError(f"unknown RDP conversion {conversion!r}; use 'improved' or 'classic'")


def rdp_to_epsilon(orders, rdp, delta: float, conversion: str = "improved") -> tuple[float, float]:
    """Convert accumulated RDP to (ε, δ)-DP: ``ε = min_α [RDP(α) + c_α(δ)]``.

    Returns ``(epsilon, best_order)``.
    """
    a = _check_orders(orders)
    delta = _check_delta(delta)
    r = np.asarray(rdp, dtype=float)
    eps = r + _conversion_offset(a, delta, conversion)
    eps = np.where(np.isnan(eps), np.inf, eps)
    idx = int(np.argmin(eps))
    return float(max(eps[idx], 0.0)), float(a[idx])


# --------------------------------------------------------------------------
# the accountant interface
# --------------------------------------------------------------------------
@dataclass
class RDPAccountant:
    """RDP accountant for (possibly heterogeneous) subsampled Gaussian steps.

    ``step`` records ``steps`` applications of the mechanism with a given
    noise multiplier and sampling rate; steps with different σ compose by
    adding their RDP curves (paper 003, Eq. 10).
    """

    orders: tuple[float, ...] = DEFAULT_ORDERS
    conversion: str = "improved"
    history: list = field(default_factory=list)

    name = "rdp"

    def __post_init__(self):
        self.orders = tuple(_check_orders(self.orders))
        _conversion_offset(np.asarray(self.orders), 0.5, self.conversion)  # validates

    def step(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> "RDPAccountant":
        check_step(noise_multiplier, sample_rate, steps)
        if self.history and self.history[-1][:2] == (float(noise_multiplier), float(sample_rate)):
            z, q, n = self.history[-1]
            self.history[-1] = (z, q, n + int(steps))
        elif steps:
            self.history.append((float(noise_multiplier), float(sample_rate), int(steps)))
        return self

    def rdp(self) -> np.ndarray:
        total = np.zeros(len(self.orders))
        for z, q, n in self.history:
            total += n * rdp_subsampled_gaussian(q, z, self.orders)
        return total

    def get_epsilon(self, delta: float) -> float:
        if not self.history:
            return 0.0
        return rdp_to_epsilon(self.orders, self.rdp(), delta, self.conversion)[0]


def compute_epsilon(q: float, noise_multiplier: float, steps: int, delta: float, **kwargs) -> float:
    """ε (RDP accountant) after ``steps`` compositions of the subsampled
    Gaussian (q, σ); ``kwargs`` go to :class:`RDPAccountant` (orders, conversion)."""
    return RDPAccountant(**kwargs).step(noise_multiplier, q, steps).get_epsilon(delta)


# --------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------
def max_steps(
    target_epsilon: float,
    q: float,
    noise_multiplier,
    delta: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
    conversion: str = "improved",
):
    """The largest number of steps whose ε stays within ``target_epsilon``.

    Paper 002's Algorithm 3 finds R_c by binary search on the steps; with RDP
    the answer has a closed form, because ε(T) = min_α [T·RDP(α) + c_α]:
    ``T_max = max_α floor((ε - c_α) / RDP(α))``.  Vectorised over the noise
    multiplier.  Returns 0 where even one step exceeds the budget.
    """
    _check_positive(target_epsilon, "target epsilon")
    delta = _check_delta(delta)
    a = _check_orders(orders)
    rdp = rdp_subsampled_gaussian(q, noise_multiplier, a)
    c = _conversion_offset(a, delta, conversion)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        room = (target_epsilon - c) / rdp
    room = np.where(np.isnan(room), -1.0, room)
    t = np.floor(np.max(room, axis=-1) * (1 + 1e-12))
    t = np.clip(t, 0, 1e15)
    # guard the floor against round-off: the answer must satisfy ε(T) <= target
    with np.errstate(invalid="ignore", over="ignore"):
        over = np.min(np.atleast_2d(rdp) * np.atleast_1d(t)[:, None] + c, axis=-1) > target_epsilon
    t = np.where(np.reshape(over, np.shape(t)) & (t > 0), t - 1, t)
    return t.astype(np.int64) if np.ndim(t) else int(t)


def calibrate_noise(
    target_epsilon: float,
    q: float,
    steps: int,
    delta: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
    conversion: str = "improved",
    lo: float = 1e-3,
    hi: float = 1e4,
    rtol: float = 1e-7,
) -> float:
    """The smallest noise multiplier with ε(q, σ, steps, δ) <= target (bisection).

    Returns the upper end of the final bracket, so the result always meets
    the target.  Raises ``ValueError`` if even ``hi`` does not.
    """
    _check_positive(target_epsilon, "target epsilon")
    _check_rate(q)
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps}")

    def eps(z):
        return rdp_to_epsilon(orders, steps * rdp_subsampled_gaussian(q, z, orders), delta, conversion)[0]

    if eps(hi) > target_epsilon:
        raise ValueError(
            f"no noise multiplier up to {hi:g} reaches epsilon {target_epsilon:g}; raise the budget"
        )
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
# mechanism views (table of §5)
# --------------------------------------------------------------------------
MECHANISMS = ("aggregate", "local", "sample")


def mechanism_params(view: str, q: float, sigma: float, n_clients: int | None = None) -> tuple[float, float]:
    """(sampling rate, noise multiplier) to charge the accountant, per §5.

    * ``aggregate`` -- client-level DP of the sum the server releases: each of
      the selected clients adds N(0, σ²C²), so the sum carries noise σC√(qN)
      in expectation.  paretofl makes this rigorous by *topping up*: whenever
      the Poisson cohort |S| is smaller than qN, the server adds the missing
      N(0, (qN - |S|)σ²C²) before release, so the released sum always carries
      at least σC√(qN); the accountant charges noise multiplier σ√(qN).
      Requires qN >= 1 (below that the aggregate view is not meaningful).
    * ``local`` -- client-level DP of each update the server sees: (q, σ).
    * ``sample`` -- sample-level DP-SGD inside a client: (batch/|D_i|, σ),
      charged once per local iteration (``q`` is then the batch rate).

    NbAFL (paper 004) calibrates its own Gaussian mechanism: see
    :func:`paretofl.theory.convergence.nbafl_sigma_uplink`.
    """
    q = _check_rate(q)
    sigma = _check_positive(sigma, "sigma")
    if view == "aggregate":
        if n_clients is None or int(n_clients) < 1:
            raise ValueError("the aggregate view needs the number of clients N >= 1")
        m = q * int(n_clients)
        if m < 1.0:
            raise ValueError(f"aggregate view needs q*N >= 1 (expected cohort), got q*N = {m:g}")
        return q, sigma * math.sqrt(m)
    if view in ("local", "sample"):
        return q, sigma
    raise ValueError(f"unknown mechanism view {view!r}; use one of {', '.join(MECHANISMS)}")
