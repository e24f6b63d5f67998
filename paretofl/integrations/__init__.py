"""A design applied where federated learning runs: :mod:`.flower` (Flower's
central-DP strategies), :mod:`.opacus` (DP-SGD inside clients),
:mod:`.jax_privacy` (banded matrix factorization's correlated noise) and
:mod:`.tff` (TensorFlow Federated's distributed DP aggregator).  Each
imports its framework only when used."""

from ..mechanisms import REGISTRY

#: Flower's name (its bridge, its export, its pip extra): the framework the registry's Flower mechanisms run in
(FLOWER,) = dict.fromkeys(c.framework for c in REGISTRY.values() if c.framework != "paretofl")
#: the frameworks ``export`` takes a design to
EXPORTS = (FLOWER, "opacus", "jax-privacy", "tff")
#: where a design whose mechanism puts its noise somewhere of its own is exported (the others: Flower or Opacus)
EXPORT_OF_NOISE = {"correlated-sum": "jax-privacy", "modular-sum": "tff"}


def claim_holds(plan: str, epsilon, spent: float, budget=None) -> None:
    """A plan's ε against what its own parameters spend (``spent``, re-derived where the plan is made), refused
    in one line where it says less (it would publish less than the run spends: a plan built by hand, or an
    exported snippet whose rounds or noise were edited) or where they spend more than its ``budget``.  A
    larger ε is a looser claim, and stands (a design's total with a private pre-trial's spend in it is one)."""
    import numbers

    from ..recommendation import CLAIM_RTOL

    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not epsilon > 0:
        raise ValueError(f"{plan}'s epsilon must be a positive number, got {epsilon!r}")
    if epsilon < spent * (1 - CLAIM_RTOL):
        raise ValueError(f"{plan} says epsilon {epsilon!r} where its parameters spend {spent:.6g}: make the plan "
                         "from a design (its plan(...)), or design again for the rounds and noise you want")
    if budget is not None and spent > budget * (1 + CLAIM_RTOL):
        raise ValueError(f"{plan}'s parameters spend epsilon {spent:.6g}, over its budget {budget!r}: design "
                         "again for the rounds and noise you want")


def checked(design, where: str = "the design"):
    """``design`` as a framework may run it, or refused in one line: a
    paretofl Design checked as a file is (:meth:`Design.as_file`: its
    privacy figures the ones its parameters give, its recipe one record; an
    object edited in memory too), in plain numbers, with one budget for all
    clients (a design with groups samples each at its own rate, which no
    framework does).  Every bridge's entry point calls it and reads what it
    returns."""
    from ..recommendation import Design

    if not isinstance(design, Design):
        raise ValueError(f"{where} must be a paretofl Design (paretofl.design(...), or Design.load(path)), got "
                         f"{type(design).__name__}")
    design = design.as_file(where)       # checked as a file is, in plain numbers (a snippet prints them)
    if design.groups or design.group_of is not None:
        raise ValueError("a design with budgets of their own (groups sampled at their own rates) runs in paretofl's "
                         "trainer only: train it (paretofl train --design FILE); no framework samples its groups")
    return design
