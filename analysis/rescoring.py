"""What scoring the pre-trial on held-out samples moves (docs/results.md §15).

    python analysis/rescoring.py [--epsilons 1 2 8] [--seeds 3]

The shipped LR pre-trial (pretrials/lr_fmnist.toml) was scored on
FashionMNIST's test split, the split every result is reported on;
pretrials/lr_fmnist_heldout.toml is the same spec scored on 20 % of each
public client's samples held out of its training (``scored_on =
"held-out"``, the default since 2026-11-27).  For each budget this fits both
stores (``paretofl fit``, 1000 bootstrap resamples), designs §12's
federation with each fit (LR, FashionMNIST's 90 % private split over N =
100 IID clients, C = 0.3, η = 0.1, batch 64, δ = 1e-5, σ in [0.01, 30], at
most 200 rounds: the design chooses K, q, T and σ), and trains each design
on the clients' data with ``--seeds`` replicas (the same seeds for both).
Prints a markdown table: the two fits' κ, each design and its predicted
test loss, and the realized accuracy and test loss (mean ± sd over seeds).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analysis"))

from heterogeneity import DELTA, SIGMA_RANGE, T_MAX, N, setup_for  # noqa: E402
from local_work import run  # noqa: E402

import paretofl  # noqa: E402

STORES = {"test split (shipped until 2026-11-27)": ROOT / "pretrials" / "lr_fmnist.sqlite",
          "held-out": ROOT / "pretrials" / "lr_fmnist_heldout.sqlite"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    fits = {}
    for name, store in STORES.items():
        f = paretofl.fit(str(store), bootstrap=1000)
        path = Path(f"/tmp/rescoring_{'heldout' if 'held' in name else 'test'}_fit.json")
        f.save(path)
        fits[name] = (f, str(path))
        print(f"{name}: kappa {f.kappa:.3g} [{f.kappa_ci[0]:.3g}, {f.kappa_ci[1]:.3g}]; local work A(K) "
              + ", ".join(f"{x:.3g}" for x in f.local_work["A"]), flush=True)
    setup = setup_for("lr", "iid")
    print("\n| ε | pre-trial scored on | κ_K | K | q, T, σ | predicted test loss | realized test loss | "
          "realized accuracy (%) | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps in a.epsilons:
        for name, (_, path) in fits.items():
            d = paretofl.design(n_clients=N, epsilon=eps, delta=DELTA, max_rounds=T_MAX, fit=path, **SIGMA_RANGE)
            lw = d.local_work or {}
            pred = lw.get("predicted_loss")
            t0 = time.perf_counter()
            r = run(setup, a.seeds, d)
            loss, acc = np.array(r["test_loss"]), 100 * np.array(r["accuracy"])
            print(f"| {eps:g} | {name} | {d.kappa:.3g} | {d.local_epochs} | {d.q:.3g}, {d.rounds}, {d.sigma:.4g} | "
                  + (f"{pred:.3f}" if isinstance(pred, float) else "—")
                  + f" | {loss.mean():.3f} ± {loss.std(ddof=1):.3f} | {acc.mean():.1f} ± {acc.std(ddof=1):.1f} | "
                  f"{time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
