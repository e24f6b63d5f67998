"""The whole recipe head to head: does choosing C and η on the public
pre-trial pay?  (issue 27; docs/results.md §9)

    python analysis/recipe.py [--epsilons 1 2 8] [--partitions iid dirichlet] [--seeds 3] [--max-rounds 200]

N = 100 clients of FashionMNIST LR hold the 90 % of the training set the
shipped pre-trial did not use (Dirichlet β = 0.5 or IID); client-level
DP-FedAvg, aggregate view, δ = 1e-5, one local epoch of batch-64 SGD.  At
each budget, ``design`` (the shipped κ, σ from 0.01) gives q, T and σ, and
every policy trains at those, so all spend the same exact ε (the design at
one local epoch, ``local_epochs=1``, as every policy trains):

* (i) ``recipe``: C and η from ``api.tune(design, "pretrials/lr_fmnist.sqlite")``,
  the public pre-trial (highest accuracy of the 5 × 4 grid on the public
  samples the tuning holds out of its training); (i-b) the same tuning
  ranked by that loss (``by="loss"``);
* (ii) ``C = 0.1``: the frameworks' default clipping norm, η = 0.1 (the
  project's η);
* (iii) ``adaptive``: Andrew et al.'s adaptive clipping from C₀ = 0.1 to the
  median (γ = 0.5, η_C = 0.2, η = 0.1) with count noise max(m/20, z): TFF's
  m/20 where it leaves the update most of the charge, else z, which raises
  the update's noise by 15 % (at z near m/10, m/20 would raise it eightfold);
* (iv) ``oracle``: the best mean accuracy over the same (C, η) grid,
  trained on the clients' data (its tuning's privacy cost ignored).

Every (C, η) pair of the grid is a replica of one engine (three seeds
each), so (i), (ii) and (iv) come from one training per cell.  Results go
to ``analysis/out/recipe/recipe.json`` (resumed cell by cell) and the table
to ``recipe.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import paretofl
from paretofl.pretrial.tune import CLIPS, LRS, best_pair

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "pretrials" / "lr_fmnist.sqlite"
N, DELTA = 100, 1e-5


def _train(setup, q, rounds, sigma, reps, **kw):
    """Final accuracy and test loss of each replica (clip, lr, seed)."""
    from paretofl.fl.algorithms import History, train
    from paretofl.fl.build import assemble

    pol = assemble(setup, "dpfedavg", [s for _, _, s in reps], mechanism="client-aggregate",
                   sigma=sigma, clip=np.array([c for c, _, _ in reps]), lr=np.array([e for _, e, _ in reps]),
                   client_rate=q, local_epochs=1, batch_size=64, **kw).policy
    h = History()
    train(pol, rounds=rounds, epsilon=None, delta=DELTA, evaluate=[rounds], history=h)
    last = {r["replica"]: r for r in h.rows if r["round"] == rounds}
    return [(last[i]["accuracy"], last[i]["test_loss"], last[i]["epsilon"]) for i in range(len(reps))], pol


def cell(partition, eps, seeds, max_rounds):
    from paretofl.fl.build import prepare

    setup = prepare("fashion-mnist", "lr", N, partition=partition, seed=0, public_fraction=0.1,
                    subset="rest")
    t0 = time.time()
    # one local epoch, as every policy here trains (the design chooses the local work since issue 46: §13)
    d = paretofl.api.tune(paretofl.design(N, eps, delta=DELTA, max_rounds=max_rounds, sigma_min=0.01, local_epochs=1),
                          str(STORE))
    m = d.q * N
    reps = [(c, e, s) for c in CLIPS for e in LRS for s in range(seeds)]
    res, _ = _train(setup, d.q, d.rounds, d.sigma, reps)
    grid = {}
    for (c, e, s), (acc, loss, ep) in zip(reps, res):
        grid.setdefault((c, e), []).append((acc, loss, ep))
    table = {f"{c:g},{e:g}": {"clip": c, "lr": e, "acc": [a for a, _, _ in v], "loss": [l for _, l, _ in v],
                              "epsilon": max(x for _, _, x in v)} for (c, e), v in grid.items()}
    z = d.noise_multiplier
    sb = max(m / 20, z)   # TFF's m/20, or z where that would leave the update less than 87 % of the budget
    adaptive, pol = _train(setup, d.q, d.rounds, d.sigma, [(0.1, 0.1, s) for s in range(seeds)],
                           clip_quantile=0.5, clip_lr=0.2, count_noise=sb)
    return {"partition": partition, "epsilon_budget": eps, "q": d.q, "rounds": d.rounds, "sigma": d.sigma,
            "noise_multiplier": z, "epsilon": d.epsilon, "recipe": {"clip": d.clip, "lr": d.lr},
            "public_norms": d.tuning["norms"], "tuning_grid": d.tuning["grid"], "grid": table,
            "tuning_scored_on": d.tuning["scored_on"],
            "adaptive": {"acc": [a for a, _, _ in adaptive], "loss": [l for _, l, _ in adaptive],
                         "epsilon": max(x for _, _, x in adaptive), "count_noise": sb,
                         "count_noise_default": m / 20, "final_clip": [float(c) for c in pol.clip]},
            "seconds": time.time() - t0}


def public_pick(c, by):
    """The pair the public tuning picks: highest accuracy or lowest loss."""
    best = best_pair(c["tuning_grid"], by)
    return best["clip"], best["lr"]


def summary(c):
    """(name, mean acc, sd, mean loss) of the policies in a cell: (i) the
    recipe (public tuning by accuracy, design's default), (i-b) the public
    tuning by loss, (ii), (iii), (iv)."""
    g = c["grid"]

    def row(name, accs, losses):
        return name, 100 * float(np.mean(accs)), 100 * float(np.std(accs, ddof=1)), float(np.mean(losses))

    picks = {by: g["{:g},{:g}".format(*public_pick(c, by))] for by in ("accuracy", "loss")}
    default = g["0.1,0.1"]
    best = max(g.values(), key=lambda v: np.mean(v["acc"]))
    return [row("(i) recipe", picks["accuracy"]["acc"], picks["accuracy"]["loss"]),
            row("(i-b) by public loss", picks["loss"]["acc"], picks["loss"]["loss"]),
            row("(ii) C = 0.1", default["acc"], default["loss"]),
            row("(iii) adaptive", c["adaptive"]["acc"], c["adaptive"]["loss"]),
            row(f"(iv) oracle (C = {best['clip']:g}, lr = {best['lr']:g})", best["acc"], best["loss"])]


def report(cells, out):
    lines = ["| partition | ε | q, T, σ (z) | (i) recipe: C, η by public accuracy | (i-b) C, η by public loss "
             "| (ii) C = 0.1 | (iii) adaptive | (iv) oracle: C, η on the clients' data | (i) − (iv) | (i-b) − (iv) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        s = summary(c)
        txt = [f"{a:.1f} ± {sd:.1f}" for _, a, sd, _ in s]
        oracle_name = s[4][0].split("(", 2)[2].rstrip(")")
        pa, pl = public_pick(c, "accuracy"), public_pick(c, "loss")
        lines.append(f"| {c['partition']} | {c['epsilon_budget']:g} | {c['q']:.3g}, {c['rounds']}, {c['sigma']:.3g} "
                     f"({c['noise_multiplier']:.3g}) | {txt[0]} ({pa[0]:g}, {pa[1]:g}) | {txt[1]} ({pl[0]:g}, "
                     f"{pl[1]:g}) | {txt[2]} | {txt[3]} | {txt[4]} ({oracle_name}) | {s[0][1] - s[4][1]:+.1f} | "
                     f"{s[1][1] - s[4][1]:+.1f} |")
    (out / "recipe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "recipe"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "recipe.json"
    done = json.loads(path.read_text()) if path.is_file() else []
    # cells of code whose tuning ranked on the test split (before 2026-11-26) are measured again
    done = [c for c in done if "held out" in c.get("tuning_scored_on", "")]
    for part in a.partitions:
        for eps in a.epsilons:
            if any(c["partition"] == part and c["epsilon_budget"] == eps for c in done):
                continue
            c = cell(part, eps, a.seeds, a.max_rounds)
            done.append(c)
            path.write_text(json.dumps(done, indent=1))
            print(f"{part} eps={eps:g}: q={c['q']:.3g} T={c['rounds']} ({c['seconds']:.0f} s)", flush=True)
    report([c for c in done if c["partition"] in a.partitions and c["epsilon_budget"] in a.epsilons], out)


if __name__ == "__main__":
    main()
