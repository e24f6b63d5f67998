"""``distributed``: distributed DP with Skellam noise and secure aggregation
(Agarwal, Kairouz, Liu 2021; Kairouz, Liu, Steinke 2021; docs/theory.md §8):
nobody sees an individual update.

Each client joins a round with probability q, clips its update to C,
rotates it (randomised Hadamard over d' = 2^⌈log₂ d⌉ coordinates, signs
from the round's public seed), scales it by γ = c/C (``scaled_clip`` c:
the clip in units of the integer grid), rounds it by conditional
randomised rounding to an integer vector of L2 norm at most Δ₂
(:func:`paretofl.theory.skellam.rounded_l2_bound`), adds Skellam noise of
variance μ/n_min per coordinate and sends it modulo 2^bits.  n_min =
⌈(1 − dropout)·|S|⌉ of the |S| clients selected: secure aggregation
aborts the round (nothing released) if fewer survive, so whenever anything
is released the sum carries Skellam noise of variance at least μ.  The
server sees the modular sum only, centred to [−2^(b−1), 2^(b−1)),
dequantised, rotated back and divided by the survivors' count.

μ = (zΔ)², z = σ√m (m = qN), Δ² = Δ₂² + min(3Δ₁, (Δ₂² + 3Δ₁)/(z²Δ₂²))
the effective sensitivity (:func:`paretofl.theory.skellam.effective_sensitivity`):
Theorem 3.5 of Agarwal et al. bounds the Skellam mechanism's RDP at integer
orders by α·Δ²/(2μ) = α/(2z²), the Gaussian's at noise multiplier z.  Secure
aggregation shows the server who takes part, so subsampling amplifies
nothing against it: neighbours are zero-out (one client's data replaced by
none: its update is zero, it still takes part), and a round is charged as
a Gaussian of noise multiplier z at each participation, the participation
seen (:func:`paretofl.theory.privacy.rdp_attributed_integer`, read at
integer orders).  The modular wrap and the abort are functions of the
noisy sum and of the survivors' count (independent of the data): post-
processing, they cost no privacy, only utility.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from ..theory import skellam as sk
from ..theory.privacy import Charge, check_rate, cohort_size
from .base import (
    NO_CLIP,
    NOISE_DIV10,
    AuditSetting,
    Break,
    Mechanism,
    Noise,
    positive,
    rates,
    register,
    sigmas,
    sum_multiplier,
    sum_noise,
)

__all__ = ["DistributedSkellam"]

#: the audits: every client every round, z = 3.2 sqrt(2) = 4.5 (zero-out, participation seen), 20 bits, LR on 50
#: features (520 weights: 1024 rotated coordinates); a scaled clip of 1000 (rounding inflates the sensitivity by
#: 2 %), or of 16.3 (the canary's rotated coordinates 0.51: rounding to nearest doubles its norm)
_AUDIT = dict(q=1.0, clients=2, samples=20, features=50, sigma=3.2, bits=20, scaled_clip=1000.0, dropout=0.0)

#: the bit widths a design searches when none is given (TensorFlow Federated's DistributedDpSumFactory takes 1-22)
BITS_SEARCHED = (6, 8, 10, 12, 14, 16, 18, 20, 22)
#: bit widths whose bounds lie within this share of the least count as ties: the fewest bits are kept
BITS_TIE = 0.005
#: "matches": a bound within this share of another's
MATCH = 0.05
#: the scale is settled when the design it gives chooses it again within this share (at most SETTLE_PASSES designs)
SETTLED, SETTLE_PASSES = 0.02, 3


@register
class DistributedSkellam(Mechanism):
    name = "distributed"
    summary = ("distributed DP: clients quantise, add Skellam noise, secure aggregation sums modulo 2^bits; "
               "nobody trusted with an update; clients seen taking part")
    trusted = ("nobody with an individual update: the secure aggregation protocol (its cryptography), which "
               "reveals only the modular sum of the clients' noised integer vectors and who took part")
    relation = ("zero-out: one client's data replaced by none (its update by zero); the client still takes part "
                "and the server sees it do so (secure aggregation shows who took part)")
    released = ("every round's global model: the modular sum of the surviving clients' rotated, scaled, rounded "
                "updates plus their Skellam noise, dequantised, rotated back and divided by the survivors' count; "
                "who took part and who dropped out")
    selection = "poisson"
    noise_on = "modular-sum"
    error_ratio_planned = True         # the design's plan (cohort, z) sets the ratio: error_ratio
    max_design_rounds = 1_000_000      # its error ratio is tabled to the round cap
    split = "client"
    #: its knobs (bits, the scaled clip) searched around the (q, T, sigma) search: :meth:`search`
    designable = True
    _plan = None                # the design's planning point of error_ratio: (cohort, z), "exact" or None
    options = ("local_epochs", "batch_size", "bits", "scaled_clip", "dim", "rounding_beta", "dropout")
    constructor_options = ("bits", "scaled_clip", "dim", "rounding_beta", "dropout")
    option_flags = {
        "dim": ("int", "the model's number of weights (7850 for LR on FashionMNIST; required)"),
        "bits": ("int", "fix the secure sum's bit width (default: searched, 6-22)"),
        "scaled_clip": ("float", "fix the clip on the integer grid (default: chosen with the bits)"),
        "dropout": ("float", "the share of a cohort that may drop out (each client's noise is set so that the rest "
                             "carry it; default 0)"),
        "rounding_beta": ("float", "conditional rounding's bias (default exp(-1/2))")}
    audits = (
        AuditSetting("distributed", "distributed", "zero-out-sum",
                     "N = 2, every client every round, sigma = 3.2 (z = 4.5), 20 bits, scaled clip 1000",
                     dict(_AUDIT),
                     (NOISE_DIV10, NO_CLIP,
                      Break("fit-to-bits", "too few bits (6) for the charged noise: the sum would wrap, so the "
                                           "noise is cut to fit the modulus (std 2^5/4)"),
                      Break("fewer-noisers", "each client adds the share of a cohort of 128 (mu/128) when 2 take "
                                             "part: 1/64 of the variance charged"))),
        AuditSetting("distributed/dropout", "distributed", "zero-out-sum",
                     "N = 32, every client every round, a dropout bound of 31/32 and 31/32 of the clients dropping "
                     "(the canary's client never: the adversary sees who survived): the survivors' noise must carry "
                     "the charge",
                     dict(_AUDIT, clients=32, samples=5, sigma=3.2 / 4, dropout=31 / 32, drop=31 / 32),
                     (NOISE_DIV10,
                      Break("noise-of-all", "each client adds its share of the noise as if every selected client "
                                            "survived (mu/|S|)"))),
    )

    def __init__(self, bits=16, scaled_clip=None, dim=None, rounding_beta=sk.DEFAULT_BETA, dropout=0.0):
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer, float)) or not math.isfinite(bits) \
                or bits != int(bits) or not 2 <= bits <= sk.MAX_BITS:
            raise ValueError(f"bits must be a whole number in [2, {sk.MAX_BITS}], got {bits!r}")
        self.bits = int(bits)
        self.scaled_clip = float(2 ** (self.bits - 1) / 64.0 if scaled_clip is None
                                 else positive(scaled_clip, "scaled_clip"))
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, (int, float, np.integer))
                                or not math.isfinite(dim) or int(dim) != dim or dim < 1):
            raise ValueError(f"dim (the model's number of weights) must be a positive whole number, got {dim!r}")
        self.dim = None if dim is None else int(dim)
        beta = rounding_beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
            raise ValueError(f"rounding_beta must be a number in (0, 1), got {beta!r}")
        self.beta = float(beta)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)

    def __repr__(self) -> str:
        return (f"DistributedSkellam(bits={self.bits}, scaled_clip={self.scaled_clip:g}, dim={self.dim}, "
                f"beta={self.beta:.4g}, dropout={self.dropout:g})")

    def options_dict(self) -> dict:
        return {"bits": self.bits, "scaled_clip": self.scaled_clip, "dim": self.dim, "rounding_beta": self.beta,
                "dropout": self.dropout}

    # ------------------------------------------------------------ the grid
    def _dim(self) -> int:
        if self.dim is None:
            raise ValueError("the distributed mechanism needs the model's number of weights: give dim (7850 for "
                             "LR on FashionMNIST)")
        return self.dim

    @property
    def padded(self) -> int:
        """d', the rotation's size."""
        return sk.padded_dim(self._dim())

    @property
    def l2_bound(self) -> float:
        """Δ₂, the norm the rounded update is conditioned to."""
        return sk.rounded_l2_bound(self.scaled_clip, self.padded, self.beta)

    @property
    def sensitivity(self) -> float:
        """Δ = √(Δ₂² + 3Δ₁): a bound on Δ(z) at every z (grid units)."""
        return sk.effective_sensitivity(self.scaled_clip, self.padded, self.beta)

    def sensitivity_at(self, z: float, padded: int | None = None) -> float:
        """Δ(z), what the noise is calibrated to at noise multiplier z (grid
        units; :func:`paretofl.theory.skellam.effective_sensitivity`), on
        ``padded`` coordinates (default: the mechanism's d')."""
        return sk.effective_sensitivity(self.scaled_clip, self.padded if padded is None else int(padded), self.beta,
                                        float(z))

    @property
    def inflation(self) -> float:
        """ι = Δ/c: the noise on the model, in units of C, at noise multiplier z is at most zι."""
        return self.sensitivity / self.scaled_clip

    def noise_variance(self, z: float) -> float:
        """μ = (zΔ(z))², the Skellam variance the sum must carry (grid units)."""
        return (float(z) * self.sensitivity_at(z)) ** 2

    # ---------------------------------------------------------------- privacy
    def check_rate(self, q, n_clients=None):
        q = check_rate(q, "q")
        if n_clients is not None and cohort_size(q, n_clients) < 1:
            raise ValueError(f"q = {q:g} of {int(n_clients)} clients selects fewer than one client a round on "
                             "average")
        return q

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Gaussian of noise multiplier z = σ√m at each participation
        (rate q), the participation seen, read at integer orders (the
        Skellam bound's); the sum's Skellam variance is (zΔ)²."""
        q, sigma = rates(q), sigmas(sigma)
        if cohort is None:
            if n_clients is None:
                raise ValueError("the distributed mechanism needs the number of clients n_clients")
        return Charge("attributed-integer", q, sum_multiplier(q, sigma, n_clients, cohort))

    def error_ratio(self, rounds):
        """The error on the model over a central mechanism's noise at the
        same z.  Unplanned: ι² (rounding's inflation, at its bound over z)
        over 1 − dropout (every survivor adds μ/n_min: when nobody drops, the
        sum carries μ/(1 − dropout)).  Planned for a cohort m and a z (the
        design's, :meth:`search`): :func:`paretofl.theory.skellam.coordinate_error`'s
        ratio — the noise at Δ(z), the rounding and the wraps; the design's
        first pass (``plan`` "exact") takes the integers as exact: 1/(1 − dropout)."""
        if self._plan == "exact":
            r = 1.0 / (1.0 - self.dropout)
        elif self._plan is not None:
            r = sk.coordinate_error(self.bits, self.scaled_clip, self.padded, self.beta, *self._plan,
                                    self.dropout)["ratio"]
        else:
            r = self.inflation ** 2 / (1.0 - self.dropout)
        return np.full(np.shape(rounds), r) if np.ndim(rounds) else r

    # ------------------------------------------------------------------ design
    def _planned(self, plan, **options) -> DistributedSkellam:
        """A copy with ``options`` changed, planned for ``plan`` ((m, z) or "exact")."""
        out = copy.copy(self)
        for k, v in options.items():
            setattr(out, k, v)
        out._plan = plan
        return out

    def search(self, s, given: dict):
        """The knobs with (q, T, σ) (docs/theory.md §8, "the design"): at each
        bit width (``bits`` given: that one; else :data:`BITS_SEARCHED`) the
        scaled clip whose coordinate error is least with the sum wrapping at
        most :data:`~paretofl.theory.skellam.WRAP_TARGET` a coordinate
        (``scaled_clip`` given: that one), planned at the cohort and z of the
        design it gives at the exact-integer design's q, until they settle;
        the fewest bits within :data:`BITS_TIE` of the least bound are kept
        and designed again over every q (``s.point(mechanism, qs)``).  Beside it: the same
        design with exact integers (what quantisation costs) and the central
        client-aggregate design (what distributing the trust costs)."""
        from . import DEFAULT, get  # the registry imports this module
        self._dim()
        exact = s.point(self._planned("exact"))
        bits = (self.bits,) if given.get("bits") is not None else BITS_SEARCHED
        found, skipped = {}, {}
        for b in bits:
            # halved cohorts only where the cohort is searched (a q given is the user's: it is kept)
            got = self._width(s, b, exact, given, skipped, halve=len(bits) == 1 and s.q is None)
            if got is not None:
                found[b] = got
                if got[0].utility_bound <= exact.utility_bound * (1 + BITS_TIE):
                    break                       # no wider sum can be more than a tie better: the fewest bits win
        if not found:
            raise ValueError(("the bit width given is too narrow for the sum: " if given.get("bits") is not None else
                              "no bit width searched fits the sum: ") + "; ".join(f"{b} bits: {w}"
                                                                               for b, w in skipped.items())
                             + ("; give a smaller --scaled-clip or more bits" if given.get("scaled_clip") is not None
                                else "; allow more bits (at most 32) or a smaller " + (
                                    "q" if s.q is not None else "cohort (q_min)" if s.q_min is not None
                                    else "cohort (q_max)")))
        least = min(d.utility_bound for d, _ in found.values())
        b = min(x for x in found if found[x][0].utility_bound <= least * (1 + BITS_TIE))
        d, mech = found[b]
        trial = mech
        for _ in range(SETTLE_PASSES):          # the width kept, over every q, its scale settled again
            cand = s.point(trial)
            c = self._scale(b, cand.cohort, cand.noise_multiplier, given)
            if c is None:
                break                           # that cohort's sum would not fit: keep the one that does
            if abs(c / trial.scaled_clip - 1) < SETTLED:
                if cand.utility_bound < d.utility_bound:       # one ratio for every q: kept only where it gains
                    d, mech = cand, trial
                break
            trial = self._planned((cand.cohort, cand.noise_multiplier), scaled_clip=float(c))
        within = [x for x in sorted(found) if found[x][0].utility_bound <= exact.utility_bound * (1 + MATCH)]
        try:
            central = s.point(get(DEFAULT))
        except ValueError as exc:                # InfeasibleBudget is one
            central = None
            central_error = str(exc)
        d.details = {
            "bits": mech.bits, "scaled_clip": mech.scaled_clip, **mech._figures(d),
            "bits_searched": {str(x): found[x][0].utility_bound for x in sorted(found)},
            "bits_skipped": {str(x): w for x, w in skipped.items()},
            "bits_from": "given" if given.get("bits") is not None else
            f"searched over {', '.join(map(str, bits))}: the fewest within {100 * BITS_TIE:g} % of the least bound",
            "exact_integers": {k: getattr(exact, k) for k in ("q", "rounds", "sigma", "utility_bound")},
            "matches_at_bits": within[0] if within else None,
            "central": ({"mechanism": DEFAULT, **{k: getattr(central, k)
                                                  for k in ("q", "rounds", "sigma", "epsilon", "utility_bound")}}
                        if central is not None else {"error": central_error}),
        }
        d.notes.append(self._cost_note(d, exact, central, within))
        return d

    def derived_details(self, d) -> dict:
        return self._figures(d) if "bits" in (d.details or {}) else {}

    def _figures(self, d) -> dict:
        """What a design at these knobs carries: its error, wraps and survivors."""
        e = sk.coordinate_error(self.bits, self.scaled_clip, self.padded, self.beta, d.cohort, d.noise_multiplier,
                                self.dropout)
        n_min = sk.n_min(d.cohort, self.dropout)
        return {"padded": self.padded, "inflation": e["inflation"], "error_ratio": e["ratio"],
                "wrap_probability": e["wrap_probability"], "noise_variance": self.noise_variance(d.noise_multiplier),
                "noise_per_client": self.noise_variance(d.noise_multiplier) / n_min, "n_min": n_min}

    def design_lines(self, d) -> list[str]:
        x = d.details or {}
        if "bits" not in x:
            return []
        searched = ", ".join(f"{b}: {u:.4g}" for b, u in x["bits_searched"].items())
        return [f"  bits                {x['bits']}  ({x['bits_from']}; bound by width {searched})",
                f"  scaled clip c       {x['scaled_clip']:.5g}  (the clip on the integer grid: each update is scaled "
                f"by c/C; a coordinate of the sum wraps with probability <= {x['wrap_probability']:.2g} a round)",
                f"  noise per client    Skellam of variance {x['noise_per_client']:.5g}  (grid units; "
                f"at least {x['n_min']} survivors carry {x['noise_variance']:.5g}, z x the effective sensitivity, "
                "squared)",
                f"  error ratio r       {x['error_ratio']:.4g}  (noise, rounding and wraps on the model over a central "
                "mechanism's noise at the same z)"]

    def _settled(self, s, b, start, given):
        """(design, mechanism) at width b and the cohort of ``start``, the
        scale planned at the cohort and z of the design it gives until it
        settles; None where no scale holds the sum."""
        m, z, d, mech = start.cohort, start.noise_multiplier, None, None
        for _ in range(SETTLE_PASSES):
            c = self._scale(b, m, z, given)
            if c is None:
                return None
            if mech is not None and abs(c / mech.scaled_clip - 1) < SETTLED:
                break                           # the design's own (m, z) choose the scale it was planned with
            mech = self._planned((m, z), bits=int(b), scaled_clip=float(c))
            d = s.point(mech, [start.q])
            m, z = d.cohort, d.noise_multiplier
        return d, mech

    def _width(self, s, b, exact, given, skipped, halve=True):
        """The best (design, mechanism) at width b: at the exact-integer
        design's cohort, and (``halve``: a width given) where the sum does
        not fit there or quantisation costs more than :data:`MATCH`, at
        halved cohorts while the bound improves (a smaller sum fits a finer
        scale).  Searching the widths, a width that does not hold the
        design's cohort is left for the wider ones: a halved cohort costs
        the bound more than the next width does."""
        best, start, worse = None, exact, 0
        while True:
            got = self._settled(s, b, start, given)
            if got is not None:
                if best is None or got[0].utility_bound < best[0].utility_bound:
                    best, worse = got, 0
                else:
                    worse += 1
            done = best is not None and (worse >= 2 or best[0].utility_bound <= exact.utility_bound * (1 + MATCH))
            nxt = max(start.q / 2, s.q_min or 0.0)      # halved, down to the q_min asked (and q_min itself)
            if done or start.cohort < 2 or not halve or nxt >= start.q:
                break
            start = s.point(self._planned("exact"), [nxt])
        if best is None:
            what = "the scaled clip given" if given.get("scaled_clip") is not None else "every scale"
            skipped[b] = (f"{what} wraps more than {sk.WRAP_TARGET:g} a coordinate, at every cohort down to "
                          f"{start.cohort:.3g}" if halve else
                          f"{what} wraps more than {sk.WRAP_TARGET:g} a coordinate at the cohort {start.cohort:.4g}")
        return best

    def _scale(self, bits, cohort, z, given):
        """The scaled clip at ``bits`` for a cohort and z: given (None where it wraps more than the target: a
        sum spanning moduli keeps nothing), or the best (None: every one wraps)."""
        if given.get("scaled_clip") is not None:
            e = sk.coordinate_error(bits, self.scaled_clip, self.padded, self.beta, cohort, z, self.dropout)
            return self.scaled_clip if e["wrap_probability"] <= sk.WRAP_TARGET else None
        best = sk.best_scaled_clip(bits, self.padded, self.beta, cohort, z, self.dropout)
        return None if best is None else best[0]

    def _cost_note(self, d, exact, central, within) -> str:
        x = d.details
        text = (f"{x['bits']} bits, scaled clip {x['scaled_clip']:.4g} on the integer grid: the error on the model "
                f"is {x['error_ratio']:.4g} x a central mechanism's noise at the same z (rounding's inflation "
                f"{x['inflation']:.4g}, dropout bound {self.dropout:g}), a coordinate wraps with probability <= "
                f"{x['wrap_probability']:.2g} a round; ")
        if within:
            text += (f"from {within[0]} bits the bound is within {100 * MATCH:g} % of exact integers' "
                     f"({exact.utility_bound:.4g})")
        else:
            text += f"no bit width searched comes within {100 * MATCH:g} % of exact integers' bound"
        if central is not None:
            rel = 100 * (d.utility_bound / central.utility_bound - 1)
            text += (f"; the central client-aggregate design for the same budget (the server trusted with the sum, "
                     f"who took part hidden) has bound {central.utility_bound:.4g} (q = {central.q:.4g}, T = "
                     f"{central.rounds}): this design's is {abs(rel):.1f} % {'above' if rel >= 0 else 'below'} it")
            gap = 100 * (exact.utility_bound / central.utility_bound - 1)
            why = [w for w, on in (("the noise set for dropouts (1/(1 - dropout) of it when nobody drops)",
                                    self.dropout > 0),
                                   ("the sampling's amplification the server forgoes", central.q < 1)) if on]
            text += (f"; {gap:.1f} % of it with exact integers" + (": " + " and ".join(why) if why else
                                                                 " (the charge at integer orders)"))
        return text

    def noise(self, q, sigma, n_clients, cohort=None) -> Noise:
        return sum_noise("modular-sum", self.split, q, sigma, n_clients, cohort)

    # -------------------------------------------------------------- statement
    def sampling_text(self, d) -> str:
        return (f"each client takes part with probability q = {d.q:.4g}; secure aggregation shows the server who "
                "took part, so no hiding of it is claimed: each client is charged for its own participations "
                "only, each round's with probability q, so the epsilon holds over the random draw of the rounds a "
                "client joins (a client made to join every round would have the Gaussian's over all T)")

    def accountant_text(self, d) -> str:
        return ("RDP of the Skellam mechanism (Agarwal, Kairouz, Liu 2021, Theorem 3.5) bounded at integer orders by "
                f"the Gaussian's at z = {d.noise_multiplier:.4g} (noise calibrated to the rounded update's effective "
                "sensitivity sqrt(D2^2 + min(3 D1, (D2^2 + 3 D1)/(z^2 D2^2)))), at each participation, "
                "participation seen, composed over the rounds")

    def mechanism_text(self, d) -> str:
        clip = f"C = {d.clip:g}" if d.clip is not None else "C (the clipping norm: not chosen by this design)"
        mu = self.noise_variance(d.noise_multiplier)
        return (f"updates clipped to L2 norm {clip}, rotated (randomised Hadamard, {self.padded} coordinates), "
                f"scaled to norm {self.scaled_clip:g} on the integer grid, rounded (conditional randomised rounding, "
                f"beta = {self.beta:.4g}: L2 norm <= {self.l2_bound:.5g}); the surviving clients' Skellam noise sums "
                f"to variance >= {mu:.5g} per coordinate (z = {d.noise_multiplier:.4g} x the effective sensitivity "
                f"{self.sensitivity_at(d.noise_multiplier):.5g}); summed modulo 2^{self.bits} by secure aggregation")

    def statement_notes(self, d) -> list[str]:
        return [f"Dropout: each selected client adds Skellam noise of variance mu/n_min, n_min = ceil((1 - "
                f"{self.dropout:g}) x the clients selected); the round is aborted (nothing released) if fewer than "
                "n_min survive. A server that drops clients on purpose cannot lower the noise below what is charged, "
                "only abort rounds.",
                "Simulated: the secure aggregation is simulated, not run (its cryptography is trusted as stated)."]

    def float_text(self, d) -> str:
        return ("Floating point: the noise is integer, Skellam drawn as the difference of two Poisson draws of "
                "PyTorch's sampler (from floating-point uniforms of each replica's own generator); the rotation and "
                "scaling are float64, the rounding, the shares and the modular sum exact int64. Integer noise does "
                "not lie on a floating-point grid (Mironov 2012), but the Poisson sampler's distance from an exact "
                "Poisson draw is not analysed and the generator is PyTorch's, not a cryptographic one: the "
                "guarantee above is that of the ideal Skellam mechanism.")
