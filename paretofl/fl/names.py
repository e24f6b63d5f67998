"""The trainer's built-in names, and what a user's own names look like: one
list each, torch-free, read by the trainer, the pre-trial specs and the
command line alike."""

from __future__ import annotations

import re

__all__ = ["DATASETS", "MODELS", "PARTITIONS", "is_reference"]

#: built-in data sets (fl.data loads them)
DATASETS = ("fashion-mnist", "mnist", "cifar10", "digits")
#: built-in models with hand-written kernels (fl.models builds them)
MODELS = ("lr", "lenet", "cnn", "fedavg-cnn", "cifar-cnn")
#: how the training data is split over the clients (fl.data.make_partition)
PARTITIONS = ("iid", "dirichlet", "dirichlet-capped", "shards", "given")

_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def is_reference(value) -> bool:
    """A "package.module:function" string: a user's model factory or data loader."""
    return isinstance(value, str) and bool(_REF.match(value))
