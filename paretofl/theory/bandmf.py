"""Banded matrix factorization of the prefix sums (DP-FTRL; docs/theory.md §7).

Write the T rounds' summed clipped updates as the rows of G (T × d).  A
model trained by (momentum-free) SGD on them is a post-processing of the
prefix sums AG, A the T × T lower-triangular matrix of ones.  Factor
A = BC with C lower-triangular and release C G + Z, Z Gaussian: then
B(CG + Z) = AG + BZ, and equivalently the server adds to round t's sum the
t-th row of C⁻¹Z (Kairouz et al. 2021; Denisov et al. 2022).

paretofl's strategy C is Toeplitz, b-banded and closed-form: the square
root of A is lower-triangular Toeplitz with coefficients
c_k = binom(2k, k) / 4^k = 1, 1/2, 3/8, 5/16, ... (Fichtenberger, Henzinger
and Upadhyay 2023, "Constant matters: fine-grained error bound on
differentially private continual observation", §3); paretofl keeps the
first b and scales them to unit norm, so every column of C has norm at
most 1 (exactly 1 for the columns that are not cut by the end of the run).
b = 1 is C = I: independent noise every round, DP-FedAvg.

* Sensitivity: a client that joins rounds at least b apart touches columns
  of C at least b apart, and those have disjoint supports (C is b-banded),
  so their contributions are orthogonal: k participations move CG by at
  most √k C_clip (Choquette-Choo et al. 2023, "(Amplified) banded matrix
  factorization", Theorem 2 with b-min-separation).
* Error: the noise on the model after t rounds is (BZ)_t; averaged over the
  run its squared size is ‖B‖²_F / T per unit of Z's variance.  For
  independent noise (b = 1) that is (T + 1)/2, so
  :func:`error_ratio` ‖B‖²_F / (T(T + 1)/2) is how much of DP-FedAvg's
  noise term a band of b keeps at the same z (1 at b = 1).

Toeplitz matrices make all of it a matter of coefficient series: C⁻¹ is
lower-triangular Toeplitz with the inverse series d of c (a recurrence over
the last b − 1 terms), AC⁻¹ with its prefix sums, so the error of every
T up to a cap costs O(T·b).  numpy only.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["coefficients", "inverse_coefficients", "strategy", "error_ratio", "error_ratios", "participations",
           "round_noise_factors", "MAX_BANDS"]

#: the most bands paretofl's trainer keeps noise for (b − 1 draws of the model's size per replica)
MAX_BANDS = 4096


def _bands(b) -> int:
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 1 <= int(b) <= MAX_BANDS:
        raise ValueError(f"bands must be an integer in [1, {MAX_BANDS}], got {b!r}")
    return int(b)


@lru_cache(maxsize=256)
def _coefficients(b: int) -> tuple:
    c = np.ones(b)
    for k in range(1, b):                         # binom(2k, k)/4^k = c_{k-1} (2k - 1)/(2k)
        c[k] = c[k - 1] * (2 * k - 1) / (2 * k)
    return tuple(c / np.linalg.norm(c))


def coefficients(b: int) -> np.ndarray:
    """The strategy's b band coefficients c_0..c_{b-1}: binom(2k, k)/4^k
    scaled to unit norm (a full column of C has norm 1)."""
    return np.array(_coefficients(_bands(b)))


def inverse_coefficients(b: int, rounds: int) -> np.ndarray:
    """The first ``rounds`` coefficients d of C⁻¹ (lower-triangular Toeplitz):
    d_0 = 1/c_0, d_t = −(Σ_{j=1}^{min(t, b-1)} c_j d_{t-j}) / c_0."""
    c = coefficients(b)
    T = int(rounds)
    d = np.zeros(T)
    d[0] = 1.0 / c[0]
    for t in range(1, T):
        m = min(t, b - 1)
        d[t] = -np.dot(c[1:m + 1], d[t - 1::-1][:m]) / c[0]
    return d


def strategy(rounds: int, b: int) -> np.ndarray:
    """The T × T strategy matrix C (dense; for checks and small T)."""
    c = coefficients(b)
    T = int(rounds)
    C = np.zeros((T, T))
    for j, v in enumerate(c[:T]):
        C += np.diag(np.full(T - j, v), -j)
    return C


def error_ratios(b: int, t_max: int) -> np.ndarray:
    """:func:`error_ratio` of every T = 1..t_max at once (array of t_max)."""
    return np.array(_error_ratios(_bands(b), int(t_max)))


@lru_cache(maxsize=256)
def _error_ratios(b: int, T: int) -> np.ndarray:
    """Remembered: a design asks the same (b, T) for every cohort and number of local epochs it searches."""
    e = np.cumsum(inverse_coefficients(b, T))      # the coefficients of B = AC⁻¹ (Toeplitz)
    e2 = e * e
    j = np.arange(T)
    Tp = np.arange(1, T + 1, dtype=float)
    frob = Tp * np.cumsum(e2) - np.cumsum(j * e2)   # ‖B_T‖²_F = Σ_{j<T} (T − j) e_j²
    out = frob / (Tp * (Tp + 1) / 2)
    out.flags.writeable = False
    return out


def error_ratio(b: int, rounds: int) -> float:
    """‖AC⁻¹‖²_F / (T(T + 1)/2) for the b-banded strategy over T rounds:
    the share of independent noise's error on the prefix sums that remains
    at the same noise multiplier (1 at b = 1; below 1 once T is a few b)."""
    return float(error_ratios(b, rounds)[-1])


def participations(rounds: int, b: int) -> int:
    """k = ⌈T/b⌉: the most rounds one client joins when it joins every b-th
    round (the clients of group 0 under cyclic participation)."""
    return -(-int(rounds) // int(b))


def round_noise_factors(b: int, rounds: int) -> np.ndarray:
    """The std of the noise each round's sum carries, per unit of Z's std:
    the norms of the rows of C⁻¹ (1 at b = 1; above 1 otherwise, the price
    of the noise cancelling over the rounds)."""
    d = inverse_coefficients(b, rounds)
    return np.sqrt(np.cumsum(d * d))

