"""Utility bound, efficiency and the closed-form Pareto sets (docs/theory.md §1–§3).

The bi-objective problem of Gu et al. (Gu et al., arXiv 2312.16554, Eq. 6–8):
minimise (ε_u, ε_p) over σ ∈ [σ_min, σ_max], q, T ∈ [T_min, T̃].

By Lemma 2 only strictly increasing transforms of the objectives matter, so
this module works with the *normalised* objectives

    u(σ, T) = 1/T + σ²/κ'          (utility bound (1.2) divided by A, minus D/A)
    p(σ, T) = √T / σ               (leakage (1.1) up to a constant factor)

with κ' = qN/κ, κ = B/A.  Every Pareto set below is the same for the
unnormalised objectives; the constants only place the front in objective
space (:func:`objective_space`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = [
    "utility_bound",
    "efficiency",
    "rounds_for_time",
    "relation_rounds",
    "relation_sigma",
    "theorem2_front",
    "Piece",
    "Box",
    "ParetoSet",
    "theorem3",
    "integer_pareto_intervals",
    "objective_space",
    "PIECE_KINDS",
]

PIECE_KINDS = ("rounds_min", "sigma_max", "relation", "rounds_max", "sigma_min")


# --------------------------------------------------------------------------
# §1: objectives and the efficiency constraint
# --------------------------------------------------------------------------
def utility_bound(sigma, rounds, q, n_clients, kappa, A: float = 1.0, D: float = 0.0):
    """Upper bound (1.2) on the utility loss: ``A/T + B σ²/(qN) + D`` with B = κA.

    Gu et al., Lemma 1 (after Zhang et al. 2022, Cor. 3.2.1).  With the
    defaults (A = 1, D = 0) this is the bound in units of A, which is what
    paretofl reports as ``utility_bound``.
    """
    sigma = np.asarray(sigma, dtype=float)
    rounds = np.asarray(rounds, dtype=float)
    out = A / rounds + A * kappa * sigma**2 / (np.asarray(q, dtype=float) * n_clients) + D
    return out if out.ndim else float(out)


def efficiency(rounds, round_time: float):
    """Training time ε_e = T · t_r (Gu et al., Eq. 4)."""
    return np.asarray(rounds, dtype=float) * round_time


def rounds_for_time(time_budget: float, round_time: float) -> int:
    """T̃ = floor(ε̃_e / t_r): the most rounds a time budget allows."""
    if not (time_budget > 0 and round_time > 0) or math.isinf(time_budget) or math.isinf(round_time):
        raise ValueError("time budget and round time must be positive finite numbers")
    t = int(math.floor(time_budget / round_time * (1 + 1e-12)))
    if t < 1:
        raise ValueError(
            f"a time budget of {time_budget:g} allows no round of {round_time:g}; raise the budget"
        )
    return t


# --------------------------------------------------------------------------
# §2: Theorem 2
# --------------------------------------------------------------------------
def relation_rounds(sigma, q, n_clients, kappa):
    """T on the Pareto relation κσ²T = qN (2.1)."""
    return np.asarray(q, dtype=float) * n_clients / (kappa * np.asarray(sigma, dtype=float) ** 2)


def relation_sigma(rounds, q, n_clients, kappa):
    """σ on the Pareto relation κσ²T = qN (2.1); formula (4.1) for a client."""
    return np.sqrt(np.asarray(q, dtype=float) * n_clients / (kappa * np.asarray(rounds, dtype=float)))


def theorem2_front(rounds, n_clients, kappa, delta, A: float = 1.0, D: float = 0.0, c_p: float = 1.0):
    """The Theorem 2 front in objective space, parameterised by T.

    Along (2.1): ε_u = 2A/T + D and ε_p = c_p √(κ log(1/δ)) T / N, so
    (ε_u - D) ε_p = 2 A c_p √(κ log(1/δ)) / N (a hyperbola).
    Returns ``(eps_u, eps_p)``.
    """
    T = np.asarray(rounds, dtype=float)
    eps_u = 2 * A / T + D
    eps_p = c_p * math.sqrt(kappa * math.log(1 / delta)) * T / n_clients
    return eps_u, eps_p


# --------------------------------------------------------------------------
# §3: Theorem 3
# --------------------------------------------------------------------------
@dataclass
class Piece:
    """One labelled part of a Pareto set in the (σ, T) plane.

    ``points`` is an (m, 2) array of [σ, T].  For continuous T it samples a
    segment of the relation or of a box edge; for integer T it lists, for
    each integer T of the piece, the end points [σ_hi, T], [σ_lo, T] of the
    σ-interval that is Pareto optimal at that T.
    """

    kind: str
    points: np.ndarray

    def to_dict(self) -> dict:
        return {"kind": self.kind, "points": [[float(s), float(t)] for s, t in self.points]}


@dataclass(frozen=True)
class Box:
    """What a Pareto set was drawn over: q, N, κ, the σ range and the
    rounds T ∈ [T_min, T̃] (docs/theory.md §3)."""

    q: float
    n_clients: int
    kappa: float
    sigma_min: float
    sigma_max: float
    max_rounds: float
    min_rounds: float = 1.0

    def __post_init__(self):
        _validate_box(self.q, self.n_clients, self.kappa, self.sigma_min, self.sigma_max, self.max_rounds,
                      self.min_rounds)

    @property
    def kappa_prime(self) -> float:
        """κ' = qN/κ."""
        return self.q * self.n_clients / self.kappa


@dataclass
class ParetoSet:
    case: str
    T_a: float
    T_b: float
    kappa_prime: float
    integer: bool
    pieces: list[Piece] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    box: Box | None = None

    def to_dict(self) -> dict:
        return {
            "case": self.case,
            "T_a": self.T_a,
            "T_b": self.T_b,
            "kappa_prime": self.kappa_prime,
            "integer_rounds": self.integer,
            "pieces": [p.to_dict() for p in self.pieces],
            "empty_pieces": list(self.empty),
            **({"box": {k: (int(v) if k == "n_clients" else float(v)) for k, v in asdict(self.box).items()}}
               if self.box is not None else {}),
        }


def _validate_box(q, n_clients, kappa, sigma_min, sigma_max, max_rounds, min_rounds):
    if not (0 < q <= 1):
        raise ValueError(f"q must lie in (0, 1], got {q}")
    if int(n_clients) != n_clients or n_clients < 1:
        raise ValueError(f"the number of clients must be a positive integer, got {n_clients}")
    for name, v in (("kappa", kappa), ("sigma-min", sigma_min), ("sigma-max", sigma_max),
                    ("max-rounds", max_rounds), ("min-rounds", min_rounds)):
        if not (v > 0) or math.isinf(v):
            raise ValueError(f"{name} must be a positive finite number, got {v}")
        if not (1e-100 < v < 1e100):
            raise ValueError(f"{name} = {v:g} is out of the supported range (1e-100, 1e100)")
    if sigma_min > sigma_max:
        raise ValueError(f"empty sigma range: sigma-min {sigma_min:g} > sigma-max {sigma_max:g}")
    if min_rounds > max_rounds:
        raise ValueError(f"empty rounds range: min-rounds {min_rounds:g} > max-rounds {max_rounds:g}")


def theorem3(box: Box, integer: bool = False, n_points: int = 50) -> ParetoSet:
    """Pareto set in the (σ, T) plane with q fixed and T ≤ T̃ (docs/theory.md §3).

    Paper 001, Theorem 3 (Cases I–III), with the lower box edge T = T_min of
    docs/theory.md §3 added.  κ' = qN/κ, T_a = κ'/σ_max², T_b = κ'/σ_min²:

    * case I  (T̃ ≥ T_b): sigma_max (T ≤ T_a), relation (T_a..T_b), sigma_min (T_b..T̃);
    * case II (T_a ≤ T̃ < T_b): sigma_max, relation (T_a..T̃), rounds_max (σ: √(κ'/T̃)→σ_min);
    * case III (T̃ < T_a): sigma_max (T ≤ T̃), rounds_max (σ: σ_max→σ_min);
    * when T_a < T_min the set starts with rounds_min (T = T_min, σ from σ_max
      down to max(σ_min, √(κ'/T_min))) instead of sigma_max.

    With ``integer=True`` T takes integer values only and each T carries the
    σ-interval of :func:`integer_pareto_intervals`; pieces are labelled by
    the continuous piece their T falls in.  ``empty`` lists the kinds that
    have no point.
    """
    if not isinstance(box, Box):
        raise ValueError(f"theorem3 draws a Box (q, n_clients, kappa, sigma_min, sigma_max, max_rounds), got {box!r}")
    q, n_clients, kappa, sigma_min, sigma_max, max_rounds, min_rounds = (
        box.q, box.n_clients, box.kappa, box.sigma_min, box.sigma_max, box.max_rounds, box.min_rounds)
    if int(n_points) != n_points or not (2 <= n_points <= 100_000):
        raise ValueError(f"points per piece must be an integer in 2..100000, got {n_points}")
    kp = q * n_clients / kappa
    T_a, T_b = kp / sigma_max**2, kp / sigma_min**2
    Tt, Tm = float(max_rounds), float(min_rounds)
    case = "I" if Tt >= T_b else ("II" if Tt >= T_a else "III")
    pieces: list[Piece] = []

    if not integer:
        lin = np.linspace(0.0, 1.0, n_points)

        def seg_T(kind, t0, t1, sig):
            if t1 > t0:
                T = t0 * (t1 / t0) ** lin  # geometric: even spacing on the log axes
                pieces.append(Piece(kind, np.column_stack([sig(T), T])))

        def seg_s(kind, s0, s1, T):
            if s0 > s1:
                s = s0 * (s1 / s0) ** lin
                pieces.append(Piece(kind, np.column_stack([s, np.full_like(s, T)])))

        if T_a < Tm:
            seg_s("rounds_min", sigma_max, max(sigma_min, math.sqrt(kp / Tm)), Tm)
        seg_T("sigma_max", Tm, min(T_a, Tt), lambda T: np.full_like(T, sigma_max))
        seg_T("relation", max(T_a, Tm), min(T_b, Tt), lambda T: np.sqrt(kp / T))
        if Tt < T_b:
            seg_s("rounds_max", min(sigma_max, math.sqrt(kp / Tt)), sigma_min, Tt)
        seg_T("sigma_min", max(T_b, Tm), Tt, lambda T: np.full_like(T, sigma_min))
    else:
        T, lo, hi = integer_pareto_intervals(box)
        Ti = T.astype(float)
        kind = np.where(Ti <= T_a, "sigma_max", np.where(Ti <= T_b, "relation", "sigma_min"))
        kind = np.where((Ti == Ti[-1]) & (Ti < T_b), "rounds_max", kind)
        kind = np.where((Ti == Ti[0]) & (T_a < Ti[0]), "rounds_min", kind)
        for k in PIECE_KINDS:
            sel = kind == k
            if np.any(sel):
                pts = np.column_stack([np.column_stack([hi[sel], lo[sel]]).ravel(), np.repeat(Ti[sel], 2)])
                pieces.append(Piece(k, pts))
    pieces.sort(key=lambda p: PIECE_KINDS.index(p.kind))
    present = {p.kind for p in pieces}
    return ParetoSet(case, T_a, T_b, kp, integer, pieces, [k for k in PIECE_KINDS if k not in present], box)


def integer_pareto_intervals(box: Box):
    """Exact Pareto set for integer T: for each integer T, an interval of σ.

    Returns ``(T, sigma_lo, sigma_hi)`` for the T whose interval is non-empty.
    (σ, T) is dominated by a larger T' iff σ < min(√(κ'/T'), σ_max√(T/T'))
    (binding at T' = T+1) and by a smaller T' iff σ exceeds the threshold of
    T' = T-1: with r = √(T'/T), the neighbour reaches the same privacy at
    σ' = max(σ_min, rσ), which improves utility once
    σ² > σ_min² + κ'(1/T' - 1/T) (while rσ < σ_min) or σ² > κ'/T' (after).
    """
    sigma_min, sigma_max, max_rounds, min_rounds = box.sigma_min, box.sigma_max, box.max_rounds, box.min_rounds
    kp = box.kappa_prime
    t0, t1 = int(math.ceil(min_rounds)), int(math.floor(max_rounds))
    if t1 < t0:
        raise ValueError("no integer number of rounds lies in [min-rounds, max-rounds]")
    if t1 - t0 > 1_000_000:
        raise ValueError(f"integer rounds list one interval per T: at most 1,000,000 values, got {t1 - t0 + 1}")
    T = np.arange(t0, t1 + 1, dtype=float)
    Tn = T + 1
    lo = np.maximum(sigma_min, np.minimum(np.sqrt(kp / Tn), sigma_max * np.sqrt(T / Tn)))
    lo[-1] = sigma_min
    Tp = T - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        sB = np.sqrt(sigma_min**2 + kp * (1 / Tp - 1 / T))
        thr = np.where(sB < sigma_min * np.sqrt(T / Tp), sB, np.sqrt(kp / Tp))
    hi = np.minimum(sigma_max, thr)
    hi[0] = sigma_max
    keep = lo <= hi * (1 + 1e-12)
    return T[keep].astype(np.int64), lo[keep], np.maximum(hi[keep], lo[keep])


def objective_space(sigma, rounds, box: Box, delta, A: float = 1.0, D: float = 0.0, c_p: float = 1.0):
    """Map (σ, T) points of a set drawn over ``box`` to (ε_u bound, ε_p by (1.1))."""
    from .privacy import asymptotic_epsilon

    eu = utility_bound(sigma, rounds, box.q, box.n_clients, box.kappa, A, D)
    ep = asymptotic_epsilon(sigma, rounds, box.q, box.n_clients, delta, c_p)
    return eu, ep
