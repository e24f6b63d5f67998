"""``nbafl``: noise before aggregation (Wei et al. 2020; docs/theory.md §6).

Each scheduled client trains locally, clips its *parameters* to norm C and
uploads them with Gaussian noise σ_U; past a threshold the server adds
downlink noise too.  Parameter clipping bounds how far any change of a
client's data moves its upload: by 2C (replace-one, at the client level and
so at the sample level).  Each upload is a Gaussian mechanism of noise
multiplier σ_U/(2C), seen with its sender; every round is charged one, so T
rounds are T uploads whether the client was scheduled or not.
"""

from __future__ import annotations

import math

from ..theory.privacy import Charge
from .base import NO_CLIP, NOISE_DIV10, AuditSetting, Mechanism, Noise, register, sigmas

__all__ = ["NbAFLMechanism"]

_SETTING = dict(clip=10.0, clients=1, samples=64, lr=0.05, features=10)


@register
class NbAFLMechanism(Mechanism):
    name = "nbafl"
    summary = "noise before aggregation (Wei et al. 2020): clipped parameters noised on each client"
    trusted = "nobody beyond each client's own device: every upload leaves it noised"
    relation = "replace-one: one client's data replaced by any other data (so one sample too)"
    released = ("each scheduled client's clipped parameters plus Gaussian noise, with its sender, to the server, "
                "and the server's average (plus its downlink noise) to every client")
    selection = "fixed"
    noise_on = "parameters"
    split = "client"
    trainable = False          # its own algorithm, not client-level DP-FedAvg
    algorithm = "nbafl"
    fixed_by_design = ("clip", "clients_per_round", "exposures", "calibration")   # what nbafl_design chose
    audits = (
        AuditSetting("nbafl", "nbafl", "sample-replace", "one client, C = 10, sigma_U for epsilon = 2",
                     dict(_SETTING, epsilon=2.0, calibration="clipping"), (NOISE_DIV10, NO_CLIP)),
        AuditSetting("nbafl/paper", "nbafl", "sample-replace",
                     "the same, sigma_U by Wei et al.'s calibration for their epsilon = 1 (the claim is what it "
                     "guarantees)", dict(_SETTING, epsilon=1.0, calibration="paper"), ()),
    )

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Gaussian of noise multiplier σ = σ_U/(2C) per round (one upload
        each, seen): no amplification by the scheduling."""
        return Charge("none", 1.0, sigmas(sigma))

    def noise(self, q, sigma, n_clients=None, cohort=None) -> Noise:
        return Noise("parameters", sigmas(sigma), split=self.split)

    def sampling_text(self, d) -> str:
        k = d.details.get("clients_per_round", round(d.q * d.n_clients))
        return (f"K = {k} of the N clients scheduled each round, uniformly without replacement; who took part is "
                "seen, and every round is charged as an upload")

    def accountant_text(self, d) -> str:
        return ("RDP of the Gaussian of noise multiplier sigma_U / (2C) per upload (parameter clipping bounds a "
                "change of one client's data by 2C), composed over the T rounds")

    def derived_details(self, d) -> dict:
        """NbAFL's figures (:func:`paretofl.theory.convergence.nbafl_design`'s),
        re-derived from the design's C, σ, T, δ, budget and smallest client:
        the uplink std it releases and what it guarantees, and the paper's."""
        from ..theory.convergence import nbafl_sigma_uplink

        x = d.details or {}
        if d.clip is None or "client_size" not in x:     # what nbafl_design always records
            raise ValueError("an NbAFL design records its clip C and, in its details, the smallest client's size "
                             "(client_size): make it with nbafl_design")
        clip, T = float(d.clip), int(d.rounds)
        out = {"clip": clip, "sigma_uplink_clipping": 2 * clip * float(d.sigma),
               "epsilon_guaranteed_clipping": self.charge(1.0, float(d.sigma)).epsilon(d.delta, T),
               "rounds": T, "delta": float(d.delta), "n_clients": int(d.n_clients), "epsilon_paper": float(d.budget)}
        paper = nbafl_sigma_uplink(clip, int(x["client_size"]), T, float(d.budget), d.delta)
        z = paper / (2 * clip)
        out.update(sigma_uplink_paper=paper,
                   epsilon_guaranteed_paper=self.charge(1.0, z).epsilon(d.delta, T) if z >= 1e-6 else math.inf)
        return out

    def mechanism_text(self, d) -> str:
        clip = d.clip
        return (f"parameters clipped to L2 norm C = {clip:g}; each upload noised with std sigma_U = "
                f"{2 * clip * d.sigma:.4g} (noise multiplier {d.sigma:.4g} on the 2C a client's change can move it)")

    def statement_notes(self, d) -> list[str]:
        paper = d.details.get("epsilon_guaranteed_paper")
        if paper is None:
            return []
        return [f"Calibration: sigma_U is paretofl's, calibrated to the epsilon above. Wei et al.'s calibration "
                f"(sigma_U = {d.details['sigma_uplink_paper']:.4g}, sized for a change of 2C/m) guarantees epsilon "
                f"{paper:.4g} over the same uploads, not {d.budget:g}: do not publish their figure."]
