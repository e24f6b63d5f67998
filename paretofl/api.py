"""The Python API: what the ``paretofl`` commands call.

Everything a command does is a function here or in the modules it names;
torch is imported only by :func:`train` (and the audit), when called.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

from . import recommendation
from .fl.prv import PRV_LIMITS  # noqa: F401  (re-exported; numbers only: Opacus, hence torch, loads when PRV is asked for)
from .mechanisms import DEFAULT
from .mechanisms import get as mechanism_of
from .recommendation import FIT_FRONT_ONLY, Design, InfeasibleBudget, Request, nbafl_design  # noqa: F401  (re-exported)
from .shell import command_path  # noqa: F401  (re-exported: how a suggested command prints a path)
from .theory import privacy
from .theory.pareto import Box, ParetoSet, theorem3
from .theory.privacy import SAMPLINGS, Charge, check_delta, check_step

__version__ = "0.2.0"

__all__ = ["__version__", "design", "Request", "Design", "InfeasibleBudget", "nbafl_design", "tune", "account",
           "Accounting", "pareto_set", "ParetoSet", "fit", "train", "Training", "TrainResult", "PRV_LIMITS", "pretrial",
           "spec", "validate", "audit", "audit_jobs", "audit_names", "export", "design_figure", "pareto_figure",
           "pretrial_figures", "names", "algorithm_options", "unused_options", "check_out_path", "stored_runs",
           "keep_freed_memory", "is_reference", "pretrial_spend", "load_design", "check_design", "unit_text",
           "SAMPLING_RELATIONS", "prediction_of",
           "Grid"]  # noqa: F822  (loaded when asked for: the module's __getattr__)


#: the neighbouring relation each sampling of :func:`account` assumes, and
#: the sensitivity its noise multiplier is relative to
SAMPLING_RELATIONS = {
    "poisson": ("add/remove: one individual added or removed; the noise multiplier is the noise std over the "
                "add/remove sensitivity (C for a sum of updates clipped to C)"),
    "attributed": ("add/remove or zero-out of one participant's contribution, its participation seen; the noise "
                   "multiplier is the noise std over that contribution's sensitivity (C for an update clipped "
                   "to C)"),
    "fixed-size": ("replace-one: one individual's data replaced, n public; the noise multiplier is the noise std "
                   "over the replace-one sensitivity, 2C for a sum of updates clipped to C: a Flower design of "
                   "noise multiplier z on that sum is --sigma z/2 here"),
    "none": ("the relation its sensitivity is taken for (no sampling): the noise multiplier is the noise std over "
             "that sensitivity (a fixed cohort m < N under add/remove moves a sum by 2C: --sigma z/2)"),
    "attributed-integer": ("zero-out of one participant's contribution, its participation seen, read at integer "
                           "orders (the Skellam mechanism's bound): the noise multiplier is the noise std over the "
                           "contribution's effective sensitivity"),
}


@dataclass
class Accounting:
    """ε of a sequence of Gaussian steps; ``by_accountant`` when two ran;
    ``relation``: the neighbouring relation the sampling assumes
    (:data:`SAMPLING_RELATIONS`)."""

    epsilon: float
    delta: float
    accountant: str
    noise_multiplier: float
    sample_rate: float
    steps: int
    sampling: str
    order: float = math.nan
    by_accountant: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    relation: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def account(noise_multiplier: float, sample_rate: float, steps: int, delta: float = 1e-5,
            sampling: str = "poisson", accountant: str = "rdp", conversion: str = "improved") -> Accounting:
    """ε after ``steps`` Gaussian steps (docs/theory.md §5).

    Parameters
    ----------
    noise_multiplier : noise std / sensitivity of each step's release.
    sample_rate : the sampling rate q.
    sampling : "poisson" (membership hidden, add/remove neighbours),
        "attributed" (participation seen: the local view), "fixed-size"
        (m of n without replacement, replace-one neighbours) or "none" (no
        amplification, q ignored).  The noise multiplier is relative to the
        sensitivity under the sampling's relation (:data:`SAMPLING_RELATIONS`,
        also in the result's ``relation``): for fixed-size, replace-one, under
        which replacing a client moves a sum of updates clipped to C by 2C, so
        a Flower design whose sum carries noise multiplier z is accounted as
        ``account(z / 2, m / N, T, sampling="fixed-size")`` (what its
        ``flower`` mechanism charges).
    accountant : "rdp" (paretofl's, no torch), "prv" (Opacus's PRV
        accountant, Poisson sampling only, needs ``paretofl[train]``) or
        "both" (the larger ε is reported).
    """
    check_step(noise_multiplier, sample_rate, steps)
    check_delta(delta)
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if accountant not in ("rdp", "prv", "both"):
        raise ValueError(f"accountant must be rdp, prv or both, got {accountant!r}")
    eps_rdp, order = privacy.account([Charge(sampling, sample_rate, noise_multiplier, steps)], delta,
                                     conversion=conversion, order=True)
    values, notes = {}, []
    if accountant in ("rdp", "both"):
        values["rdp"] = eps_rdp
    if accountant in ("prv", "both"):
        from .fl import prv  # noqa: F401  it registers "prv" with the accountant (Opacus's, loaded when asked for)

        try:
            values["prv"] = privacy.account([Charge(sampling, sample_rate, noise_multiplier, steps)], delta,
                                            accountant="prv",    # an RDP conversion asked of PRV alone is refused
                                            conversion=conversion if accountant == "prv" else "improved")
        except ValueError as exc:       # what PRV does not cover, or would take too long
            if accountant == "prv":
                raise ValueError(f"{exc}; use accountant rdp") from None
            notes.append(f"prv not run: {exc}")
    eps = max(values.values())  # two accountants: the larger epsilon is the one reported
    if delta > privacy.DELTA_MAX:
        notes.append(f"delta = {delta:g} is above {privacy.DELTA_MAX:g}: a mechanism that publishes every individual's "
                     "data outright with probability delta meets it, so this (epsilon, delta) says little whatever "
                     "epsilon is; design and train refuse such a delta")
    return Accounting(eps, delta, accountant, float(noise_multiplier), float(sample_rate), int(steps), sampling,
                      order if "rdp" in values else math.nan, values if len(values) > 1 else {}, notes,
                      SAMPLING_RELATIONS[sampling])


def __getattr__(name: str):
    """``paretofl.api.Grid``, a public tuning's grid (:func:`tune`): its
    module is loaded when asked for, so that a design starts without it."""
    if name == "Grid":
        from .pretrial.tune import Grid

        return Grid
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_R = recommendation.Request     # the design's defaults, in one place


def _design(n_clients: int, epsilon: float | None = _R.epsilon, delta: float = _R.delta,
           max_rounds: int | None = _R.max_rounds, time_budget: float | None = _R.time_budget,
           round_time: float | None = _R.round_time, q: float | None = _R.q, q_min: float | None = _R.q_min,
           q_max: float | None = _R.q_max, sigma_min: float = _R.sigma_min, sigma_max: float = _R.sigma_max,
           kappa: float | None = _R.kappa, fit: str | None = _R.fit, mechanism: str = _R.mechanism,
           framework: str | None = _R.framework, from_store: str | None = _R.from_store,
           utility_model: str | None = _R.utility_model, budgets=_R.budgets, mechanism_options: dict | None = None,
           local_epochs: int | None = _R.local_epochs, partition: str | None = _R.partition) -> Design:
    """Recommend (q, T, σ) for a budget (docs/theory.md §4): a
    :class:`Request` (``paretofl.Request``, which says what each knob
    means), or its fields as keywords.  With ``from_store``, the empirical
    mode: instead of the closed form, a model of the utility loss fitted to
    this pre-trial store over (σ²/(qN), T) — ``utility_model`` "bound" (1.2)
    with free constants, or "bend", which adds a term growing with σ²T;
    default: the one its held-out seeds prefer — minimised under the same
    exact accountant.

    The recipe's C, η, local epochs and batch come from the pre-trial κ came
    from, where that is known; where that pre-trial measured the local work
    (``local_work`` in its spec), the design chooses the local epochs
    (docs/theory.md §4.E; ``local_epochs`` fixes them); :func:`tune` chooses
    C and η on a pre-trial's public share instead (a step of its own).
    """
    return _solve(Request(**locals()))


def _face(keywords, asked: type, run, name: str):
    """``name``: :func:`keywords`'s signature and words, taking one ``asked``
    object alone (run by ``run``) or its fields as keywords, never both:
    what is given beside the object, even at a default, would be dropped."""
    what = asked.__name__

    @functools.wraps(keywords)
    def face(*args, **kwargs):
        if any(isinstance(a, asked) for a in args[1:]) or any(isinstance(v, asked) for v in kwargs.values()):
            raise ValueError(f"a {what} goes alone, first: {name}({what}(...))")
        if args and isinstance(args[0], asked):
            if len(args) > 1 or kwargs:
                given = [*(f"argument {i + 2}" for i in range(len(args) - 1)), *kwargs]
                raise ValueError(f"give a {what} or keywords, not both ({', '.join(given)} beside a {what})")
            return run(args[0])
        return keywords(*args, **kwargs)

    face.__name__ = face.__qualname__ = name
    return face


#: ``paretofl.design``: a :class:`Request` alone, or its fields
design = _face(_design, Request, lambda r: _solve(r), "design")


def _solve(r: Request) -> Design:
    """The design a checked Request asks: its utility model (the closed
    form, or one fitted to ``from_store``) and the private pre-trial behind
    κ, then :func:`paretofl.recommendation.design`."""
    utility, spec, spend = None, None, None
    if sum(x is not None for x in (r.kappa, r.fit, r.from_store)) > 1:
        raise ValueError("give one of kappa, fit or from_store (where kappa comes from)")
    if r.fit is not None:
        spend = pretrial_spend(fit=r.fit)
        _fit_split_checked(r.fit)
    if r.from_store is not None:
        spend = pretrial_spend(store=r.from_store)
        from .pretrial.fit import UTILITY_MODELS, fit_utility
        from .pretrial.tune import spec_of_store

        if r.utility_model is not None and r.utility_model not in UTILITY_MODELS:
            raise ValueError(f"utility_model must be one of {', '.join(UTILITY_MODELS)}, got {r.utility_model!r}")
        fitted = fit_utility(r.from_store)
        utility = recommendation.Empirical(fitted["models"][r.utility_model or fitted["preferred"]], r.from_store)
        spec = spec_of_store(r.from_store).to_dict()
    elif r.utility_model is not None:
        raise ValueError("utility_model needs from_store")
    return recommendation.design(r, utility=utility, spec=spec, pretrial=spend)


def _fit_split_checked(fit) -> None:
    """A fit's spec is the one its pre-trial ran: its split names the clients
    the local work was measured on and decides which tuning store is the
    fit's, so an edited spec is refused rather than believed.  A fit that
    records its store's spec (``results_digest``) is checked against it when
    read (:func:`paretofl.recommendation.read_fit`); an older one against its
    store where that store is found and is the same pre-trial but for the
    split."""
    from .pretrial.private import locate
    from .pretrial.spec import Spec
    from .pretrial.store import read_base

    data = recommendation.read_fit(fit)
    spec = data.get("spec")
    if data.get("results_digest"):
        return
    store = locate(data.get("results"), near=fit)
    if not isinstance(spec, dict) or store is None:
        return                              # an older fit with no store here: taken as it says
    base = read_base(store)
    if any(spec.get(k) != base.get(k) for k in set(spec) | set(base) if k not in ("partition", "beta")):
        return                              # another pre-trial's store, or the fit edited (an older fit: unknown)
    differ = sorted(k for k in set(spec) | set(base) if spec.get(k) != base.get(k))
    if differ:
        split = Spec.from_base(base, where=store).partition_name
        fields = ", ".join(f'"{k}"' for k in differ)           # the file's fields, quoted: not the command's flags
        raise ValueError(f"fit {fit} is not what its store {store} ran (its spec differs in {fields}; the "
                         f"store splits its public clients {split}): it was edited by hand; run \"paretofl fit\" on "
                         "the store again")


def pretrial_spend(fit=None, store=None):
    """What the private pre-trial behind a fit file or a results store spent
    (:class:`paretofl.pretrial.private.Spend`; None for a public one),
    re-derived from the store's spend log wherever the store is there, and
    refused where a file disagrees with it (docs/theory.md §4.D)."""
    from pathlib import Path

    from .pretrial import private

    if (fit is None) == (store is None):
        raise ValueError("give fit or store")
    if store is not None:
        return private.of_store(store)
    return private.of_fit(str(Path(fit).resolve()), recommendation.read_fit(fit))


def load_design(path) -> Design:
    """A saved design, never believed: :meth:`Design.load` re-derives its
    every privacy figure from its released parameters, and
    :func:`check_design` its private pre-trial's spend from that
    pre-trial's store."""
    return check_design(Design.load(path), where=f"design file {path}", near=path)


def mechanism(name: str, **options):
    """The registered mechanism ``name`` (:func:`paretofl.mechanisms.get`): what it says of itself."""
    return mechanism_of(name, **options)


def unit_text(mechanism: str) -> str:
    """The unit of privacy and the neighbouring relation of a mechanism's ε, in a few words."""
    return mechanism_of(mechanism).unit_text


def check_design(d: Design, where: str = "the design", near=None) -> Design:
    """Re-derive what a design claims before anything uses it: its figures
    from its parameters (:func:`paretofl.recommendation.check_claims`), and
    the private pre-trial it composes with from that pre-trial's store where
    the store is there (refused where the store charged more than the design
    composes, or where κ came from a private pre-trial whose spend the design
    left out); where the store is absent, the pre-trial's part is marked as
    taken from the file (``details["pretrial"]["verified"]`` False).  The
    files it names are looked for where they were recorded, then beside
    ``near`` (the design file)."""
    from .pretrial.private import locate

    if not isinstance(d, Design):
        raise ValueError(f"{where} must be a paretofl Design (Design.load(path) reads a saved one), got "
                         f"{type(d).__name__}")
    recommendation.check_claims(d, where)
    pre = d.details.get("pretrial")
    ks = d.kappa_source if isinstance(d.kappa_source, str) else ""
    # every pre-trial the file names: κ's own (a fit, or the store a fitted model came from) and the one its
    # pre-trial record names; each found is read, and they must be one pre-trial
    named = [("fit", ks[4:] if ks.startswith("fit ") else None),
             ("store", ks.split(" model of ", 1)[1] if d.utility_model in ("bound", "bend") and " model of " in ks
              else None),
             ("store", (pre or {}).get("store")), ("fit", (pre or {}).get("fit"))]
    seen = {}
    for kind, path in named:
        loc = locate(path, near)
        if loc is not None and loc not in seen:
            seen[loc] = pretrial_spend(**{kind: loc})
    spends = list(seen.values())
    if len(spends) > 1 and any(not _same_spend(spends[0], x) for x in spends[1:]):
        raise ValueError(f"{where} names pre-trials that spent differently ({', '.join(seen)}): κ and the pre-trial "
                         "it composes must be one pre-trial; design again, nothing was believed")
    found = next((x for x in spends if x is not None), None)
    if found is not None and found.clients != d.n_clients:
        raise ValueError(f"{where} composes a private pre-trial that {found.source} ran on {found.clients} clients: "
                         f"it protects those, not this design's {d.n_clients} (run it on your federation's own "
                         "clients); nothing was believed")
    if found is not None:
        from .theory.privacy import charges_from_data

        have = privacy.account(charges_from_data(pre["charges"]), d.delta) if pre else 0.0
        if have < found.epsilon * (1 - recommendation.CLAIM_RTOL):
            raise ValueError(f"{where} composes {'no' if not pre else f'epsilon {have:.4g} of its'} private "
                             f"pre-trial, but {found.source} charged epsilon {found.epsilon:.4g}: its ε would be "
                             "under-reported; design again with the pre-trial's fit or store")
        # the charges composed are the store's, never the file's: the same ε alone is not the same composition
        logged = privacy.charges_as_data(found.charges)
        if pre and not _same_charges(charges_from_data(pre["charges"]), found.charges):
            raise ValueError(f"{where} records private pre-trial charges other than those {found.source} logged "
                             "(changed by hand or by another version): design again with the pre-trial's fit or "
                             "store, nothing was believed")
        d.details["pretrial"] = dict(pre, charges=logged, verified=found.verified, source=found.source)
    elif pre:
        d.details["pretrial"] = dict(pre, verified=False,
                                     source=f"{where}, unverified: the pre-trial's store is not here")
    return d


def _same_spend(a, b) -> bool:
    """Two pre-trials' spends (None: public) are the same."""
    if a is None or b is None:
        return a is None and b is None
    return _same_charges(a.charges, b.charges)


def _same_charges(a, b) -> bool:
    """Two lists of scalar charges, equal up to float rounding."""
    if len(a) != len(b):
        return False
    key = lambda c: (c.sampling, float(c.rate), float(c.noise_multiplier), int(c.steps))  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    close = lambda x, y: abs(float(x) - float(y)) <= 1e-9 * max(abs(float(x)), abs(float(y)), 1e-12)  # noqa: E731
    return all(x.sampling == y.sampling and close(x.rate, y.rate) and close(x.noise_multiplier, y.noise_multiplier)
               and int(x.steps) == int(y.steps) for x, y in zip(a, b))


def tune(d: Design, store, grid=None, by: str = "accuracy", progress: bool = False,
         chunk: int | None = None) -> Design:
    """The rest of the recipe, a step of its own (docs/theory.md §4.C):
    train the ``grid`` (a :class:`paretofl.pretrial.tune.Grid`: its clips
    × lrs, default 0.03–3 and 0.03–1, ``seeds`` runs each) on the
    public share of the pre-trial ``store`` at design ``d``'s T and noise on
    the average (torch is imported; at most ``chunk``
    replicas trained together) and take the pair with the highest accuracy
    (``by`` "accuracy") or the lowest loss ("loss") on samples held out of
    the public share (never the test split) as its C
    and η (:func:`paretofl.pretrial.tune.tune`).  Fills ``d.clip``,
    ``d.lr``, ``d.local_epochs``, ``d.batch_size``, ``d.tuning``,
    ``d.sources`` and notes in place, and returns ``d``.  The grid's
    ``epochs``: local epochs searched with (C, η) (default: the design's
    own, else the pre-trial's).  A design whose fit measured several η
    chose η with K: the tuning keeps it (its ``lrs`` left out) and searches C."""
    from dataclasses import replace

    from .pretrial.tune import At, Grid
    from .pretrial.tune import tune as run_tune

    grid = Grid() if grid is None else grid
    if not isinstance(grid, Grid):
        raise ValueError(f"the tuning's grid must be a paretofl.api.Grid, got {type(grid).__name__}")
    spec = _tunable(d, store, by, grid.epochs)
    said = (d.tuning or {}).get("notes_said", [])                # an earlier tuning's notes, replaced below
    said = {n for n in said if isinstance(n, str)} if isinstance(said, list) else set()
    # the pair the pre-trial behind kappa used (the fit's, carried forward by a tuning; unknown where not recorded)
    measured_at = d.pair_measured()
    measured_at = None if None in measured_at else measured_at
    if grid.epochs is None and d.local_epochs is not None:
        grid = replace(grid, epochs=(d.local_epochs,))
    chosen_lr = (d.local_work or {}).get("lr") if isinstance(d.local_work, dict) else None
    if chosen_lr is not None:
        # η chosen with K by (4.E.4): its T and sigma are for that pair, as for the K, so the tuning searches C at it
        if tuple(grid.lrs) not in (tuple(Grid().lrs), (float(chosen_lr),)):
            raise ValueError(f"this design's learning rate {chosen_lr:g} was chosen with its {d.local_epochs} local "
                             "epoch(s) from the learning rates its pre-trial measured (docs/theory.md 4.E), and its "
                             "T and sigma are for that pair: the tuning searches C at it; leave the tuning's lrs out")
        grid = replace(grid, lrs=(float(chosen_lr),))
    t = run_tune(store, At(d.q, d.rounds, d.noise_multiplier, d.n_clients), grid, select=by, progress=progress,
                 chunk=chunk)
    clips, lrs = grid.clips, grid.lrs
    if measured_at is not None:         # the pair the fit (its kappa and prediction) measured, kept beside the tuning
        t["measured_at"] = {"clip": measured_at[0], "lr": measured_at[1]}
    d.tuning = t
    d.clip, d.lr, d.local_epochs, d.batch_size = t["clip"], t["lr"], t["local_epochs"], t["batch_size"]
    d.model, d.dataset = spec.get("model"), spec.get("dataset")
    best = ("highest accuracy" if by == "accuracy" else "lowest loss") + " on samples it held out"
    axes = f"{len(clips)} x {len(lrs)}" + (f" x {len(t['epochs'])}" if len(t["epochs"]) > 1 else "")
    names = "C x lr" + (" x local epochs" if len(t["epochs"]) > 1 else "")
    where = (f"public tuning on {store}: {best} of the {axes} grid ({names}) at this design's T and noise "
             f"on the mean ({t['seeds']} seeds)")
    kept = d.sources.get("local_epochs", f"the pre-trial {store}")
    d.sources.update(clip=where, lr=where, batch_size=f"the pre-trial {store}",
                     local_epochs=where if len(t["epochs"]) > 1 else kept)
    t["notes_said"] = _tuning_notes(t, by, spec.get("local_epochs"), measured_at)
    d.notes = [n for n in d.notes if n not in said] + t["notes_said"]   # a second tuning's notes replace the first's
    return d


def _tunable(d, store, by, epochs) -> dict:
    """:func:`tune`'s refusals, one line each (a design it cannot tune, a
    store on the clients' own data, ``by``, local epochs the design's local
    work chose); the store's pre-trial spec."""
    from pathlib import Path

    from .pretrial.tune import SELECT, spec_of_store

    if not isinstance(d, Design):
        raise ValueError(f"tune needs a Design, got {type(d).__name__}")
    if not Path(store).is_file():
        raise ValueError(f"tune: results file {store} does not exist")
    spec_ = spec_of_store(store)
    if spec_.private or spec_.subset != "public":
        # tuning trains on the store's data: the clients' own here, which nothing would charge
        raise ValueError(f"tune trains on the data of {store}, a pre-trial on the clients' own data (subset "
                         f"{spec_.subset!r}{', private' if spec_.private else ''}): that would spend privacy this "
                         "design does not charge; tune on a pre-trial of the public share (subset = \"public\"), "
                         "or keep the C and learning rate of the fit")
    if d.groups or d.noise_on != "sum":
        raise ValueError("tune chooses C and the learning rate where one noise lies on the sum (client-aggregate, "
                         "Flower's) with one budget for all")
    if by not in SELECT:
        raise ValueError(f"by must be one of {', '.join(SELECT)}, got {by!r}")
    differ = [f"{k} {getattr(d, k)!r} (the design's) against {getattr(spec_, k)!r}" for k in ("model", "dataset")
              if getattr(d, k) is not None and getattr(d, k) != getattr(spec_, k)]
    if differ:
        # the design's kappa, prediction and rounds are of its fit's model and data: a tuning of another is not its
        raise ValueError(f"tune: {store} trains another model or data than the design's fit ({'; '.join(differ)}): "
                         "tune on a public pre-trial of the fit's model and data")
    fit_split = ((d.local_work or {}).get("dissimilarity") or {}).get("partition") or \
        (d.details or {}).get("pretrial_partition")          # a fit without local work, or a store (from_store)
    if fit_split is not None and spec_.partition_name != fit_split:
        raise ValueError(f"tune: {store} splits its public clients {spec_.partition_name}, the design's own "
                         f"pre-trial {fit_split}: tune on a public pre-trial partitioned as that one"
                         + (" (the local epochs were chosen there)" if d.local_work else ""))
    if d.local_work and epochs is not None and tuple(epochs) != (d.local_epochs,):
        # one chooser of the local epochs per design: the bound (4.E.2) chose them over what the pre-trial measured,
        # and its T and sigma are for them
        raise ValueError(f"this design's {d.local_epochs} local epoch(s) were set with the local work its pre-trial "
                         "measured (docs/theory.md 4.E), and its T and sigma are for them: the tuning searches C and "
                         "the learning rate at them; leave the tuning's epochs out")
    return spec_.to_dict()


#: fewer held-out samples than this and a tuning says its choice is noisy (one standard error of an accuracy near
#: 50 % is 50/sqrt(n) points: 5 at 100)
SMALL_VALIDATION = 500


def _tuning_notes(t: dict, by: str, k0, measured_at) -> list[str]:
    """What a tuning ``t`` says beside its pair: the norms, the other
    criterion's best, a best on its grid's edge, and where κ was measured
    at another pair or local work (``k0``: the pre-trial's local epochs)."""
    import math

    from .pretrial.tune import best_pair

    norms = t["norms"]
    notes = [f"update norms on the public share at C = {t['clip']:g}, lr = {t['lr']:g}: median "
             f"{norms['q50']:.3g} (10-90 %: {norms['q10']:.3g}-{norms['q90']:.3g}); in the first rounds "
             f"{t['norms_early']['q50']:.3g}"]
    n_val = t.get("validation_samples")
    if isinstance(n_val, int) and n_val < SMALL_VALIDATION:
        notes.append(f"the tuning ranked its pairs on {n_val} held-out public samples only: a difference of less "
                     f"than about {100 / n_val ** 0.5:.0f} points of accuracy between pairs is noise; more public "
                     "samples (a larger public_fraction in the pre-trial, or more marked public in your data) give a "
                     "firmer choice")
    other_by = "loss" if by == "accuracy" else "accuracy"
    other = best_pair(t["grid"], other_by)
    if (other["clip"], other["lr"], other["local_epochs"]) != (t["clip"], t["lr"], t["local_epochs"]):
        notes.append(f"by held-out {other_by} the best would be C = {other['clip']:g}, lr = {other['lr']:g}"
                     + (f", {other['local_epochs']} local epoch(s)" if len(t["epochs"]) > 1 else "") + " "
                     f"(to choose by it: by='{other_by}'; docs/results.md section 9 measures both)")
    grid = {"clip": "clips=", "lr": "lrs=", "local_epochs": "epochs="}        # tune's keywords, the CLI's flags
    for axis in t["on_grid_edge"]:
        notes.append(f"the best {axis.replace('_', ' ')} lies on the edge of its grid: widen the grid past it "
                     f"({grid[axis]})")
    if len(t["epochs"]) > 1 and k0 is not None and t["local_epochs"] != k0:
        notes.append(f"kappa was measured at the pre-trial's {k0} local epoch(s), not at the {t['local_epochs']} the "
                     "tuning chose: its T and sigma are for the pre-trial's; measure the local work in the pre-trial "
                     "(local_work in its spec) and design from its fit: the design then chooses the local epochs "
                     "with T and sigma, and the tuning C and lr at them")
    if measured_at is not None and not (math.isclose(t["clip"], measured_at[0])
                                        and math.isclose(t["lr"], measured_at[1])):
        notes.append(f"kappa was measured at the pre-trial's own C and lr, not at C = {t['clip']:g}, lr = "
                     f"{t['lr']:g}: re-run the pre-trial with these to refit kappa for this pair")
    return notes


def pareto_set(n_clients: int, q: float, kappa: float, sigma_min: float, sigma_max: float, max_rounds: float,
               integer: bool = False, points: int = 50) -> ParetoSet:
    """The closed-form Pareto set in the (σ, T) plane for a fixed q
    (Theorem 3 of Gu et al., docs/theory.md §3): its case, T_a, T_b,
    labelled pieces and the box they lie in.  ``integer``: T takes integer
    values, each with the interval of σ that is Pareto optimal there."""
    return theorem3(Box(q, n_clients, kappa, sigma_min, sigma_max, max_rounds), integer=integer, n_points=points)


def fit(store, epsilon: str = "exact", reference: str = "best", bootstrap: int = 1000, seed: int = 0):
    """The experimental Pareto front and κ of a pre-trial's results store:
    a :class:`paretofl.pretrial.fit.Fit` (``.kappa``, ``.kappa_ci``,
    ``.slope``, ``.front``, ``.problems``, ``.save(path)``)."""
    from .pretrial import fit as fitting

    return fitting.fit(store, epsilon=epsilon, reference=reference, bootstrap=bootstrap, seed=seed)


@dataclass
class TrainResult:
    """A training's outcome: means over replicas, and each replica's."""

    accuracy: float
    test_loss: float
    epsilon: float
    delta: float
    rounds: int
    per_replica: dict
    seconds: float
    algorithm: str
    dataset: str
    model: str
    options: dict
    clients: int = 0
    partition: str = ""
    epsilon_groups: dict | None = None    # clients with budgets of their own: ε spent per group (by budget)
    budget: float | None = None           # the budget the run stopped at (the strictest group's, with groups)
    #: every replica within its budget: with groups, each group's spend against its own budget (exact, not the
    #: group's label); None without a budget
    budget_met: bool | None = None
    history: list = field(default_factory=list, repr=False)
    #: did the run do what was asked (issue 45)?  ``problems`` says why not, one sentence each:
    #: no round trained, fewer rounds than the design or an explicit ``rounds``, a non-finite test loss
    complete: bool = True
    problems: list = field(default_factory=list)
    #: the unit of privacy and the neighbouring relation of ``epsilon`` ("client-level, add/remove")
    unit: str = ""
    #: what the run did otherwise than a reader of its request might expect, though not a problem: a group
    #: design that chose fewer rounds than the at most ``rounds`` allowed
    notes: list = field(default_factory=list)
    #: where the noise came from: "seeded" (a simulation: anyone with the seed can draw it again) or "entropy"
    #: (the operating system's, drawn afresh for each replica: a real release; ``secure=True``)
    noise: str = "seeded"
    #: a design's predicted test loss beside the realized one (docs/theory.md 4.E), where the design predicts one:
    #: ``predicted_loss`` and ``of`` (:meth:`Design.predicted_at`); where the run trained what it is of,
    #: ``interval``, ``realized``, ``error`` (realized - predicted), ``inside``, ``rederived`` and ``source``
    #: (re-derived from its fit, or the file's); else ``not_compared``: the knobs that differ, or "not recorded"
    prediction: dict | None = None

    def to_dict(self, with_history: bool = False) -> dict:
        d = asdict(self)
        if not with_history:
            d.pop("history")
        return d


def check_out_path(path, suffixes):
    """An output file must be a path with one of ``suffixes`` in an existing
    folder (the same check for the API and the command line)."""
    import os
    from pathlib import Path

    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"an output path must be a file name ending in {' or '.join(suffixes)}, got {path!r}")
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise ValueError(f"{str(path)!r} must end in {' or '.join(suffixes)}")
    if not p.parent.exists():
        raise ValueError(f"cannot write {path}: folder {p.parent} does not exist")
    if p.is_dir():
        raise ValueError(f"cannot write {path}: it is a folder")


#: where neither a training's caller nor its design says (rounds: at most, a run stops at its budget before them)
TRAIN_DEFAULTS = {"algorithm": "dpfedavg", "dataset": "fashion-mnist", "model": "lr", "epsilon": 2.0, "delta": 1e-5,
                  "rounds": 100}
#: what a design fixes: given beside it to :func:`train` (or ``paretofl train --design``) each is refused; the
#: API lets ``clients`` equal to the design's through, and refuses ``budgets`` with a reason of its own
SET_BY_DESIGN = ("clients", "epsilon", "delta", "rounds", "budgets", "mechanism", "client_rate", "sigma")



@dataclass(frozen=True)
class Training:
    """What a training is asked: every knob of :func:`train`, with its
    default (the one place they live: :func:`train`'s keywords and the
    command line's ``train`` flags read them here).  A None is the trained
    design's, where there is one, else :data:`TRAIN_DEFAULTS`'s; what each
    knob means is said by :func:`train`.  ``options``: the algorithm's
    config's fields (``sigma``, ``clip``, ``client_rate``, ``mechanism``,
    ...).  ``paretofl.train(Training(...))`` trains it, as the keywords do.
    """

    algorithm: str | None = None
    dataset: object = None
    model: object = None
    clients: int | None = None
    epsilon: float | None = None
    delta: float | None = None
    rounds: int | None = None
    partition: str | None = None
    beta: float | None = None
    replicas: int = 1
    seed: int = 0
    device: str = "cpu"
    data_dir: str | None = None
    eval_every: int = 1
    history: str | None = None
    progress: bool = False
    design: Design | None = None
    strategy: str = "auto"
    budgets: object = None
    secure: bool = False
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        # what each knob is, checked where a Training is made (its numbers are checked before anything trains)
        if isinstance(self.algorithm, Design):
            raise ValueError("a design goes first or as design=, not as algorithm=")
        if self.design is not None and not isinstance(self.design, Design):
            raise ValueError(f"design must be a paretofl Design (Design.load(path) reads a saved one), got "
                             f"{type(self.design).__name__}")
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise ValueError(f"options must be a dict of the algorithm's options by name (e.g. {{'sigma': 1.0}}), "
                             f"got {type(self.options).__name__}")

    __hash__ = None         # its options are a dict


def set_by_design(design: Design) -> tuple:
    """What ``design`` fixes, by :func:`train`'s names: :data:`SET_BY_DESIGN`,
    its mechanism's own knobs (adaptive clipping, bands, bits: what its
    statement describes) and the options its mechanism's own design chose
    (NbAFL's C, clients per round, exposures and calibration)."""
    cls = mechanism_of(design.mechanism)
    return SET_BY_DESIGN + tuple(dict.fromkeys((*cls.constructor_options, *cls.fixed_by_design)))


def train_defaults() -> dict:
    """:func:`train`'s defaults, by knob: :class:`Training`'s, and
    :data:`TRAIN_DEFAULTS` where it leaves one to a design (the command
    line's ``train`` flags read these)."""
    import dataclasses

    return {**{f.name: f.default for f in dataclasses.fields(Training) if f.default is not dataclasses.MISSING},
            **TRAIN_DEFAULTS}


_T = Training       # the training's defaults, in one place


def _train(algorithm: str | Design | None = _T.algorithm, /, dataset=_T.dataset, model=_T.model,
           clients: int | None = _T.clients, epsilon: float | None = _T.epsilon, delta: float | None = _T.delta,
           rounds: int | None = _T.rounds, partition: str | None = _T.partition, beta: float | None = _T.beta,
           replicas: int = _T.replicas, seed: int = _T.seed, device: str = _T.device,
           data_dir: str | None = _T.data_dir, eval_every: int = _T.eval_every, history: str | None = _T.history,
           progress: bool = _T.progress, design: Design | None = _T.design, strategy: str = _T.strategy,
           budgets=_T.budgets, secure: bool = _T.secure, **options) -> TrainResult:
    """Train DP federated learning on real data (torch is imported here).

    ``dataset``: a built-in name, a "package.module:function" loader, a
    :class:`paretofl.fl.data.Dataset` (``Dataset.from_arrays``) or a mapping
    of arrays (x_train, y_train, x_test, y_test, optionally clients and
    public); default fashion-mnist.  ``model``: a built-in name, a
    "package.module:function" factory, a factory ``(in_shape, n_classes) ->
    nn.Module`` or an ``nn.Module`` (trained through ``torch.func``;
    ``strategy`` "loop", "vmap" or "auto" batches its clients); default lr.
    ``partition``: iid (default), dirichlet (at concentration ``beta``,
    default 0.5), dirichlet:ALPHA (at ALPHA, as ``design`` names it),
    dirichlet-capped,
    shards (400 label shards in all), shards:K (K a client), or given (the data's own
    clients; the default when the data has them, and then ``clients``
    defaults to their number; 10 otherwise).  Where the
    data marks its public samples, the clients train on the others (the
    public share is the pre-trial's).

    ``algorithm`` is one of ``paretofl.fl.algorithms.ALGORITHMS``
    (dpfedavg, ali-dpfl, adap-dpfl, nbafl); ``options`` are its config's
    fields (e.g. ``sigma``, ``clip``, ``client_rate``, ``mechanism``; see
    ``ALGORITHMS[name].options()``).  A replica stops when its next round
    would spend more than ``epsilon`` (default 2).  ``history``: a CSV path
    that gets a row per (round, replica) as they finish.

    ``design`` (or a Design first: ``train(design, dataset=..., model=...)``):
    train exactly that :class:`Design` — its mechanism (and the
    mechanism's options), q, T, σ, budget and δ, each group's rate (and σ)
    where it has ``groups``, its recipe's C, learning rate, local epochs and
    batch unless ``options`` name them, and the model and data its κ was
    fitted for unless ``model`` and ``dataset`` say otherwise; what the
    design fixes (``clients``, ``epsilon``, ``delta``, ``rounds``, the
    mechanism, q and σ) cannot be given beside it.  NbAFL's design trains
    the nbafl algorithm.  ``budgets``: clients with budgets of their own (a
    budgets CSV file or a :class:`paretofl.budgets.Budgets`): the group
    design for ``rounds`` rounds at most is made here (the shipped κ) and
    trained; each group is accounted on its own and stops at its own budget.

    ``secure``: a real release on real clients' data — every random
    generator (noise, cohorts, batches, the initial model) seeded from the
    operating system's entropy, afresh for each replica and stored nowhere,
    as Opacus's ``secure_mode``; ``seed`` then only labels the replicas.
    Without it a training is a simulation, reproducible by its seed, and
    anyone who knows the seed can draw its noise again.

    The knobs travel as one :class:`Training` (``paretofl.Training``, which
    holds their defaults): ``train(Training(...))`` is the same run.
    """
    knobs = {k: v for k, v in locals().items() if k not in ("algorithm", "options")}
    return _run(_training_of(algorithm, knobs, options))


#: ``paretofl.train``: a :class:`Training` alone (its design inside it), or its knobs
train = _face(_train, Training, lambda t: _run(t), "train")


def _training_of(first, knobs: dict, options: dict) -> Training:
    """The :class:`Training` of :func:`train`'s keywords: a Design first is
    the design trained, ``algorithm=`` by keyword is the algorithm (the
    first argument is positional only)."""
    options = dict(options)
    named = options.pop("algorithm", None)
    if isinstance(named, Design):
        raise ValueError("a design goes first or as design=, not as algorithm=")
    algorithm = first
    if isinstance(first, Design):            # train(design, dataset=..., model=...): the design runs whole
        if knobs["design"] is not None:
            raise ValueError("give the design once: train(design) or train(design=design)")
        knobs, algorithm = {**knobs, "design": first}, None
    if named is not None:
        if algorithm is not None and algorithm != named:
            raise ValueError(f"give the algorithm once, not {algorithm!r} and algorithm={named!r}")
        algorithm = named
    return Training(algorithm=algorithm, options=options, **knobs)


def _run(t: Training) -> TrainResult:
    """Train what ``t`` asks (torch is imported here): its design's
    checked knobs, the defaults, the data split over the clients, the
    group design where clients have budgets of their own, then the rounds."""
    torch = _torch("paretofl.train")
    from dataclasses import replace

    from .fl.algorithms import ALGORITHMS, History
    from .fl.algorithms import train as run
    from .fl.build import Budget, assemble, prepare
    from .fl.data import load_dataset
    from .fl.names import partition_label

    t, groups, spent = _with_design(t)
    asked = t.rounds          # the rounds a design or the caller asked for; None: up to 100, to the budget
    notes = []
    t = _with_defaults(t, ALGORITHMS)
    _check_train_numbers(torch, t)
    cls, options = ALGORITHMS[t.algorithm], t.options
    if t.budgets is not None:
        options = _options_with_budgets(t.algorithm, options)
    config = _config(cls, t.algorithm, options)
    ds = load_dataset(t.dataset, t.data_dir)
    partition, beta = _partition_of(t.partition, t.beta, ds,
                                    None if t.design is None else t.design.details.get("partition"))
    clients = t.clients
    if clients is None and t.budgets is not None:      # the budgets' own clients (a share file needs the number)
        from .budgets import clients_in

        clients = clients_in(t.budgets)
    if clients is None and partition != "given":
        clients = 10
    # a data set that marks its public share keeps it for pre-trials: the clients hold the rest
    setup = prepare(ds, t.model, clients, partition=partition_label(partition, beta), seed=t.seed,
                    strategy=t.strategy, subset="all" if ds.public is None else "rest")
    if t.budgets is not None:
        groups, options = _group_design(len(setup.parts), t.delta, t.rounds, t.budgets, config.mechanism, options)
        config = cls.Config(**options)
        if t.rounds is not None and groups.rounds < t.rounds:
            notes = [f"the group design trains {groups.rounds} of the at most {t.rounds} rounds allowed: the T its "
                     "search found best within every group's budget (design --budgets prints it)"]
        t = replace(t, rounds=groups.rounds, epsilon=groups.budget)
        asked = t.rounds
    _check_population(cls, config, setup, t.delta)
    pol = assemble(setup, t.algorithm, [t.seed + r for r in range(t.replicas)], device=t.device,
                   budget=Budget(t.epsilon, t.delta, t.rounds, groups), secure=t.secure, **options).policy
    if groups is None:
        _check_first_round(pol, t.replicas, t.delta, t.epsilon, spent)
    hist = History(t.history)
    try:
        _, hist, fin = run(pol, rounds=t.rounds, epsilon=t.epsilon, delta=t.delta, evaluate=t.eval_every,
                           progress=t.progress, history=hist, spent=spent)
    finally:
        hist.close()
    problems = train_problems(fin, asked, t.epsilon, "the design" if t.design is not None or groups is not None
                              else "rounds")
    r = _train_result(fin, problems, t, setup, config, partition_label(partition, beta), hist, cls)
    r.notes = notes
    r.prediction = prediction_of(t.design, r)
    return r


def prediction_of(design, r: TrainResult) -> dict | None:
    """The test loss ``design`` predicted beside the one the run ``r``
    realized (issue 46; docs/theory.md 4.E), compared only where the run
    trained what the prediction is of (:meth:`Design.prediction_differs`:
    a knob the run has not, no batches or no optimizer of its own, is not
    the one the pre-trial trained); None where the design predicts none."""
    import math

    lw = design.local_work if design is not None and isinstance(design.local_work, dict) else {}
    if not lw or not lw.get("predicted_loss"):
        return None
    o = r.options
    differ = design.prediction_differs(o.get("clip"), o.get("lr"), o.get("local_epochs"),
                                       batch_size=o.get("batch_size", "none"), model=r.model, dataset=r.dataset,
                                       partition=getattr(r, "partition", None) or "none",
                                       optimizer=o.get("optimizer", "none"),
                                       adaptive_clipping=o.get("clip_quantile") is not None)
    out = {"predicted_loss": lw["predicted_loss"], "of": design.predicted_at()}
    if differ != []:
        return {**out, "not_compared": differ if differ is not None else "not recorded"}
    interval = lw.get("interval")
    check = getattr(design, "loaded_prediction", None) or {}       # a design read from a file: re-derived or not
    return {**out, "interval": interval, "realized": r.test_loss, "error": r.test_loss - lw["predicted_loss"],
            "inside": interval is not None and math.isfinite(r.test_loss) and interval[0] <= r.test_loss <= interval[1],
            "rederived": check.get("rederived", True), "source": check.get("why", "the design")}


def _with_design(t: Training) -> tuple[Training, object, tuple]:
    """``t`` with what its design fixes (what the design claims re-derived
    first), the design's groups and a private pre-trial's charges; ``t``
    itself where it trains no design.  A budgets file beside a group design
    is checked against it and dropped."""
    from dataclasses import replace

    if t.history is not None:
        check_out_path(t.history, (".csv",))
    if t.budgets is not None and t.design is not None:      # a group design checked against the budgets it was made for
        _check_design_budgets(t.design, t.budgets)
        t = replace(t, budgets=None)
    if t.budgets is not None and t.epsilon is not None:
        raise ValueError("give epsilon (one budget for all) or budgets (a budget per client), not both")
    if t.design is None:
        return t, None, ()
    r = _run_of_design(t.design, t.algorithm, t.clients, dict(epsilon=t.epsilon, delta=t.delta, rounds=t.rounds),
                       t.options)
    partition = t.partition
    if partition is None and t.design.details.get("partition"):     # the clients the design was made for
        partition = _design_partition(t.design.details["partition"], t.beta)
    t = replace(t, algorithm=r["algorithm"], options=r["options"], clients=r["clients"], epsilon=r["epsilon"],
                delta=r["delta"], rounds=r["rounds"], partition=partition,
                dataset=r["dataset"] if t.dataset is None else t.dataset,
                model=r["model"] if t.model is None else t.model)
    return t, r["groups"], r["spent"]


def _with_defaults(t: Training, algorithms) -> Training:
    """``t`` with :data:`TRAIN_DEFAULTS` where neither it nor its design
    says (no ε where the clients have budgets of their own); the algorithm
    checked to be one of ``algorithms``."""
    from dataclasses import replace

    D = TRAIN_DEFAULTS
    algorithm = D["algorithm"] if t.algorithm is None else t.algorithm
    if not isinstance(algorithm, str) or algorithm not in algorithms:
        raise ValueError(f"algorithm must be one of {', '.join(algorithms)}, got {algorithm!r}")
    return replace(t, algorithm=algorithm, dataset=D["dataset"] if t.dataset is None else t.dataset,
                   model=D["model"] if t.model is None else t.model,
                   epsilon=D["epsilon"] if t.epsilon is None and t.budgets is None else t.epsilon,
                   delta=D["delta"] if t.delta is None else t.delta,
                   rounds=D["rounds"] if t.rounds is None else t.rounds)


def _torch(what: str):
    """PyTorch, or one line saying how to install it."""
    try:
        import torch
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ModuleNotFoundError(f"{what} needs PyTorch, which is not installed: "
                                  "pip install 'paretofl[train]'", name="torch") from None
    return torch


def _options_with_budgets(algorithm: str, options: dict) -> dict:
    """A training with a budget per client: client-level dpfedavg, whose σ and
    rate the group design sets (given ones are refused, not overridden)."""
    if algorithm != "dpfedavg":
        raise ValueError("per-client budgets apply to client-level dpfedavg: leave the algorithm out")
    chosen = [k for k in ("sigma", "client_rate") if options.get(k) is not None]
    if chosen:
        one = len(chosen) == 1
        raise ValueError(f"{' and '.join(chosen)} {'is' if one else 'are'} designed for each group with budgets: "
                         f"leave {'it' if one else 'them'} out (or design --budgets, then train --design)")
    from .mechanisms import names as mechanism_names

    mech, takes = options.get("mechanism", DEFAULT), mechanism_names(groups=True)
    if isinstance(mech, str) and mech in mechanism_names() and mech not in recommendation.DESIGN_MECHANISMS:
        # a release no design makes (DP-SGD's per-sample noise): the mechanisms a group design takes, not every design's
        raise ValueError(f"per-client budgets are designed for {' or '.join(takes)} (each group sampled at its own "
                         f"rate), not {mech!r}: leave mechanism out")
    return {"mechanism": DEFAULT, **options}


def _group_design(n_clients: int, delta: float, rounds: int, budgets, mechanism: str, options: dict):
    """The group design a training with budgets runs, with design's own
    defaults (so that train --budgets trains what design --budgets printed),
    and the options with its σ and rate."""
    groups = recommendation.design(Request(n_clients, None, delta, max_rounds=rounds, budgets=budgets,
                                           mechanism=mechanism))
    return groups, {**options, "sigma": groups.sigma, "client_rate": min(1.0, groups.q)}


def _check_design_budgets(design, budgets) -> None:
    """A group design given with the budgets it is for (a budgets CSV file or
    :class:`Budgets`): every client in the group of its own ε, or refused in
    one line naming the first client placed otherwise.  A design file cannot
    show this alone: a client moved to a laxer group is a consistent file."""
    import numpy as np

    from .budgets import budgets_of

    if not isinstance(design, Design) or not design.groups:
        raise ValueError("give budgets or a design, not both: budgets go beside a group design only (to check it)")
    b = budgets_of(budgets, design.n_clients)
    mine = np.asarray([float(design.groups[g]["budget"]) for g in design.group_of])
    theirs = b.epsilons[b.group_of]
    off = np.flatnonzero(~np.isclose(mine, theirs, rtol=1e-12, atol=0))
    if len(off):
        i = int(off[0])
        raise ValueError(f"the design is not for these budgets: client {i} has epsilon {mine[i]:g} in the design "
                         f"and {theirs[i]:g} in the budgets ({len(off)} "
                         f"{'clients differ' if len(off) > 1 else 'client differs'})"
                         "; design again with them")


def _run_of_design(design, algorithm: str, clients, named: dict, options: dict) -> dict:
    """What a :class:`Design` trains, checked (what it claims re-derived):
    its algorithm and options (mechanism, q, σ, recipe, the mechanism's own
    options), clients, ε, δ, T, groups, a private pre-trial's charges, and
    the model and data its κ was fitted for."""
    if not isinstance(design, Design):
        raise ValueError(f"design must be a paretofl Design (Design.load(path) reads a saved one), got "
                         f"{type(design).__name__}")
    design = check_design(design, "design")      # what it claims, re-derived before it trains
    fixed = [k for k in set_by_design(design) if (named[k] if k in named else options.get(k)) is not None]
    if fixed:
        raise ValueError(f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} set by the design: leave "
                         f"{'it' if len(fixed) == 1 else 'them'} out, or design again"
                         + ("; to reproduce the paper's calibration, train the nbafl algorithm without the design"
                            if "calibration" in fixed else ""))
    if clients is not None and clients != design.n_clients:
        raise ValueError(f"the design is for {design.n_clients} clients, not {clients}")
    spent, groups = (), None
    if "pretrial" in design.details:          # a private pre-trial's charges: the run composes with them
        from .theory.privacy import charges_from_data as from_data

        spent = tuple(from_data(design.details["pretrial"]["charges"]))
    own = mechanism_of(design.mechanism).algorithm
    if own != "dpfedavg":                     # a mechanism with its own algorithm (NbAFL) trains by it
        if algorithm not in (None, own):
            raise ValueError(f"NbAFL's design trains the {own} algorithm, not {algorithm}: leave the algorithm out")
        algorithm = own
        clip = design.clip                         # its details' C is checked equal to it on load
        missing = [k for k, v in (("clients_per_round", design.details.get("clients_per_round")),
                                  ("clip", clip)) if v is None]
        if missing:
            raise ValueError(f"this nbafl design lacks NbAFL's {' and '.join(missing)} (its details, which "
                             "nbafl_design writes): make it with nbafl_design (paretofl design --mechanism "
                             "nbafl), not by editing another design's mechanism")
        options = {"clip": clip, "clients_per_round": design.details.get("clients_per_round"),
                   "sigma": design.sigma, **options}     # the designed noise, released as designed
    else:
        if algorithm not in (None, "dpfedavg"):
            raise ValueError(f"a {design.mechanism} design trains client-level dpfedavg, not {algorithm}: leave the "
                             "algorithm out")
        groups = design if design.groups else None
        recipe = {k: getattr(design, k, None) for k in ("clip", "lr", "local_epochs", "batch_size")}
        options = {"mechanism": design.mechanism, "client_rate": min(1.0, design.q), "sigma": design.sigma,
                   **{k: v for k, v in recipe.items() if v is not None}, **design.mechanism_options, **options}
    return dict(algorithm=algorithm, options=options, groups=groups, spent=spent, clients=design.n_clients,
                epsilon=design.budget, delta=design.delta, rounds=design.rounds, dataset=design.dataset,
                model=design.model)


def _check_train_numbers(torch, t: Training) -> None:
    """A training's numbers and places, one line each."""
    import numpy as np

    seed, clients, rounds, replicas, eval_every = t.seed, t.clients, t.rounds, t.replicas, t.eval_every
    epsilon, delta, device, data_dir, secure = t.epsilon, t.delta, t.device, t.data_dir, t.secure

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**62:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    for name, v in (("clients", clients), ("rounds", rounds), ("replicas", replicas), ("eval_every", eval_every)):
        if name == "clients" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float))
                                or not (epsilon > 0) or not math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    check_delta(delta)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda asked for, but no CUDA device is available")
    if data_dir is not None:
        from pathlib import Path

        if not Path(data_dir).is_dir():
            raise ValueError(f"data_dir {data_dir} does not exist or is not a folder")
    if not isinstance(secure, bool):
        raise ValueError(f"secure must be True or False, got {secure!r}")


def _config(cls, algorithm: str, options: dict):
    """The algorithm's config of ``options``: none it does not know, none
    its mechanism would not use, and noise if σ is given."""
    import numpy as np

    known = cls.options()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"{algorithm} has no option {', '.join(unknown)}; its options: {', '.join(known)}")
    mechanism, unused = unused_options(algorithm, options)
    if unused:
        raise ValueError(f"mechanism {mechanism} does not use {', '.join(unused)}: drop "
                         f"{'it' if len(unused) == 1 else 'them'} or choose the mechanism that does")
    config = cls.Config(**options)
    sigma = getattr(config, "sigma", None)
    if sigma is not None and np.any(np.asarray(sigma, dtype=float) == 0):
        raise ValueError("sigma = 0 adds no noise: epsilon would be infinite; give sigma > 0")
    return config


def _design_partition(described: str, beta) -> str:
    """The clients a design was made for, as :func:`train` splits them; a
    beta beside it that would be dropped is refused."""
    from .fl.names import concentration_text, split_partition
    from .recommendation import check_partition

    try:                  # the design's own vocabulary (a split it refuses, a file must not carry either)
        check_partition(described)
    except ValueError as exc:
        # the file's words quoted: its field, not the command line's flag
        raise ValueError(f"the split the design file names is not one design writes: \"{exc}\"; design again") from None
    try:
        split_partition(described, beta)
    except ValueError:
        raise ValueError(f"the design's clients are split {described}; beta {concentration_text(beta)} beside it "
                         "would be dropped: give partition dirichlet:BETA to train other clients") from None
    return described


def _partition_of(partition, beta: float, ds, designed=None) -> tuple[str, float]:
    """The split asked, as the trainer's (name, beta) (one vocabulary with
    the design's: dirichlet:ALPHA is dirichlet at beta ALPHA), or the data's
    own clients where it has them (else iid).  ``designed``: the partition
    the design was made for."""
    from .fl.names import split_partition

    if partition is None:
        partition = "given" if ds.clients is not None else "iid"
    partition, beta = split_partition(partition, beta)
    if partition == "given" and ds.clients is None:
        raise ValueError("partition given needs a data set with a client id per training sample (clients)"
                         + ("; the design was made for clients of their own (its partition given): give data that "
                            "has them, or partition iid, dirichlet:ALPHA or shards:K to split this data"
                            if designed == "given" else ""))
    return partition, beta


def _check_population(cls, config, setup, delta) -> None:
    """δ against the individuals protected, and a client rate that selects someone."""
    import numpy as np

    parts = setup.parts
    # a config naming no mechanism is its algorithm's own (NbAFL)
    unit = mechanism_of(getattr(config, "mechanism", cls.name)).unit
    check_delta(delta, len(setup.data.y_train) if unit != "client" else len(parts), unit)
    rate = getattr(config, "client_rate", 1.0)
    if np.any(np.asarray(rate, dtype=float) * len(parts) < 1 - 1e-9):   # the clients that train, not all ids
        raise ValueError(f"client_rate x clients = {float(np.min(np.asarray(rate) * len(parts))):g} < 1: most "
                         "rounds would select no client; raise client_rate or clients")


def _check_first_round(pol, replicas: int, delta, epsilon, spent) -> None:
    """Refuse, before training, a budget that allows not one round (after a
    private pre-trial's charges, where there are any)."""
    import numpy as np

    first = pol.charges(0)
    if first is None:
        return
    ledger = pol.ledger(replicas, delta)
    if spent:
        ledger.commit(list(spent), ledger.increment(list(spent)), np.ones(replicas, dtype=bool))
    inc = ledger.increment(first)
    if not ledger.affordable(first, inc, epsilon).any():
        one = ledger.grid_epsilon(ledger.rdp + inc)
        after = " after the private pre-trial" if spent else ""
        raise ValueError(f"the budget allows not one round: one round{after} spends epsilon "
                         f"{float(np.min(one)):.4g} > {epsilon:g}; raise epsilon or sigma")


def _train_result(fin, problems, t: Training, setup, config, partition, hist, cls):
    """The :class:`TrainResult` of a finished training ``t``."""
    import numpy as np

    algorithm, dataset, epsilon, secure = t.algorithm, t.dataset, t.epsilon, t.secure

    mean = lambda v: float(np.mean(v))  # noqa: E731
    mech = mechanism_of(getattr(config, "mechanism", cls.name))
    return TrainResult(
        accuracy=mean(fin["accuracy"]), test_loss=mean(fin["test_loss"]), epsilon=float(np.max(fin["epsilon"])),
        delta=float(fin["delta"]), rounds=int(np.max(fin["rounds"])),
        per_replica={k: np.asarray(fin[k]).tolist() for k in ("accuracy", "test_loss", "epsilon", "rounds")},
        seconds=float(fin["seconds"]), algorithm=algorithm, dataset=_label(dataset), model=setup.model.name,
        options={k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in asdict(config).items()},
        clients=len(setup.parts), partition=partition, history=hist.rows, budget=epsilon,
        epsilon_groups=None if "epsilon_groups" not in fin else {
            k: float(np.max(v)) for k, v in fin["epsilon_groups"].items()},
        budget_met=_budget_met(fin, epsilon),
        complete=not problems, problems=problems, noise="entropy" if secure else "seeded",
        unit=mech.unit_text
        + ("; the clients' sizes read from their data and assumed public (DP-SGD's divisor and weights: declare "
           "them with declared_sizes to drop the assumption)"
           if getattr(config, "declared_sizes", "") in (None, "data") and mech.noise_on == "gradient" else ""))


def _budget_met(fin: dict, budget) -> bool | None:
    """Whether every replica spent within its budget; with groups, each group within its own (the exact budgets
    the run held, ``fin["budgets"]``, not the groups' printed labels)."""
    import numpy as np

    if "epsilon_groups" in fin:
        return all(float(np.max(v)) <= float(fin["budgets"][k]) * (1 + 1e-9) for k, v in fin["epsilon_groups"].items())
    if budget is None:
        return None
    return float(np.max(fin["epsilon"])) <= float(budget) * (1 + 1e-9)


def train_problems(final: dict, asked: int | None, budget, by: str = "rounds") -> list[str]:
    """Why a training did not do what was asked, one sentence each (empty: it did).

    * no round trained (the first round would pass the budget: a design
      whose σ, N or q was edited, a group whose q was raised);
    * fewer rounds than ``asked`` (the design's T, or ``rounds`` given
      explicitly): the budget ran out first, or the algorithm's own limit
      came first (``final["limited"]``: ALI-DPFL's R_s rounds or R_c
      iterations, NbAFL's T).  A run given no rounds trains until its
      budget is spent, at most 100 rounds: stopping there is what it was
      asked to do;
    * a non-finite final test loss (the training diverged).
    """
    import numpy as np

    done = np.asarray(final["rounds"], dtype=int).ravel()
    eps = np.asarray(final["epsilon"], dtype=float).ravel()
    loss = np.asarray(final["test_loss"], dtype=float).ravel()
    limited = np.asarray(final.get("limited", np.zeros(len(done), dtype=bool)), dtype=bool).ravel()
    R = len(done)
    of = lambda mask: "" if R == 1 else f" ({int(np.sum(mask))} of {R} replicas)"  # noqa: E731
    out = []
    budget_text = "" if budget is None else f" epsilon {float(budget):g}"
    design = by == "the design"
    if (done == 0).any():          # even where the algorithm's limit stopped it: that limit was the budget's (R_c = 0)
        out.append(f"no round was trained{of(done == 0)}: the first round would spend more than the "
                   f"budget{budget_text}" + ("; the design (a group's q or sigma, or the clients) was changed after "
                                             "it was made: design again" if design else
                                             "; raise epsilon, sigma or the clients, or lower q"))
    if asked is not None and ((done > 0) & (done < int(asked)) & limited).any():
        lim = (done > 0) & (done < int(asked)) & limited
        out.append(f"trained {_rounds_text(done[lim])} of the {int(asked)} rounds asked{of(lim)}: stopped first by "
                   f"{final.get('limit_text', 'the algorithm')} (spent {float(eps[lim].max()):.4g} of the "
                   f"budget{budget_text})")
    short = (done > 0) & ~limited & (done < int(asked)) if asked is not None else np.zeros(R, dtype=bool)
    if short.any():
        asker = "the design's" if design else "the"
        out.append(f"trained {_rounds_text(done[short])} of {asker} {int(asked)} rounds asked{of(short)}: the next "
                   f"round would have spent more than the budget{budget_text} (spent "
                   f"{float(eps[short].max()):.4g}); " + ("the design's sigma, q or clients were changed after it was "
                                                          "made: design again" if design else
                                                          "raise epsilon or sigma, or ask for fewer rounds"))
    bad = ~np.isfinite(loss)
    if bad.any():
        out.append(f"the final test loss is {float(loss[bad][0])}{of(bad)}: the training diverged; lower the "
                   "learning rate or the clip, or scale the features")
    return out


def _rounds_text(done) -> str:
    """The rounds replicas trained: one number, or the range."""
    lo, hi = int(done.min()), int(done.max())
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _label(obj) -> str:
    """A data set's name for a result: its name, or what a user passed."""
    if isinstance(obj, str):
        return obj
    return getattr(obj, "name", None) or type(obj).__name__


# --------------------------------------------------------------------------
# the rest of what the commands do: pre-trials, validation, the audit,
# figures, exports, and the names and options the command line offers.
# Each imports its layer when called (torch only where it trains).
# --------------------------------------------------------------------------
def keep_freed_memory() -> bool:
    """The trainer's process-wide malloc setting (opt-in; the ``paretofl``
    command makes it for train, pretrial and audit):
    :func:`paretofl.fl.engine.keep_freed_memory`."""
    from .fl.engine import keep_freed_memory as keep

    return keep()


def names() -> dict:
    """What the command line offers by name (no torch): built-in data sets,
    models and partitions, algorithms, mechanisms (all; those ``design``
    designs for; those DP-FedAvg trains; those with a design of their own,
    ``nbafl_design``), ``design``'s frameworks and its "auto" (``search``),
    the frameworks ``export`` takes a design to, Flower's name."""
    from .fl.options import CONFIGS, DPFEDAVG_MECHANISMS
    from .integrations import EXPORT_OF_NOISE, EXPORTS, FLOWER
    from .mechanisms import REGISTRY, SEARCH
    from .mechanisms import names as mechanism_names
    from .pretrial.spec import DATASETS, MODELS, PARTITIONS

    return {"datasets": DATASETS, "models": MODELS, "partitions": PARTITIONS, "algorithms": tuple(CONFIGS),
            "mechanisms": mechanism_names(), "designable": recommendation.DESIGN_MECHANISMS,
            "trainable": DPFEDAVG_MECHANISMS, "frameworks": recommendation.FRAMEWORKS, "default_mechanism": DEFAULT,
            "own_design": mechanism_names(trainable=False), "search": SEARCH, "exports": EXPORTS,
            "flower_framework": FLOWER, "export_of_noise": EXPORT_OF_NOISE,
            "mechanism_options": tuple(dict.fromkeys(o for n in mechanism_names()
                                                     for o in REGISTRY[n].constructor_options)),
            "mechanism_option_flags": {o: (*REGISTRY[n].option_flags[o], tuple(
                m for m in mechanism_names() if o in REGISTRY[m].constructor_options))
                for n in mechanism_names() for o in REGISTRY[n].constructor_options}}


def is_reference(value) -> bool:
    """Is ``value`` a user's "package.module:function" (a model factory or a data loader)."""
    from .pretrial.spec import is_reference as ref

    return ref(value)


def algorithm_options() -> dict:
    """option -> {algorithm: (default, help, choices, declared number types)}
    over every algorithm's config (no torch): what ``train`` takes."""
    from dataclasses import fields

    from .fl.options import CONFIGS, options_of

    out = {}
    for name, cfg in CONFIGS.items():
        decl = {f.name: str(f.type) for f in fields(cfg)}
        for opt, (default, help_, choices, _) in options_of(cfg).items():
            kinds = {t for t, word in ((float, "float"), (int, "int"), (str, "str")) if word in decl[opt]}
            out.setdefault(opt, {})[name] = (default, help_, choices, kinds)
    return out


def unused_options(algorithm: str, options: dict) -> tuple[str, list]:
    """(mechanism, the options given that it would not use): :func:`paretofl.fl.options.unused_options`."""
    from .fl.options import unused_options as unused

    return unused(algorithm, options)


def spec(path=None, **fields):
    """A pre-trial spec: the TOML file ``path`` (if any), each field given
    in ``fields`` (not None) overriding the file's; checked
    (:class:`paretofl.pretrial.spec.Spec`)."""
    from .pretrial.spec import Spec, read_toml

    data = read_toml(path) if path is not None else {}
    given = {k: v for k, v in fields.items() if v is not None}
    if ":" in str(given.get("partition", "")) and "beta" not in given:   # dirichlet:0.3 replaces the file's beta;
        data.pop("beta", None)                                             # plain dirichlet keeps it
    data.update(given)
    return Spec.from_dict(data, where=str(path) if path is not None else "the spec's fields")


def pretrial(spec, results, executor: str = "local", ray_address: str | None = None, progress: bool = True,
             max_jobs: int | None = None) -> dict:
    """Run what the results store ``results`` lacks of the pre-trial ``spec``
    (a :class:`~paretofl.pretrial.spec.Spec` or a TOML path) and return a
    summary: :func:`paretofl.pretrial.sweep.run_sweep`."""
    from .pretrial.spec import Spec
    from .pretrial.sweep import run_sweep

    if not isinstance(spec, Spec):
        spec = Spec.from_toml(spec)
    check_out_path(results, (".sqlite", ".db"))
    return run_sweep(spec, results, executor=executor, ray_address=ray_address, progress=progress,
                     max_jobs=max_jobs)


def stored_runs(results) -> int:
    """How many runs the results store ``results`` holds (0 where there is none)."""
    from pathlib import Path

    from .pretrial.store import Store

    if not Path(results).is_file():
        return 0
    st = Store(results)
    try:
        return len(st)
    finally:
        st.close()


def validate(spec, outdir, full_fraction: float = 1.0, budget: float | None = None, executor: str = "local",
             ray_address=None, progress: bool = True) -> dict:
    """κ from the public share against a sweep of the full data, and the
    method's cost: :func:`paretofl.validate.validate`."""
    from .validate import validate as run

    return run(spec, outdir, full_fraction=full_fraction, budget=budget, executor=executor, ray_address=ray_address,
               progress=progress)


def audit_jobs(mechanisms=None, broken: str = "none") -> list[tuple[str, str]]:
    """The (setting, break) pairs an audit runs: every audit setting of the
    ``mechanisms`` (names of mechanisms or of settings; all by default),
    each unbroken (``broken="none"``), with one break, or with every break
    it lists (``"all"``)."""
    from .mechanisms import audit_setting, audit_settings

    pool = audit_settings() if not mechanisms or "all" in mechanisms else \
        [s for n in dict.fromkeys(mechanisms) for s in (audit_settings(n) or [audit_setting(n)])]
    pool = list({s.name: s for s in pool}.values())   # a setting named and within a mechanism named: once
    jobs = []
    for s in pool:
        if broken == "all":
            jobs += [(s.name, b) for b in s.break_names()]
        elif broken == "none" or broken in s.break_names():
            jobs.append((s.name, broken))
    if not jobs:
        raise ValueError(f"no audit setting given has the break {broken!r}")
    return jobs


def audit_names() -> dict:
    """The audit's settings, the mechanisms that have them, and every break."""
    from .mechanisms import audit_settings

    settings = audit_settings()
    return {"settings": [s.name for s in settings], "mechanisms": list(dict.fromkeys(s.mechanism for s in settings)),
            "breaks": sorted({b for s in settings for b in s.break_names()})}


def audit(mechanisms=None, broken: str = "none", runs: int = 200_000, seed: int = 0, progress=None) -> list:
    """Empirical lower bounds on ε (docs/theory.md §5.5) for :func:`audit_jobs`
    of ``mechanisms`` and ``broken``: a list of
    :class:`paretofl.fl.audit.AuditResult`.  ``progress``: ``True`` draws
    the runs done and the time left on stderr when it is a terminal
    (:mod:`paretofl.progress`); a callable is called with the runs as they
    finish."""
    from .fl.audit import audit as run
    from .progress import Progress

    jobs = audit_jobs(mechanisms, broken)
    bar = None
    if isinstance(progress, bool) or progress is None:
        bar = Progress(len(jobs) * (int(runs) // 2 * 2), "audit", "run", wanted=bool(progress))
        progress = bar.update if bar.active else None
    try:
        return [run(s, runs=runs, broken=b, seed=seed, progress=progress) for s, b in jobs]
    finally:
        if bar is not None:
            bar.close()


def design_figure(d: Design, path) -> None:
    """The design figure (:func:`paretofl.plots.design_figure`)."""
    check_out_path(path, (".png", ".pdf", ".svg"))
    from . import plots

    plots.design_figure(d, path)


def pareto_figure(ps: ParetoSet, delta: float, path) -> None:
    """Theorem 3's pieces in the σ–T plane (the box ``ps`` was drawn in) and
    the front in objective space, ε at ``delta``
    (:func:`paretofl.plots.pareto_figure`)."""
    check_out_path(path, (".png", ".pdf", ".svg"))
    check_delta(delta)
    if not isinstance(ps, ParetoSet) or ps.box is None:
        raise ValueError("pareto_figure draws a ParetoSet of paretofl.pareto_set (it knows the box it was drawn in)")
    from . import plots

    plots.pareto_figure(ps, delta, path)


def pretrial_figures(results, fit=None, outdir=None, fmt: str = "png", max_rounds=None,
                     epsilon: str = "exact") -> list:
    """The pre-trial's figures (:func:`paretofl.plots.pretrial_figures`), in
    ``outdir`` (made if missing; default beside ``results``)."""
    from pathlib import Path

    from . import plots
    from .pretrial.store import read_table

    outdir = Path(outdir) if outdir is not None else Path(results).parent
    if outdir.exists() and not outdir.is_dir():
        raise ValueError(f"output folder {outdir} is a file")
    if not Path(results).is_file():
        raise ValueError(f"results file {results} does not exist")
    if fit is not None and not Path(fit).is_file():
        raise ValueError(f"fit file {fit} does not exist")
    read_table(results)  # a foreign or damaged store is refused before a folder is made
    outdir.mkdir(parents=True, exist_ok=True)
    return plots.pretrial_figures(results, fit, outdir, fmt=fmt, max_rounds=max_rounds, epsilon=epsilon)


def export(d: Design, framework: str, clip: float | None = None, client_size: int | None = None,
           batch_size: int | None = None, local_steps: int | None = None):
    """The design in a framework's own parameters: a
    :class:`paretofl.integrations.flower.FlowerPlan` (``clip`` defaults to
    the recipe's C), an :class:`paretofl.integrations.opacus.OpacusPlan`
    (``clip`` the per-sample norm; ``client_size``, ``batch_size`` and
    ``local_steps`` needed), for a banded design (bandmf) a
    :class:`paretofl.integrations.jax_privacy.BandMFPlan`, for a distributed
    one a :class:`paretofl.integrations.tff.TFFPlan` (``clip`` as for
    Flower), and Python that builds it there."""
    from .integrations import EXPORT_OF_NOISE, FLOWER, checked

    d = check_design(d, "the design")          # what it claims, re-derived: an object edited in memory too
    d = checked(d)                             # one budget for all: no framework samples groups
    own = EXPORT_OF_NOISE.get(mechanism_of(d.mechanism).noise_on)
    if framework in EXPORT_OF_NOISE.values() or own is not None:
        if framework != own:
            raise ValueError(f"a {d.mechanism} design exports to {own}, which runs its noise" if own is not None
                             else f"a {d.mechanism} design adds independent noise: export it to flower or opacus")
    if framework in (*EXPORT_OF_NOISE.values(), FLOWER):   # the server's side: C only, no per-client DP-SGD settings
        from .integrations import flower, jax_privacy, tff

        ignored = [n for n, v in (("client_size", client_size), ("batch_size", batch_size),
                                  ("local_steps", local_steps)) if v is not None]
        if ignored:
            whose = " (Opacus's, inside each client)" if framework == FLOWER else ""
            raise ValueError(f"export to {framework} does not use {', '.join(ignored)}{whose}: "
                             f"drop {'it' if len(ignored) == 1 else 'them'}")
        if clip is None and d.clip is None:
            raise ValueError(f"export to {framework} needs clip (the clipping norm C): this design has no C of its "
                             "own (give tune, or a fit that records its pre-trial)")
        bridge = {"jax-privacy": jax_privacy, "tff": tff}.get(framework, flower)
        p = bridge.plan(d, clip if clip is not None else d.clip)
        text = bridge.snippet(p)
        if framework in EXPORT_OF_NOISE.values() and d.local_epochs is not None:   # Flower's plan carries it
            said = ", ".join(f"{k}={v!r}" for k, v in (("local_epochs", d.local_epochs), ("learning_rate", d.lr),
                                                       ("batch_size", d.batch_size)) if v is not None)
            text = f"# each client's training runs, each round: {said} (the design's recipe)\n" + text
        return p, text
    if framework == "opacus":
        import math

        from .integrations import opacus

        recipe_steps = None
        if d.local_epochs is not None and client_size is not None and batch_size is not None \
                and isinstance(client_size, int) and isinstance(batch_size, int) and client_size > 0 and batch_size > 0:
            recipe_steps = d.local_epochs * math.ceil(client_size / batch_size)   # the design's local epochs, as steps
            if local_steps is None:
                local_steps = recipe_steps
        missing = [n for n, v in (("client_size", client_size), ("batch_size", batch_size),
                                  ("local_steps", local_steps), ("clip", clip)) if v is None]
        if missing:
            raise ValueError(f"export to opacus needs {', '.join(missing)} (each client's data, batch, DP-SGD "
                             "steps a round, and the per-sample clipping norm)")
        p = opacus.from_design(d, client_size, batch_size, local_steps, clip)
        text = opacus.snippet(p)
        if recipe_steps is not None and recipe_steps != local_steps:
            text = (f"# the design's recipe is {d.local_epochs} local epoch(s) a round, {recipe_steps} steps of this "
                    f"batch; this plan's epsilon holds for {local_steps} steps a round: train no more (each step "
                    "spends)\n" + text)
        return p, text
    raise ValueError(f"framework must be flower, opacus or jax-privacy, got {framework!r}")
