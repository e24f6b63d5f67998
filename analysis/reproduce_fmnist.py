"""Reproduce the FashionMNIST accuracy settings of ALI-DPFL and 003 (10 clients).

* ALI-DPFL (Ling et al.): Dir(0.05) label skew, DP-SGD batch rate q = 0.015,
  η = 0.5, ε = 2, R_s = ½R_c, the Table V CNN; ALI-DPFL against fixed τ
  ("FedAvg + DP", Algorithm 1).  Its Table II–IV FMNIST column: about 80–84 %.
* Adap DP-FL (Fu et al.): label shards (400, 40 per client), lot 78, ε = 2;
  it reports 79.6 %.

Paper 002 does not state σ, but its list of privacy budgets and the
iterations they allow (ε = 1.55 … 5.25 ↔ 79 … 2990 at q = 0.015) is
reproduced to within 3 % by σ = 1.1, δ = 1e-5 and the classic RDP
conversion over integer orders (tests/test_privacy.py checks this): its
"ε = 2, R_s = ½R_c" column is 317 DP-SGD steps at σ = 1.1 and 158 server
rounds.  We run exactly that; our accountant (the improved conversion)
reports those 317 steps as ε ≈ 1.61.  C is not stated: C = 1.0, the
constant clipping bound Adap DP-FL uses.  Each setting runs with --seeds
replicas side by side in one engine.  Writes
analysis/out/fmnist_reproduction.{csv,md}.

    .venv/bin/python analysis/reproduce_fmnist.py [--seeds 2] [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from paretofl.fl.algorithms import train
from paretofl.fl.build import Budget, Setup, assemble
from paretofl.fl.data import load_dataset, make_partition
from paretofl.fl.models import build_model
from paretofl.theory.privacy import compute_epsilon, max_steps_searched

OUT = Path(__file__).resolve().parent / "out"


def run(name, algo, partition, seeds, rounds, local_test=False, device="cpu", **kw):
    """One setting, ``seeds`` replicas in one engine.  ``local_test``: hold
    out a quarter of each client's samples and also report ALI-DPFL's
    code's metric — the unweighted mean over clients of the global model's
    accuracy on each client's held-out quarter (label-skewed like its
    training data) — beside the accuracy on FashionMNIST's test set."""
    ds = load_dataset("fashion-mnist")
    dir_beta = kw.pop("dir_beta", 0.05)   # Dirichlet concentration (``beta`` is Adap DP-FL's decay)
    model = kw.pop("model", "cnn")
    parts = make_partition(partition, ds.y_train.numpy(), 10, seed=0, beta=dir_beta)
    held = None
    if local_test:
        rng = np.random.default_rng(0)
        split = [rng.permutation(p) for p in parts]
        parts = [np.sort(p[: int(0.75 * len(p))]) for p in split]
        held = [np.sort(p[int(0.75 * len(p)):]) for p in split]
    eps = kw.pop("budget")
    budget = Budget(epsilon=kw.pop("epsilon", None))       # ALI-DPFL calibrates its iterations R_c to it
    pol = assemble(Setup(ds, parts, build_model(model, ds.shape)), algo, seeds, device=device, budget=budget,
                   **kw).policy
    eng = pol.engine

    def held_accuracy(glob):
        """Per replica: unweighted mean over clients of the accuracy on their held-out quarter."""
        with torch.no_grad():
            per_client = []
            for h in held:
                x = eng.x[h].unsqueeze(0).expand(eng.R, *eng.x[h].shape)
                pred = eng.net.forward(glob, x).argmax(-1)
                per_client.append((pred == eng.y[h]).double().mean(1).cpu().numpy())
        return np.mean(per_client, axis=0)

    held_best = np.full(len(seeds), -np.inf)
    if held is not None:   # the code's metric after every round, for its best over rounds
        after = pol.after_round

        def after_round(t, glob, val_loss):
            after(t, glob, val_loss)
            np.maximum(held_best, held_accuracy(glob), out=held_best)

        pol.after_round = after_round
    t = time.perf_counter()
    # every round is evaluated where there are at most 1,000, so that the best
    # accuracy over rounds (what ALI-DPFL's published code prints and averages
    # as "best") can be set beside the final one; longer runs every 1,000th
    every = 1 if rounds <= 1000 else max(1, min(rounds, 10**4) // 10)
    glob, hist, fin = train(pol, rounds=rounds, epsilon=eps, delta=1e-5, evaluate=every, progress=False)
    best = np.full(len(seeds), -np.inf)
    for h in hist.rows:
        best[h["replica"]] = max(best[h["replica"]], h["accuracy"])
    row = {"setting": name, "accuracy_mean": float(np.mean(fin["accuracy"])),
           "accuracy_sd": float(np.std(fin["accuracy"])),
           "best_accuracy_mean": float(np.mean(best)) if every == 1 else float("nan"),
           "best_accuracy_sd": float(np.std(best)) if every == 1 else float("nan"),
           "epsilon": float(np.max(fin["epsilon"])),
           "rounds": int(np.max(fin["rounds"])), "seconds": time.perf_counter() - t,
           "local_accuracy_mean": float("nan"), "local_accuracy_sd": float("nan"),
           "local_best_mean": float("nan"), "local_best_sd": float("nan")}
    if held is not None:
        local = held_accuracy(glob)
        row["local_accuracy_mean"], row["local_accuracy_sd"] = float(np.mean(local)), float(np.std(local))
        row["local_best_mean"], row["local_best_sd"] = float(np.mean(held_best)), float(np.std(held_best))
    print(name, fin["accuracy"], best, fin["epsilon"], fin["rounds"], row["local_accuracy_mean"], flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a tenth of the rounds (smoke test)")
    ap.add_argument("--only", help="run only the settings whose name contains this text")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--out", default=str(OUT), help="folder for the CSV and the markdown table")
    a = ap.parse_args()
    torch.set_num_threads(2)
    seeds = list(range(a.seeds))
    sigma, C, q = 1.0, 1.0, 0.015
    f = 10 if a.quick else 1
    # ALI-DPFL: σ = 1.1, R_c = 317 and R_s = 158, as its text lists them (its
    # ε = 2 under the classic conversion); we stop at our accountant's ε of 317 steps
    sigma_002, R_c, R_s = 1.1, 317, 158
    eps_002 = compute_epsilon(q, sigma_002, R_c, 1e-5) * (1 + 1e-9)
    assert max_steps_searched(eps_002, q, sigma_002, 1e-5) == R_c
    common = dict(sigma=sigma_002, clip=C, lr=0.5, batch_rate=q, budget=eps_002)
    shards = dict(clip=C, lr=0.5, batch_rate=78 / 6000, budget=2.0)
    jobs = [
        ("002: ALI-DPFL, Dir(0.05)", "ali-dpfl", "dirichlet", R_s // f,
         dict(epsilon=eps_002, rounds_server=R_s // f, **common)),
        *[(f"002: FedAvg+DP tau={tau}, Dir(0.05)", "dpfedavg", "dirichlet", min(R_s, R_c // tau) // f,
           dict(local_steps=tau, **common)) for tau in (1, 2, 3, 5)],
        # as ALI-DPFL's code: capped Dirichlet, 25 % of each client held out,
        # accuracy averaged over clients' held-out quarters
        ("002 (code's split and metric): ALI-DPFL, capped Dir(0.05)", "ali-dpfl", "dirichlet-capped", R_s // f,
         dict(epsilon=eps_002, rounds_server=R_s // f, local_test=True, **common)),
        *[(f"002 (code's split and metric): FedAvg+DP tau={tau}, capped Dir(0.05)", "dpfedavg", "dirichlet-capped",
           min(R_s, R_c // tau) // f, dict(local_steps=tau, local_test=True, **common)) for tau in (1, 3)],
        # C is not in ALI-DPFL's text; its code's default is C = 0.1 (ours: 1.0),
        # and its code divides the noised sum by a fixed 64, not by q|D_i|
        ("002 (code's C = 0.1): ALI-DPFL, Dir(0.05)", "ali-dpfl", "dirichlet", R_s // f,
         dict(common, clip=0.1, epsilon=eps_002, rounds_server=R_s // f)),
        ("002 (code's C = 0.1, divisor 64): ALI-DPFL, Dir(0.05)", "ali-dpfl", "dirichlet", R_s // f,
         dict(common, clip=0.1, batch_divisor=64.0, epsilon=eps_002, rounds_server=R_s // f)),
        ("002 (code's C = 0.1, divisor 64): FedAvg+DP tau=1, Dir(0.05)", "dpfedavg", "dirichlet", R_s // f,
         dict(common, clip=0.1, batch_divisor=64.0, local_steps=1)),
        ("002 (code's C = 0.1, divisor 64, split and metric): ALI-DPFL, capped Dir(0.05)", "ali-dpfl",
         "dirichlet-capped", R_s // f, dict(common, clip=0.1, batch_divisor=64.0, epsilon=eps_002,
                                            rounds_server=R_s // f, local_test=True)),
        # its code trains the FL library's CNN (models.py: fedavg-cnn), not Table V
        ("002 (code's model): ALI-DPFL, Dir(0.05)", "ali-dpfl", "dirichlet", R_s // f,
         dict(common, model="fedavg-cnn", epsilon=eps_002, rounds_server=R_s // f)),
        ("002 (code's model, C = 0.1, divisor 64, split and metric): ALI-DPFL, capped Dir(0.05)", "ali-dpfl",
         "dirichlet-capped", R_s // f, dict(common, model="fedavg-cnn", clip=0.1, batch_divisor=64.0,
                                            epsilon=eps_002, rounds_server=R_s // f, local_test=True)),
        # diagnostics, not the paper's setting: the same schedule without
        # noise (σ = 0, clipping kept at C = 1) — how far 158 rounds of this
        # model on this split get when DP adds nothing but clipping.  (Without
        # clipping, η = 0.5 diverged here for τ = 1: 10 % accuracy, NaN loss.)
        *[(f"002 clipping only (sigma=0, C=1): FedAvg+DP tau={tau}, {part}", "dpfedavg", part,
           min(R_s, R_c // tau) // f, dict(common, sigma=0.0, local_steps=tau, budget=None))
          for tau, part in ((1, "dirichlet"), (2, "dirichlet"), (2, "iid"))],
        # C is not in ALI-DPFL's text, and with C = 1 nearly every per-sample
        # gradient is clipped (median norm 3.2 at the start, 7-28 later): how the
        # figure moves with the unstated C (sensitivity, not a reading of the paper)
        *[(f"002 (C = {c:g}{suffix}, sensitivity): {lab}, {split}", algo, part, R_s // f,
           dict(common, clip=c, **extra, **more))
          for suffix, split, part, more in (
              ("", "Dir(0.05)", "dirichlet", {}),
              (", code's split and metric", "capped Dir(0.05)", "dirichlet-capped", dict(local_test=True)))
          for c in (3.0, 5.0)
          for lab, algo, extra in (("ALI-DPFL", "ali-dpfl", dict(epsilon=eps_002, rounds_server=R_s // f)),
                                   ("FedAvg+DP tau=2", "dpfedavg", dict(local_steps=2)))],
        ("002 clipping only (sigma=0, C=5): FedAvg+DP tau=2, dirichlet", "dpfedavg", "dirichlet", R_s // f,
         dict(common, sigma=0.0, clip=5.0, local_steps=2, budget=None)),
        # σ decaying without a floor falls below ~0.8, where the subsampled
        # Gaussian's RDP explodes and the budget is gone in a few rounds:
        ("003: Adap DP-FL sigma0=1, beta=0.9, no floor", "adap-dpfl", "shards", 10**6 // f,
         dict(sigma=sigma, alpha=1.0, noise_decay=0.9, **shards)),
        ("003: Adap DP-FL sigma0=1.5, beta=0.95, floor 1.0", "adap-dpfl", "shards", 10**6 // f,
         dict(sigma=1.5, alpha=1.0, noise_decay=0.95, sigma_min=1.0, **shards)),
        ("003: DP-FedAvg (fixed sigma=1), shards, lot 78", "dpfedavg", "shards", 10**6 // f,
         dict(sigma=sigma, **shards)),
        # its Section V's FashionMNIST settings: Adam (lr 0.001) clients, α = 0.01,
        # σ₀ = 4 decaying by β = 0.9998, C = 1 to start; thousands of rounds
        ("003 (paper's settings): Adap DP-FL, Adam, alpha=0.01, sigma0=4, beta=0.9998", "adap-dpfl", "shards",
         10**6 // f, dict(shards, lr=0.001, optimizer="adam", sigma=4.0, alpha=0.01, noise_decay=0.9998)),
        ("003 (paper's settings): DP-FedAvg, Adam, fixed sigma=2, C=1", "dpfedavg", "shards", 10**6 // f,
         dict(shards, lr=0.001, optimizer="adam", sigma=2.0)),
    ]
    rows = [run(name, algo, part, seeds, rounds, device=a.device, **kw) for name, algo, part, rounds, kw in jobs
            if a.only is None or a.only in name]
    out = Path(a.out)
    out.mkdir(exist_ok=True)
    import csv

    tag = "" if a.only is None else "_" + "".join(ch if ch.isalnum() else "_" for ch in a.only)
    with open(out / f"fmnist_reproduction{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = ["| setting | test-set accuracy (mean ± sd over seeds) | best over rounds | clients' held-out accuracy "
             "| its best over rounds | ε | rounds | seconds |", "|---|---|---|---|---|---|---|---|---|"]

    def pct(r, key):
        m = r[f"{key}_mean"]
        return "—" if np.isnan(m) else f"{100 * m:.1f} ± {100 * r[f'{key}_sd']:.1f} %"

    for r in rows:
        lines.append(f"| {r['setting']} | {pct(r, 'accuracy')} | {pct(r, 'best_accuracy')} | "
                     f"{pct(r, 'local_accuracy')} | {pct(r, 'local_best')} | {r['epsilon']:.2f} | {r['rounds']} | "
                     f"{r['seconds']:.0f} |")
    (out / f"fmnist_reproduction{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
