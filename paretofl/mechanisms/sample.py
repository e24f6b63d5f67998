"""``sample``: sample-level DP-SGD inside each client ("FedAvg + DP" of
ALI-DPFL, Algorithm 1; Adap DP-FL; docs/theory.md §5.3).

Every selected client runs τ DP-SGD steps: Poisson batches at rate q_b,
per-sample gradients clipped to C, N(0, σ²C²) added to each clipped sum,
divided by a public number (q_b times the client's declared size, or a
fixed divisor), never the data's own count.  Neighbours add or remove one
sample of one client.  Each local step is a Poisson-subsampled Gaussian of
rate q_b and noise multiplier σ, charged every round whether the client
was selected or not (conservative).
"""

from __future__ import annotations

from ..theory.privacy import Charge
from .base import NO_CLIP, NOISE_DIV10, AuditSetting, Break, Mechanism, Noise, rates, register, sigmas

__all__ = ["SampleDPSGD"]


@register
class SampleDPSGD(Mechanism):
    name = "sample"
    summary = "sample-level DP-SGD inside each client; the client trusted with its own data"
    unit = "sample"
    trusted = "each client, with its own data; the server and the other clients see only noised updates"
    relation = "add/remove: one sample added to or removed from one client's data"
    released = ("each participating client's update after its DP-SGD steps, to the server (and every model "
                "computed from them)")
    selection = "poisson"
    noise_on = "gradient"
    split = "client"
    options = ("batch_rate", "local_steps", "batch_divisor", "declared_sizes")
    audits = (
        AuditSetting("sample", "sample", "sample-add", "one client of 8 samples + canary, q_b = 0.5, sigma = 1.9",
                     dict(sigma=1.9, q=0.5, clients=1, samples=8, features=50),
                     (NOISE_DIV10, NO_CLIP,
                      Break("private-divisor", "the noised sum divided by the data's own count, which the canary "
                                               "changes"))),
    )

    def charge(self, q, sigma, n_clients=None, cohort=None, steps=1) -> Charge:
        """A Poisson-subsampled Gaussian of rate q (the batch rate q_b) and
        noise multiplier σ, ``steps`` times (the round's local steps)."""
        return Charge("poisson", rates(q), sigmas(sigma), steps)

    def noise(self, q, sigma, n_clients=None, cohort=None) -> Noise:
        return Noise("gradient", sigmas(sigma), split=self.split)

    def sampling_text(self, d) -> str:
        return "Poisson batches inside each client"

    def accountant_text(self, d) -> str:
        return "RDP of the Poisson-subsampled Gaussian at each local step, composed over every step of every round"
