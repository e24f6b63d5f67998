"""A round's cost against the population: time per round and peak memory at
a cohort of 100 clients a round, as the population N grows.

Each N runs in a fresh process (peak memory is a process's): client-level
DP-FedAvg (the aggregate view), LR, one replica, client rate 100/N, one
local epoch of batch 32, ``--rounds`` rounds, the test set evaluated once
at the end.  FashionMNIST's 90 % private split (54,000 images) for
N ∈ {10³, 10⁴, 5·10⁴} (IID: every client at least one image), and a
synthetic population of two samples a client (16 features, 10 classes)
for N = 10⁶.  Prints seconds per round (training only: set-up and data
loading excluded), the process's peak resident memory while it trains
(Linux's VmHWM, reset after the set-up: the data, PyTorch and the run's
own tensors), and what the run added over the set-up's resident memory.

    .venv/bin/python benchmarks/cohort_scaling.py [--clients 1000 10000 50000] [--synthetic 1000000]
        [--rounds 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _status_mb(key: str) -> float:
    """A figure of /proc/self/status in MB (Linux): VmRSS, resident now;
    VmHWM, the resident peak since the start or since the last reset."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Restart VmHWM from the current resident memory (Linux >= 4.0), so the
    peak measured is the training's, not the data loading's."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def one(n_clients: int, synthetic: bool, rounds: int, cohort: int) -> dict:
    import numpy as np
    import torch

    from paretofl.fl.algorithms import train as run
    from paretofl.fl.build import assemble, prepare
    from paretofl.fl.data import Dataset

    torch.set_num_threads(torch.get_num_threads())
    if synthetic:
        g = torch.Generator().manual_seed(0)
        n = 2 * n_clients
        w = torch.randn(16, 10, generator=g)
        x = torch.randn(n, 16, generator=g)
        xt = torch.randn(2000, 16, generator=g)
        ds = Dataset.from_arrays(x.numpy(), (x @ w).argmax(1).numpy(), xt.numpy(), (xt @ w).argmax(1).numpy(),
                                 clients=np.repeat(np.arange(n_clients), 2), name="synthetic")
        setup = prepare(ds, "lr", None, partition="given")
    else:
        setup = prepare("fashion-mnist", "lr", n_clients, partition="iid", subset="rest", public_fraction=0.1)
    pol = assemble(setup, "dpfedavg", [0], mechanism="client-aggregate", sigma=1.0, clip=1.0, lr=0.1,
                   client_rate=cohort / n_clients, local_epochs=1, batch_size=32).policy
    before = _status_mb("VmRSS")
    _reset_peak()
    t0 = time.perf_counter()
    _, _, fin = run(pol, rounds=rounds, evaluate=rounds)
    seconds = time.perf_counter() - t0
    peak = _status_mb("VmHWM")
    return {"clients": n_clients, "data": "synthetic" if synthetic else "fashion-mnist", "rounds": rounds,
            "cohort": cohort, "seconds_per_round": seconds / rounds, "peak_mb": peak, "added_mb": peak - before,
            "accuracy": float(fin["accuracy"][0])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="*", default=[1000, 10000, 50000])
    ap.add_argument("--synthetic", type=int, nargs="*", default=[1000000])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--cohort", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("N", "KIND"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(int(a.one[0]), a.one[1] == "synthetic", a.rounds, a.cohort)))
        return
    rows = []
    for n, kind in [(n, "fashion-mnist") for n in a.clients] + [(n, "synthetic") for n in a.synthetic]:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), kind, "--rounds", str(a.rounds),
                              "--cohort", str(a.cohort)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        if not a.json:
            print(f"N = {n:>9,} ({kind:>13}): {1e3 * r['seconds_per_round']:7.1f} ms a round, peak "
                  f"{r['peak_mb']:6.0f} MB while training (the run added {r['added_mb']:5.0f} MB)", flush=True)
    fm = [r for r in rows if r["data"] == "fashion-mnist"]
    if len(fm) > 1 and not a.json:
        lo, hi = fm[0], fm[-1]
        time_x = hi["seconds_per_round"] / lo["seconds_per_round"]
        print(f"from N = {lo['clients']:,} to {hi['clients']:,}: time a round x{time_x:.2f}, "
              f"peak memory x{hi['peak_mb'] / lo['peak_mb']:.2f}")
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
