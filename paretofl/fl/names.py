"""The trainer's built-in names, and what a user's own names look like: one
list each, torch-free, read by the trainer, the pre-trial specs and the
command line alike."""

from __future__ import annotations

import math
import numbers
import re

__all__ = ["DATASETS", "MODELS", "PARTITIONS", "check_partition_name", "is_reference", "partition_label",
           "split_partition", "split_name", "DIRICHLET_BETA",
           "concentration_text"]

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
    raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, dirichlet:ALPHA (the Dirichlet split at "
                     f"concentration ALPHA) or shards:K (K label shards a client), got {name!r}")


#: the Dirichlet concentration of a split named plain "dirichlet", in train and in specs alike
DIRICHLET_BETA = 0.5


def concentration_text(beta: float) -> str:
    """A concentration as the shortest text that reads back as the same float
    (0.3, 1, 0.1234567): a label that two different splits cannot share."""
    text = repr(float(beta))
    return text[:-2] if text.endswith(".0") else text


def _concentration(beta) -> float | None:
    if beta is None:
        return None
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not 0 < float(beta) < math.inf:
        raise ValueError(f"beta (the Dirichlet concentration) must be a finite number > 0, got {beta!r}")
    return float(beta)


def split_partition(name, beta=None, strict: bool = True) -> tuple[str, float]:
    """The clients' split in the one vocabulary that ``design --partition``,
    pre-trial specs and ``train`` share, as the trainer's (name, Dirichlet
    concentration): the names of :func:`check_partition_name`, and
    "dirichlet:ALPHA" (or "dirichlet-capped:ALPHA"), the Dirichlet split at
    concentration ALPHA.  ``beta``: the concentration given apart (None: not
    given; plain dirichlet then means :data:`DIRICHLET_BETA`).  A ``beta``
    given beside a name that sets another would be dropped, and is refused;
    so is one beside a split with no concentration where ``strict`` (a
    training; a spec keeps it, as the stores it names always have)."""
    beta = _concentration(beta)
    kind, sep, arg = name.partition(":") if isinstance(name, str) else (name, "", "")
    if sep and kind in ("dirichlet", "dirichlet-capped"):
        try:
            alpha = float(arg) if arg.isascii() and arg.strip() == arg else math.nan
        except ValueError:
            alpha = math.nan
        if not 0 < alpha < math.inf:
            raise ValueError(f"partition {name!r}: the Dirichlet concentration after {kind}: must be a finite number "
                             "> 0, e.g. dirichlet:0.5")
        if beta is not None and beta != alpha:
            raise ValueError(f"partition {name} sets the Dirichlet concentration to {concentration_text(alpha)}; beta "
                             f"{concentration_text(beta)} beside it would be dropped: give one of them")
        return kind, alpha
    name = check_partition_name(name)
    if beta is not None and strict and not name.startswith("dirichlet"):
        raise ValueError(f"beta (the Dirichlet concentration) applies to the dirichlet partitions only, not {name}: "
                         "drop it, or name the split dirichlet:BETA")
    return name, DIRICHLET_BETA if beta is None else beta


def partition_label(name: str, beta: float) -> str:
    """A split as one name, its concentration with it ("dirichlet:0.5"), as
    :func:`split_partition` reads it back."""
    return f"{name}:{concentration_text(beta)}" if name in ("dirichlet", "dirichlet-capped") else name


def split_name(name, beta=None, strict: bool = True) -> str:
    """A split as given (a name, and a concentration apart or None) in its
    one name: :func:`partition_label` of :func:`split_partition`."""
    return partition_label(*split_partition(name, beta, strict))


_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def is_reference(value) -> bool:
    """A "package.module:function" string: a user's model factory or data loader."""
    return isinstance(value, str) and bool(_REF.match(value))
