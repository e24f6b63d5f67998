"""The design that chooses the local work, against an oracle (issue 46;
docs/results.md §13).

    python analysis/local_work.py [--partitions iid dirichlet:0.5 shards:2] [--epsilons 1 2] [--seeds 3]
                                  [--oracle analysis/out/heterogeneity] [--model lr]

§12's federation (LR, FashionMNIST's 90 % private split over N = 100
clients, C = 0.3, η = 0.1, batch 64, δ = 1e-5, σ in [0.01, 30], at most 200
rounds).  For each partition:

* **the fit**: a public pre-trial partitioned like the clients — 10 clients
  on the public 10 % split, partitioned the same way (IID: the shipped
  pre-trial; otherwise 6 σ × 6 T × 3 seeds, q = 0.5, as `make demo`'s),
  with ``local_work = [1, 2, 4, 8]`` (noise-free runs, 3 seeds, T up to
  64), fitted by ``paretofl fit`` — public data only;
* **design**: ``paretofl.design`` with that fit: it chooses the local epochs
  K, q, T and σ, and predicts the test loss with an interval;
* **today**: the design at the pre-trial's one local epoch (κ of the same
  fit, ``local_epochs=1``);
* **tuned** (``--tune``): the design, then ``paretofl.api.tune`` on the
  same public pre-trial's store (C ∈ {0.1, 0.3, 1}, η ∈ {0.025, 0.05, 0.1,
  0.2}, ranked on samples held out of the public share), trained at the
  tuned pair; its table goes to ``tuned.md``;
* **oracle**: the best of ``analysis/heterogeneity.py``'s grid on the
  clients' own data (q = 1, T = today's design's T with the shipped κ ×
  {½, 1, 2}, σ calibrated to spend ε, local epochs {1, 2, 4, 8}; its rows
  are read from ``--oracle``: run that script first with ``--epochs 1 2 4 8
  --factors 0.5 1 2``).

``--model examples.your_model:mlp`` runs the same for the MLP of
examples/your_model.py (pretrials/mlp_fmnist.toml's C = 0.3, η = 0.1): its
public pre-trial is 6 σ × 6 T × 3 seeds with the same local work at every
partition, IID included (its shipped pre-trial has no local work), its
files are prefixed ``mlp_``, and the oracle is ``heterogeneity.py --models
examples.your_model:mlp``'s (its T from the MLP's fitted κ).

Both designs train 3 seeds on the clients' data; the table gives accuracy,
the regret against the oracle, and the predicted test loss against the
realized one.  One JSON row per training under ``--out`` (default
analysis/out/local_work/), so it resumes; writes ``local_work.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from heterogeneity import CLIP, DELTA, LR, SIGMA_RANGE, T_MAX, N, setup_for  # analysis/ is on the path
from kappa_error import label

import paretofl
from paretofl.fl.algorithms import train
from paretofl.fl.build import assemble
from paretofl.pretrial import sweep
from paretofl.pretrial.fit import fit
from paretofl.pretrial.spec import Spec
from paretofl.recommendation import shipped_fit

ROOT = Path(__file__).resolve().parent.parent
PRETRIAL = dict(dataset="fashion-mnist", public_fraction=0.1, clients=10, model="lr", q=[0.5],
                sigmas=[0.02, 0.04, 0.08, 0.16, 0.32, 0.64], rounds=[2, 4, 8, 16, 32, 64], seeds=3, clip=CLIP,
                lr=LR, local_epochs=1, batch_size=64, delta=DELTA, local_work=[1, 2, 4, 8])


def prefix(model: str) -> str:
    """Output names: LR's as they were, another model's after its label."""
    return "" if model == "lr" else f"{label(model)}_"


def fit_for(partition: str, out: Path, q: float = 0.5, model: str = "lr", lrs=()) -> str:
    """The fit file of a public pre-trial partitioned like ``partition`` (with ``lrs``: its local work also at
    those client learning rates, ``local_lrs``)."""
    if partition == "iid" and q == 0.5 and model == "lr" and not lrs:
        return str(shipped_fit())
    kind, _, arg = partition.partition(":")
    name = partition.replace(":", "")
    stem = f"{prefix(model)}pretrial_{name}" + lrs_tag(lrs)
    store, fit_path = out / f"{stem}.sqlite", out / f"{stem}_fit.json"
    if fit_path.exists():
        return str(fit_path)
    # "shards:K": K label shards a client, a partition the spec (and so the store, and a tuning on it) names
    fields = dict(PRETRIAL, model=model, partition=partition if kind == "shards" else kind, q=[q],
                  **({"beta": float(arg)} if kind == "dirichlet" else {}),
                  **({"local_lrs": [float(x) for x in lrs]} if lrs else {}))
    spec = Spec.from_dict(fields)
    t0 = time.perf_counter()
    sweep.run_sweep(spec, str(store), progress=False)
    fit(str(store)).save(fit_path)
    print(f"pre-trial {prefix(model)}{partition}: {time.perf_counter() - t0:.0f} s", flush=True)
    return str(fit_path)


def lrs_tag(lrs) -> str:
    """The file-name tag of a pre-trial (and its designs) that also measured ``lrs``."""
    return "_lrs" + "-".join(f"{x:g}" for x in lrs) if lrs else ""


#: the tuned policy's grid (docs/results.md §13)
TUNE_CLIPS, TUNE_LRS = (0.1, 0.3, 1.0), (0.025, 0.05, 0.1, 0.2)


def store_for(partition: str, out: Path, q: float = 0.5, model: str = "lr") -> str:
    """The results store behind :func:`fit_for`'s fit (the shipped pre-trial's for LR on IID: the store its fit
    records)."""
    if partition == "iid" and q == 0.5 and model == "lr":
        return str(ROOT / json.loads(shipped_fit().read_text())["results"])
    return str(out / f"{prefix(model)}pretrial_{partition.replace(':', '')}.sqlite")


def run(setup, seeds, d, clip=CLIP, lr=LR):
    pol = assemble(setup, "dpfedavg", seeds, mechanism="client-aggregate", sigma=d.sigma,
                   clip=clip, lr=lr, client_rate=d.q, local_epochs=d.local_epochs, batch_size=64).policy
    t0 = time.perf_counter()
    _, _, fin = train(pol, rounds=d.rounds, epsilon=d.budget * (1 + 1e-9), delta=DELTA, evaluate=d.rounds)
    return dict(spent=float(np.max(fin["epsilon"])), accuracy=fin["accuracy"].tolist(),
                test_loss=fin["test_loss"].tolist(), seconds=time.perf_counter() - t0)


def oracle_of(folder: Path, partition: str, eps: float, model: str = "lr"):
    rows = [json.loads(p.read_text())
            for p in folder.glob(f"{label(model)}_{partition.replace(':', '')}_eps{eps:g}_oracle_*.json")]
    return max(rows, key=lambda r: np.mean(r["accuracy"])) if rows else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet:0.5", "shards:2"])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--pretrial-q", type=float, default=0.5, help="the public pre-trial's q (its 10 clients)")
    ap.add_argument("--oracle", default=str(ROOT / "analysis" / "out" / "heterogeneity"))
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "local_work"))
    ap.add_argument("--model", default="lr", help="lr, or a factory such as examples.your_model:mlp")
    ap.add_argument("--tune", action="store_true", help="also tune C and the learning rate on the public store")
    ap.add_argument("--local-lrs", type=float, nargs="+", default=[],
                    help="the pre-trial's local work also at these eta (local_lrs): the design chooses eta with K "
                         "and trains at it; today's one epoch at eta 0.1 is not run again (its rows: without this)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| partition (B² public) | ε | today: K, T, σ → accuracy | design: K, T, σ → accuracy | oracle: K, T → "
             "accuracy | regret today → design | predicted loss [95 %] | realized loss |",
             "|---|---|---|---|---|---|---|---|"]
    errors = []
    tuned = ["| partition | ε | design: K, T, σ → accuracy | tuned C, η → accuracy | test loss tuned (design) "
             "| oracle | regret design → tuned |", "|---|---|---|---|---|---|---|"]
    eta_lines = ["| partition | ε | design: K, η, T, σ → accuracy | oracle | predicted loss [95 %] | realized loss |",
                 "|---|---|---|---|---|---|"]
    if a.local_lrs:
        lines = eta_lines
    for partition in a.partitions:
        fit_path = fit_for(partition, out, a.pretrial_q, a.model, a.local_lrs)
        setup = setup_for(a.model, partition)
        for eps in a.epsilons:
            got = {}
            for policy, k in ((("today", 1),) if not a.local_lrs else ()) + (("design", None),):
                d = paretofl.design(N, eps, DELTA, max_rounds=T_MAX, fit=fit_path, local_epochs=k, **SIGMA_RANGE)
                eta = f"_eta{d.lr:g}" if a.local_lrs else ""
                path = out / (f"{prefix(a.model)}{partition.replace(':', '')}_eps{eps:g}_{policy}_K{d.local_epochs}"
                              f"{eta}_T{d.rounds}.json")
                if path.exists():
                    row = json.loads(path.read_text())
                else:
                    row = dict(partition=partition, epsilon=eps, policy=policy, q=d.q, rounds=d.rounds, sigma=d.sigma,
                               epochs=d.local_epochs, predicted=d.local_work["predicted_loss"],
                               interval=d.local_work["interval"], b2=d.local_work["dissimilarity"].get("b2"),
                               lr=d.lr, **run(setup, a.seeds, d, lr=d.lr))
                    path.write_text(json.dumps(row))
                got[policy] = row
                print(f"{partition} eps {eps:g} {policy}: K {row['epochs']} eta {row.get('lr', LR):g} "
                      f"T {row['rounds']} sigma {row['sigma']:.3g}: {100 * np.mean(row['accuracy']):.1f} %, loss "
                      f"{np.mean(row['test_loss']):.4f} (predicted {row['predicted']:.4f})", flush=True)
            o = oracle_of(Path(a.oracle), partition, eps, a.model)
            if a.local_lrs:     # the design alone: its K and eta, against the oracle when there is one
                d = got["design"]
                lo, hi = d["interval"] or (float("nan"), float("nan"))
                errors.append(abs(d["predicted"] - float(np.mean(d["test_loss"]))))
                oa = f"{100 * np.mean(o['accuracy']):.1f}" if o else "—"
                eta_lines.append(f"| {partition} | {eps:g} | {d['epochs']}, {d['lr']:g}, {d['rounds']}, "
                                 f"{d['sigma']:.2g} → {100 * np.mean(d['accuracy']):.1f} ± "
                                 f"{100 * np.std(d['accuracy']):.1f} | {oa} | {d['predicted']:.3f} [{lo:.3f}, "
                                 f"{hi:.3f}] | {np.mean(d['test_loss']):.3f} |")
                continue
            t, d = got["today"], got["design"]
            if a.tune:
                tuned.append(tuned_row(a, out, setup, partition, eps, fit_path, d, o))
            ta, da = 100 * np.mean(t["accuracy"]), 100 * np.mean(d["accuracy"])
            oa = 100 * np.mean(o["accuracy"]) if o else float("nan")
            lo, hi = d["interval"] or (float("nan"), float("nan"))
            real = float(np.mean(d["test_loss"]))
            errors += [abs(r["predicted"] - float(np.mean(r["test_loss"]))) for r in (t, d)]
            lines.append(
                f"| {partition} ({d['b2']:.2g}) | {eps:g} | {t['epochs']}, {t['rounds']}, {t['sigma']:.2g} → "
                f"{ta:.1f} ± "
                f"{100 * np.std(t['accuracy']):.1f} | {d['epochs']}, {d['rounds']}, {d['sigma']:.2g} → {da:.1f} ± "
                f"{100 * np.std(d['accuracy']):.1f} | "
                + (f"{o['epochs']}, {o['rounds']} → {oa:.1f} ± {100 * np.std(o['accuracy']):.1f}" if o else "—")
                + f" | {oa - ta:+.1f} → {oa - da:+.1f} | {d['predicted']:.3f} [{lo:.3f}, {hi:.3f}] | {real:.3f} |")
    lines.append("")
    lines.append(f"Mean absolute error of the predicted test loss over the designs' {len(errors)} runs: "
                 f"{np.mean(errors):.3f}.")
    (out / f"{prefix(a.model)}local_work{lrs_tag(a.local_lrs)}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if a.tune:
        (out / f"{prefix(a.model)}tuned.md").write_text("\n".join(tuned) + "\n")
        print("\n".join(tuned))


def tuned_row(a, out, setup, partition, eps, fit_path, d_row, o) -> str:
    """The design tuned on its public store, trained on the clients: one row of ``tuned.md``."""
    d = paretofl.design(N, eps, DELTA, max_rounds=T_MAX, fit=fit_path, **SIGMA_RANGE)
    path = out / (f"{prefix(a.model)}{partition.replace(':', '')}_eps{eps:g}_tuned_K{d.local_epochs}"
                  f"_T{d.rounds}.json")
    if path.exists():
        row = json.loads(path.read_text())
    else:
        t0 = time.perf_counter()
        paretofl.api.tune(d, store_for(partition, out, a.pretrial_q, a.model),
                          paretofl.api.Grid(clips=TUNE_CLIPS, lrs=TUNE_LRS))
        tuning = time.perf_counter() - t0
        row = dict(partition=partition, epsilon=eps, policy="tuned", q=d.q, rounds=d.rounds, sigma=d.sigma,
                   epochs=d.local_epochs, clip=d.clip, lr=d.lr, edges=d.tuning["on_grid_edge"],
                   scored_on=d.tuning["scored_on"], tuning_seconds=tuning, **run(setup, a.seeds, d, d.clip, d.lr))
        path.write_text(json.dumps(row))
    da, ta = 100 * np.mean(d_row["accuracy"]), 100 * np.mean(row["accuracy"])
    oa = 100 * np.mean(o["accuracy"]) if o else float("nan")
    edge = " (edge)" if row["edges"] else ""
    print(f"{partition} eps {eps:g} tuned: C {row['clip']:g} lr {row['lr']:g}{edge}: {ta:.1f} %", flush=True)
    return (f"| {partition} | {eps:g} | {d_row['epochs']}, {d_row['rounds']}, {d_row['sigma']:.2f} → {da:.1f} ± "
            f"{100 * np.std(d_row['accuracy']):.1f} | {row['clip']:g}, {row['lr']:g}{edge} → {ta:.1f} ± "
            f"{100 * np.std(row['accuracy']):.1f} | {np.mean(row['test_loss']):.3f} "
            f"({np.mean(d_row['test_loss']):.3f}) | {oa:.1f} | {oa - da:+.1f} → {oa - ta:+.1f} |")


if __name__ == "__main__":
    main()
