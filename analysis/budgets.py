"""Clients with budgets of their own, measured: the per-client design
against what a tool without it leaves a user, on FashionMNIST.

    python analysis/budgets.py [--partitions iid dirichlet] [--seeds 3] [--max-rounds 200] [--out DIR]

N = 100 clients hold the 90 % of FashionMNIST's training set that the
shipped pre-trials did not use (IID, or Dirichlet(0.5) over labels); LR,
client-level DP-FedAvg in the aggregate view, C = 0.3, η = 0.1, one local
epoch of batch-64 SGD, δ = 1e-5, at most ``--max-rounds`` rounds, κ from the
shipped LR pre-trial (no training on the clients' data chooses anything).
Budgets, as shares of the clients: Boenisch et al.'s two (ε = 1 / 2 / 3 for
34 / 43 / 23 % and for 54 / 37 / 9 %) and a wider one (ε = 1 / 2 / 8 for
60 / 30 / 10 %); the strict clients are the first ones (client ids are
random with respect to the data in both partitions).  Policies:

* ``per-client design``: ``design(budgets=...)``, each group sampled at its
  own rate under one noise on the sum, each group accounted on its own;
* ``(a) strictest for all``: today's design at the strictest budget, every
  client held to it;
* ``(b) strict dropped``: the strict clients left out, the others trained
  with today's design at the strictest budget among them;
* ``(c) loosest for all``: today's design at the loosest budget for everyone
  — an upper line, not private for the strict clients.

Test accuracy overall and, under Dirichlet, on each group's own test
distribution (the test set's per-class accuracy weighted by the group's
label shares).  Writes ``budgets.md`` and ``budgets.json`` under ``--out``
(default analysis/out/budgets/); a configuration already there is not
trained again.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import paretofl
from paretofl.budgets import Budgets
from paretofl.fl.algorithms import train
from paretofl.fl.build import Budget, Setup, assemble, prepare

ROOT = Path(__file__).resolve().parent.parent
N, DELTA, CLIP, LR = 100, 1e-5, 0.3, 0.1
CONFIGS = {"Boenisch A": ([0.34, 0.43, 0.23], [1.0, 2.0, 3.0]),
           "Boenisch B": ([0.54, 0.37, 0.09], [1.0, 2.0, 3.0]),
           "wide": ([0.60, 0.30, 0.10], [1.0, 2.0, 8.0])}
SIGMA_RANGE = dict(sigma_min=0.01, sigma_max=30.0)


def _per_class_accuracy(net, glob, ds):
    with torch.no_grad():
        logits = net.forward(glob, ds.x_test.unsqueeze(0).expand(glob[0].shape[0], *ds.x_test.shape))
    right = (logits.argmax(-1) == ds.y_test).float().numpy()        # (R, n_test)
    y = ds.y_test.numpy()
    return np.stack([right[:, y == c].mean(1) for c in range(int(y.max()) + 1)], 1)   # (R, classes)


def run(partition, seeds, t_max, out):
    setup = prepare("fashion-mnist", "lr", N, partition=partition, seed=0, public_fraction=0.1,
                    subset="rest")
    ds, parts, net = setup.data, setup.parts, setup.model
    labels = ds.y_train.numpy()
    rows = []
    for name, (shares, eps) in CONFIGS.items():
        b = Budgets.shares(shares, eps, N)
        strict = b.group_of == 0
        plans = {"per-client design": paretofl.design(N, None, DELTA, max_rounds=t_max, budgets=b, **SIGMA_RANGE),
                 "(a) strictest for all": paretofl.design(N, min(eps), DELTA, max_rounds=t_max, **SIGMA_RANGE),
                 "(b) strict dropped": paretofl.design(int((~strict).sum()), min(e for e in eps if e > min(eps)),
                                                       DELTA, max_rounds=t_max, **SIGMA_RANGE),
                 "(c) loosest for all": paretofl.design(N, max(eps), DELTA, max_rounds=t_max, **SIGMA_RANGE)}
        for policy, d in plans.items():
            keep = np.flatnonzero(~strict) if policy.startswith("(b)") else np.arange(N)
            kept = Setup(ds, [parts[i] for i in keep], net)
            pol = assemble(kept, "dpfedavg", seeds, mechanism="client-aggregate", sigma=d.sigma, clip=CLIP, lr=LR,
                           client_rate=min(1.0, d.q), local_epochs=1, batch_size=64,
                           budget=Budget(groups=d if policy == "per-client design" else None)).policy
            t0 = time.perf_counter()
            glob, _, fin = train(pol, rounds=d.rounds, epsilon=None if policy == "per-client design" else d.budget,
                                 delta=DELTA, evaluate=d.rounds)
            pc = _per_class_accuracy(net, glob, ds)
            per_group = {}
            for g, e in enumerate(eps):
                mine = np.concatenate([parts[i] for i in np.flatnonzero(b.group_of == g)])
                share = np.bincount(labels[mine], minlength=pc.shape[1]) / len(mine)
                per_group[f"{e:g}"] = (pc @ share).tolist()
            spent = fin.get("epsilon_groups")
            rows.append(dict(config=name, partition=partition, policy=policy, rounds=int(d.rounds),
                             q={f"{g['budget']:g}": g["q"] for g in d.groups} if d.groups else d.q,
                             sigma=float(d.sigma), clients=len(keep),
                             cohort=float(d.cohort if hasattr(d, "cohort") else d.q * len(keep)),
                             epsilon={k: float(np.max(v)) for k, v in spent.items()} if spent else
                             float(np.max(fin["epsilon"])),
                             accuracy=fin["accuracy"].tolist(), per_group=per_group,
                             seconds=time.perf_counter() - t0))
            print(f"{partition} {name} {policy}: T={d.rounds} acc {100 * np.mean(fin['accuracy']):.1f} "
                  f"± {100 * np.std(fin['accuracy']):.1f}", flush=True)
    (out / f"budgets_{partition}.json").write_text(json.dumps(rows, indent=1))
    return rows


def table(rows):
    lines = ["| budgets | partition | policy | T | clients a round | accuracy | per group (ε: accuracy) | ε spent |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acc, m = np.array(r["accuracy"]), r["cohort"]
        per = ", ".join(f"{k}: {100 * np.mean(v):.1f}" for k, v in r["per_group"].items())
        eps = (", ".join(f"{k}: {v:.3f}" for k, v in r["epsilon"].items()) if isinstance(r["epsilon"], dict)
               else f"{r['epsilon']:.3f}")
        lines.append(f"| {r['config']} | {r['partition']} | {r['policy']} | {r['rounds']} | {m:.1f} | "
                     f"{100 * acc.mean():.1f} ± {100 * acc.std():.1f} | {per} | {eps} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet"], choices=["iid", "dirichlet"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "budgets"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for p in a.partitions:
        f = out / f"budgets_{p}.json"
        rows += json.loads(f.read_text()) if f.is_file() else run(p, a.seeds, a.max_rounds, out)
    text = table(rows)
    (out / "budgets.md").write_text(text + "\n")
    (out / "budgets.json").write_text(json.dumps(rows, indent=1))
    print(text)


if __name__ == "__main__":
    main()
