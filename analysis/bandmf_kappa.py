"""Does κ carry over to banded matrix factorization? (docs/results.md §10)

    python analysis/bandmf_kappa.py [--bands 8 32] [--rounds 64 256] [--seeds 5]

The design's bound for bandmf is 1/T + κσ²r(T)/(qN): the same κ as
DP-FedAvg's, with r the strategy's error ratio (docs/theory.md §7).  If
that holds, a bandmf run at per-client noise σ_b reaches the loss a
DP-FedAvg run reaches at σ₁ = σ_b √r, at the same T and cohort.  This
measures it on the pre-trials' data — the public 10 % of FashionMNIST, 80
IID clients, LR, C = 0.3, η = 0.1, one local epoch of batch-64 SGD —
without any privacy budget (σ is set, not calibrated):

* bandmf with b groups (every client of group t mod b a round: a cohort of
  80/b) at σ_b ∈ ``--sigmas``;
* DP-FedAvg (client-aggregate, Poisson at q = 1/b: the same expected
  cohort) over a dense σ grid;
* each run's utility loss: its final test loss minus the non-private run's
  (σ = 0) of the same seed and T.

For each (b, T, σ_b) the σ₁ at which DP-FedAvg's mean utility loss equals
bandmf's (log-log interpolation over the grid) gives r_measured = (σ₁/σ_b)²,
beside the r the design uses.  Writes ``bandmf_kappa.md`` and
``bandmf_kappa.json`` under ``--out`` (default analysis/out/bandmf_kappa/).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from paretofl.fl.algorithms import train
from paretofl.fl.build import assemble, prepare
from paretofl.theory import bandmf as mf

ROOT = Path(__file__).resolve().parent.parent
N, CLIP, LR = 80, 0.3, 0.1


def _losses(setup, mechanism, bands, q, sigmas, seeds, rounds):
    """Final test loss (len(sigmas), seeds) of one run per (σ, seed)."""
    sig = np.repeat(np.asarray(sigmas, dtype=float), seeds)
    opts = {"bands": bands} if mechanism == "bandmf" else {}
    pol = assemble(setup, "dpfedavg", list(range(seeds)) * len(sigmas), mechanism=mechanism,
                   sigma=sig, clip=CLIP, lr=LR, client_rate=q, local_epochs=1, batch_size=64, **opts).policy
    _, _, fin = train(pol, rounds=rounds, epsilon=None, evaluate=rounds)
    return np.asarray(fin["test_loss"]).reshape(len(sigmas), seeds)


def measure(setup, b, T, sigmas_b, grid, seeds):
    q = 1.0 / b
    ref = _losses(setup, "client-aggregate", 1, q, [0.0], seeds, T)[0]          # non-private, per seed
    gap_b = (_losses(setup, "bandmf", b, q, sigmas_b, seeds, T) - ref).mean(1)
    gap_1 = (_losses(setup, "client-aggregate", 1, q, grid, seeds, T) - ref).mean(1)
    out = []
    for s, g in zip(sigmas_b, gap_b):
        # σ₁ with DP-FedAvg's gap equal to bandmf's: interpolate log σ against log gap on the grid
        ok = gap_1 > 0
        r_meas = float("nan")
        if g > 0 and ok.sum() >= 2 and gap_1[ok].min() <= g <= gap_1[ok].max():
            order = np.argsort(gap_1[ok])
            s1 = float(np.exp(np.interp(np.log(g), np.log(gap_1[ok][order]), np.log(np.asarray(grid)[ok][order]))))
            r_meas = (s1 / s) ** 2
        out.append(dict(bands=b, rounds=T, sigma=float(s), gap=float(g), r_design=mf.error_ratio(b, T),
                        r_measured=r_meas))
    return out, dict(bands=b, rounds=T, grid=list(map(float, grid)), gap_dpfedavg=gap_1.tolist())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bands", type=int, nargs="+", default=[8, 40])
    ap.add_argument("--rounds", type=int, nargs="+", default=[80, 320])
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.1, 0.2, 0.4])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "analysis" / "out" / "bandmf_kappa"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    setup = prepare("fashion-mnist", "lr", N, partition="iid", seed=0, public_fraction=0.1, subset="public")
    grid = np.geomspace(0.01, 0.8, 14)
    rows, curves = [], []
    t0 = time.perf_counter()
    for b in a.bands:
        for T in a.rounds:
            r, c = measure(setup, b, T, a.sigmas, grid, a.seeds)
            rows += r
            curves.append(c)
            for x in r:
                print(f"b={b} T={T} sigma_b={x['sigma']:g}: gap {x['gap']:.4f}, r design {x['r_design']:.3f}, "
                      f"measured {x['r_measured']:.3f}", flush=True)
    lines = ["| b | T | clients a round | σ_b | utility loss (bandmf) | r the design uses | r measured |",
             "|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['bands']} | {x['rounds']} | {N // x['bands']} | {x['sigma']:g} | {x['gap']:.4f} | "
                     f"{x['r_design']:.3f} | {x['r_measured']:.3f} |")
    (out / "bandmf_kappa.md").write_text("\n".join(lines) + f"\n\n{time.perf_counter() - t0:.0f} s\n")
    (out / "bandmf_kappa.json").write_text(json.dumps({"rows": rows, "curves": curves}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
