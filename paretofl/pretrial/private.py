"""What a private pre-trial costs (docs/theory.md §4.D).  No torch here.

A pre-trial with ``private = true`` trains on the clients' own data: each
of its (q, σ, seed) replicas is a run of client-level DP-FedAvg (the
pre-trial's mechanism) for as many rounds as the grid's largest T, and its
other T's are read from the same run (post-processing).  What it releases
— every run's models and their test losses on the data set's test split,
which must not be client data — is charged as the composition of all its
runs: one :class:`~paretofl.theory.privacy.Charge` per (q, σ), its steps
the rounds of all its seeds.  Composition, not private selection
(Papernot & Steinke 2022): fitting κ reads the whole front, every run's
loss, where private selection releases one winner.

The charges are data (plain numbers): the store and the fit record them,
and a design made with such a fit composes them with the training's
charges against one budget (:func:`paretofl.recommendation.design`).
"""

from __future__ import annotations

from ..mechanisms import get as mechanism_of
from ..theory.privacy import Charge, RDPAccountant

__all__ = ["charges", "spent", "as_data", "from_data", "epsilon_of"]


def charges(spec) -> list[Charge]:
    """The pre-trial's runs as charges: one per (q, σ) of the grid, for
    max(rounds) rounds of each of its seeds (the non-private reference is
    not run in a private pre-trial)."""
    from .spec import MECHANISM

    mech = mechanism_of(MECHANISM)
    out = []
    for q in spec.q:
        for s in spec.sigmas:
            c = mech.charge(float(q), float(s), int(spec.clients))
            out.append(Charge(c.sampling, float(c.rate), float(c.noise_multiplier),
                              int(max(spec.rounds)) * int(spec.seeds)))
    return out


def epsilon_of(charges_: list[Charge], delta: float) -> float:
    """ε of charges composed (RDP, orders searched)."""
    acct = RDPAccountant()
    for c in charges_:
        acct.step(c.noise_multiplier, c.rate, int(c.steps), c.sampling)
    return acct.get_epsilon(delta)


def spent(spec) -> float:
    """ε the private pre-trial spends at its δ (all its runs composed)."""
    return epsilon_of(charges(spec), spec.delta)


def as_data(charges_: list[Charge]) -> list[dict]:
    """Charges as plain numbers (JSON, a store's metadata)."""
    return [{"sampling": c.sampling, "rate": float(c.rate), "noise_multiplier": float(c.noise_multiplier),
             "steps": int(c.steps)} for c in charges_]


def from_data(rows) -> list[Charge]:
    """Charges read back from :func:`as_data`'s rows, each checked."""
    out = []
    if not isinstance(rows, list):
        raise ValueError("a private pre-trial's charges must be a list")
    for r in rows:
        try:
            c = Charge(str(r["sampling"]), float(r["rate"]), float(r["noise_multiplier"]), int(r["steps"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a private pre-trial's charge is damaged: {r!r} ({exc})") from None
        if not (0 < c.rate <= 1) or not (c.noise_multiplier > 0) or c.steps < 1:
            raise ValueError(f"a private pre-trial's charge is out of range: {r!r}")
        out.append(c)
    return out
