"""A check of the engine's ALI-DPFL figures that shares none of its training
code: plain PyTorch (``nn.Sequential`` and ``torch.func``) trains ALI-DPFL's
Table V CNN on FashionMNIST by per-sample-clipped SGD, centrally.

Each step draws a Poisson batch (rate q = 0.015) from all 60,000 training
samples, clips each sample's gradient to norm C, adds N(0, σ²C²) to the sum
(σ = 0 by default: clipping only) and divides by q·60,000 — in distribution
the same as one-local-step FedAvg+DP on an IID split of 10 equal clients, each
dividing by q·6,000 (the weighted mean of ten such steps).  η = 0.5 and 158
steps, as the README's ALI-DPFL rows.  Prints the test accuracy and the
median per-sample gradient norm along the way (how hard C clips).

    .venv/bin/python analysis/central_clipped_sgd.py [--clip 1] [--sigma 0] [--steps 158] [--seeds 0 1]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

from paretofl.fl.data import load_dataset


def table_v_cnn() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(1, 16, 8, 2, padding=2), nn.ReLU(), nn.MaxPool2d(2, 1),
                         nn.Conv2d(16, 32, 4, 2), nn.ReLU(), nn.MaxPool2d(2, 1), nn.Flatten(),
                         nn.Linear(32 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 10))


def run(ds, clip: float, sigma: float, steps: int, seed: int, q: float = 0.015, lr: float = 0.5):
    torch.manual_seed(seed)
    net = table_v_cnn()
    params = {k: v.detach() for k, v in net.named_parameters()}

    def loss(p, xi, yi):
        return nn.functional.cross_entropy(functional_call(net, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    n = len(ds.y_train)
    medians = []
    for _ in range(steps):
        idx = torch.nonzero(torch.rand(n) < q).squeeze(1)
        g = per_sample(params, ds.x_train[idx], ds.y_train[idx])
        norm = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
        medians.append(norm.median().item())
        factor = (clip / norm).clamp(max=1.0)
        for k in params:
            noised = torch.einsum("b,b...->...", factor, g[k]) + sigma * clip * torch.randn_like(params[k])
            params[k] = params[k] - lr * noised / (q * n)
    with torch.no_grad():
        acc = (functional_call(net, params, (ds.x_test,)).argmax(1) == ds.y_test).double().mean().item()
    return acc, medians


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--sigma", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=158)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a = ap.parse_args()
    torch.set_num_threads(2)
    ds = load_dataset("fashion-mnist")
    for seed in a.seeds:
        acc, med = run(ds, a.clip, a.sigma, a.steps, seed)
        print(f"C = {a.clip:g}, sigma = {a.sigma:g}, {a.steps} steps, seed {seed}: test accuracy "
              f"{100 * acc:.1f} %; median per-sample gradient norm at steps 1, {a.steps // 2}, {a.steps}: "
              f"{med[0]:.2f}, {med[len(med) // 2]:.2f}, {med[-1]:.2f}", flush=True)


if __name__ == "__main__":
    main()
