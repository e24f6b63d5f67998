"""Flower's central DP: a fixed cohort of m of the N clients each round
(``fraction_fit``), each update clipped to C, N(0, (zC/m)²) on the mean of
the m updates — noise multiplier z on their sum (docs/theory.md §4.C, §5.1).

* ``flower`` — accounted by paretofl: replace-one neighbours (N public);
  replacing a client moves the sum by up to 2C, so each round is a
  fixed-size subsampled Gaussian of rate m/N and noise multiplier z/2
  (Wang, Balle, Kasiviswanathan 2019, Theorem 27).
* ``flower-accounted`` — what Flower's own accountant (flwr 1.41) can
  account: add/remove neighbours, no amplification.  With m = N an added
  client joins the sum (sensitivity C): a Gaussian of z.  With m < N it can
  displace a sampled client and move the sum by 2C: a Gaussian of z/2.

z = σ√m in paretofl's units, the noise paretofl's own trainer puts on the
same sum.  paretofl's trainer runs both (the cohort drawn without
replacement, all the noise added by the server), which is how the audit
checks them; :mod:`paretofl.integrations.flower` applies them in Flower.
"""

from __future__ import annotations

import math

import numpy as np

from ..theory.privacy import FLOWER_ORDERS, Charge, check_rate, cohort_size, whole_cohort_rate
from .base import (
    NO_CLIP,
    NOISE_DIV10,
    AuditSetting,
    Break,
    Mechanism,
    Noise,
    rates,
    register,
    sigmas,
    sum_multiplier,
    sum_noise,
)

__all__ = ["Flower", "FlowerAccounted"]

#: the fixed-size settings audit at δ = 1e-3: there the claim's RDP conversion
#: is slack enough less that a factor two in the noise multiplier shows in
#: one release (measured: the charge before the fix is caught by about 1.0
#: at 200,000 runs; at δ = 1e-5 the margin is within the audit's noise)
_WITNESS = dict(sigma=1.5 / math.sqrt(19), clients=20, cohort=19, delta=1e-3, features=10, samples=20)


def _fixed(q, n_clients, cohort):
    """The cohort of a fixed-size draw: m = qN, so a cohort given beside q and N must be it (one that is not
    would charge one cohort and release another: refused in one line); as given where N is not."""
    if cohort is None or n_clients is None:
        return cohort
    m = np.asarray(cohort_size(q, n_clients), dtype=float)
    try:
        same = np.all(np.isclose(np.asarray(cohort, dtype=float), m, rtol=1e-9, atol=0.0))
    except ValueError:                        # rows that do not broadcast
        same = False
    if not same:
        raise ValueError("a fixed cohort is m = qN clients: the cohort given is not q x N"
                         + ("" if m.ndim else f" ({cohort} given, {float(m):g} = q x N)") + " (give q = m/N alone)")
    return cohort


class _FixedCohort(Mechanism):
    """What the two Flower mechanisms share: m = qN clients drawn without
    replacement, clipped, summed, all the noise added by the server."""

    selection = "fixed"
    noise_on = "sum"
    framework = "flower"
    #: accounted by the framework's own accountant (Flower's RdpAccountant), not only by paretofl's
    accounted_outside = False
    designable = True
    options = ("local_epochs", "batch_size")
    trusted = ("the server, which receives each sampled client's update and clips it (Flower's server-side fixed "
               "clipping: the server sees the updates unclipped; with client-side clipping, the clipped updates)")
    released = ("every round's global model: the mean of the m sampled clients' clipped updates plus Gaussian "
                "noise of std z C / m (all T models may be published)")

    def check_rate(self, q, n_clients=None):
        q = check_rate(q, "q")
        if n_clients is not None:
            m = cohort_size(q, n_clients)
            if m != round(m) or m < 1:
                raise ValueError(f"Flower samples a whole number of clients: q = {q:.12g} times {int(n_clients)} "
                                 f"clients is {q * int(n_clients):.12g}, not a whole number")
        return q

    def noise(self, q, sigma, n_clients, cohort=None) -> Noise:
        return sum_noise("sum", self.split, q, sigma, n_clients, _fixed(q, n_clients, cohort))

    def sampling_text(self, d) -> str:
        return (f"m = {d.clients_per_round} of the N clients each round, uniformly without replacement; who took "
                "part is not released")


@register
class Flower(_FixedCohort):
    name = "flower"
    summary = "Flower's central DP, m of N clients without replacement, accounted by paretofl (replace-one)"
    relation = ("replace-one: two populations of N clients differ in one client's data (Flower draws a fixed "
                "number, so N is public)")
    audits = (
        AuditSetting("flower", "flower", "witness-replace",
                     "N = 20, m = 19, z = 1.5: every client sends a, the neighbour's client -a; delta = 1e-3",
                     dict(_WITNESS),
                     (NOISE_DIV10, NO_CLIP,
                      Break("charged-at-z", "charged as if replacing a client moved the sum by C, not 2C "
                                            "(Flower's replace-one accountant given the strategy's z)", claim=True))),
    )

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A fixed-size subsampled Gaussian of rate m/N and noise
        multiplier z/2 (replace-one moves the sum by 2C)."""
        q, sigma = rates(q), sigmas(sigma)
        z = sum_multiplier(q, sigma, n_clients, _fixed(q, n_clients, cohort)) / 2.0
        # the m = qN clients drawn each join with probability m/N: charged at that rate (qN within 1e-9 of m)
        return Charge("fixed-size", q if n_clients is None else rates(whole_cohort_rate(q, n_clients)), z)

    def accountant_text(self, d) -> str:
        return ("RDP of the fixed-size subsampled Gaussian (Wang, Balle and Kasiviswanathan 2019, Thm 27), noise "
                "multiplier z/2 (replacing a client moves the sum by 2C), composed over T rounds")


@register
class FlowerAccounted(_FixedCohort):
    name = "flower-accounted"
    summary = "Flower's central DP with Flower's own accountant on (add/remove, no amplification)"
    accounted_outside = True
    relation = "add/remove: one client added to or removed from the population, with all of its data"
    orders = FLOWER_ORDERS
    fixed_orders = True
    audits = (
        AuditSetting("flower-accounted", "flower-accounted", "witness-add-remove",
                     "N = 20 with the canary client, m = 19, z = 1.5: every client sends a, the added one -a; "
                     "delta = 1e-3", dict(_WITNESS),
                     (NOISE_DIV10, NO_CLIP,
                      Break("charged-as-before", "charged a Gaussian of z as before the fix (sensitivity C), "
                                                 "though an added client can displace a sampled one", claim=True))),
    )

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Gaussian without amplification: of z when every client takes
        part (m = N: an added client joins the sum), of z/2 when a fixed
        m < N is drawn (an added client can displace a sampled one, moving
        the sum by up to 2C; docs/theory.md §5.1)."""
        q, sigma = rates(q), sigmas(sigma)
        z = sum_multiplier(q, sigma, n_clients, _fixed(q, n_clients, cohort))
        # every client in the sum (m = N, or q = 1 where N is not said): an added client joins it
        full = np.asarray(q) >= 1.0 if n_clients is None else np.asarray(cohort_size(q, n_clients)) >= int(n_clients)
        return Charge("none", q, np.where(full, z, z / 2.0) if np.ndim(z) else (z if bool(full) else z / 2.0))

    def sampling_text(self, d) -> str:
        if d.q >= 1:
            return "every client every round; no amplification by sampling is claimed"
        return (f"m = {d.clients_per_round} of the N clients each round, uniformly without replacement; no "
                "amplification by sampling is claimed")

    def accountant_text(self, d) -> str:
        how = ("a Gaussian of noise multiplier z a round (every client takes part: an added client joins the sum)"
               if d.q >= 1 else "a Gaussian of noise multiplier z/2 a round (a fixed m < N: an added client can "
                                "displace a sampled one, so the sum moves by up to 2C)")
        return (f"Flower's RdpAccountant (dp-accounting) as paretofl's bridge builds it, and paretofl's RDP "
                f"accountant: {how}, without amplification; the larger of the two is reported")
