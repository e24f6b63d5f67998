"""Data sets, public subsets and federated partitions.

Sources, in order: local gzipped IDX files (Debian's ``dataset-fashion-mnist``
installs them into /usr/share/datasets/fashion-mnist, or name any folder),
then a torchvision root, then torchvision's download.  scikit-learn's digits
are a tiny offline set for tests.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DEBIAN_DIRS = {"fashion-mnist": "/usr/share/datasets/fashion-mnist", "mnist": "/usr/share/datasets/mnist"}
DATASETS = ("fashion-mnist", "mnist", "cifar10", "digits")
_MEAN_STD = {"fashion-mnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}


@dataclass
class Dataset:
    """Arrays ready for the engine: x float32 (n, C, H, W), y int64 (n,)."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def n_classes(self) -> int:
        return int(self.y_train.max()) + 1

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


def load_dataset(name: str, data_dir: str | None = None, download: bool = True) -> Dataset:
    """Load ``name`` from local IDX files, a torchvision root, or a download.

    ``data_dir`` may hold the four IDX files (gzipped or not) or be a
    torchvision root.  Raises ``ValueError`` with how to get the data when
    nothing works.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
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
                     f"give --data-dir with its IDX files or a torchvision root ({errors[-1]})")


def public_subset(ds: Dataset, fraction: float, seed: int = 0, rest: bool = False) -> Dataset:
    """A random ``fraction`` of the training set (stratified by nothing: a
    uniform sample), with the full test set — the public data of pre-trials.
    ``rest``: the other ``1 - fraction`` instead, disjoint from it (the
    clients' private data when the public share trains the pre-trial)."""
    if not (0 < fraction <= 1):
        raise ValueError(f"public fraction must lie in (0, 1], got {fraction}")
    g = torch.Generator().manual_seed(seed)
    n = max(1, int(round(fraction * len(ds.y_train))))
    perm = torch.randperm(len(ds.y_train), generator=g)
    idx = perm[n:] if rest else perm[:n]
    if len(idx) == 0:
        raise ValueError(f"public fraction {fraction:g} leaves no data for the rest")
    return Dataset(ds.name, ds.x_train[idx], ds.y_train[idx], ds.x_test, ds.y_test)


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
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    shards = np.array_split(order, n_shards)
    pick = rng.permutation(n_shards).reshape(n_clients, -1)
    return [np.sort(np.concatenate([shards[s] for s in row])) for row in pick]


def make_partition(kind: str, labels, n_clients: int, seed: int = 0, beta: float = 0.05, shards: int = 400):
    if kind == "iid":
        return partition_iid(labels, n_clients, seed)
    if kind in ("dirichlet", "dirichlet-capped"):
        return partition_dirichlet(labels, n_clients, beta, seed, capped=kind == "dirichlet-capped")
    if kind == "shards":
        return partition_shards(labels, n_clients, shards, seed)
    raise ValueError(f"unknown partition {kind!r}; use iid, dirichlet, dirichlet-capped or shards")
