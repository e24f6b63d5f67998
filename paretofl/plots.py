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
