"""A bandmf round against a DP-FedAvg round at the same cohort: seconds per
round, side by side in one process, and their ratio.

N = 10,000 clients (FashionMNIST's 90 % private split, IID) or more, a cohort of 100
a round, one local epoch of batch 32, ``--replicas`` replicas, ``--rounds``
rounds after ``--warmup`` untimed ones, the test set evaluated once at the
end; the model LR (7,850 weights) or LeNet-5 (about 61,700).  Runs:

* DP-FedAvg: client-aggregate at q = 0.01 (Poisson; its N uniforms a
  replica a round) and, as the fairest baseline for a schedule without
  sampling, bandmf with b = 1 over a population of 100 (every client every
  round: the same cohort, independent noise);
* bandmf at b = 100, 200, 1000 (groups of 100 clients in turn, N = 100 b:
  FashionMNIST's 10,000 clients repeated where b > 100):
  the noise recurrence keeps b - 1 past draws of the model's size a replica
  and reads them every round, O(b d).

    .venv/bin/python benchmarks/bandmf_round_cost.py [--models lr lenet] [--bands 100 200 1000]
        [--rounds 30] [--replicas 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import time


def one(setup, mechanism, bands, q, rounds, warmup, replicas):
    from paretofl.fl.algorithms import train as run
    from paretofl.fl.build import assemble

    opts = {"bands": bands} if mechanism == "bandmf" else {}
    pol = assemble(setup, "dpfedavg", replicas, mechanism=mechanism, sigma=0.5, clip=0.3,
                   lr=0.1, client_rate=q, local_epochs=1, batch_size=32, **opts).policy
    run(pol, rounds=warmup, evaluate=10**9)        # untimed: allocation, first-touch
    pol = assemble(setup, "dpfedavg", replicas, mechanism=mechanism, sigma=0.5, clip=0.3,
                   lr=0.1, client_rate=q, local_epochs=1, batch_size=32, **opts).policy
    t0 = time.perf_counter()
    run(pol, rounds=rounds, evaluate=rounds)
    return (time.perf_counter() - t0) / rounds


def main(argv=None):
    from paretofl.fl.build import Setup, prepare

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["lr", "lenet"])
    ap.add_argument("--bands", type=int, nargs="+", default=[100, 200, 1000])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = []
    for model in a.models:
        full = prepare("fashion-mnist", model, 10_000, partition="iid", subset="rest", public_fraction=0.1)
        base = one(full, "client-aggregate", 1, 0.01, a.rounds, a.warmup, a.replicas)
        rows.append({"model": model, "run": "DP-FedAvg, Poisson q = 0.01", "seconds_per_round": base, "ratio": 1.0})
        small = Setup(full.data, full.parts[:100], full.model)
        every = one(small, "bandmf", 1, 1.0, a.rounds, a.warmup, a.replicas)
        rows.append({"model": model, "run": "bandmf b = 1 (100 clients, every one every round)",
                     "seconds_per_round": every, "ratio": every / base})
        for b in a.bands:
            # 100 b clients (the 10,000 repeated where b > 100: the timing needs the cohort, not new data)
            parts = (full.parts * (1 + 100 * b // len(full.parts)))[:100 * b]
            sec = one(Setup(full.data, parts, full.model), "bandmf", b, 1.0 / b, a.rounds, a.warmup, a.replicas)
            rows.append({"model": model, "run": f"bandmf b = {b} ({len(parts):,} clients, 100 a round)",
                         "seconds_per_round": sec, "ratio": sec / base})
        for r in rows[-2 - len(a.bands):]:
            if not a.json:
                print(f"{r['model']:<6} {r['run']:<50} {1000 * r['seconds_per_round']:8.1f} ms/round  "
                      f"{r['ratio']:.2f}x DP-FedAvg's", flush=True)
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
