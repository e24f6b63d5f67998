"""A user's nn.Module through the engine (torch.func) against the
hand-written kernels, a plain PyTorch loop over the clients, and a Flower
simulation round — client-steps per second, timed side by side.

The work: N = 10 clients × R replicas, FashionMNIST-shaped data (600 samples
a client), one local step a client a round on a batch of 64:

* "local SGD" — the client-level step (pre-trials, client-level DP-FedAvg):
  the batch's mean gradient, no per-sample work;
* "DP-SGD" — the sample-level step (DP-SGD clients, ALI-DPFL): Poisson
  batches (rate 64/600), per-sample gradients clipped to C = 1, noise.

Runners: the engine with the built-in model's hand-written kernels (LR,
LeNet-5 only); the engine with the same model as an nn.Sequential through
``torch.func`` (``--strategies``: a loop over the clients, or all clients
batched under ``vmap``); plain PyTorch, a loop over the clients' modules
with torch.optim.SGD (autograd, no DP; PyTorch's own threading); for the
DP-SGD step, a loop over clients each with Opacus's GradSampleModule-based
DP-SGD is left to benchmarks/engine_vs_opacus.py.  ``--flower``: a Flower
simulation (Ray) of the same clients and model doing the local-SGD step,
its rate taken between the first and the last round's server evaluation
(Ray's start-up excluded).

    .venv/bin/python benchmarks/generic_model.py [--models lr lenet mlp] [--flower] [--device cuda]
                                                 [--clients N] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_vs_opacus import _sync, timed_steps  # noqa: E402

from paretofl.fl.build import Setup, assemble  # noqa: E402
from paretofl.fl.data import Dataset  # noqa: E402
from paretofl.fl.engine import DPSGD  # noqa: E402
from paretofl.fl.models import build_model  # noqa: E402
from paretofl.fl.modules import ModuleModel  # noqa: E402

N, PER_CLIENT, BATCH = 10, 600, 64


def fake_fmnist(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N * PER_CLIENT, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (N * PER_CLIENT,), generator=g)
    return Dataset("bench", x, y, x[:100], y[:100])


def module(name):
    """The models as a user writes them."""
    if name == "lr":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5),
                         nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                         nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def engine_runner(model, ds, replicas, device, dp):
    parts = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N)]
    eng = assemble(Setup(ds, parts, model), replicas=replicas, device=device).engine
    if dp:
        kw = dict(steps=1, lr=0.1, dpsgd=DPSGD(BATCH / PER_CLIENT, 1.0, BATCH, sigma=1.0))
    else:
        kw = dict(steps=1, lr=0.1, batch_size=BATCH)
    return timed_steps(eng, kw, device)


def torch_loop_runner(name, ds, replicas, device):
    """What a user writes: for each client, a module, torch.optim.SGD, a
    batch, forward, backward, step — one client after the other."""
    g = torch.Generator().manual_seed(1)
    models = [module(name).to(device) for _ in range(N * replicas)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    x, y = ds.x_train.to(device), ds.y_train.to(device)
    loss_fn = nn.CrossEntropyLoss()

    def run(rounds):
        _sync(device)
        t = time.perf_counter()
        for _ in range(rounds):
            for m, (mod, opt) in enumerate(zip(models, opts)):
                idx = (m % N) * PER_CLIENT + torch.randperm(PER_CLIENT, generator=g)[:BATCH].to(device)
                opt.zero_grad()
                loss_fn(mod(x[idx]), y[idx]).backward()
                opt.step()
        _sync(device)
        return len(models) * rounds / (time.perf_counter() - t)

    run(1)
    return run


def flower_rate(name, ds, rounds=4):
    """Client-steps per second of a Flower simulation (one local step of
    batch 64 a client a round, all N clients a round), between the first
    and the last server evaluation."""
    import logging
    import os

    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.ERROR)
    stamps = []
    x, y = ds.x_train, ds.y_train

    class Client(NumPyClient):
        def __init__(self, cid):
            self.cid = cid

        def fit(self, parameters, config):
            torch.set_num_threads(1)
            m = module(name)
            with torch.no_grad():
                for p, v in zip(m.parameters(), parameters):
                    p.copy_(torch.as_tensor(v))
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            idx = self.cid * PER_CLIENT + torch.randperm(PER_CLIENT)[:BATCH]
            opt.zero_grad()
            nn.functional.cross_entropy(m(x[idx]), y[idx]).backward()
            opt.step()
            return [p.detach().numpy() for p in m.parameters()], BATCH, {}

    def client_fn(context: Context):
        return Client(int(context.node_config["partition-id"])).to_client()

    def evaluate(rnd, params, config):
        stamps.append(time.perf_counter())
        return 0.0, {}

    init = [p.detach().numpy() for p in module(name).parameters()]

    def server_fn(context):
        s = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=N, min_available_clients=N,
                   evaluate_fn=evaluate, initial_parameters=ndarrays_to_parameters(init))
        return ServerAppComponents(strategy=s, config=ServerConfig(num_rounds=rounds))

    saved = os.environ.get("PYTHONPATH")
    try:
        run_simulation(ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn), num_supernodes=N,
                       backend_config={"client_resources": {"num_cpus": 1},
                                       "init_args": {"include_dashboard": False, "log_to_driver": False}})
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    # stamps: before round 1, after rounds 1..R; the first round warms the actors up
    return N * (rounds - 1) / (stamps[-1] - stamps[1])


def main():
    global N
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["lr", "lenet", "mlp"], choices=("lr", "lenet", "mlp"))
    ap.add_argument("--strategies", nargs="+", default=["loop", "vmap"], choices=("loop", "vmap"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--clients", type=int, default=N, help="clients N (the plain loop steps N x replicas modules)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per timing block")
    ap.add_argument("--repeats", type=int, default=3, help="blocks per runner, alternated")
    ap.add_argument("--flower", action="store_true", help="also time a Flower simulation round (Ray)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    N = a.clients
    warnings.filterwarnings("ignore")
    ds = fake_fmnist()
    out = {}
    for name in a.models:
        for dp in (False, True):
            step = "dp-sgd" if dp else "local-sgd"
            runners = {}
            if name in ("lr", "lenet"):
                runners["hand-written"] = engine_runner(build_model(name, (1, 28, 28)), ds, a.replicas, a.device, dp)
            for s in a.strategies:
                mm = ModuleModel(module(name), (1, 28, 28), 10, strategy=s)
                runners[f"torch.func {s}"] = engine_runner(mm, ds, a.replicas, a.device, dp)
            if not dp:
                runners["plain PyTorch loop"] = torch_loop_runner(name, ds, a.replicas, a.device)
            rates = {k: [] for k in runners}
            for _ in range(a.repeats):          # alternated: a slow spell of a shared machine hits all
                for k, run in runners.items():
                    rates[k].append(run(a.rounds))
            out[f"{name} {step}"] = {k: statistics.median(v) for k, v in rates.items()}
        if a.flower:
            out[f"{name} local-sgd"]["Flower simulation"] = flower_rate(name, ds)
    if a.json:
        print(json.dumps(out))
        return
    print(f"client-steps per second (median of {a.repeats} alternated blocks), N = {N}, {a.replicas} replicas, "
          f"batch {BATCH}, device {a.device}, {torch.get_num_threads()} threads:")
    for key, rates in out.items():
        base = rates.get("plain PyTorch loop", math.nan)
        parts = [f"{k} {v:,.0f}" + (f" ({v / base:.2f}x loop)" if math.isfinite(base) and k != "plain PyTorch loop"
                                     else "") for k, v in rates.items()]
        print(f"  {key:<16} " + "; ".join(parts))


if __name__ == "__main__":
    main()
