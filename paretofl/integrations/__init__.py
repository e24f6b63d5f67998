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
