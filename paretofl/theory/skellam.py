"""Distributed DP with Skellam noise and secure aggregation (docs/theory.md
§8): the sensitivity of a scaled, rounded update, the Skellam mechanism's
RDP, and the chance that a modular sum wraps.  numpy and math only.

The mechanism (Agarwal, Kairouz, Liu 2021, "The Skellam Mechanism for
Differentially Private Federated Learning", NeurIPS; Kairouz, Liu, Steinke
2021, "The Distributed Discrete Gaussian Mechanism for Federated Learning
with Secure Aggregation", ICML): each client clips its update to C,
rotates it (randomised Hadamard, padded to d' = 2^k coordinates), scales it
by γ (so its norm is at most c = γC, the *scaled clip*, in units of the
integer grid), rounds it to integers by conditional randomised rounding
(each coordinate up with probability its fractional part, redrawn until
the rounded vector's L2 norm is at most Δ₂), adds integer Skellam noise and
sends the result reduced modulo 2^bits to secure aggregation, which
releases only the modular sum.

* :func:`rounded_l2_bound` — Δ₂, the norm the rounded vector is conditioned
  to (Kairouz, Liu, Steinke 2021, Theorem 2 / Agarwal et al. 2021, Lemma
  4.1): Δ₂² = min(c² + d'/4 + √(2 ln(1/β))·(c + √d'/2), (c + √d')²); the
  unconditioned rounding exceeds it with probability at most β.  The second
  term holds always (each coordinate moves by less than 1), so conditioning
  always ends.
* :func:`rounded_l1_bound` — Δ₁ ≤ min(Δ₂², √d'·Δ₂) for an integer vector
  (|v_j| ≥ 1 on its support gives ‖v‖₁ ≤ ‖v‖₂²; Cauchy–Schwarz the other).
* :func:`skellam_rdp` — the RDP of adding Sk(μ) (Poisson(μ/2) −
  Poisson(μ/2), variance μ, per coordinate) to an integer vector moved by
  at most Δ₁ in L1 and Δ₂ in L2 (Agarwal et al. 2021, Theorem 3.5):
  ε(α) ≤ αΔ₂²/(2μ) + min(((2α − 1)Δ₂² + 6Δ₁)/(16μ²), 3Δ₁/(4μ)).
  Checked in the tests against the brute-force Rényi divergence of shifted
  Skellam pmfs.
* :func:`effective_sensitivity` — Δ = √(Δ₂² + 3Δ₁/2): for α ≥ 1 the bound
  above is at most α·Δ²/(2μ) (the min is at most 3Δ₁/(4μ) ≤ α·3Δ₁/(4μ)), the
  RDP of a Gaussian of noise multiplier √μ/Δ.  paretofl's noise is
  calibrated to this Δ, so a Skellam release of variance (zΔ)² is charged
  as a Gaussian of noise multiplier z (at integer orders: the theorem's).
* :func:`wrap_probability` — a Chernoff bound on one coordinate of the
  modular sum leaving [−2^(bits−1), 2^(bits−1)).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["padded_dim", "rounded_l2_bound", "rounded_l1_bound", "effective_sensitivity", "inflation",
           "skellam_rdp", "wrap_probability", "quantisation_variance", "DEFAULT_BETA", "MAX_BITS"]

#: TensorFlow Federated's default conditional-rounding bias, exp(−1/2)
DEFAULT_BETA = math.exp(-0.5)
#: the widest modular sum simulated (int64 holds the sum of 2^31 such values)
MAX_BITS = 32


def padded_dim(dim: int) -> int:
    """d' = the least power of two >= dim (the randomised Hadamard rotation's size)."""
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dim must be a positive whole number, got {dim}")
    return 1 << (dim - 1).bit_length()


def rounded_l2_bound(scaled_clip: float, dim: int, beta: float = DEFAULT_BETA) -> float:
    """Δ₂ of the conditional randomised rounding of a vector of norm <= c =
    ``scaled_clip`` in ``dim`` coordinates (already the padded d')."""
    c, d = float(scaled_clip), int(dim)
    if not (c > 0) or not (0 < beta < 1):
        raise ValueError(f"scaled_clip must be positive and beta in (0, 1), got {scaled_clip}, {beta}")
    high = c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / beta)) * (c + math.sqrt(d) / 2.0)
    return math.sqrt(min(high, (c + math.sqrt(d)) ** 2))


def rounded_l1_bound(l2: float, dim: int) -> float:
    """Δ₁ <= min(Δ₂², √d'·Δ₂) for an integer vector of L2 norm <= Δ₂."""
    return min(l2 * l2, math.sqrt(dim) * l2)


def effective_sensitivity(scaled_clip: float, dim: int, beta: float = DEFAULT_BETA) -> float:
    """Δ = √(Δ₂² + 3Δ₁/2), in units of the integer grid: the Gaussian
    sensitivity whose RDP dominates the Skellam mechanism's bound."""
    l2 = rounded_l2_bound(scaled_clip, dim, beta)
    return math.sqrt(l2 * l2 + 1.5 * rounded_l1_bound(l2, dim))


def inflation(scaled_clip: float, dim: int, beta: float = DEFAULT_BETA) -> float:
    """ι = Δ/c >= 1: how much rounding inflates the sensitivity (and so the
    noise, in units of C) at the same noise multiplier."""
    return effective_sensitivity(scaled_clip, dim, beta) / float(scaled_clip)


def skellam_rdp(alpha, l1: float, l2: float, variance: float):
    """Agarwal et al. 2021, Theorem 3.5: the RDP at order(s) ``alpha`` of
    Skellam noise of ``variance`` μ per coordinate on an integer vector moved
    by at most ``l1`` (L1) and ``l2`` (L2)."""
    a = np.asarray(alpha, dtype=float)
    mu = float(variance)
    return a * l2 * l2 / (2 * mu) + np.minimum(((2 * a - 1) * l2 * l2 + 6 * l1) / (16 * mu * mu), 3 * l1 / (4 * mu))


def quantisation_variance() -> float:
    """The variance randomised rounding adds to a coordinate: p(1 − p) <= 1/4."""
    return 0.25


def wrap_probability(bits: int, signal: float, rounding: float, noise_variance: float) -> float:
    """An upper bound on P(|S| >= 2^(bits−1)) for one coordinate of the sum
    S = A + R + N: A sub-Gaussian with variance proxy ``signal``² (the
    rotated sum of the clients' scaled updates: ‖Σ γx_i‖²/d' by Hoeffding
    over the rotation's random signs), R the rounding errors (sub-Gaussian,
    proxy ``rounding`` = m/4 for m independent roundings: the conditioning
    is ignored here, an estimate), N Skellam of ``noise_variance`` μ (moment
    generating function exp(μ(cosh λ − 1))).  Chernoff:
    2·min_λ exp(λ²(s² + r)/2 + μ(cosh λ − 1) − λt), t = 2^(bits−1)."""
    t = float(2 ** (int(bits) - 1))
    v = float(signal) ** 2 + float(rounding)
    mu = float(noise_variance)
    scale = math.sqrt(v + mu) if v + mu > 0 else 1.0
    lam = np.geomspace(1e-6, 50.0, 4000) / scale
    lam = lam[lam < 60]                                   # cosh(60) is about 5e25: no overflow
    log_p = lam * lam * v / 2 + mu * (np.cosh(lam) - 1) - lam * t
    return float(min(1.0, 2.0 * math.exp(float(np.min(log_p)))))
