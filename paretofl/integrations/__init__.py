"""A design applied where federated learning runs: :mod:`.flower` (Flower's
central-DP strategies) and :mod:`.opacus` (DP-SGD inside clients).  Each
imports its framework only when used."""
