"""A whole experiment — pre-trial sweeps, fits, the design, a training —
beside the API it uses: §V-D of Gu et al. end to end (docs/theory.md §4):
κ from a pre-trial on the public fraction, then a sweep of the same grid on the full data, and the checks:

* transfer: κ of the public fraction against κ of the full data;
* the full-data front against the relation drawn with the public κ;
* the design: the (σ, T) that κ_public recommends for a budget, trained on
  the full data (one training per seed), against the best grid point
  within the same budget (what a search by training would find);
* cost (Gu et al. Tables II–III): trainings and wall time of this method
  (the pre-trial + one training) against "training with budget" (one
  full-data training per candidate σ, T set by the budget) and "training
  until convergence" (one per candidate σ, to the grid's largest T).  Wall
  times of the baselines are the measured full-data cost per replica-round
  times their rounds (batched, as the engine runs them).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from .mechanisms import get as mechanism_of
from .pretrial.fit import Results, fit, front_indices, relation_distance, within_fraction
from .pretrial.spec import MECHANISM, Spec
from .pretrial.store import read_table
from .pretrial.sweep import Job, run_job, run_sweep
from .recommendation import Request, design
from .theory.privacy import max_steps


def validate(spec: Spec, outdir, full_fraction: float = 1.0, budget: float | None = None,
             executor: str = "local", ray_address=None, progress: bool = True, bootstrap: int = 300) -> dict:
    _check_args(spec, full_fraction, budget)
    outdir = Path(outdir)
    # the full sweep trains on the whole training set (or its full_fraction),
    # never on a public mask the data carry: that would compare the public
    # share with itself
    from .fl.data import load_dataset

    masked = load_dataset(spec.dataset, spec.data_dir).public is not None
    full = replace(spec, public_fraction=full_fraction, subset="all" if masked else spec.subset)
    stores = {k: str(outdir / f"validate_{k}.sqlite") for k in ("public", "full")}
    run_sweep(spec, stores["public"], executor=executor, ray_address=ray_address, progress=progress)
    run_sweep(full, stores["full"], executor=executor, ray_address=ray_address, progress=progress)
    # wall times from the stores (a resumed sweep's own time would undercount)
    tab_full = read_table(stores["full"])
    t_public, t_full = _sweep_seconds(read_table(stores["public"])), _sweep_seconds(tab_full)
    f_pub = fit(stores["public"], bootstrap=bootstrap).to_dict()
    f_full = fit(stores["full"], bootstrap=bootstrap).to_dict()
    k_pub, k_full = f_pub["kappa"], f_full["kappa"]

    res = Results(stores["full"])
    u = res.mean_utility()
    front = front_indices(res, u)
    q = float(spec.q[0])
    if budget is None:  # the middle of the full-data front's privacy range
        fe = res.eps[front][res.q[front] == q]
        budget = float(np.exp(np.median(np.log(fe[np.isfinite(fe)]))))
    d, design_out = _design_on_full(spec, full, res, tab_full, (q, budget, k_pub))
    on_q = np.flatnonzero(res.q == q)
    ok = on_q[res.eps[on_q] <= budget * (1 + 1e-9)]
    best = ok[np.argmin(u[ok])] if len(ok) else None
    out = {
        "kappa_public": k_pub, "kappa_public_ci": f_pub["kappa_ci"], "kappa_full": k_full,
        "kappa_full_ci": f_full["kappa_ci"], "kappa_transfer_error": abs(math.log(k_pub / k_full)),
        "slope_public": f_pub["slope"], "slope_full": f_full["slope"],
        "full_front_distance": relation_distance(res, front, k_pub),
        "full_front_within": within_fraction(res, front, f_pub["kappa_ci"]),
        "budget": budget, "design": design_out,
        "best_grid_within_budget": None if best is None else {
            "sigma": float(res.sigma[best]), "rounds": int(res.rounds[best]), "epsilon": float(res.eps[best]),
            "utility_loss": float(u[best])},
        "cost": _costs(spec, tab_full, (q, res.clients, budget, int(res.rounds.max())), t_public, d.rounds),
        "seconds_full_sweep": t_full, "stores": stores,
    }
    from .pretrial.sweep import prepared

    n_all = len(load_dataset(spec.dataset, spec.data_dir).y_train)
    out["shares"] = {k: len(prepared(x).data.y_train) / n_all for k, x in (("public", spec), ("full", full))}
    out["report"] = _report(out, spec, full_fraction)
    return out


def _check_args(spec: Spec, full_fraction: float, budget) -> None:
    if spec.private:
        raise ValueError("validate trains runs without noise on the full data (a simulation study of how kappa "
                         "transfers from a public share), so it cannot run a private pre-trial on the clients' data; "
                         "fit the private pre-trial's store itself (paretofl fit STORE)")
    if not (0 < full_fraction <= 1) or full_fraction <= spec.public_fraction:
        raise ValueError(f"full fraction must lie in ({spec.public_fraction:g}, 1] (above the public "
                         f"fraction), got {full_fraction:g}")
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise ValueError(f"budget must be a positive number, got {budget}")


def _design_on_full(spec: Spec, full: Spec, res, tab_full, at: tuple):
    """The design of κ_public at the budget (``at`` = (q, budget, κ_public)),
    trained on the full data: the Design and what the report keeps of it."""
    q, budget, k_pub = at
    n = res.clients
    d = design(Request(n, budget, delta=spec.delta, max_rounds=int(res.rounds.max()), q=q,
                       sigma_min=float(res.sigma.min()), sigma_max=float(res.sigma.max()), kappa=k_pub))
    rows = run_job(full, Job(q, [(d.sigma, seed) for seed in spec.seed_list()], [d.rounds]))
    ref = _reference_losses(tab_full, q)
    u_design = float(np.mean([r["test_loss"] - ref[r["seed"]] for r in rows]))
    return d, {"sigma": d.sigma, "rounds": d.rounds, "epsilon": d.epsilon, "utility_loss": u_design,
               "epsilon_check": mechanism_of(MECHANISM).charge(q, d.sigma, n).epsilon(spec.delta, d.rounds)}


def _costs(spec: Spec, tab_full, at: tuple, t_public: float, design_rounds: int) -> dict:
    """What each way of choosing costs, in trainings and seconds (``at`` =
    (q, N, budget, T̃)): the method (the public pre-trial, then one training
    of the design), every σ trained to the budget, and every σ to T̃."""
    q, n, budget, t_hi = at
    mech = mechanism_of(MECHANISM)
    per_round = float(np.median(tab_full["seconds"] / tab_full["rounds"]))
    n_sigma = len(spec.sigmas)
    t_budget = [min(t_hi, int(max_steps(budget, q, mech.charge(q, s, n).noise_multiplier, spec.delta)))
                for s in spec.sigmas]
    return {
        # the pre-trial trains every (σ, seed) once on the public data (its T
        # grid comes from prefixes), plus the non-private reference per seed
        "method": {"public_trainings": (n_sigma + 1) * spec.seeds * len(spec.q), "full_trainings": 1,
                   "seconds": t_public + per_round * design_rounds},
        "training_with_budget": {"public_trainings": 0, "full_trainings": n_sigma,
                                 "seconds": per_round * sum(t_budget)},
        "training_until_convergence": {"public_trainings": 0, "full_trainings": n_sigma,
                                       "seconds": per_round * t_hi * n_sigma},
    }


def _reference_losses(tab, q):
    """Each seed's best non-private test loss over the grid (the fit's default reference)."""
    m = (tab["sigma"] == 0) & (tab["q"] == q)
    out = {}
    for s, l in zip(tab["seed"][m], tab["test_loss"][m]):
        out[int(s)] = min(float(l), out.get(int(s), math.inf))
    return out


def _sweep_seconds(tab):
    """Training time a store's runs took: each replica's share of its job's
    wall time is on its largest-T row; their sum is the sweep's time."""
    last = {}
    for s, t, q, k, sec in zip(tab["sigma"], tab["rounds"], tab["q"], tab["seed"], tab["seconds"]):
        key = (s, q, k)
        if t >= last.get(key, (-1, 0))[0]:
            last[key] = (t, sec)
    return float(sum(sec for _, sec in last.values()))


def _report(r, spec, full_fraction):
    c = r["cost"]
    best = r["best_grid_within_budget"]
    d = r["design"]
    lines = [
        f"validation ({spec.model} on {spec.dataset}, N = {spec.clients}, q = {spec.q[0]:g}; "
        f"public {100 * r['shares']['public']:.3g} % vs full {100 * r['shares']['full']:.3g} % of the training set)",
        f"  kappa public   {r['kappa_public']:.4g}  [{r['kappa_public_ci'][0]:.4g}, {r['kappa_public_ci'][1]:.4g}]",
        f"  kappa full     {r['kappa_full']:.4g}  [{r['kappa_full_ci'][0]:.4g}, {r['kappa_full_ci'][1]:.4g}]"
        f"   transfer error |ln ratio| = {r['kappa_transfer_error']:.3f}",
        f"  slope          public {r['slope_public']:.3g}, full {r['slope_full']:.3g}  (theory -2)",
        f"  full front vs public relation: mean |ln T - ln T_rel| = {r['full_front_distance']:.3g}, "
        f"{100 * r['full_front_within']:.0f} % of front points within the public kappa interval",
        f"  design at epsilon {r['budget']:.3g}: sigma {d['sigma']:.4g}, T {d['rounds']}, "
        f"utility loss {d['utility_loss']:.4g} (eps {d['epsilon']:.4g})",
    ]
    if best:
        lines.append(f"  best grid point within the budget: sigma {best['sigma']:.4g}, T {best['rounds']}, "
                     f"utility loss {best['utility_loss']:.4g} (eps {best['epsilon']:.4g})")
    lines.append("  cost                        public + full trainings   wall time")
    for k, label in (("method", "pre-trial + one training"), ("training_with_budget", "training with budget"),
                     ("training_until_convergence", "training until convergence")):
        tr = f"{c[k]['public_trainings']} + {c[k]['full_trainings']}"
        lines.append(f"  {label:<27} {tr:>23}   {c[k]['seconds']:8.1f} s")
    return lines
