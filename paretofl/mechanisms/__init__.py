"""paretofl's mechanisms: one class each, and the registry every layer
reads (docs/architecture.md, "adding a mechanism").

``get(name, **options)`` returns a configured mechanism; ``names()`` lists
them (``names(designable=True)``: those ``design`` can design for);
``audit_settings()`` lists every audit setting with its broken copies.
No torch here.
"""

from __future__ import annotations

from . import aggregate, bandmf, distributed, flower, local, nbafl, sample  # noqa: F401  (each registers its mechanism)
from .aggregate import ClientAggregate, adaptive_update_multiplier
from .bandmf import BandMF, BandMFAmplified
from .base import REGISTRY, AuditSetting, Break, InfeasibleBudget, Mechanism, Noise, get, names, on_floor
from .distributed import DistributedSkellam
from .flower import Flower, FlowerAccounted
from .local import ClientLocal
from .nbafl import NbAFLMechanism
from .sample import SampleDPSGD
from .statement import statement

#: the mechanism a design or a training is for when none is named (the one place it is named: the
#: other layers read this, tests/test_house_literals.py)
DEFAULT = "client-aggregate"
#: the design's choice that compares the mechanisms whose ``in_auto`` is true and keeps the lowest bound
SEARCH = "auto"
#: the mechanisms ``design(mechanism="auto")`` compares (those whose ``in_auto`` is true), the default first
AUTO = (DEFAULT, *(n for n in names(in_auto=True) if n != DEFAULT))

__all__ = ["DEFAULT", "SEARCH", "AUTO", "search_auto", "InfeasibleBudget",
           "Mechanism", "Noise", "AuditSetting", "Break", "REGISTRY", "get", "names", "audit_settings",
           "audit_setting", "statement", "ClientAggregate", "ClientLocal", "SampleDPSGD", "NbAFLMechanism",
           "Flower", "FlowerAccounted", "BandMF", "BandMFAmplified", "DistributedSkellam", "adaptive_update_multiplier"]


def audit_settings(mechanism: str | None = None) -> list[AuditSetting]:
    """Every registered audit setting (of one mechanism, if named)."""
    out = []
    for name, cls in REGISTRY.items():
        if mechanism is None or name == mechanism:
            out.extend(cls.audits)
    return out


def audit_setting(name: str) -> AuditSetting:
    """The audit setting called ``name`` (e.g. "client-aggregate/adaptive")."""
    for s in audit_settings():
        if s.name == name:
            return s
    known = ", ".join(s.name for s in audit_settings())
    raise ValueError(f"unknown audit setting {name!r}; choose from {known}")


def search_auto(s):
    """``design(mechanism="auto")``: each mechanism of :data:`AUTO` designed
    at its defaults by its own search (``s``: see
    :meth:`Mechanism.search`; each family's best, no comparison of its
    own), the lowest bound kept, with every one's bound in the notes."""
    found, errors = {}, []
    for name in AUTO:
        try:
            found[name] = get(name).search(s.alone(), {})
        except ValueError as exc:                # InfeasibleBudget is one
            errors.append((name, exc))
    if not found:
        raise errors[0][1]
    best = min(found, key=lambda x: (found[x].utility_bound, AUTO.index(x)))
    d = found[best]
    d.details = dict(d.details, compared={k: v.utility_bound for k, v in found.items()})
    each = "; ".join(f"{k} {v.utility_bound:.4g}" + (f" (b = {v.details['bands']})" if "bands" in v.details else "")
                     + on_floor(v) for k, v in found.items())
    d.notes.append(f"mechanism chosen by the utility bound: {each}. bandmf needs no sampling (groups in turn); "
                   "client-aggregate and bandmf-amplified sample each client independently")
    if errors:
        d.details["not_compared"] = {k: str(e) for k, e in errors}
        d.notes.append("not compared: " + "; ".join(f"{k} ({e})" for k, e in errors))
    return d
