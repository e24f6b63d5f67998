"""The engine against the way published DPFL code runs: a loop over clients,
each with its own Opacus PrivacyEngine (DP-SGD, Poisson batches).

Same work both ways: N = 10 clients × R replicas, FashionMNIST-shaped data
(6000 samples per client), sampling rate 90/6000 (batch ≈ 90), one DP-SGD
step per client per round.  Prints client-steps per second for each, their
ratio, and for LeNet the engine's FLOP rate as a fraction of this machine's
measured fp32 matmul rate.  For scale, LeNet is also timed as plain,
non-private PyTorch training (autograd, no per-sample gradients, one model
per thread like the engine): the fraction of the matmul rate that PyTorch's
own kernels reach on these shapes without DP.

    make bench      # or: .venv/bin/python benchmarks/engine_vs_opacus.py [--json] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import numpy as np
import torch
import torch.nn as nn

from paretofl.fl.build import Setup, assemble
from paretofl.fl.data import Dataset
from paretofl.fl.engine import DPSGD
from paretofl.fl.models import build_model

N, PER_CLIENT, RATE = 10, 6000, 90 / 6000


def fake_fmnist(seed=0, shape=(1, 28, 28)):
    """N·PER_CLIENT random samples of ``shape`` (FashionMNIST's by default)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N * PER_CLIENT, *shape, generator=g)
    y = torch.randint(0, 10, (N * PER_CLIENT,), generator=g)
    return Dataset("bench", x, y, x[:100], y[:100])


def torch_model(name):
    """nn.Module twins of paretofl's models, for Opacus."""
    if name == "lr":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5),
                         nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                         nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def engine_runner(name, ds, replicas, device):
    """A callable running `rounds` DP-SGD steps of every client of every
    replica on the engine; returns client-steps per second."""
    parts = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N)]
    eng = assemble(Setup(ds, parts, build_model(name, (1, 28, 28))), replicas=replicas, device=device).engine
    kw = dict(steps=1, lr=0.1, dpsgd=DPSGD(RATE, 1.0, RATE * PER_CLIENT, sigma=1.0))
    return timed_steps(eng, kw, device)


def timed_steps(eng, kw, device):
    """A callable running `rounds` calls of ``eng.local_steps(**kw)`` on
    every model of the engine; returns client-steps per second (after one
    warm-up call)."""
    state = {"params": eng.broadcast(eng.init_global())}

    def run(rounds):
        _sync(device)
        t = time.perf_counter()
        for _ in range(rounds):
            state["params"], _ = eng.local_steps(state["params"], **kw)
        _sync(device)
        return eng.M * rounds / (time.perf_counter() - t)

    run(1)  # warm-up
    return run


def opacus_runner(name, ds, replicas, device):
    """The same work as a loop over clients, each with its own Opacus
    PrivacyEngine (Poisson batches, RDP accountant)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    clients = []
    for r in range(replicas):
        for i in range(N):
            sl = slice(i * PER_CLIENT, (i + 1) * PER_CLIENT)
            model = torch_model(name).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(ds.x_train[sl], ds.y_train[sl]), batch_size=90)
            pe = PrivacyEngine(accountant="rdp")
            model, opt, loader = pe.make_private(module=model, optimizer=opt, data_loader=loader,
                                                 noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)
            clients.append([model, opt, iter(loader), loader])
    loss_fn = nn.CrossEntropyLoss()

    def step(c):
        model, opt, it, loader = c
        try:
            xb, yb = next(it)
        except StopIteration:
            c[2] = it = iter(loader)
            xb, yb = next(it)
        xb, yb = xb.to(device), yb.to(device)
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()

    def run(rounds):
        _sync(device)
        t = time.perf_counter()
        for _ in range(rounds):
            for c in clients:
                step(c)
        _sync(device)
        return len(clients) * rounds / (time.perf_counter() - t)

    run(1)  # warm-up
    return run


def torch_reference_runner(name, ds, replicas, device):
    """Plain non-private training of the same M = N·R models on the same
    batch size (autograd, fixed batches of 90, torch.optim.SGD), the models
    spread over the CPU's threads one at a time as the engine spreads its
    models (on CUDA: one after the other).  Not DP: a reference for what
    PyTorch's kernels reach on these shapes, not a competitor."""
    from concurrent.futures import ThreadPoolExecutor

    g = torch.Generator().manual_seed(1)
    models = [torch_model(name).to(device) for _ in range(N * replicas)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    x, y = ds.x_train.to(device), ds.y_train.to(device)
    starts = torch.randint(0, PER_CLIENT - 90, (len(models),), generator=g)
    loss_fn = nn.CrossEntropyLoss()
    threads = torch.get_num_threads() if device == "cpu" else 1

    def train(ms):
        for m in ms:
            s = (m % N) * PER_CLIENT + int(starts[m])
            opts[m].zero_grad()
            loss_fn(models[m](x[s:s + 90]), y[s:s + 90]).backward()
            opts[m].step()

    def run(rounds):
        _sync(device)
        torch.set_num_threads(1) if threads > 1 else None
        try:
            t = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                for _ in range(rounds):
                    list(pool.map(train, [range(i, len(models), threads) for i in range(threads)]))
            _sync(device)
            return len(models) * rounds / (time.perf_counter() - t)
        finally:
            torch.set_num_threads(threads) if threads > 1 else None

    run(1)  # warm-up
    return run


def _sync(device):
    if device != "cpu":
        torch.cuda.synchronize()


def matmul_rate(device, n=2048, reps=10, tries=3):
    """The best of a few timings of an n×n fp32 matmul, FLOP/s."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = 0.0
    for _ in range(tries):
        _sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        _sync(device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t))
    return best


def lenet_flops_per_client_step(batch=90):
    """6 × forward MACs per sample: forward, input-gradient backward and the
    per-sample weight gradients each cost one forward's multiply-adds."""
    macs = 28 * 28 * 25 * 6 + 10 * 10 * 150 * 16 + 400 * 120 + 120 * 84 + 84 * 10
    return 6 * macs * batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6, help="rounds per timing block")
    ap.add_argument("--repeats", type=int, default=3, help="engine/Opacus blocks, alternated")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    ds = fake_fmnist()
    out = {}
    for name in ("lr", "lenet"):
        eng, opa = engine_runner(name, ds, a.replicas, a.device), opacus_runner(name, ds, a.replicas, a.device)
        e_rates, o_rates = [], []
        for _ in range(a.repeats):  # alternated, so a slow spell of a shared machine hits both
            e_rates.append(eng(a.rounds * (5 if name == "lr" else 1)))
            o_rates.append(opa(max(1, a.rounds // 2)))
        e, o = statistics.median(e_rates), statistics.median(o_rates)
        out[name] = {"engine": e, "opacus": o, "ratio": e / o}
    ref = torch_reference_runner("lenet", ds, a.replicas, a.device)
    ref_rate = statistics.median(ref(a.rounds) for _ in range(a.repeats))
    peak = matmul_rate(a.device)
    out["lenet"]["roofline_fraction"] = out["lenet"]["engine"] * lenet_flops_per_client_step() / peak
    out["lenet"]["torch_nonprivate"] = ref_rate
    out["lenet"]["torch_nonprivate_roofline_fraction"] = ref_rate * lenet_flops_per_client_step() / peak
    if a.json:
        print(json.dumps(out))
        return
    print(f"client-steps per second (median of {a.repeats} alternated blocks), N = {N}, {a.replicas} replicas, "
          f"batch ≈ 90, device {a.device}:")
    for name in ("lr", "lenet"):
        r = out[name]
        print(f"  {name:<6} engine {r['engine']:9.1f}   opacus loop {r['opacus']:8.1f}   ratio {r['ratio']:6.1f}x")
    print(f"LeNet engine: {out['lenet']['engine'] * lenet_flops_per_client_step() / 1e9:.2f} GFLOP/s = "
          f"{100 * out['lenet']['roofline_fraction']:.1f} % of the measured fp32 matmul rate "
          f"({peak / 1e9:.1f} GFLOP/s, best of 3)")
    print(f"for scale, plain non-private PyTorch training of the same LeNets (autograd, batch 90, one model "
          f"per thread): {ref_rate:.1f} client-steps/s = "
          f"{100 * out['lenet']['torch_nonprivate_roofline_fraction']:.1f} % of the matmul rate")


if __name__ == "__main__":
    main()
