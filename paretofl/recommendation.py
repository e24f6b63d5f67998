"""The recommendation: privacy budget in, (q, T, σ) out (docs/theory.md §4).

Given N clients, a budget (ε, δ), an efficiency budget T̃ and the constant κ
of the relation κσ²T = qN, :func:`design` returns the (q, T, σ) with the
lowest utility bound (1.2) whose *exact* ε (RDP accountant, docs/theory.md §5) stays
within the budget.  The closed form (Theorem 3, walked along its pieces until
the budget is spent) is the map; the accountant is the law: the search runs
on the accountant directly, and the result reports how far it lies from the
closed-form point.

No torch here: ``paretofl design`` must start fast.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path

import numpy as np

from .theory import pareto
from .theory.privacy import (
    DEFAULT_ORDERS,
    FLOWER_ORDERS,
    FRAMEWORKS,
    check_delta,
    compute_epsilon,
    max_steps,
    mechanism_charge,
    rdp_curve,
    rdp_to_epsilon,
)

__all__ = ["design", "Design", "InfeasibleBudget", "PLACEHOLDER_KAPPA", "load_kappa", "default_kappa",
           "DESIGN_MECHANISMS", "FRAMEWORKS", "accounting", "sum_noise_multiplier", "shipped_fit"]

#: PLACEHOLDER, not a measurement: the κ used when neither kappa nor fit is
#: given and no shipped pre-trial fit can be read.  κ = 0.05 pairs σ = 1 with
#: T = 20·qN rounds on the relation κσ²T = qN.
PLACEHOLDER_KAPPA = 0.05

MAX_CLIENTS = 1_000_000

#: the mechanisms a design can be made for (docs/theory.md §5)
DESIGN_MECHANISMS = ("client-aggregate", "client-local")


def shipped_fit(name: str = "lr_fmnist") -> Path:
    """Path of a fit shipped with the package (``paretofl/data/NAME_fit.json``):
    ``lr_fmnist`` (the default κ) or ``lenet_fmnist``."""
    return Path(str(resources.files("paretofl") / "data" / f"{name}_fit.json"))


class InfeasibleBudget(ValueError):
    """No allowed (q, T, σ) meets the budget; carries the smallest ε reachable."""

    def __init__(self, epsilon: float, min_epsilon: float, where: dict):
        self.epsilon, self.min_epsilon, self.where = epsilon, min_epsilon, where
        super().__init__(
            f"budget epsilon={epsilon:g} cannot be met: the smallest epsilon any allowed (q, T, sigma) "
            f"reaches is {min_epsilon:.4g} (q={where['q']:g}, T=1, sigma={where['sigma']:g}); "
            "raise epsilon or sigma_max, or lower q"
        )


def load_kappa(path) -> float:
    """κ from a fit file written by ``paretofl fit`` (JSON with key ``kappa``)."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"fit file {p} is a folder, not a fit file")
    if not p.is_file():
        raise ValueError(f"fit file {p} does not exist")
    try:
        data = json.loads(p.read_text())
        kappa = float(data["kappa"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"fit file {p} is not a paretofl fit (needs a numeric 'kappa'): {exc}") from None
    if not (kappa > 0) or math.isinf(kappa):
        raise ValueError(f"fit file {p} holds an invalid kappa {kappa}")
    return kappa


def default_kappa() -> tuple[float, str]:
    """The shipped LR pre-trial's κ (package data), else the placeholder."""
    p = shipped_fit()
    if p.is_file():
        return load_kappa(p), "shipped fit lr_fmnist_fit.json"
    return PLACEHOLDER_KAPPA, "placeholder (no fit given; see PLACEHOLDER_KAPPA)"


def accounting(mechanism: str, q: float, n_clients: int, framework: str = "paretofl") -> tuple[str, float]:
    """(sampling, charged noise multiplier per unit σ) of ``mechanism`` at rate
    q with N clients: :func:`paretofl.theory.privacy.mechanism_charge` at σ = 1."""
    if mechanism not in DESIGN_MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(DESIGN_MECHANISMS)}, got {mechanism!r}")
    c = mechanism_charge(mechanism, q, 1.0, n_clients, framework)
    return c.sampling, c.noise_multiplier


def sum_noise_multiplier(mechanism: str, q: float, sigma: float, n_clients: int) -> float:
    """The noise std on what is released, in units of C: σ√(qN) on the
    aggregate's sum, σ on a local update."""
    return mechanism_charge(mechanism, q, sigma, n_clients).released


@dataclass
class Design:
    """A recommendation.  ``sigma`` is each client's noise multiplier in Gu
    et al.'s units; ``noise_multiplier`` is the noise std on what is
    released in units of C (σ√(qN) on the aggregate's sum: Flower's
    ``noise_multiplier``); ``charged_noise_multiplier`` is what the
    accountant charged (half that in Flower, whose neighbours replace a
    client); ``sampling`` the scheme it charged."""

    q: float
    rounds: int
    sigma: float
    epsilon: float
    delta: float
    case: str
    utility_bound: float
    kappa: float
    kappa_source: str
    mechanism: str
    noise_multiplier: float
    charged_noise_multiplier: float
    sampling: str
    framework: str
    sigma_relation: float
    closed_form: dict = field(default_factory=dict)
    distance: dict = field(default_factory=dict)
    budget: float = 0.0
    n_clients: int = 0
    max_rounds: int = 0
    sigma_min: float = 0.0
    sigma_max: float = 0.0
    notes: list = field(default_factory=list)
    utility_model: str = "closed form"          # or the empirical mode's "bound" / "bend" model
    predicted_utility_loss: float | None = None  # the empirical mode's prediction, in loss units
    # the rest of the recipe: clipping norm, clients' learning rate, local
    # epochs and batch (None where nothing said them), where each came from,
    # and the public tuning's table and update norms (design(tune=...))
    clip: float | None = None
    lr: float | None = None
    local_epochs: int | None = None
    batch_size: int | None = None
    sources: dict = field(default_factory=dict, repr=False)
    tuning: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        # plain Python numbers, so that the repr and JSON read as written
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.generic):
                setattr(self, f.name, v.item())
            elif isinstance(v, dict):
                setattr(self, f.name, {k: (x.item() if isinstance(x, np.generic) else x) for k, x in v.items()})

    @property
    def clients_per_round(self) -> float:
        """qN, the expected cohort (an integer where it is one)."""
        c = self.q * self.n_clients
        return int(round(c)) if abs(c - round(c)) < 1e-9 else c

    def to_dict(self) -> dict:
        return asdict(self)

    def statement(self) -> str:
        """The privacy statement to publish with a deployment of this design
        (Ponomareva et al. 2023, "How to DP-fy ML", §5.3): guarantee, unit,
        neighbours, what is released, who is trusted, sampling, accountant,
        and the privacy cost of choosing the hyperparameters."""
        return privacy_statement(self)

    def __str__(self) -> str:
        return (f"Design(q={self.q:.4g}, rounds={self.rounds}, sigma={self.sigma:.4g}, epsilon={self.epsilon:.4g}, "
                f"delta={self.delta:g}, mechanism={self.mechanism!r}, utility_bound={self.utility_bound:.4g})")


# --------------------------------------------------------------------------
# the exact search for one q: branch and bound on σ
# --------------------------------------------------------------------------
def _tmax(eps, q, s, delta, orders, acct):
    sampling, zf = acct
    return max_steps(eps, q, np.asarray(s) * zf, delta, orders, sampling=sampling)


def _initial_grid(q, eps, delta, t_cap, s_lo, s_hi, orders, acct):
    """T(σ) = min(t_cap, T_max(σ)) on 17 geometric σ's: the search's start."""
    s = np.geomspace(s_lo, s_hi, 17) if s_hi > s_lo else np.array([s_lo])
    return s, np.minimum(t_cap, _tmax(eps, q, s, delta, orders, acct))


def _best_for_q(q, n, eps, delta, t_cap, s_lo, s_hi, kappa, orders, acct, incumbent=math.inf, grid=None):
    """Minimise u = 1/T + κσ²/(qN) over σ ∈ [s_lo, s_hi], integer T ∈ [1, t_cap],
    subject to ε_exact(q, T, σ) <= eps.  Optimal to a relative 1e-4 in u
    (and 1e-8 in σ).

    For each σ the best T is T(σ) = min(t_cap, T_max(σ)), with T_max from the
    accountant in closed form (:func:`max_steps`); T(σ) is a non-decreasing
    step function, and the optimum for each value of T sits at the least σ
    that reaches it.  An interval (a, b] of σ holds values T(a)..T(b), so
    1/T(b) + κa²/(qN) bounds u from below on it: intervals whose bound
    cannot beat the incumbent are dropped, others are split (15 points at a
    time, vectorised), and an interval holding a single new T is resolved by
    bisection for its least σ.  Returns (u, T, σ) or None.
    """
    c = kappa / (q * n)

    def tmax(s):
        return np.minimum(t_cap, _tmax(eps, q, s, delta, orders, acct))

    def u(t, s):
        return 1.0 / t + c * s * s

    s, t = grid if grid is not None else _initial_grid(q, eps, delta, t_cap, s_lo, s_hi, orders, acct)
    if t[-1] < 1:
        return None
    best = (math.inf, None, None)

    def offer(tt, ss):
        nonlocal best
        for ti, si in zip(np.atleast_1d(tt), np.atleast_1d(ss)):
            if ti >= 1 and u(ti, si) < best[0]:
                best = (u(ti, si), int(ti), float(si))

    offer(t, s)
    heap = []

    def push(a, b, ta, tb):
        if tb > ta and tb >= 1:
            heapq.heappush(heap, (u(tb, a), a, b, int(ta), int(tb)))

    for j in range(1, len(s)):
        push(s[j - 1], s[j], t[j - 1], t[j])
    tol = 1e-4
    while heap:
        lb, a, b, ta, tb = heapq.heappop(heap)
        if lb >= min(best[0], incumbent) * (1 - tol):
            break
        if tb - max(ta, 0) == 1:
            # one new T value: bisect (16-way) for the least σ that reaches it
            lo, hi = a, b
            while hi / lo > 1 + 1e-8:
                pts = np.geomspace(lo, hi, 17)[1:-1]
                ok = tmax(pts) >= tb
                k = int(np.argmax(ok)) if ok.any() else len(pts)
                lo = pts[k - 1] if k > 0 else lo
                hi = pts[k] if k < len(pts) else hi
            offer(tb, hi)
        else:
            pts = np.geomspace(a, b, 17)
            tp = tmax(pts[1:-1])
            ts = np.concatenate([[ta], tp, [tb]])
            offer(tp, pts[1:-1])
            for j in range(1, len(pts)):
                push(pts[j - 1], pts[j], ts[j - 1], ts[j])
    return best if best[1] is not None else None


def _closed_form_for_q(q, n, eps, delta, t_cap, s_lo, s_hi, kappa, orders, acct):
    """The map: walk Theorem 3's Pareto set (continuous T) from the most
    private end, where the utility bound is worst, and stop where the exact
    ε reaches the budget.  Along the set ε rises and u falls, so this is a
    bisection on the position along the concatenated pieces."""
    ps = pareto.theorem3(q, n, kappa, s_lo, s_hi, t_cap, n_points=400)
    pts = np.vstack([p.points for p in ps.pieces])
    sampling, zf = acct

    def epsilon(i):
        s, tt = pts[i]
        return compute_epsilon(q, s * zf, max(1, int(math.floor(tt))), delta, sampling, orders=orders)

    if epsilon(0) > eps:
        return None
    lo, hi = 0, len(pts) - 1
    if epsilon(hi) <= eps:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if epsilon(mid) <= eps:
            lo = mid
        else:
            hi = mid
    s, tt = pts[lo]
    tt = max(1, int(math.floor(tt)))
    return {"q": q, "rounds": tt, "sigma": float(s), "utility_bound": 1 / tt + kappa * s * s / (q * n),
            "epsilon": epsilon(lo)}


def _q_candidates(n, q, q_min, q_max, mechanism):
    if q is not None:
        return [float(q)]
    lo = q_min if q_min is not None else 1.0 / n
    if not (0 < lo <= q_max <= 1):
        raise ValueError(f"empty or invalid q range [{lo:g}, {q_max:g}]; it must lie in (0, 1] with q_min <= q_max")
    m = np.arange(math.ceil(lo * n - 1e-9), math.floor(q_max * n + 1e-9) + 1)
    m = m[m >= 1]
    if m.size == 0:
        raise ValueError(f"no cohort size m with q = m/N in [{lo:g}, {q_max:g}] for N = {n}")
    if m.size > 24:  # keep the search short: 24 cohort sizes, geometric, ends included
        m = np.unique(np.round(np.geomspace(m[0], m[-1], 24)).astype(int))
    return [float(k) / n for k in m]


def design(
    n_clients: int,
    epsilon: float,
    delta: float = 1e-5,
    max_rounds: int | None = None,
    time_budget: float | None = None,
    round_time: float | None = None,
    q: float | None = None,
    q_min: float | None = None,
    q_max: float | None = None,
    sigma_min: float = 0.3,
    sigma_max: float = 30.0,
    kappa: float | None = None,
    fit: str | None = None,
    mechanism: str = "client-aggregate",
    framework: str = "paretofl",
    from_store: str | None = None,
    utility_model: str | None = None,
    orders=None,
    budgets=None,
    tune=None,
    clips=None,
    lrs=None,
    tune_by="accuracy",
    progress=False,
) -> Design:
    """Recommend (q, T, σ) for a DPFL deployment (docs/theory.md §4).

    Parameters
    ----------
    n_clients : N, the number of clients.
    epsilon, delta : the privacy budget (ε, δ).
    max_rounds : the most rounds T̃; or ``time_budget`` / ``round_time``
        (seconds, or any unit); given together, the tighter one binds.
    q : a fixed sampling ratio; otherwise q ranges over the cohort sizes m/N
        in [q_min, q_max] (default [1/N, 1]; all of them up to 24, else 24
        spread geometrically).  ``q`` and a range exclude each other.
    sigma_min, sigma_max : the noise multipliers allowed per client.
    kappa, fit : the constant of κσ²T = qN, or a fit file with it; default:
        the fit of the shipped LR pre-trial.
    mechanism : "client-aggregate" (noise multiplier σ√(qN) charged,
        Poisson-subsampled) or "client-local" (σ at each participation).
    framework : "paretofl" (its trainer's Poisson sampling), "flower"
        (m = qN clients drawn without replacement, accounted by paretofl) or
        "flower-accounted" (Flower's own accountant on: no amplification by
        sampling, so that Flower's reported ε, its ``max_epsilon`` and
        ``PrivacyBudgetExhausted`` enforce this budget); see
        :mod:`paretofl.integrations.flower`.
    from_store : the empirical mode: instead of the closed form, a model of
        the utility loss fitted to this pre-trial store over (σ²/(qN), T) —
        ``utility_model`` "bound" (1.2) with free constants, or "bend", which
        adds a term growing with σ²T; default: the one its held-out seeds
        prefer — minimised under the same exact accountant.
    budgets : clients with budgets of their own (instead of ``epsilon``): a
        budgets CSV file (``client,epsilon`` or ``share,epsilon``) or a
        :class:`paretofl.budgets.Budgets`; returns a
        :class:`paretofl.budgets.GroupDesign` (docs/theory.md §4.B).
    tune : a pre-trial results store: after (q, T, σ) are chosen, train the
        (``clips`` × ``lrs``) grid on its public share at the design's noise
        on the average and T (three seeds; torch is imported) and
        return the pair with the highest test accuracy (``tune_by``
        "accuracy") or lowest test loss ("loss") as the recipe's C and η
        (:func:`paretofl.pretrial.tune.tune`, docs/theory.md §4.C).  Without
        it, C, η, the local epochs and batch are those of the pre-trial κ
        came from, where that is known.

    Returns a :class:`Design`; raises :class:`InfeasibleBudget` (a
    ValueError) when no allowed point meets ε, and ValueError for bad input.
    ``notes`` says when a bound binds, the budget is not spent, or the
    budget is too small to learn.
    """
    if orders is None:   # Flower's own accountant reports on its orders: design on them
        orders = FLOWER_ORDERS if framework == "flower-accounted" else DEFAULT_ORDERS
    n = _int_at_least(n_clients, 1, "n_clients")
    if n > MAX_CLIENTS:
        raise ValueError(f"n_clients must be at most {MAX_CLIENTS:,}, got {n:,}")
    if budgets is None:
        _pos(epsilon, "epsilon")
    elif epsilon is not None:
        raise ValueError("give either epsilon (one budget for all) or budgets (a budget per client), not both")
    check_delta(delta, n)
    _pos(sigma_min, "sigma_min")
    _pos(sigma_max, "sigma_max")
    if sigma_min > sigma_max:
        raise ValueError(f"empty sigma range: sigma_min {sigma_min:g} > sigma_max {sigma_max:g}")
    if sigma_min < 1e-4 or sigma_max > 1e6:
        raise ValueError(f"the sigma range [{sigma_min:g}, {sigma_max:g}] must lie within [1e-4, 1e6]")
    if mechanism not in DESIGN_MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(DESIGN_MECHANISMS)}, got {mechanism!r}")
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if q is not None:
        if q_min is not None or q_max is not None:
            raise ValueError("give either q (fixed) or a range q_min/q_max, not both")
        if not isinstance(q, (int, float)) or not (0 < q <= 1):
            raise ValueError(f"q must lie in (0, 1], got {q}")
    caps = []
    if max_rounds is not None:
        caps.append(_int_at_least(max_rounds, 1, "max_rounds"))
    if time_budget is not None or round_time is not None:
        if time_budget is None or round_time is None:
            raise ValueError("time_budget needs round_time (and the other way round)")
        caps.append(pareto.rounds_for_time(time_budget, round_time))
    if not caps:
        raise ValueError("give an efficiency budget: max_rounds, or time_budget with round_time")
    t_cap = min(caps)
    if sum(x is not None for x in (kappa, fit, from_store)) > 1:
        raise ValueError("give one of kappa, fit or from_store")
    model = None
    if from_store is not None:
        from .pretrial.fit import UTILITY_MODELS, fit_utility

        if utility_model is not None and utility_model not in UTILITY_MODELS:
            raise ValueError(f"utility_model must be one of {', '.join(UTILITY_MODELS)}, got {utility_model!r}")
        fitted = fit_utility(from_store)
        model = fitted["models"][utility_model or fitted["preferred"]]
        if not (model.a > 0):
            raise ValueError(f"the {model.name} model of {from_store} has no 1/T term: it cannot choose T")
        kappa, kappa_source = max(model.kappa, 1e-12), f"{model.name} model of {from_store}"
    elif utility_model is not None:
        raise ValueError("utility_model needs from_store")
    if model is None:
        if kappa is not None:
            kappa_source = "given"
            _pos(kappa, "kappa")
        elif fit is not None:
            kappa, kappa_source = load_kappa(fit), f"fit {fit}"
        else:
            kappa, kappa_source = default_kappa()

    if tune is None and (clips is not None or lrs is not None):
        raise ValueError("clips and lrs are the grid of tune: give tune (a pre-trial store) too")
    if tune is not None:
        if not Path(tune).is_file():
            raise ValueError(f"tune: results file {tune} does not exist")
        if budgets is not None or mechanism != "client-aggregate":
            raise ValueError("tune chooses C and the learning rate for client-aggregate DP-FedAvg with one budget")
        from .pretrial.tune import CLIPS, LRS, SELECT, check_grid

        if tune_by not in SELECT:
            raise ValueError(f"tune_by must be one of {', '.join(SELECT)}, got {tune_by!r}")
        clips = check_grid(CLIPS if clips is None else clips, "clip")
        lrs = check_grid(LRS if lrs is None else lrs, "learning-rate")
    if budgets is not None:
        from .budgets import Budgets, design_groups, read_budgets

        if model is not None:
            raise ValueError("per-client budgets are designed with the closed form: give kappa or fit, not from_store")
        if framework != "paretofl":
            raise ValueError("Flower samples every client at one rate: per-client budgets run in paretofl's trainer "
                             "(docs/api.md says what Flower can run instead)")
        if q is not None or q_min is not None:
            raise ValueError("per-client budgets design each group's rate: give q_max at most")
        b = budgets if isinstance(budgets, Budgets) else read_budgets(budgets, n)
        if b.n_clients != n:
            raise ValueError(f"the budgets are for {b.n_clients} clients, not {n}")
        return design_groups(b, delta, t_cap, kappa, kappa_source, mechanism, 1.0 if q_max is None else q_max,
                             sigma_min, sigma_max, orders)
    qs = _q_candidates(n, q, q_min, 1.0 if q_max is None else q_max, mechanism)
    if framework.startswith("flower") and any(abs(qq * n - round(qq * n)) > 1e-9 for qq in qs):
        raise ValueError(f"Flower samples a whole number of clients: q = {q:g} times {n} clients is not one")
    accts = {qq: accounting(mechanism, qq, n, framework) for qq in qs}   # validates qN >= 1
    args = (n, epsilon, delta, t_cap, sigma_min, sigma_max, kappa, orders)
    best, per_q = None, {}
    if model is not None:   # a coarse pass over every q, then the three best refined
        found = {qq: _best_for_model(model, qq, n, epsilon, delta, t_cap, sigma_min, sigma_max, orders, accts[qq],
                                     refine=False) for qq in qs}
        for _, qq in sorted((r[0], qq) for qq, r in found.items() if r is not None)[:3]:
            found[qq] = _best_for_model(model, qq, n, epsilon, delta, t_cap, sigma_min, sigma_max, orders, accts[qq])
    else:
        # a coarse grid for every q first; the exact search then visits the
        # q's best-first, so that the incumbent prunes the others early
        grids = {qq: _initial_grid(qq, epsilon, delta, t_cap, sigma_min, sigma_max, orders, accts[qq]) for qq in qs}

        def grid_best(qq):
            s, t = grids[qq]
            ok = t >= 1
            return float(np.min(1 / t[ok] + kappa * s[ok] ** 2 / (qq * n))) if ok.any() else math.inf

        found = {}
        for qq in sorted(qs, key=grid_best):
            incumbent = min((r[0] for r in found.values() if r is not None), default=math.inf)
            found[qq] = _best_for_q(qq, *args, acct=accts[qq], incumbent=incumbent, grid=grids[qq])
    for qq, r in found.items():
        if r is not None:
            per_q[qq] = r[0]
            if best is None or r[0] < best[0][0]:
                best = (r, qq)
    if best is None:
        eps1 = [compute_epsilon(qq, sigma_max * accts[qq][1], 1, delta, accts[qq][0], orders=orders) for qq in qs]
        k = int(np.argmin(eps1))
        raise InfeasibleBudget(epsilon, eps1[k], {"q": qs[k], "sigma": sigma_max})

    (u, T, sig), qb = best
    sampling, zf = accts[qb]
    z = sig * zf
    eps_exact = compute_epsilon(qb, z, T, delta, sampling, orders=orders)
    if framework == "flower-accounted":   # Flower reports on its orders, not refined between them: the larger
        eps_exact = max(eps_exact, rdp_to_epsilon(orders, T * rdp_curve(sampling, qb, z, orders), delta)[0])
    if eps_exact > epsilon * (1 + 1e-12):  # never report a point past the budget
        raise RuntimeError(f"internal error: design point spends epsilon {eps_exact} > budget {epsilon}")

    cf = _closed_form_for_q(qb, *args, acct=accts[qb])  # the map, at the chosen q
    case = pareto.theorem3(qb, n, kappa, sigma_min, sigma_max, t_cap).case
    distance = {}
    if cf is not None:
        distance = {"sigma_rel": sig / cf["sigma"] - 1.0, "rounds_rel": T / cf["rounds"] - 1.0,
                    "utility_rel": u / cf["utility_bound"] - 1.0}
    d = Design(q=qb, rounds=T, sigma=sig, epsilon=eps_exact, delta=delta, case=case, utility_bound=u, kappa=kappa,
               kappa_source=kappa_source, mechanism=mechanism,
               noise_multiplier=sum_noise_multiplier(mechanism, qb, sig, n), charged_noise_multiplier=z,
               sampling=sampling, framework=framework,
               sigma_relation=float(pareto.relation_sigma(T, qb, n, kappa)), closed_form=cf or {},
               distance=distance, budget=epsilon, n_clients=n, max_rounds=t_cap, sigma_min=sigma_min,
               sigma_max=sigma_max)
    if model is not None:
        d.utility_model = model.name
        d.predicted_utility_loss = float(model.predict(sig, T, qb, n))
        d.utility_bound = float(1.0 / T + kappa * sig * sig / (qb * n))
    d.notes = _notes(d, capped_by_time=len(caps) == 2 and caps[1] < caps[0])
    if q is None and len(qs) > 1:
        d.notes.append(_why_q(d, per_q, qs))
    _recipe(d, q, kappa_spec(kappa_source, fit, from_store), tune, clips, lrs, tune_by, progress)
    return d


def kappa_spec(kappa_source: str, fit, from_store) -> dict | None:
    """The pre-trial spec κ came from (its C, η, local epochs, batch), where known."""
    try:
        if from_store is not None:
            from .pretrial.tune import spec_of_store

            return spec_of_store(from_store).to_dict()
        path = fit if fit is not None else (shipped_fit() if kappa_source.startswith("shipped") else None)
        if path is None:
            return None
        spec = json.loads(Path(path).read_text()).get("spec")
        return spec if isinstance(spec, dict) else None
    except (ValueError, OSError):
        return None


def _recipe(d: Design, q_given, spec, tune, clips, lrs, tune_by, progress) -> None:
    """Fill the recipe's C, η, local epochs and batch, and say where every
    knob came from."""
    d.sources = {"q": "given" if q_given is not None else "the exact search over cohort sizes",
                 "rounds": "the exact search: the most rounds the budget allows at this sigma, up to max rounds",
                 "sigma": f"the exact search, minimising the utility bound with kappa ({d.kappa_source})"}
    if spec is not None:
        d.clip, d.lr = float(spec["clip"]), float(spec["lr"])
        d.local_epochs, d.batch_size = int(spec["local_epochs"]), int(spec["batch_size"])
        where = f"the {spec.get('model')} pre-trial on {spec.get('dataset')} that kappa came from"
        d.sources.update(clip=where, lr=where, local_epochs=where, batch_size=where)
    else:
        d.sources.update(clip="not chosen: give tune (a pre-trial store) or use a fit that records its spec",
                         lr="not chosen: give tune (a pre-trial store) or use a fit that records its spec")
    if tune is None:
        return
    from .pretrial.tune import best_pair
    from .pretrial.tune import tune as run_tune

    t = run_tune(tune, d.q, d.rounds, d.noise_multiplier, d.n_clients, clips, lrs, progress=progress, select=tune_by)
    d.tuning = t
    d.clip, d.lr, d.local_epochs, d.batch_size = t["clip"], t["lr"], t["local_epochs"], t["batch_size"]
    grid = f"{len(clips)} x {len(lrs)} grid"
    best = "highest test accuracy" if tune_by == "accuracy" else "lowest test loss"
    where = (f"public tuning on {tune}: {best} of the {grid} at this design's T and noise on the mean "
             f"({t['seeds']} seeds)")
    d.sources.update(clip=where, lr=where, local_epochs=f"the pre-trial {tune}", batch_size=f"the pre-trial {tune}")
    norms = t["norms"]
    d.notes.append(f"update norms on the public share at C = {t['clip']:g}, lr = {t['lr']:g}: median "
                   f"{norms['q50']:.3g} (10-90 %: {norms['q10']:.3g}-{norms['q90']:.3g}); in the first rounds "
                   f"{t['norms_early']['q50']:.3g}")
    other_by = "loss" if tune_by == "accuracy" else "accuracy"
    other = best_pair(t["grid"], other_by)
    if (other["clip"], other["lr"]) != (t["clip"], t["lr"]):
        d.notes.append(f"by public {other_by} the best pair would be C = {other['clip']:g}, lr = {other['lr']:g} "
                       f"(tune_by {other_by}; docs/results.md section 9 measures both)")
    for axis in t["on_grid_edge"]:
        d.notes.append(f"the best {axis} lies on the edge of its grid: widen the grid past it")
    if spec is not None and not (math.isclose(t["clip"], float(spec["clip"]))
                                 and math.isclose(t["lr"], float(spec["lr"]))):
        d.notes.append(f"kappa was measured at the pre-trial's own C and lr, not at C = {t['clip']:g}, lr = "
                       f"{t['lr']:g}: re-run the pre-trial with these to refit kappa for this pair")


def _why_q(d: Design, per_q: dict, qs: list) -> str:
    """Why this q: where it sits among the cohort sizes searched."""
    others = sorted((u, qq) for qq, u in per_q.items() if qq != d.q)
    what = "utility bound" if d.predicted_utility_loss is None else "predicted utility loss"
    text = (f"q = {d.q:.3g} ({d.clients_per_round:,.4g} clients a round) has the lowest {what} of the "
            f"{len(qs)} cohort sizes searched in [{min(qs):.3g}, {max(qs):.3g}]")
    if others:
        u2, q2 = others[0]
        base = per_q.get(d.q, u2)
        text += f"; the next best, q = {q2:.3g}, is {100 * (u2 / base - 1):.1f} % worse"
    if d.q >= max(qs) and max(qs) < 1:
        text += "; q_max caps it"
    return text


def _best_for_model(model, q, n, eps, delta, t_cap, s_lo, s_hi, orders, acct, n_sigma=48, refine=True):
    """The empirical mode's search at one q: the fitted utility loss
    u(σ, T) = a/T + bσ²/(qN) + c + dσ²T/(qN) over a dense geometric grid of
    σ, at each σ the best integer T within min(T̃, T_max(σ)) (with d > 0 an
    interior optimum √(a qN/(dσ²)) may beat T_max), refined around the best
    σ (three times, 31 points each, unless ``refine`` is off).  Returns
    (u, T, σ) or None."""
    def at(sig):
        tm = np.minimum(t_cap, _tmax(eps, q, sig, delta, orders, acct)).astype(float)
        if model.d > 0:
            t_opt = np.sqrt(model.a * q * n / (model.d * sig * sig))
            cands = [np.clip(np.floor(t_opt), 1, tm), np.clip(np.ceil(t_opt), 1, tm), tm]
        else:
            cands = [tm]
        best_u, best_t = np.full(sig.shape, np.inf), np.zeros(sig.shape)
        for t in cands:
            uu = np.where(tm >= 1, model.predict(sig, np.maximum(t, 1), q, n), np.inf)
            take = uu < best_u
            best_u, best_t = np.where(take, uu, best_u), np.where(take, t, best_t)
        return best_u, best_t

    sig = np.geomspace(s_lo, s_hi, n_sigma) if s_hi > s_lo else np.array([s_lo])
    u, t = at(sig)
    if not np.isfinite(u).any():
        return None
    for _ in range(3 if refine else 0):
        k = np.argsort(sig)
        sig, u, t = sig[k], u[k], t[k]
        i = int(np.argmin(u))
        lo, hi = sig[max(i - 1, 0)], sig[min(i + 1, len(sig) - 1)]
        fine = np.geomspace(lo, hi, 31) if hi > lo else np.array([lo])
        uf, tf = at(fine)
        sig, u, t = np.concatenate([sig, fine]), np.concatenate([u, uf]), np.concatenate([t, tf])
    i = int(np.argmin(u))
    return float(u[i]), int(t[i]), float(sig[i])


def _notes(d: Design, capped_by_time: bool) -> list[str]:
    """What binds, and what moves it (parameter names; the CLI shows flags)."""
    notes = []
    if d.sigma <= d.sigma_min * (1 + 1e-6):
        notes.append(f"sigma sits on its floor sigma_min = {d.sigma_min:g}: the budget allows less noise than "
                     "the search may use; lower sigma_min to let it")
    if d.sigma >= d.sigma_max * (1 - 1e-6):
        notes.append(f"sigma sits on its ceiling sigma_max = {d.sigma_max:g}: raise sigma_max to allow more noise "
                     "(and more rounds)")
    if d.epsilon < 0.95 * d.budget:
        why = []
        if d.rounds == d.max_rounds:
            why.append(f"T is at its cap of {d.max_rounds} rounds (raise "
                       f"{'time_budget' if capped_by_time else 'max_rounds'})")
        if d.sigma <= d.sigma_min * (1 + 1e-6):
            why.append("sigma is at sigma_min (lower it)")
        notes.append(f"the budget is not spent (epsilon {d.epsilon:.3g} of {d.budget:g})"
                     + (": " + "; ".join(why) if why else ""))
    if d.rounds == 1 or d.utility_bound > 1.0:
        notes.append(f"the budget is too small to learn: {d.rounds} round(s), utility bound {d.utility_bound:.3g} "
                     "(above 1 means no better than the starting model in this bound); raise epsilon, the "
                     "number of clients, or the rounds allowed")
    return notes


def _pos(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)) or not (x > 0) \
            or math.isinf(x):
        raise ValueError(f"{name} must be a positive finite number, got {x}")


def _int_at_least(x, lo, name):
    try:
        v = int(x)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be an integer, got {x!r}") from None
    if isinstance(x, bool) or v != x or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {x}")
    return v


_RELEASED = {"client-aggregate": "every round's global model: the sum of the cohort's clipped updates plus Gaussian "
                                 "noise, divided by the expected cohort (all T models may be published)",
             "client-local": "every participating client's clipped update plus Gaussian noise, with its sender, to "
                             "the server (and everything computed from them)"}
_TRUSTED = {"client-aggregate": "the server (or a secure aggregator) that sees the clipped updates before the noise "
                                "is complete; the clients' own devices",
            "client-local": "nobody beyond each client's own device: every update leaves it noised"}
_SAMPLING = {"poisson": "each client joins each round independently with probability q = {q:.4g} (Poisson); who "
                        "took part is not released",
             "fixed-size": "m = {m} of the N clients each round, uniformly without replacement; who took part is "
                           "not released",
             "none": "m = {m} of the N clients each round; no amplification by sampling is claimed",
             "attributed": "each client takes part with probability q = {q:.4g}; who took part is seen, and only "
                           "its own participations are charged"}


def privacy_statement(d) -> str:
    """The privacy statement of a :class:`Design` (Ponomareva et al. 2023,
    "How to DP-fy ML", §5.3): what a deployment should publish."""
    n, m = d.n_clients, d.clients_per_round
    if d.framework == "flower":
        relation = ("replace-one: two populations of N clients differ in one client's data (Flower samples a "
                    "fixed number, so N is public)")
        accountant = ("RDP of the fixed-size subsampled Gaussian (Wang, Balle and Kasiviswanathan 2019, Thm 27), "
                      "noise multiplier z/2 (replacing a client moves the sum by 2C)")
    elif d.framework == "flower-accounted":
        relation = "add/remove: one client added to or removed from a population of at most N"
        accountant = ("Flower's RdpAccountant (dp-accounting) and paretofl's RDP accountant, a Gaussian of noise "
                      + ("multiplier z a round (every client takes part: an added client joins the sum)"
                         if d.q >= 1 else "multiplier z/2 a round (a fixed m < N: an added client can displace a "
                         "sampled one, so the sum moves by up to 2C)")
                      + " without amplification; the larger of the two is reported")
    elif d.mechanism == "client-local":
        relation = "add/remove: one client's data replaced by none (its clipped update by zero)"
        accountant = ("RDP of the Gaussian at each participation (participation seen), composed over the rounds "
                      "a client takes part in")
    else:
        relation = "add/remove: one client added to or removed from a population of at most N"
        accountant = "RDP of the Poisson-subsampled Gaussian (exact, paretofl's accountant), composed over T rounds"
    noise = (f"noise multiplier {d.noise_multiplier:.4g} on the released sum (std {d.noise_multiplier:.4g} x C)"
             if d.mechanism == "client-aggregate" else f"each client adds noise of std {d.sigma:.4g} x C")
    clip = f"C = {d.clip:g}" if d.clip is not None else "C (the clipping norm: not chosen by this design)"
    if d.tuning:
        cost = (f"none to the clients: q, T and sigma come from kappa ({d.kappa_source}), and C and the learning "
                f"rate from training on the public share of {d.tuning['store']}; no client data was used")
    elif d.kappa_source == "given":
        cost = ("not accounted here: kappa was given. If it, C or the learning rate were chosen by training on the "
                "clients' data, that tuning spent privacy this statement does not include; say so and how")
    else:
        cost = (f"none to the clients if the pre-trial behind kappa ({d.kappa_source}) used only public data, as "
                "paretofl's pre-trials do (their public share); C and the learning rate "
                + ("come from the same pre-trial" if d.clip is not None else "are yours: state how you chose them"))
    lines = [
        "Privacy statement (after Ponomareva et al. 2023, How to DP-fy ML, section 5.3)",
        f"- Guarantee: ({d.epsilon:.4g}, {d.delta:g})-differential privacy (budget {d.budget:g}), client-level: "
        "the unit of privacy is one client and all of its data.",
        f"- Neighbouring relation: {relation}.",
        f"- Released: {_RELEASED[d.mechanism]}; {d.rounds} round{'s' if d.rounds != 1 else ''}. Evaluation on "
        "client data is not released.",
        f"- Trusted: {_TRUSTED[d.mechanism]}.",
        f"- Sampling: {_SAMPLING[d.sampling].format(q=d.q, m=m)}; N = {n} clients.",
        f"- Mechanism: updates clipped to L2 norm {clip}; {noise}.",
        f"- Accountant: {accountant}; converted to (epsilon, delta) with Balle et al. 2020, Thm 21 (improved RDP "
        "conversion).",
        f"- Privacy cost of choosing the hyperparameters: {cost}.",
    ]
    if d.delta * n >= 0.1:
        lines.append(f"- Note: delta {d.delta:g} is not small against 1/N = {1 / n:.3g}.")
    return "\n".join(lines)
