"""matplotlib figures (Agg backend: files, never windows)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401
import numpy as np  # noqa: E402

from .theory import pareto  # noqa: E402
from .theory.privacy import DEFAULT_ORDERS, _conversion_offset, max_steps, rdp_subsampled_gaussian  # noqa: E402

COLORS = {"rounds_min": "#9467bd", "sigma_max": "#d62728", "relation": "#1f77b4",
          "rounds_max": "#2ca02c", "sigma_min": "#ff7f0e"}
LABELS = {"rounds_min": "T = T_min", "sigma_max": "σ = σ_max", "relation": "κσ²T = qN",
          "rounds_max": "T = T̃", "sigma_min": "σ = σ_min"}


def _exact_epsilon(sigma, rounds, q, n, delta):
    """ε of each (σ, T) point, aggregate view (local view if qN < 1)."""
    zf = math.sqrt(q * n) if q * n >= 1 else 1.0
    sigma, rounds = np.asarray(sigma, float), np.asarray(rounds, float)
    uniq, inv = np.unique(sigma, return_inverse=True)
    R = rdp_subsampled_gaussian(q, uniq * zf)[inv]
    c = _conversion_offset(np.asarray(DEFAULT_ORDERS), delta, "improved")
    return np.min(rounds[:, None] * R + c[None, :], axis=1)


def _sigma_t_axes(ax, smin, smax, t_max, q, n, kappa):
    ax.set_xscale("log")
    ax.set_yscale("log")
    s = np.geomspace(smin / 1.5, smax * 1.5, 200)
    ax.plot(s, pareto.relation_rounds(s, q, n, kappa), ls=":", color="grey", lw=1,
            label="relation (unclipped)")
    ax.add_patch(plt.Rectangle((smin, 1), smax - smin, t_max - 1, fill=False, ls="--", color="black", lw=0.8))
    ax.set_xlim(smin / 1.5, smax * 1.5)
    ax.set_ylim(0.7, t_max * 1.6)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("noise σ (per client)")
    ax.set_ylabel("rounds T")


def pareto_figure(ps, q, n, kappa, smin, smax, t_max, delta, path):
    """σ–T plane with the labelled pieces of Theorem 3, and the same set in
    the (ε_u, ε_p) plane with ε_p from the exact accountant."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6))
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
    a1.set_title(f"Pareto set, case {ps.case} (q = {q:g}, N = {n}, κ = {kappa:g})")
    a1.legend(fontsize=8, loc="lower left")
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
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def design_figure(d, smin, smax, path):
    """The design at its q: Theorem 3's pieces, the budget's frontier from
    the exact accountant, the recommendation and the closed-form point; and
    the utility bound along the frontier."""
    q, n, kappa = d.q, d.n_clients, d.kappa
    zf = math.sqrt(q * n) if d.mechanism == "aggregate" else 1.0
    ps = pareto.theorem3(q, n, kappa, smin, smax, d.max_rounds, n_points=200)
    s = np.geomspace(smin, smax, 300)
    tm = np.minimum(d.max_rounds, max_steps(d.budget, q, s * zf, d.delta)).astype(float)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6))
    _sigma_t_axes(a1, smin, smax, d.max_rounds, q, n, kappa)
    a1.fill_between(s, np.maximum(tm, 0.7), d.max_rounds * 1.6, color="#f4cccc", alpha=0.6, step="post",
                    label=f"over budget ε > {d.budget:g}")
    a1.step(s, np.maximum(tm, 0.7), where="post", color="#cc0000", lw=1)
    for p in ps.pieces:
        a1.plot(p.points[:, 0], p.points[:, 1], color=COLORS[p.kind], lw=2.5, label=LABELS[p.kind])
    if d.closed_form:
        a1.plot(d.closed_form["sigma"], d.closed_form["rounds"], "o", mfc="none", mec="black", ms=10,
                label="closed-form point")
    a1.plot(d.sigma, d.rounds, "*", color="gold", mec="black", ms=16, label="recommendation")
    a1.set_title(f"design: q = {q:.3g}, T = {d.rounds}, σ = {d.sigma:.3g}, ε = {d.epsilon:.3g}")
    a1.legend(fontsize=8, loc="lower left")
    ok = tm >= 1
    a2.plot(s[ok], pareto.utility_bound(s[ok], tm[ok], q, n, kappa), color="#cc0000", lw=1.5,
            label="best T within budget, per σ")
    a2.plot(d.sigma, d.utility_bound, "*", color="gold", mec="black", ms=16, label="recommendation")
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel("noise σ (per client)")
    a2.set_ylabel("utility-loss bound (units of A)")
    a2.set_title(f"utility along the budget frontier (case {d.case})")
    a2.grid(alpha=0.3, which="both")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------
# pre-trial figures (paper 001 Fig. 2–3 and 6): read the store, never a model
# --------------------------------------------------------------------------
def pretrial_figures(results, fit_file, outdir, fmt="png", max_rounds=None, epsilon="exact"):
    """Write three figures for a results store and return their paths:

    * ``*_sigma_t``: the σ–T grid coloured by seed-averaged utility loss,
      the experimental front, the relation κσ²T = qN with its interval;
    * ``*_objectives``: every configuration in the (ε_p, ε_u) plane, the
      front, and the configurations the fitted relation picks (theory);
    * ``*_theorem3``: Theorem 3's pieces for T̃ (default: the largest T run).
    """
    import json
    from pathlib import Path

    from matplotlib.colors import LogNorm

    from .pretrial.fit import Results, fit, front_indices

    if max_rounds is not None and not (1 <= max_rounds < float("inf")):
        raise ValueError(f"max rounds must be a finite number >= 1, got {max_rounds}")
    fr = json.loads(Path(fit_file).read_text()) if fit_file is not None else fit(results, epsilon=epsilon, bootstrap=200)
    if "kappa" not in fr or "reference" not in fr:
        raise ValueError(f"{fit_file} is not a paretofl fit file")
    res = Results(results, fr["reference"])
    u = res.mean_utility()
    eps = res.leakage(epsilon)
    front = set(front_indices(res, u, epsilon).tolist())
    kappa, (k_lo, k_hi) = fr["kappa"], fr["kappa_ci"]
    n = res.clients
    stem = Path(results).stem
    outdir = Path(outdir)
    qs = np.unique(res.q)
    paths = []

    # ---- σ–T plane
    fig, axes = plt.subplots(1, len(qs), figsize=(5.6 * len(qs), 4.6), squeeze=False)
    pos = u[np.isfinite(u) & (u > 0)]
    norm = LogNorm(vmin=max(pos.min(), 1e-4) if len(pos) else 1e-3, vmax=pos.max() if len(pos) else 1.0)
    for ax, q in zip(axes[0], qs):
        m = res.q == q
        sc = ax.scatter(res.sigma[m], res.rounds[m], c=np.clip(u[m], norm.vmin, None), norm=norm, cmap="viridis",
                        marker="s", s=140)
        f = [i for i in np.flatnonzero(m) if i in front]
        ax.scatter(res.sigma[f], res.rounds[f], facecolors="none", edgecolors="red", s=260, lw=1.8,
                   label="experimental front")
        s = np.geomspace(res.sigma[m].min() / 1.3, res.sigma[m].max() * 1.3, 200)
        ax.plot(s, q * n / (kappa * s**2), color="red", lw=1.5, label=f"κσ²T = qN, κ = {kappa:.3g}")
        if np.isfinite(k_lo) and np.isfinite(k_hi):
            ax.fill_between(s, q * n / (k_hi * s**2), q * n / (k_lo * s**2), color="red", alpha=0.15,
                            label="κ 95 % interval")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(res.rounds[m].min() / 1.5, res.rounds[m].max() * 1.5)
        # ticks at the grid's own values, no crowded minor labels
        for axis, vals in ((ax.xaxis, np.unique(res.sigma[m])), (ax.yaxis, np.unique(res.rounds[m]))):
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            axis.set_minor_locator(matplotlib.ticker.NullLocator())
            axis.set_ticks(vals, [f"{v:g}" for v in vals])
        ax.set_xlabel("noise σ (per client)")
        ax.set_ylabel("rounds T")
        ax.set_title(f"q = {q:g}, N = {n}: slope {fr['slope']:.2f} (theory −2)")
        ax.legend(fontsize=8, loc="upper right")
        fig.colorbar(sc, ax=ax, label="utility loss ε_u (test-loss gap)")
    fig.tight_layout()
    paths.append(str(outdir / f"{stem}_sigma_t.{fmt}"))
    fig.savefig(paths[-1], dpi=130)
    plt.close(fig)

    # ---- objective space
    fig, axes = plt.subplots(1, len(qs), figsize=(5.6 * len(qs), 4.6), squeeze=False)
    for ax, q in zip(axes[0], qs):
        m = np.flatnonzero(res.q == q)
        ax.scatter(eps[m], u[m], s=12, color="lightgrey", label="grid")
        theory = []
        for s in np.unique(res.sigma[m]):
            ms = m[res.sigma[m] == s]
            t_rel = q * n / (kappa * s**2)
            theory.append(ms[np.argmin(np.abs(np.log(res.rounds[ms]) - math.log(t_rel)))])
        f = sorted((i for i in m if i in front), key=lambda i: eps[i])
        ax.plot(eps[f], u[f], "o-", color="black", ms=5, label="experimental front")
        ax.scatter(eps[theory], u[theory], marker="D", s=40, facecolors="none", edgecolors="green", lw=1.5,
                   label="theory: T nearest qN/(κσ²)")
        ax.set_xscale("log")
        um = u[m][np.isfinite(u[m])]
        if len(um) and um.min() > 0:
            ax.set_yscale("log")
        else:  # some runs beat the reference: linear near zero
            ax.set_yscale("symlog", linthresh=max(1e-3, float(np.min(np.abs(um[um != 0]), initial=1e-3))))
        ax.set_xlabel("privacy leakage ε_p (exact RDP)" if epsilon == "exact" else "privacy leakage ε_p, (1.1)")
        ax.set_ylabel("utility loss ε_u")
        ax.set_title(f"objective space, q = {q:g}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(str(outdir / f"{stem}_objectives.{fmt}"))
    fig.savefig(paths[-1], dpi=130)
    plt.close(fig)

    # ---- Theorem 3 for the fitted κ
    q = float(qs[0])
    t_max = float(max_rounds) if max_rounds is not None else float(res.rounds.max())
    ps = pareto.theorem3(q, n, kappa, float(res.sigma.min()), float(res.sigma.max()), t_max, n_points=200)
    paths.append(str(outdir / f"{stem}_theorem3.{fmt}"))
    pareto_figure(ps, q, n, kappa, float(res.sigma.min()), float(res.sigma.max()), t_max,
                  float(res.base["delta"]), paths[-1])
    return paths
