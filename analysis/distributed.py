"""Distributed DP (Skellam + secure aggregation) against the central
client-aggregate design at the same ε (docs/results.md §14, issue 48).

    python analysis/distributed.py [--epsilons 2 8] [--bits 8 12 16 20] [--seeds 2] [--clients 1000]
                                   [--no-train-searched]

FashionMNIST's 90 % private split over ``--clients`` IID clients, LR (7,850
weights: d' = 8,192 rotated coordinates), δ = 1e-5, at most 200 rounds, the
shipped LR fit's κ, C and η, one local epoch of batch 64 (``local_epochs=1``
for every design, so that the mechanisms differ and nothing else).  At each
budget it designs and trains:

* ``central``: ``design()`` — client-aggregate, the server trusted with the
  sum, Poisson sampling amplifying;
* ``distributed, b bits``: ``design(mechanism="distributed", bits=b)`` — the
  scale chosen for the width, and the cohort halved where the sum does not
  fit it;
* ``distributed, searched``: the width chosen by the design.

Every training runs ``--seeds`` replicas in one vectorised run (the
trainer's integer shares, modular sum and dequantisation, simulated);
each is a JSON row under ``--out`` (default analysis/out/distributed/), so
the script resumes; it writes ``distributed.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import paretofl

ROOT = Path(__file__).resolve().parent.parent
DIM, T_CAP = 7850, 200


def _design(n, eps, bits):
    if bits == "central":
        return paretofl.design(n, eps, max_rounds=T_CAP, local_epochs=1)
    opts = {"dim": DIM} if bits == "searched" else {"dim": DIM, "bits": int(bits)}
    return paretofl.design(n, eps, max_rounds=T_CAP, mechanism="distributed", mechanism_options=opts,
                           local_epochs=1)


def run(eps, bits, n, seeds, out: Path, train_searched: bool = True) -> dict:
    path = out / f"eps{eps:g}_{bits}.json"
    if path.exists():
        return json.loads(path.read_text())
    row = {"epsilon": eps, "policy": bits}
    try:
        d = _design(n, eps, bits)
    except ValueError as exc:
        row["refused"] = str(exc)
        path.write_text(json.dumps(row, indent=1))
        return row
    x = d.details
    row.update(q=d.q, rounds=d.rounds, sigma=d.sigma, z=d.noise_multiplier, bound=d.utility_bound,
               design_epsilon=d.epsilon, bits=x.get("bits"), scaled_clip=x.get("scaled_clip"),
               error_ratio=x.get("error_ratio"), wrap=x.get("wrap_probability"),
               matches_at_bits=x.get("matches_at_bits"))
    if bits == "searched":           # the width chosen: trained already where a given width is the same design
        same = out / f"eps{eps:g}_{row['bits']}.json"
        if same.exists():
            other = json.loads(same.read_text())
            if "accuracy" in other and all(abs(other[k] - row[k]) <= 1e-9 * abs(row[k]) + 1e-12
                                           for k in ("q", "rounds", "sigma", "scaled_clip")):
                row.update({k: other[k] for k in ("accuracy", "accuracy_each", "test_loss", "epsilon_ledger",
                                                   "seconds", "complete")}, same_as=row["bits"])
                path.write_text(json.dumps(row, indent=1))
                return row
        if not train_searched:
            path.write_text(json.dumps(row, indent=1))
            return row
    t = time.time()
    r = paretofl.train(dataset="fashion-mnist", model="lr", clients=n, design=d, replicas=seeds, seed=0)
    acc = [float(a) for a in r.per_replica["accuracy"]]
    row.update(accuracy=r.accuracy, accuracy_each=acc, test_loss=r.test_loss, epsilon_ledger=r.epsilon,
               seconds=time.time() - t, complete=r.complete)
    path.write_text(json.dumps(row, indent=1))
    print(f"eps {eps:g} {bits}: q {d.q:.3g} T {d.rounds} bits {row['bits']} -> {100 * r.accuracy:.1f} "
          f"({row['seconds']:.0f} s)", flush=True)
    return row


def table(rows) -> str:
    lines = ["| ε | design | bits, scaled clip | q, T, z | error ratio r | bound | accuracy (%) | ε ledger |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['epsilon']:g} | distributed, {r['policy']} bits | — | — | — | refused: "
                         f"{r['refused'][:90]}… | — | — |")
            continue
        name = "central (client-aggregate)" if r["policy"] == "central" else f"distributed, {r['policy']}" + (
            "" if r["policy"] == "searched" else " bits")
        knobs = "—" if r["bits"] is None else f"{r['bits']}, {r['scaled_clip']:.4g}"
        if "accuracy" in r:
            acc = r["accuracy_each"]
            spread = (max(acc) - min(acc)) / 2 * 100
            trained = (f"{100 * r['accuracy']:.1f} ± {spread:.1f}" if len(acc) > 1 else f"{100 * r['accuracy']:.1f}") \
                + (f" (the {r['same_as']}-bit row)" if "same_as" in r else "")
            ledger = f"{r['epsilon_ledger']:.3f}"
        else:
            trained, ledger = "not trained", f"{r['design_epsilon']:.3f} (design)"
        lines.append(f"| {r['epsilon']:g} | {name} | {knobs} | {r['q']:.3g}, {r['rounds']}, {r['z']:.3g} | "
                     f"{'—' if r['error_ratio'] is None else format(r['error_ratio'], '.3g')} | {r['bound']:.4g} | "
                     f"{trained} | {ledger} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 8.0])
    ap.add_argument("--bits", nargs="+", default=["8", "12", "16", "20"])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "distributed"))
    ap.add_argument("--no-train-searched", action="store_true",
                    help="the searched width's design only, where no given width trained the same design")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for eps in a.epsilons:
        for bits in ("central", *a.bits, "searched"):
            rows.append(run(eps, bits, a.clients, a.seeds, out, not a.no_train_searched))
    text = table(rows)
    (out / "distributed.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
