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

from ..theory.privacy import Charge, charges_as_data, charges_from_data, compose_epsilon

__all__ = ["charges", "spent", "as_data", "from_data", "epsilon_of"]

#: charges as plain numbers and back, and their composition (the theory layer's)
as_data, from_data, epsilon_of = charges_as_data, charges_from_data, compose_epsilon


def charges(spec) -> list[Charge]:
    """The pre-trial's runs as charges: one per (q, σ) of the grid, for
    max(rounds) rounds of each of its seeds (the non-private reference is
    not run in a private pre-trial): :meth:`Spec.private_charges`."""
    return spec.private_charges()


def spent(spec) -> float:
    """ε the private pre-trial spends at its δ (all its runs composed)."""
    return compose_epsilon(spec.private_charges(), spec.delta)
