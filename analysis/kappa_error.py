"""What a borrowed κ costs (docs/results.md §11).

    python analysis/kappa_error.py [--models lr examples.your_model:mlp] [--partitions iid dirichlet]
                                   [--epsilons 1 2 8] [--factors 0.1 0.333 1 3 10] [--seeds 3]

The design at κ times each factor of the model's fitted κ (LR: the shipped
fit; the MLP of examples/your_model.py: pretrials/mlp_fmnist_fit.json),
trained on the clients' data: FashionMNIST's 90 % private split over N =
100 clients (IID or Dirichlet(0.5)), C = 0.3, η = 0.1, one local epoch of
batch 64, δ = 1e-5, at most 200 rounds, σ in [0.01, 30], ``--seeds``
replicas.  The same settings as docs/results.md §6's head-to-head, whose
oracles the table's regret is taken against (LR IID and Dirichlet, MLP IID);
elsewhere the regret is to the best factor.  One JSON row per training
under ``--out`` (default analysis/out/kappa_error/), so it resumes; writes
``kappa_error.md`` and ``kappa_error.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import paretofl
from paretofl.fl.algorithms import train
from paretofl.fl.build import assemble, prepare
from paretofl.recommendation import load_kappa, shipped_fit

ROOT = Path(__file__).resolve().parent.parent
N, DELTA, CLIP, LR, T_MAX = 100, 1e-5, 0.3, 0.1, 200
SIGMA_RANGE = dict(sigma_min=0.01, sigma_max=30.0)
#: docs/results.md §6 (2026-11-23): the oracle's mean test accuracy, %, per (model, partition, ε)
ORACLE = {("lr", "iid", 1.0): 67.7, ("lr", "iid", 2.0): 75.5, ("lr", "iid", 8.0): 80.9,
          ("lr", "dirichlet", 1.0): 62.6, ("lr", "dirichlet", 2.0): 72.6, ("lr", "dirichlet", 8.0): 79.6,
          ("mlp", "iid", 1.0): 66.5, ("mlp", "iid", 2.0): 74.0, ("mlp", "iid", 8.0): 81.2}


def label(model):
    return model.split(":")[-1]


def fitted_kappa(model):
    if model == "lr":
        return load_kappa(shipped_fit("lr_fmnist"))
    return load_kappa(ROOT / "pretrials" / f"{label(model)}_fmnist_fit.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["lr", "examples.your_model:mlp"])
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet"])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--factors", type=float, nargs="+", default=[0.1, 1 / 3, 1.0, 3.0, 10.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "kappa_error"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in a.models:
        k0 = fitted_kappa(model)
        for partition in a.partitions:
            setup = None
            for eps in a.epsilons:
                for f in a.factors:
                    path = out / f"{label(model)}_{partition}_eps{eps:g}_f{f:.3g}.json"
                    if path.exists():
                        rows.append(json.loads(path.read_text()))
                        continue
                    if setup is None:
                        setup = prepare("fashion-mnist", model, N, partition=partition, seed=0,
                                        public_fraction=0.1, subset="rest")
                    d = paretofl.design(N, eps, DELTA, max_rounds=T_MAX, kappa=k0 * f, **SIGMA_RANGE)
                    pol = assemble(setup, "dpfedavg", a.seeds, mechanism="client-aggregate",
                                   sigma=d.sigma, clip=CLIP, lr=LR, client_rate=d.q, local_epochs=1,
                                   batch_size=64).policy
                    t0 = time.perf_counter()
                    _, _, fin = train(pol, rounds=d.rounds, epsilon=eps * (1 + 1e-9), delta=DELTA,
                                      evaluate=d.rounds)
                    row = dict(model=label(model), partition=partition, epsilon=eps, factor=f, kappa=k0 * f,
                               q=d.q, rounds=d.rounds, sigma=d.sigma, spent=float(np.max(fin["epsilon"])),
                               accuracy=fin["accuracy"].tolist(), seconds=time.perf_counter() - t0)
                    path.write_text(json.dumps(row))
                    rows.append(row)
                    print(f"{label(model)} {partition} eps {eps:g} kappa x{f:.3g}: T={d.rounds} sigma={d.sigma:.3g} "
                          f"acc {100 * np.mean(row['accuracy']):.1f}", flush=True)
    lines = ["| model | partition | ε | " + " | ".join(f"κ × {f:.3g}" for f in a.factors)
             + " | oracle (§6) |", "|---|---|---|" + "---|" * (len(a.factors) + 1)]
    for model in a.models:
        for partition in a.partitions:
            for eps in a.epsilons:
                at = {r["factor"]: r for r in rows if r["model"] == label(model) and r["partition"] == partition
                      and r["epsilon"] == eps}
                ref = ORACLE.get((label(model), partition, eps))
                best = ref if ref is not None else max(100 * np.mean(r["accuracy"]) for r in at.values())
                cells = []
                for f in a.factors:
                    r = at[f]
                    acc = 100 * np.mean(r["accuracy"])
                    cells.append(f"T {r['rounds']}, σ {r['sigma']:.2g}: {acc:.1f} ({best - acc:+.1f})")
                lines.append(f"| {label(model)} | {partition} | {eps:g} | " + " | ".join(cells)
                             + f" | {ref if ref is not None else '—'} |")
    (out / "kappa_error.md").write_text("\n".join(lines) + "\n")
    (out / "kappa_error.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
