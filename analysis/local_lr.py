"""Can the public pre-trial's noise-free curves rank the client learning rate
with the local work?  (issue 46; docs/results.md §13, "η chosen with K from the public curves".)

    python analysis/local_lr.py [--partitions iid dirichlet:1 dirichlet:0.5 dirichlet:0.1 shards:2]
                                [--lrs 0.025 0.05 0.1 0.2 0.4] [--seeds 3] [--out analysis/out/local_lr]
                                [--design [--epsilons 1 2 8] [--fits analysis/out/local_work]]

The design chooses the local epochs K from a public pre-trial's noise-free
runs at one η (docs/theory.md §4.E: L(T; K) = c_K + A(K)/T, fitted on the
seed mean).  On the clients' own data a smaller η with more local epochs
won at ε 1 and 2 (docs/results.md §13).  This script measures whether the
same public curves, run at several η, would rank (K, η) as the oracle on
the clients' data does:

* for each partition, the public pre-trial's clients (10 on FashionMNIST's
  public 10 % split, partitioned like the federation, q = 0.5, C = 0.3,
  batch 64, T ∈ {2, …, 64}, three seeds: ``analysis/local_work.py``'s
  ``PRETRIAL``) train without noise at each K ∈ {1, 2, 4, 8} and each η of
  ``--lrs``, scored on samples held out of the public share;
* each (K, η) curve is fitted to c + A/T (:func:`paretofl.theory.local_work.curve`);
* at the oracle's T (the shipped-κ design's T at ε 1, 2, 8: 6, 11, 39, every
  client every round), the predicted noise-free loss c + A/T of every
  (K, η) — the noise term κ·A(K₀)σ²/(qN) of (4.E.1) is the same for all at
  one T, so this is the model's ranking there.

Public data only; nothing is charged.  One JSON file per (partition, η)
under ``--out`` (so it resumes) and a table ``local_lr.md``.

``--design``: the design that chooses η with K, trained on the clients.  For
each partition, κ from ``analysis/local_work.py``'s public pre-trial
partitioned like the clients (its fits under ``--fits``, run there first
where missing, as that script does; IID: the shipped fit), the
reference (K₀, η₀) = (1, 0.1) its κ was measured at, and each candidate
(K, η) with A > 0: κ_Kη = κ·A(K₀, η₀)/A(K, η), the design's (q, T, σ) and
bound u at κ_Kη, and (4.E.2) with η beside K,
U = u·A(K, η)/A(K₀, η₀) + (c_Kη − c_K₀η₀)/A(K₀, η₀); the least U is
trained on the clients' data (§13's federation, three seeds), one JSON row
per cell, and tabled in ``design.md`` with the design's bootstrap rule
over the pairs beside it (:func:`rule_share`; where fewer than 90 % of the
draws agree, the reference's design is trained too).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from heterogeneity import CLIP, DELTA, LR, SIGMA_RANGE, T_MAX, N, setup_for  # analysis/ is on the path
from local_work import PRETRIAL, fit_for, run

import paretofl
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.sweep import local_work_jobs, run_local_work_job
from paretofl.theory.local_work import curve

ROOT = Path(__file__).resolve().parent.parent
#: the oracle's T at ε 1, 2, 8 (the shipped-κ design's T × 1, docs/results.md §13)
ORACLE_T = {1.0: 6, 2.0: 11, 8.0: 39}
#: the reference (K₀, η₀): the local work and η the pre-trial's κ was measured at
REF_K, REF_LR = PRETRIAL["local_epochs"], LR


def spec_for(partition: str, lr: float, seeds: int) -> Spec:
    kind, _, arg = partition.partition(":")
    fields = dict(PRETRIAL, lr=lr, seeds=seeds, clip=CLIP, delta=DELTA,
                  partition=partition if kind == "shards" else kind,
                  **({"beta": float(arg)} if kind == "dirichlet" else {}))
    return Spec.from_dict(fields)


def measure(partition: str, lr: float, seeds: int, out: Path) -> dict:
    """Each K's seed-mean held-out loss at every T of the grid, and its fitted (A, c)."""
    path = out / (f"{partition.replace(':', '')}_lr{lr:g}" + ("" if seeds == 3 else f"_s{seeds}") + ".json")
    if path.exists():
        return json.loads(path.read_text())
    spec = spec_for(partition, lr, seeds)
    t0 = time.perf_counter()
    rows = [r for job in local_work_jobs(spec, set()) for r in run_local_work_job(spec, job)]
    rounds = sorted(spec.rounds)
    res = dict(partition=partition, lr=lr, seeds=seeds, rounds=rounds, curves={})
    for k in spec.local_work:
        mean = [float(np.mean([r["test_loss"] for r in rows if r["epochs"] == k and r["rounds"] == t]))
                for t in rounds]
        acc = [float(np.mean([r["accuracy"] for r in rows if r["epochs"] == k and r["rounds"] == t]))
               for t in rounds]
        a, c = curve(rounds, mean)
        per_seed = [[float(next(r["test_loss"] for r in rows if r["epochs"] == k and r["rounds"] == t
                                and r["seed"] == sd)) for t in rounds] for sd in spec.seed_list()]
        res["curves"][str(k)] = dict(loss=mean, accuracy=acc, A=a, c=c, seed_loss=per_seed)
    res["seconds"] = time.perf_counter() - t0
    path.write_text(json.dumps(res))
    print(f"{partition} lr {lr:g}: {res['seconds']:.0f} s", flush=True)
    return res


def picks(got: dict, kappa: float, eps: float) -> list:
    """Every candidate (U, K, η, design) at ε, least U first (module docstring)."""
    if REF_LR not in got or got[REF_LR]["curves"][str(REF_K)]["A"] <= 0:
        raise SystemExit(f"--design needs the reference ({REF_K} epoch, eta {REF_LR:g}) among --lrs, with a loss "
                         "that falls with T")
    ref = got[REF_LR]["curves"][str(REF_K)]
    out = []
    for lr, res in got.items():
        for k, cur in res["curves"].items():
            if cur["A"] <= 0:
                continue
            r = ref["A"] / cur["A"]
            d = paretofl.design(N, eps, DELTA, max_rounds=T_MAX, kappa=kappa * r, **SIGMA_RANGE)
            u = d.utility_bound / r + (cur["c"] - ref["c"]) / ref["A"]
            out.append((u, int(k), lr, d))
    return sorted(out, key=lambda x: x[0])


def train_pick(setup_of, partition, eps, pick, out: Path) -> dict:
    """One candidate's design trained on the clients' data (three seeds), remembered under ``out`` (a row whose
    q or σ is not the design's now, e.g. from another --fits, is refused rather than reused)."""
    u, k, lr, d = pick
    path = out / f"design_{partition.replace(':', '')}_eps{eps:g}_K{k}_lr{lr:g}_T{d.rounds}.json"
    if path.exists():
        row = json.loads(path.read_text())
        if not (np.isclose(row["q"], d.q, rtol=1e-9) and np.isclose(row["sigma"], d.sigma, rtol=1e-9)):
            raise SystemExit(f"{path} was trained at q {row['q']:g}, sigma {row['sigma']:.6g}, not this design's "
                             f"q {d.q:g}, sigma {d.sigma:.6g}: give another --out")
        return row
    spec = SimpleNamespace(sigma=d.sigma, q=d.q, local_epochs=k, rounds=d.rounds, budget=eps)
    row = dict(partition=partition, epsilon=eps, epochs=k, lr=lr, q=d.q, rounds=d.rounds, sigma=d.sigma, U=u,
               **run(setup_of(), 3, spec, lr=lr))
    path.write_text(json.dumps(row))
    return row


def rule_share(got: dict, pick, ref, kappa: float, draws: int = 200, seed: int = 0) -> float:
    """The design's bootstrap rule (docs/theory.md §4.E) over (K, η) pairs: the share of draws (seeds resampled
    with replacement, every curve refitted on the draw's seed mean) in which ``pick``'s predicted loss (4.E.1)
    at its design point is below the reference (K₀, η₀)'s at its own."""
    rounds = got[REF_LR]["rounds"]

    def fitted(k, lr, cols):
        return curve(rounds, np.mean(np.asarray(got[lr]["curves"][str(k)]["seed_loss"])[cols], axis=0))

    def loss(cand, cols, a0):
        _, k, lr, d = cand
        a, c = fitted(k, lr, cols)
        return c + a / d.rounds + a0 * kappa * d.sigma ** 2 / (d.q * N)

    n_seeds = len(got[REF_LR]["curves"][str(REF_K)]["seed_loss"])
    rng = np.random.default_rng(seed)
    wins = []
    for _ in range(draws):
        cols = rng.integers(0, n_seeds, n_seeds)
        a0 = fitted(REF_K, REF_LR, cols)[0]
        wins.append(loss(pick, cols, a0) < loss(ref, cols, a0))
    return float(np.mean(wins))


def design_rows(a, out: Path) -> None:
    """``--design``: the least-U (K, η) of every cell and the least-U K at η₀ = 0.1, trained on the clients."""
    lines = ["| partition | ε | η chosen with K: K, η, T, σ → accuracy (loss) | at η 0.1: K, T, σ → accuracy (loss) "
             "| runner-up K, η (U − least) | draws agreeing | with the rule: K, η → accuracy |",
             "|---|---|---|---|---|---|---|"]

    def cell(row):
        return (f"{100 * np.mean(row['accuracy']):.1f} ± {100 * np.std(row['accuracy']):.1f} "
                f"({np.mean(row['test_loss']):.3f})")

    for partition in a.partitions:
        got = {lr: measure(partition, lr, a.seeds, out) for lr in a.lrs}
        setups = {}

        def setup_of():
            return setups.setdefault(partition, setup_for("lr", partition))

        kappa = json.loads(Path(fit_for(partition, Path(a.fits))).read_text())["kappa"]
        for eps in a.epsilons:
            cands = picks(got, kappa, eps)
            best = train_pick(setup_of, partition, eps, cands[0], out)
            at01 = train_pick(setup_of, partition, eps, next(c for c in cands if c[2] == REF_LR), out)
            ref = next(c for c in cands if c[1] == REF_K and c[2] == REF_LR)
            share = 1.0 if cands[0] is ref else rule_share(got, cands[0], ref, kappa)
            ruled = best if share >= 0.9 else train_pick(setup_of, partition, eps, ref, out)
            u1, k1, lr1, _ = cands[1]
            line = (f"| {partition} | {eps:g} | {best['epochs']}, {best['lr']:g}, {best['rounds']}, "
                    f"{best['sigma']:.2g} → {cell(best)} | {at01['epochs']}, {at01['rounds']}, {at01['sigma']:.2g} → "
                    f"{cell(at01)} | {k1}, {lr1:g} ({u1 - cands[0][0]:+.4f}) | {100 * share:.0f} % | "
                    f"{ruled['epochs']}, {ruled['lr']:g} → {cell(ruled)} |")
            print(line, flush=True)
            lines.append(line)
    (out / "design.md").write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", nargs="+",
                    default=["iid", "dirichlet:1", "dirichlet:0.5", "dirichlet:0.1", "shards:2"])
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.025, 0.05, 0.1, 0.2, 0.4])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "local_lr"))
    ap.add_argument("--design", action="store_true", help="train the design that chooses η with K")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--fits", default=str(ROOT / "analysis" / "out" / "local_work"),
                    help="analysis/local_work.py's --out: the partitioned public pre-trials' fits")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.design:
        design_rows(a, out)
        return
    lines = ["| partition | η | K: A, c | predicted noise-free loss at T = 6 / 11 / 39, K = 1 / 2 / 4 / 8 |",
             "|---|---|---|---|"]
    best = ["| partition | ε (T) | the model's best (K, η) | its predicted loss | runner-up |", "|---|---|---|---|---|"]
    for partition in a.partitions:
        got = {lr: measure(partition, lr, a.seeds, out) for lr in a.lrs}
        for lr, res in got.items():
            cur = res["curves"]
            ks = sorted(cur, key=int)
            consts = "; ".join(f"{k}: {cur[k]['A']:.3f}, {cur[k]['c']:.3f}" for k in ks)
            preds = " · ".join(" / ".join(f"{cur[k]['c'] + cur[k]['A'] / t:.3f}" for k in ks)
                               for t in ORACLE_T.values())
            lines.append(f"| {partition} | {lr:g} | {consts} | {preds} |")
        for eps, t in ORACLE_T.items():
            cands = sorted((res["curves"][k]["c"] + res["curves"][k]["A"] / t, int(k), lr)
                           for lr, res in got.items() for k in res["curves"])
            (l0, k0, lr0), (l1, k1, lr1) = cands[0], cands[1]
            best.append(f"| {partition} | {eps:g} ({t}) | K {k0}, η {lr0:g} | {l0:.3f} | K {k1}, η {lr1:g}: "
                        f"{l1:.3f} |")
    text = "\n".join(lines) + "\n\n" + "\n".join(best) + "\n"
    (out / "local_lr.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
