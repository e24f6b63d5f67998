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
  ε(α) ≤ αΔ₂²/(2μ) + min(((2α − 1)Δ₂² + 6Δ₁)/(4μ²), 3Δ₁/(2μ)) (in the
  variance μ; the authors' own accounting code, google-research/federated
  ``distributed_dp/accounting_utils.py``, has the same in these units).
  Checked in the tests against the brute-force Rényi divergence of shifted
  Skellam pmfs.
* :func:`effective_sensitivity` — Δ with Δ² = Δ₂² + min(3Δ₁,
  (Δ₂² + 3Δ₁)/(z²Δ₂²)): for α ≥ 1 and μ = (zΔ)² the bound above is at most
  α·Δ²/(2μ), the RDP of a Gaussian of noise multiplier z = √μ/Δ.  The
  first term: the min is at most 3Δ₁/(2μ) ≤ α·3Δ₁/(2μ).  The second:
  ((2α − 1)Δ₂² + 6Δ₁)/(4μ²) ≤ α(Δ₂² + 3Δ₁)/(2μ²) ≤ α(Δ₂² + 3Δ₁)/(2μ·z²Δ₂²)
  (μ ≥ z²Δ₂²), which is α·X/(2μ) at X = (Δ₂² + 3Δ₁)/(z²Δ₂²).  paretofl's
  noise is calibrated to this Δ, so a Skellam release of variance (zΔ)²
  is charged as a Gaussian of noise multiplier z (at integer orders: the
  theorem's).  Without z, the first term alone (valid at every z).
* :func:`wrap_probability` — a Chernoff bound on one coordinate of the
  modular sum leaving [−2^(bits−1), 2^(bits−1)).
* :func:`coordinate_error` — what a coordinate of the released sum carries
  beyond the clients' updates, against a central mechanism's noise at the
  same noise multiplier z (docs/theory.md §8, "the design"): the Skellam
  noise (calibrated to the inflated sensitivity, and set for the fewest
  survivors), the rounding, and the wraps; :func:`best_scaled_clip` the
  scaled clip c that makes it least at a bit width.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["padded_dim", "rounded_l2_bound", "rounded_l1_bound", "effective_sensitivity", "inflation",
           "skellam_rdp", "wrap_probability", "quantisation_variance", "n_min", "coordinate_error", "best_scaled_clip",
           "DEFAULT_BETA", "MAX_BITS", "WRAP_TARGET"]

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


def effective_sensitivity(scaled_clip: float, dim: int, beta: float = DEFAULT_BETA, z: float | None = None) -> float:
    """Δ, in units of the integer grid: the Gaussian sensitivity whose RDP
    at noise multiplier z dominates the Skellam mechanism's bound at
    variance (zΔ)²: Δ² = Δ₂² + min(3Δ₁, (Δ₂² + 3Δ₁)/(z²Δ₂²)) (the module's
    docstring proves both); without z (or z = 0), Δ₂² + 3Δ₁."""
    l2 = rounded_l2_bound(scaled_clip, dim, beta)
    l1 = rounded_l1_bound(l2, dim)
    extra = 3.0 * l1
    if z is not None and float(z) > 0:
        extra = min(extra, (l2 * l2 + 3.0 * l1) / (float(z) ** 2 * l2 * l2))
    return math.sqrt(l2 * l2 + extra)


def inflation(scaled_clip: float, dim: int, beta: float = DEFAULT_BETA, z: float | None = None) -> float:
    """ι = Δ/c >= 1: how much rounding inflates the sensitivity (and so the
    noise, in units of C) at the same noise multiplier."""
    return effective_sensitivity(scaled_clip, dim, beta, z) / float(scaled_clip)


def skellam_rdp(alpha, l1: float, l2: float, variance: float):
    """Agarwal et al. 2021, Theorem 3.5: the RDP at order(s) ``alpha`` of
    Skellam noise of ``variance`` μ per coordinate on an integer vector moved
    by at most ``l1`` (L1) and ``l2`` (L2)."""
    a = np.asarray(alpha, dtype=float)
    mu = float(variance)
    return a * l2 * l2 / (2 * mu) + np.minimum(((2 * a - 1) * l2 * l2 + 6 * l1) / (4 * mu * mu), 3 * l1 / (2 * mu))


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


def n_min(cohort: float, dropout: float) -> int:
    """⌈(1 − dropout)·m⌉, at least 1: the fewest survivors of a cohort of m
    (selected, or expected) a round releases with, the clients the noise is
    split among."""
    return max(1, math.ceil((1.0 - float(dropout)) * float(cohort) - 1e-9))


def coordinate_error(bits: int, scaled_clip: float, padded: int, beta: float, cohort: float, z: float,
                     dropout: float = 0.0) -> dict:
    """The error a coordinate of the dequantised sum carries, in units of
    the integer grid squared, for a cohort of m = ``cohort`` clients (its
    expected size), noise multiplier z on the sum and each client's update
    scaled to norm c = ``scaled_clip`` over d' = ``padded`` coordinates:

    * ``noise``: m·μ/n_min, μ = (zΔ)², n_min = ⌈(1 − dropout)·m⌉: the
      Skellam variance when every client survives (each adds μ/n_min);
    * ``rounding``: m/4, each client's rounding (variance <= 1/4 a coordinate);
    * ``wrap_probability``: :func:`wrap_probability` with the signal's
      proxy (c·m)²/d' (every update aligned: the worst case, as TensorFlow
      Federated's scale heuristic takes it), and ``wrap``: 4^bits times it
      (a wrapped coordinate is off by 2^bits);
    * ``ratio``: their sum over (z·c)², a central mechanism's variance at
      the same z: the factor the utility bound's noise term takes."""
    m, z, c = float(cohort), float(z), float(scaled_clip)
    if not (m >= 1 and z > 0 and c > 0):
        raise ValueError(f"coordinate_error needs a cohort >= 1, z > 0 and a positive scaled clip, got {m}, {z}, {c}")
    mu = (z * effective_sensitivity(c, padded, beta, z)) ** 2
    noise, rounding = m * mu / n_min(m, dropout), m * quantisation_variance()
    p = wrap_probability(bits, c * m / math.sqrt(padded), rounding, noise)
    wrap = 4.0 ** int(bits) * p
    return {"noise": noise, "rounding": rounding, "wrap_probability": p, "wrap": wrap,
            "ratio": (noise + rounding + wrap) / (z * c) ** 2, "inflation": math.sqrt(mu) / (z * c)}


#: the most a coordinate of the sum may wrap in a round where a design chooses the scale (TensorFlow
#: Federated's default ``modclip_prob``)
WRAP_TARGET = 1e-4


def best_scaled_clip(bits: int, padded: int, beta: float, cohort: float, z: float, dropout: float = 0.0,
                     wrap_target: float = WRAP_TARGET, points: int = 160) -> tuple[float, dict] | None:
    """The scaled clip c in [2^-6, 2^(bits−1)] (``points`` geometric) whose
    :func:`coordinate_error` ratio is least among those whose wrap
    probability is at most ``wrap_target``, and that error; None where
    none is.  A larger c shrinks rounding's share (and its inflation of the
    sensitivity); it also widens the sum, which then wraps.  Remembered (a
    design choosing its local work asks the same cohorts and z once per K)."""
    best = _best_scaled_clip(int(bits), int(padded), float(beta), float(cohort), float(z), float(dropout),
                             float(wrap_target), int(points))
    return None if best is None else (best[0], dict(best[1]))


@functools.lru_cache(maxsize=1024)
def _best_scaled_clip(bits, padded, beta, cohort, z, dropout, wrap_target, points):
    best = None
    for c in np.geomspace(2.0 ** -6, 2.0 ** (int(bits) - 1), int(points)):
        e = coordinate_error(bits, float(c), padded, beta, cohort, z, dropout)
        if e["wrap_probability"] <= wrap_target and (best is None or e["ratio"] < best[1]["ratio"]):
            best = (float(c), e)
    return best
