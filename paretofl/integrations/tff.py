"""Apply a ``distributed`` design (Skellam noise, secure aggregation; docs/
theory.md §8) in TensorFlow Federated: the parameters of its
``tff.aggregators.DistributedDpSumFactory``, and what its fixed choices
change.  Plain numbers (numpy and scipy); TensorFlow is imported by the
snippet only.

What the factory takes and what paretofl's design fixes it to:

* ``mechanism='distributed_skellam'``, ``rotation_type='hd'`` (the
  randomised Hadamard rotation over d' = 2^⌈log₂ d⌉, as paretofl's trainer;
  TFF's default DFT pads to an even d instead), ``beta`` the design's
  conditional-rounding bias (TFF's default 0 rounds unconditionally: its
  norm bound c + √d' inflates the sensitivity more, :attr:`TFFPlan.notes`);
* ``bits`` the design's; ``expected_clients_per_round`` n_min, the fewest
  survivors the noise is set for (TFF splits the central noise among the
  clients it expects: set to n_min, the survivors still carry it);
* ``noise_multiplier`` z·Δ/c at *TFF's* scale.  TFF chooses its scale
  itself (``_heuristic_scale_factor``: k standard deviations of a
  sub-Gaussian sum within 2^bits, k from ``modclip_prob``), and its noise
  multiplier is relative to C before rounding ("quantisation may inflate the
  L2 sensitivity").  So the multiplier is solved here at the scale TFF will
  pick for it, until the noise covers the inflated sensitivity Δ(z) at that
  scale: the sum then carries Skellam variance (zΔ)², what paretofl charges.

TFF's factory does not account the ε itself (its source says so); the ε is
paretofl's: z per participation, the participation seen, at integer orders.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..mechanisms import get as mechanism_of
from ..recommendation import Design
from ..theory import skellam as sk
from . import checked

__all__ = ["TFFPlan", "plan", "snippet", "tff_scale", "MAX_TFF_BITS"]

#: DistributedDpSumFactory's widest sum (it computes in float32)
MAX_TFF_BITS = 22
#: TFF's cap on the scale factor
MAX_TFF_SCALE = 1e6


@dataclass(frozen=True)   # a plan is checked where it is made, and stays as checked
class TFFPlan:
    """A distributed design in DistributedDpSumFactory's parameters."""

    noise_multiplier: float
    expected_clients_per_round: int
    bits: int
    l2_clip: float
    modclip_prob: float
    beta: float
    rotation_type: str
    mechanism: str
    num_rounds: int
    client_rate: float
    num_clients: int
    clients_per_round: int       # m = floor(qN): a fixed cohort drawn uniformly each round
    dim: int                     # the model's weights the noise was solved for (TFF's d' follows from it)
    scale: float                 # the scale TFF picks for these parameters (its heuristic, replayed here)
    design_scale: float          # the design's: c/C
    error_ratio: float           # the error on the model over central noise at the same z, at TFF's scale
    design_error_ratio: float    # the same at the design's scale
    epsilon: float
    delta: float
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def tff_scale(noise_multiplier: float, clip: float, bits: int, clients: int, padded: int,
              modclip_prob: float = sk.WRAP_TARGET) -> float:
    """The scale TFF's DistributedDpSumFactory picks: γ = 1/scale solves its
    documented 2^b = 2k·√(ρ/d'·(Cn)² + (γ²/4 + σ²)n)/γ with ρ = 1, σ =
    noise_multiplier·C/√n the local std, k = √2·erfcinv(modclip_prob)
    (its ``_clip_prob_to_num_stddevs``); capped at 10⁶ as TFF caps it."""
    from scipy.special import erfcinv

    k = math.sqrt(2.0) * float(erfcinv(modclip_prob))
    n, c = float(clients), float(clip)
    room = 4.0 ** int(bits) - k * k * n
    if room <= 0:
        raise ValueError(f"{bits} bits are too few for {int(n)} clients a round at modclip_prob {modclip_prob:g} "
                         "(TFF refuses 2^(2 bits) < clients x k^2)")
    local = float(noise_multiplier) * c / math.sqrt(n)
    gamma = math.sqrt(4.0 * k * k * (c * c * n * n / padded + local * local * n) / room)
    return min(1.0 / gamma, MAX_TFF_SCALE)


def plan(d: Design, clip: float) -> TFFPlan:
    """The DistributedDpSumFactory parameters of a ``distributed`` design at clipping norm ``clip``."""
    d = checked(d)
    mech = mechanism_of(d.mechanism, **(d.mechanism_options or {}))
    if mech.noise_on != "modular-sum":
        raise ValueError(f"a {d.mechanism} design is not distributed DP: export it to flower, opacus or jax-privacy")
    if not (isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0 and math.isfinite(clip)):
        raise ValueError(f"clip must be a positive finite number, got {clip!r}")
    if mech.bits > MAX_TFF_BITS:
        raise ValueError(f"the design sums modulo 2^{mech.bits}; TFF's DistributedDpSumFactory takes at most "
                         f"{MAX_TFF_BITS} bits: design with --bits {MAX_TFF_BITS} or fewer")
    z, clip = float(d.noise_multiplier), float(clip)
    # a fixed cohort of m = floor(qN) clients drawn uniformly each round: each client joins with probability
    # m/N <= q (the rate charged), and the noise is split among the n fewest survivors of those m
    m = math.floor(d.q * d.n_clients)
    m += (m + 1) / d.n_clients <= d.q            # qN can miss m by an ulp either way: the largest m with m/N <= q
    m -= m / d.n_clients > d.q
    if m < 1:
        raise ValueError(f"q = {d.q:.12g} of {d.n_clients} clients draws no whole client: TFF draws m/N <= q, and "
                         "no m >= 1 is; design again (q = m/N)")
    n = sk.n_min(m, mech.dropout)
    padded = mech.padded
    if 2 ** mech.bits < n:
        raise ValueError(f"TFF needs bits >= log2(expected_clients_per_round): 2^{mech.bits} < {n}")

    def inflation(c):                      # ι(c) = Δ(z)/c on the grid of scaled clip c
        return sk.effective_sensitivity(c, padded, mech.beta, z) / c

    # TFF's scale depends on the multiplier it is given, and the multiplier must cover the inflation at that
    # scale: iterate to the fixed point, then check the noise covers Δ(z) at the scale TFF will pick
    nm = z * inflation(mech.scaled_clip)
    for _ in range(50):
        s = tff_scale(nm, clip, mech.bits, n, padded)
        want = z * inflation(s * clip)
        if want <= nm * (1 + 1e-9) and nm <= want * (1 + 1e-6):
            break
        nm = want * (1 + 1e-7)
    s = tff_scale(nm, clip, mech.bits, n, padded)
    if nm < z * inflation(s * clip) * (1 - 1e-12):
        raise ValueError(f"at {mech.bits} bits TFF's scale rule leaves no noise multiplier that covers the rounded "
                         "update's sensitivity (the scale it picks for more noise shrinks the grid faster): design "
                         "with more bits, nothing is exported")
    scaled = s * clip

    def ratio(c):
        return sk.coordinate_error(mech.bits, c, padded, mech.beta, m, z, mech.dropout)["ratio"]

    r_tff, r_ours = ratio(scaled), ratio(mech.scaled_clip)
    notes = [f"TFF picks its own scale: {s:.6g} (scaled clip {scaled:.5g}) where the design chose "
             f"{mech.scaled_clip / clip:.6g} (scaled clip {mech.scaled_clip:.5g}); the error on the model is "
             f"{r_tff:.4g} x central noise at the same z there, against the design's {r_ours:.4g}",
             f"expected_clients_per_round = {n}: the fewest survivors the design's noise is set for (dropout bound "
             f"{mech.dropout:g} of a cohort of {m}); TFF splits the noise among them, so any {n} survivors carry it; "
             "a round with fewer must be aborted (secure aggregation's threshold): TFF's factory does not abort by "
             "itself",
             f"the model must have exactly {mech.dim} weights (d' = {padded} rotated coordinates): the noise is solved "
             "for that d'; another model needs another design (--dim)",
             f"beta = {mech.beta:.4g} (conditional rounding, as designed): TFF's default 0 bounds the rounded norm by "
             f"c + sqrt(d') = {scaled + math.sqrt(padded):.5g} instead of "
             f"{sk.rounded_l2_bound(scaled, padded, mech.beta):.5g}, which needs a larger noise multiplier",
             "rotation_type = 'hd': the randomised Hadamard rotation paretofl simulates (TFF's default 'dft' pads "
             "less; its sensitivity bound differs)",
             f"sampling: exactly {m} of the {d.n_clients} clients a round, drawn uniformly and afresh each round (each "
             f"joins with probability {m / d.n_clients:.4g} <= q = {d.q:.4g}, the rate charged); secure aggregation "
             "shows who took part, so the epsilon claims no hiding of it: each client is charged for the rounds it "
             "joins, each with probability q",
             "TFF does not account distributed DP itself: publish paretofl's epsilon (its statement, --statement)"]
    return TFFPlan(noise_multiplier=nm, expected_clients_per_round=n, bits=mech.bits, l2_clip=clip,
                   modclip_prob=sk.WRAP_TARGET, beta=mech.beta, rotation_type="hd", mechanism="distributed_skellam",
                   num_rounds=int(d.rounds), client_rate=float(d.q), num_clients=int(d.n_clients),
                   clients_per_round=m, dim=int(mech.dim), scale=s,
                   design_scale=mech.scaled_clip / clip, error_ratio=r_tff, design_error_ratio=r_ours,
                   epsilon=float(d.epsilon), delta=float(d.delta), notes=notes)


def snippet(p: TFFPlan) -> str:
    """Python that builds the plan's aggregator in TensorFlow Federated."""
    return "\n".join([
        "import tensorflow_federated as tff",
        "",
        "aggregator = tff.aggregators.DistributedDpSumFactory(",
        f"    noise_multiplier={p.noise_multiplier!r},      # z x the inflated sensitivity / c, at TFF's scale",
        f"    expected_clients_per_round={p.expected_clients_per_round},   # n_min: the fewest survivors",
        f"    bits={p.bits}, l2_clip={p.l2_clip!r}, modclip_prob={p.modclip_prob!r},",
        f"    beta={p.beta!r}, mechanism={p.mechanism!r}, rotation_type={p.rotation_type!r})",
        "mean = tff.aggregators.UnweightedMeanFactory(value_sum_factory=aggregator)   # divided by the survivors",
        "# tff.learning.algorithms.build_unweighted_fed_avg(model_fn, ..., model_aggregator=mean)",
        f"# the model: exactly {p.dim} weights; {p.num_rounds} rounds of exactly {p.clients_per_round} of the "
        f"{p.num_clients} clients, drawn uniformly each round;",
        f"# abort a round (release nothing) where fewer than {p.expected_clients_per_round} of them survive",
        f"# epsilon {p.epsilon:.4f} at delta {p.delta:g} (paretofl's accounting: TFF does not account it)",
    ])
