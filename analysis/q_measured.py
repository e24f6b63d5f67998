"""Is q = 1 the best use of a budget?  Two measurements on FashionMNIST's
private share (LR, N clients, IID, client-level DP-FedAvg):

1. *Equal σ²/q.*  The theory (docs/theory.md §2) says the utility depends on
   σ and q only through σ²/q.  Pairs at equal σ²/q and different q, trained
   for the same T, should reach the same utility loss.
2. *The accountant's choice.*  For a budget, the design at each fixed q (the
   best (T, σ) the exact accountant allows there), trained: does the q the
   design picks (q = 1 for the aggregate view in most settings) train best?
   For both mechanism views (client-aggregate: Poisson, σ√(qN) charged;
   client-local: a Gaussian at each participation, seen).

    python analysis/q_measured.py [--clients 100] [--seeds 3] [--rounds 50] [--epsilon 2]

Writes analysis/out/q_measured.md.  Resumable (pre-trial stores).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

import paretofl
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import read_table
from paretofl.pretrial.sweep import run_sweep
from paretofl.recommendation import shipped_fit

ROOT = Path(__file__).resolve().parent.parent
COMMON = dict(dataset="fashion-mnist", public_fraction=0.1, data_seed=0, subset="rest", partition="iid", clip=0.3,
              lr=0.1, local_epochs=1, batch_size=64, delta=1e-5, model="lr")
QS = (0.1, 0.3, 1.0)


def stats(tab, q, s, t):
    m = np.isclose(tab["q"], q) & np.isclose(tab["sigma"], s, rtol=1e-10, atol=0) & (tab["rounds"] == t)
    ref = {}
    for k, loss in zip(tab["seed"][(tab["sigma"] == 0) & np.isclose(tab["q"], q)],
                       tab["test_loss"][(tab["sigma"] == 0) & np.isclose(tab["q"], q)]):
        ref[k] = min(loss, ref.get(k, math.inf))
    util = np.array([lo - ref[k] for lo, k in zip(tab["test_loss"][m], tab["seed"][m])])
    return tab["accuracy"][m].mean(), tab["accuracy"][m].std(), util.mean(), util.std(), tab["epsilon"][m][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n = a.clients
    store = out / f"q_measured_N{n}.sqlite"
    base = dict(COMMON, clients=n, seeds=a.seeds, chunk=max(4, 12000 // n))
    xs = (0.01, 0.1, 0.5)        # σ²/q on the grid: from little noise to the design's at ε = 2 (0.51)
    lines = [f"# Is q = 1 the best use of the budget? (LR, N = {n}, IID, {a.seeds} seeds)", "",
             f"## 1. Equal σ²/q, T = {a.rounds}", "",
             "| σ²/q | q | σ | test accuracy | utility loss | ε (aggregate view) |", "|---|---|---|---|---|---|"]
    for q in QS:
        run_sweep(Spec.from_dict(dict(base, q=[q], sigmas=[math.sqrt(x * q) for x in xs], rounds=[a.rounds])),
                  store, progress=False)
    tab = read_table(store)
    for x in xs:
        for q in QS:
            acc, acc_sd, u, u_sd, e = stats(tab, q, math.sqrt(x * q), a.rounds)
            lines.append(f"| {x:g} | {q:g} | {math.sqrt(x * q):.4g} | {100 * acc:.1f} ± {100 * acc_sd:.1f} % | "
                         f"{u:.4f} ± {u_sd:.4f} | {e:.3g} |")
    lines += ["", f"## 2. The design at each fixed q, ε = {a.epsilon:g}, T ≤ {a.max_rounds}", "",
              "| mechanism | q | T | σ | ε spent | utility bound | test accuracy | utility loss |",
              "|---|---|---|---|---|---|---|---|"]
    fit = str(shipped_fit("lr_fmnist"))
    for mech in ("client-aggregate", "client-local"):
        picked = paretofl.design(n_clients=n, epsilon=a.epsilon, max_rounds=a.max_rounds, fit=fit, mechanism=mech)
        for q in sorted(set(QS) | {picked.q}):
            d = paretofl.design(n_clients=n, epsilon=a.epsilon, max_rounds=a.max_rounds, fit=fit, mechanism=mech,
                                q=q)
            # trained as client-aggregate DP-FedAvg: the local view adds the same noise in expectation
            # (|S|σ²C² against qNσ²C² on the sum); what differs is the charge, hence (T, σ)
            run_sweep(Spec.from_dict(dict(base, q=[q], sigmas=[d.sigma], rounds=[d.rounds])), store,
                      progress=False)
            acc, acc_sd, u, u_sd, _ = stats(read_table(store), q, d.sigma, d.rounds)
            mark = " (design's pick)" if q == picked.q else ""
            lines.append(f"| {mech} | {q:g}{mark} | {d.rounds} | {d.sigma:.4g} | {d.epsilon:.3f} | "
                         f"{d.utility_bound:.4g} | {100 * acc:.1f} ± {100 * acc_sd:.1f} % | {u:.4f} ± {u_sd:.4f} |")
    (out / "q_measured.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
