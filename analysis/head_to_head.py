"""Does the recommendation win?  paretofl's design against what practitioners
do, at equal exact ε, on FashionMNIST (client-level DP-FedAvg, aggregate view).

    python analysis/head_to_head.py [--models lr] [--clients 100 1000] [--partitions iid dirichlet]
                                    [--epsilons 1 2 4 8] [--seeds 3] [--max-rounds 200] [--device cpu]

A user's model: ``--models examples.your_model:mlp --pretrial STORE`` (its
pre-trial store on the public 10 %, same C and η; κ is fitted from it), and
``--policies`` / ``--oracle-z`` / ``--oracle-t`` / ``--oracle-t-calibrated``
to train fewer policies or a smaller oracle grid where a cell would take
too long.  ``--q-max`` caps every policy's client rate, as a cross-device
deployment caps the cohort (the design searches q up to it; recipes and
oracle grids above it are left out).

The clients hold the 90 % of the training set that the shipped pre-trials
did not use (``subset = "rest"``); the pre-trials ran on the public 10 %, so
paretofl's κ costs no private training.  At each budget (δ = 1e-5, at most
``--max-rounds`` rounds) it trains, with the same C = 0.3, η = 0.1, one local
epoch of batch-64 SGD:

* ``paretofl``: ``design`` with the κ of the shipped pre-trial's fit;
* ``paretofl (empirical)``: ``design --from-store`` on the shipped store (the
  utility model its held-out seeds prefer);
* ``cohort 10`` / ``cohort 100``: a fixed cohort (q = 10/N, 100/N), all the
  rounds allowed, σ calibrated to the budget (the TFF and Flower tutorials'
  recipe);
* ``z = 1, cohort 10`` / ``z = 1, cohort 100``: the frameworks' advice of a
  noise multiplier of 1 on the released sum, as many rounds as the budget
  allows;
* ``oracle``: the best of two grids trained on the private data at the same
  ε — (q, σ, T) on a fixed grid, and (q, T) with σ calibrated to the budget
  (its tuning's own privacy cost ignored: an upper bound on what tuning by
  training could reach).

Everything is a run in a pre-trial store per (model, N, partition) under
``--out`` (default analysis/out/head_to_head/), so the script resumes where
it stopped and reruns nothing.  It writes ``head_to_head.md`` (the table),
``head_to_head.json`` and ``head_to_head.png`` (accuracy against ε, one
panel a cell, the seeds' standard deviation as bars); ``--report`` rewrites
them from the cells run so far without training.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

import paretofl
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import read_table
from paretofl.pretrial.sweep import run_sweep
from paretofl.recommendation import shipped_fit
from paretofl.theory.privacy import calibrate_noise, max_steps_searched

ROOT = Path(__file__).resolve().parent.parent
DELTA = 1e-5
COMMON = dict(dataset="fashion-mnist", public_fraction=0.1, data_seed=0, subset="rest", beta=0.5, clip=0.3, lr=0.1,
              local_epochs=1, batch_size=64, delta=DELTA)
#: the oracle's grid: noise multipliers on the released sum, and rounds
ORACLE_Z = (0.5, 0.8, 1.25, 2.0, 3.2, 5.0, 8.0, 12.5, 20.0)
ORACLE_T = (2, 5, 10, 20, 50, 100, 150, 200)
#: the oracle's second grid: these rounds, σ calibrated to each budget
ORACLE_T_CALIBRATED = (5, 10, 20, 50, 100, 200)
#: the σ range the designs may use (design's default floor of 0.3 would bind at large N and ε)
SIGMA_RANGE = dict(sigma_min=0.01, sigma_max=30.0)
#: the largest client rate any policy may use (--q-max: a cross-device cap on the cohort), None: no cap
Q_MAX = None


def _key(x):
    return round(float(x), 12)


def policies(n, eps, t_max, kappa_fit, store):
    """name -> (q, T, σ) or None (the recipe allows no round)."""
    out = {}
    d = paretofl.design(n_clients=n, epsilon=eps, delta=DELTA, max_rounds=t_max, fit=kappa_fit, q_max=Q_MAX,
                        **SIGMA_RANGE)
    out["paretofl"] = (d.q, d.rounds, d.sigma)
    e = paretofl.design(n_clients=n, epsilon=eps, delta=DELTA, max_rounds=t_max, from_store=store, q_max=Q_MAX,
                        **SIGMA_RANGE)
    out["paretofl (empirical)"] = (e.q, e.rounds, e.sigma)
    for m in (10, 100):
        if m > n or (Q_MAX is not None and m / n > Q_MAX * (1 + 1e-12)):
            continue
        q = m / n
        z = calibrate_noise(eps, q, t_max, DELTA)
        out[f"cohort {m}"] = (q, t_max, z / math.sqrt(q * n))
        t = min(t_max, int(max_steps_searched(eps, q, 1.0, DELTA)))
        out[f"z = 1, cohort {m}"] = (q, t, 1.0 / math.sqrt(q * n)) if t >= 1 else None
    return out


def oracle_grid(n):
    qs = sorted({m / n for m in (10, 100, n) if m <= n and (Q_MAX is None or m / n <= Q_MAX * (1 + 1e-12))})
    return {q: [z / math.sqrt(q * n) for z in ORACLE_Z] for q in qs if ORACLE_Z}


def oracle_calibrated(n, eps, t_max):
    """(q, T, σ) with σ calibrated so that T rounds spend ε exactly."""
    out = []
    qs = sorted({m / n for m in (10, 100, n) if m <= n and (Q_MAX is None or m / n <= Q_MAX * (1 + 1e-12))})
    for q in qs:
        for t in ORACLE_T_CALIBRATED:
            if t <= t_max:
                out.append((q, t, calibrate_noise(eps, q, t, DELTA) / math.sqrt(q * n)))
    return out


def label(model):
    """A model's name in file names and tables: a built-in name, or the
    function of a package.module:function factory."""
    return model.split(":")[-1].replace("_", "-")


def pretrial_of(model, pretrial, out):
    """(fit JSON, store) of the model's public pre-trial: the shipped ones
    for built-in models, else the store given (fitted here, once)."""
    if ":" not in model:
        fit = shipped_fit(f"{model}_fmnist")
        return str(fit), str(ROOT / json.loads(fit.read_text())["results"])       # the store the fit records
    if pretrial is None:
        raise SystemExit(f"{model}: give its pre-trial store with --pretrial")
    fit_path = out / f"{label(model)}_pretrial_fit.json"
    if not fit_path.is_file():
        paretofl.fit(pretrial, bootstrap=200).save(fit_path)
    return str(fit_path), str(pretrial)


def run_cell(model, n, partition, epsilons, seeds, t_max, device, out, pretrial=None, keep=None):
    store = out / f"{label(model)}_N{n}_{partition}.sqlite"
    base = dict(COMMON, model=model, clients=n, partition=partition, seeds=seeds, device=device,
                chunk=max(4, 12000 // n))   # replicas a job: about 12,000 client models at once
    kappa_fit, pre_store = pretrial_of(model, pretrial, out)
    want = {}                                         # q -> {σ -> set of T}
    chosen = {}
    for eps in epsilons:
        chosen[eps] = {k: v for k, v in policies(n, eps, t_max, kappa_fit, pre_store).items()
                       if keep is None or k in keep}
        for p in chosen[eps].values():
            if p is not None:
                q, t, s = p
                want.setdefault(_key(q), {}).setdefault(_key(s), set()).add(int(t))
    for q, sigmas in oracle_grid(n).items():
        for s in sigmas:
            want.setdefault(_key(q), {}).setdefault(_key(s), set()).update(ORACLE_T)
    for eps in epsilons:
        for q, t, s in oracle_calibrated(n, eps, t_max):
            want.setdefault(_key(q), {}).setdefault(_key(s), set()).add(int(t))
    t0 = time.perf_counter()
    for q, sig in sorted(want.items()):
        # σ that need the same rounds train together, each only as far as it is read
        by_rounds = {}
        for s, ts in sig.items():
            by_rounds.setdefault(tuple(sorted(ts)), []).append(s)
        for rounds, sigmas in sorted(by_rounds.items(), key=lambda kv: -max(kv[0])):
            spec = Spec.from_dict(dict(base, q=[q], sigmas=sorted(sigmas), rounds=list(rounds)))
            run_sweep(spec, store, progress=False)
    print(f"{label(model)} N={n} {partition}: trained in {time.perf_counter() - t0:.0f} s", flush=True)
    return store, chosen


def summarise(store, chosen, n, epsilons, t_max):
    tab = read_table(store)
    ref = {}                                          # (q, seed) -> best non-private test loss
    for s, q, k, loss in zip(tab["sigma"], tab["q"], tab["seed"], tab["test_loss"]):
        if s == 0:
            ref[(q, k)] = min(loss, ref.get((q, k), math.inf))

    def runs(q, s, t):
        m = (np.isclose(tab["q"], q) & np.isclose(tab["sigma"], s, rtol=1e-10, atol=0) & (tab["rounds"] == t))
        acc, loss, seed = tab["accuracy"][m], tab["test_loss"][m], tab["seed"][m]
        util = np.array([lo - ref[(tab["q"][m][0], k)] for lo, k in zip(loss, seed)]) if m.any() else np.array([])
        return acc, util, tab["epsilon"][m]

    grid = oracle_grid(n)
    rows = []
    for eps in epsilons:
        best = None
        cands = [(q, t, s) for q, sigmas in grid.items() for s in sigmas for t in ORACLE_T]
        calibrated = oracle_calibrated(n, eps, t_max)
        for q, t, s in cands + calibrated:
            acc, util, e = runs(q, s, t)
            if len(acc) and e[0] <= eps * (1 + 1e-9) and (best is None or acc.mean() > best[0].mean()):
                best = (acc, util, (q, t, s), e[0])
        entries = dict(chosen[eps])
        for name, p in entries.items():
            if p is None:
                rows.append(dict(eps=eps, policy=name, q=None, T=0, sigma=None, epsilon=0.0, acc=math.nan,
                                 acc_sd=math.nan, util=math.nan, trainings=1, note="no round fits the budget"))
                continue
            q, t, s = p
            acc, util, e = runs(q, s, t)
            rows.append(dict(eps=eps, policy=name, q=q, T=t, sigma=s, epsilon=float(e[0]) if len(e) else math.nan,
                             acc=float(acc.mean()), acc_sd=float(acc.std()), util=float(util.mean()), trainings=1))
        if best is not None:
            acc, util, (q, t, s), e = best
            n_grid = sum(len(v) for v in grid.values()) + len(calibrated)
            rows.append(dict(eps=eps, policy="oracle", q=q, T=t, sigma=s, epsilon=float(e), acc=float(acc.mean()),
                             acc_sd=float(acc.std()), util=float(util.mean()), trainings=n_grid))
    for eps in epsilons:
        o = [r for r in rows if r["eps"] == eps and r["policy"] == "oracle"]
        for r in rows:
            if r["eps"] == eps:
                r["regret"] = (o[0]["acc"] - r["acc"]) if o and np.isfinite(r["acc"]) else math.nan
    return rows


def table(all_rows):
    lines = ["| model | N | partition | ε | policy | q | T | σ | ε spent | test accuracy | utility loss | "
             "regret to oracle | private trainings |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (model, n, part), rows in all_rows.items():
        for r in rows:
            if r["q"] is None:
                lines.append(f"| {model} | {n} | {part} | {r['eps']:g} | {r['policy']} | — | 0 | — | — | "
                             f"{r['note']} | — | — | 1 |")
                continue
            lines.append(f"| {model} | {n} | {part} | {r['eps']:g} | {r['policy']} | {r['q']:.3g} | {r['T']} | "
                         f"{r['sigma']:.3g} | {r['epsilon']:.3f} | {100 * r['acc']:.1f} ± {100 * r['acc_sd']:.1f} % | "
                         f"{r['util']:.3f} | {100 * r['regret']:.1f} | {r['trainings']} |")
    return "\n".join(lines)


def figure(all_rows, path):
    from matplotlib.figure import Figure

    cells = list(all_rows)
    fig = Figure(figsize=(4.6 * len(cells), 4.4))
    axes = np.atleast_1d(fig.subplots(1, len(cells), squeeze=False)[0])
    styles = {"paretofl": ("#1f77b4", "o-"), "paretofl (empirical)": ("#17becf", "o--"), "oracle": ("black", "s:"),
              "cohort 10": ("#d62728", "v-"), "cohort 100": ("#ff7f0e", "^-"),
              "z = 1, cohort 10": ("#9467bd", "v--"), "z = 1, cohort 100": ("#8c564b", "^--")}
    for ax, cell in zip(axes, cells):
        rows = all_rows[cell]
        for i, (name, (color, style)) in enumerate(styles.items()):
            pts = sorted((r["eps"], r["acc"], r["acc_sd"]) for r in rows
                         if r["policy"] == name and np.isfinite(r["acc"]))
            if pts:
                e, acc, sd = map(np.array, zip(*pts))
                # each policy a little apart along ε, so that equal accuracies stay visible
                ax.errorbar(e * 1.04 ** (i - 3), acc, yerr=sd, fmt=style, color=color, label=name, ms=5, capsize=2,
                            lw=1.2)
        ax.set_xscale("log")
        eps = sorted({r["eps"] for r in rows})
        ax.set_xticks(eps, [f"{e:g}" for e in eps])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("privacy budget ε (δ = 1e-5)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{cell[0]}, N = {cell[1]}, {cell[2]}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    fig.savefig(path, dpi=120, bbox_inches="tight")


def main():
    global ORACLE_Z, ORACLE_T, ORACLE_T_CALIBRATED, Q_MAX
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["lr"],
                    help="lr, lenet, or your factory package.module:function (with --pretrial)")
    ap.add_argument("--pretrial", help="a user model's pre-trial store (public 10 %%, C = 0.3, lr = 0.1)")
    ap.add_argument("--policies", nargs="+", help="train only these policies (the oracle always)")
    ap.add_argument("--oracle-z", nargs="*", type=float, default=list(ORACLE_Z),
                    help="the oracle grid's noise multipliers on the released sum (none: only the calibrated grid)")
    ap.add_argument("--q-max", type=float, help="cap every policy's client rate (a cross-device cohort cap)")
    ap.add_argument("--oracle-t", nargs="+", type=int, default=list(ORACLE_T), help="the oracle grid's rounds")
    ap.add_argument("--oracle-t-calibrated", nargs="+", type=int, default=list(ORACLE_T_CALIBRATED),
                    help="the calibrated oracle's rounds (sigma calibrated to each budget)")
    ap.add_argument("--clients", nargs="+", type=int, default=[100, 1000])
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet"], choices=["iid", "dirichlet"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1, 2, 4, 8])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "head_to_head"))
    ap.add_argument("--report", action="store_true",
                    help="train nothing: gather the cells run so far into the table, json and figure")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.report:
        report(out)
        return
    ORACLE_Z, ORACLE_T, ORACLE_T_CALIBRATED = tuple(a.oracle_z), tuple(a.oracle_t), tuple(a.oracle_t_calibrated)
    Q_MAX = a.q_max
    for model in a.models:
        for n in a.clients:
            for part in a.partitions:
                store, chosen = run_cell(model, n, part, a.epsilons, a.seeds, a.max_rounds, a.device, out,
                                         pretrial=a.pretrial, keep=a.policies)
                rows = summarise(store, chosen, n, a.epsilons, a.max_rounds)
                (out / f"cell_{label(model)}_N{n}_{part}.json").write_text(json.dumps(rows, indent=1))
                print(table({(label(model), n, part): rows}), flush=True)
                report(out)


def report(out):
    """Every cell run so far (by this or an earlier invocation), in one table and figure."""
    all_rows = {}
    for f in sorted(out.glob("cell_*.json"), key=lambda f: (f.stem.split("_")[1], int(f.stem.split("_")[2][1:]),
                                                            not f.stem.endswith("_iid"))):
        _, m, nn, pp = f.stem.split("_", 3)
        all_rows[(m, int(nn[1:]), pp)] = json.loads(f.read_text())
    (out / "head_to_head.md").write_text(table(all_rows) + "\n")
    (out / "head_to_head.json").write_text(json.dumps(
        [dict(model=k[0], clients=k[1], partition=k[2], **r) for k, rs in all_rows.items() for r in rs], indent=1))
    figure(all_rows, out / "head_to_head.png")
    print(f"wrote {out / 'head_to_head.md'}, .json and .png ({len(all_rows)} cells)", flush=True)


if __name__ == "__main__":
    main()
