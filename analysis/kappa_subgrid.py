"""How small a pre-trial pins κ? (docs/results.md §11)

    python analysis/kappa_subgrid.py [--store pretrials/lr_fmnist.sqlite]

Fits κ on sub-grids of a finished pre-trial store — fewer noise levels,
fewer T, fewer seeds — as a private pre-trial would run them (no
non-private reference: the least noisy run is the reference, which moves
neither the front nor κ), and compares each with the full grid's κ.  No
training: every sub-grid is a subset of the store's runs, written to a
temporary store and fitted.  Prints, per sub-grid shape, the κ of every
choice of its σ's and seeds: the median, the spread, and the worst factor
off the full grid's κ.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np

from paretofl.pretrial.fit import fit
from paretofl.pretrial.store import COLUMNS, Store

ROOT = Path(__file__).resolve().parent.parent


def subset_store(src: Store, keep, path: Path) -> str:
    tab = src.table()
    base = dict(src.base, private=True, epsilon=1e9)
    dst = Store(path, base, classes=src.classes)
    rows = [{c: tab[c][i] for c in COLUMNS} for i in np.flatnonzero(keep)]
    dst.add_rows(rows)
    dst.close()
    return str(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=str(ROOT / "pretrials" / "lr_fmnist.sqlite"))
    a = ap.parse_args()
    full = fit(a.store, bootstrap=200)
    src = Store(a.store)
    tab = src.table()
    sig = np.unique(tab["sigma"][tab["sigma"] > 0])
    ts = np.unique(tab["rounds"]).astype(int)
    seeds = np.unique(tab["seed"]).astype(int)
    print(f"full grid: {len(sig)} sigma x {len(ts)} T x {len(seeds)} seeds: kappa {full.kappa:.3g} "
          f"{full.kappa_ci}")
    shapes = [(1, len(ts), 1), (1, len(ts), 3), (2, len(ts), 1), (2, len(ts), 3), (3, len(ts), 3), (3, 4, 3),
              (4, len(ts), 3), (4, len(ts), 5)]
    tmp = Path(tempfile.mkdtemp())
    print("| noise levels | T | seeds | runs | kappa: median [range] over the choices | worst factor off "
          "the full grid's |")
    print("|---|---|---|---|---|---|")
    for n_s, n_t, n_seed in shapes:
        t_keep = ts if n_t == len(ts) else ts[np.round(np.linspace(0, len(ts) - 1, n_t)).astype(int)]
        ks = []
        # adjacent σ's (a pre-trial would pick neighbours), the first seeds
        for i in range(len(sig) - n_s + 1):
            s_keep = sig[i:i + n_s]
            keep = (np.isin(np.round(tab["sigma"], 12), np.round(s_keep, 12)) & np.isin(tab["rounds"], t_keep)
                    & np.isin(tab["seed"], seeds[:n_seed]))
            path = tmp / f"s{n_s}_t{n_t}_k{n_seed}_{i}.sqlite"
            try:
                k = fit(subset_store(src, keep, path), bootstrap=0).kappa
            except ValueError:
                k = math.nan
            ks.append(k)
        ks = np.array([k for k in ks if math.isfinite(k)])
        worst = float(np.max(np.maximum(ks / full.kappa, full.kappa / ks))) if ks.size else math.nan
        runs = n_s * len(t_keep) * n_seed
        print(f"| {n_s} | {len(t_keep)} | {n_seed} | {runs} | {np.median(ks):.3g} [{ks.min():.3g}, {ks.max():.3g}] "
              f"| {worst:.2f} |", flush=True)
    # centred on a guess: the n σ's of the grid nearest the relation's σ at the middle T for a guessed κ
    # (a borrowed one, off by up to a factor 10), every T, three seeds
    qn = float(np.unique(tab["q"])[0]) * int(src.base["clients"])
    t_mid = float(np.exp(np.mean(np.log(ts))))
    print("\n| guess of kappa | noise levels (nearest the guess's relation) | runs | kappa | factor off the full "
          "grid's |")
    print("|---|---|---|---|---|")
    for n_s in (2, 3):
        for g in (0.1, 1 / 3, 1.0, 3.0, 10.0):
            guess = full.kappa * g
            centre = math.sqrt(qn / (guess * t_mid))
            s_keep = sig[np.argsort(np.abs(np.log(sig) - math.log(centre)))[:n_s]]
            keep = (np.isin(np.round(tab["sigma"], 12), np.round(s_keep, 12)) & np.isin(tab["seed"], seeds[:3]))
            path = tmp / f"guess{g:.3g}_{n_s}.sqlite"
            k = fit(subset_store(src, keep, path), bootstrap=0).kappa
            print(f"| {guess:.3g} (x{g:.3g}) | {', '.join(f'{s:.3g}' for s in sorted(s_keep))} | "
                  f"{n_s * len(ts) * 3} | {k:.3g} | {max(k / full.kappa, full.kappa / k):.2f} |", flush=True)


if __name__ == "__main__":
    main()
