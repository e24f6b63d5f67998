"""``client-local``: client-level DP of each update the server receives
(docs/theory.md §5.3): nobody is trusted.

Each client joins a round with probability q, clips its update to C and
adds N(0, σ²C²) before it leaves the device (σ_g, its group's own, where
clients have budgets of their own).  The server receives each noised update
with its sender.  Neighbours replace one client's data by none (zero-out):
its clipped update becomes zero, and it still takes part and is seen doing
so, so whether a client belongs to the federation is not protected.  A
round is a Gaussian of noise multiplier σ at each participation, the
participation seen (:func:`paretofl.theory.privacy.rdp_attributed_gaussian`):
subsampling amplifies nothing when the observer sees who took part.
"""

from __future__ import annotations

from ..theory.privacy import Charge, cohort_size
from .base import NO_CLIP, NOISE_DIV10, AuditSetting, Break, Mechanism, Noise, rates, register, sigmas

__all__ = ["ClientLocal"]


@register
class ClientLocal(Mechanism):
    name = "client-local"
    summary = "client-level DP of each update the server receives; nobody trusted; clients seen taking part"
    trusted = "nobody beyond each client's own device: every update leaves it noised"
    relation = ("zero-out: one client's data replaced by none (its clipped update by zero); the client still "
                "takes part and the server sees it do so, so membership in the federation is not protected")
    released = ("every participating client's clipped update plus Gaussian noise, with its sender, to the server "
                "(and everything computed from them)")
    selection = "poisson"
    noise_on = "update"
    groups = True
    split = "client"
    designable = True
    options = ("local_epochs", "batch_size")
    audits = (
        AuditSetting("client-local", "client-local", "zero-out", "N = 1, q = 0.05, sigma = 1.75",
                     dict(sigma=1.75, q=0.05, clients=1, samples=20, features=10),
                     (NOISE_DIV10, NO_CLIP,
                      Break("amplified-claim", "charged as before 0.2.0: a subsampled Gaussian (q, sigma), as if "
                                               "the server did not see who took part", claim=True))),
        AuditSetting("client-local/groups", "client-local", "zero-out",
                     "budgets of their own: the canary client in the strict group (sigma 2.5), another group at "
                     "sigma 1; q = 1", dict(q=1.0, clients=2, samples=20, features=10, sigmas=(2.5, 1.0),
                                          group_of=(0, 1)),
                     (NOISE_DIV10, NO_CLIP,
                      Break("loosest-sigma", "every client noised at the loosest group's sigma, each still claimed "
                                             "at its own group's"))),
    )

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Gaussian of noise multiplier σ at each participation (rate q),
        the participation seen."""
        return Charge("attributed", rates(q), sigmas(sigma))

    def noise(self, q, sigma, n_clients, cohort=None) -> Noise:
        """σ on each client's update (its group's σ_g where it has one: σ is
        then one per client), the sum divided by the expected cohort."""
        m = cohort_size(q, n_clients, cohort)
        return Noise("update", sigmas(sigma), split=self.split,
                     divisor=m)

    def sampling_text(self, d) -> str:
        return (f"each client takes part with probability q = {d.q:.4g}" + (" (every group's)" if d.groups else "")
                + "; who took part is seen, and each client is charged for its own participations only")

    def accountant_text(self, d) -> str:
        return ("RDP of the Gaussian at each participation (participation seen), composed over the rounds a "
                "client takes part in")

    def mechanism_text(self, d) -> str:
        clip = f"C = {d.clip:g}" if d.clip is not None else "C (the clipping norm: not chosen by this design)"
        own = "its group's sigma" if d.groups else f"std {d.sigma:.4g} x C"
        return f"updates clipped to L2 norm {clip}; each client adds noise of {own} before sending"
