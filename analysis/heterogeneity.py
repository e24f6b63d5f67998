"""Clients that differ: where today's design misses (issue 39, item 1;
docs/results.md §12).

    python analysis/heterogeneity.py [--models lr] [--partitions iid dirichlet:1 dirichlet:0.5 dirichlet:0.1 shards:2]
                                     [--epsilons 1 2 8] [--epochs 1 2] [--factors 0.5 1 2 4] [--seeds 3]
                                     [--lrs 0.1]

FashionMNIST's 90 % private split over N = 100 clients, partitioned IID,
Dirichlet(α) over labels, or ``shards:k`` (sorted by label, cut into k·N
shards, k to a client: about k labels each), C = 0.3, η = 0.1, batch 64,
δ = 1e-5, at most 200 rounds (docs/results.md §6's settings).  At each ε:

* ``design``: today's design with the model's fitted κ (LR: the shipped
  fit) — one local epoch, the (q, T, σ) it picks;
* ``oracle``: q = 1, T = the design's T times each ``--factors``, σ
  calibrated so that T rounds spend ε exactly, each ``--epochs`` local
  epochs and each ``--lrs`` client learning rate η (default the design's
  0.1 only) — the best of that grid on the clients' own data (its tuning's
  privacy cost ignored: an upper bound on what tuning by training reaches).

Beside each partition, a candidate for the dissimilarity constant that
needs no private data: B² = mean_i ‖Δ_i‖² / ‖mean_i Δ_i‖² (the bounded
gradient dissimilarity of Li et al. 2020, *FedProx*, Definition 3, taken on
one local epoch's updates rather than gradients), with Δ_i one client's
update from the initial model, no clipping and no noise, on the public
10 % split over the same N clients partitioned the same way.  B² = 1 when
every client's update is the mean; it is the ratio the drift term of local
SGD's analyses grows with.

One JSON row per training under ``--out`` (default
analysis/out/heterogeneity/), so it resumes; writes ``heterogeneity.md``
(regret, and where the oracle's T and epochs sit against the design's) and
``heterogeneity.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from kappa_error import fitted_kappa, label  # analysis/ is on the path when a script here runs

import paretofl
from paretofl.fl.algorithms import train
from paretofl.fl.build import assemble, prepare
from paretofl.fl.data import partition_dirichlet, partition_shards
from paretofl.theory.privacy import calibrate_noise

ROOT = Path(__file__).resolve().parent.parent
N, DELTA, CLIP, LR, T_MAX = 100, 1e-5, 0.3, 0.1, 200
SIGMA_RANGE = dict(sigma_min=0.01, sigma_max=30.0)


def setup_for(model, partition):
    kind, _, arg = partition.partition(":")
    if kind == "iid":
        return prepare("fashion-mnist", model, N, partition="iid", seed=0, public_fraction=0.1, subset="rest")
    if kind == "dirichlet":
        return prepare("fashion-mnist", model, N, partition=f"dirichlet:{float(arg)}", seed=0,
                       public_fraction=0.1, subset="rest")
    if kind == "shards":
        s = prepare("fashion-mnist", model, N, partition="iid", seed=0, public_fraction=0.1, subset="rest")
        return replace(s, parts=partition_shards(s.data.y_train.numpy(), N, int(arg) * N, seed=0))
    raise ValueError(f"partition {partition!r}: use iid, dirichlet:ALPHA or shards:K")


def dissimilarity(model, partition, epochs=1):
    """B² on the public split partitioned like the federation (above): one
    local epoch of batch-64 SGD at η from a zero softmax regression, plain
    PyTorch (a diagnostic, so independent of the engine)."""
    import torch

    kind, _, arg = partition.partition(":")
    s = prepare("fashion-mnist", model, N, partition="iid", seed=0, public_fraction=0.1, subset="public")
    if kind == "shards":
        s = replace(s, parts=partition_shards(s.data.y_train.numpy(), N, int(arg) * N, seed=0))
    elif kind == "dirichlet":    # 60 samples a client: a smaller floor than training's 10 lets α = 0.1 draw
        s = replace(s, parts=partition_dirichlet(s.data.y_train.numpy(), N, float(arg), seed=0, min_size=2))
    x, y = s.data.x_train.flatten(1), s.data.y_train
    g = torch.Generator().manual_seed(0)
    deltas = []
    for p in s.parts:
        w = torch.zeros(x.shape[1] + 1, 10, requires_grad=True)
        idx = torch.as_tensor(p)
        for _ in range(epochs):
            for b in idx[torch.randperm(len(idx), generator=g)].split(64):
                xb = torch.cat([x[b], torch.ones(len(b), 1)], 1)
                loss = torch.nn.functional.cross_entropy(xb @ w, y[b])
                (grad,) = torch.autograd.grad(loss, w)
                w = (w - LR * grad).detach().requires_grad_(True)
        deltas.append(w.detach().flatten())
    d = torch.stack(deltas)
    return float((d.pow(2).sum(1).mean() / d.mean(0).pow(2).sum()).item())


def labels_per_client(setup):
    y = setup.data.y_train.numpy()
    return float(np.mean([len(np.unique(y[p])) for p in setup.parts]))


def run(setup, seeds, q, rounds, sigma, epochs, eps, lr=LR, device="cpu"):
    pol = assemble(setup, "dpfedavg", seeds, device=device, mechanism="client-aggregate", sigma=sigma,
                   clip=CLIP, lr=lr, client_rate=q, local_epochs=epochs, batch_size=64).policy
    t0 = time.perf_counter()
    _, _, fin = train(pol, rounds=rounds, epsilon=eps * (1 + 1e-9), delta=DELTA, evaluate=rounds)
    return dict(spent=float(np.max(fin["epsilon"])), accuracy=fin["accuracy"].tolist(),
                seconds=time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["lr"])
    ap.add_argument("--partitions", nargs="+",
                    default=["iid", "dirichlet:1", "dirichlet:0.5", "dirichlet:0.1", "shards:2"])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--epochs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--factors", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lrs", type=float, nargs="+", default=[LR],
                    help="the oracle's client learning rates eta (default: the design's 0.1 only)")
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "heterogeneity"))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the rows say which)")
    ap.add_argument("--kappa", type=float, default=None,
                    help="the κ whose design's T the factors multiply (default: the model's fitted κ)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, spread, b2 = [], {}, {}
    for model in a.models:
        k0 = a.kappa if a.kappa is not None else fitted_kappa(model)
        for partition in a.partitions:
            setup = setup_for(model, partition)
            spread[(label(model), partition)] = labels_per_client(setup)
            b2[partition] = dissimilarity(model, partition)
            for eps in a.epsilons:
                d = paretofl.design(N, eps, DELTA, max_rounds=T_MAX, kappa=k0, **SIGMA_RANGE)
                todo = [("design", d.q, d.rounds, d.sigma, 1, LR)]
                for e in a.epochs:
                    for t in sorted({min(T_MAX, max(1, round(d.rounds * f))) for f in a.factors}):
                        sigma = calibrate_noise(eps, 1.0, t, DELTA) / math.sqrt(N)
                        todo += [("oracle", 1.0, t, sigma, e, lr) for lr in a.lrs]
                for policy, q, t, sigma, e, lr in todo:
                    name = (f"{label(model)}_{partition.replace(':', '')}_eps{eps:g}_{policy}_q{q:g}_T{t}_E{e}"
                            + ("" if lr == LR else f"_lr{lr:g}") + ".json")
                    path = out / name
                    if path.exists():
                        rows.append(json.loads(path.read_text()))
                        continue
                    row = dict(model=label(model), partition=partition, epsilon=eps, policy=policy, q=q, rounds=t,
                               sigma=sigma, epochs=e, lr=lr, design_rounds=d.rounds, device=a.device,
                               **run(setup, a.seeds, q, t, sigma, e, eps, lr, a.device))
                    path.write_text(json.dumps(row))
                    rows.append(row)
                    print(f"{label(model)} {partition} eps {eps:g} {policy}: q {q:g} T {t} sigma {sigma:.3g} E {e} "
                          f"lr {lr:g}: {100 * np.mean(row['accuracy']):.1f}", flush=True)
    lines = ["| model | partition (labels a client; B² public) | ε | design: T, σ → accuracy | oracle: T, σ, epochs, "
             "η → accuracy | regret | oracle T ÷ design T |", "|---|---|---|---|---|---|---|"]
    summary = []
    for model in a.models:
        for partition in a.partitions:
            for eps in a.epsilons:
                cell = [r for r in rows if r["model"] == label(model) and r["partition"] == partition
                        and r["epsilon"] == eps and (r["policy"] == "design" or r.get("lr", LR) in a.lrs)]
                d = next(r for r in cell if r["policy"] == "design")
                o = max((r for r in cell if r["policy"] == "oracle"), key=lambda r: np.mean(r["accuracy"]))
                da, oa = 100 * np.array(d["accuracy"]), 100 * np.array(o["accuracy"])
                summary.append(dict(model=label(model), partition=partition, epsilon=eps, design=d, oracle=o,
                                    regret=float(oa.mean() - da.mean()), b2=b2[partition]))
                where = f"{partition} ({spread[(label(model), partition)]:.1f}; {b2[partition]:.2g})"
                lines.append(f"| {label(model)} | {where} | {eps:g} "
                             f"| {d['rounds']}, {d['sigma']:.2g} → {da.mean():.1f} ± {da.std():.1f} | {o['rounds']}, "
                             f"{o['sigma']:.2g}, {o['epochs']}, η {o.get('lr', LR):g} → {oa.mean():.1f} ± "
                             f"{oa.std():.1f} | "
                             f"{oa.mean() - da.mean():+.1f} | {o['rounds'] / d['rounds']:.2g} |")
    (out / "heterogeneity.md").write_text("\n".join(lines) + "\n")
    (out / "heterogeneity.json").write_text(json.dumps(dict(rows=rows, summary=summary), indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
