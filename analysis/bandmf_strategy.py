"""paretofl's closed-form banded strategy against JAX Privacy's optimised one
(docs/theory.md §7.3; needs ``pip install jax-privacy``, a dev dependency).

    python analysis/bandmf_strategy.py [--rounds 100 1000] [--bands 4 16 64 100]

For each (T, b): the error both strategies leave on the prefix sums, as
JAX Privacy's ``toeplitz.loss`` measures it (mean squared error over the T
prefix sums times the squared sensitivity of one participation; with
b-separated participation both scale by the same k), the ratio, and the
seconds the optimiser took (``optimize_banded_toeplitz``, its default 250
steps).  Prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from paretofl.theory import bandmf as mf

jax.config.update("jax_enable_x64", True)


def main():
    from jax_privacy.matrix_factorization import toeplitz

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--bands", type=int, nargs="+", default=[4, 16, 64, 100])
    a = ap.parse_args()
    print("| T | b | closed form: error | optimised: error | closed form / optimised | optimiser seconds |")
    print("|---|---|---|---|---|---|")
    for T in a.rounds:
        for b in a.bands:
            if b > T:
                continue
            ours = float(toeplitz.loss(np.asarray(mf.coefficients(b)), T))
            t0 = time.perf_counter()
            opt = np.asarray(toeplitz.optimize_banded_toeplitz(T, b))
            sec = time.perf_counter() - t0
            best = float(toeplitz.loss(opt, T))
            print(f"| {T} | {b} | {ours:.4g} | {best:.4g} | {ours / best:.3f} | {sec:.1f} |", flush=True)


if __name__ == "__main__":
    main()
