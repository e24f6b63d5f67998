"""Where the engine's time goes, for the next person who speeds it up.

Three measurements on the benchmark's work (N = 10, 4 replicas, batch ≈ 90,
FashionMNIST-shaped data):

1. an LR DP-SGD step of all 40 client-steps, split into Poisson sampling,
   the batch gather, the per-sample-clipped gradients and the noise draw;
2. a LeNet model-step (one model, 90 samples) on one core — how the engine
   runs convolutional nets, one model per thread — split by function;
3. the time MKL needs for every matmul of a LeNet step of 40 models in its
   best storage orientation (each shape timed alone, hot cache): a floor for
   any im2col-based engine, beside the step time the 25 % target allows.

    .venv/bin/python benchmarks/engine_profile.py
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from engine_vs_opacus import PER_CLIENT, RATE, N, fake_fmnist, lenet_flops_per_client_step, matmul_rate  # noqa: E402

import paretofl.fl.models as models  # noqa: E402
from paretofl.fl.build import Setup, assemble  # noqa: E402
from paretofl.fl.engine import DPSGD  # noqa: E402


class Timers:
    """Wraps named functions of objects, accumulates their wall time, and
    puts the originals back on restore()."""

    def __init__(self):
        self.t, self._orig = {}, []

    def wrap(self, obj, name):
        f = getattr(obj, name)
        self._orig.append((obj, name, f))

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - t0

        setattr(obj, name, timed)

    def restore(self):
        for obj, name, f in reversed(self._orig):
            setattr(obj, name, f)

    def report(self, total, reps, labels):
        for k, lab in labels.items():
            print(f"  {lab:<28} {self.t.get(k, 0) / reps * 1e3:6.2f} ms")
        print(f"  {'the rest (small ops, Python)':<28} {(total - sum(self.t.values()) / reps) * 1e3:6.2f} ms")


def lr_step(reps=100):
    ds = fake_fmnist()
    parts = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N)]
    eng = assemble(Setup(ds, parts, models.build_model("lr", (1, 28, 28))), replicas=4).engine
    params = eng.broadcast(eng.init_global())
    kw = dict(steps=1, lr=0.1, dpsgd=DPSGD(RATE, 1.0, RATE * PER_CLIENT, sigma=1.0))
    eng.local_steps(params, **kw)
    tm = Timers()
    for obj, name in ((eng, "poisson_batches"), (eng, "noise_like"), (eng.net, "clipped_grads"),
                      (torch, "index_select")):
        tm.wrap(obj, name)
    try:
        t0 = time.perf_counter()
        for _ in range(reps):
            eng.local_steps(params, **kw)
        total = (time.perf_counter() - t0) / reps
    finally:
        tm.restore()
    print(f"LR step, 40 client-steps: {total * 1e3:.2f} ms")
    tm.report(total, reps, {"poisson_batches": "Poisson sampling", "index_select": "batch gather",
                            "clipped_grads": "clipped gradients", "noise_like": "noise draw"})


def lenet_model_step(reps=40):
    net = models.build_model("lenet", (1, 28, 28))
    params = net.init(1, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 90, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (1, 90), generator=g)
    w = torch.ones(1, 90)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tm = Timers()
    try:
        for _ in range(3):
            net.clipped_grads(params, x, y, w, clip=1.0)
        for obj, name in [(models, n) for n in ("_conv", "_conv_input_grad", "_unfold", "_maxpool_arg",
                                                "_maxpool_back", "_thin_mm")] + [(torch, "matmul"),
                                                                                 (torch, "einsum")]:
            tm.wrap(obj, name)
        t0 = time.perf_counter()
        for _ in range(reps):
            net.clipped_grads(params, x, y, w, clip=1.0)
        total = (time.perf_counter() - t0) / reps
    finally:
        tm.restore()
        torch.set_num_threads(threads)
    print(f"LeNet model-step (90 samples, one core): {total * 1e3:.2f} ms")
    tm.report(total, reps, {"matmul": "per-sample grad matmuls", "_conv": "forward convolutions",
                            "_maxpool_arg": "pooling forward", "_maxpool_back": "pooling backward",
                            "_unfold": "im2col", "_conv_input_grad": "input-grad convolution",
                            "_thin_mm": "dense layers' matmuls", "einsum": "clipped sums (einsum)"})


def _best_mm_seconds(m, k, n, batch=1, tries=5):
    """Best time of C (m×n) = A (m×k) B (k×n) over the 8 storage orientations."""
    best = float("inf")
    for ta, tb, tc in itertools.product((0, 1), repeat=3):
        A = torch.randn(batch, k, m).transpose(1, 2) if ta else torch.randn(batch, m, k)
        B = torch.randn(batch, n, k).transpose(1, 2) if tb else torch.randn(batch, k, n)
        if batch == 1:
            A, B = A[0], B[0]
            f = (lambda: torch.mm(B.t(), A.t())) if tc else (lambda: torch.mm(A, B))
        else:
            f = (lambda: torch.bmm(B.transpose(1, 2), A.transpose(1, 2))) if tc else (lambda: torch.bmm(A, B))
        f()
        for _ in range(tries):
            t0 = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t0)
    return best


def lenet_matmul_floor(models_=40, B=90):
    shapes = [  # (label, m, k, n, batch)
        ("conv1 forward", B * 784, 25, 6, 1), ("conv2 forward", B * 100, 150, 16, 1),
        ("conv1 per-sample grads", 6, 784, 25, B), ("conv2 per-sample grads", 16, 100, 150, B),
        ("conv2 input grad", B * 100, 16, 150, 1),
        ("dense forward", B, 400, 120, 1), ("", B, 120, 84, 1), ("", B, 84, 10, 1),
        ("dense input grads", B, 120, 400, 1), ("", B, 84, 120, 1), ("", B, 10, 84, 1),
        ("dense weight grads", 400, B, 120, 1), ("", 120, B, 84, 1), ("", 84, B, 10, 1),
    ]
    total = sum(_best_mm_seconds(m, k, n, b) for _, m, k, n, b in shapes) * models_
    peak = matmul_rate("cpu")
    flops = lenet_flops_per_client_step(B) * models_
    print(f"LeNet step of {models_} models, every matmul in its best orientation: {total * 1e3:.0f} ms "
          f"(the 25 % target allows {flops / (0.25 * peak) * 1e3:.0f} ms for the whole step at "
          f"{peak / 1e9:.0f} GFLOP/s)")


def main():
    lr_step()
    lenet_model_step()
    lenet_matmul_floor()


if __name__ == "__main__":
    main()
