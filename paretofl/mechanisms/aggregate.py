"""``client-aggregate``: client-level DP of the model the server releases
(Gu et al.'s mechanism, after McMahan et al. 2018; docs/theory.md §1, §5.3),
with adaptive clipping (Andrew et al. 2021) as an option.

Each client joins a round with probability q (its group's q_g where clients
have budgets of their own), runs local epochs of plain SGD and clips its
update to C.  The released sum carries N(0, z²C²) whatever the cohort's
size, z = σ√m with m the expected cohort (qN, or Σ_i q_i): each selected
client adds its share (m/N)σ²C² and the server the rest, and the sum is
divided by m, a public number.  Adding or removing one client moves the
sum by at most C, and only when it is sampled: a Poisson-subsampled
Gaussian of rate q (the client's own) and noise multiplier z.
"""

from __future__ import annotations

import math

import numpy as np

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
)

__all__ = ["ClientAggregate", "adaptive_update_multiplier"]


def adaptive_update_multiplier(noise_multiplier: float, count_noise: float) -> float:
    """Adaptive clipping's split of one charge (Andrew et al. 2021, arXiv
    1905.03871, Theorem 1 and §3): each round releases the noised sum of the
    clipped updates (noise multiplier z_Δ, sensitivity C) and the noised sum
    of the centred bits b_i - ½, b_i = 1[‖Δ_i‖ <= C] (noise std σ_b,
    sensitivity ½ when a client is added or removed).  Together they are one
    Gaussian mechanism of noise multiplier (z_Δ⁻² + (2σ_b)⁻²)^(-1/2); for a
    charged ``noise_multiplier`` z the update gets
    z_Δ = (z⁻² - (2σ_b)⁻²)^(-1/2), which exists only where 2σ_b > z."""
    z = positive(noise_multiplier, "noise_multiplier")
    sb = positive(count_noise, "count_noise")
    if 2.0 * sb <= z:
        raise ValueError(f"the count noise {sb:.4g} leaves no budget for the update: the joint noise multiplier "
                         f"{z:.4g} needs a count noise above {z / 2:.4g} (half of it); raise count_noise")
    return (z ** -2 - (2.0 * sb) ** -2) ** -0.5


def expected_cohort(q, n_clients, cohort=None):
    """m, the expected cohort: ``cohort`` (Σ_i q_i where clients have rates
    of their own) or qN; refused below one client a round."""
    if cohort is None:
        if n_clients is None or int(n_clients) < 1:
            raise ValueError("the client-aggregate mechanism needs the number of clients n_clients >= 1")
    m = np.asarray(cohort_size(q, n_clients, cohort), dtype=float)
    if np.any(m < 1.0 - 1e-9):
        low = float(np.min(m))
        where = (f"q = {float(np.min(q)):g} of {int(n_clients)} clients" if n_clients is not None
                 else "the clients' rates")
        raise ValueError(f"the client-aggregate mechanism needs q·N >= 1 (the expected cohort): {where} "
                         f"selects {low:g}, fewer than one client a round on average")
    return m if m.ndim else float(m)


_AUDIT = dict(sigma=1.1, q=0.5, clients=4, samples=20, features=50)
_GROUPS = dict(sigma=1.2 / math.sqrt(2.02), clients=4, samples=20, features=50, rates=(0.01, 1.0))
#: the pipeline (docs/theory.md §5.5): a private pre-trial of three noise levels at one seed, two rounds each,
#: then a training of two rounds; every client every round (q = 1, m = 4: z = 2 sigma); delta = 1e-3
_PIPELINE = dict(clients=4, q=1.0, sigmas=(0.75, 1.0, 1.5), pretrial_rounds=2, sigma=3.0, rounds=2, clip=1.0,
                 delta=1e-3, features=2, samples=4)


@register
class ClientAggregate(Mechanism):
    name = "client-aggregate"
    summary = "client-level DP of the released model; the server trusted; Poisson client sampling"
    trusted = ("the server (or a secure aggregator), which sees the clipped updates before the noise is complete; "
               "the clients' own devices")
    relation = "add/remove: one client added to or removed from the population, with all of its data"
    released = ("every round's global model: the sum of the cohort's clipped updates plus Gaussian noise of a "
                "fixed total variance, divided by the expected cohort (all T models may be published)")
    selection = "poisson"
    noise_on = "sum"
    groups = True
    split = "shares"
    designable = True
    in_auto = True
    options = ("local_epochs", "batch_size", "clip_quantile", "clip_lr", "count_noise")
    constructor_options = ("clip_quantile", "clip_lr", "count_noise")
    option_flags = {
        "clip_quantile": ("float", "adaptive clipping towards this quantile of the update norms (it travels with the "
                                   "design to training and into its statement)"),
        "clip_lr": ("float", "adaptive clipping: the geometric step (default 0.2)"),
        "count_noise": ("float", "adaptive clipping: std of the count's noise (default: max(expected cohort / 20, "
                                 "the noise multiplier z))")}
    audits = (
        AuditSetting("client-aggregate", "client-aggregate", "add-remove",
                     "N = 4, q = 0.5, sigma = 1.1, 520 weights", dict(_AUDIT),
                     (NOISE_DIV10, NO_CLIP,
                      Break("legacy-topup", "the top-up before 0.2.0: each client adds sigma^2 C^2 and the server "
                                            "tops small cohorts up, so the noise grows with the cohort"))),
        AuditSetting("client-aggregate/adaptive", "client-aggregate", "add-remove",
                     "adaptive clipping: N = 4, every client every round, sigma = 0.778 (z = 1.56), count noise "
                     "0.85, quantile 0.1, step 8; the other clients' updates fit under C and the canary's (0.9 C) "
                     "does too, so it moves the count as well as the sum; delta = 1e-3",
                     dict(_AUDIT, q=1.0, sigma=0.778, clip_quantile=0.1, count_noise=0.85, clip_lr=8.0, lr=1e-9,
                          canary=0.9, delta=1e-3),
                     (NOISE_DIV10,
                      Break("uncentred-count", "the raw count released (it moves by 1, not 1/2) with the "
                                               "1/2-sensitivity split, as Flower 1.41's wrappers do"),
                      Break("noise-at-next-clip", "the sum noised with the clipping norm just updated, not the "
                                                  "one its updates were clipped to, as Flower 1.41's wrappers do"))),
        AuditSetting("client-aggregate/groups-strict", "client-aggregate", "add-remove",
                     "budgets of their own: two clients sampled at 0.01, two at 1, one noise on the sum (z = 1.2); "
                     "the canary client in the strict group", dict(_GROUPS, group_of=(0, 0, 1, 1)),
                     (NOISE_DIV10, NO_CLIP,
                      Break("loosest-rate", "every group sampled at the loosest group's rate, each still claimed "
                                            "at its own"))),
        AuditSetting("client-aggregate/groups-loose", "client-aggregate", "add-remove",
                     "the same; the canary client in the group sampled at 1", dict(_GROUPS, group_of=(1, 0, 0, 1)),
                     (NOISE_DIV10, NO_CLIP)),
        AuditSetting("client-aggregate/pipeline", "client-aggregate", "add-remove-pipeline",
                     "a private pre-trial (sigma = 0.75, 1, 1.5 at one seed, 2 rounds each) and the training after "
                     "it (sigma = 3, 2 rounds), all 8 releases as one; N = 4, every client every round; claimed: "
                     "the two composed; delta = 1e-3", dict(_PIPELINE),
                     (NOISE_DIV10, NO_CLIP,
                      Break("shared-noise", "the pre-trial's runs at one seed share their random generator, as "
                                            "before issue 44: y1 = A + z1 W, y2 = A + z2 W give back A"),
                      Break("pretrial-uncharged", "the training's epsilon alone claimed: the pre-trial's spend "
                                                  "dropped", claim=True))),
    )

    def __init__(self, clip_quantile=None, clip_lr=0.2, count_noise=None):
        clip_lr = 0.2 if clip_lr is None else clip_lr            # None: the default step
        if count_noise is not None:          # whatever else is given: a count noise is a number above 0
            positive(count_noise, "count_noise")
        if clip_quantile is not None:
            if isinstance(clip_quantile, bool) or not isinstance(clip_quantile, (int, float)) \
                    or not (0 < clip_quantile < 1):
                raise ValueError(f"clip_quantile must be a number strictly between 0 and 1, got {clip_quantile}")
            positive(clip_lr, "clip_lr")
            if count_noise is not None:
                positive(count_noise, "count_noise")
        self.clip_quantile = None if clip_quantile is None else float(clip_quantile)
        self.clip_lr = float(clip_lr)
        self.count_noise = None if count_noise is None else float(count_noise)

    @classmethod
    def check_options(cls, options: dict) -> None:
        loose = [k for k in ("clip_lr", "count_noise") if (options or {}).get(k) is not None]
        if loose and (options or {}).get("clip_quantile") is None:
            raise ValueError(f"{' and '.join(loose)} {'is an option' if len(loose) == 1 else 'are options'} of "
                             "adaptive clipping: give clip_quantile too, or leave "
                             f"{'it' if len(loose) == 1 else 'them'} out")

    def __repr__(self) -> str:
        if self.clip_quantile is None:
            return "ClientAggregate()"
        return (f"ClientAggregate(clip_quantile={self.clip_quantile:g}, clip_lr={self.clip_lr:g}, "
                f"count_noise={self.count_noise})")

    @property
    def adaptive(self) -> bool:
        """Does the clipping norm follow a quantile of the update norms."""
        return self.clip_quantile is not None

    def options_dict(self) -> dict:
        """The mechanism's options, as given to its constructor."""
        if not self.adaptive:
            return {}
        return {"clip_quantile": self.clip_quantile, "clip_lr": self.clip_lr, "count_noise": self.count_noise}

    # ---------------------------------------------------------------- privacy
    def check_rate(self, q, n_clients=None):
        q = check_rate(q, "q")
        if n_clients is not None:
            expected_cohort(q, n_clients)
        return q

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Poisson-subsampled Gaussian of rate q (the client's own) and
        noise multiplier z = σ√m, m the expected cohort; needs m >= 1.
        Adaptive clipping's count is charged with the sum: the update's own
        noise is raised so that the two together are this Gaussian."""
        q, sigma = rates(q), sigmas(sigma)
        m = expected_cohort(q, n_clients, cohort)
        return Charge("poisson", q, sum_multiplier(q, sigma, n_clients, m))

    def count_std(self, cohort, noise_multiplier=0.0) -> float:
        """σ_b, the std of the noise on adaptive clipping's count: the
        option, or by default max(m/20, z) for the charged noise multiplier
        z: TFF's and Flower's m/20 where that leaves the update most of the
        charge, else z, which always leaves it some (2σ_b >= 2z > z: the
        update's noise is raised by at most 1/√(1 - 1/4), 15 %).  m/20
        alone leaves no budget wherever z >= m/10 (a small cohort)."""
        if self.count_noise is not None:
            return self.count_noise
        return max(float(cohort) / 20.0, float(noise_multiplier))

    def update_multiplier(self, z: float, cohort: float) -> float:
        """The noise multiplier the sum itself gets: z, or with adaptive
        clipping z_Δ >= z (:func:`adaptive_update_multiplier`)."""
        if not self.adaptive or z == 0:
            return z
        return adaptive_update_multiplier(z, self.count_std(cohort, z))

    def noise(self, q, sigma, n_clients, cohort=None) -> Noise:
        """One noise on the sum of multiplier z = σ√m (z_Δ >= z with adaptive
        clipping: the count takes the rest of the charge), divided by m."""
        sigma = sigmas(sigma)
        m = expected_cohort(q, n_clients, cohort)
        if not (np.ndim(q) or np.ndim(m) or np.ndim(sigma)):
            z = float(sigma) * math.sqrt(m)
            return Noise("sum", self.update_multiplier(z, m), split=self.split, divisor=m)
        # one per replica (or per ledger row): each its own z and, adaptive, its own z_Δ
        z, m = np.broadcast_arrays(sum_multiplier(q, np.asarray(sigma, dtype=float), n_clients, m), m)
        std = np.array([self.update_multiplier(float(a), float(b)) for a, b in zip(z.ravel(), m.ravel())])
        return Noise("sum", std.reshape(z.shape), split=self.split, divisor=m.astype(float))

    # -------------------------------------------------------------- statement
    def statement_notes(self, d) -> list[str]:
        if not self.adaptive:
            return []
        m = d.clients_per_round
        sb = self.count_std(m, d.noise_multiplier)
        start = f"C = {d.clip:g}" if d.clip is not None else "the initial C"
        return [f"Adaptive clipping (Andrew et al. 2021): each round also releases the count of updates that fitted "
                f"under C, centred and noised (std {sb:.4g}), and the clipping norm moves from {start} by "
                f"C <- C exp(-{self.clip_lr:g} (share - {self.clip_quantile:g})) towards the "
                f"{self.clip_quantile:g}-quantile of the update norms: every round's C is released too (it follows "
                "from the released counts). The sum and the count are charged together as one Gaussian of the "
                "noise multiplier above (Theorem 1 there): the sum itself is noised at "
                f"{self.update_multiplier(d.noise_multiplier, m):.4g} x its C."]
