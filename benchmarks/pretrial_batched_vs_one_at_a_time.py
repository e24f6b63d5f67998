"""The shipped LR pre-trial (pretrials/lr_fmnist.toml: 8 σ × 8 T × 5 seeds,
N = 10, 10 % of FashionMNIST) two ways, in one run:

* batched: `run_sweep` — all (σ, seed) replicas in one engine, every T of
  the grid read off one training (prefix sharing), into a fresh store;
* one at a time: each configuration (σ, T, seed) trained on its own, one
  replica for T rounds, as a loop over configurations would.

Running all 360 one-at-a-time trainings takes long on a laptop, so by
default a random sample of them (``--sample``, stratified over T) is timed
and the total extrapolated by T; ``--sample 0`` runs them all.  Prints the
wall time of each and the ratio; ``--json`` prints them as JSON.

    .venv/bin/python benchmarks/pretrial_batched_vs_one_at_a_time.py [--sample 24] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from paretofl.pretrial.spec import Spec
from paretofl.pretrial.sweep import Job, _data, run_job, run_sweep

SPEC = Path(__file__).resolve().parent.parent / "pretrials" / "lr_fmnist.toml"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(SPEC))
    ap.add_argument("--sample", type=int, default=24, help="one-at-a-time runs timed (0: all)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    spec = Spec.from_toml(a.spec)
    _data(spec)  # load the data once, outside both timings

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        summary = run_sweep(spec, Path(d) / "b.sqlite", progress=not a.json)
        batched = time.perf_counter() - t0

    configs = spec.configurations()
    rng = np.random.default_rng(0)
    if a.sample and a.sample < len(configs):
        # stratified by T: the same number of runs at each T of the grid
        per_t = max(1, a.sample // len(spec.rounds))
        chosen = []
        for t in spec.rounds:
            at_t = [c for c in configs if c[1] == t]
            chosen += [at_t[i] for i in rng.choice(len(at_t), per_t, replace=False)]
    else:
        chosen = configs
    times = {}
    for sigma, t, q, seed in chosen:
        t0 = time.perf_counter()
        run_job(spec, Job(q, [(sigma, seed)], [t]))
        times.setdefault(t, []).append(time.perf_counter() - t0)
    # extrapolate: every configuration at T costs the mean measured at T
    count_t = {t: sum(1 for c in configs if c[1] == t) for t in spec.rounds}
    one_at_a_time = sum(np.mean(times[t]) * count_t[t] for t in spec.rounds)
    out = {"configurations": len(configs), "batched_seconds": batched,
           "one_at_a_time_seconds": one_at_a_time, "one_at_a_time_measured_runs": len(chosen),
           "extrapolated": len(chosen) < len(configs), "ratio": one_at_a_time / batched,
           "runs_added": summary["runs_added"]}
    if a.json:
        print(json.dumps(out))
    else:
        how = (f"{len(chosen)} timed, extrapolated by T to {len(configs)}" if out["extrapolated"]
               else f"all {len(configs)} timed")
        print(f"LR pre-trial {Path(a.spec).name}: {len(configs)} runs (sigma x T x seeds, non-private included)")
        print(f"  batched sweep        {batched:8.1f} s")
        print(f"  one at a time        {one_at_a_time:8.1f} s  ({how})")
        print(f"  ratio                {out['ratio']:8.1f}x")


if __name__ == "__main__":
    main()
