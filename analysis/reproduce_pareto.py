"""Rebuild Gu et al.'s findings on FashionMNIST with the library (docs/theory.md §2–§4).

Parts (``--only`` picks some; each reuses finished runs in analysis/out/*.sqlite):

* ``front``   — experimental front against the relation, LR and LeNet: the
  shipped pre-trials (pretrials/*.sqlite), refitted; figures per model.
* ``cases``   — Theorem 3's three cases for the LR κ: T̃ above T_b, between
  T_a and T_b, below T_a.
* ``epochs``  — local epochs E = 1, 2, 4 on the LR grid: κ and slope per E
  (Gu et al.: E barely moves the front).
* ``clients`` — N = 5, 10, 20 at q = 0.5 on the LR grid: qN/κ = σ²T along
  the front should grow in proportion to N (Cor. 3).
* ``nscale``  — the same at N = 10, 100, 1000 (the σ grid scaled by √(N/10)).
* ``design``  — §V-D: κ from the 10 % public fraction against the full
  training set, the design it gives, and its cost (``paretofl validate``).

Writes figures and ``pareto_findings.md`` into analysis/out/.

    .venv/bin/python analysis/reproduce_pareto.py [--only front cases epochs clients nscale design] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "analysis" / "out"
PRE = ROOT / "pretrials"


def fmt_ci(ci):
    return f"[{ci[0]:.3g}, {ci[1]:.3g}]"


def part_front(lines):
    from paretofl import plots
    from paretofl.pretrial.fit import fit

    lines += ["## Front against the relation (shipped pre-trials)", "",
              "| model | runs | seeds | κ | κ 95 % | slope (theory −2) | slope 95 % | front within | "
              "mean abs ln(T/T_rel) |", "|---|---|---|---|---|---|---|---|---|"]
    for name in ("lr_fmnist", "lenet_fmnist"):
        store = PRE / f"{name}.sqlite"
        if not store.is_file():
            lines.append(f"| {name} | (no results: run `paretofl pretrial pretrials/{name}.toml`) |")
            continue
        r = fit(store).to_dict()
        (OUT / f"{name}_fit.json").write_text(json.dumps(r, indent=1))
        plots.pretrial_figures(store, OUT / f"{name}_fit.json", OUT)
        lines.append(f"| {r['spec']['model']} | {r['n_runs']} | {r['n_seeds']} | {r['kappa']:.3g} | "
                     f"{fmt_ci(r['kappa_ci'])} | {r['slope']:.2f} | {fmt_ci(r['slope_ci'])} | "
                     f"{100 * r['within_fraction']:.0f} % | {r['distance']:.2f} |")
    lines.append("")


def part_cases(lines):
    from paretofl import plots
    from paretofl.theory import pareto

    fitf = ROOT / "paretofl" / "data" / "lr_fmnist_fit.json"
    kappa = json.loads(fitf.read_text())["kappa"] if fitf.is_file() else 16.0
    q, n = 0.5, 10
    smax = math.sqrt(q * n / (kappa * 20))  # σ box chosen so that T_a = 20, T_b = 500
    smin = smax / 5
    ta, tb = q * n / (kappa * smax**2), q * n / (kappa * smin**2)
    lines += ["## Theorem 3's three cases (LR κ)", "",
              f"κ = {kappa:.3g}, q = {q}, N = {n}, σ ∈ [{smin:.3g}, {smax:.3g}]: T_a = {ta:.3g}, T_b = {tb:.3g}.", "",
              "| T̃ | case | pieces |", "|---|---|---|"]
    for t_max in (2 * tb, math.sqrt(max(ta, 1) * tb), max(ta / 2, 1.5)):
        ps = pareto.theorem3(pareto.Box(q, n, kappa, smin, smax, t_max), n_points=100)
        path = OUT / f"theorem3_case_{ps.case}.png"
        plots.pareto_figure(ps, 1e-5, path)
        lines.append(f"| {t_max:.3g} | {ps.case} | {', '.join(p.kind for p in ps.pieces)} ({path.name}) |")
    lines.append("")


def _sweep(name, spec):
    """Sweep into a store named by the spec's contents: parts that ask for
    the same runs (E = 1 and N = 10 here) share them."""
    import hashlib

    from paretofl.pretrial.fit import fit
    from paretofl.pretrial.sweep import run_sweep

    key = hashlib.sha1(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()[:10]
    store = OUT / f"sweep_{spec.model}_{key}.sqlite"
    run_sweep(spec, store, progress=True)
    return fit(store, bootstrap=500).to_dict()


def part_epochs(lines, seeds):
    from paretofl.pretrial.spec import Spec

    base = replace(Spec.from_toml(PRE / "lr_fmnist.toml"), seeds=seeds)
    lines += ["## Local epochs E (LR)", "", "| E | κ | κ 95 % | slope | slope 95 % |", "|---|---|---|---|---|"]
    for e in (1, 2, 4):
        r = _sweep(f"epochs_E{e}", replace(base, local_epochs=e))
        lines.append(f"| {e} | {r['kappa']:.3g} | {fmt_ci(r['kappa_ci'])} | {r['slope']:.2f} | "
                     f"{fmt_ci(r['slope_ci'])} |")
    lines.append("")


def part_clients(lines, seeds):
    from paretofl.pretrial.spec import Spec

    base = replace(Spec.from_toml(PRE / "lr_fmnist.toml"), seeds=seeds)
    lines += ["## Number of clients N (LR, q = 0.5, same public data split N ways)", "",
              "| N | κ | κ 95 % | qN/κ (= σ²T on the relation) | ratio to N = 5 | N / 5 |", "|---|---|---|---|---|---|"]
    first = None
    for n in (5, 10, 20):
        r = _sweep(f"clients_N{n}", replace(base, clients=n))
        v = 0.5 * n / r["kappa"]
        first = first or v
        lines.append(f"| {n} | {r['kappa']:.3g} | {fmt_ci(r['kappa_ci'])} | {v:.3g} | {v / first:.2f} | {n / 5:g} |")
    lines.append("")


def part_nscale(lines, seeds):
    """N = 10, 100, 1000 on the same public data: the relation says σ²T along
    the front is qN/κ, so in proportion to N.  The σ grid is scaled by
    √(N/10) so that it spans the relation at every N."""
    import math

    from paretofl.pretrial.spec import Spec

    base = replace(Spec.from_toml(PRE / "lr_fmnist.toml"), seeds=seeds)
    lines += ["## N at realistic sizes (LR, q = 0.5, the public 10 % split N ways; σ grid × √(N/10))", "",
              "| N | κ | κ 95 % | slope | qN/κ (= σ²T on the relation) | ratio to N = 10 | N / 10 |",
              "|---|---|---|---|---|---|---|"]
    first = None
    for n in (10, 100, 1000):
        f = math.sqrt(n / 10)
        r = _sweep(f"nscale_N{n}", replace(base, clients=n, sigmas=[round(s * f, 6) for s in base.sigmas],
                                           chunk=max(4, 4800 // n)))
        v = 0.5 * n / r["kappa"]
        first = first or v
        lines.append(f"| {n} | {r['kappa']:.3g} | {fmt_ci(r['kappa_ci'])} | {r['slope']:.2f} | {v:.3g} | "
                     f"{v / first:.2f} | {n / 10:g} |")
    lines.append("")


def part_design(lines, seeds):
    from paretofl.pretrial.spec import Spec
    from paretofl.validate import validate

    spec = replace(Spec.from_toml(PRE / "lr_fmnist.toml"), seeds=seeds)
    (OUT / "design_lr").mkdir(parents=True, exist_ok=True)
    r = validate(spec, OUT / "design_lr", full_fraction=1.0, progress=True)
    lines += ["## Low-cost design, §V-D (LR: public 10 % → full training set)", "", "```", *r["report"], "```", ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=("front", "cases", "epochs", "clients", "nscale", "design"))
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    parts = a.only or ["front", "cases", "epochs", "clients", "design"]
    funcs = {"front": part_front, "cases": part_cases, "epochs": lambda l: part_epochs(l, a.seeds),
             "clients": lambda l: part_clients(l, a.seeds), "nscale": lambda l: part_nscale(l, a.seeds),
             "design": lambda l: part_design(l, a.seeds)}
    for p in parts:
        t = time.perf_counter()
        lines = []
        funcs[p](lines)
        lines.append(f"_{p}: {time.perf_counter() - t:.0f} s (`analysis/reproduce_pareto.py --only {p} "
                     f"--seeds {a.seeds}`)_\n")
        (OUT / f"pareto_{p}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    # the summary: every part's latest result, in order
    md = OUT / "pareto_findings.md"
    body = [(OUT / f"pareto_{p}.md").read_text() for p in funcs if (OUT / f"pareto_{p}.md").is_file()]
    md.write_text("# Gu et al.'s findings on FashionMNIST\n\n" + "\n".join(body))
    print(f"written to {md}")


if __name__ == "__main__":
    main()
