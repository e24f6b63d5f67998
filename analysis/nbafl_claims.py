"""NbAFL's design claims, measured (Wei et al. 2020, Remarks 4 and 5, Figs.
5, 7, 9 and 10): is the loss convex in the number of rounds T with an
optimum that grows with ε, is there an interior optimal number of scheduled
clients K, and how does the clipping threshold C trade off?

    python analysis/nbafl_claims.py [--seeds 3] [--out DIR]

N = 50 clients of 512 FashionMNIST training images each (a seeded
permutation), LR, NbAFL as paretofl trains it (5 local steps of batch 64,
η = 0.05, proximal μ = 0.01), δ = 0.01, three seeds.  The loss is the
training loss on the clients' 25,600 images after the last round.  Each
point is its own training: NbAFL calibrates its noise to T (and K), so a
shorter run is not a prefix of a longer one.  Two calibrations at each of
the paper's protection levels ε ∈ {50, 60, 80, 100}: the paper's
(σ_U = cLΔs_U/ε, labelled with the ε it actually guarantees) and paretofl's
(σ_U set so that the T uploads guarantee ε).  Sweeps: T ∈ {5, …, 150} with
all clients (Figs. 7/9), K ∈ {5, …, 50} at each level's T* (Fig. 10), and
C ∈ {10, 15, 20, 25} at T* (Fig. 5); beside each, the bound's T* and K*
(``paretofl.nbafl_design``, its stated constants).  Writes
``nbafl_claims.json``, ``nbafl_claims.md`` and ``nbafl_claims.png`` under
``--out`` (default analysis/out/nbafl/); a finished sweep is not rerun.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import paretofl
from paretofl.fl.algorithms import train
from paretofl.fl.build import Budget, Setup, assemble
from paretofl.fl.data import Dataset, load_dataset
from paretofl.fl.models import build_model

ROOT = Path(__file__).resolve().parent.parent
N, M, DELTA, C0 = 50, 512, 0.01, 15.0
LEVELS = (50.0, 60.0, 80.0, 100.0)
T_GRID = (5, 10, 20, 30, 45, 60, 80, 100, 150)
K_GRID = (5, 10, 20, 30, 40, 50)
C_GRID = (10.0, 15.0, 20.0, 25.0)


def _data():
    full = load_dataset("fashion-mnist")
    pick = torch.from_numpy(np.random.default_rng(0).permutation(len(full.y_train))[: N * M])
    x, y = full.x_train[pick], full.y_train[pick]
    # the loss NbAFL's figures show is the training loss: evaluate on the clients' own data
    ds = Dataset("fashion-mnist-nbafl", x, y, x, y)
    return ds, [np.arange(i * M, (i + 1) * M) for i in range(N)]


def _loss(ds, parts, eps, rounds, calibration, seeds, clip=C0, k=None):
    pol = assemble(Setup(ds, parts, build_model("lr", ds.shape)), "nbafl", seeds,
                   budget=Budget(epsilon=eps, delta=DELTA, rounds=rounds), clip=clip, calibration=calibration,
                   clients_per_round=k).policy
    _, _, fin = train(pol, rounds=rounds, delta=DELTA, evaluate=rounds)
    return fin["test_loss"].tolist(), float(pol.fixed_epsilon())


def run(seeds, out):
    ds, parts = _data()
    f = out / "nbafl_claims.json"
    res = json.loads(f.read_text()) if f.is_file() else {}
    for eps in LEVELS:
        d = paretofl.nbafl_design(N, eps, DELTA, C0, M, max_rounds=max(T_GRID))
        for cal in ("paper", "clipping"):
            key = f"{eps:g}/{cal}"
            if key in res:
                continue
            t0 = time.perf_counter()
            row = {"epsilon": eps, "calibration": cal, "T_star_bound": d["rounds"], "K_star_bound":
                   d["clients_per_round"], "by_T": {}, "by_K": {}, "by_C": {}}
            for t in T_GRID:
                row["by_T"][t], row["guaranteed"] = _loss(ds, parts, eps, t, cal, seeds)
            t_best = min(T_GRID, key=lambda t: np.mean(row["by_T"][t]))
            row["T_star_measured"] = t_best
            for k in K_GRID:
                row["by_K"][k], _ = _loss(ds, parts, eps, d["rounds"], cal, seeds, k=k)
            row["K_star_measured"] = min(K_GRID, key=lambda k: np.mean(row["by_K"][k]))
            for c in C_GRID:
                row["by_C"][c], _ = _loss(ds, parts, eps, d["rounds"], cal, seeds, clip=c)
            row["seconds"] = time.perf_counter() - t0
            res[key] = row
            f.write_text(json.dumps(res, indent=1))
            print(f"{key}: T* bound {d['rounds']}, measured {t_best}; K* bound {d['clients_per_round']}, "
                  f"measured {row['K_star_measured']}; guaranteed epsilon {row['guaranteed']:.4g}", flush=True)
    return res


def _convex(xs, ys):
    """Whether the measured mean loss over an increasing grid falls and then
    rises (at most one change of direction) — convex in shape."""
    d = np.sign(np.diff(ys))
    d = d[d != 0]
    return bool(len(d) == 0 or np.all(np.diff(d) >= 0))


def interior(r, ts, ys):
    """Convex in shape with its minimum inside the T grid."""
    return _convex(ts, ys) and ts[0] < r["T_star_measured"] < ts[-1]


def report(res, out):
    lines = ["| ε (paper) | calibration | ε guaranteed | T* bound | T* measured | falls, then rises in T (interior "
             "optimum) | K* bound | K* measured | loss at C = 10 / 15 / 20 / 25 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, r in res.items():
        ts = sorted(int(t) for t in r["by_T"])
        ys = [np.mean(r["by_T"][str(t)] if str(t) in r["by_T"] else r["by_T"][t]) for t in ts]
        cs = " / ".join(f"{np.mean(v):.3f}" for v in r["by_C"].values())
        lines.append(f"| {r['epsilon']:g} | {r['calibration']} | {r['guaranteed']:.3g} | {r['T_star_bound']} | "
                     f"{r['T_star_measured']} | {'yes' if interior(r, ts, ys) else 'no'} | {r['K_star_bound']} | "
                     f"{r['K_star_measured']} | {cs} |")
    (out / "nbafl_claims.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4))
    axes = fig.subplots(1, 3)
    for key, r in res.items():
        style = "-" if r["calibration"] == "clipping" else "--"
        for ax, name in zip(axes, ("by_T", "by_K", "by_C")):
            xs = [float(x) for x in r[name]]
            ys = [np.mean(v) for v in r[name].values()]
            ax.plot(xs, ys, style, marker="o", ms=3, label=f"ε {r['epsilon']:g}, {r['calibration']}")
    for ax, xl in zip(axes, ("rounds T (all clients)", "scheduled clients K (at the bound's T*)",
                             "clipping threshold C (at T*)")):
        ax.set_xlabel(xl)
        ax.set_ylabel("training loss")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.savefig(out / "nbafl_claims.png", dpi=110, bbox_inches="tight")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "nbafl"))
    ap.add_argument("--report", action="store_true", help="train nothing: rebuild the table and figure")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = json.loads((out / "nbafl_claims.json").read_text()) if a.report else run(a.seeds, out)
    report(res, out)


if __name__ == "__main__":
    main()
