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

μ = (zΔ)², z = σ√m (m = qN), Δ = √(Δ₂² + 3Δ₁/2) the effective sensitivity
(:func:`paretofl.theory.skellam.effective_sensitivity`): Theorem 3.5 of
Agarwal et al. bounds the Skellam mechanism's RDP at integer orders by
α·Δ²/(2μ) = α/(2z²), the Gaussian's at noise multiplier z.  Secure
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

import math

import numpy as np

from ..theory import skellam as sk
from ..theory.privacy import Charge, check_rate
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
)

__all__ = ["DistributedSkellam"]

#: the audits: every client every round, z = 3.2 sqrt(2) = 4.5 (zero-out, participation seen), 20 bits, LR on 50
#: features (520 weights: 1024 rotated coordinates); a scaled clip of 1000 (rounding inflates the sensitivity by
#: 2 %), or of 16.3 (the canary's rotated coordinates 0.51: rounding to nearest doubles its norm)
_AUDIT = dict(q=1.0, clients=2, samples=20, features=50, sigma=3.2, bits=20, scaled_clip=1000.0, dropout=0.0)

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
    split = "client"
    #: not yet: the generic (q, T, sigma) search ignores the quantisation error and the wrap, and needs dim
    designable = False
    options = ("local_epochs", "batch_size", "bits", "scaled_clip", "dim", "rounding_beta", "dropout")
    constructor_options = ("bits", "scaled_clip", "dim", "rounding_beta", "dropout")
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
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer, float)) or bits != int(bits) \
                or not 2 <= bits <= sk.MAX_BITS:
            raise ValueError(f"bits must be a whole number in [2, {sk.MAX_BITS}], got {bits!r}")
        self.bits = int(bits)
        self.scaled_clip = float(2 ** (self.bits - 1) / 64.0 if scaled_clip is None
                                 else positive(scaled_clip, "scaled_clip"))
        if dim is not None and (isinstance(dim, bool) or int(dim) != dim or dim < 1):
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
        """Δ = √(Δ₂² + 3Δ₁/2): what the noise is calibrated to (grid units)."""
        return sk.effective_sensitivity(self.scaled_clip, self.padded, self.beta)

    @property
    def inflation(self) -> float:
        """ι = Δ/c: the noise on the model, in units of C, at noise multiplier z is zι."""
        return self.sensitivity / self.scaled_clip

    def noise_variance(self, z: float) -> float:
        """μ = (zΔ)², the Skellam variance the sum must carry (grid units)."""
        return (float(z) * self.sensitivity) ** 2

    # ---------------------------------------------------------------- privacy
    def check_rate(self, q, n_clients=None):
        q = check_rate(q, "q")
        if n_clients is not None and q * int(n_clients) < 1 - 1e-9:
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
            cohort = np.asarray(q, dtype=float) * int(n_clients)
        m = np.asarray(cohort, dtype=float)
        z = sigma * np.sqrt(m) if (np.ndim(m) or np.ndim(sigma)) else sigma * math.sqrt(float(m))
        return Charge("attributed-integer", q, z)

    def error_ratio(self, rounds):
        """The noise on the model over a central mechanism's at the same z:
        ι² (rounding's inflation), over 1 − dropout (every survivor adds
        μ/n_min: when nobody drops, the sum carries μ/(1 − dropout))."""
        r = self.inflation ** 2 / (1.0 - self.dropout)
        return np.full(np.shape(rounds), r) if np.ndim(rounds) else r

    def noise(self, q, sigma, n_clients, cohort=None) -> Noise:
        if np.ndim(q) or np.ndim(sigma) or np.ndim(cohort):     # one per replica: z = σ√m each
            m = np.asarray(cohort if cohort is not None else np.asarray(q, dtype=float) * n_clients, dtype=float)
            z = sum_multiplier(q, np.asarray(sigma, dtype=float), n_clients, m)
            return Noise("modular-sum", z, split=self.split, divisor=np.broadcast_to(m, np.shape(z)).copy())
        m = float(cohort) if cohort is not None else float(q) * n_clients
        return Noise("modular-sum", float(sigma) * math.sqrt(m), split=self.split, divisor=m)

    # -------------------------------------------------------------- statement
    def sampling_text(self, d) -> str:
        return (f"each client takes part with probability q = {d.q:.4g}; secure aggregation shows the server who "
                "took part, so no amplification by sampling is claimed: each client is charged for its own "
                "participations only")

    def accountant_text(self, d) -> str:
        return ("RDP of the Skellam mechanism (Agarwal, Kairouz, Liu 2021, Theorem 3.5) bounded at integer orders by "
                f"the Gaussian's at z = {d.noise_multiplier:.4g} (noise calibrated to the rounded update's effective "
                "sensitivity sqrt(D2^2 + 3 D1/2)), at each participation, participation seen, composed over the rounds")

    def mechanism_text(self, d) -> str:
        clip = f"C = {d.clip:g}" if d.clip is not None else "C (the clipping norm: not chosen by this design)"
        mu = self.noise_variance(d.noise_multiplier)
        return (f"updates clipped to L2 norm {clip}, rotated (randomised Hadamard, {self.padded} coordinates), "
                f"scaled to norm {self.scaled_clip:g} on the integer grid, rounded (conditional randomised rounding, "
                f"beta = {self.beta:.4g}: L2 norm <= {self.l2_bound:.5g}); the surviving clients' Skellam noise sums "
                f"to variance >= {mu:.5g} per coordinate (z = {d.noise_multiplier:.4g} x the effective sensitivity "
                f"{self.sensitivity:.5g}); summed modulo 2^{self.bits} by secure aggregation")

    def statement_notes(self, d) -> list[str]:
        return [f"Dropout: each selected client adds Skellam noise of variance mu/n_min, n_min = ceil((1 - "
                f"{self.dropout:g}) x the clients selected); the round is aborted (nothing released) if fewer than "
                "n_min survive. A server that drops clients on purpose cannot lower the noise below what is charged, "
                "only abort rounds.",
                "Integers: the noise is exact integer Skellam (differences of Poisson draws), so the floating-point "
                "caveat of the Gaussian mechanisms does not apply to it; the generator is PyTorch's, not a "
                "cryptographic one, and the secure aggregation is simulated, not run."]
