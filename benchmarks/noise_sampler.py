"""The noise sampler's cost: a DP-SGD step with the float64 Box–Muller of
:func:`paretofl.fl.engine.gaussian_pairs` (issue 44 item 6) against the same
step with the float32 sampler it replaced ((Z₁ + Z₂)/√2 of two of PyTorch's
float32 ``normal_``, bounded at 8.157), and the noise draw alone.

The work is engine_vs_opacus.py's (N = 10 clients, batch ≈ 90, 4 replicas,
FashionMNIST-shaped data): every step draws one noise value per weight per
client (LR 7,850 weights, LeNet-5 61,706).  Both samplers run in one process,
in alternated blocks; the medians are printed.  ``--also-sum`` adds a third
sampler: the float64 one with two normals summed per value (Opacus's secure
mode's habit, which the float32 sampler kept), to show what that would cost.
Both wall time and the process's CPU time are printed: on a shared machine
the CPU time (``--threads 1``) is the steadier measure of the work.

    .venv/bin/python benchmarks/noise_sampler.py [--model lr|lenet|both] [--also-sum]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from engine_vs_opacus import PER_CLIENT, RATE, N, fake_fmnist  # noqa: E402

from paretofl.fl.build import Setup, assemble  # noqa: E402
from paretofl.fl.engine import DPSGD  # noqa: E402
from paretofl.fl.models import build_model  # noqa: E402


def float32_normals(self, tails, counts, drawing=None):
    """The sampler before issue 44 item 6 (paretofl 0.2): (Z₁ + Z₂)/√2 of two
    float32 normal_ draws, replicas on the threads from 2²⁰ normals."""
    counts = np.asarray(counts, dtype=int)
    drawing = self._drawing(drawing)
    b = np.concatenate([[0], np.cumsum(counts)])
    K = int(b[-1])
    sizes = [math.prod(t) for t in tails]
    pairs = [torch.empty(2 * K * p, device=self.device, dtype=self.dtype) for p in sizes]
    outs = [torch.zeros((K, *t), device=self.device, dtype=self.dtype) for t in tails]
    c = math.sqrt(0.5)

    def draw(r):
        n = int(counts[r])
        for z, o, p, t in zip(pairs, outs, sizes, tails):
            zr = z[2 * b[r] * p: 2 * b[r + 1] * p].view(2, n, *t)
            zr.normal_(generator=self.gens[r])
            torch.add(zr[0], zr[1], out=o[b[r]:b[r + 1]]).mul_(c)

    live = [r for r in range(self.R) if drawing[r] and counts[r] > 0]
    if 2 * int(counts.max(initial=0)) * sum(sizes) < (1 << 20):
        for r in live:
            draw(r)
    else:
        self._spread(draw, live)
    return outs


def float64_summed_normals(self, tails, counts, drawing=None):
    """The float64 sampler with two normals summed per value: twice the pairs."""
    outs = self._new_normals([(2, *t) for t in tails], counts, drawing)
    return [(o[:, 0] + o[:, 1]) * math.sqrt(0.5) for o in outs]


SAMPLERS = {"float32 (0.2)": float32_normals, "float64 Box-Muller": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="both", choices=["lr", "lenet", "both"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--also-sum", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    samplers = dict(SAMPLERS)
    if a.also_sum:
        samplers["float64, two summed"] = float64_summed_normals
    ds = fake_fmnist()
    parts = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N)]
    kw = dict(steps=1, lr=0.1, dpsgd=DPSGD(RATE, 1.0, RATE * PER_CLIENT, sigma=1.0))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in (["lr", "lenet"] if a.model == "both" else [a.model]):
        eng = assemble(Setup(ds, parts, build_model(name, (1, 28, 28))), replicas=4).engine
        eng._new_normals = eng._normals
        params = eng.broadcast(eng.init_global())
        steps = 40 if name == "lr" else 4
        step_ms, noise_ms = {k: [] for k in samplers}, {k: [] for k in samplers}
        step_cpu, noise_cpu = {k: [] for k in samplers}, {k: [] for k in samplers}
        for _ in range(a.repeats):
            for label, f in samplers.items():
                eng._normals = eng._new_normals if f is None else f.__get__(eng)
                p, _ = eng.local_steps(params, **kw)                       # warm-up
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(steps):
                    p, _ = eng.local_steps(p, **kw)
                step_ms[label].append((time.perf_counter() - t0) / steps * 1e3)
                step_cpu[label].append((time.process_time() - c0) / steps * 1e3)
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(steps):
                    eng.noise_like(params)
                noise_ms[label].append((time.perf_counter() - t0) / steps * 1e3)
                noise_cpu[label].append((time.process_time() - c0) / steps * 1e3)
        print(f"{name}: {eng.net.n_params:,} weights x {eng.M} client models a step; medians of {a.repeats}: "
              "wall ms (CPU ms)")
        med = statistics.median
        b_s, b_z = med(step_cpu["float32 (0.2)"]), med(noise_cpu["float32 (0.2)"])
        for label in samplers:
            s, z, sc, zc = med(step_ms[label]), med(noise_ms[label]), med(step_cpu[label]), med(noise_cpu[label])
            print(f"  {label:<22} step {s:8.2f} ({sc:8.2f}, {sc / b_s:.2f}x)   "
                  f"noise draw {z:7.2f} ({zc:7.2f}, {zc / b_z:.2f}x)")


if __name__ == "__main__":
    main()
