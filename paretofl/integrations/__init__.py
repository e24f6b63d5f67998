"""A design applied where federated learning runs: :mod:`.flower` (Flower's
central-DP strategies) and :mod:`.opacus` (DP-SGD inside clients).  Each
imports its framework only when used."""

from ..mechanisms import REGISTRY

#: Flower's name (its bridge, its export, its pip extra): the framework the registry's Flower mechanisms run in
(FLOWER,) = dict.fromkeys(c.framework for c in REGISTRY.values() if c.framework != "paretofl")
#: the frameworks ``export`` takes a design to
EXPORTS = (FLOWER, "opacus", "jax-privacy")
