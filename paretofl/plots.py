"""Figures, written to files.

Built on matplotlib's object API (``matplotlib.figure.Figure``), which
renders to a file without pyplot and without choosing a backend: importing
or calling this module changes no process-wide setting.  Legends sit beside
the axes, never on the data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from .mechanisms import get as mechanism_of
from .pretrial.spec import MECHANISM
from .theory import pareto
from .theory.privacy import DEFAULT_ORDERS, charges_from_data, epsilon_on_grid, max_steps, rdp_curve

COLORS = {"rounds_min": "#9467bd", "sigma_max": "#d62728", "relation": "#1f77b4",
          "rounds_max": "#2ca02c", "sigma_min": "#ff7f0e"}
LABELS = {"rounds_min": "T = T_min", "sigma_max": "σ = σ_max", "relation": "κσ²T = qN",
          "rounds_max": "T = max rounds", "sigma_min": "σ = σ_min"}


def _g(x, digits=3) -> str:
    """A number for a title or label: a few significant digits."""
    return f"{x:.{digits}g}"


def _exact_epsilon(sigma, rounds, q, n, delta, sampling="poisson", zf=None):
    """ε of each (σ, T) point (aggregate view unless told otherwise), on the order grid."""
    zf = (mechanism_of(MECHANISM).charge(q, 1.0, n).noise_multiplier if q * n >= 1 else 1.0) \
        if zf is None else zf
    sigma, rounds = np.asarray(sigma, float), np.asarray(rounds, float)
    uniq, inv = np.unique(sigma, return_inverse=True)
    R = np.atleast_2d(rdp_curve(sampling, q, uniq * zf))[inv]
    return epsilon_on_grid(rounds[:, None] * R, delta, DEFAULT_ORDERS)


def _log_ticks(axis, lo, hi):
    """Readable ticks on a log axis: 1-2-5 steps that fit, no minor labels."""
    cand = np.array([m * 10.0 ** e for e in range(-6, 9) for m in (1, 2, 5)])
    ticks = cand[(cand >= lo * 0.999) & (cand <= hi * 1.001)]
    if len(ticks) > 7:
        ticks = cand[(cand >= lo * 0.999) & (cand <= hi * 1.001) & np.isclose(np.log10(cand) % 1, 0)]
    if len(ticks) < 2:
        ticks = np.array([lo, hi])
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _sigma_t_axes(ax, smin, smax, t_max, q, n, kappa):
    ax.set_xscale("log")
    ax.set_yscale("log")
    s = np.geomspace(smin / 1.5, smax * 1.5, 200)
    ax.plot(s, pareto.relation_rounds(s, q, n, kappa), ls=":", color="grey", lw=1, label="relation (unclipped)")
    ax.add_patch(Rectangle((smin, 1), smax - smin, t_max - 1, fill=False, ls="--", color="black", lw=0.8,
                           label="allowed box"))
    ax.set_xlim(smin / 1.5, smax * 1.5)
    ax.set_ylim(0.7, t_max * 1.6)
    _log_ticks(ax.xaxis, smin / 1.5, smax * 1.5)
    _log_ticks(ax.yaxis, 1, t_max * 1.6)
    ax.set_xlabel("noise σ (per client)")
    ax.set_ylabel("rounds T")


def _legend_below(ax, ncol=3):
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, frameon=False)


def _save(fig, path):
    fig.savefig(path, dpi=130, bbox_inches="tight")


def pareto_figure(ps, delta, path):
    """σ–T plane with the labelled pieces of Theorem 3 (over the box the set
    was drawn in, ``ps.box``), and the same set in the (ε_u, ε_p) plane with
    ε_p from the exact accountant at ``delta``."""
    b = ps.box
    q, n, kappa, smin, smax, t_max = b.q, b.n_clients, b.kappa, b.sigma_min, b.sigma_max, b.max_rounds
    fig = Figure(figsize=(11.5, 5.2))
    a1, a2 = fig.subplots(1, 2)
    _sigma_t_axes(a1, smin, smax, t_max, q, n, kappa)
    for p in ps.pieces:
        pts = p.points
        if ps.integer:
            for k in range(0, len(pts), 2):
                a1.plot(pts[k:k + 2, 0], pts[k:k + 2, 1], color=COLORS[p.kind], lw=2)
            a1.plot([], [], color=COLORS[p.kind], lw=2, label=LABELS[p.kind])
        else:
            a1.plot(pts[:, 0], pts[:, 1], color=COLORS[p.kind], lw=2.5, label=LABELS[p.kind])
    for name, t in (("T_a", ps.T_a), ("T_b", ps.T_b)):
        if 0.7 < t < t_max * 1.6:
            a1.axhline(t, color="grey", lw=0.6)
            a1.text(smax * 1.45, t, name, ha="right", va="bottom", fontsize=8, color="grey")
    a1.set_title(f"Pareto set, case {ps.case} (q = {_g(q)}, N = {n}, κ = {_g(kappa)})")
    _legend_below(a1)
    for p in ps.pieces:
        eu = pareto.utility_bound(p.points[:, 0], p.points[:, 1], q, n, kappa)
        ep = _exact_epsilon(p.points[:, 0], p.points[:, 1], q, n, delta)
        a2.plot(ep, eu, "o-" if ps.integer else "-", ms=2, color=COLORS[p.kind], lw=2, label=LABELS[p.kind])
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel(f"privacy leakage ε_p (exact RDP, δ = {delta:g})")
    a2.set_ylabel("utility-loss bound ε_u (units of A)")
    a2.set_title("front in objective space")
    a2.grid(alpha=0.3, which="both")
    _legend_below(a2)
    _save(fig, path)


def _prior(d) -> tuple:
    """A design's private pre-trial charges (empty without one): its budget frontier comes after them."""
    pre = (d.details or {}).get("pretrial")
    return tuple(charges_from_data(pre["charges"])) if pre else ()


def _frontier(mech, q, n, budget, delta, smin, smax, t_cap, kappa, prior=()):
    """A mechanism's budget frontier at q: on a σ grid, the most rounds
    within the budget (its charged participations, as rounds; after the
    ``prior`` charges of a private pre-trial) and the utility bound
    1/T + κσ²r(T)/(qN) there."""
    unit = mech.charge(q, 1.0, n)
    s = np.geomspace(smin, smax, 300)
    k = max_steps(budget, float(unit.rate), s * float(unit.noise_multiplier), delta, sampling=unit.sampling,
                  prior=prior)
    tm = np.minimum(t_cap, mech.rounds_for(k)).astype(float)
    ok = tm >= 1
    r = np.ones_like(tm)
    if ok.any():
        r[ok] = mech.error_ratio(tm[ok].astype(int))
    u = np.where(ok, 1.0 / np.maximum(tm, 1) + kappa * s * s * r / (q * n), np.nan)
    return s, tm, u


def _banded_figure(d, path):
    """A banded design (bandmf): its frontier beside Poisson DP-FedAvg's
    (client-aggregate at that design's q) on the σ–T plane and in the
    bound, and the bound of every band count searched."""
    n, kappa, smin, smax = d.n_clients, d.kappa, d.sigma_min, d.sigma_max
    fams = [(f"{d.mechanism}, b = {d.details['bands']}", mechanism_of(d.mechanism, **d.mechanism_options), d.q,
             (d.sigma, d.rounds, d.utility_bound), "#cc0000")]
    other = d.details.get("dpfedavg") or {}
    if "q" in other:
        name = other.get("mechanism", MECHANISM)      # a saved design from before the name was recorded
        fams.append((f"{name} (Poisson DP-FedAvg), q = {_g(other['q'])}", mechanism_of(name),
                     other["q"], (other["sigma"], other["rounds"], other["utility_bound"]), "#1f77b4"))
    fig = Figure(figsize=(15, 5.4))
    a1, a2, a3 = fig.subplots(1, 3)
    for label, mech, q, (sig, T, u), color in fams:
        s, tm, uu = _frontier(mech, q, n, d.budget, d.delta, smin, smax, d.max_rounds, kappa, _prior(d))
        a1.step(s, np.maximum(tm, 0.7), where="post", color=color, lw=1.5, label=label)
        a1.plot(sig, T, "*", color="gold", mec=color, ms=13, zorder=6)
        a2.plot(s, uu, color=color, lw=1.5, label=label)
        a2.plot(sig, u, "*", color="gold", mec=color, ms=13, zorder=6)
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_ticks(ax.xaxis, smin, smax)
        ax.set_xlabel("noise σ (per client)")
        ax.grid(alpha=0.3, which="both")
    a1.set_ylabel("rounds T within the budget")
    a1.set_title(f"budget frontiers (ε = {_g(d.budget)}); stars: the designs")
    a2.set_ylabel("utility-loss bound (units of A)")
    a2.set_title("the bound along each frontier")
    _legend_below(a1, ncol=1)
    _legend_below(a2, ncol=1)
    bs = {int(b): u for b, u in d.details["bands_searched"].items()}
    a3.plot(list(bs), list(bs.values()), "o-", color="#cc0000")
    a3.plot(d.details["bands"], d.utility_bound, "*", color="gold", mec="black", ms=13, label="design")
    if "q" in other:
        a3.axhline(other["utility_bound"], color="#1f77b4", ls="--", label=f"{name}'s design")
    a3.set_xscale("log")
    a3.set_yscale("log")
    a3.set_xlabel("bands b")
    a3.set_ylabel("best utility-loss bound at b")
    a3.set_title("the search over b")
    a3.grid(alpha=0.3, which="both")
    _legend_below(a3, ncol=2)
    _save(fig, path)


def design_figure(d, path):
    """The design at its q: Theorem 3's pieces, the budget's frontier from
    the exact accountant, the recommendation and the closed-form point; and
    the utility bound along the frontier.  A banded design (bandmf) gets
    its own figure: its frontier beside DP-FedAvg's, and the search over b."""
    if "bands" in d.details:
        return _banded_figure(d, path)
    q, n, kappa, smin, smax = d.q, d.n_clients, d.kappa, d.sigma_min, d.sigma_max
    unit = mechanism_of(d.mechanism).charge(q, 1.0, n)      # the charge is linear in sigma
    sampling, zf = unit.sampling, float(unit.noise_multiplier)
    ps = pareto.theorem3(pareto.Box(q, n, kappa, smin, smax, d.max_rounds), n_points=200)
    s = np.geomspace(smin, smax, 300)
    prior = _prior(d)          # a private pre-trial's charges come first: the frontier is what the budget leaves
    tm = np.minimum(d.max_rounds, max_steps(d.budget, q, s * zf, d.delta, sampling=sampling,
                                            prior=prior)).astype(float)
    fig = Figure(figsize=(11.5, 5.4))
    a1, a2 = fig.subplots(1, 2)
    _sigma_t_axes(a1, smin, smax, d.max_rounds, q, n, kappa)
    a1.fill_between(s, np.maximum(tm, 0.7), d.max_rounds * 1.6, color="#f4cccc", alpha=0.6, step="post",
                    label=f"over budget (ε > {_g(d.budget)}" + (", the private pre-trial's spend composed)"
                                                                  if prior else ")"))
    a1.step(s, np.maximum(tm, 0.7), where="post", color="#cc0000", lw=1)
    for p in ps.pieces:
        a1.plot(p.points[:, 0], p.points[:, 1], color=COLORS[p.kind], lw=2.5, label=LABELS[p.kind])
    if d.closed_form:
        a1.plot(d.closed_form["sigma"], d.closed_form["rounds"], "o", mfc="none", mec="black", ms=13, mew=1.5,
                label="closed-form point", zorder=5)
    a1.plot(d.sigma, d.rounds, "*", color="gold", mec="black", ms=13, label="recommendation", zorder=6)
    a1.set_title(f"design: q = {_g(q)}, T = {d.rounds}, σ = {_g(d.sigma)}, ε = {_g(d.epsilon)}")
    _legend_below(a1)
    ok = tm >= 1
    a2.plot(s[ok], pareto.utility_bound(s[ok], tm[ok], q, n, kappa), color="#cc0000", lw=1.5,
            label="best T within budget, per σ")
    a2.plot(d.sigma, d.utility_bound, "*", color="gold", mec="black", ms=13, label="recommendation", zorder=6)
    a2.set_xscale("log")
    a2.set_yscale("log")
    _log_ticks(a2.xaxis, smin, smax)
    a2.set_xlabel("noise σ (per client)")
    a2.set_ylabel("utility-loss bound (units of A)")
    a2.set_title(f"utility along the budget frontier (case {d.case})")
    a2.grid(alpha=0.3, which="both")
    _legend_below(a2, ncol=2)
    _save(fig, path)


# --------------------------------------------------------------------------
# pre-trial figures (Gu et al. Fig. 2–3 and 6): read the store, never a model
# --------------------------------------------------------------------------
def _split(spec: dict) -> str:
    from .fl.names import split_name

    try:
        return split_name(spec["partition"], spec.get("beta"), strict=False)
    except ValueError:
        return repr((spec.get("partition"), spec.get("beta")))


def _check_fit_matches(fr: dict, base: dict, fit_file):
    """A fit drawn over a store must come from a store of the same pre-trial."""
    spec = fr.get("spec")
    if not isinstance(spec, dict):
        return
    keys = ("dataset", "model", "clients", "public_fraction")
    diff = [k for k in keys if k in spec and k in base and spec[k] != base[k]]
    if "partition" in spec and "partition" in base and _split(spec) != _split(base):   # a beta only where it splits
        diff.append("partition")
    if spec.get("scored_on", "test") != base.get("scored_on", "test"):      # a store without the field: the test split
        diff.append("scored_on (the split its losses were scored on)")
    if diff:
        raise ValueError(f"fit file {fit_file} was fitted on another pre-trial (differs in {', '.join(diff)}); "
                         "fit this store with `paretofl fit` or give its own fit")


def _fit_record(results, fit_file, epsilon) -> dict:
    """The fit a pre-trial's figures draw: the file given (checked to be a
    fit), or one fitted now from the store."""
    from .pretrial.fit import fit

    if fit_file is None:
        return fit(results, epsilon=epsilon, bootstrap=200).to_dict()
    try:
        fr = json.loads(Path(fit_file).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{fit_file} is not a paretofl fit file ({exc})") from None
    if not isinstance(fr, dict) or "kappa" not in fr or "reference" not in fr:
        raise ValueError(f"{fit_file} is not a paretofl fit file")
    return fr


def _sigma_t_panel(ax, res, u, front, fr, q, norm):
    """One q's σ–T grid coloured by utility loss, its front, and κσ²T = qN with κ's interval."""
    n, kappa, (k_lo, k_hi) = res.clients, fr["kappa"], fr["kappa_ci"]
    m = res.q == q
    sig_vals, t_vals = np.unique(res.sigma[m]), np.unique(res.rounds[m])
    sc = ax.scatter(res.sigma[m], res.rounds[m], c=np.clip(u[m], norm.vmin, None), norm=norm, cmap="viridis",
                    marker="s", s=110, zorder=2)
    f = [i for i in np.flatnonzero(m) if i in front]
    ax.scatter(res.sigma[f], res.rounds[f], facecolors="none", edgecolors="red", s=230, lw=1.8,
               label="experimental front", zorder=3)
    s = np.geomspace(sig_vals.min() / 1.3, sig_vals.max() * 1.3, 200)
    ax.plot(s, q * n / (kappa * s**2), color="red", lw=1.5, label=f"κσ²T = qN, κ = {_g(kappa)}", zorder=4)
    if np.isfinite(k_lo) and np.isfinite(k_hi):
        ax.fill_between(s, q * n / (k_hi * s**2), q * n / (k_lo * s**2), color="red", alpha=0.12,
                        label="κ 95 % interval", zorder=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(sig_vals.min() / 1.3, sig_vals.max() * 1.3)
    ax.set_ylim(t_vals.min() / 1.5, t_vals.max() * 1.5)
    # ticks at the grid's own values; every other σ label when they would crowd
    for axis, vals in ((ax.xaxis, sig_vals), (ax.yaxis, t_vals)):
        axis.set_minor_formatter(NullFormatter())
        axis.set_minor_locator(NullLocator())
        step = 2 if (axis is ax.xaxis and len(vals) > 6) else 1
        axis.set_ticks(vals, [f"{v:g}" if i % step == 0 else "" for i, v in enumerate(vals)])
    ax.set_xlabel("noise σ (per client)")
    ax.set_ylabel("rounds T")
    ax.set_title(f"q = {_g(q)}, N = {n}: slope {fr['slope']:.2f} (theory −2)")
    _legend_below(ax)
    return sc


def _objectives_panel(ax, res, u, eps, front, kappa, q, epsilon):
    """One q's configurations in the (ε_p, ε_u) plane, the front, and the T the fitted relation picks per σ."""
    n = res.clients
    m = np.flatnonzero(res.q == q)
    ax.scatter(eps[m], u[m], s=12, color="lightgrey", label="grid", zorder=1)
    theory = []
    for s in np.unique(res.sigma[m]):
        ms = m[res.sigma[m] == s]
        t_rel = q * n / (kappa * s**2)
        theory.append(ms[np.argmin(np.abs(np.log(res.rounds[ms]) - math.log(t_rel)))])
    f = sorted((i for i in m if i in front), key=lambda i: eps[i])
    ax.plot(eps[f], u[f], "o-", color="black", ms=4, label="experimental front", zorder=2)
    ax.scatter(eps[theory], u[theory], marker="D", s=55, facecolors="none", edgecolors="green", lw=1.5,
               label="theory: T nearest qN/(κσ²)", zorder=3)
    ax.set_xscale("log")
    um = u[m][np.isfinite(u[m])]
    if len(um) and um.min() > 0:
        ax.set_yscale("log")
    else:  # some runs beat the reference: linear near zero
        ax.set_yscale("symlog", linthresh=max(1e-3, float(np.min(np.abs(um[um != 0]), initial=1e-3))))
    ax.set_xlabel("privacy leakage ε_p (exact RDP)" if epsilon == "exact" else "privacy leakage ε_p, (1.1)")
    ax.set_ylabel("utility loss ε_u")
    ax.set_title(f"objective space, q = {_g(q)}")
    ax.grid(alpha=0.3, which="both")
    _legend_below(ax)


def pretrial_figures(results, fit_file, outdir, fmt="png", max_rounds=None, epsilon="exact"):
    """Write three figures for a results store and return their paths:

    * ``*_sigma_t``: the σ–T grid coloured by seed-averaged utility loss,
      the experimental front, the relation κσ²T = qN with its interval;
    * ``*_objectives``: every configuration in the (ε_p, ε_u) plane, the
      front, and the configurations the fitted relation picks (theory);
    * ``*_theorem3``: Theorem 3's pieces for T̃ (default: the largest T run).
    """
    from matplotlib.colors import LogNorm

    from .pretrial.fit import Results, front_indices

    if max_rounds is not None and not (1 <= max_rounds < float("inf")):
        raise ValueError(f"max_rounds must be a finite number >= 1, got {max_rounds}")
    fr = _fit_record(results, fit_file, epsilon)
    res = Results(results, fr["reference"])
    _check_fit_matches(fr, res.base, fit_file)
    u = res.mean_utility()
    eps = res.leakage(epsilon)
    front = set(front_indices(res, u, epsilon).tolist())
    n, kappa = res.clients, fr["kappa"]
    stem = Path(results).stem
    outdir = Path(outdir)
    qs = np.unique(res.q)
    paths = []

    fig = Figure(figsize=(6.2 * len(qs), 5.6))
    axes = np.atleast_1d(fig.subplots(1, len(qs), squeeze=False)[0])
    pos = u[np.isfinite(u) & (u > 0)]
    norm = LogNorm(vmin=max(pos.min(), 1e-4) if len(pos) else 1e-3, vmax=pos.max() if len(pos) else 1.0)
    for ax, q in zip(axes, qs):
        sc = _sigma_t_panel(ax, res, u, front, fr, q, norm)
        fig.colorbar(sc, ax=ax, label="utility loss ε_u (test-loss gap)")
    paths.append(str(outdir / f"{stem}_sigma_t.{fmt}"))
    _save(fig, paths[-1])

    fig = Figure(figsize=(6.0 * len(qs), 5.2))
    axes = np.atleast_1d(fig.subplots(1, len(qs), squeeze=False)[0])
    for ax, q in zip(axes, qs):
        _objectives_panel(ax, res, u, eps, front, kappa, q, epsilon)
    paths.append(str(outdir / f"{stem}_objectives.{fmt}"))
    _save(fig, paths[-1])

    # Theorem 3 for the fitted κ
    q = float(qs[0])
    t_max = float(max_rounds) if max_rounds is not None else float(res.rounds.max())
    ps = pareto.theorem3(pareto.Box(q, n, kappa, float(res.sigma.min()), float(res.sigma.max()), t_max), n_points=200)
    paths.append(str(outdir / f"{stem}_theorem3.{fmt}"))
    pareto_figure(ps, float(res.base["delta"]), paths[-1])
    if fr.get("local_work"):
        paths.append(str(outdir / f"{stem}_local_work.{fmt}"))
        local_work_figure(results, fr["local_work"], paths[-1])
    return paths


def local_work_figure(results, local_work: dict, path):
    """The local work the pre-trial measured (docs/theory.md §4.E): each
    local epochs K's noise-free test loss against T (seed means, the seeds'
    range shaded) with its fitted curve c_K + A(K)/T."""
    from .pretrial.store import Store
    from .theory.local_work import LocalWork

    lw = LocalWork.from_dict(local_work, f"the fit of {results}")
    st = Store(results)
    try:
        tab, own = st.local_work_table(), float(st.base.get("lr", 0.1))
    finally:
        st.close()
    q = lw.q if lw.q is not None else float(tab["q"].max()) if len(tab["q"]) else None
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.subplots()
    ks = sorted(set(lw.epochs))            # a colour per K; where several η were measured, a line style per η
    colours = dict(zip(ks, matplotlib_colours(len(ks))))
    etas = sorted({lr for _, lr in lw.settings() if lr is not None and lr != lw.reference_lr})
    styles = {lw.reference_lr: "-", **dict(zip(etas, ["--", ":", "-.", (0, (3, 1, 1, 1, 1, 1)), (0, (1, 4))] * 8))}
    markers = {lw.reference_lr: "o", **dict(zip(etas, ["s", "^", "D", "v", "P", "X"] * 8))}   # each η's own dots
    for (k, lr), a, c in zip(lw.settings(), lw.A, lw.c):
        col = colours[k]
        m = (tab["epochs"] == k) & ((tab["q"] == q) if q is not None else True)
        m &= np.isclose(tab["lr"], own if lr is None else lr, rtol=1e-9, atol=0)     # each curve's own rows
        ts = np.unique(tab["rounds"][m])
        if len(ts):
            by_t = [tab["test_loss"][m & (tab["rounds"] == t)] for t in ts]
            ax.fill_between(ts, [v.min() for v in by_t], [v.max() for v in by_t], color=col, alpha=0.15, lw=0)
            ax.plot(ts, [v.mean() for v in by_t], markers.get(lr, "o"), color=col, ms=4)
        tt = np.geomspace(lw.rounds[0], lw.rounds[1], 200)
        ax.plot(tt, c + a / tt, color=col, lw=1.5,
                ls=styles.get(lr, "-"), label=f"{lw.label((k, lr))}: {_g(c)} + {_g(a)}/T")
    ax.set_xscale("log")
    ax.set_xlabel("rounds T")
    ax.set_ylabel("test loss, no noise")
    dis = lw.dissimilarity
    where = f"; partition {dis.get('partition')}, B² {_g(dis['b2'])}" if "b2" in dis else ""
    ax.set_title(f"local work measured by the pre-trial{where}")
    ax.grid(alpha=0.3, which="both")
    _legend_below(ax, ncol=2)
    _save(fig, path)


def matplotlib_colours(n: int) -> list:
    """n colours of one sequential map (light to dark: more local work darker)."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.1 + 0.75 * i / max(1, n - 1)) for i in range(n)]
