"""The trainer's built-in names, and what a user's own names look like: one
list each, torch-free, read by the trainer, the pre-trial specs and the
command line alike."""

from __future__ import annotations

import re

__all__ = ["DATASETS", "MODELS", "PARTITIONS", "check_partition_name", "is_reference"]

#: built-in data sets (fl.data loads them)
DATASETS = ("fashion-mnist", "mnist", "cifar10", "digits")
#: built-in models with hand-written kernels (fl.models builds them)
MODELS = ("lr", "lenet", "cnn", "fedavg-cnn", "cifar-cnn")
#: how the training data is split over the clients (fl.data.make_partition); also "shards:K", K label
#: shards a client (about K labels each), where plain "shards" cuts 400 in all
PARTITIONS = ("iid", "dirichlet", "dirichlet-capped", "shards", "given")


def shards_per_client(name) -> int | None:
    """K of a "shards:K" partition; None for any other name."""
    if isinstance(name, str) and name.startswith("shards:"):
        k = name.split(":", 1)[1]
        if k.isascii() and k.isdigit() and int(k) >= 1:
            return int(k)
    return None


def check_partition_name(name) -> str:
    """A partition the trainer splits by, as its one name: one of PARTITIONS
    or "shards:K" (written shards:2, never shards:02); one line otherwise."""
    if name in PARTITIONS:
        return name
    if shards_per_client(name) is not None:
        return f"shards:{shards_per_client(name)}"
    raise ValueError(f"partition must be one of {', '.join(PARTITIONS)} or shards:K (K label shards a client), "
                     f"got {name!r}")

_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def is_reference(value) -> bool:
    """A "package.module:function" string: a user's model factory or data loader."""
    return isinstance(value, str) and bool(_REF.match(value))
