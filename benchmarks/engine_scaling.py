"""How the engine scales with the number of models it trains at once.

One DP-SGD local step of every client of every replica — N = 10 clients ×
R replicas, 6000 samples per client, sampling rate 90/6000 (batch ≈ 90),
σ = 1, C = 1 — for each model and each R asked for, on one device.  Prints
client-steps per second, the wall time of one step of all N·R models and,
on CUDA, the peak memory PyTorch allocated: what a sweep of R
configurations × seeds costs per local step, and how large R can grow
before the device runs out of memory (such an R is reported, not fatal).
Beside the step it times the step's random draws alone (the noise and
the Poisson batch sampling): each replica draws from its own generator, one
call per replica and tensor, which on CUDA means R kernel launches a draw.

    .venv/bin/python benchmarks/engine_scaling.py [--device cuda] [--models lr lenet] [--replicas 4 16] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from engine_vs_opacus import PER_CLIENT, RATE, N, _sync, fake_fmnist  # noqa: E402

from paretofl.fl.build import Setup, assemble  # noqa: E402
from paretofl.fl.engine import DPSGD  # noqa: E402
from paretofl.fl.models import build_model  # noqa: E402

SHAPES = {"cifar-cnn": (3, 32, 32)}


def _timed(f, device, min_seconds):
    f()                                                    # warm-up
    _sync(device)
    n, t0 = 0, time.perf_counter()
    while n < 3 or time.perf_counter() - t0 < min_seconds:
        f()
        n += 1
        _sync(device)
    return (time.perf_counter() - t0) / n


def measure(name, ds, replicas, device, min_seconds=1.0):
    """Client-steps per second, seconds per step, seconds of its draws,
    peak bytes (CUDA; else None)."""
    parts = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N)]
    if device != "cpu":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    eng = assemble(Setup(ds, parts, build_model(name, ds.x_train.shape[1:])), replicas=replicas,
                   device=device).engine
    params = eng.broadcast(eng.init_global())
    kw = dict(steps=1, lr=0.1, dpsgd=DPSGD(RATE, 1.0, RATE * PER_CLIENT, sigma=1.0))
    dt = _timed(lambda: eng.local_steps(params, **kw), device, min_seconds)
    peak = torch.cuda.max_memory_allocated() if device != "cpu" else None
    rate = eng.vec(RATE)
    draws = _timed(lambda: (eng.noise_like(params), eng.poisson_batches(rate)), device, min_seconds / 4)
    return eng.M / dt, dt, draws, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", nargs="+", default=["lr", "lenet"])
    ap.add_argument("--replicas", nargs="+", type=int, default=None,
                    help="replica counts (default: 4 16 on CPU, 4 32 128 512 on CUDA)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    replicas = a.replicas or ([4, 16] if a.device == "cpu" else [4, 32, 128, 512])
    out = {}
    if not a.json:
        print(f"one DP-SGD step of N = {N} clients x R replicas, batch ≈ 90, device {a.device}")
        print(f"  {'model':<10}{'R':>6}{'models':>8}{'client-steps/s':>16}{'ms per step':>13}{'of it draws':>13}"
              f"{'peak memory':>13}")
    for name in a.models:
        ds = fake_fmnist(shape=SHAPES.get(name, (1, 28, 28)))
        out[name] = {}
        for r in replicas:
            try:
                rate, dt, draws, peak = measure(name, ds, r, a.device)
            except torch.cuda.OutOfMemoryError:
                out[name][r] = "out of memory"
                if not a.json:
                    print(f"  {name:<10}{r:>6}{N * r:>8}   out of memory")
                break                                   # larger R will not fit either
            out[name][r] = {"client_steps_per_s": rate, "seconds_per_step": dt, "seconds_of_draws": draws,
                            "peak_bytes": peak}
            if not a.json:
                mem = "—" if peak is None else f"{peak / 2**30:.2f} GiB"
                print(f"  {name:<10}{r:>6}{N * r:>8}{rate:>16.0f}{1000 * dt:>13.1f}{1000 * draws:>10.1f} ms{mem:>13}")
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
