"""Your model, your data: κ and the design for a model paretofl has never seen.

This file is what a user writes: two model factories and two data loaders.
paretofl takes them by name ("your_model:mlp", run from this folder) in the
CLI and in pre-trial specs, or as objects in Python:

    cd examples
    paretofl pretrial --model your_model:mlp --dataset your_model:digits --clients 10 --q 0.5 \\
        --sigmas 0.02 0.05 0.1 0.2 0.4 --rounds 2 4 8 16 32 64 --seeds 3 --clip 1 --lr 0.5 --out mlp.sqlite
    paretofl fit mlp.sqlite --out mlp_fit.json
    paretofl design --fit mlp_fit.json --clients 100 --budget 2 --max-rounds 500

or the whole chain from Python (``python examples/your_model.py --help``):
the pre-trial on the public share, the fit of κ, the design, and one
private training of the design on the clients' data, for the MLP and the
CNN (a small residual network with GroupNorm).

A factory is ``factory(in_shape, n_classes) -> torch.nn.Module``; a loader
takes no arguments and returns a mapping of numpy arrays: ``x_train``,
``y_train``, ``x_test``, ``y_test`` and, optionally, ``clients`` (a client
id per training sample: your own partition) and ``public`` (a boolean mask
of the training samples that are public: what the pre-trial trains on).
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import torch.nn.functional as F
from torch import nn


# ----------------------------------------------------------------- models
def mlp(in_shape, n_classes):
    """A two-layer perceptron with LayerNorm."""
    d = math.prod(in_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, n_classes))


class ResidualCNN(nn.Module):
    """A small CNN with GroupNorm (not BatchNorm: paretofl refuses it) and
    one residual block."""

    def __init__(self, in_shape, n_classes, width=16):
        super().__init__()
        self.stem = nn.Conv2d(in_shape[0], width, 3, stride=2, padding=1)
        self.norm1 = nn.GroupNorm(4, width)
        self.conv = nn.Conv2d(width, width, 3, padding=1)
        self.norm2 = nn.GroupNorm(4, width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        h = F.relu(self.norm1(self.stem(x)))
        h = F.relu(h + self.norm2(self.conv(h)))          # the residual connection
        return self.head(h.mean((2, 3)))                   # global average pooling


def cnn(in_shape, n_classes):
    return ResidualCNN(in_shape, n_classes)


# ------------------------------------------------------------------ data
def _public_mask(n, share=0.1, seed=0):
    mask = np.zeros(n, dtype=bool)
    mask[np.random.default_rng(seed).permutation(n)[: int(round(share * n))]] = True
    return mask


def digits():
    """scikit-learn's 8×8 digits as arrays (1,500 train, 297 test), 10 %
    of the training samples public."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = ((d.images.astype(np.float32) / 16.0 - 0.5) / 0.5)[:, None]
    perm = np.random.default_rng(0).permutation(len(x))
    x, y = x[perm], d.target[perm]
    return {"x_train": x[:1500], "y_train": y[:1500], "x_test": x[1500:], "y_test": y[1500:],
            "public": _public_mask(1500)}


def fashion_mnist():
    """FashionMNIST read from its gzipped IDX files (Debian's
    dataset-fashion-mnist, or the folder in $FMNIST_DIR), 10 % public."""
    folder = Path(os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist"))

    def read(stem):
        with gzip.open(folder / f"{stem}.gz", "rb") as f:
            raw = f.read()
        ndim = raw[3]
        dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)

    def images(stem):
        return ((read(stem).astype(np.float32) / 255.0 - 0.2860) / 0.3530)[:, None]

    y_train = read("train-labels-idx1-ubyte").astype(np.int64)
    return {"x_train": images("train-images-idx3-ubyte"), "y_train": y_train,
            "x_test": images("t10k-images-idx3-ubyte"), "y_test": read("t10k-labels-idx1-ubyte").astype(np.int64),
            "public": _public_mask(len(y_train))}


# ------------------------------------------------- the chain, from Python
def chain(model: str, data: str, clients: int, epsilon: float, max_rounds: int, sigmas, rounds, seeds: int,
          clip: float, lr: float, out: Path) -> dict:
    """pre-trial → fit → design → one private training of the design."""
    import paretofl
    from paretofl.pretrial.spec import Spec
    from paretofl.pretrial.sweep import run_sweep

    here = f"{Path(__file__).stem}"
    spec = Spec(dataset=f"{here}:{data}", model=f"{here}:{model}", clients=10, q=[0.5], sigmas=list(sigmas),
                rounds=list(rounds), seeds=seeds, clip=clip, lr=lr)
    store = out / f"{model}_{data}.sqlite"
    run_sweep(spec, store, progress=True)
    fit = paretofl.fit(store, bootstrap=200)
    d = paretofl.design(n_clients=clients, epsilon=epsilon, max_rounds=max_rounds, kappa=fit.kappa)
    loaded = globals()[data]()
    private = {**loaded, "public": None}                     # the clients hold the rest
    keep = ~loaded["public"]
    private.update(x_train=loaded["x_train"][keep], y_train=loaded["y_train"][keep])
    r = paretofl.train(dataset=private, model=globals()[model], clients=clients, design=d, clip=clip, lr=lr,
                       replicas=2)
    return {"model": model, "kappa": fit.kappa, "kappa_ci": fit.kappa_ci, "q": d.q, "rounds": d.rounds,
            "sigma": d.sigma, "epsilon": r.epsilon, "accuracy": r.accuracy, "store": str(store)}


def main(argv=None):
    ap = argparse.ArgumentParser(description="pre-trial, fit, design and train for your own models and data")
    ap.add_argument("--models", nargs="+", choices=("mlp", "cnn"), default=["mlp", "cnn"],
                    help="which of this file's factories to run")
    ap.add_argument("--data", choices=("digits", "fashion_mnist"), default="digits",
                    help="which of this file's loaders to use")
    ap.add_argument("--clients", type=int, default=50, help="clients N of the design and its training")
    ap.add_argument("--epsilon", type=float, default=2.0, help="the privacy budget (delta = 1e-5)")
    ap.add_argument("--max-rounds", type=int, default=200, help="the most rounds the design may use")
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.02, 0.05, 0.1, 0.2, 0.4],
                    help="the pre-trial's noise grid")
    ap.add_argument("--rounds", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64], help="the pre-trial's rounds grid")
    ap.add_argument("--seeds", type=int, default=3, help="pre-trial seeds per grid point")
    ap.add_argument("--clip", type=float, default=1.0, help="clipping norm C")
    ap.add_argument("--lr", type=float, default=0.5, help="clients' learning rate")
    ap.add_argument("--out", help="folder for the pre-trial stores (default: a temporary folder)")
    a = ap.parse_args(argv)
    out = Path(a.out or tempfile.mkdtemp(prefix="your_model_"))
    out.mkdir(parents=True, exist_ok=True)
    for model in a.models:
        r = chain(model, a.data, a.clients, a.epsilon, a.max_rounds, a.sigmas, a.rounds, a.seeds, a.clip, a.lr, out)
        lo, hi = r["kappa_ci"]
        print(f"{model}: kappa {r['kappa']:.3g} [{lo:.3g}, {hi:.3g}] -> q {r['q']:g}, T {r['rounds']}, "
              f"sigma {r['sigma']:.4g}; trained: accuracy {r['accuracy']:.3f} at epsilon {r['epsilon']:.3f} "
              f"(pre-trial store {r['store']})", flush=True)


if __name__ == "__main__":
    main()
