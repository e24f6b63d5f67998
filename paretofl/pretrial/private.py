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

from ..theory.privacy import Charge, account, charges_from_data

__all__ = ["charges", "spent", "charges_of_log", "Spend", "of_store", "of_fit"]


def charges(spec) -> list[Charge]:
    """The pre-trial's runs as charges: one per (q, σ) of the grid, for
    max(rounds) rounds of each of its seeds (the non-private reference is
    not run in a private pre-trial): :meth:`Spec.private_charges`."""
    return spec.private_charges()


def spent(spec) -> float:
    """ε the private pre-trial spends at its δ (all its runs composed)."""
    return account(spec.private_charges(), spec.delta)


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


def _unprotected(base: dict, where) -> None:
    """A pre-trial that trained on the clients' own data without privacy
    (subset rest or all, not private: a noise-free reference among its
    runs) released their data: nothing designed from it can be private."""
    if not base.get("private") and base.get("subset", "public") != "public":
        raise ValueError(f"{where} trained on the clients' own data (subset {base.get('subset')!r}) without privacy, "
                         "a run without noise among them: its runs released that data, so no design from it is "
                         "private; run it with private = true and an epsilon, or on the public share "
                         "(subset = \"public\")")


def of_store(path) -> Spend | None:
    """A results store's spend (None for a public pre-trial), re-derived
    from its spend log (:meth:`Store.spend`, refused where it was changed);
    a store of the clients' own data trained without privacy is refused."""
    from pathlib import Path

    from .store import Store

    path = str(Path(path).resolve())
    st = Store(path)
    try:
        _unprotected(st.base, path)
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
    return Spend(ch, account(ch, delta), delta, clients, f"the spend log of {path}", True, store=path)


def locate(recorded, near=None, digest=None):
    """Where a file a fit or design names is: its recorded path (absolute,
    or from the working folder), else beside ``near`` (the file that names
    it, by its relative path or its name); None where it is nowhere.
    ``digest`` (a fit's ``results_digest``): the first of those that is a
    store whose base has that digest, None where none is (a store of
    another pre-trial at the recorded path is not the fit's)."""
    from pathlib import Path

    if not isinstance(recorded, str) or not recorded:
        return None
    p = Path(recorded)
    cands = [p]
    if near is not None:
        base = Path(near).resolve().parent
        cands += [base / p, base / p.name] if not p.is_absolute() else [base / p.name]
    for c in cands:
        if c.is_file() and (digest is None or _digest_of(c) == digest):
            return str(c.resolve())
    return None


def _digest_of(path) -> str | None:
    """The digest of a results store's base, None for a file that is no store."""
    from ..recommendation import store_digest
    from .store import read_base

    try:
        return store_digest(read_base(path))
    except (ValueError, OSError) as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            # a store another process holds may be the fit's own: never passed over for another or for the fit's
            # own claim (its spend would go uncounted)
            raise ValueError(f"the store {path} is held by another process (a pre-trial writing to it?): its spend "
                             "cannot be read now; try again when it is free") from None
        return None                     # not a results store: not the fit's


def _fit_says_private(data: dict) -> bool:
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
    return bool(data.get("private") or spec.get("private") or data.get("private_charges")
                or data.get("private_epsilon") is not None)


def of_fit(path, data: dict) -> Spend | None:
    """The spend of the pre-trial behind a fit file (``data``, its JSON),
    None for a public one.  The fit's results store, where it is found (its
    recorded path, or beside the fit), decides: it must be the fit's own
    (the same spec), its spend log is charged in full (a store that charged
    more since the fit, a fit marked public whose store is private), and a
    fit that claims more than the log, or lost the charges it recorded, is
    refused.  Where the store is absent, the fit's own charges are taken,
    checked against its own ε, and marked unverified."""
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else None
    _unprotected(spec or {}, f"the pre-trial behind {path}")
    digest = data.get("results_digest") or None
    store = locate(data.get("results"), near=path, digest=digest)
    if store is None and digest is not None:
        # no store of the fit's spec: the file at its path is judged as any fit's is, never passed over (a private
        # store there, with a fit edited to say public and its digest made to match, went uncharged)
        store = locate(data.get("results"), near=path)
    from_store = None
    if store is not None:
        from .store import read_base

        base = read_base(store)
        if (spec is None or base != spec) and (base.get("private") or (spec or {}).get("private")):
            raise ValueError(f"{path} names the store {store}, which holds another pre-trial than the one it was "
                             "fitted on (their specs differ): run \"paretofl fit\" on the store again, or keep "
                             "it beside its own store")
        if spec is not None and base == spec:
            from_store = of_store(store)
    says = _fit_says_private(data)
    if from_store is None and not says:
        return None
    claimed, delta, clients = None, None, None
    if says:
        try:
            claimed = tuple(charges_from_data(data.get("private_charges")))
            delta = float((spec or {}).get("delta", 1e-5))
            clients = int(data["clients"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is the fit of a private pre-trial but what it spent is missing or damaged "
                             f"({exc}): run \"paretofl fit\" on its store again") from None
        if not claimed:
            raise ValueError(f"{path} is the fit of a private pre-trial but lists no charges: run \"paretofl fit\" "
                             "on its store again")
        eps = account(claimed, delta)
        said = data.get("private_epsilon")
        if not isinstance(said, (int, float)) or not abs(float(said) - eps) <= 1e-6 * max(1.0, eps):
            raise ValueError(f"{path} says its private pre-trial spent epsilon {said!r}, but its charges compose to "
                             f"{eps:.6g}: the file was changed; run \"paretofl fit\" on its store again")
    if from_store is not None:
        if claimed and account(claimed, from_store.delta) > from_store.epsilon * (1 + 1e-9):
            raise ValueError(f"{path} says its pre-trial spent more than the spend log of its store {store}: that "
                             "store is not the one it was fitted on; run \"paretofl fit\" on the store again")
        return replace(from_store, fit=str(path))
    where = f"the fit {path}, unverified: its store {data.get('results')} is not there"
    return Spend(claimed, account(claimed, delta), delta, clients, where, False, fit=str(path))
