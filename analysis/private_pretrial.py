"""No public data: a private pre-trial paid out of the budget, against a
borrowed κ (docs/results.md §11).

    python analysis/private_pretrial.py [--partitions iid dirichlet] [--epsilons 1 2 8] [--share 0.5]
                                        [--cross-device]

N = 100 clients on FashionMNIST's 90 % private split, LR, C = 0.3, η = 0.1,
one local epoch of batch 64, δ = 1e-5, at most 200 rounds, three seeds (the
settings of docs/results.md §6).  At each total budget ε:

* a private pre-trial on the 100 clients themselves (``private = true``):
  q = 1, T ∈ {2, 4, 8, 16, 32}, three seeds, four noise levels s·{1, 2, 4, 8}
  with s the least that keeps the pre-trial within ``--share`` of ε; its
  fit, then the design with it (``--fit``), which gives the training what
  the pre-trial leaves (composed), then the training — its ε the total;
* the same, if the fit refuses (no front to fit κ on): said so.

The shipped-κ design at the same total ε and the oracle are §6's and
``analysis/kappa_error.py``'s (the κ × 1 column).  Writes
``private_pretrial.md`` and ``.json`` under ``--out`` (default
analysis/out/private_pretrial/).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

import paretofl
from paretofl.fl.algorithms import train
from paretofl.fl.build import assemble, prepare
from paretofl.pretrial.private import spent
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.sweep import run_sweep

ROOT = Path(__file__).resolve().parent.parent
N, DELTA, CLIP, LR, T_MAX = 100, 1e-5, 0.3, 0.1, 200


def grid_for(eps_pre, partition):
    base = dict(dataset="fashion-mnist", model="lr", subset="rest", public_fraction=0.1, clients=N,
                partition=partition, q=[1.0], rounds=[2, 4, 8, 16, 32], seeds=3, clip=CLIP, lr=LR,
                delta=DELTA, private=True, epsilon=eps_pre)
    lo, hi = 0.01, 100.0
    for _ in range(60):      # the least scale whose grid fits the pre-trial's share
        mid = math.sqrt(lo * hi)
        s = Spec.from_dict({**base, "epsilon": 1e4, "sigmas": [mid, 2 * mid, 4 * mid, 8 * mid]})
        lo, hi = (lo, mid) if spent(s) <= eps_pre else (mid, hi)
    return Spec.from_dict({**base, "sigmas": [hi, 2 * hi, 4 * hi, 8 * hi]})


def cross_device(epsilons, out):
    """The same at N = 10⁴ (a cohort of at most 100): the private pre-trial
    of ``pretrials/private_lr.toml`` (ε 0.74), then its design at each total ε."""
    from paretofl.theory.privacy import charges_from_data as from_data

    n = 10_000
    spec = Spec.from_toml(ROOT / "pretrials" / "private_lr.toml")
    store = out / "pre_cross_device.sqlite"
    run_sweep(spec, store, progress=False)
    f = paretofl.fit(store, bootstrap=200)
    fit_path = out / "pre_cross_device_fit.json"
    f.save(fit_path)
    setup = prepare("fashion-mnist", "lr", n, partition="iid", seed=0, public_fraction=0.1, subset="rest")
    rows = []
    for eps in epsilons:
        d = paretofl.design(n, eps, DELTA, max_rounds=1000, q_max=0.01, fit=str(fit_path), sigma_min=0.01,
                            sigma_max=30.0)
        pol = assemble(setup, "dpfedavg", 3, mechanism="client-aggregate", sigma=d.sigma, clip=CLIP,
                       lr=LR, client_rate=d.q, local_epochs=1, batch_size=64).policy
        _, _, fin = train(pol, rounds=d.rounds, epsilon=eps * (1 + 1e-9), delta=DELTA, evaluate=d.rounds,
                          spent=from_data(f.private_charges))
        row = dict(partition="iid, N = 10^4", epsilon=eps, pre_sigmas=spec.sigmas, pre_epsilon=f.private_epsilon,
                   kappa=f.kappa, kappa_ci=f.kappa_ci, problems=f.problems, q=d.q, rounds=d.rounds, sigma=d.sigma,
                   training_epsilon=d.details["pretrial"]["training_epsilon"], total=float(np.max(fin["epsilon"])),
                   accuracy=fin["accuracy"].tolist())
        rows.append(row)
        print(f"N=10^4 eps {eps:g}: kappa {f.kappa:.3g}; design T {d.rounds} sigma {d.sigma:.3g}; total "
              f"{row['total']:.3f}; acc {100 * np.mean(row['accuracy']):.1f}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet"])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 8.0])
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--cross-device", action="store_true",
                    help="also N = 10^4 with pretrials/private_lr.toml (epsilon 0.74) before each design")
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "private_pretrial"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for partition in a.partitions:
        setup = prepare("fashion-mnist", "lr", N, partition=partition, seed=0, public_fraction=0.1,
                        subset="rest")
        for eps in a.epsilons:
            spec = grid_for(a.share * eps, partition)
            store = out / f"pre_{partition}_eps{eps:g}.sqlite"
            run_sweep(spec, store, progress=False)
            f = paretofl.fit(store, bootstrap=200)
            fit_path = out / f"pre_{partition}_eps{eps:g}_fit.json"
            f.save(fit_path)
            row = dict(partition=partition, epsilon=eps, pre_sigmas=spec.sigmas, pre_epsilon=f.private_epsilon,
                       kappa=f.kappa, kappa_ci=f.kappa_ci, problems=f.problems)
            try:
                d = paretofl.design(N, eps, DELTA, max_rounds=T_MAX, fit=str(fit_path), sigma_min=0.01,
                                    sigma_max=30.0)
            except ValueError as exc:
                row.update(design=str(exc))
                rows.append(row)
                print(partition, eps, "no design:", exc, flush=True)
                continue
            pol = assemble(setup, "dpfedavg", 3, mechanism="client-aggregate", sigma=d.sigma,
                           clip=CLIP, lr=LR, client_rate=d.q, local_epochs=1, batch_size=64).policy
            from paretofl.theory.privacy import charges_from_data as from_data

            _, _, fin = train(pol, rounds=d.rounds, epsilon=eps * (1 + 1e-9), delta=DELTA, evaluate=d.rounds,
                              spent=from_data(f.private_charges))
            row.update(q=d.q, rounds=d.rounds, sigma=d.sigma, training_epsilon=d.details["pretrial"][
                "training_epsilon"], total=float(np.max(fin["epsilon"])), accuracy=fin["accuracy"].tolist())
            rows.append(row)
            print(f"{partition} eps {eps:g}: pre-trial sigmas {spec.sigmas} spent {f.private_epsilon:.3g}, kappa "
                  f"{f.kappa:.3g}; design q {d.q:g} T {d.rounds} sigma {d.sigma:.3g}; total {row['total']:.3f}; "
                  f"acc {100 * np.mean(row['accuracy']):.1f}", flush=True)
    if a.cross_device:
        rows += cross_device(a.epsilons, out)
    (out / "private_pretrial.json").write_text(json.dumps(rows, indent=1))
    lines = ["| partition | ε total | pre-trial: σ's, ε spent | κ [95 %] | design after it: q, T, σ | ε spent in all "
             "| test accuracy |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        pre = f"{', '.join(f'{s:.3g}' for s in r['pre_sigmas'])}: {r['pre_epsilon']:.3g}"
        kap = f"{r['kappa']:.3g} [{r['kappa_ci'][0]:.3g}, {r['kappa_ci'][1]:.3g}]"
        if "design" in r:
            lines.append(f"| {r['partition']} | {r['epsilon']:g} | {pre} | {kap} | none: {r['design']} | — | — |")
            continue
        acc = 100 * np.array(r["accuracy"])
        lines.append(f"| {r['partition']} | {r['epsilon']:g} | {pre} | {kap} | {r['q']:g}, {r['rounds']}, "
                     f"{r['sigma']:.3g} | {r['total']:.3f} | {acc.mean():.1f} ± {acc.std():.1f} % |")
    (out / "private_pretrial.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
