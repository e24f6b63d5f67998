"""Cross-device without sampling: banded matrix factorization against
DP-FedAvg at N = 10⁴ clients, at most 100 a round (docs/results.md §6).

    python analysis/cross_device.py [--epsilons 1 2 8] [--seeds 3] [--max-rounds 1000]
                                    [--oracle-bands 100 200 500 1000] [--oracle-rounds 100 200 500 1000]

FashionMNIST's 90 % private split over 10,000 IID clients (five or six
images each), LR, C = 0.3, η = 0.1, one local epoch of batch-64 SGD, δ =
1e-5, at most ``--max-rounds`` rounds, κ of the shipped LR pre-trial,
``--seeds`` replicas each.  At each budget it trains:

* ``bandmf design``: ``design(mechanism="bandmf", q_max=0.01)`` — groups in
  turn, every client of the group, no sampling (b >= 100 for a cohort of 100
  at most);
* ``bandmf-amplified design``: the same with Poisson sampling within the
  group;
* ``DP-FedAvg design``: ``design(q_max=0.01)``, Poisson sampling of every
  client (client-aggregate);
* ``DP-FedAvg, fixed cohort``: 100 clients a round drawn without
  replacement, no amplification claimed (``flower-accounted``: a Gaussian of
  z/2 a round, as an added client can displace a drawn one) — what a fleet
  that cannot sample independently can honestly claim with Flower today,
  designed for its charge;
* ``cohort 100``: q = 0.01 (Poisson), T̃ rounds, σ calibrated (the
  frameworks' recipe);
* ``bandmf oracle``: bandmf at every b of ``--oracle-bands`` and T of
  ``--oracle-rounds`` with z calibrated to the budget, the best test
  accuracy (its own tuning cost ignored).

Each training is a JSON row under ``--out`` (default
analysis/out/cross_device/), so the script resumes; it writes
``cross_device.md`` (the table) and ``cross_device.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

import paretofl
from paretofl import mechanisms as M
from paretofl.fl.algorithms import train
from paretofl.fl.build import assemble, prepare
from paretofl.theory import bandmf as mf
from paretofl.theory.privacy import calibrate_noise

ROOT = Path(__file__).resolve().parent.parent
N, DELTA, CLIP, LR, Q_MAX = 10_000, 1e-5, 0.3, 0.1, 0.01
SIGMA_RANGE = dict(sigma_min=0.01, sigma_max=30.0)


def _plans(eps, t_cap, oracle_bands, oracle_rounds):
    """policy -> (mechanism, bands, q, sigma, rounds) at budget ``eps``."""
    out = {}
    for name, mech in (("bandmf design", "bandmf"), ("bandmf-amplified design", "bandmf-amplified"),
                       ("DP-FedAvg design", "client-aggregate")):
        d = paretofl.design(N, eps, DELTA, max_rounds=t_cap, q_max=Q_MAX, mechanism=mech, **SIGMA_RANGE)
        out[name] = (d.mechanism, d.details.get("bands", 1), d.q, d.sigma, d.rounds)
    d = paretofl.design(N, eps, DELTA, max_rounds=t_cap, q=Q_MAX, framework="flower-accounted", **SIGMA_RANGE)
    out["DP-FedAvg, fixed cohort"] = (d.mechanism, 1, d.q, d.sigma, d.rounds)
    z = calibrate_noise(eps, Q_MAX, t_cap, DELTA)
    out["cohort 100"] = ("client-aggregate", 1, Q_MAX, z / math.sqrt(Q_MAX * N), t_cap)
    for b in oracle_bands:
        for T in oracle_rounds:
            z = calibrate_noise(eps, 1.0, mf.participations(T, b), DELTA, sampling="none")
            out[f"oracle b={b} T={T}"] = ("bandmf", b, 1 / b, z / math.sqrt(N / b), T)
    return out


def _train(setup, plan, seeds, eps):
    mech, b, q, sigma, T = plan
    opts = {"bands": b} if M.get(mech).noise_on == "correlated-sum" else {}
    pol = assemble(setup, "dpfedavg", seeds, mechanism=mech, sigma=sigma, clip=CLIP, lr=LR, client_rate=q,
                   local_epochs=1, batch_size=64, **opts).policy
    t0 = time.perf_counter()
    _, _, fin = train(pol, rounds=T, epsilon=eps * (1 + 1e-9), delta=DELTA, evaluate=T)
    return dict(mechanism=mech, bands=b, q=q, sigma=sigma, rounds_planned=T, rounds=int(np.max(fin["rounds"])),
                epsilon=float(np.max(fin["epsilon"])), accuracy=fin["accuracy"].tolist(),
                test_loss=fin["test_loss"].tolist(), seconds=time.perf_counter() - t0,
                error_ratio=mf.error_ratio(b, T) if mech.startswith("bandmf") else 1.0)


def table(rows):
    lines = ["| ε | policy | mechanism | b | clients a round | T | σ | z | ε spent | test accuracy | regret to the "
             "bandmf oracle (points) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for eps in sorted({r["budget"] for r in rows}):
        at = [r for r in rows if r["budget"] == eps]
        oracle = max((r for r in at if r["policy"].startswith("oracle")), key=lambda r: np.mean(r["accuracy"]),
                     default=None)
        shown = [r for r in at if not r["policy"].startswith("oracle")] + ([oracle] if oracle else [])
        for r in shown:
            acc = 100 * np.array(r["accuracy"])
            regret = 100 * np.mean(oracle["accuracy"]) - acc.mean() if oracle else float("nan")
            name = "bandmf oracle" if r["policy"].startswith("oracle") else r["policy"]
            m = r["q"] * N
            lines.append(f"| {eps:g} | {name} | {r['mechanism']} | {r['bands']} | {m:.4g} | {r['rounds']} | "
                         f"{r['sigma']:.3g} | {r['sigma'] * math.sqrt(m):.3g} | {r['epsilon']:.3f} | "
                         f"{acc.mean():.1f} ± {acc.std():.1f} % | {regret:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=1000)
    ap.add_argument("--oracle-bands", type=int, nargs="*", default=[100, 200, 500, 1000])
    ap.add_argument("--oracle-rounds", type=int, nargs="*", default=[100, 200, 500, 1000])
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "cross_device"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    setup = prepare("fashion-mnist", "lr", N, partition="iid", seed=0, public_fraction=0.1, subset="rest")
    rows = []
    for eps in a.epsilons:
        for policy, plan in _plans(eps, a.max_rounds, a.oracle_bands, a.oracle_rounds).items():
            f = out / f"eps{eps:g}_{policy.replace(' ', '_').replace(',', '').replace('=', '')}.json"
            if f.exists():
                row = json.loads(f.read_text())
            else:
                row = dict(budget=eps, policy=policy, **_train(setup, plan, a.seeds, eps))
                f.write_text(json.dumps(row))
            rows.append(row)
            print(f"eps {eps:g} {policy}: b={row['bands']} T={row['rounds']} sigma={row['sigma']:.3g} "
                  f"acc {100 * np.mean(row['accuracy']):.1f} ({row['seconds']:.0f} s)", flush=True)
    (out / "cross_device.json").write_text(json.dumps(rows, indent=1))
    (out / "cross_device.md").write_text(table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
