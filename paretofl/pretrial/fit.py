"""From a results store to the experimental Pareto front and the constant κ
(docs/theory.md §2 and §4; Gu et al. Algorithm 2 and §V-D).

* utility loss of a run: its test loss minus that of the non-private run
  (σ = 0) with the same seed and q at its best T of the grid — the best
  non-private model the sweep trained, standing in for U(w_non-private) of
  docs/theory.md §1.  ``reference="final"`` takes the non-private run at the largest
  T, ``"same-rounds"`` the one with the same T (which removes the 1/T term
  of (1.2) from the loss, so its front is not the theory's);
* privacy leakage: the exact ε (RDP accountant, aggregate view) by default,
  or model (1.1) with ``epsilon="asymptotic"``;
* the front: pymoo's non-dominated sorting of the seed-averaged (ε_u, ε_p);
* κ: least squares on log κ = log(qN) − log(σ²T) over the front points that
  lie inside the grid (Theorem 3 puts the front on the box edges — σ_min,
  σ_max, T_min, T_max — wherever the relation leaves the box, so edge points do
  not measure κ; all points are used if fewer than two are inside);
* the slope of log T against log σ along the same interior front points
  (theory: −2);
* intervals by bootstrap over seeds (a resample draws whole seeds, so the
  shared randomness of one seed across σ is kept).

No torch here.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..recommendation import FIT_BLOCKING, FIT_FORMAT, store_digest
from ..shell import command_path
from .store import Store

#: a bootstrap over seeds needs this many: from two, a resample is one seed twice or both, three fronts in all,
#: and the percentiles of three values are no interval
MIN_SEEDS_FOR_INTERVAL = 3
REFERENCES = ("best", "final", "same-rounds")


def _nds(F: np.ndarray) -> np.ndarray:
    """Indices of the first non-dominated front of the rows of F (minimised)."""
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    if len(F) == 0:
        return np.array([], dtype=int)
    return np.sort(np.asarray(NonDominatedSorting().do(F, only_non_dominated_front=True), dtype=int))


class Results:
    """A store read into arrays: per (q, σ > 0, T) configuration, one column
    per seed of utility loss; plus ε per configuration."""

    def __init__(self, path, reference: str = "best"):
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
        store = Store(path)
        try:
            tab, self.base, self.classes = store.table(), store.base, store.classes
            spend = store.spend()            # a private store's log of what it charged, checked (else [])
            self.uncharged_gaps = store.uncharged_gaps() if store.private else 0
        finally:
            store.close()
        self.path, self.reference = str(path), reference
        self.clients = int(self.base["clients"])
        if len(tab["sigma"]) == 0:
            raise ValueError(f"{path} holds no runs yet; run `paretofl pretrial` first")
        self.n_runs = len(tab["sigma"])
        self.seeds = np.unique(tab["seed"]).astype(int)
        ref = {}
        private = tab["sigma"] > 0
        same = reference == "same-rounds"
        # a private pre-trial has no run without noise (docs/theory.md §4.D): its reference is its least
        # noisy runs.  The reference shifts each seed's utility by one constant, which moves neither the
        # front nor kappa; it only sets what "did it learn" compares.
        self.private = bool(self.base.get("private", False))
        is_ref = tab["sigma"] == (tab["sigma"][private].min() if self.private and private.any() else 0.0)
        for q in np.unique(tab["q"]):
            m0 = is_ref & (tab["q"] == q)
            if not m0.any():
                raise ValueError(f"{path} has no non-private reference runs (sigma = 0) at q={q:g}")
            t_ref = tab["rounds"][m0].max()
            for s, t, l in zip(tab["seed"][m0], tab["rounds"][m0], tab["test_loss"][m0]):
                key = (q, int(s), t if same else None)
                if same or (reference == "final" and t == t_ref):
                    ref[key] = l
                elif reference == "best":
                    ref[key] = min(l, ref.get(key, math.inf))
        # did the non-private reference learn: its best mean accuracy, and its
        # mean test loss at the smallest and the largest T it ran
        t0 = is_ref
        at = {t: t0 & (tab["rounds"] == t) for t in np.unique(tab["rounds"][t0])}
        by_t = {t: (np.mean(tab["accuracy"][m]), np.mean(tab["test_loss"][m])) for t, m in at.items()}
        self.reference_accuracy = max(a for a, _ in by_t.values())
        self.reference_loss = (by_t[min(by_t)][1], min(v for _, v in by_t.values()), int(min(by_t)), int(max(by_t)))
        configs = sorted({(q, s, t) for q, s, t in zip(tab["q"][private], tab["sigma"][private],
                                                       tab["rounds"][private])})
        if not configs:
            raise ValueError(f"{path} holds no private runs (sigma > 0)")
        col = {int(s): j for j, s in enumerate(self.seeds)}
        row = {c: i for i, c in enumerate(configs)}
        self.U = np.full((len(configs), len(self.seeds)), np.nan)
        self.loss = np.full_like(self.U, np.nan)
        self.acc = np.full_like(self.U, np.nan)
        self.eps = np.zeros(len(configs))
        self.eps_asym = np.zeros(len(configs))
        for j in np.flatnonzero(private):
            c = (tab["q"][j], tab["sigma"][j], tab["rounds"][j])
            i, k = row[c], col[int(tab["seed"][j])]
            key = (c[0], int(tab["seed"][j]), c[2] if same else None)
            if key not in ref:
                continue  # its reference run is not finished yet
            self.loss[i, k] = tab["test_loss"][j]
            self.acc[i, k] = tab["accuracy"][j]
            self.U[i, k] = tab["test_loss"][j] - ref[key]
            self.eps[i], self.eps_asym[i] = tab["epsilon"][j], tab["epsilon_asymptotic"][j]
        self.q = np.array([c[0] for c in configs])
        self.sigma = np.array([c[1] for c in configs])
        self.rounds = np.array([c[2] for c in configs])
        keep = ~np.all(np.isnan(self.U), axis=1)
        for name in ("q", "sigma", "rounds", "eps", "eps_asym", "U", "loss", "acc"):
            setattr(self, name, getattr(self, name)[keep])
        if not keep.any():
            raise ValueError(f"{path}: no private run has its non-private reference yet")
        # what a private pre-trial spent: every run its spend log charged (docs/theory.md §4.D), whatever
        # rows the store still holds
        from .private import charges_of_log

        self.charges = [c.__dict__ for c in charges_of_log(spend, self.clients)] if self.private else []

    def mean_utility(self, seed_cols=None) -> np.ndarray:
        U = self.U if seed_cols is None else self.U[:, seed_cols]
        with np.errstate(all="ignore"):
            return np.nanmean(U, axis=1)

    def leakage(self, epsilon: str = "exact") -> np.ndarray:
        if epsilon not in ("exact", "asymptotic"):
            raise ValueError(f"epsilon must be 'exact' or 'asymptotic', got {epsilon!r}")
        return self.eps if epsilon == "exact" else self.eps_asym


def front_indices(res: Results, utility: np.ndarray, epsilon: str = "exact") -> np.ndarray:
    """Algorithm 2: the non-dominated configurations, front taken per q."""
    eps = res.leakage(epsilon)
    out = []
    for q in np.unique(res.q):
        idx = np.flatnonzero((res.q == q) & np.isfinite(utility))
        out.extend(idx[_nds(np.column_stack([utility[idx], eps[idx]]))])
    return np.array(sorted(out), dtype=int)


def _interior(res: Results, idx: np.ndarray) -> np.ndarray:
    """Front points off the grid's box edges (σ_min, σ_max, T_min, T_max)."""
    keep = []
    for i in idx:
        m = res.q == res.q[i]
        s, t = res.sigma[m], res.rounds[m]
        if s.min() < res.sigma[i] < s.max() and t.min() < res.rounds[i] < t.max():
            keep.append(i)
    return np.array(keep, dtype=int) if len(keep) >= 2 else idx


def kappa_of(res: Results, idx) -> float:
    """Least squares on log κ = log(qN) − log(σ²T): the geometric mean."""
    idx = np.asarray(idx, dtype=int)
    if len(idx) == 0:
        return math.nan
    lk = np.log(res.q[idx] * res.clients) - np.log(res.sigma[idx] ** 2 * res.rounds[idx])
    return float(np.exp(lk.mean()))


def slope_of(res: Results, idx) -> float:
    """Least-squares slope of log T on log σ over the points (theory: −2)."""
    idx = np.asarray(idx, dtype=int)
    x, y = np.log(res.sigma[idx]), np.log(res.rounds[idx])
    if len(idx) < 2 or np.ptp(x) == 0:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def relation_distance(res: Results, idx, kappa: float) -> float:
    """Mean |ln T − ln(qN/(κσ²))| over the points: 0 on the curve, ln 2 a
    factor of two off in rounds."""
    idx = np.asarray(idx, dtype=int)
    if len(idx) == 0:
        return math.nan
    t_rel = res.q[idx] * res.clients / (kappa * res.sigma[idx] ** 2)
    return float(np.mean(np.abs(np.log(res.rounds[idx]) - np.log(t_rel))))


def within_fraction(res: Results, idx, kappa_ci) -> float:
    """Share of front points whose grid cell the relation crosses for some κ
    in its interval (the cell of T spans half-way, in log, to the
    neighbouring T of the grid)."""
    idx = np.asarray(idx, dtype=int)
    if len(idx) == 0 or not np.all(np.isfinite(kappa_ci)):
        return math.nan
    ts = np.unique(res.rounds)
    lt = np.log(ts)
    hits = 0
    for i in idx:
        j = int(np.searchsorted(ts, res.rounds[i]))
        lo = lt[j] - (lt[j] - lt[j - 1]) / 2 if j > 0 else lt[j] - (lt[1] - lt[0]) / 2 if len(lt) > 1 else -np.inf
        hi = lt[j] + (lt[j + 1] - lt[j]) / 2 if j + 1 < len(lt) else lt[j] + (lt[j] - lt[j - 1]) / 2 if j else np.inf
        qn = res.q[i] * res.clients
        band = np.log(qn / (np.array(kappa_ci)[::-1] * res.sigma[i] ** 2))  # [low T, high T]
        hits += band[0] <= hi and band[1] >= lo
    return hits / len(idx)


@dataclass
class Fit:
    """The experimental front and κ of a results store (see :func:`fit`).

    ``problems`` lists what makes κ untrustworthy (too few seeds for an
    interval, a diverged pre-trial, a front with no slope); empty when none.
    ``blocking``: those among them that make κ meaningless (the pre-trial
    did not learn, diverged, or its front has no slope): ``design(fit=...)``
    refuses such a fit.
    ``notes`` lists what is worth knowing but does not (a few runs diverged).
    """

    kappa: float
    kappa_ci: list
    slope: float
    slope_ci: list
    n_runs: int
    n_seeds: int
    n_front: int
    n_fit: int
    within_fraction: float
    distance: float
    clients: int
    q: list
    epsilon_model: str
    reference: str
    bootstrap: int
    front: list = field(repr=False)
    results: str
    spec: dict = field(repr=False)
    kappa_ci_method: str = ""         # how kappa_ci was made, and why the point is at an end of it where it is
    problems: list = field(default_factory=list)
    blocking: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    utility_models: dict = field(default_factory=dict)   # name -> UtilityModel fields (fit_utility)
    preferred_model: str = ""                            # the one held-out seeds prefer
    format: str = FIT_FORMAT
    # a private pre-trial (on the clients' data): what it spent, as charges (plain numbers) and as ε at
    # its δ; a design with this fit composes them with the training's (docs/theory.md §4.D)
    private: bool = False
    private_charges: list = field(default_factory=list)
    private_epsilon: float | None = None
    # what the pre-trial measured of the local work (docs/theory.md §4.E): LocalWork's fields, or empty
    local_work: dict = field(default_factory=dict, repr=False)
    # the store's base as the fit read it (recommendation.store_digest): its spec unedited, and which store
    # found later is its own
    results_digest: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path) -> None:
        """Write the fit as JSON (what ``design(fit=...)`` reads); atomic."""
        p = Path(path)
        if p.suffix.lower() != ".json":
            raise ValueError(f"fit file {path!r} must end in .json")
        if not p.parent.exists():
            raise ValueError(f"cannot write {path}: folder {p.parent} does not exist")
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=True) + "\n")
        tmp.replace(p)


def _notes(res: Results) -> list[str]:
    out = []
    if (res.base or {}).get("scored_on", "test") == "test" and not (res.base or {}).get("private"):
        out.append("its runs were scored on the data set's test split (as every store made before pre-trials scored "
                   "on held-out samples was): results reported on that split lean on kappa; run the pre-trial again "
                   "into a new store with scored_on held-out (the default on a public share) to fit on held-out "
                   "samples")
    if res.uncharged_gaps:
        out.append(f"{res.uncharged_gaps} run(s) its spend log charged have no rows in the store (deleted, or a sweep "
                   "interrupted before their first evaluation): they stay charged")
    bad = ~np.isfinite(res.loss) & ~np.isnan(res.U)
    if not bad.any():
        return out
    where = sorted({(float(s), int(t)) for s, t, b in zip(res.sigma, res.rounds, bad.any(axis=1)) if b})
    cells = ", ".join(f"sigma {s:g} T {t}" for s, t in where[:6]) + (" ..." if len(where) > 6 else "")
    return out + [f"{int(bad.sum())} of {int((~np.isnan(res.U)).sum())} private runs diverged ({cells}); they count "
                  "as infinitely bad"]


#: the fit says the data disagree with the relation κσ²T = qN where the
#: front's T lies off the relation's by more than this, as a mean
#: |ln T − ln T_relation| (a factor e).  Measured: a store whose losses follow
#: bound (1.2) exactly on a 8 σ × 6 T grid gives 0.72 (tests); the shipped
#: LeNet store 0.64, LR 1.10, the example's MLP 1.46.  The front's slope and
#: the share within the κ band are no test: the exact store gives −1.05 and 26 %.
DISAGREE_DISTANCE = 1.0




def _between(values, lo, hi, integer=False) -> list:
    """The geometric midpoints of neighbouring grid values in [lo, hi]."""
    v = sorted(x for x in set(values) if lo <= x <= hi)
    mids = [math.sqrt(a * b) for a, b in zip(v, v[1:])]
    return sorted({int(round(m)) for m in mids} - set(v)) if integer else [float(f"{m:.2g}") for m in mids]


def _no_slope_way_out(res: Results, fit_idx) -> str:
    """What to do about a front with no slope, in the pre-trial's terms: the
    grid change that lets the front cross several σ and T inside the grid,
    and the design that works on the same store today (the empirical mode
    fits the losses themselves and needs no slope)."""
    idx = np.asarray(fit_idx, dtype=int)
    sig, rounds = sorted(set(res.sigma.tolist())), sorted({int(t) for t in res.rounds})
    ts, ss = sorted({int(res.rounds[i]) for i in idx}), sorted({float(res.sigma[i]) for i in idx})
    where = (f"its {len(idx)} front points inside the grid all lie at T = {ts[0]}" if len(ts) == 1 and len(idx) > 1
             else f"its {len(idx)} front points inside the grid all lie at sigma = {ss[0]:g}" if len(ss) == 1
             and len(idx) > 1 else f"its {len(idx)} front points inside the grid show no trend of T with sigma")
    more_s, more_t = _between(sig, sig[0], sig[-1]), _between(rounds, rounds[0], rounds[-1], integer=True)
    change = "a finer grid lets the front cross several"
    front = front_indices(res, res.mean_utility())
    top = {float(res.sigma[i]) for i in front if res.rounds[i] == rounds[-1]}
    if len(top) >= max(2, len(sig) // 2):
        # the front runs along the grid's top edge: the model still learns at T_max, so the front's bend (and
        # its slope) lies beyond the grid; longer training shows it, a finer grid inside would not
        where += (f"; the front runs along the grid's top edge T = {rounds[-1]} at {len(top)} of {len(sig)} sigmas "
                  "(still learning there)")
        more_s, more_t = [], [2 * rounds[-1], 4 * rounds[-1]]
        change = "longer training lets it bend inside the grid"
    grid = " and ".join(x for x in (f"sigmas {', '.join(f'{v:g}' for v in more_s)}" if more_s else "",
                                    f"rounds {', '.join(map(str, more_t))}" if more_t else "") if x)
    seeds = res.U.shape[1]
    return (f"{where}: {change} (add {grid or 'more sigma and T values'} to the "
            f"pre-trial{'' if seeds >= MIN_SEEDS_FOR_INTERVAL else f', and seeds up to at least 3 (it ran {seeds})'}"
            "), or design from this store as it is (the empirical mode, which needs no slope)")


def _problems(res: Results, kappa, kappa_ci, slope, distance=math.nan, bootstrap=1, fit_idx=()) -> list[str]:
    out = []
    first, best, t_lo, t_hi = res.reference_loss
    chance = 1.0 / res.classes if res.classes else None
    # a private pre-trial's reference is its least noisy run (docs/theory.md §4.D): when that did not learn,
    # the grid's noise is the likelier cause than the model
    ref, fix = (("even the least noisy run (a private pre-trial has no run without noise)",
                 "its noise is too large for the clients' data: a private pre-trial needs a larger epsilon or more "
                 "clients (docs/results.md section 11), or borrow kappa") if res.private else
                ("even non-private training", "check the model, lr and data"))
    if chance is not None and res.reference_accuracy <= 1.2 * chance:
        out.append(f"{ref} stayed at chance: its best mean test accuracy is {100 * res.reference_accuracy:.1f} % "
                   f"where guessing gets {100 * chance:.1f} % ({res.classes} classes): the pre-trial learned nothing, "
                   f"so kappa means nothing; {fix}")
    elif t_hi > t_lo and first > 0 and not (best < 0.99 * first):
        out.append(f"{ref} did not learn: its test loss is never below {first:.4g}, its loss after {t_lo} rounds, "
                   f"up to {t_hi}: the pre-trial learned nothing, so kappa means nothing; {fix}")
    if bootstrap == 0:
        out.append("no bootstrap (--bootstrap 0): kappa has no interval; use at least 200 resamples")
    n_seeds = res.U.shape[1]
    if n_seeds < MIN_SEEDS_FOR_INTERVAL:
        out.append(f"only {n_seeds} seed{'s' if n_seeds != 1 else ''}: a bootstrap over seeds cannot give an "
                   "interval (run at least 3, better 5)")
    elif np.all(np.isfinite(kappa_ci)) and kappa_ci[1] - kappa_ci[0] <= 1e-12 * max(abs(kappa), 1.0):
        out.append("the kappa interval has width zero: too few seeds or grid points to measure it")
    loss = res.loss[np.isfinite(res.loss)]
    n_inf, n_all = int(np.sum(~np.isfinite(res.loss))), int(np.sum(~np.isnan(res.U)))
    if n_inf > 0.25 * n_all:
        out.append(f"{n_inf} of {n_all} private runs diverged (infinite or NaN loss): lower lr or clip")
    if loss.size and float(np.median(loss)) > 20.0:
        out.append(f"the pre-trial diverged: median test loss {float(np.median(loss)):.3g} (chance level is a "
                   "few units); lower lr or clip and run it again")
    if not math.isfinite(kappa):
        out.append("no front point to fit kappa on")
    if not math.isfinite(slope) or abs(slope) < 0.05:
        out.append(f"the front has no slope in the sigma-T plane (slope {slope:.2g}, theory -2): kappa does not "
                   f"describe it; {_no_slope_way_out(res, fit_idx)}")
    elif math.isfinite(distance) and distance > DISAGREE_DISTANCE:
        out.append(f"the front disagrees with the relation kappa sigma^2 T = qN: its T is off the relation's by a "
                   f"factor {math.exp(distance):.1f} on average (mean |ln T - ln T_relation| = {distance:.2f}; data "
                   f"that follow the bound give about 0.7), its slope is {slope:.2f} where the theory has -2; the "
                   f"closed form's design may miss the best T: design from the store itself (paretofl design "
                   f"--from-store {command_path(res.path)})")
    return out


def fit(path, epsilon: str = "exact", reference: str = "best", bootstrap: int = 1000, seed: int = 0) -> Fit:
    """The experimental front and κ of a results store (a file path), with
    bootstrap intervals over seeds: a :class:`Fit`."""
    if isinstance(bootstrap, bool) or not (isinstance(bootstrap, int) and 0 <= bootstrap <= 100_000):
        raise ValueError(f"bootstrap must be an integer in [0, 100000], got {bootstrap!r}")
    res = Results(path, reference)
    u = res.mean_utility()
    idx = front_indices(res, u, epsilon)
    fit_idx = _interior(res, idx)
    kappa, slope = kappa_of(res, fit_idx), slope_of(res, fit_idx)
    rng = np.random.default_rng(seed)
    ks, ss = [], []
    n_seeds = res.U.shape[1]
    for _ in range(bootstrap if n_seeds >= MIN_SEEDS_FOR_INTERVAL else 0):
        cols = rng.integers(0, n_seeds, n_seeds)
        ub = res.mean_utility(cols)
        ib = _interior(res, front_indices(res, ub, epsilon))
        ks.append(kappa_of(res, ib))
        ss.append(slope_of(res, ib))

    def ci(v):
        v = np.asarray(v, dtype=float)
        v = v[np.isfinite(v)]
        return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if len(v) >= 10 else [math.nan] * 2

    kappa_ci, slope_ci = ci(ks), ci(ss)
    method = _interval_method(kappa, kappa_ci, ks, n_seeds, bootstrap)
    within = float(within_fraction(res, idx, kappa_ci))
    distance = relation_distance(res, idx, kappa)
    eps = res.leakage(epsilon)
    front = [[float(res.sigma[i]), int(res.rounds[i]), float(res.q[i]), float(u[i]), float(eps[i])] for i in idx]
    f = Fit(
        kappa=kappa, kappa_ci=kappa_ci, slope=slope, slope_ci=slope_ci,
        n_runs=res.n_runs, n_seeds=int(n_seeds), n_front=len(idx), n_fit=len(fit_idx),
        within_fraction=within, distance=distance,
        clients=res.clients, q=sorted({float(x) for x in res.q}), epsilon_model=epsilon, reference=reference,
        bootstrap=bootstrap, kappa_ci_method=method, front=front, results=str(Path(res.path).resolve()), spec=res.base,
        problems=(probs := _problems(res, kappa, kappa_ci, slope, distance, bootstrap, fit_idx)),
        blocking=[p for p in probs if p.startswith(FIT_BLOCKING)], notes=_notes(res),
        private=res.private, private_charges=_plain_charges(res.charges),
        private_epsilon=_private_epsilon(res), local_work=(lw := _local_work(path, seed))[0],
        results_digest=store_digest(res.base),
        **_utility_summary(path, reference))
    if lw[1]:
        f.notes.append(lw[1])
    return f


def _local_work(path, seed) -> tuple[dict, str | None]:
    from .local_work import fit_local_work

    lw, why = fit_local_work(path, seed=seed)
    return ({} if lw is None else lw.to_dict()), why


def _interval_method(kappa, kappa_ci, ks, n_seeds, bootstrap) -> str:
    """How κ's interval was made, in words; where the estimate sits at an
    end of it (or past one), why: a front on a grid takes few values, and a
    percentile interval of few values ends on them."""
    if n_seeds < MIN_SEEDS_FOR_INTERVAL:
        return (f"none: {n_seeds} seed{'s' if n_seeds != 1 else ''} (a bootstrap over seeds needs at least "
                f"{MIN_SEEDS_FOR_INTERVAL})")
    if not all(map(math.isfinite, kappa_ci)):
        return "none: no bootstrap" if bootstrap == 0 else "none: too few resamples gave a front to fit"
    text = f"95 % percentile bootstrap over the {n_seeds} seeds ({bootstrap} resamples)"
    if not math.isfinite(kappa):
        return text
    lo, hi = kappa_ci
    tol = 1e-9 * abs(kappa)
    v = np.asarray(ks, dtype=float)
    same = float(np.mean(np.abs(v[np.isfinite(v)] - kappa) <= tol)) if np.isfinite(v).any() else 0.0
    if kappa < lo - tol or kappa > hi + tol:
        return text + ("; the estimate lies outside it: most resamples' fronts differ from the data's, so the "
                       "interval says more about kappa's spread than where it is")
    if abs(kappa - lo) <= tol or abs(kappa - hi) <= tol:
        end = "lower" if abs(kappa - lo) <= tol else "upper"
        return text + (f"; {100 * same:.0f} % of resamples give exactly this kappa (a front on a grid takes few "
                       f"values), so the estimate is the interval's {end} end")
    return text


def _plain_charges(rows) -> list:
    return [{"sampling": r["sampling"], "rate": float(r["rate"]), "noise_multiplier": float(r["noise_multiplier"]),
             "steps": int(r["steps"])} for r in rows]


def _private_epsilon(res) -> float | None:
    if not res.private:
        return None
    from ..theory.privacy import account, charges_from_data

    return account(charges_from_data(_plain_charges(res.charges)), float(res.base.get("delta", 1e-5)))


def _utility_summary(path, reference) -> dict:
    try:
        r = fit_utility(path, reference)
    except ValueError:
        return {}
    return {"utility_models": {k: m.to_dict() for k, m in r["models"].items()}, "preferred_model": r["preferred"]}


# --------------------------------------------------------------------------
# utility models over (σ²/q, T): the bound, and one that can bend
# --------------------------------------------------------------------------
#: the models `fit_utility` compares: the bound (1.2) with free constants, and
#: the bound plus a term growing with σ²T (noise accumulating over rounds)
UTILITY_MODELS = ("bound", "bend")


def _features(sigma, rounds, q, n, model):
    s2 = np.asarray(sigma, float) ** 2 / (np.asarray(q, float) * n)
    t = np.asarray(rounds, float)
    cols = [1.0 / t, s2, np.ones_like(t), -np.ones_like(t)]
    if model == "bend":
        cols.append(s2 * t)
    return np.column_stack(cols)


def _nnls_fit(X, y, w):
    from scipy.optimize import nnls

    coef, _ = nnls(X * w[:, None], y * w)
    return coef


@dataclass
class UtilityModel:
    """u(σ, T, q) = a/T + b·σ²/(qN) + c + d·σ²T/(qN) (d = 0 for "bound"),
    fitted to a pre-trial's utility losses; a, b, d >= 0."""

    name: str
    a: float
    b: float
    c: float
    d: float
    cv_error: float           # leave-one-seed-out weighted squared error (lower is better)
    clients: int

    @property
    def kappa(self) -> float:
        return self.b / self.a if self.a > 0 else math.inf

    def predict(self, sigma, rounds, q, n_clients=None):
        n = self.clients if n_clients is None else n_clients
        s2 = np.asarray(sigma, float) ** 2 / (np.asarray(q, float) * n)
        t = np.asarray(rounds, float)
        return self.a / t + self.b * s2 + self.c + self.d * s2 * t

    def to_dict(self) -> dict:
        return asdict(self)


def fit_utility(path, reference: str = "best") -> dict:
    """Fit both :data:`UTILITY_MODELS` to a store's seed-averaged utility
    losses (non-negative least squares, weighted towards relative error) and
    compare them on held-out seeds (leave one seed out).  Returns
    {"models": {name: UtilityModel}, "preferred": name}."""
    res = Results(path, reference)
    u = res.mean_utility()
    ok = np.isfinite(u)
    if ok.sum() < 6:
        raise ValueError(f"{path}: too few finished configurations for a utility model")
    scale = float(np.median(np.abs(u[ok]))) or 1.0
    w = 1.0 / (np.abs(u) + 0.1 * scale)
    n_seeds = res.U.shape[1]
    models = {}
    for name in UTILITY_MODELS:
        X = _features(res.sigma, res.rounds, res.q, res.clients, name)
        coef = _nnls_fit(X[ok], u[ok], w[ok])
        errs = []
        for k in range(n_seeds if n_seeds > 1 else 0):
            others = np.delete(np.arange(n_seeds), k)
            u_tr = res.mean_utility(others)
            held = res.U[:, k]
            m = np.isfinite(u_tr) & np.isfinite(held)
            if m.sum() < 6:
                continue
            ck = _nnls_fit(X[m], u_tr[m], w[m])
            errs.append(float(np.mean((w[m] * (X[m] @ ck - held[m])) ** 2)))
        a, b, cp, cm = coef[:4]
        d = coef[4] if name == "bend" else 0.0
        models[name] = UtilityModel(name, float(a), float(b), float(cp - cm), float(d),
                                    float(np.mean(errs)) if errs else math.nan, res.clients)
    cv = {k: m.cv_error for k, m in models.items()}
    preferred = "bend" if (np.isfinite(cv["bend"]) and cv["bend"] < cv["bound"] and models["bend"].d > 0) \
        else "bound"
    return {"models": models, "preferred": preferred}
