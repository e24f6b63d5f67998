"""Clients with budgets of their own: the budgets, and the design that
spends each group's budget (docs/theory.md §4.B).  numpy/scipy only.

A federation whose clients accept different ε (δ common) is split into
groups of equal ε.  paretofl plans it in either view:

* **aggregate** (the server trusted): one noise on the released sum,
  N(0, z²C²) with z the sum's noise multiplier, and a Poisson rate q_g for
  each group's clients; the sum is divided by the expected cohort
  m = Σ_g n_g q_g, a public number.  A client of group g is then a
  Poisson-subsampled Gaussian of rate q_g and noise multiplier z, so each
  group's ε comes from its own rate: the strict groups are sampled less
  (Boenisch et al. 2023, "Have it your way", the "Sample" method).
* **local** (nobody trusted): every client is sampled at a common rate q
  and adds its own noise σ_g to its update, charged as a Gaussian of σ_g at
  each participation (seen).

The common number of rounds T and the noise are chosen for the lowest
predicted utility loss 1/T + κ·v, with v the variance of the noise on the
averaged update in the bound's units: v = z²/m² (aggregate; with one
group, σ²/(qN) as in Gu et al.) and v = Σ_g n_g σ_g² / (N · qN) (local).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .mechanisms import REGISTRY
from .mechanisms import get as mechanism_of
from .theory.privacy import (
    DEFAULT_ORDERS,
    Charge,
    calibrate_noise,
    check_rate,
    conversion_floor,
    conversion_offset,
    max_steps,
    rdp_for_most_steps,
    sorted_unique,
    within,
)

__all__ = ["Budgets", "read_budgets", "budgets_of", "design_groups", "account_groups"]


@dataclass
class Budgets:
    """Each client's ε, as groups of equal ε: ``epsilons`` (G,) ascending,
    ``group_of`` (N,) the group of each client 0..N-1."""

    epsilons: np.ndarray
    group_of: np.ndarray

    def __post_init__(self):
        self.epsilons = np.asarray(self.epsilons, dtype=float)
        of = np.asarray(self.group_of)
        if of.dtype == bool or (of.size and not np.all(np.isfinite(of.astype(float)) & (of == np.round(of)))):
            raise ValueError("every client's group must be a whole number naming one")
        self.group_of = of.astype(int)
        if self.epsilons.ndim != 1 or len(self.epsilons) == 0:
            raise ValueError("budgets need at least one group")
        if np.any(~np.isfinite(self.epsilons)) or np.any(self.epsilons <= 0):
            bad = self.epsilons[~(np.isfinite(self.epsilons) & (self.epsilons > 0))][0]
            raise ValueError(f"every budget epsilon must be a positive finite number, got {bad:g}")
        if np.any(np.diff(self.epsilons) <= 0):
            raise ValueError("budgets' groups must have distinct epsilons, in increasing order")
        if len(self.group_of) == 0 or self.group_of.min() < 0 or self.group_of.max() >= len(self.epsilons):
            raise ValueError("every client needs a group")
        empty = np.flatnonzero(self.counts == 0)
        if len(empty):
            raise ValueError(f"no client has budget epsilon = {self.epsilons[empty[0]]:g}")

    @property
    def n_clients(self) -> int:
        return len(self.group_of)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.group_of, minlength=len(self.epsilons))

    @classmethod
    def per_client(cls, epsilons) -> Budgets:
        """From one ε per client (client i's at position i)."""
        try:
            e = np.asarray(epsilons, dtype=float)
        except (OverflowError, TypeError, ValueError):
            raise ValueError("give one epsilon per client, each a number a float holds") from None
        if e.ndim != 1 or len(e) == 0:
            raise ValueError("give one epsilon per client")
        if np.any(~np.isfinite(e)) or np.any(e <= 0):
            bad = e[~(np.isfinite(e) & (e > 0))][0]
            raise ValueError(f"every budget epsilon must be a positive finite number, got {bad:g}")
        levels, group = np.unique(e, return_inverse=True)
        return cls(levels, group)

    @classmethod
    def shares(cls, shares, epsilons, n_clients: int) -> Budgets:
        """Groups given as shares of the N clients (summing to one): group g
        gets round(share·N) clients by largest remainder, clients
        0, 1, … filled group after group in order of ε."""
        s, e = np.asarray(shares, dtype=float), np.asarray(epsilons, dtype=float)
        if s.shape != e.shape or s.ndim != 1 or len(s) == 0:
            raise ValueError("give one share per epsilon")
        if np.any(~np.isfinite(s)) or np.any(s <= 0):
            raise ValueError(f"every share must be positive, got {s[~(np.isfinite(s) & (s > 0))][0]:g}")
        if abs(s.sum() - 1.0) > 1e-6:
            raise ValueError(f"the shares must sum to one (within 1e-6), they sum to {s.sum():.10g}")
        if len(np.unique(e)) != len(e):
            raise ValueError("each epsilon may have one share only")
        order = np.argsort(e)
        s, e = s[order], e[order]
        raw = s / s.sum() * n_clients         # shares within 1e-6 of one, made to sum to one: N clients, not more
        n = np.floor(raw).astype(int)
        n[np.argsort(-(raw - n), kind="stable")[: n_clients - n.sum()]] += 1
        if np.any(n == 0):
            g = int(np.flatnonzero(n == 0)[0])
            raise ValueError(f"the share {s[g]:g} of epsilon = {e[g]:g} is no client of {n_clients}: "
                             "raise it or the number of clients")
        return cls(e, np.repeat(np.arange(len(e)), n))


def read_budgets(path, n_clients: int | None = None) -> Budgets:
    """A budgets CSV file with a header: ``client,epsilon`` (a line per
    client, ids 0..N-1 each once) or ``share,epsilon`` (a line per group;
    needs ``n_clients``)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"budgets file {path} does not exist or is not a file")
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:   # a spreadsheet's byte-order mark is no header
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"budgets file {path} cannot be read: {exc}") from None
    rows = [[c.strip() for c in r] for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"budgets file {path} is empty")
    head = [h.lower() for h in rows[0]]
    if head not in (["client", "epsilon"], ["share", "epsilon"]):
        raise ValueError(f"budgets file {path}: the header must be client,epsilon or share,epsilon, got "
                         f"{','.join(rows[0])}")
    body = rows[1:]
    if not body:
        raise ValueError(f"budgets file {path} has a header and no lines")
    values = []
    for k, r in enumerate(body, start=2):
        if len(r) != 2:
            raise ValueError(f"budgets file {path}, line {k}: expected 2 values, got {len(r)}")
        try:
            a, b = float(r[0]), float(r[1])
        except ValueError:
            raise ValueError(f"budgets file {path}, line {k}: {','.join(r)} is not two numbers") from None
        if not (math.isfinite(b) and b > 0):
            raise ValueError(f"budgets file {path}, line {k}: epsilon must be positive, got {r[1]}")
        values.append((a, b))
    a, b = np.array(values).T
    if head[0] == "share":
        if n_clients is None:
            raise ValueError(f"budgets file {path} gives shares: the number of clients is needed too (--clients "
                             "on the command line)")
        try:
            return Budgets.shares(a, b, n_clients)
        except ValueError as exc:
            raise ValueError(f"budgets file {path}: {exc}") from None
    if not np.all(np.isfinite(a)) or np.any(a != np.round(a)) or np.any(a < 0):
        raise ValueError(f"budgets file {path}: client ids must be integers 0, 1, …")
    seen, dup = np.unique(a, return_counts=True)
    if np.any(dup > 1):
        raise ValueError(f"budgets file {path}: client {seen[dup > 1][0]:.0f} is listed twice")
    n = len(a)
    if seen[-1] >= n:    # n distinct ids, one past n - 1: an id below n is missing (floats: no overflow)
        missing = int(np.flatnonzero(~np.isin(np.arange(n), seen))[0])
        raise ValueError(f"budgets file {path}: client {missing} is missing (ids must run 0..{n - 1})")
    ids = a.astype(int)
    if n_clients is not None and n != n_clients:
        raise ValueError(f"budgets file {path} lists {n} clients, not {n_clients}")
    eps = np.empty(n)
    eps[ids] = b
    return Budgets.per_client(eps)


def _as_budgets(budgets, n_clients: int | None = None) -> Budgets:
    """The forms budgets are given in, each checked: a :class:`Budgets`, a
    budgets CSV file's path (:func:`read_budgets`) or one ε per client (a
    sequence or array, client i's at position i)."""
    import os

    if isinstance(budgets, Budgets):
        return budgets
    if isinstance(budgets, (str, os.PathLike)):
        return read_budgets(budgets, n_clients) if n_clients is not None else read_budgets(budgets)
    if isinstance(budgets, (list, tuple, np.ndarray)) and all(
            not isinstance(e, bool) and isinstance(e, (int, float, np.integer, np.floating))
            for e in np.ravel(np.asarray(budgets, dtype=object))):
        return Budgets.per_client(budgets)
    raise ValueError(f"budgets must be a budgets CSV file, a Budgets or one epsilon per client, got "
                     f"{type(budgets).__name__}")


def clients_in(budgets) -> int:
    """How many clients budgets name (their form checked as :func:`budgets_of` does)."""
    return _as_budgets(budgets).n_clients


def budgets_of(budgets, n_clients: int) -> Budgets:
    """Clients' budgets as given (a :class:`Budgets`, a budgets CSV file's
    path or one ε per client) for ``n_clients`` clients, or refused."""
    b = _as_budgets(budgets, n_clients)
    if b.n_clients != n_clients:
        raise ValueError(f"the budgets are for {b.n_clients} clients, not {n_clients}")
    return b


def _t_grid(t_cap: int) -> np.ndarray:
    if t_cap <= 300:
        return np.arange(1, t_cap + 1)
    return sorted_unique(np.concatenate([np.arange(1, 50), np.geomspace(50, t_cap, 250).astype(int), [t_cap]]))


def _group_charge(mech, q, z) -> Charge:
    """What one round charges a client of a group at rate q: the
    mechanism's charge, with the noise multiplier z on the sum (aggregate
    view: σ√m = z) or σ_g on each update (local view: z is σ_g)."""
    return mech.charge(q, z, cohort=1.0) if mech.noise_on == "sum" else mech.charge(q, z)


def account_groups(mechanism: str, groups: list, group_of: list, sigma: float, delta: float, rounds: int) -> dict:
    """A group design's privacy re-derived from what it releases — each
    group's rate (and σ_g in the local view), which clients are in which
    group, σ — never from the ε it records: {"epsilons": each group's ε,
    "noise_multiplier", "charged_noise_multiplier", "sampling",
    "q": the design's rate (the expected cohort over N), "budget": the
    strictest group's, "problems": what the record says of its groups that its assignment and
    noise do not give}.  Aggregate view: one noise of multiplier z on the
    sum of the expected cohort m = Σ_i q_i, as the mechanism releases it;
    local view: each group's own σ on each update."""
    mech = mechanism_of(mechanism)
    if not mech.groups:
        raise ValueError(f"groups of clients with budgets of their own run with "
                         f"{' or '.join(k for k, m in REGISTRY.items() if m.groups)}, not {mechanism}")
    _check_record(groups, group_of)
    of = np.asarray(group_of, dtype=int)
    n = len(of)
    counts = np.bincount(of, minlength=len(groups))
    rates = np.array([float(g["q"]) for g in groups])
    problems = _record_problems(mech, groups, counts, rates, sigma)
    if mech.noise_on == "sum":    # one noise on the sum of the expected cohort m, as the mechanism releases it
        z = mech.noise(float(rates.min()), sigma, n, cohort=float(counts @ rates)).std
        charges = [_group_charge(mech, float(q), z) for q in rates]
    else:
        charges = [_group_charge(mech, float(q), float(g["sigma"])) for q, g in zip(rates, groups)]
        z = math.sqrt(float(counts @ np.array([float(g["sigma"]) ** 2 for g in groups])) / n)   # the design's σ
        if not abs(z - float(sigma)) <= 1e-9 * max(z, 1.0):
            problems.append(f"sigma {sigma!r} where its groups' noises give {z:.6g}")
    return dict(epsilons=[c.epsilon(delta, int(rounds)) for c in charges], noise_multiplier=float(z),
                charged_noise_multiplier=float(z), sampling=charges[0].sampling, problems=problems,
                q=float(counts @ rates) / n, budget=min(float(g["budget"]) for g in groups))


#: a group's record: its fields, each a number in its range (the budget, clients, share, q, σ and ε spent)
_GROUP_FIELDS = {"budget": (0, math.inf), "clients": (1, math.inf), "share": (0, 1), "q": (0, 1),
                 "sigma": (0, math.inf), "epsilon": (0, math.inf)}


def _check_record(groups, group_of) -> None:
    """Each group a record of exactly :data:`_GROUP_FIELDS`, each a number
    (not text, not a boolean) in its range, ``clients`` whole, every group
    with a client, ``group_of`` whole numbers naming a group; else
    ValueError naming the first field that is not."""
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise ValueError("groups must be a list of the groups' records")
    for i, g in enumerate(groups):
        if set(g) != set(_GROUP_FIELDS):
            raise ValueError(f"group {i} has the fields {sorted(g)}, not {sorted(_GROUP_FIELDS)}")
        for k, (lo, hi) in _GROUP_FIELDS.items():
            v = g[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not (
                    lo < v <= hi if k in ("share", "q") else lo <= v <= hi if k == "clients" else lo < v < hi):
                raise ValueError(f"group {i}'s {k} must be a finite number in its range, got {v!r}")
        if not isinstance(g["clients"], int):
            raise ValueError(f"group {i}'s clients must be a whole number, got {g['clients']!r}")
    if not isinstance(group_of, list) or not group_of or any(
            isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < len(groups) for x in group_of):
        raise ValueError("group_of must give each client's group, a whole number naming one")


def _record_problems(mech, groups, counts, rates, sigma) -> list:
    """What a group design records that the clients' assignment (``group_of``)
    and its noise do not give: each group's client count and share, budgets
    distinct and ascending, one σ for every group where one noise goes on
    the sum, one q for every group where each update carries its own."""
    n = int(counts.sum())
    bad = []

    def off(a, b):
        return not abs(float(a) - float(b)) <= 1e-9 * max(abs(float(a)), abs(float(b)), 1.0)

    for i, g in enumerate(groups):
        if g.get("clients") != int(counts[i]):
            bad.append(f"{g.get('clients')!r} clients in the group of budget {g.get('budget')!r} where its "
                       f"group_of puts {int(counts[i])} there")
        elif off(g.get("share"), counts[i] / n):
            bad.append(f"a share {g.get('share')!r} of the group of budget {g.get('budget')!r} where its "
                       f"clients make {counts[i] / n:.6g}")
    budgets = [float(g["budget"]) for g in groups]
    if any(b <= a for a, b in zip(budgets, budgets[1:])):
        bad.append(f"group budgets {budgets} that are not distinct and ascending")
    if mech.noise_on == "sum" and any(off(g["sigma"], sigma) for g in groups):
        bad.append(f"a group's sigma other than the design's {sigma!r} where one noise goes on the sum")
    if mech.noise_on != "sum" and any(off(q, rates[0]) for q in rates):
        bad.append("groups sampled at different rates where every client is sampled at one")
    return bad


def _largest_rate(mech, eps, z, T, delta, lo, hi, orders=DEFAULT_ORDERS, rtol=1e-4):
    """The largest q in [lo, hi] (to ``rtol``) whose charge at noise
    multiplier z meets ε after T rounds on the grid of orders (an upper
    bound on the ε reported, so the answer is safe), by bisection on log q;
    0 where even ``lo`` does not."""
    off = conversion_offset(np.asarray(orders, dtype=float), delta)

    def meets(q):
        ch = _group_charge(mech, q, z)
        return within(eps, q, ch.noise_multiplier, T, off, orders, ch.sampling)

    if meets(hi):
        return hi
    if not meets(lo):
        return 0.0
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


def _rates_on_grid(mech, budgets, delta, ts, q_max, sigma_min, sigma_max, orders) -> tuple:
    """The noise multipliers on the sum searched, ``zs``, and each group's
    largest rate at every (z, T) of ``zs`` × ``ts`` (G, Z, T)."""
    n, eps = budgets.n_clients, budgets.epsilons
    qs = np.geomspace(q_max * 1e-3, q_max, 24)
    # noise multipliers on the sum up to the most σ_max can release (every client a round)
    zs = np.geomspace(max(0.05, sigma_min), max(mech.noise(1.0, sigma_max, n).std, 0.1), 40)
    # the per-round RDP of every (q, z) once; each group's most rounds from it
    off = conversion_offset(np.asarray(orders, dtype=float), delta)
    room = eps[:, None] - off[None, :]                                                        # (G, A)
    # only the orders that can hold some group's most rounds (the others cannot change the max)
    got = [rdp_for_most_steps(room, float(qq), c.noise_multiplier, orders, c.sampling)
           for qq in qs for c in [_group_charge(mech, float(qq), zs)]]
    rdp, known = np.stack([r for r, _ in got]), np.stack([k for _, k in got])                # (Q, Z, A)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):     # a huge budget: inf steps, capped below
        steps = np.where(room[:, None, None, :] > 0, np.floor(room[:, None, None, :] / rdp[None]), -1)
    steps = np.where(known[None], steps, -np.inf)
    tmax = np.nan_to_num(steps.max(axis=-1), nan=-1, posinf=1e12)                             # (G, Q, Z)
    # each group's largest rate for (z, T): the last grid q whose most rounds
    # reach T, then log-log interpolated towards the next (T_max falls with q)
    ok = tmax[..., None] >= ts[None, None, None, :]                          # (G, Q, Z, T)
    k = ok.sum(axis=1)                                                       # feasible prefix (G, Z, T)
    i = np.clip(k - 1, 0, len(qs) - 1)
    j = np.clip(k, 0, len(qs) - 1)
    full = np.broadcast_to(tmax[..., None], ok.shape)
    ti = np.take_along_axis(full, i[:, None], 1)[:, 0]
    tj = np.take_along_axis(full, j[:, None], 1)[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        lt = np.log(np.maximum(ts, 1))[None, None, :]
        frac = (np.log(np.maximum(ti, 1)) - lt) / (np.log(np.maximum(ti, 1)) - np.log(np.maximum(tj, 1)))
    frac = np.where(np.isfinite(frac) & (j > i), np.clip(frac, 0, 1), 0.0)
    lq = np.log(qs)
    return zs, np.where(k > 0, np.exp(lq[i] + frac * (lq[j] - lq[i])), 0.0)


def _groups_on_sum(mech, budgets, delta, t_cap, ts, kappa, q_max, sigma_min, sigma_max, orders) -> dict:
    """The group design where one noise goes on the sum (aggregate view): the
    design's fields, ``groups`` among them."""
    n, counts, eps = budgets.n_clients, budgets.counts, budgets.epsilons
    zs, rate = _rates_on_grid(mech, budgets, delta, ts, q_max, sigma_min, sigma_max, orders)     # (G, Z, T)
    m = np.tensordot(counts, rate, axes=1)                                   # (Z, T)
    feasible = np.all(rate > 0, axis=0) & (m >= 1 - 1e-9)
    with np.errstate(divide="ignore", invalid="ignore"):
        sig = mech.sigma_for(zs[:, None], None, n, cohort=m)     # the σ whose sum of m carries z
        u = 1.0 / ts[None, :] + kappa * zs[:, None] ** 2 / m ** 2
    feasible &= (sig >= sigma_min) & (sig <= sigma_max)
    if not feasible.any():
        raise ValueError(_no_round(float(eps[0]), delta, orders, _or_q_max(q_max, n)))
    u = np.where(feasible, u, np.inf)
    iz, it = np.unravel_index(np.argmin(u), u.shape)
    T = int(ts[it])

    def rates_at(z):
        """Each group's largest rate at noise z (exact accountant), and m."""
        r = [_largest_rate(mech, float(e), z, T, delta, 1e-9, q_max, orders) for e in eps]
        return np.array(r), float(counts @ np.array(r))

    def cost(z):
        r, mm = rates_at(z)
        ss = mech.sigma_for(z, None, n, cohort=mm) if mm > 0 else math.inf
        bad = mm < 1 - 1e-9 or not (sigma_min <= ss <= sigma_max) or min(r) <= 0
        return (math.inf if bad else 1.0 / T + kappa * z * z / (mm * mm)), r, mm

    # the grid's best z refined (golden section between its neighbours)
    lo, hi = float(zs[max(iz - 1, 0)]), float(zs[min(iz + 1, len(zs) - 1)])
    best = min((cost(float(zs[iz])) + (float(zs[iz]),),), key=lambda c: c[0])
    g = (math.sqrt(5) - 1) / 2
    a_, b_ = math.log(lo), math.log(hi)
    for _ in range(6):
        c_, d_ = b_ - g * (b_ - a_), a_ + g * (b_ - a_)
        fc, fd = cost(math.exp(c_)), cost(math.exp(d_))
        for f, x in ((fc, c_), (fd, d_)):
            if f[0] < best[0]:
                best = f + (math.exp(x),)
        if fc[0] <= fd[0]:
            b_ = d_
        else:
            a_ = c_
    _, q_g, m, z = best
    sigma = mech.sigma_for(z, None, n, cohort=m)     # what the trainer puts in noise() to release z
    spent = [_group_charge(mech, float(qq), z).epsilon(delta, T) for qq in q_g]
    groups = [dict(budget=float(e), clients=int(c), share=float(c / n), q=float(qq), sigma=sigma,
                   epsilon=float(s)) for e, c, qq, s in zip(eps, counts, q_g, spent)]
    out = dict(q=m / n, rounds=T, sigma=sigma, epsilon=max(spent), utility_bound=1.0 / T + kappa * z * z / (m * m),
               noise_multiplier=z, charged_noise_multiplier=z, sampling=_group_charge(mech, 1.0, z).sampling,
               groups=groups)
    return out


def _no_round(eps0: float, delta: float, orders, also: str = "") -> str:
    """The refusal of a group design whose strictest budget allows no round: where that budget lies below what
    converting RDP to (ε, δ) costs on the accountant's orders, no rate or noise can help, and it says so."""
    floor = conversion_floor(delta, orders)
    head = f"the strictest group's budget (epsilon = {eps0:g}) allows no round"
    if eps0 < floor * (1 + 1e-9):
        return (f"{head}: below epsilon {floor:.4g} no round fits at this delta on the accountant's orders (up to "
                f"{float(np.max(orders)):g}: converting RDP to (epsilon, delta) alone costs that much, and a round "
                "costs more on top); raise its budget above it, or delta")
    return f"{head} at any rate and noise allowed: raise its budget or the sigma range{also}"


def _or_q_max(q_max: float, n: int) -> str:
    """What else a refusal of a group design names where the rate was capped: q_max (below 1/N a round
    samples no client on average)."""
    if q_max >= 1.0:
        return ""
    return f", or q_max ({q_max:g}{', below 1/N' if q_max * n < 1 else ''})"


def _groups_on_updates(mech, budgets, delta, t_cap, ts, kappa, q_max, sigma_min, sigma_max, orders) -> dict:
    """The group design where each update carries its own noise (local view):
    the design's fields, ``groups`` among them."""
    n, counts, eps = budgets.n_clients, budgets.counts, budgets.epsilons
    cand = sorted_unique(np.concatenate([np.arange(1, min(n, 24) + 1),
                                         np.geomspace(1, n, 24).round()])) / n
    cand = cand[cand <= q_max * (1 + 1e-12)]
    # σ_g on a fixed geometric grid, within the σ range asked, its ends included
    ss = np.geomspace(1e-2, 1e4, 200)
    ss = sorted_unique(np.concatenate([ss[(ss > sigma_min) & (ss < sigma_max)], [sigma_min, sigma_max]]))
    ss = ss[ss > 0]
    best = None
    for q in cand:
        ch = _group_charge(mech, q, ss)
        tmax = np.stack([np.asarray(max_steps(e, q, ch.noise_multiplier, delta, orders, sampling=ch.sampling),
                                    dtype=float) for e in eps])              # (G, S)
        ok = tmax[..., None] >= ts[None, None, :]                            # (G, S, T)
        first = np.where(ok.any(axis=1), ok.argmax(axis=1), -1)              # least σ index (G, T)
        good = np.all(first >= 0, axis=0)
        if not good.any():
            continue
        s2 = np.where(first >= 0, ss[np.maximum(first, 0)] ** 2, np.inf)
        u = 1.0 / ts + kappa * (counts @ s2) / (n * q * n)
        u = np.where(good, u, np.inf)
        it = int(np.argmin(u))
        if best is None or u[it] < best[0]:
            best = (float(u[it]), float(q), int(ts[it]), ss[first[:, it]])
    if best is None:
        # every rate from 1/N to q_max was searched, and a seen participation only spends more at a higher one:
        # q_max is the cause only where it leaves no rate at all
        raise ValueError(_no_round(float(eps[0]), delta, orders, _or_q_max(q_max, n) if q_max * n < 1 else ""))
    _, q, T, grid_sigma = best
    sampling = _group_charge(mech, q, 1.0).sampling
    # each group's least σ_g within its budget, raised to the range's floor (more noise spends less); never
    # above the grid's σ_g, which the accountant found within the budget and the range
    least = np.array([calibrate_noise(float(e), q, T, delta, orders, sampling=sampling) for e in eps])
    sig = np.minimum(np.maximum(least, sigma_min), grid_sigma)
    spent = [_group_charge(mech, q, float(s)).epsilon(delta, T) for s in sig]
    groups = [dict(budget=float(e), clients=int(c), share=float(c / n), q=q, sigma=float(s), epsilon=float(x))
              for e, c, s, x in zip(eps, counts, sig, spent)]
    ms2 = float(counts @ sig ** 2) / n
    out = dict(q=q, rounds=T, sigma=math.sqrt(ms2), epsilon=max(spent), utility_bound=1.0 / T + kappa * ms2 / (q * n),
               noise_multiplier=math.sqrt(ms2), charged_noise_multiplier=math.sqrt(ms2), sampling=sampling,
               groups=groups)
    return out


def design_groups(budgets: Budgets, request, t_cap: int, kappa: float, kappa_source: str, mech):
    """The (T, noise, rates) of lowest 1/T + κ·v under every group's budget
    (module docstring), for the :class:`paretofl.Request` ``request`` (its
    δ, q_max, σ range) and the mechanism ``mech`` (client-aggregate or
    client-local; its orders).  Aggregate view: a grid of z (noise
    multiplier of the sum) × the rounds 1..T̃, each group's largest rate on
    a grid of q from the accountant's closed form (:func:`max_steps`), then
    the best point's rates refined by bisection on the exact accountant.
    Local view: the common q over the cohort sizes, each group's σ_g
    calibrated.  Returns the fields of a
    :class:`paretofl.recommendation.Design` with ``groups`` (the design
    makes it).  Raises ValueError where some group's budget allows no
    round."""
    delta, sigma_min, sigma_max, orders = request.delta, request.sigma_min, request.sigma_max, mech.orders
    q_max = 1.0 if request.q_max is None else request.q_max
    mechanism = mech.name
    check_rate(q_max, "q_max")
    ts = _t_grid(t_cap)
    if mech.noise_on == "sum":
        search = _groups_on_sum
    elif mech.noise_on == "update":
        search = _groups_on_updates
    else:
        raise ValueError(f"per-client budgets are designed for client-aggregate or client-local, not {mechanism!r}")
    out = search(mech, budgets, delta, t_cap, ts, kappa, q_max, sigma_min, sigma_max, orders)
    out.update(delta=delta, case="", kappa=kappa, kappa_source=kappa_source, mechanism=mechanism,
               budget=float(budgets.epsilons[0]), n_clients=budgets.n_clients, max_rounds=t_cap,
               sigma_min=sigma_min, sigma_max=sigma_max, group_of=budgets.group_of.tolist())
    T = out["rounds"]
    out["notes"] = notes = []
    if T == t_cap:
        notes.append(f"T is at its cap of {t_cap} rounds (raise max_rounds)")
    # a group of its own noise held at the range's floor spends less than its budget: the floor is why
    floor = [g["budget"] for g in out["groups"] if mech.noise_on != "sum" and g["sigma"] <= sigma_min * (1 + 1e-12)
             and g["epsilon"] < 0.95 * g["budget"]]
    if floor:
        notes.append(f"the groups of epsilon {', '.join(f'{e:g}' for e in floor)} add the least noise the sigma "
                     f"range allows (sigma_min {sigma_min:g}) and still do not spend their budget: lower sigma_min "
                     "to let them use it")
    full = [g["budget"] for g in out["groups"] if g["q"] >= q_max * (1 - 1e-9) and g["epsilon"] < 0.95 * g["budget"]
            and g["budget"] not in floor]
    if full:
        notes.append(f"the groups of epsilon {', '.join(f'{e:g}' for e in full)} take part every round and "
                     "still do not spend their budget: their clients cannot use more")
    return out
