"""Data sets, public subsets and federated partitions.

Built-in sources, in order: local gzipped IDX files (Debian's
``dataset-fashion-mnist`` installs them into /usr/share/datasets/fashion-mnist,
or name any folder), then a torchvision root, then torchvision's download.
scikit-learn's digits are a tiny offline set for tests.

A user's own data: :meth:`Dataset.from_arrays` (train and test arrays,
optionally a client id per training sample and a mask of the public
samples), or a "package.module:function" loader returning a mapping of the
same names (:func:`load_dataset`).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .names import DATASETS, DIRICHLET_BETA, PARTITIONS, shards_per_client  # noqa: F401  (re-exported)

DEBIAN_DIRS = {"fashion-mnist": "/usr/share/datasets/fashion-mnist", "mnist": "/usr/share/datasets/mnist"}
_MEAN_STD = {"fashion-mnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}


@dataclass
class Dataset:
    """Arrays ready for the engine: x float32 (n, *features), y int64 (n,).

    ``clients`` (optional): a client id in 0..K-1 per training sample, the
    user's own partition (partition "given"); ``public`` (optional): a
    boolean mask of the training samples that are public, the share a
    pre-trial trains on.  ``classes``: the number of classes (0: one more
    than the largest label)."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    clients: np.ndarray | None = None
    public: np.ndarray | None = None
    classes: int = 0

    @property
    def n_classes(self) -> int:
        return self.classes or int(max(int(self.y_train.max()), int(self.y_test.max()))) + 1

    @classmethod
    def from_arrays(cls, x_train, y_train, x_test, y_test, clients=None, public=None, name: str = "arrays",
                    n_classes: int | None = None) -> Dataset:
        """A data set from arrays (numpy, torch or lists): features of any
        shape (n, ...), integer labels 0..classes-1.  Features are used as
        given (normalise them beforehand).  Every problem is one ValueError
        naming the array."""
        xs = [_features(x, k) for x, k in ((x_train, "x_train"), (x_test, "x_test"))]
        ys = [_labels(y, k) for y, k in ((y_train, "y_train"), (y_test, "y_test"))]
        for (x, kx), (y, ky) in zip(zip(xs, ("x_train", "x_test")), zip(ys, ("y_train", "y_test"))):
            if len(x) != len(y):
                raise ValueError(f"{kx} has {len(x)} samples but {ky} has {len(y)}")
            if len(x) == 0:
                raise ValueError(f"{kx} is empty")
        if xs[0].shape[1:] != xs[1].shape[1:]:
            raise ValueError(f"x_train's samples have shape {tuple(xs[0].shape[1:])} but x_test's "
                             f"{tuple(xs[1].shape[1:])}")
        top = max(int(ys[0].max()), int(ys[1].max())) + 1
        if n_classes is not None:
            if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
                raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
            if top > n_classes:
                raise ValueError(f"labels reach {top - 1}, out of range for n_classes = {n_classes}")
        classes = int(n_classes or top)
        if classes < 2:
            raise ValueError("the labels hold one class only: a classifier needs at least two")
        missing = sorted(set(range(classes)) - set(np.unique(ys[0].numpy()).tolist()))
        if missing and n_classes is None:
            # labels that skip a class (1-based labels, or {0, 2}) would train
            # a model with a class no sample has, without a word
            seen = np.unique(ys[0].numpy())
            raise ValueError(f"y_train has no sample of class {missing[0]} (its labels are "
                             f"{', '.join(map(str, seen[:6].tolist()))}{', ...' if len(seen) > 6 else ''}): labels "
                             f"must be 0, 1, ..., classes-1; renumber them (1-based labels: subtract 1), or, if a "
                             f"class truly has no training sample, say how many classes there are: n_classes= here, or "
                             f"an 'n_classes' entry in what your data loader returns")
        n = len(ys[0])
        if clients is not None:
            clients = _ids(clients, n)
        if public is not None:
            public = np.asarray(public)
            if public.shape != (n,) or public.dtype != bool:
                raise ValueError(f"public must be a boolean mask of the {n} training samples, got "
                                 f"{public.dtype} of shape {public.shape}")
            if not public.any():
                raise ValueError("public marks no training sample as public")
        return cls(name, xs[0], ys[0], xs[1], ys[1], clients, public, classes)

    @property
    def shape(self) -> tuple:
        return tuple(self.x_train.shape[1:])


def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 8 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path} is truncated: expected {int(np.prod(dims))} values, found {arr.size}")
    return arr.reshape(dims)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _from_idx_folder(name: str, folder: Path) -> Dataset | None:
    stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte"]
    paths = [_find_idx(folder, s) for s in stems]
    if any(p is None for p in paths):
        return None
    xtr, ytr, xte, yte = (_read_idx(p) for p in paths)
    return _normalise(name, xtr, ytr, xte, yte)


def _normalise(name, xtr, ytr, xte, yte) -> Dataset:
    mean, std = _MEAN_STD.get(name, (0.5, 0.5))

    def prep(x):
        x = torch.from_numpy(np.array(x, dtype=np.float32)).div_(255.0)
        if x.ndim == 3:
            x = x.unsqueeze(1)
        return (x - mean) / std

    return Dataset(name, prep(xtr), torch.from_numpy(ytr.astype(np.int64)), prep(xte),
                   torch.from_numpy(yte.astype(np.int64)))


def _from_torchvision(name: str, root: str, download: bool) -> Dataset:
    import torchvision

    cls = {"fashion-mnist": torchvision.datasets.FashionMNIST, "mnist": torchvision.datasets.MNIST,
           "cifar10": torchvision.datasets.CIFAR10}[name]
    tr = cls(root, train=True, download=download)
    te = cls(root, train=False, download=download)
    if name == "cifar10":
        xtr = np.asarray(tr.data).transpose(0, 3, 1, 2)
        xte = np.asarray(te.data).transpose(0, 3, 1, 2)
        ds = _normalise(name, xtr, np.asarray(tr.targets), xte, np.asarray(te.targets))
        return ds
    return _normalise(name, tr.data.numpy(), tr.targets.numpy(), te.data.numpy(), te.targets.numpy())


def _digits() -> Dataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0 - 0.5) / 0.5
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(x))
    x, y = x[perm][:, None], d.target[perm].astype(np.int64)
    n_tr = 1500
    return Dataset("digits", torch.from_numpy(x[:n_tr]), torch.from_numpy(y[:n_tr]),
                   torch.from_numpy(x[n_tr:]), torch.from_numpy(y[n_tr:]))


def load_dataset(name, data_dir: str | None = None, download: bool = True) -> Dataset:
    """Load ``name`` from local IDX files, a torchvision root, or a download.

    ``data_dir`` may hold the four IDX files (gzipped or not) or be a
    torchvision root.  Raises ``ValueError`` with how to get the data when
    nothing works.

    ``name`` may also be a user's data: a "package.module:function" loader
    (called with no arguments, returning a mapping for
    :func:`from_mapping`), a :class:`Dataset`, or such a mapping.
    """
    if isinstance(name, Dataset):
        return name
    if hasattr(name, "keys"):
        return from_mapping(name)
    from .modules import is_reference, resolve

    if is_reference(name):
        loader = resolve(name, "data loader")
        try:
            out = loader()
        except Exception as exc:
            raise ValueError(f"data loader {name} raised {type(exc).__name__}: {exc}") from None
        return from_mapping(out, name=name)
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)} or name your loader "
                         "as package.module:function")
    if name == "digits":
        return _digits()
    folders = [Path(data_dir)] if data_dir else []
    if name in DEBIAN_DIRS:
        folders.append(Path(DEBIAN_DIRS[name]))
        for f in list(folders):
            ds = _from_idx_folder(name, f) if f.is_dir() else None
            if ds is not None:
                return ds
    root = data_dir or os.environ.get("PARETOFL_DATA", str(Path.home() / ".cache" / "paretofl"))
    errors = []
    for dl in ((False, True) if download else (False,)):
        try:
            return _from_torchvision(name, root, download=dl)
        except Exception as exc:  # torchvision raises RuntimeError/URLError/OSError
            errors.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    hint = " (on Debian: apt-get install dataset-fashion-mnist)" if name == "fashion-mnist" else ""
    raise ValueError(f"data set {name} not found locally and could not be downloaded{hint}; "
                     f"give data_dir with its IDX files or a torchvision root ({errors[-1]})")


def fingerprint(ds: Dataset) -> str:
    """A digest of a data set's arrays (features, labels, client ids, public
    mask): what a results store records of a user's data, so that changed
    data under the same loader's name is never mixed into old runs."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for a in (ds.x_train, ds.y_train, ds.x_test, ds.y_test):
        t = a.contiguous()
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.numpy().tobytes())
    for a in (ds.clients, ds.public):
        h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def public_subset(ds: Dataset, fraction: float, seed: int = 0, rest: bool = False) -> Dataset:
    """A random ``fraction`` of the training set (stratified by nothing: a
    uniform sample), with the full test set — the public data of pre-trials.
    ``rest``: the other ``1 - fraction`` instead, disjoint from it (the
    clients' private data when the public share trains the pre-trial).

    A data set that marks its own public samples (``ds.public``) gives
    those (or, with ``rest``, the others) and ``fraction`` is not used.
    Client ids travel with their samples, renumbered 0..K-1 in the subset."""
    if ds.public is not None:
        idx = torch.from_numpy(np.flatnonzero(~ds.public if rest else ds.public))
        if len(idx) == 0:
            raise ValueError("the data set's public mask leaves no private sample for the rest")
        return Dataset(ds.name, ds.x_train[idx], ds.y_train[idx], ds.x_test, ds.y_test,
                       None if ds.clients is None else _renumber(ds.clients[idx.numpy()]), None, ds.n_classes)
    if not (0 < fraction <= 1):
        raise ValueError(f"public fraction must lie in (0, 1], got {fraction}")
    g = torch.Generator().manual_seed(seed)
    n = max(1, int(round(fraction * len(ds.y_train))))
    perm = torch.randperm(len(ds.y_train), generator=g)
    idx = perm[n:] if rest else perm[:n]
    if len(idx) == 0:
        raise ValueError(f"public fraction {fraction:g} leaves no data for the rest")
    return Dataset(ds.name, ds.x_train[idx], ds.y_train[idx], ds.x_test, ds.y_test,
                   None if ds.clients is None else _renumber(ds.clients[idx.numpy()]), None, ds.n_classes)


# --------------------------------------------------------------------------
# partitions: each returns a list of index arrays, one per client
# --------------------------------------------------------------------------
def partition_iid(labels, n_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Equal random split."""
    rng = np.random.default_rng(seed)
    return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), n_clients)]


def partition_dirichlet(labels, n_clients: int, beta: float, seed: int = 0, min_size: int = 10,
                        capped: bool = False):
    """Label skew: each class is spread over clients by Dirichlet(β) shares
    (the heterogeneous setting of ALI-DPFL, after Hsu et al. 2019).
    Redrawn until every client holds at least ``min_size`` samples.

    ``capped``: a client that already holds ``len(labels)/n_clients``
    samples gets no share of the classes dealt after it fills up (the
    shares of the others are renormalised), as the partitioner of the
    federated-learning library ALI-DPFL's code builds on does; client
    sizes then stay near equal while labels stay skewed.  Uncapped, a
    Dir(0.05) split of FashionMNIST's 60,000 gives clients from a few
    hundred to over twenty thousand samples."""
    if not beta > 0:
        raise ValueError(f"Dirichlet beta must be positive, got {beta}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    full = len(labels) / n_clients
    for _ in range(1000):
        parts = [[] for _ in range(n_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            shares = rng.dirichlet(np.full(n_clients, beta))
            if capped:
                shares = shares * np.array([len(p) < full for p in parts])
                shares = shares / shares.sum()
            cuts = (np.cumsum(shares) * len(idx)).astype(int)[:-1]
            for i, chunk in enumerate(np.split(idx, cuts)):
                parts[i].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"could not draw a Dirichlet({beta}) partition with >= {min_size} samples per client")


def partition_shards(labels, n_clients: int, n_shards: int = 400, seed: int = 0):
    """Label shards (Adap DP-FL): sort by label, cut into ``n_shards`` equal
    shards, give each client n_shards/n_clients of them at random."""
    if n_shards % n_clients:
        raise ValueError(f"{n_shards} shards do not divide among {n_clients} clients")
    if n_shards > len(labels):
        raise ValueError(f"{n_shards} label shards of {len(labels)} samples leave shards empty (the split would be "
                         "near random, not by label): give fewer shards a client or fewer clients")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, n_shards)
    pick = rng.permutation(n_shards).reshape(n_clients, -1)
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in pick]


def partition_given(clients, n_clients: int | None = None) -> list[np.ndarray]:
    """The data's own partition: client k holds the samples whose id is k.
    ``n_clients`` (optional) must equal the number of ids."""
    if clients is None:
        raise ValueError("partition 'given' needs a data set with a client id per training sample (clients)")
    k = int(clients.max()) + 1
    if n_clients is not None and n_clients != k:
        raise ValueError(f"the data set's own partition has {k} clients, not {n_clients}: give clients = {k}")
    order = np.argsort(clients, kind="stable")
    return np.split(order, np.cumsum(np.bincount(clients, minlength=k))[:-1])


def make_partition(kind: str, labels, n_clients: int, seed: int = 0, beta: float = DIRICHLET_BETA,
                   shards: int = 400, clients=None):
    """Split the training samples over ``n_clients`` clients; ``kind``
    "given" takes the data set's own client ids (``clients``)."""
    if kind == "given":
        return partition_given(clients, n_clients)
    if kind == "iid":
        return partition_iid(labels, n_clients, seed)
    if kind in ("dirichlet", "dirichlet-capped"):
        return partition_dirichlet(labels, n_clients, beta, seed, capped=kind == "dirichlet-capped")
    if kind == "shards":
        return partition_shards(labels, n_clients, shards, seed)
    if shards_per_client(kind) is not None:          # "shards:K": K shards a client, K·N in all
        return partition_shards(labels, n_clients, shards_per_client(kind) * n_clients, seed)
    raise ValueError(f"unknown partition {kind!r}; use iid, dirichlet, dirichlet-capped, shards, shards:K or given")




# --------------------------------------------------------------------------
# checks of a user's arrays
# --------------------------------------------------------------------------
def _array(a, name):
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    try:
        return np.asarray(a)
    except Exception as exc:
        raise ValueError(f"{name} is not an array ({exc})") from None


def _features(x, name) -> torch.Tensor:
    a = _array(x, name)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise ValueError(f"{name} must hold numbers, got dtype {a.dtype}")
    if a.ndim < 2:
        raise ValueError(f"{name} must have shape (samples, features...), got shape {a.shape}")
    a = a.astype(np.float32)
    bad = ~np.isfinite(a)
    if bad.any():
        rows = np.flatnonzero(bad.reshape(len(a), -1).any(1))
        raise ValueError(f"{name} has NaN or infinite values in {len(rows)} sample(s), the first at index {rows[0]}")
    return torch.from_numpy(np.ascontiguousarray(a))


def _labels(y, name) -> torch.Tensor:
    a = _array(y, name)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one integer label per sample, got shape {a.shape}")
    whole = np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a)) and np.all(a == np.round(a))
    if a.size and not (np.issubdtype(a.dtype, np.integer) or whole):
        raise ValueError(f"{name} must hold integer class labels 0, 1, ..., got dtype {a.dtype}")
    if a.size and a.min() < 0:
        raise ValueError(f"{name} has a negative label ({a.min():g}): labels must be 0, 1, ..., classes-1")
    return torch.from_numpy(a.astype(np.int64))


def _ids(clients, n) -> np.ndarray:
    a = _array(clients, "clients")
    if a.shape != (n,):
        raise ValueError(f"clients must give one client id per training sample ({n}), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"clients must hold integer ids 0..K-1, got dtype {a.dtype}")
    if a.min() < 0:
        raise ValueError(f"clients has a negative id ({a.min()}): ids must be 0..K-1")
    counts = np.bincount(a)
    empty = np.flatnonzero(counts == 0)
    if len(empty):
        raise ValueError(f"client {empty[0]} has no training sample ({len(empty)} of ids 0..{len(counts) - 1} "
                         "are empty): number the clients 0..K-1 without gaps")
    return a.astype(np.int64)


def _renumber(ids) -> np.ndarray:
    """Client ids of a subset, renumbered 0..K-1 in the order of the original ids."""
    return np.unique(ids, return_inverse=True)[1].astype(np.int64)


def from_mapping(m, name: str = "arrays") -> Dataset:
    """A data set from a loader's mapping: x_train, y_train, x_test, y_test
    and optionally clients, public, n_classes."""
    if isinstance(m, Dataset):
        return m
    if not hasattr(m, "keys"):
        raise ValueError(f"the data loader must return a mapping with x_train, y_train, x_test, y_test, "
                         f"got {type(m).__name__}")
    need = ("x_train", "y_train", "x_test", "y_test")
    missing = [k for k in need if k not in m]
    if missing:
        raise ValueError(f"the data loader's mapping lacks {', '.join(missing)}")
    extra = sorted(set(m) - set(need) - {"clients", "public", "n_classes"})
    if extra:
        raise ValueError(f"the data loader's mapping has unknown key(s) {', '.join(extra)}; "
                         "known: x_train, y_train, x_test, y_test, clients, public, n_classes")
    return Dataset.from_arrays(*(m[k] for k in need), clients=m.get("clients"), public=m.get("public"),
                               name=name, n_classes=m.get("n_classes"))
