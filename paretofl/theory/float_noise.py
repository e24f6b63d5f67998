"""What the engine's noise sampler costs in δ (docs/theory.md §5.4), without
torch: the sampler itself is :func:`paretofl.fl.engine.gaussian_pairs`.

Each noise value is one normal of a Box–Muller pair computed in float64
from two float64 uniforms; the uniform u₁ that sets the radius is re-drawn
within its lowest cell (u₁ ≤ 2⁻⁴⁰) up to NOISE_LEVELS times, so that it is
never below 2^U_MIN_LOG2 = 2⁻¹⁰¹³.  With exact uniforms, the pair is the
ideal one (two independent standard normals) except with probability
2^U_MIN_LOG2, and a run that draws n pairs is (ε, δ + δ_fp)-DP wherever the
same run with ideal noise is (ε, δ)-DP, δ_fp = (1 + e^ε)·n·2^U_MIN_LOG2.
"""

from __future__ import annotations

import math

__all__ = ["NOISE_CELL_BITS", "NOISE_LEVELS", "U_MIN_LOG2", "NOISE_BOUND", "MAX_PAIRS", "float_delta"]

#: Box–Muller's u₁ at or below 2^-NOISE_CELL_BITS (probability 2⁻⁴⁰) is
#: re-drawn within that cell, at most NOISE_LEVELS times
NOISE_CELL_BITS = 40
NOISE_LEVELS = 24
#: log₂ of the smallest u₁ the sampler uses (a float64 uniform U < 1 gives
#: 1 − U ≥ 2⁻⁵³): −1013, a normal float64 (above 2⁻¹⁰²²)
U_MIN_LOG2 = -(NOISE_CELL_BITS * NOISE_LEVELS + 53)
#: the largest |Z| the sampler gives, √(−2 ln 2^U_MIN_LOG2) ≈ 37.47
NOISE_BOUND = math.sqrt(-2.0 * U_MIN_LOG2 * math.log(2.0))
#: a ceiling on the Box–Muller pairs any one run draws, all its releases
#: together (10³⁰ pairs at 10¹² a second would take 3·10¹⁰ years):
#: float_delta's default n
MAX_PAIRS = 10**30


def float_delta(epsilon, pairs=MAX_PAIRS) -> float:
    """What the sampler's truncation adds to δ, an upper bound: a run that is
    (ε, δ)-DP with ideal Gaussian noise is (ε, δ + δ_fp)-DP with the
    engine's noise, δ_fp = (1 + e^ε)·n·2^U_MIN_LOG2 for n the pairs it may
    draw (docs/theory.md §5.4).  Computed in logarithms and rounded up:
    never 0 (the smallest positive float at least), inf where it overflows
    or ε is inf."""
    eps = float(epsilon)
    if math.isnan(eps) or eps < 0:
        raise ValueError(f"epsilon must be a non-negative number, got {epsilon!r}")
    n = float(pairs)
    if not n >= 0:
        raise ValueError(f"pairs must be a non-negative number, got {pairs!r}")
    if math.isinf(eps) or math.isinf(n):
        return math.inf
    if n == 0:
        return 0.0
    log_d = eps + math.log1p(math.exp(-eps)) + math.log(n) + U_MIN_LOG2 * math.log(2.0)
    if log_d > 709.0:
        return math.inf
    return max(math.exp(log_d) * (1 + 1e-12), 5e-324)
