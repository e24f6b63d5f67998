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

from dataclasses import dataclass, replace

from ..theory.privacy import Charge, charges_as_data, charges_from_data, compose_epsilon

__all__ = ["charges", "spent", "as_data", "from_data", "epsilon_of", "charges_of_log", "Spend", "of_store", "of_fit"]

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


def charges_of_log(log, clients: int) -> list[Charge]:
    """A private store's spend log (:meth:`Store.spend`: one (q, σ, seed,
    rounds) per run charged) as charges: one per (q, σ), its steps the
    rounds of every run at it."""
    from ..mechanisms import get as mechanism_of
    from .spec import MECHANISM

    mech, steps = mechanism_of(MECHANISM), {}
    for q, s, _, t in log:
        steps[(float(q), float(s))] = steps.get((float(q), float(s)), 0) + int(t)
    out = []
    for (q, s), t in sorted(steps.items()):
        c = mech.charge(q, s, int(clients))
        out.append(Charge(c.sampling, float(c.rate), float(c.noise_multiplier), int(t)))
    return out


# --------------------------------------------------------------------------
# what a design may believe: a private pre-trial's spend re-derived from
# its store wherever the store is there (docs/theory.md §4.D)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Spend:
    """What a private pre-trial spent: its ``charges`` (composed: ``epsilon``
    at ``delta``), on ``clients`` clients; ``source`` says where they were
    read, ``verified`` whether they were re-derived from the pre-trial's own
    spend log (False: taken from a fit file whose store is absent)."""

    charges: tuple
    epsilon: float
    delta: float
    clients: int
    source: str
    verified: bool
    fit: str | None = None
    store: str | None = None


def of_store(path) -> Spend | None:
    """A results store's spend (None for a public pre-trial), re-derived
    from its spend log (:meth:`Store.spend`, refused where it was changed)."""
    from .store import Store

    st = Store(path)
    try:
        if not st.private:
            return None
        log, base = st.spend(), st.base
    finally:
        st.close()
    clients, delta = int(base["clients"]), float(base.get("delta", 1e-5))
    ch = tuple(charges_of_log(log, clients))
    if not ch:
        raise ValueError(f"{path} is a private pre-trial that has charged no run yet: run it (paretofl pretrial) "
                         "before designing with it")
    return Spend(ch, compose_epsilon(ch, delta), delta, clients, f"the spend log of {path}", True, store=str(path))


def _fit_says_private(data: dict) -> bool:
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    return bool(data.get("private") or spec.get("private") or data.get("private_charges")
                or data.get("private_epsilon") is not None)


def of_fit(path, data: dict) -> Spend | None:
    """The spend of the pre-trial behind a fit file (``data``, its JSON),
    None for a public one.  Where the fit's results store is there, its
    spend log decides (a fit marked public whose store is private is
    private; a store that charged more since the fit is charged in full),
    and a fit that claims more than its store logged is not that store's;
    where the store is absent, the fit's own charges are taken, checked
    against its own ε, and marked unverified."""
    from pathlib import Path

    store = data.get("results")
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else None
    here = isinstance(store, str) and Path(store).is_file()
    from_store = None
    if here:
        from .store import Store

        st = Store(store)
        try:
            same = spec is not None and st.base == spec
        finally:
            st.close()
        if same:
            from_store = of_store(store)
    if from_store is None and not _fit_says_private(data):
        return None
    claimed = None
    if _fit_says_private(data):
        try:
            claimed = tuple(charges_from_data(data.get("private_charges")))
            delta = float((spec or {}).get("delta", data.get("delta", 1e-5)))
            clients = int(data["clients"])
        except (KeyError, TypeError, ValueError) as exc:
            if from_store is None:
                raise ValueError(f"fit {path} is from a private pre-trial but what it spent is missing or damaged "
                                 f"({exc}): fit its store again (paretofl fit STORE)") from None
        else:
            if not claimed:
                if from_store is None:
                    raise ValueError(f"fit {path} is from a private pre-trial but lists no charges: fit its store "
                                     "again (paretofl fit STORE)")
            else:
                eps = compose_epsilon(claimed, delta)
                said = data.get("private_epsilon")
                if not isinstance(said, (int, float)) or not abs(float(said) - eps) <= 1e-6 * max(1.0, eps):
                    raise ValueError(f"fit {path} says its private pre-trial spent epsilon {said!r}, but its charges "
                                     f"compose to {eps:.6g}: the file was changed; fit the store again")
    if from_store is not None:
        if claimed and compose_epsilon(claimed, from_store.delta) > from_store.epsilon * (1 + 1e-9):
            raise ValueError(f"fit {path} says its pre-trial spent more than the spend log of its store {store}: "
                             "the fit is not that store's; fit the store again")
        return replace(from_store, fit=str(path))
    if not here:
        where = f"the fit {path}, unverified: its store {store} is absent"
    else:
        where = f"the fit {path}, unverified: {store} is not the store it was fitted on"
    return Spend(claimed, compose_epsilon(claimed, delta), delta, clients, where, False, fit=str(path))
