"""The design: a problem, a search, one result (docs/theory.md §4).

Given N clients, a budget (ε, δ), an efficiency budget T̃ and a utility
model (the closed form with the constant κ of κσ²T = qN, or a model fitted
to a pre-trial store), :func:`design` returns the (q, T, σ) with the lowest
predicted utility loss whose *exact* ε stays within the budget, for one of
the registered mechanisms (:mod:`paretofl.mechanisms`): its charge is the
accountant's law, Theorem 3's closed form the map, and the result says how
far the two lie apart.

* :class:`Problem` -- what is solved: N, (ε, δ), T̃, the q and σ allowed,
  the mechanism (whose :meth:`~paretofl.mechanisms.Mechanism.charge` prices
  every point), on which RDP orders;
* :class:`ClosedForm` and :class:`Empirical` -- utility models, each with its
  own search over (σ, T) at a q (pymoo's ``minimize(problem, algorithm)``);
* :func:`search` -- the best point over the q's;
* :class:`Design` -- one result type for every mechanism (clients with
  budgets of their own fill ``groups``; NbAFL's design fills ``details``),
  saved and loaded as JSON (:meth:`Design.save`, :meth:`Design.load`).

The recipe's C and η come from the pre-trial κ came from
(:func:`recipe_from_spec`); tuning them on public data is a step of its own
(:func:`paretofl.api.design` with ``tune``).  No torch here: ``paretofl
design`` must start fast.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import numbers
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from .mechanisms import AUTO, DEFAULT, REGISTRY, SEARCH, InfeasibleBudget, NbAFLMechanism, search_auto
from .mechanisms import get as mechanism_of
from .mechanisms import names as mechanism_names
from .mechanisms.base import Mechanism
from .mechanisms.statement import statement as privacy_statement
from .theory import pareto
from .theory.local_work import MAX_LOCAL_EPOCHS, SCORED_ON, LocalWork
from .theory.privacy import (
    DEFAULT_ORDERS,
    Charge,
    account,
    check_delta,
    cohort_size,
    conversion_floor,
    conversion_offset,
    least_noise_guess,
    max_steps,
    sorted_unique,
    whole_cohort_rate,
    within,
)

__all__ = ["design", "Request", "Design", "InfeasibleBudget", "PLACEHOLDER_KAPPA", "load_kappa", "default_kappa",
           "DESIGN_MECHANISMS", "FRAMEWORKS", "shipped_fit", "Problem", "ClosedForm", "Empirical", "search",
           "recipe_from_spec", "nbafl_design", "DESIGN_FORMAT", "FIT_FORMAT", "account_design", "check_claims",
           "read_fit", "CLAIM_RTOL"]

#: PLACEHOLDER, not a measurement: the κ used when neither kappa nor fit is
#: given and no shipped pre-trial fit can be read.  κ = 0.05 pairs σ = 1 with
#: T = 20·qN rounds on the relation κσ²T = qN.
PLACEHOLDER_KAPPA = 0.05

MAX_CLIENTS = 1_000_000

#: a fit's problems that make its κ meaningless (they begin so): the
#: pre-trial did not learn, diverged, or its front has no slope to fit
FIT_BLOCKING = ("even non-private training", "even the least noisy run", "the pre-trial diverged", "no front point",
                "the front has no slope")

#: the mechanisms the closed-form search designs for (the registry's)
DESIGN_MECHANISMS = mechanism_names(designable=True)
#: ``design(framework=...)``: where a client-aggregate design runs, which picks its mechanism
FRAMEWORKS = ("paretofl", *(n for n, c in REGISTRY.items() if c.framework != "paretofl"))
#: the format tag of a saved design
DESIGN_FORMAT = "paretofl-design-1"
#: the format tag of a fit file (``paretofl fit``; :mod:`paretofl.pretrial.fit` writes it)
FIT_FORMAT = "paretofl-fit-1"


def shipped_fit(name: str = "lr_fmnist") -> Path:
    """Path of a fit shipped with the package (``paretofl/data/NAME_fit.json``):
    ``lr_fmnist`` (the default κ) or ``lenet_fmnist``."""
    return Path(__file__).parent / "data" / f"{name}_fit.json"   # not importlib.resources: 10 ms of start-up


def store_digest(base: dict) -> str:
    """A results store's base (its spec) as a fit records it, ``results_digest``:
    SHA-256 of its sorted JSON.  A fit's own ``spec`` hashes to it unless
    the fit was edited, and its store's base does wherever that store is
    found."""
    import hashlib

    return hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()


def read_fit(path) -> dict:
    """A fit file's JSON, checked to be a fit (its format tag) with a valid
    κ, and, where it records its store's spec (``results_digest``), with the
    spec it says it was fitted on unedited."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"fit file {p} is a folder, not a fit file")
    if not p.is_file():
        raise ValueError(f"fit file {p} does not exist")
    try:
        data = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"fit file {p} is not a paretofl fit: not JSON ({exc})") from None
    # a file of another kind is refused; one with no format at all is read for its kappa alone (a hand-written
    # {"kappa": ...}: the same as --kappa)
    if not isinstance(data, dict) or data.get("format", FIT_FORMAT) != FIT_FORMAT:
        kind = data.get("format") if isinstance(data, dict) else None
        what = ("a design file: give it to train --design or export, and to design the fit it was made from"
                if kind == DESIGN_FORMAT else f"not a paretofl fit (format {FIT_FORMAT!r} expected, got {kind!r})")
        raise ValueError(f"fit file {p} is {what}")
    try:
        kappa = float(data["kappa"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"fit file {p} is not a paretofl fit (needs a numeric 'kappa'): {exc}") from None
    if not (kappa > 0) or math.isinf(kappa):
        raise ValueError(f"fit file {p} holds an invalid kappa {kappa}")
    digest = data.get("results_digest")
    if digest and not (isinstance(data.get("spec"), dict) and store_digest(data["spec"]) == digest):
        raise ValueError(f"fit file {p} was edited: its pre-trial's \"spec\" is not the one it was fitted on "
                         "(results_digest); run \"paretofl fit\" on its store again")
    return data


def load_kappa(path) -> float:
    """κ from a fit file written by ``paretofl fit`` (JSON with key ``kappa``)."""
    return float(read_fit(path)["kappa"])


def default_kappa() -> tuple[float, str]:
    """The shipped LR pre-trial's κ (package data), else the placeholder."""
    p = shipped_fit()
    if p.is_file():
        return load_kappa(p), "shipped fit lr_fmnist_fit.json"
    return PLACEHOLDER_KAPPA, "placeholder (no fit given; see PLACEHOLDER_KAPPA)"


# --------------------------------------------------------------------------
# the result
# --------------------------------------------------------------------------
def _plain(v):
    """numpy scalars (also inside lists and dicts) as Python numbers."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@dataclass
class Design:
    """A recommendation, for any registered mechanism.

    ``sigma`` is each client's noise multiplier in Gu et al.'s units;
    ``noise_multiplier`` the noise std on what is released, in units of C
    (σ√(qN) on the aggregate's sum: Flower's ``noise_multiplier``);
    ``charged_noise_multiplier`` what the accountant charged (half that
    where a client's change moves the sum by 2C); ``sampling`` the scheme
    it charged.  ``groups`` (clients with budgets of their own): per group
    its ``budget``, ``clients``, ``share``, rate ``q``, ``sigma`` and
    ``epsilon`` spent, with ``group_of`` each client's group; then ``q`` is
    the mean rate, ``epsilon`` the largest ε spent and ``budget`` the
    strictest.  ``mechanism_options``: the mechanism's own (adaptive
    clipping's); ``details``: what only this mechanism's design has
    (NbAFL's).  ``model`` and ``dataset``: what the pre-trial behind κ
    trained (what ``train(design=...)`` trains by default)."""

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
    sigma_relation: float = math.nan
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
    mechanism_options: dict = field(default_factory=dict)
    groups: list | None = None
    group_of: list | None = field(default=None, repr=False)
    model: str | None = None
    dataset: str | None = None
    details: dict = field(default_factory=dict, repr=False)
    # the local work chosen by (4.E.2) where the fit measured it (docs/theory.md §4.E): the local epochs,
    # every candidate's (q, T, σ), objective and predicted test loss with its interval, the dissimilarity
    local_work: dict = field(default_factory=dict, repr=False)

    def predicted_at(self) -> dict | None:
        """What the predicted test loss (``local_work``) is of: the recipe
        the fit's pre-trial trained — its C, its η (the one chosen with K,
        where it measured several), batch size, model, dataset, partition
        and optimizer — at the local epochs (4.E.2) chose, as
        ``local_work["measured_at"]`` records them when designed (and a
        load re-derives from the fit).  C or η set apart afterwards (a
        public tuning, or by hand) leave the prediction where it was: the
        fit measured no other.  None where the design predicts no test
        loss; a C or η None where it is not known (never compared), another
        knob None where it is not recorded (not checked)."""
        if not self.local_work or self.local_work.get("predicted_loss") is None:
            return None
        k = self.local_work.get("epochs")
        clip, lr = self.pair_measured()
        own = self.local_work.get("measured_at", _NOT_RECORDED)
        if own is not _NOT_RECORDED:        # the recipe the fit's curves were measured at, recorded when designed
            own = own if isinstance(own, dict) else {}
            return {"clip": clip, "lr": lr, "local_epochs": k,
                    **{name: _recipe_value(name, own.get(name)) for name in RECIPE_MEASURED}}
        # a file from before the recipe was recorded, whose fit is not here to give it: its model, data and batch,
        # the split its local work was measured on, plain SGD at a fixed C (what every pre-trial trains)
        split = (self.local_work.get("dissimilarity") or {}) if isinstance(self.local_work.get("dissimilarity"),
                                                                            dict) else {}
        return {"clip": clip, "lr": lr, "local_epochs": k,
                "model": _recipe_value("model", self.model), "dataset": _recipe_value("dataset", self.dataset),
                "batch_size": _recipe_value("batch_size", self.batch_size), "optimizer": "sgd",
                "partition": _recipe_value("partition", split.get("partition")), "adaptive_clipping": False}

    def pair_measured(self) -> tuple:
        """The (C, η) the pre-trial behind κ (and the predicted loss) trained at, each None where not known
        (never compared): ``local_work["measured_at"]``'s where the design recorded it; else, in a file from
        before it was, the pair a public tuning kept beside its own (η: the one chosen with K, where the
        design chose one); else the design's own, which no tuning has moved."""
        lw = self.local_work if isinstance(self.local_work, dict) else {}
        own = lw.get("measured_at", _NOT_RECORDED)
        if own is not _NOT_RECORDED:
            own = own if isinstance(own, dict) else {}
            return _number_or_none(own.get("clip")), _number_or_none(own.get("lr"))
        if not self.tuning:
            return _number_or_none(self.clip), _number_or_none(self.lr)
        at = self.tuning.get("measured_at") if isinstance(self.tuning, dict) else None
        at = at if isinstance(at, dict) else {}         # an edited file's record that is no record: unknown
        return _number_or_none(at.get("clip")), _number_or_none(lw["lr"] if lw.get("lr") is not None
                                                                else at.get("lr"))

    def prediction_differs(self, clip=None, lr=None, local_epochs=None, **run) -> list[str] | None:
        """The knobs of a run (each not given: the design's own; ``run``:
        batch_size, model, dataset, partition, optimizer,
        adaptive_clipping) that differ from
        what the predicted test loss is of (:meth:`predicted_at`): [] where
        it is of this run, None where that is not known (no prediction, or
        its C or η not recorded)."""
        at = self.predicted_at()
        if at is None or None in (at["clip"], at["lr"]):       # a pair not recorded (or not numbers): unknown
            return None
        unknown = set(run) - set(RECIPE_MEASURED)
        if unknown:
            raise TypeError(f"prediction_differs: no knob {sorted(unknown)[0]!r}")
        given = {"clip": clip, "lr": lr, "local_epochs": local_epochs, **run}
        mine = {name: v if given.get(name) is None else given[name] for name, v in self.recipe().items()}
        differ = []
        for name in ("clip", "lr"):     # numbers (a string, or a setting per replica, is not the one run predicted)
            v = _number_or_none(mine[name])
            if v is None or not math.isclose(v, at[name], rel_tol=1e-9):
                differ.append(name)
        if at["local_epochs"] is not None and _whole_or_none(mine["local_epochs"]) != at["local_epochs"]:
            differ.append("local_epochs")
        differ += [name for name in RECIPE_MEASURED
                   if at[name] is not None and _recipe_value(name, mine[name]) != at[name]]
        return differ

    def recipe(self) -> dict:
        """What the design trains: its C, η, local epochs, batch size, model, dataset, the partition of the
        clients it was made for (iid where it names none), the clients' optimizer (plain SGD) and whether C
        adapts during the run (``clip_quantile``)."""
        return {"clip": self.clip, "lr": self.lr, "local_epochs": self.local_epochs, "batch_size": self.batch_size,
                "model": self.model, "dataset": self.dataset, "partition": self.details.get("partition") or "iid",
                "optimizer": "sgd",
                "adaptive_clipping": (self.mechanism_options or {}).get("clip_quantile") is not None}

    def prediction_applies(self, clip=None, lr=None, local_epochs=None, **run) -> bool:
        """Whether the predicted test loss is of a run at this C, η, local
        epochs and ``run``'s batch size, model, dataset, partition,
        optimizer and clipping (each default: the design's own):
        :meth:`prediction_differs` is empty."""
        return self.prediction_differs(clip, lr, local_epochs, **run) == []

    def __post_init__(self):
        # plain Python numbers, so that the repr and JSON read as written
        for f in fields(self):
            setattr(self, f.name, _plain(getattr(self, f.name)))

    @property
    def framework(self) -> str:
        """Where the design runs: "paretofl" (its trainer) or "flower"."""
        return mechanism_of(self.mechanism).framework

    @property
    def noise_on(self) -> str:
        """Where the design's mechanism puts its noise ("sum", "update", ...)."""
        return mechanism_of(self.mechanism).noise_on

    @property
    def cohort(self) -> float:
        """m, the expected cohort: Σ_i q_i (qN with one rate for all)."""
        if self.groups:
            return cohort_size(None, cohort=sum(g["q"] * g["clients"] for g in self.groups))
        return cohort_size(self.q, self.n_clients)

    @property
    def clients_per_round(self) -> float:
        """qN, the expected cohort (an integer where it is one)."""
        c = self.cohort
        return int(c) if float(c).is_integer() else c

    def client_rates(self) -> np.ndarray:
        """Each client's sampling rate (N,)."""
        if not self.groups:
            return np.full(self.n_clients, self.q)
        return np.array([self.groups[g]["q"] for g in self.group_of])

    def to_dict(self) -> dict:
        """Every field, and the derived ``framework``."""
        return {**asdict(self), "framework": self.framework}

    def statement(self) -> str:
        """The privacy statement to publish with a deployment of this design
        (Ponomareva et al. 2023, "How to DP-fy ML", §5.3): guarantee, unit,
        neighbours, what is released, who is trusted, sampling, accountant,
        the privacy cost of choosing the hyperparameters, what floating
        point leaves open (:func:`paretofl.mechanisms.statement`).  The
        design is checked first as :meth:`load` checks a file (its figures
        re-derived, :func:`check_claims`): a design changed in memory (more
        rounds, less noise, T = 200.99) is refused in one line, never stated
        at the ε it was made with."""
        self.as_file("this design")
        return privacy_statement(self)

    def as_file(self, where: str = "the design") -> Design:
        """This design as :meth:`save` would write it and :meth:`load` read it
        back — checked as a file is (every figure re-derived, the recipe and
        local work one record) and in plain numbers — or refused in one
        line.  What states or exports a design in memory reads this."""
        return Design._from_data(json.loads(self._json(where)), None, where)

    # ------------------------------------------------------------- as data
    def _json(self, where: str) -> str:
        """The design as a file holds it (numpy's numbers as the plain ones they are)."""
        def plain(o):
            if isinstance(o, np.generic):
                return o.item()
            raise TypeError(type(o).__name__)

        try:
            return json.dumps({"format": DESIGN_FORMAT, **_finite(asdict(self))}, indent=1, default=plain) + "\n"
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: holds a value no design file can hold ({exc}); design again") from None

    def save(self, path) -> None:
        """Write the design as JSON (``.json``; atomic): every parameter that
        shapes the guarantee and the recipe travels with it.  It is checked
        first as :meth:`load` checks a file: a design changed in memory so
        that a load would refuse it (its ε no longer what it spends, local
        epochs its local work did not choose, a C below zero) is refused in
        one line, and nothing is written."""
        import os
        import secrets

        p = Path(path)
        if p.suffix.lower() != ".json":
            raise ValueError(f"a design file must end in .json, got {str(path)!r}")
        if not p.parent.is_dir():
            raise ValueError(f"cannot write {path}: folder {p.parent} does not exist")
        if p.is_dir():
            raise ValueError(f"cannot write {path}: it is a folder")
        text = self._json(f"not saved: design file {p}")
        try:                    # save writes only what load reads
            Design._from_data(json.loads(text), p, f"design file {p}")
        except ValueError as exc:
            raise ValueError(f"not saved: {exc}") from None
        # a new file (O_EXCL: never through a link left there), with the permissions the user's umask gives
        tmp = p.parent / f".paretofl-{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path) -> Design:
        """A design written by :meth:`save` (plain JSON: nothing in it is run)."""
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"design file {path} does not exist or is not a file")
        try:
            data = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"design file {path} is not JSON ({exc})") from None
        return cls._from_data(data, p, f"design file {path}")

    @classmethod
    def _from_data(cls, data, near, where: str) -> Design:
        """A design from a file's data, checked (``near``: the file, beside which its fit is looked for)."""
        if not isinstance(data, dict) or data.get("format") != DESIGN_FORMAT:
            raise ValueError(f"{where} is not a paretofl design (format {DESIGN_FORMAT!r} expected)")
        data.pop("format")
        data.pop("framework", None)          # derived from the mechanism (to_dict writes it)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        missing = sorted(f.name for f in fields(cls) if f.default is _NO_DEFAULT and f.default_factory is _NO_DEFAULT
                         and f.name not in data)
        if unknown or missing:
            raise ValueError(f"{where} does not match this paretofl's designs ("
                             + ", ".join(x for x in (unknown and f"unknown fields {', '.join(unknown)}",
                                                      missing and f"missing {', '.join(missing)}") if x) + ")")
        d = cls(**_nonfinite(data))
        _check_loaded(d, near, where)
        return d

    def __str__(self) -> str:
        return (f"Design(q={self.q:.4g}, rounds={self.rounds}, sigma={self.sigma:.4g}, epsilon={self.epsilon:.4g}, "
                f"delta={self.delta:g}, mechanism={self.mechanism!r}, utility_bound={self.utility_bound:.4g})")


_NO_DEFAULT = fields(Design)[0].default   # dataclasses.MISSING


def _finite(x):
    """JSON has no infinity or NaN: written as strings, read back by :func:`_nonfinite`."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _nonfinite(x):
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, dict):
        return {k: _nonfinite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nonfinite(v) for v in x]
    return x


def _check_loaded(d: Design, path, where: str) -> None:
    """A loaded design must be one this paretofl could have made: a known
    mechanism, numbers in range, groups that fit the clients, and every
    privacy figure it records equal to the one its released parameters
    give (:func:`check_claims`)."""
    if d.mechanism not in mechanism_names():
        raise ValueError(f"{where}: unknown mechanism {d.mechanism!r}")
    try:
        # whole numbers read as the integers they are (a file's 12.0 is T = 12, printed and trained as 12)
        d.n_clients = _int_at_least(d.n_clients, 1, "n_clients")
        d.rounds = _int_at_least(d.rounds, 1, "rounds")
        if d.max_rounds is not None:
            d.max_rounds = _int_at_least(d.max_rounds, 1, "max_rounds")
        check_delta(d.delta, d.n_clients)
        for name in ("epsilon", "budget", "sigma", "utility_bound"):
            _pos(getattr(d, name), name)
        if not (isinstance(d.kappa, (int, float)) and not isinstance(d.kappa, bool) and (
                0 < d.kappa < math.inf or math.isnan(d.kappa) and not REGISTRY[d.mechanism].designable)):
            raise ValueError(f"kappa must be a positive finite number, got {d.kappa!r}")
        _sigma_range(d)
        if not (0 < d.q <= 1):
            raise ValueError(f"q must lie in (0, 1], got {d.q}")
        if d.groups is not None:
            if not isinstance(d.groups, list) or not all(isinstance(g, dict) for g in d.groups):
                raise ValueError("groups must be a list of the groups' records")
            if not isinstance(d.group_of, list) or len(d.group_of) != d.n_clients \
                    or any(not isinstance(g, int) or not 0 <= g < len(d.groups) for g in d.group_of):
                raise ValueError("group_of must give each client's group")
        elif d.group_of is not None:
            raise ValueError("group_of without groups")
        if not isinstance(d.details, dict) or not isinstance(d.mechanism_options, dict) or not isinstance(
                d.closed_form, dict):
            raise ValueError("details, mechanism_options and closed_form must be mappings")
        if d.tuning is not None and not isinstance(d.tuning, dict):     # read after training: refused before it
            raise ValueError(f"tuning must be a mapping (a public tuning's record), got {type(d.tuning).__name__}")
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    try:
        _check_recipe(d, where)
        check_claims(d, where)
        _rederive_prediction(d, path, where)
    except ArithmeticError as exc:               # a whole number past any float, wherever it is read
        raise ValueError(f"{where}: holds a number out of range ({exc}); design again rather than edit the "
                         "file") from None


def _check_recipe(d: Design, where: str) -> None:
    """The recipe a design file trains — C, η, local epochs, batch — in
    range, and its local work one record: the local epochs it trains are the
    ones its local work chose, whose objective is the least of its
    candidates, with the predicted loss inside its interval.  Names are
    quoted: they are the file's fields, not a command's flags."""
    def bad(msg):
        raise ValueError(f"{where}: {msg}; design again rather than edit the file")

    def whole(v, hi):
        return not isinstance(v, bool) and isinstance(v, int) and 1 <= v <= hi

    for name in ("clip", "lr"):
        v = getattr(d, name)
        if v is not None and not (_number_or_none(v) or 0) > 0:          # an integer past any float is none
            bad(f'the recipe\'s "{name}" must be a number above 0, got {_brief(v)}')
    for name, hi in (("local_epochs", 1000), ("batch_size", 1_000_000)):
        v = getattr(d, name)
        if v is not None and not whole(v, hi):
            bad(f'the recipe\'s "{name}" must be a whole number in [1, {hi}], got {_brief(v)}')
    split = d.details.get("partition")
    if split is not None:            # the clients it was made for: a split design itself names, or none
        try:
            check_partition(split)
        except ValueError:
            bad(f'its "details.partition" {split!r} is not a split design names (iid, "dirichlet:ALPHA", '
                '"dirichlet-capped:ALPHA", "shards:K" or given)')
    lw = d.local_work
    if not isinstance(lw, dict):
        bad('"local_work" must be a record')
    if lw:
        _check_local_work_record(d, lw, bad)


def _check_local_work_record(d: Design, lw: dict, bad) -> None:
    """A design file's local work as a record: its fields, numbers and learning rates, the chosen candidate's
    being the design's and the least objective (or the kept reference); re-derived from its fit apart."""
    try:
        for rec in (lw, *lw["candidates"]):
            _check_lw_rate(rec)
        cands = {(int(c["epochs"]), c.get("lr")): float(c["objective"]) for c in lw["candidates"]}
        chosen, predicted = _lw_key(lw), float(lw["predicted_loss"])
        interval = lw.get("interval")
        for name in ("epochs", "reference_epochs", "kept_reference"):     # numbers, or the record is not one
            v = lw.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ValueError(f"{name} must be a whole number, got {v!r}")
        for name in ("dissimilarity", "fit"):
            if lw.get(name) is not None and not isinstance(lw[name], dict):
                raise ValueError(f"{name} must be a record, got {type(lw[name]).__name__}")
    except (KeyError, TypeError, ValueError) as exc:
        bad(f'its "local_work" is malformed ({type(exc).__name__}: {exc})')

    unknown = sorted(set(lw) - _LW_RECORD) + sorted({k for c in lw["candidates"] for k in c} - _LW_CANDIDATE)
    if unknown:
        names = ", ".join(map(str, unknown))
        bad(f'its "local_work" holds fields no design of this paretofl writes ({names[:120]}'
            f'{"..." if len(names) > 120 else ""}: written by a newer paretofl, or edited)')
    # η is named everywhere or nowhere: in the record, its reference, every candidate, and a kept pair's
    named = {"lr" in lw, "reference_lr" in lw, "measured_lrs" in lw, "not_falling_lrs" in lw,
             *("lr" in c for c in lw["candidates"])}
    given = lw.get("given_epochs")
    if given is not None and (named != {True} or given != chosen[0] or isinstance(given, bool)
                              or any(c.get("epochs") != given for c in lw["candidates"])):
        bad('its "local_work" says its local epochs were given, but lists or chose others')
    if len(named) > 1 or ("kept_reference_lr" in lw) != ("kept_reference" in lw and named == {True}):
        bad('its "local_work" names a learning rate in some places and not in others (a fit that measured several '
            "names one in the record, its reference, every candidate and a kept pair; one that measured one, none)")
    if chosen not in cands:
        bad(f'its "local_work" chose {_lw_text(chosen)}, which are not among its candidates')
    if d.local_epochs != chosen[0]:
        k = _brief(d.local_epochs, 20)
        bad(f'it trains "local_epochs" {k} where its "local_work" chose {chosen[0]!r} (its T and sigma were chosen '
            "with it: for another number, design again with it given)")
    if chosen[1] is not None and not d.tuning and not (
            isinstance(d.lr, (int, float)) and math.isclose(d.lr, chosen[1], rel_tol=1e-12)):
        bad(f'it trains "lr" {_brief(d.lr, 30)} where its "local_work" chose {chosen[1]!r} with its local epochs '
            '(its T and sigma are for that pair: a public tuning, tune(...) or --tune, searches C at it)')
    ref = _rule_reference(lw)
    kept = _lw_key(lw, "kept_reference", "kept_reference_lr")    # a lower objective the seeds did not agree on
    kept = None if kept[0] is None else kept
    if kept is not None and (chosen != ref or kept == ref or kept not in cands):
        bad('its "local_work" says it kept the pre-trial\'s own local epochs, but does not')
    if len(cands) > 1 and cands[chosen] > min(cands.values()) and not (
            kept in cands and cands[kept] == min(cands.values()) and chosen == ref):
        bad(f'its "local_work" chose {_lw_text(chosen)} where another candidate\'s objective is lower')
    if not math.isfinite(predicted) or (interval is not None and not (
            isinstance(interval, list) and len(interval) == 2 and all(isinstance(x, (int, float)) for x in interval)
            and interval[0] <= predicted <= interval[1])):
        bad('its "local_work" predicts a loss that is not a number inside its interval')
    if lw.get("scored_on", "test") not in SCORED_ON:
        bad(f'its "local_work" says its fit was scored on {lw.get("scored_on")!r}, which is neither of '
            f'{", ".join(SCORED_ON)}')


#: the fields a design's local work and each of its candidates hold (a file's other fields are refused)
_LW_RECORD = {"epochs", "lr", "reference_epochs", "reference_lr", "measured", "measured_lrs", "predicted_loss",
              "interval", "candidates", "not_falling", "not_falling_lrs", "rounds_measured", "dissimilarity",
              "kept_reference", "kept_reference_lr", "scored_on", "fit", "given_epochs", "measured_at"}
#: a local work record without ``measured_at`` (written before it was)
_NOT_RECORDED = object()
_LW_CANDIDATE = {"epochs", "lr", "q", "rounds", "sigma", "kappa", "objective", "predicted_loss", "interval",
                 "mechanism", "mechanism_options", "beats_reference"}


def _number_or_none(v):
    """A finite number as a float; anything else (a string, a boolean, a list, an integer past any float)
    None: unknown, never compared."""
    if not isinstance(v, numbers.Real) or isinstance(v, (bool, np.bool_)):     # numpy's scalars are numbers
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


#: what a prediction is of besides C, η and the local epochs: the rest of the recipe the fit's pre-trial trained
#: (its clipping norm fixed: adaptive clipping moves C during a run)
RECIPE_MEASURED = ("batch_size", "model", "dataset", "partition", "optimizer", "adaptive_clipping")


def _whole_or_none(v):
    """A whole number (numpy's too, and a float with no fraction) as an int; anything else, a boolean
    included, None."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        return None
    try:
        return int(v) if float(v).is_integer() else None
    except OverflowError:
        return None


def _recipe_value(name: str, v, beta=None):
    """One knob of :data:`RECIPE_MEASURED` as compared: a whole batch size, whether C adapts, a split in its
    one name (``beta``: a concentration given apart, as a spec may), a name; anything else None (not
    recorded).  A split this paretofl cannot name stays as written: it compares equal to itself only."""
    if name == "batch_size":
        return _whole_or_none(v)
    if name == "adaptive_clipping":
        return v if isinstance(v, bool) else None
    if not isinstance(v, str):
        return None
    if name == "partition":
        from .fl.names import split_name

        try:
            return split_name(v, beta, strict=False)
        except ValueError:
            return v
    return v


def _measured_recipe(spec: dict | None, chosen_lr) -> dict:
    """What a fit's curves were measured at, from its pre-trial's spec: its C, the η chosen with K (where it
    measured several; else its own), batch size, model, dataset, partition (in its one name), optimizer and
    clipping (a pre-trial's clients run plain SGD, clipped at a fixed C)."""
    spec = spec or {}
    return {"clip": _number_or_none(spec.get("clip")),
            "lr": _number_or_none(chosen_lr if chosen_lr is not None else spec.get("lr")),
            "batch_size": _recipe_value("batch_size", spec.get("batch_size")),
            "model": _recipe_value("model", spec.get("model")),
            "dataset": _recipe_value("dataset", spec.get("dataset")),
            "partition": _recipe_value("partition", spec.get("partition"), spec.get("beta")),
            "optimizer": "sgd" if spec else None, "adaptive_clipping": False if spec else None}


def _brief(v, n: int = 120) -> str:
    """A value as a file holds it, cut to ``n`` characters for a one-line error."""
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _lw_key(rec: dict, epochs: str = "epochs", lr: str = "lr") -> tuple:
    """A local-work record's key (K, η): η None where the record names none (a fit of one learning rate)."""
    return (rec.get(epochs), rec.get(lr))


def _rule_reference(lw: dict) -> tuple:
    """The pair the bootstrap rule keeps where its draws do not agree: the pre-trial's own (K₀, η₀), or with
    the local epochs given (``given_epochs``, written where η was measured), that K at η₀."""
    k = lw.get("given_epochs")
    return (lw.get("reference_epochs") if k is None else k, lw.get("reference_lr"))


def _lw_text(key) -> str:
    return _epochs_text(key[0]) + ("" if key[1] is None else f" at eta {key[1]:g}")


def _check_lw_rate(rec) -> None:
    """A local-work record's learning rates: numbers in (0, 1000], or absent."""
    if not isinstance(rec, dict):
        raise ValueError(f"a candidate must be a record, got {type(rec).__name__}")
    for name in ("lr", "reference_lr", "kept_reference_lr"):
        v = rec.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1e3):
            raise ValueError(f"{name} must be a learning rate in (0, 1000], got {v!r}")


def _fit_reference(fit) -> dict:
    """What a design's local work records of the fit its prediction came from: the file (``shipped`` for the
    package's) and its SHA-256, so that a loaded design's prediction is re-derived from that same fit."""
    path = shipped_fit() if fit is None else Path(fit).resolve()          # found from any working folder
    return {"file": "shipped" if fit is None else str(path), "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fit_of_prediction(lw: dict, near) -> tuple:
    """(the fit file a loaded design's prediction came from, None) where it is here as it was (the package's,
    or its recorded path, or beside the design by name), else (None, why not)."""
    ref = lw.get("fit")
    if ref is None:
        return None, "it names no fit (a design made before predictions named theirs)"
    if not isinstance(ref, dict) or not isinstance(ref.get("file"), str) or not isinstance(ref.get("sha256"), str):
        return None, "its record of its fit is not a file and its SHA-256"
    if ref["file"] == "shipped":
        cands = [shipped_fit()]
    else:
        p = Path(ref["file"])
        cands = [p] + ([Path(near).resolve().parent / p.name] if near is not None else [])
    for c in cands:
        try:
            if c.is_file() and _sha256(c) == ref["sha256"]:
                return c, None
        except OSError:
            continue
    shown = ref["file"] if len(ref["file"]) <= 200 else ref["file"][:100] + "..." + ref["file"][-60:]
    return None, f"its fit {shown} is not here as it was when the design was made"


def _rederive_prediction(d: Design, path, where: str) -> None:
    """A loaded design's local work is re-derived from the fit it names, at what the design trains: each
    candidate's bound from its q, T, σ and κ_K = κ·A(K₀)/A(K) (the fit's κ) with the mechanism's error
    ratio, its objective (4.E.2), predicted loss and interval from the fit; the chosen candidate is the
    design's own q, T, σ, κ and bound, and the least objective (or the pre-trial's own K, kept where the
    fit's bootstrap draws do not agree that it helps); the candidates are every K the fit measured whose loss
    falls with T; the split scored on and the dissimilarity are the fit's.  A file that says otherwise is
    refused.  What was found is kept beside the design, not in it (``d.loaded_prediction``: ``rederived``
    and ``why``): where the fit is not here as it was, or the mechanism's error ratio is set by its search
    (distributed DP), the prediction is the file's, and is said so where it is compared."""
    lw = d.local_work
    if not lw:
        return

    def bad(msg):
        raise ValueError(f"{where}: its \"local_work\" {msg}: it is not what its fit gives; design again rather "
                         "than edit the file")

    def unverified(why):
        d.loaded_prediction = {"rederived": False, "why": why}

    if d.mechanism == NbAFLMechanism.name or not math.isfinite(d.kappa) or d.utility_model != "closed form":
        raise ValueError(f'{where}: it has a "local_work" where its design has no closed-form bound to choose '
                         "the local work by; design again rather than edit the file")
    fit_path, why = _fit_of_prediction(lw, path)
    if fit_path is None:
        return unverified(why)
    if not isinstance(d.kappa_source, str) or (lw["fit"]["file"] == "shipped") != d.kappa_source.startswith(
            "shipped fit"):
        bad(f"names its fit ({lw['fit']['file']}) where its kappa_source says {d.kappa_source!r}")
    data = read_fit(fit_path)

    def close(a, b):
        return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, rel_tol=1e-9,
                                                                                        abs_tol=1e-12)

    _rederive_pair(d, lw, data, close, bad)         # what it is of is the fit's spec's, whatever the mechanism
    mech = mechanism_of(d.mechanism, **(d.mechanism_options or {}))
    if mech.error_ratio_planned:
        return unverified(f"the error ratio of its mechanism {d.mechanism} is set by its search")
    fitted = LocalWork.from_dict(data.get("local_work"), f"fit {fit_path}")
    kappa = float(data["kappa"])
    ci = _kappa_ci(None, str(fit_path))
    lw["fit"] = {**lw["fit"], "file": "shipped" if lw["fit"]["file"] == "shipped" else str(fit_path.resolve())}

    def whole(v, lo=1):
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    def positive(v, hi=math.inf):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= hi and math.isfinite(v)

    cands = lw.get("candidates")
    if not isinstance(cands, list) or not cands or not all(isinstance(c, dict) for c in cands):
        bad("has no candidates")
    cap = d.max_rounds if whole(d.max_rounds) else d.rounds          # no candidate runs more rounds than allowed
    for c in cands:
        if not (whole(c.get("epochs")) and whole(c.get("rounds")) and c["rounds"] <= cap
                and positive(c.get("q"), 1.0) and positive(c.get("sigma")) and _lw_key(c) in fitted.settings()):
            shown = {k: c.get(k) for k in ("epochs", "lr", "q", "rounds", "sigma")}
            bad(f"lists a candidate that is not a design the fit measured ({shown})")
    by_k = {_lw_key(c): c for c in cands}
    if len(by_k) != len(cands):
        bad("lists a number of local epochs twice")
    _rederive_record(lw, data, fitted, cands, by_k, close, bad)
    bounds = {}
    with np.errstate(over="raise", invalid="raise"):
        try:
            _rederive_candidates(by_k, fitted, kappa, ci, d, d.n_clients, bounds, close, bad)
        except (OverflowError, ZeroDivisionError, FloatingPointError) as exc:
            bad(f"holds a number out of range ({exc})")
    _rederive_choice(d, lw, fitted, cands, by_k, bounds, close, bad)
    d.loaded_prediction = {"rederived": True, "why": "re-derived from " + (
        "the shipped fit" if lw["fit"]["file"] == "shipped" else f"the fit {fit_path} (its local work as that file "
        "says: a fit's digest covers its spec)") + " at the q, T and sigma the design trains; the other local "
        "epochs' points are the file's, not searched again"}


def _rederive_record(lw, data, fitted, cands, by_k, close, bad) -> None:
    """What the fit measured, as the local work records it: the split scored on, the local epochs and rounds,
    the dissimilarity, and the candidates (every K whose loss falls with T)."""
    if lw.get("scored_on", "test") != (data.get("spec") or {}).get("scored_on", "test"):
        bad(f"says its fit was scored on {lw.get('scored_on', 'test')}")
    if (lw.get("measured") != list(fitted.epochs) or lw.get("reference_epochs") != fitted.reference_epochs
            or lw.get("rounds_measured") != list(fitted.rounds) or lw.get("measured_lrs") != fitted.lrs
            or lw.get("reference_lr") != fitted.reference_lr):
        bad("says its fit measured other local epochs, learning rates or rounds")
    dis = {k: v for k, v in (lw.get("dissimilarity") or {}).items() if k != "partition"}
    own = {k: v for k, v in fitted.dissimilarity.items() if k != "partition"}
    if set(dis) != set(own) or any(not close(dis[k], own[k]) for k in own):
        bad("gives another dissimilarity")
    falling = [x for x in fitted.settings() if not math.isinf(fitted.ratio(x))]
    flat = [x for x in fitted.settings() if x not in falling]
    given = lw.get("given_epochs")              # local epochs given: the candidates are that K's pairs
    if given is not None:
        falling = [x for x in falling if x[0] == given]
        flat = [x for x in flat if x[0] == given]
    # every falling candidate (at the K given, where η was measured); one alone is a one-η fit's K given
    alone = len(cands) == 1 and fitted.lrs is None
    if lw.get("not_falling") != [k for k, _ in flat] or lw.get("not_falling_lrs") != (
            None if fitted.lrs is None else [lr for _, lr in flat]) or (
            not alone and set(by_k) != set(falling)) or (alone and _lw_key(cands[0]) not in falling):
        bad("lists other candidates than the local epochs its fit measured falling with T")


def _rederive_pair(d, lw, data, close, bad) -> None:
    """The η the pre-trial ran at, as the local work records it, is its fit's spec's, and what its
    prediction is of (``measured_at``) the fit's recipe: its C, that η or the one chosen with K, its batch,
    model, data and split, SGD at a fixed C.  (A design may be set to train another, in Python or by a
    tuning: its prediction is then not compared, :meth:`Design.prediction_differs`.)"""
    spec = data.get("spec") or {}
    own = spec.get("lr")
    if lw.get("reference_lr") is not None and isinstance(own, (int, float)) and not close(lw["reference_lr"],
                                                                                           float(own)):
        bad(f"says its pre-trial ran at lr {lw['reference_lr']!r} where its fit's ran at {own!r}")
    # what the prediction is of: the fit's recipe, its η or the one chosen with K (a file from before it was
    # recorded is given it here)
    recipe = _measured_recipe(spec, lw.get("lr"))
    got = lw.get("measured_at", _NOT_RECORDED)
    if got is _NOT_RECORDED:
        lw["measured_at"] = recipe
        return
    if not isinstance(got, dict):
        bad(f'says its prediction is of {_brief(got)}, not a record of the recipe its fit measured')
    extra, missing = [k for k in got if k not in recipe], [k for k in recipe if k not in got]
    if extra or missing:
        names = ", ".join(_brief(k, 40) for k in extra[:3]) + (", ..." if len(extra) > 3 else "")
        bad(f'records what its prediction is of with {"fields " + names if extra else ""}'
            f'{" and " if extra and missing else ""}{"no " + ", ".join(missing) if missing else ""}'
            " (a record this paretofl does not write: a newer paretofl's, or edited)")
    differ = [k for k in recipe if not (got[k] is None if recipe[k] is None else
                                        close(got[k], recipe[k]) if k in ("clip", "lr") else
                                        type(got[k]) is type(recipe[k]) and got[k] == recipe[k])]
    if differ:          # every knob that differs, each cut short: an edit of any one is named
        bad("says its prediction is of " + ", ".join(f"{k} {_brief(got[k], 40)}" for k in differ)
            + " where its fit measured " + ", ".join(f"{k} {recipe[k]!r}" for k in differ))


def _rederive_candidates(by_k, fitted, kappa, ci, d, n, bounds, close, bad) -> None:
    """Each candidate's bound, κ_K, objective, predicted loss and interval, from its q, T, σ, its mechanism
    and options (the design's where a file predates them) and the fit."""
    named = {("mechanism" in c, "mechanism_options" in c) for c in by_k.values()}
    if len(named) > 1 or named == {(True, False)} or named == {(False, True)}:
        bad("names the mechanism and options of some candidates and not of others (a file from before they were "
            "named names none)")
    for k, c in by_k.items():              # k: the candidate's (K, η)
        mech = _candidate_mechanism(c, d, bad)
        ratio = float(mech.error_ratio(c["rounds"]))
        bound = bounds[k] = 1.0 / c["rounds"] + kappa * fitted.ratio(k) * float(c["sigma"]) ** 2 * ratio / (
            c["q"] * n)
        own = _candidate(fitted, k, c["q"], c["rounds"], c["sigma"], bound, kappa, ci)
        pred, iv = own["predicted_loss"], own["interval"]
        if not close(c.get("kappa"), own["kappa"]) or not close(c.get("objective"), own["objective"]):
            bad(f"gives {_lw_text(k)} another kappa or objective than its q, T, sigma and its fit's kappa")
        got = c.get("interval")
        if not close(c.get("predicted_loss"), pred) or (iv is None) != (got is None) or iv is not None and not (
                isinstance(got, list) and len(got) == 2 and all(close(x, y) for x, y in zip(got, iv))):
            bad(f"predicts at {_lw_text(k)} a loss its fit does not ({pred:.6g}, interval {iv})")


def _candidate_mechanism(c: dict, d: Design, bad):
    """The configured mechanism a candidate of the local work was searched with: its own name and options as
    recorded (a file written before they were recorded: the design's), each checked as a request's would be."""
    name = c.setdefault("mechanism", d.mechanism)
    options = c.setdefault("mechanism_options", dict(d.mechanism_options or {}))
    if not isinstance(name, str) or name not in REGISTRY or not isinstance(options, dict):
        bad(f"lists a candidate with an unknown mechanism or options ({name!r}, {options!r})")
    if name != d.mechanism and not (name in AUTO and d.mechanism in AUTO):
        bad(f"lists a candidate of {name}, which no search for its {d.mechanism} design compares")
    try:
        REGISTRY[name].check_options(options)
        mech = mechanism_of(name, **options)
        mech.check_rate(c["q"], d.n_clients)
    except (TypeError, ValueError) as exc:
        bad(f"lists a candidate whose mechanism {name} cannot run as it says ({exc})")
    if json.dumps(mech.options_dict(), sort_keys=True) != json.dumps(options, sort_keys=True):
        bad(f"lists a candidate whose options {options!r} are not those its mechanism records "
            f"({mech.options_dict()!r})")
    if mech.error_ratio_planned:
        bad(f"lists a candidate with {name}, whose error ratio is set by its search: it was not searched so")
    return mech


def _rederive_choice(d, lw, fitted, cands, by_k, bounds, close, bad) -> None:
    """The chosen candidate is the design it trains, and the least objective (or the pre-trial's own K,
    kept where the fit's bootstrap draws do not agree that the least helps)."""
    key = _lw_key(lw)
    chosen = by_k.get(key)
    if chosen is None or d.local_epochs != lw["epochs"] or not (
            close(chosen["q"], d.q) and chosen["rounds"] == d.rounds and close(chosen["sigma"], d.sigma)
            and chosen["mechanism"] == d.mechanism and chosen["mechanism_options"] == (d.mechanism_options or {})
            and close(chosen["kappa"], d.kappa) and close(d.utility_bound, bounds[key])) or (
            key[1] is not None and not d.tuning and not close(d.lr, key[1])):
        bad("chose a candidate that is not the design it trains (its q, T, sigma, kappa, bound and learning rate)")
    if not close(lw.get("predicted_loss"), chosen["predicted_loss"]) or lw.get("interval") != chosen.get("interval"):
        bad("predicts for the local epochs it chose another loss than its candidate's")
    least = min(c["objective"] for c in cands)
    kept = _lw_key(lw, "kept_reference", "kept_reference_lr")
    kept = None if kept[0] is None else kept
    if len(cands) > 1 and chosen["objective"] > least:
        ref = _rule_reference(lw)
        sure = _beats_reference(fitted, [dict(c) for c in cands], ref)
        if not (kept in by_k and by_k[kept]["objective"] == least and key == ref
                and sure.get(kept, 0.0) < LOCAL_WORK_CONFIDENCE):
            bad(f"chose {_lw_text(key)} where another candidate's objective is lower and the fit's "
                "draws agree it helps")
    elif kept is not None:
        bad("says it kept the pre-trial's own local epochs, but chose the least objective")
    else:                                        # the least, other than the rule's reference: its draws agreed
        ref = _rule_reference(lw)
        if len(cands) > 1 and key != ref and ref in by_k and _beats_reference(
                fitted, [dict(c) for c in cands], ref).get(key, 0.0) < LOCAL_WORK_CONFIDENCE:
            bad(f"chose {_lw_text(key)} over {_lw_text(ref)} where the fit's draws do not agree it helps")


#: how far a recorded privacy figure may sit from the one re-derived (float noise across machines)
CLAIM_RTOL = 1e-6


def account_design(d: Design) -> dict:
    """ε re-derived from what the design releases — its mechanism and the
    mechanism's options, q, T, σ, N, δ, its groups, and the private
    pre-trial's charges it composes with — never from the ε it records:
    {"epsilon": the total, "training": the training alone, "pretrial": the
    pre-trial alone or None, "groups": each group's or None,
    "noise_multiplier", "charged_noise_multiplier", "sampling"; with groups
    also "group_problems", "group_q", "group_budget" (budgets.account_groups)}."""
    from .theory.privacy import charges_from_data

    mech = mechanism_of(d.mechanism, **(d.mechanism_options or {}))
    if not mech.designable and mech.trainable:
        raise ValueError(f"no design is made for {d.mechanism} (it trains, but neither design() nor a design of "
                         "its own chooses its knobs)")
    pre = (d.details or {}).get("pretrial")
    if "pretrial" in (d.details or {}) and not isinstance(pre, dict):
        raise ValueError(f"its private pre-trial is {pre!r}, not a record of its charges")
    prior = tuple(charges_from_data(pre.get("charges"))) if pre is not None else ()
    if pre is not None:                  # what design() refuses to compose, a file may not compose either
        if not prior:
            raise ValueError("it records a private pre-trial that charged nothing")
        _check_pretrial_fits(_pretrial_clients(pre, d.n_clients), d.n_clients, mech, d.groups or None)
    out = {"pretrial": account(prior, d.delta) if prior else None, "groups": None}
    if d.groups and d.local_work:      # (a design of its own, NbAFL's, is refused one with the prediction)
        raise ValueError("it lists local-work candidates where its design chooses no local work (groups with "
                         "budgets of their own)")
    if not mech.designable and (pre is not None or d.local_work):
        # accounted below as its own design, every round a Gaussian: nothing before it, nothing beside it
        raise ValueError(f"a {d.mechanism} design composes no private pre-trial and lists no local work: design() "
                         "makes neither for it")
    if d.groups:                       # (a private pre-trial beside groups is refused above: _check_pretrial_fits)
        from .budgets import account_groups

        g = account_groups(d.mechanism, d.groups, d.group_of, d.sigma, d.delta, d.rounds)    # (its mechanism's)
        _runs(mech, d.q, d.sigma, d.n_clients)
        out.update(groups=g["epsilons"], epsilon=max(g["epsilons"]), training=max(g["epsilons"]),
                   group_problems=g["problems"], group_q=g["q"], group_budget=g["budget"],
                   **{k: g[k] for k in ("noise_multiplier", "charged_noise_multiplier", "sampling")})
        return out
    _runs(mech, d.q, d.sigma, d.n_clients)
    c = mech.charge(d.q, d.sigma, d.n_clients)
    out.update(charged_noise_multiplier=float(c.noise_multiplier), sampling=c.sampling,
               noise_multiplier=float(mechanism_of(d.mechanism).noise(d.q, d.sigma, d.n_clients).std))
    if not mech.designable:       # its own design (NbAFL's): a Gaussian of σ per upload, every round, searched orders
        e = max(mech.epsilon(d.q, d.sigma, d.rounds, d.delta, d.n_clients),
                account([Charge("poisson", 1.0, d.sigma, d.rounds)], d.delta))
        out.update(epsilon=e, training=e)
        return out
    p = Problem(d.n_clients, d.budget, d.delta, max(int(d.rounds), int(d.max_rounds or 0)), [d.q],
                d.sigma_min or d.sigma, d.sigma_max or d.sigma, mech, mech.orders, prior)
    out["epsilon"] = p.epsilon_of(d.q, d.sigma, d.rounds)
    out["candidates"] = _candidates_spend(d, prior, pre)
    if p.ratios is None:      # Theorem 3's point beside it, computed again (a design with an error ratio has none)
        out["closed_form"] = _closed_form_again(d, p)
    out["training"] = (mech.epsilon(d.q, d.sigma, d.rounds, d.delta, d.n_clients, orders=mech.orders) if prior
                       else out["epsilon"])
    return out


def _runs(mech, q, sigma, n: int) -> None:
    """A point a file records can run: a rate its mechanism can run (bandmf: q = 1/b; amplified: q b <= 1) and
    the release it names exists (a count noise leaving no budget for the update does not); ValueError if not."""
    mech.check_rate(q, n)
    if mech.trainable:
        mech.noise(q, sigma, n)


def _pretrial_clients(pre: dict, n: int) -> int:
    """The clients a design file says its private pre-trial ran on: its own N where it does not say (design()
    records none: it refuses a pre-trial on other clients), never "none" (which would skip the checks of
    what the pre-trial composes with)."""
    clients = pre.get("clients")
    if clients is None:
        return n
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"its private pre-trial ran on {clients!r} clients, not a whole number")
    return clients


def _candidates_spend(d: Design, prior: tuple, pre) -> dict:
    """What each candidate of a design's local work spends at its own q, T, σ with its own mechanism (the
    design's where a file predates them), composed with the pre-trial's charges: {the candidate's name (its K,
    and η where the fit measured several): ε}.  A candidate is another design a user may ask for
    (``--local-epochs K``): it is checked as the design is (its rate, its release, the pre-trial it composes
    with) and must be within the budget too, whether or not the fit it was chosen from is here.  One that
    cannot be accounted, or a candidate listed twice, is a ValueError."""
    cands = d.local_work.get("candidates") if isinstance(d.local_work, dict) else None
    if cands is None:
        return {}
    if not isinstance(cands, list) or not all(isinstance(c, dict) for c in cands):
        raise ValueError("its local work's candidates are not a list of points")
    out = {}
    for c in cands:
        k = c.get("epochs")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_LOCAL_EPOCHS:
            raise ValueError(f"a candidate's local epochs {k!r} are not a whole number of epochs from 1 to "
                             f"{MAX_LOCAL_EPOCHS}")
        _check_lw_rate(c)
        k = _lw_text(_lw_key(c))                   # (K, η): the candidate's name, the key of what it spends
        if k in out:
            raise ValueError(f"its local work lists {k} twice")
        name, options = c.get("mechanism", d.mechanism), c.get("mechanism_options", d.mechanism_options or {})
        if not isinstance(name, str) or not isinstance(options, dict):
            raise ValueError(f"a candidate names the mechanism {name!r} with options {options!r}")
        q, sigma, rounds = c.get("q"), c.get("sigma"), c.get("rounds")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf
               for v in (q, sigma, rounds)) or not isinstance(rounds, int):
            raise ValueError(f"a candidate at {k} runs q {q!r}, T {rounds!r}, sigma {sigma!r}")
        try:
            mech = mechanism_of(name, **options)
            if pre is not None:          # what design() refuses to compose, a candidate may not compose either
                _check_pretrial_fits(_pretrial_clients(pre, d.n_clients), d.n_clients, mech, None)
            _runs(mech, q, sigma, d.n_clients)
            p = Problem(d.n_clients, d.budget, d.delta, rounds, [q], sigma, sigma, mech, mech.orders, prior)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a candidate at {k} cannot run as it says ({exc})") from None
        out[k] = p.epsilon_of(q, sigma, rounds)
    return out


def _epochs_text(k: int) -> str:
    return f"{k} local epoch{'' if k == 1 else 's'}"


def _closed_form_again(d: Design, p: Problem) -> dict:
    """A design's closed-form point, computed again from its problem as :func:`_design_point` computes it.  It
    is not what is released: a file's own is replaced by it, never believed (a file from before its ε was
    reported on Flower's fixed orders too has another)."""
    t_cap = int(d.max_rounds) if d.max_rounds is not None else int(d.rounds)
    return _closed_form_point(p, d.q, d.budget, t_cap, d.sigma_min, d.sigma_max, float(d.kappa))


def _closed_form_point(p: Problem, q, eps, t_cap, s_lo, s_hi, kappa) -> dict:
    """Gu et al.'s map at q (:func:`_closed_form_for_q`) under problem ``p``, its ε reported as the design's is
    (where an outside accountant reports on fixed orders, the larger); {} where the map has none."""
    cf = _closed_form_for_q(q, p.n_clients, eps, p.delta, t_cap, s_lo, s_hi, kappa, tuple(p.orders),
                            acct=p.unit_charge(q))
    if cf is None:
        return {}
    cf["epsilon"] = p.epsilon_of(cf["q"], cf["sigma"], cf["rounds"])
    return cf


def check_claims(d: Design, where: str = "the design") -> dict:
    """Refuse, in one line, a design whose recorded privacy figures are not
    the ones its released parameters give (a design edited by hand: a
    lowered σ, a raised T or q, an edited ε, budget, mechanism or pre-trial
    charges), or whose ε passes its budget; return :func:`account_design`'s
    figures, which are what every reader of the design prints."""
    try:
        got = account_design(d)
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as exc:
        raise ValueError(f"{where}: its privacy cannot be re-derived ({type(exc).__name__}: {exc}); design again") \
            from None

    def differs(a, b) -> bool:       # a figure the file records (a number, never text) against the re-derived
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            return True
        try:
            a, b = float(a), float(b)
        except OverflowError:                                   # a whole number past any float
            return True
        if not (math.isfinite(a) and math.isfinite(b)):        # inf is within any tolerance of anything: not here
            return not (a == b or math.isnan(a) and math.isnan(b))
        return not (abs(a - b) <= CLAIM_RTOL * max(abs(a), abs(b), 1e-12))

    bad = []
    if differs(d.epsilon, got["epsilon"]):
        bad.append(f"epsilon {d.epsilon!r} where its parameters spend {got['epsilon']!r}")
    for k in ("noise_multiplier", "charged_noise_multiplier"):
        if k in got and differs(getattr(d, k), got[k]):
            bad.append(f"{k} {getattr(d, k)!r} where they give {got[k]:.6g}")
    if "sampling" in got and d.sampling != got["sampling"]:
        bad.append(f"sampling {d.sampling!r} where the mechanism charges {got['sampling']!r}")
    pre = (d.details or {}).get("pretrial")
    if pre is not None:
        if differs(pre.get("epsilon"), got["pretrial"]):
            bad.append(f"a private pre-trial of epsilon {pre.get('epsilon')!r} where its charges compose to "
                       f"{got['pretrial']:.6g}")
        if differs(pre.get("training_epsilon"), got["training"]):
            bad.append(f"a training of epsilon {pre.get('training_epsilon')!r} where it spends {got['training']:.6g}")
    if got["groups"] is not None:
        bad.extend(got["group_problems"])
        if differs(d.q, got["group_q"]):
            bad.append(f"q {d.q!r} where its groups' rates give an expected cohort of {got['group_q']:.6g} of N")
        if differs(d.budget, got["group_budget"]):
            bad.append(f"budget {d.budget!r} where its strictest group's is {got['group_budget']:.6g}")
        for g, e in zip(d.groups, got["groups"]):
            if differs(g.get("epsilon"), e):
                bad.append(f"a group's epsilon {g.get('epsilon')!r} where it spends {e:.6g}")
            if e > float(g.get("budget", 0)) * (1 + CLAIM_RTOL):
                bad.append(f"a group spends {e:.6g}, past its budget {g.get('budget')!r}")
    derived = {}
    try:                                  # a family's own figures, re-derived from its knobs and (q, T, σ)
        derived = mechanism_of(d.mechanism, **(d.mechanism_options or {})).derived_details(d)
    except (ValueError, TypeError, KeyError, ZeroDivisionError) as exc:
        bad.append(f"figures its parameters cannot give ({type(exc).__name__}: {exc})")
    for k, v in derived.items():
        have = (d.details or {}).get(k)
        if differs(have, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else have != v:
            bad.append(f"{k} {have!r} where its parameters give {v!r}")
    for k in getattr(REGISTRY.get(d.mechanism), "constructor_options", ()):    # a family's knobs, said twice
        if k in (d.details or {}) and d.details[k] != (d.mechanism_options or {}).get(k):
            bad.append(f"{k} {d.details[k]!r} in its details where its mechanism has "
                       f"{(d.mechanism_options or {}).get(k)!r}")
    bad.extend(_closed_form_problems(d, got))
    if not bad and got["groups"] is None and got["epsilon"] > d.budget * (1 + CLAIM_RTOL):
        bad.append(f"epsilon {got['epsilon']:.6g}, past its budget {d.budget:g}")
    bad.extend(f"a candidate at {k} that spends epsilon {e:.6g}, past its budget {d.budget:g}"
               for k, e in got.get("candidates", {}).items() if e > d.budget * (1 + CLAIM_RTOL))
    if bad:
        raise ValueError(f"{where} does not add up: it records {bad[0]}"
                         + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                         + "; it was changed by hand or by another version: design again, nothing was believed")
    _report_the_larger(d, got, derived)
    return got


def _closed_form_problems(d: Design, got: dict) -> list[str]:
    """A closed-form point a design file records where its design has none (``got``: account_design's)."""
    if d.closed_form and "closed_form" not in got:
        return ["a closed-form point where its design has none (groups with budgets of their own, a mechanism "
                "with an error ratio or a design of its own)"]
    return []


def _report_the_larger(d: Design, got: dict, derived: dict) -> None:
    """Each ε the design records, raised to the re-derived one where that is larger (they agree within
    :data:`CLAIM_RTOL`: a file from another machine or version may sit below by round-off, and what is
    reported is never under the spend); the noise multipliers, a family's own figures and the closed-form
    point's distance taken as re-derived (an exported noise multiplier a round-off below its parameters' would
    spend more than the ε reported)."""
    for k in ("noise_multiplier", "charged_noise_multiplier"):
        if k in got:
            setattr(d, k, got[k])
    if derived:
        d.details = {**(d.details or {}), **derived}
    if "closed_form" in got:                # the point beside it, and how far the design lies from it, again
        d.closed_form = cf = got["closed_form"]
        d.distance = {} if not cf else {
            "sigma_rel": d.sigma / cf["sigma"] - 1.0, "rounds_rel": d.rounds / cf["rounds"] - 1.0,
            "utility_rel": d.utility_bound / cf["utility_bound"] - 1.0}
    d.epsilon = max(float(d.epsilon), got["epsilon"])
    pre = (d.details or {}).get("pretrial")
    if isinstance(pre, dict):
        pre["epsilon"] = max(float(pre["epsilon"]), got["pretrial"])
        pre["training_epsilon"] = max(float(pre["training_epsilon"]), got["training"])
    for g, e in zip(d.groups or (), got["groups"] or ()):
        g["epsilon"] = max(float(g["epsilon"]), e)


# --------------------------------------------------------------------------
# the problem, the utility models, the search
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Acct:
    """One q's charge per unit σ, as the searches read it: the sampling, the
    noise multiplier, the rate charged (q, or a group's rate), and the
    rounds k charged participations allow (``rounds_for``)."""

    sampling: str
    zf: float
    rate: float
    rounds_for: object
    prior: tuple = ()      # charges spent before the training (a private pre-trial), composed with it
    fixed: bool = False    # ε reported on fixed orders too (Flower's): the larger of that and the searched one

    def __post_init__(self):
        # the spend before the training as plain numbers, one ledger's: the searches remember answers by it
        object.__setattr__(self, "prior", tuple(_one_ledger(c) for c in self.prior))

    def epsilon(self, z, steps, delta, orders, on_grid=False) -> float:
        """ε of ``steps`` charged participations at noise multiplier z, after the prior (orders searched; with
        ``on_grid``, on the grid of orders alone, as the search counts rounds: the larger)."""
        return account([*self.prior, Charge(self.sampling, self.rate, z, int(steps))], delta, orders,
                       fixed=self.fixed or on_grid)

    def meets(self, eps, z, steps, delta, orders) -> bool:
        """``epsilon(z, steps, delta, orders) <= eps``, answered yes at once where ε on the grid of orders is
        below it by more than round-off (computed lazily: :func:`~paretofl.theory.privacy.within`), since the
        searched ε is at most the grid's (summed in another order: an ulp apart where they are equal);
        otherwise the searched ε is computed."""
        a = np.asarray(orders, dtype=float)
        off = conversion_offset(a, delta) + sum((c.rdp(a) for c in self.prior), np.zeros(a.size))
        return bool(within(eps * (1 - 1e-12), self.rate, z, int(steps), off, orders, self.sampling)) or self.epsilon(
            z, steps, delta, orders) <= eps


def _one_ledger(c: Charge) -> Charge:
    """A charge spent before a design's training, its numbers as Python's (numpy's 0-d arrays and scalars are
    the same charge); several ledgers' (arrays) are no one training's spend: refused in one line."""
    if any(np.ndim(v) for v in (c.rate, c.noise_multiplier, c.steps)):
        raise ValueError(f"a spend before the training must be one ledger's charges (numbers), got {c!r}")
    return Charge(c.sampling, float(c.rate), float(c.noise_multiplier), int(c.steps))


@dataclass
class Problem:
    """What :func:`search` solves: the lowest predicted utility loss over
    the cohort sizes ``qs``, σ in [sigma_min, sigma_max] and integer T in
    [1, t_cap], subject to the mechanism's exact ε at most ``epsilon``."""

    n_clients: int
    epsilon: float
    delta: float
    t_cap: int
    qs: list
    sigma_min: float
    sigma_max: float
    mechanism: object
    orders: tuple = DEFAULT_ORDERS
    prior: tuple = ()      # charges spent before the training (a private pre-trial)

    def __post_init__(self):
        # the mechanism's error ratio r(T) on the bound's noise term (None:
        # independent noise, r = 1), and its running minimum (the search's
        # lower bounds hold for any r)
        self.ratios = None
        most = self.mechanism.max_design_rounds
        if most is not None and self.t_cap > most:
            raise ValueError(f"{self.mechanism.name} designs search at most {most:,} rounds, got a cap of "
                             f"{self.t_cap:,}")
        if type(self.mechanism).error_ratio is not Mechanism.error_ratio:
            self.ratios = np.asarray(self.mechanism.error_ratio(np.arange(1, self.t_cap + 1)), dtype=float)

    def unit_charge(self, q) -> _Acct:
        """The mechanism's charge at q and σ = 1 (every charge is linear in
        σ): its sampling, noise multiplier per unit σ and rate, and how
        many rounds a number of charged participations allows."""
        c = self.mechanism.charge(q, 1.0, self.n_clients)
        return _Acct(c.sampling, float(c.noise_multiplier), float(c.rate), self.mechanism.rounds_for,
                     tuple(self.prior), bool(self.mechanism.reports_on_orders(self.orders)))

    def epsilon_of(self, q, sigma, rounds, refine=True) -> float:
        """The mechanism's exact ε at (q, σ, T): orders searched; where its ε is
        reported by an outside accountant on fixed orders (Flower's), the
        larger of that and the searched one."""
        c = self.mechanism.charge(q, sigma, self.n_clients)
        k = self.mechanism.participations(rounds)
        acct = self.unit_charge(q)
        charges = (*self.prior, Charge(acct.sampling, acct.rate, float(c.noise_multiplier), int(k)))
        fixed = self.mechanism.reports_on_orders(self.orders)
        # remembered by every input of the answer: a design choosing its local work asks the same points
        key = (_charges_key(charges), float(self.delta), np.asarray(self.orders, dtype=float).tobytes(), bool(fixed))
        if key not in _EPSILONS:
            if len(_EPSILONS) >= 4096:
                _EPSILONS.clear()
            _EPSILONS[key] = account(list(charges), self.delta, self.orders, fixed=fixed)
        return _EPSILONS[key]




class ClosedForm:
    """The bound (1.2) in units of A: 1/T + κσ²r(T)/(qN), searched exactly
    by branch and bound over σ at each q (:func:`_best_for_q`).  r(T) is the
    mechanism's error ratio: 1 for independent noise each round (Gu et al.'s
    bound as it is), below 1 for noise correlated across rounds
    (docs/theory.md §7)."""

    name = "closed form"

    def __init__(self, kappa: float, source: str):
        self.kappa, self.source = kappa, source

    def bound(self, rounds, sigma, q, n, ratio=1.0):
        return 1.0 / rounds + self.kappa * sigma * sigma * ratio / (q * n)

    def search(self, p: Problem, accts: dict) -> dict:
        """q -> (u, T, σ) or None: a coarse grid for every q first; the exact
        search then visits the q's best-first, so that the incumbent prunes
        the others early."""
        n, kappa = p.n_clients, self.kappa
        args = (n, p.epsilon, p.delta, p.t_cap, p.sigma_min, p.sigma_max, kappa, p.orders)
        grids = {qq: _initial_grid(qq, p.epsilon, p.delta, p.t_cap, p.sigma_min, p.sigma_max, p.orders, accts[qq])
                 for qq in p.qs}

        def grid_best(qq):
            s, t = grids[qq]
            ok = t >= 1
            r = 1.0 if p.ratios is None else p.ratios[np.maximum(t[ok], 1).astype(int) - 1]
            return float(np.min(1 / t[ok] + kappa * s[ok] ** 2 * r / (qq * n))) if ok.any() else math.inf

        found = {}
        for qq in sorted(p.qs, key=grid_best):
            incumbent = min((r[0] for r in found.values() if r is not None), default=math.inf)
            found[qq] = _best_for_q(qq, *args, acct=accts[qq], incumbent=incumbent, grid=grids[qq],
                                    ratios=p.ratios)
        return found


class Empirical:
    """A utility model fitted to a pre-trial store (the empirical mode:
    :func:`paretofl.pretrial.fit.fit_utility`), u = a/T + bσ²/(qN) + c +
    dσ²T/(qN) in loss units, searched on a dense σ grid at each q
    (:func:`_best_for_model`)."""

    def __init__(self, model, source: str):
        if not (model.a > 0):
            raise ValueError(f"the {model.name} model of {source} has no 1/T term: it cannot choose T")
        self.model, self.name = model, model.name
        self.kappa = max(model.kappa, 1e-12)
        self.source = f"{model.name} model of {source}"

    def search(self, p: Problem, accts: dict) -> dict:
        """A coarse pass over every q, then the three best refined."""
        if p.ratios is not None:
            raise ValueError(f"a model fitted to a pre-trial store models independent noise each round: design "
                             f"{p.mechanism.name} with the closed form (give kappa or fit, not from_store)")
        a = (p.n_clients, p.epsilon, p.delta, p.t_cap, p.sigma_min, p.sigma_max, p.orders)
        found = {qq: _best_for_model(self.model, qq, *a, accts[qq], refine=False) for qq in p.qs}
        for _, qq in sorted((r[0], qq) for qq, r in found.items() if r is not None)[:3]:
            found[qq] = _best_for_model(self.model, qq, *a, accts[qq])
        return found


def search(p: Problem, utility, widened: bool = False) -> tuple:
    """The best (u, T, σ, q) of the problem under the utility model, and
    each q's best u.  Raises :class:`InfeasibleBudget` where nothing meets ε;
    where a cohort size the search skipped meets it in one round, that size
    is searched too (``widened``: once)."""
    accts = {qq: p.unit_charge(qq) for qq in p.qs}
    found = utility.search(p, accts)
    best, per_q = None, {}
    for qq, r in found.items():
        if r is not None:
            per_q[qq] = r[0]
            if best is None or r[0] < best[0][0]:
                best = (r, qq)
    if best is None:
        # on the grid of orders, where the search counts its rounds: a budget of that ε designs a round
        eps1 = [accts[qq].epsilon(p.sigma_max * accts[qq].zf, 1, p.delta, p.orders, on_grid=True) for qq in p.qs]
        k = int(np.argmin(eps1))
        seen = {}                      # each skipped size's one round, accounted once for both scans
        inside = _other_q(p, p.epsilon * (1 + 1e-12), min(p.qs), seen) if not widened and len(p.qs) > 1 else None
        if inside is not None:         # a size within the range asked that the sample skipped meets the budget
            return search(replace(p, qs=sorted({*p.qs, inside[0]})), utility, widened=True)
        other = _other_q(p, eps1[k], 0.0, seen)
        pre = account(p.prior, p.delta) if p.prior else None
        floor = conversion_floor(p.delta, p.orders)
        if p.epsilon < floor * (1 + 1e-9) and pre is None and eps1[k] <= floor * (1 + 1e-6):
            # the search counts rounds on its orders, where converting RDP to (ε, δ) alone costs the floor
            raise InfeasibleBudget(p.epsilon, eps1[k], {"q": p.qs[k], "sigma": p.sigma_max, "floor": floor,
                                                        "largest_order": float(np.max(p.orders))})
        raise InfeasibleBudget(p.epsilon, eps1[k], {"q": p.qs[k], "sigma": p.sigma_max, "other_q": other}, pre)
    (u, T, sig), qb = best
    return (u, T, sig, qb), per_q


def _other_q(p: Problem, least: float, lowest: float = 0.0, memo: dict | None = None) -> list | None:
    """A cohort size the search skipped (its sizes are a geometric sample of those allowed; with ``lowest``
    0, rates below a fixed q or q_min, down to one client a round, count too) whose one round at sigma_max
    reaches less than ``least``: [its rate, its ε], the least of up to 512 sizes asked (every one where there
    are fewer); None where none does (ε is not monotone in q: another rate is advice only where it is
    measured to help).  ``memo``: each size's ε, kept between calls."""
    memo = {} if memo is None else memo
    n = p.n_clients
    top = int(math.floor(cohort_size(max(p.qs), n)))
    bottom = max(1, int(math.ceil(cohort_size(lowest, n))))
    if top < bottom:
        return None
    m = (np.arange(bottom, top + 1) if top - bottom < 512
         else np.unique(np.round(np.geomspace(bottom, top, 512)).astype(int)))
    seen = {round(qq * n, 6) for qq in p.qs}
    best = None
    for mm in m.tolist():
        if round(float(mm), 6) in seen:
            continue
        qq = mm / n
        if mm not in memo:
            acct = p.unit_charge(qq)
            memo[mm] = acct.epsilon(p.sigma_max * acct.zf, 1, p.delta, p.orders, on_grid=True)
        e = memo[mm]
        if e < least and (best is None or e < best[1]):
            best = [float(qq), float(e)]
    return best


# --------------------------------------------------------------------------
# design
# --------------------------------------------------------------------------
def _mechanism(mechanism, framework, mechanism_options):
    """The mechanism object a design is for; ``framework`` ("flower",
    "flower-accounted") picks Flower's mechanisms for a client-aggregate design."""
    if framework is None or framework == "paretofl":
        name = mechanism
    elif framework in FRAMEWORKS:
        if mechanism not in (DEFAULT, framework):
            raise ValueError("Flower's DP wrappers release the aggregate: design for mechanism client-aggregate "
                             f"(with framework={framework!r}), or for mechanism {framework!r}")
        name = framework
    else:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    if name in REGISTRY and not REGISTRY[name].trainable:       # its own algorithm, its own bounds
        raise ValueError("NbAFL's design answers with its own bounds and needs the clipping bound and the smallest "
                         "client's size: use nbafl_design (paretofl design --mechanism nbafl --clip C "
                         "--client-size M)")
    if name not in DESIGN_MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(DESIGN_MECHANISMS)}, got {name!r}")
    REGISTRY[name].check_options(mechanism_options or {})
    return mechanism_of(name, **(mechanism_options or {}))


def _kappa(kappa, fit):
    """(κ, its source, the pre-trial spec it came from)."""
    if kappa is not None and fit is not None:
        raise ValueError("give one of kappa or fit")
    if kappa is not None:
        _pos(kappa, "kappa")
        return float(kappa), "given", None
    if fit is not None:
        data = read_fit(fit)
        blocking = data.get("blocking")
        if blocking is None:        # a fit written before it said so itself
            blocking = [p for p in data.get("problems") or [] if str(p).startswith(FIT_BLOCKING)]
        if blocking:
            # the fit's own words are quoted: prose about kappa, not the parameter (the CLI leaves quotes alone)
            way_out = _way_out(fit, data, blocking[0])
            raise ValueError(f"fit {fit} says not to design with it: \"{blocking[0]}\"; {way_out}")
        return float(data["kappa"]), f"fit {fit}", _spec_of(data)
    k, source = default_kappa()
    spec = _spec_of(read_fit(shipped_fit())) if source.startswith("shipped") else None
    return k, source, spec


#: what a fit refused for its front (not for its training) leaves: the store's losses fit the empirical mode
FIT_FRONT_ONLY = ("the front has no slope", "no front point")


def _store_of(fit, data: dict) -> Path | None:
    """The results store a fit was made from, where it is found: as the fit
    names it (relative to where the fit ran), or beside the fit file."""
    named = data.get("results")
    if not isinstance(named, str) or not named:
        return None
    for p in (Path(named), Path(fit).parent / named, Path(fit).parent / Path(named).name):
        if p.is_file():
            return p
    return None


def _way_out(fit, data: dict, problem: str) -> str:
    """What to do instead of designing with a refused fit, in the API's
    words: the empirical mode on the same store (tested to work where the
    fit was refused for its front only), else a new pre-trial or κ given."""
    if str(problem).startswith(FIT_FRONT_ONLY):
        store = _store_of(fit, data)
        if store is not None:
            return (f"design from the pre-trial's store instead: from_store={store} in place of fit (a utility "
                    "model fitted to its losses, which needs no slope), or give kappa yourself")
        return (f"its store {data.get('results')!r} is not here: find it and design with from_store=STORE in "
                "place of fit, or change the pre-trial's grid as the fit says and fit again, or give kappa yourself")
    return "fix the pre-trial and fit again, or give kappa yourself"


def _kappa_ci(kappa, fit) -> list | None:
    """κ's 95 % interval from its fit (the one given, or the shipped one when
    κ is neither given nor fitted); None where there is none."""
    if kappa is not None:
        return None
    path = fit if fit is not None else (shipped_fit() if default_kappa()[1].startswith("shipped") else None)
    if path is None:
        return None
    ci = read_fit(path).get("kappa_ci")
    try:
        lo, hi = (float(x) for x in ci)
    except (TypeError, ValueError):
        return None
    return [lo, hi] if 0 < lo <= hi and math.isfinite(hi) else None


#: what a κ off by a factor of three cost in docs/results.md §11 (FashionMNIST, N = 100, LR and an MLP, ε 1 / 2 / 8):
#: points of test accuracy against the design at the fitted κ, the most over the nine cells, for a κ three times
#: too large (fewer rounds) and three times too small; said beside every closed-form design
KAPPA_FACTOR3_COST = {"too large": 3.6, "too small": 1.3}


def _kappa_range(d: Design, job: _Job, ci) -> None:
    """At the design's q: T and σ where κ is either end of its interval (a
    note and ``details["kappa_range"]``), and what a factor-3 error costs."""
    mech = mechanism_of(d.mechanism, **(d.mechanism_options or {}))
    cost = (f"; in docs/results.md section 11 a kappa 3x too large cost up to {KAPPA_FACTOR3_COST['too large']:.1f} "
            f"points of accuracy, 3x too small up to {KAPPA_FACTOR3_COST['too small']:.1f}: when unsure, err small")
    if ci is None:
        if d.kappa_source == "given":
            d.notes.append("kappa was given: the design is only as good as it" + cost)
        return
    ends = []
    for k in ci:       # the search alone: the rest of a design (its closed-form map, notes) is not said of these
        j = _Job(**{**job.__dict__, "utility": ClosedForm(k, "its interval")})
        try:
            (_, rounds, sigma, _), *_ = _searched(j, mech, [d.q])
        except (InfeasibleBudget, ValueError):
            return
        ends.append((rounds, sigma))
    rounds, sigmas = sorted(r for r, _ in ends), sorted(s for _, s in ends)
    d.details = dict(d.details, kappa_range={"kappa_ci": list(ci), "rounds": rounds, "sigma": sigmas})
    d.notes.append(f"over kappa's 95 % interval [{ci[0]:.3g}, {ci[1]:.3g}] the design at this q would run T = "
                   f"{rounds[0]}-{rounds[1]} rounds at sigma {sigmas[0]:.3g}-{sigmas[1]:.3g}" + cost)


def _spec_of(fit_data: dict) -> dict | None:
    spec = fit_data.get("spec")
    return spec if isinstance(spec, dict) else None


@dataclass(frozen=True)
class Request:
    """What a design is asked: every knob of :func:`paretofl.design`, with
    its default (the one place the defaults live: the API's keywords and
    the command line's flags read them here).

    n_clients : N, the number of clients.
    epsilon, delta : the privacy budget (ε, δ); ``epsilon`` None with ``budgets``.
    max_rounds : the most rounds T̃; or ``time_budget`` / ``round_time``
        (seconds, or any unit); given together, the tighter one binds.
    q : a fixed sampling ratio; otherwise q ranges over the cohort sizes m/N
        in [q_min, q_max] (default [1/N, 1]; all of them up to 24, else 24
        spread geometrically).  ``q`` and a range exclude each other.
    sigma_min, sigma_max : the noise multipliers allowed per client.
    kappa, fit : the constant of κσ²T = qN, or a fit file with it; default:
        the fit of the shipped LR pre-trial.
    mechanism : one of :data:`DESIGN_MECHANISMS` (:mod:`paretofl.mechanisms`),
        or ``"auto"`` (the lowest bound of those whose ``in_auto`` is true).
    framework : "flower" or "flower-accounted" pick Flower's mechanisms for
        a client-aggregate design (the same as ``mechanism=``).
    from_store, utility_model : the empirical mode (:func:`paretofl.design`):
        a utility model fitted to a pre-trial store instead of the closed form.
    budgets : clients with budgets of their own (instead of ``epsilon``): a
        budgets CSV file (``client,epsilon`` or ``share,epsilon``) or a
        :class:`paretofl.budgets.Budgets`; the result's ``groups`` say each
        group's rate (and σ) (docs/theory.md §4.B).
    mechanism_options : the mechanism's own options (adaptive clipping's
        ``clip_quantile``, ``clip_lr``, ``count_noise``; the banded ``bands``;
        the distributed ``dim``, ``bits``, ...): they travel with the design
        to training and into its statement; a family with knobs of its own
        searches those not given.
    local_epochs : fix the clients' local epochs K.  By default, where the
        fit measured the local work (a pre-trial with ``local_work``), the
        design chooses K among those measured by (4.E.2) of docs/theory.md
        §4.E, with (q, T, σ) at κ_K; ``local_work`` says what every K would
        do and the test loss it predicts.  With K fixed it is today's design
        at κ_K (at the pre-trial's own K, exactly the design without it).
    partition : how the clients' data are split ("iid", "dirichlet:ALPHA",
        "shards:K" or "given"): checked against the partition the pre-trial
        measured the local work on; a note says when they differ.
    """

    n_clients: int
    epsilon: float | None = None
    delta: float = 1e-5
    max_rounds: int | None = None
    time_budget: float | None = None
    round_time: float | None = None
    q: float | None = None
    q_min: float | None = None
    q_max: float | None = None
    sigma_min: float = 0.3
    sigma_max: float = 30.0
    kappa: float | None = None
    fit: str | None = None
    mechanism: str = DEFAULT
    framework: str | None = "paretofl"
    from_store: str | None = None
    utility_model: str | None = None
    budgets: object = None
    mechanism_options: dict | None = None
    local_epochs: int | None = None
    partition: str | None = None


def design(request: Request, utility=None, spec: dict | None = None, pretrial=None) -> Design:
    """Recommend (q, T, σ) for a DPFL deployment (docs/theory.md §4): what
    ``request`` asks (:class:`Request`).

    utility : a utility model instead of the closed form (:class:`Empirical`,
        a model fitted to a pre-trial store: ``request.from_store``, which
        :func:`paretofl.design` fits), with ``spec`` the pre-trial's.
    pretrial : what a private pre-trial behind κ spent (an object with
        ``charges``, ``epsilon``, ``clients``, ``source`` and ``verified``:
        :func:`paretofl.pretrial.private.of_fit` / ``of_store``, which
        re-derive it from the pre-trial's store); composed with the
        training's against the one budget.  Default: read from ``fit``.

    Returns a :class:`Design`; raises :class:`InfeasibleBudget` (a
    ValueError) when no allowed point meets ε, and ValueError for bad input.
    ``notes`` says when a bound binds, the budget is not spent, or the
    budget is too small to learn.
    """
    r = request
    if not isinstance(r, Request):
        raise ValueError(f"design takes a Request (paretofl.Request(n_clients, epsilon, ...)), got "
                         f"{type(r).__name__}")
    if r.from_store is not None and utility is None:
        raise ValueError("from_store is the empirical mode: paretofl.design fits its utility model")
    mech, auto = _mechanism_asked(r)
    n, t_cap, by_time = _checked(r)
    given_kappa = r.kappa is not None
    kappa, fit = r.kappa, r.fit
    if utility is None:
        kappa, kappa_source, spec = _kappa(kappa, fit)
        utility = ClosedForm(kappa, kappa_source)
    elif kappa is not None or fit is not None:
        raise ValueError("give one of kappa, fit or a fitted utility model (from_store)")
    kappa, kappa_source = utility.kappa, utility.source
    lw = _local_work_of(fit, given_kappa, utility, r.local_epochs, spec)
    partition = check_partition(r.partition)

    spend = pretrial if pretrial is not None else _private_pretrial(fit, n)
    _check_pretrial_fits(None if spend is None else spend.clients, n, mech, r.budgets)
    if r.budgets is not None:
        return _design_budgets(r, n, t_cap, mech, utility, lw, spec)

    prior = tuple(spend.charges) if spend is not None else ()
    job = _Job(n, float(r.epsilon), r.delta, t_cap, r.q, r.q_min, 1.0 if r.q_max is None else r.q_max, r.sigma_min,
               r.sigma_max, tuple(mech.orders), utility, capped_by_time=by_time, prior=prior)

    def solve(j):
        return search_auto(_Search(j)) if auto else mech.search(_Search(j), dict(r.mechanism_options or {}))

    ci = _kappa_ci(kappa if kappa_source == "given" else None, fit) if isinstance(utility, ClosedForm) else None
    if lw is None:
        d = solve(job)
    else:
        d, k = _design_local_work(job, lw, solve, r.local_epochs, ci)      # k: the chosen (K, η)
        # which split the fit's losses were scored on: the prediction estimates the test loss either way
        d.local_work["scored_on"] = (spec or {}).get("scored_on", "test")
        d.local_work["fit"] = _fit_reference(fit)            # a loaded design's prediction is re-derived from it
        job = _Job(**{**job.__dict__, "utility": ClosedForm(d.kappa, d.kappa_source)})
        ci = None if ci is None else [x * lw.ratio(k) for x in ci]
    if fit is not None:
        d.notes += [f"the fit {fit} lists a problem: {p}" for p in read_fit(fit).get("problems") or []]
    if prior:
        _say_pretrial(d, job, spend)
    if isinstance(utility, ClosedForm):
        _kappa_range(d, job, ci)
    recipe_from_spec(d, r.q, spec)
    if partition is not None:
        _say_partition(d, lw, partition)
    elif lw is not None and (lw.dissimilarity.get("partition") or "iid") != "iid":
        # clients not described: the design trains them iid, and its prediction is of the fit's split
        d.notes.append(f"the local work was measured on public clients partitioned "
                       f"{lw.dissimilarity['partition']}, and this design names no partition for yours: it trains "
                       f"them iid, where its predicted loss is not compared; if yours are split like the pre-trial's, "
                       f"design with partition=\"{lw.dissimilarity['partition']}\" (--partition "
                       f"{lw.dissimilarity['partition']})")
    _set_local_epochs(d, r.local_epochs, lw)
    if lw is not None:      # what the prediction is of, whatever the design is later set to train
        d.local_work["measured_at"] = _measured_recipe(spec, d.local_work.get("lr"))
    return d


def _mechanism_asked(r: Request) -> tuple:
    """The request's mechanism, configured (``auto``: the default's, for the
    search to compare against), and whether it asked for ``auto``."""
    auto = r.mechanism == SEARCH
    if auto:
        if r.mechanism_options:
            raise ValueError("mechanism auto compares the mechanisms at their defaults: name one to give its "
                             f"options ({', '.join(r.mechanism_options)})")
        if r.budgets is not None or r.framework not in (None, "paretofl"):
            raise ValueError("mechanism auto designs for paretofl's trainer with one budget for all clients")
    return _mechanism(DEFAULT if auto else r.mechanism, r.framework, r.mechanism_options), auto


def _set_local_epochs(d: Design, given, lw) -> None:
    """The local epochs a design trains, and where they came from: the local
    work's choice (or the given number among those it measured), else the
    given number, else none (the pre-trial's)."""
    if lw is not None:
        d.local_epochs = d.local_work["epochs"]
        d.sources["local_epochs"] = ("given" if given is not None else
                                     "the design: the least of (4.E.2) over the local epochs the pre-trial measured "
                                     f"({', '.join(map(str, sorted(set(lw.epochs))))})")
        if d.local_work.get("lr") is not None:     # η chosen with K (the pre-trial measured several)
            d.lr = float(d.local_work["lr"])
            etas = ", ".join(f"{x:g}" for x in sorted(set(lw.lrs)))
            d.sources["lr"] = (f"the pre-trial's own (of the learning rates it measured the local work at, {etas}, "
                               "another predicts a lower loss, but its seeds do not agree)"
                               if "kept_reference" in d.local_work else
                               f"the design: the least of (4.E.4) over the learning rates the pre-trial measured the "
                               f"local work at ({etas})"
                               + (f", at the {given} local epochs given" if given is not None else ", with K"))
    elif given is not None:
        d.local_epochs = int(given)
        d.sources["local_epochs"] = "given"


def _checked(r: Request) -> tuple[int, int, bool]:
    """A request's numbers checked, one line each: (N, the round cap T̃,
    whether the time budget is what caps it)."""
    n = _int_at_least(r.n_clients, 1, "n_clients")
    if n > MAX_CLIENTS:
        raise ValueError(f"n_clients must be at most {MAX_CLIENTS:,}, got {n:,}")
    if r.budgets is None:
        if r.epsilon is None:
            raise ValueError("give epsilon (one budget for every client) or budgets (a budget per client)")
        _pos(r.epsilon, "epsilon")
    elif r.epsilon is not None:
        raise ValueError("give either epsilon (one budget for all) or budgets (a budget per client), not both")
    check_delta(r.delta, n)
    _pos(r.sigma_min, "sigma_min")
    _pos(r.sigma_max, "sigma_max")
    if r.sigma_min > r.sigma_max:
        raise ValueError(f"empty sigma range: sigma_min {r.sigma_min:g} > sigma_max {r.sigma_max:g}")
    if r.sigma_min < 1e-4 or r.sigma_max > 1e6:
        raise ValueError(f"the sigma range [{r.sigma_min:g}, {r.sigma_max:g}] must lie within [1e-4, 1e6]")
    if r.q is not None:
        if r.q_min is not None or r.q_max is not None:
            raise ValueError("give either q (fixed) or a range q_min/q_max, not both")
        check_q(r.q, "q")
    for name, v in (("q_min", r.q_min), ("q_max", r.q_max)):
        if v is not None:
            check_q(v, name)
    caps = []
    if r.max_rounds is not None:
        caps.append(_int_at_least(r.max_rounds, 1, "max_rounds"))
    if r.time_budget is not None or r.round_time is not None:
        if r.time_budget is None or r.round_time is None:
            raise ValueError("time_budget needs round_time (and the other way round)")
        caps.append(pareto.rounds_for_time(r.time_budget, r.round_time))
    if not caps:
        raise ValueError("give an efficiency budget: max_rounds, or time_budget with round_time")
    return n, min(caps), len(caps) == 2 and caps[1] < caps[0]


def _design_budgets(r: Request, n: int, t_cap: int, mech, utility, lw, spec) -> Design:
    """The design for clients with budgets of their own (docs/theory.md §4.B)."""
    from .budgets import budgets_of, design_groups

    if not isinstance(utility, ClosedForm):
        raise ValueError("per-client budgets are designed with the closed form: give kappa or fit, not from_store")
    if mech.framework != "paretofl":
        raise ValueError("Flower samples every client at one rate: per-client budgets run in paretofl's trainer "
                         "(docs/api.md says what Flower can run instead)")
    if not mech.groups:
        raise ValueError(f"per-client budgets are designed for "
                         f"{' or '.join(k for k, m in REGISTRY.items() if m.groups)}, not {mech.name}")
    if r.q is not None or r.q_min is not None:
        raise ValueError("per-client budgets design each group's rate: give q_max at most")
    b = budgets_of(r.budgets, n)
    kappa = utility.kappa
    if lw is not None and r.local_epochs is not None:
        kappa *= lw.ratio(int(r.local_epochs))
    d = Design(**design_groups(b, r, t_cap, kappa, utility.source, mech))
    d.mechanism_options = mech.options_dict()
    recipe_from_spec(d, r.q, spec)
    _set_local_epochs(d, r.local_epochs, None)
    return d


def check_partition(partition) -> str | None:
    """"iid", "dirichlet:ALPHA" (ALPHA > 0; or dirichlet-capped:ALPHA),
    "shards:K" (K a whole number >= 1) or "given", in its one name (the
    trainer's reader, :func:`paretofl.fl.names.split_partition`); one line
    otherwise.  A design describes the clients, so a split named without its
    concentration or its shards (plain dirichlet, shards) is refused."""
    from .fl.names import split_name

    if partition is None:
        return None
    kind, sep, _ = partition.partition(":") if isinstance(partition, str) else ("", "", "")
    if partition in ("iid", "given") or (sep and kind in ("dirichlet", "dirichlet-capped", "shards")):
        try:
            return split_name(partition)
        except ValueError:
            pass
    raise ValueError(f"partition must be iid, dirichlet:ALPHA (ALPHA > 0; or dirichlet-capped:ALPHA), shards:K "
                     f"(labels' shards a client) or given, got {partition!r}")


def _say_partition(d: Design, lw, partition: str) -> None:
    """Record the clients' partition and say where the local work was measured on another."""
    measured = (lw.dissimilarity.get("partition") if lw is not None else None) or None
    d.details = dict(d.details, partition=partition)
    if lw is None:
        d.notes.append(f"your clients are partitioned {partition}, but kappa's fit measured no local work: the local "
                       "epochs are the pre-trial's; measure them on a public split partitioned like your clients "
                       "(local_work in its spec)")
    elif measured is not None and measured != partition:    # plain "shards" (400 in all) is not "shards:2"
        b2 = lw.dissimilarity.get("b2")
        d.notes.append(f"the local work was measured on public clients partitioned {measured}"
                       + (f" (B^2 {b2:.3g})" if b2 else "") + f", yours are {partition}: clients that differ more "
                       "drift more with more local work (more epochs, or a larger learning rate; docs/results.md "
                       "section 12), so run the pre-trial with the public split partitioned like yours before trusting "
                       "this K")


def _local_work_of(fit, given_kappa: bool, utility, local_epochs, spec) -> LocalWork | None:
    """The local work the fit behind κ measured (the shipped fit's where κ
    is its), checked; None where there is none to design with."""
    if local_epochs is not None:
        _int_at_least(local_epochs, 1, "local_epochs")
        if local_epochs > 1000:
            raise ValueError(f"local_epochs must be at most 1000, got {local_epochs}")
    if given_kappa:
        return None
    if not isinstance(utility, ClosedForm):
        if local_epochs is not None and spec is not None and int(spec.get("local_epochs", local_epochs)) != \
                int(local_epochs):
            raise ValueError(f"the store's utility model is of its own {spec['local_epochs']} local epoch(s): to "
                             f"design for {local_epochs}, measure the local work in the pre-trial (local_work), then "
                             "design from the \"paretofl fit\" of its store")
        return None
    path = fit if fit is not None else (shipped_fit() if default_kappa()[1].startswith("shipped") else None)
    data = read_fit(path).get("local_work") if path is not None else None
    if not data:
        if local_epochs is not None and spec is not None and int(spec.get("local_epochs", local_epochs)) != \
                int(local_epochs):
            raise ValueError(f"kappa was measured at {spec['local_epochs']} local epoch(s) and its fit measured no "
                             f"other: to design for {local_epochs}, run the pre-trial with local_work = "
                             f"[{spec['local_epochs']}, {local_epochs}] and fit it again")
        return None
    lw = LocalWork.from_dict(data, f"fit {path}")
    if lw.reference_lr is not None and spec is not None and isinstance(spec.get("lr"), (int, float)) and not \
            math.isclose(lw.reference_lr, float(spec["lr"]), rel_tol=1e-12):
        raise ValueError(f"fit {path}: its local_work says its pre-trial ran at lr {lw.reference_lr:g}, its spec "
                         f"{spec['lr']:g}; make the file again from its store (\"paretofl fit STORE\")")
    if lw.dissimilarity and spec is not None and spec.get("partition") is not None:
        # the split named from the fit's spec, not its record (older code wrote dirichlet-capped without its beta,
        # and concentrations to six digits)
        from .fl.names import split_name

        lw.dissimilarity["partition"] = split_name(spec["partition"], spec.get("beta"), strict=False)
    if local_epochs is not None:
        lw.ratio(int(local_epochs))           # measured, or one clear line
    return lw


def _candidate(lw: LocalWork, k, q, rounds: int, sigma, bound: float, kappa: float, ci) -> dict:
    """One candidate of the local work (docs/theory.md 4.E): the design point (q, T, σ) searched at K local
    epochs (``k``: K, or the pair (K, η) where the fit measured several η), κ_K = κ·A(K₀)/A(K), its objective
    (4.E.2) from its bound, and the loss the fit predicts there with the interval κ's own interval ``ci``
    gives (a design and a loaded design's re-derivation share it)."""
    key = lw.key(k)
    r = lw.ratio(key)
    noise = (bound - 1.0 / rounds) / r                      # κσ²r(T)/(qN), in units of A(K₀)
    ends = [noise] + ([noise * x / kappa for x in ci] if ci else [])
    return dict(epochs=key[0], **({} if key[1] is None else {"lr": key[1]}), q=q, rounds=rounds, sigma=sigma,
                kappa=kappa * r, objective=lw.objective(key, bound),
                predicted_loss=lw.predicted_loss(key, rounds, noise), interval=lw.interval(key, rounds, ends))


def _at_eta(key) -> str:
    return "" if key[1] is None else f" at eta {key[1]:g}"


def _a_of(key) -> str:
    """A's argument as (4.E.2) writes it: K, or K, η."""
    return f"{key[0]}" if key[1] is None else f"{key[0]}, {key[1]:g}"


def _design_local_work(job: _Job, lw: LocalWork, solve, local_epochs, ci) -> tuple[Design, tuple]:
    """The design over the local work the pre-trial measured: each local
    epochs K (or the one given), at each learning rate η where it measured
    several (``local_lrs``); for each, today's search at κ_K = κ·A(K₀)/A(K),
    then the least U of (4.E.2) (docs/theory.md §4.E), (K, η) in place of K
    where η was measured.  Returns the design and its key (K, η), η None
    where the fit measured one learning rate."""
    kappa, source = job.utility.kappa, job.utility.source
    keys = lw.settings() if local_epochs is None else [x for x in lw.settings() if x[0] == int(local_epochs)]
    found, skipped = [], []
    for key in keys:
        r = lw.ratio(key)
        if math.isinf(r):
            skipped.append(key)
            continue
        dk = solve(_Job(**{**job.__dict__, "utility": ClosedForm(
            kappa * r, source if key == lw.reference else
            f"{source}, at {key[0]} local epochs{_at_eta(key)}: x A({_a_of(lw.reference)})/A({_a_of(key)}) = "
            f"{r:.3g} (docs/theory.md 4.E)")}))
        point = _candidate(lw, key, dk.q, dk.rounds, dk.sigma, dk.utility_bound, kappa, ci)
        # a family with knobs of its own (bandmf's bands; auto's mechanism) may choose them apart at each K
        point.update(mechanism=dk.mechanism, mechanism_options=dict(dk.mechanism_options or {}))
        found.append((point["objective"], key, dk, point))
    if not found:
        raise ValueError(f"the loss did not fall with T at {', '.join(map(lw.label, skipped))} in the "
                         "pre-trial: no rounds can be chosen there; give another local_epochs")
    _, k, d, _ = min(found, key=lambda f: (f[0], f[1][0], f[1][1] or 0.0))
    cands = [f[3] for f in found]                           # in the fit's order: by η, then K
    # the pair kept where the seeds do not agree: the pre-trial's own, or the K given at the pre-trial's own η
    k0 = lw.reference if local_epochs is None else lw.key(int(local_epochs))
    sure = _beats_reference(lw, cands, k0)
    kept = None
    if k != k0 and any(f[1] == k0 for f in found) and sure.get(k, 0.0) < LOCAL_WORK_CONFIDENCE:
        # another local work than the pre-trial's own only where its seeds agree that it helps
        kept, k = k, k0
        d = next(f[2] for f in found if f[1] == k0)
    best = next(c for c in cands if _lw_key(c) == k)
    lo, hi = min(lw.rounds), max(lw.rounds)
    d.local_work = dict(epochs=k[0], reference_epochs=lw.reference_epochs, measured=list(lw.epochs),
                        predicted_loss=best["predicted_loss"], interval=best["interval"], candidates=cands,
                        not_falling=[x[0] for x in skipped], rounds_measured=[lo, hi],
                        dissimilarity=dict(lw.dissimilarity))
    if lw.lrs is not None:      # η chosen with K: the pairs' learning rates beside their epochs
        d.local_work.update(lr=k[1], reference_lr=lw.reference_lr, measured_lrs=list(lw.lrs),
                            not_falling_lrs=[x[1] for x in skipped])
        if local_epochs is not None:
            d.local_work["given_epochs"] = int(local_epochs)
    if (len(found) > 1 or k != lw.reference) and not lo <= d.rounds <= hi:
        d.notes.append(f"the local work was measured over T = {lo}-{hi}; this design's T = {d.rounds} lies outside, "
                       "so its comparison of local epochs extrapolates: add rounds to the pre-trial's grid")
    if skipped:
        d.notes.append(f"at {', '.join(map(lw.label, skipped))} the pre-trial's loss did not fall with T: "
                       "those were not candidates")
    if kept is not None:
        d.local_work["kept_reference"] = kept[0]
        if kept[1] is not None:
            d.local_work["kept_reference_lr"] = kept[1]
        how = (f"only in {100 * sure[kept]:.0f} % of the pre-trial's bootstrap draws (under "
               f"{100 * LOCAL_WORK_CONFIDENCE:.0f} %)" if sure else
               "the pre-trial's local work has no bootstrap draws to agree (fewer than 3 seeds)")
        d.notes.append(f"{lw.label(kept)} predict a lower loss than {lw.label(k0)}, but {how}: the design keeps the "
                       f"pre-trial's own {lw.label(k0)}; more seeds in its local work would decide")
    return d, k


#: the share of the pre-trial's bootstrap draws in which more local work must beat the pre-trial's own K for the
#: design to choose it (docs/results.md section 13: where the seeds disagree, the extra work lost on label shards)
LOCAL_WORK_CONFIDENCE = 0.9


def _beats_reference(lw: LocalWork, cands: list, against=None) -> dict:
    """For each candidate K (and its design point), the share of the
    bootstrap draws in which its predicted loss is below that of the
    pre-trial's own K (or the pair ``against``) at its point; recorded in
    each candidate."""
    if not lw.draws_A:
        return {}
    against = lw.reference if against is None else tuple(against)
    i0 = lw.settings().index(lw.reference)
    ref = next((c for c in cands if _lw_key(c) == against), None)
    if ref is None:
        return {}

    def loss(c, A, cc):
        key = _lw_key(c)
        i = lw.settings().index(key)
        noise = (c["predicted_loss"] - lw.c[i] - lw.A[i] / c["rounds"]) / lw.A[i0]     # κσ²r/(qN) at its point
        return lw.predicted_loss(key, c["rounds"], noise, A, cc)

    out = {}
    for c in cands:
        wins = [loss(c, A, cc) < loss(ref, A, cc) for A, cc in zip(lw.draws_A, lw.draws_c)]
        out[_lw_key(c)] = c["beats_reference"] = float(np.mean(wins)) if c is not ref else 0.0
    return out


def _check_pretrial_fits(clients, n: int, mech, budgets) -> None:
    """A private pre-trial's charges compose with a training only where one
    accountant can hold both, under one neighbouring relation: its own
    clients, one budget (a group design would have to compose it into every
    group), paretofl's own accountant (Flower's cannot be told of it), and
    add/remove or zero-out neighbours (its charges are add/remove; under
    replace-one a sum moves by 2C).  Anything else is refused in one line."""
    if clients is None:                  # no private pre-trial
        return
    if int(clients) != n:
        raise ValueError(f"the private pre-trial behind κ ran on {clients} clients: it protects those, so it "
                         f"designs only for them, not for {n} (run it on your federation's own clients)")
    why = None
    if budgets is not None:
        why = "per-client budgets: each group would have to carry the pre-trial's spend, which is not designed yet"
    elif mech.framework != "paretofl":
        why = (f"{mech.name} runs in Flower, whose accountant cannot be told of the pre-trial's subsampled runs"
               + (", and whose replace-one neighbours would double its charges' sensitivity"
                  if mech.relation.startswith("replace-one") else ""))
    elif mech.relation.startswith("replace-one"):
        why = f"{mech.name} protects replace-one neighbours, under which the pre-trial's add/remove charges do not hold"
    if why is not None:
        raise ValueError(f"a private pre-trial's spend cannot be composed with this design ({why}): design with "
                         "mechanism client-aggregate, client-local or bandmf and one budget, or borrow κ")


@dataclass(frozen=True)
class _FileSpend:
    """A private pre-trial's charges as a fit file records them, unverified
    (:func:`design` called without ``pretrial``)."""

    charges: tuple
    clients: int
    source: str
    verified: bool = False
    fit: str | None = None
    store: str | None = None


def _private_pretrial(fit, n: int):
    """A private pre-trial's charges as its fit file lists them (None for a
    public one), unverified: :func:`paretofl.design` re-derives them from
    the pre-trial's store and passes them as ``pretrial``."""
    if fit is None:
        return None
    data = read_fit(fit)
    if not data.get("private"):
        return None
    from .theory.privacy import charges_from_data as from_data

    return _FileSpend(tuple(from_data(data.get("private_charges"))), int(data.get("clients", -1)),
                      f"the fit {fit}, unverified", fit=str(fit))


def _say_pretrial(d: Design, job: _Job, spend) -> None:
    """A design after a private pre-trial: what each part spent, alone and composed, and where that was read."""
    pre = account(list(job.prior), job.delta)
    mech = mechanism_of(d.mechanism, **(d.mechanism_options or {}))
    train = mech.epsilon(d.q, d.sigma, d.rounds, job.delta, d.n_clients, orders=job.orders)
    from .theory.privacy import charges_as_data as as_data

    d.details = dict(d.details, pretrial={"source": spend.source, "verified": bool(spend.verified),
                                          "fit": getattr(spend, "fit", None), "store": getattr(spend, "store", None),
                                          "epsilon": pre, "training_epsilon": train,
                                          "charges": as_data(list(job.prior))})
    d.notes.insert(0, f"the budget {job.epsilon:g} covers the private pre-trial too: it spent epsilon {pre:.4g} on "
                      f"the clients' data (from {spend.source}), the training spends {train:.4g} alone, and the two "
                      f"composed spend {d.epsilon:.4g} (composition is tighter than adding {pre:.4g} + {train:.4g})")
    if not spend.verified:
        d.notes.insert(1, f"UNVERIFIED: the private pre-trial's spend ({pre:.4g}) is the figure its fit file "
                          f"{getattr(spend, 'fit', None) or ''} records; the pre-trial's results store was not found, "
                          "so it was not re-derived from the store's spend log, and this design's epsilon is only as "
                          "true as that file: put the store beside the fit (or at the path it records) and design "
                          "again")


@dataclass
class _Job:
    """What :func:`design` was asked, checked: the numbers every mechanism's
    search shares."""

    n: int
    epsilon: float
    delta: float
    t_cap: int
    q: float | None
    q_min: float | None
    q_max: float
    sigma_min: float
    sigma_max: float
    orders: tuple
    utility: object
    capped_by_time: bool = False
    prior: tuple = ()            # a private pre-trial's charges, composed with the training's


class _Search:
    """What a mechanism's :meth:`~paretofl.mechanisms.Mechanism.search` asks
    of the design: the job's numbers, the cohort sizes it allows, and the
    exact (q, T, σ) search for one configured mechanism."""

    def __init__(self, job: _Job, compare: bool = True):
        self.job, self.compare = job, compare
        self.n, self.q, self.q_min, self.q_max, self.t_cap = job.n, job.q, job.q_min, job.q_max, job.t_cap

    def point(self, mech, qs=None) -> Design:
        return _design_point(self.job, mech, qs)

    def cohorts(self, top: float) -> list[float]:
        """The cohort shares q = m/N searched in [q_min (or 1/N), top]."""
        return _q_candidates(self.n, None, self.q_min, top)

    def alone(self) -> _Search:
        """The same search, with no other mechanism's design put beside it."""
        return _Search(self.job, compare=False)


def _searched(job: _Job, mech, qs=None) -> tuple:
    """The search of :func:`_design_point`: ((u, T, σ, q), each q's best u,
    the problem, the point's exact ε), the point checked against the budget."""
    n, epsilon = job.n, job.epsilon
    if qs is None:
        qs = _q_candidates(n, job.q, job.q_min, job.q_max)
    for qq in qs:
        mech.check_rate(qq, n)           # e.g. qN >= 1, or a whole number of clients for Flower
    p = Problem(n, epsilon, job.delta, job.t_cap, qs, job.sigma_min, job.sigma_max, mech, job.orders, job.prior)
    (u, T, sig, qb), per_q = search(p, job.utility)
    eps_exact = p.epsilon_of(qb, sig, T)
    if eps_exact > epsilon * (1 + 1e-12):  # never report a point past the budget
        raise RuntimeError(f"internal error: design point spends epsilon {eps_exact} > budget {epsilon}")
    return (u, T, sig, qb), per_q, p, eps_exact


def _design_point(job: _Job, mech, qs=None) -> Design:
    """The best (q, T, σ) for one configured mechanism (``qs``: the cohort
    sizes to search; by default those the job allows)."""
    n, epsilon, utility = job.n, job.epsilon, job.utility
    kappa, kappa_source = utility.kappa, utility.source
    if qs is None:
        qs = _q_candidates(n, job.q, job.q_min, job.q_max)
    (u, T, sig, qb), per_q, p, eps_exact = _searched(job, mech, qs)
    acct = p.unit_charge(qb)
    cf, case, distance, relation = None, "", {}, math.nan
    if p.ratios is None:                   # Theorem 3's map: Gu et al.'s bound as it is
        cf = _closed_form_point(p, qb, epsilon, job.t_cap, job.sigma_min, job.sigma_max, kappa) or None
        case = pareto.theorem3(pareto.Box(qb, n, kappa, job.sigma_min, job.sigma_max, job.t_cap)).case
        relation = float(pareto.relation_sigma(T, qb, n, kappa))
    if cf is not None:
        distance = {"sigma_rel": sig / cf["sigma"] - 1.0, "rounds_rel": T / cf["rounds"] - 1.0,
                    "utility_rel": u / cf["utility_bound"] - 1.0}
    # the noise multiplier on the released sum, per unit C (adaptive clipping's
    # share of it for the count is said by the statement, not here)
    released = mechanism_of(mech.name).noise(qb, sig, n).std
    mech.noise(qb, sig, n)                 # the configured release must exist (adaptive clipping's count noise)
    d = Design(q=qb, rounds=T, sigma=sig, epsilon=eps_exact, delta=job.delta, case=case, utility_bound=u,
               kappa=kappa, kappa_source=kappa_source, mechanism=mech.name, noise_multiplier=released,
               charged_noise_multiplier=sig * acct.zf, sampling=acct.sampling, sigma_relation=relation,
               closed_form=cf or {}, distance=distance, budget=float(epsilon), n_clients=n, max_rounds=job.t_cap,
               sigma_min=job.sigma_min, sigma_max=job.sigma_max,
               mechanism_options=mech.options_dict())
    below = None
    if isinstance(utility, Empirical):
        d.utility_model = utility.name
        predicted = float(utility.model.predict(sig, T, qb, n))
        # a loss above non-private training is not negative: a fitted constant below zero can take the
        # model there, which says "no worse than non-private, within the fit", not "better"
        d.predicted_utility_loss = max(predicted, 0.0)
        below = predicted if predicted < 0 else None
        d.utility_bound = float(1.0 / T + kappa * sig * sig / (qb * n))
        if cf is not None:       # the closed form's point is compared in its own units: the bound, not the model
            d.distance = dict(distance, utility_rel=d.utility_bound / cf["utility_bound"] - 1.0)
    d.notes = _notes(d, capped_by_time=job.capped_by_time)
    if below is not None:
        d.notes.append(f"the {utility.name} model predicts {below:.3g} here, below the non-private loss it is "
                       f"measured from: its constant c = {utility.model.c:.3g} is negative, so read the predicted "
                       "loss as 0 (no worse than non-private training within the fit), not as a gain")
    if job.q is None and len(qs) > 1:
        d.notes.append(_why_q(d, per_q, qs))
    return d


def recipe_from_spec(d: Design, q_given, spec: dict | None) -> None:
    """Fill the recipe's C, η, local epochs and batch from the pre-trial κ
    came from (``spec``, where known), its model and data, and say where
    every knob came from."""
    d.sources = {"q": "given" if q_given is not None else "the exact search over cohort sizes",
                 "rounds": "the exact search: the most rounds the budget allows at this sigma, up to max rounds",
                 "sigma": f"the exact search, minimising the utility bound with kappa ({d.kappa_source})"}
    if d.groups:
        d.sources.update(q="each group's largest rate within its budget", rounds="the group search",
                         sigma=f"the group search, minimising the utility bound with kappa ({d.kappa_source})")
    if spec is not None:
        d.clip, d.lr = float(spec["clip"]), float(spec["lr"])
        d.local_epochs, d.batch_size = int(spec["local_epochs"]), int(spec["batch_size"])
        d.model, d.dataset = spec.get("model"), spec.get("dataset")
        if spec.get("partition") is not None:         # the split kappa was measured on: a tuning's must match it
            from .fl.names import split_name

            d.details = dict(d.details, pretrial_partition=split_name(spec["partition"], spec.get("beta"),
                                                                      strict=False))
        where = f"the {spec.get('model')} pre-trial on {spec.get('dataset')} that kappa came from"
        d.sources.update(clip=where, lr=where, local_epochs=where, batch_size=where)
    else:
        d.sources.update(clip="not chosen: give tune (a pre-trial store) or use a fit that records its spec",
                         lr="not chosen: give tune (a pre-trial store) or use a fit that records its spec")


def nbafl_design(n_clients: int, epsilon: float, delta: float, clip: float, client_size: int,
                 max_rounds: int = 10_000, constants: dict | None = None) -> Design:
    """NbAFL's own design as a :class:`Design` of the ``nbafl`` mechanism
    (Wei et al. 2020, Remarks 4 and 5; docs/theory.md §6): T* and K*
    (``rounds``; ``details["clients_per_round"]``), paretofl's uplink noise
    σ_U for the budget (``sigma`` = σ_U/(2C), what each upload is charged),
    the ε it guarantees (``epsilon``), and in ``details`` the bounds, the
    paper's σ_U and what it guarantees, the constants assumed."""
    from .theory.convergence import nbafl_design as answers  # SciPy's optimiser: only when asked

    n = _int_at_least(n_clients, 1, "n_clients")
    if n > MAX_CLIENTS:           # as every design: NbAFL's K* is searched over 1..N
        raise ValueError(f"n_clients must be at most {MAX_CLIENTS:,}, got {n:,}")
    _pos(epsilon, "epsilon")
    check_delta(delta, n)
    _pos(clip, "clip")
    if clip > 1e12:               # as training's: the bounds overflow further out
        raise ValueError(f"clip must be at most 1e12, got {clip:g}")
    m = _int_at_least(client_size, 1, "client_size")
    t_max = _int_at_least(max_rounds, 1, "max_rounds")
    r = answers(n, float(epsilon), delta, float(clip), m, max_rounds=t_max, constants=constants)
    z = r["sigma_uplink_clipping"] / (2 * float(clip))
    k = r["clients_per_round"]
    d = Design(q=k / n, rounds=r["rounds"], sigma=z, epsilon=r["epsilon_guaranteed_clipping"], delta=delta,
               case="", utility_bound=r["bound_all_clients"], kappa=math.nan, kappa_source="none: NbAFL's bounds",
               mechanism=NbAFLMechanism.name, noise_multiplier=z, charged_noise_multiplier=z, sampling="none",
               budget=float(epsilon), n_clients=n, max_rounds=t_max, clip=float(clip),
               utility_model="NbAFL's Theorem 2", details=r)
    d.sources = {"rounds": "T* minimising NbAFL's Theorem 2 bound with all clients",
                 "clients_per_round": "K* minimising NbAFL's Theorem 3 bound at T*",
                 "sigma": "paretofl's calibration: the uplink noise whose guarantee over T* uploads is the budget"}
    return d


# --------------------------------------------------------------------------
# the exact search for one q: branch and bound on σ
# --------------------------------------------------------------------------
def _tmax(eps, q, s, delta, orders, acct):
    """The most rounds within ε at each σ: the most charged participations
    (:func:`max_steps`), as rounds.  Remembered: the searches of one design
    (one per candidate number of local epochs; the accountant's answer does
    not depend on κ) split the same σ intervals the same way, so about half
    their questions are asked before."""
    z = np.asarray(s, dtype=float) * acct.zf
    prior = tuple(acct.prior)
    key = (z.tobytes(), *_question(eps, delta, orders, acct))
    steps = _MOST_STEPS.get(key)
    if steps is None:
        steps = np.atleast_1d(max_steps(eps, acct.rate, z.ravel(), delta, orders, sampling=acct.sampling, prior=prior))
        if len(_MOST_STEPS) >= 4096:
            _MOST_STEPS.clear()
        _MOST_STEPS[key] = steps
    return acct.rounds_for(steps.reshape(z.shape).copy() if z.ndim else int(steps[0]))


#: :func:`_tmax`'s answers, by every input of them (the charges before the training by value); bounded
_MOST_STEPS: dict = {}
#: :func:`_least_sigma`'s answers, the same way: the searches of one design ask the same intervals (issue 47)
_LEAST_SIGMA: dict = {}


def _question(eps, delta, orders, acct) -> tuple:
    """Every input of the accountant's answer about one q's charge but σ, as plain values (the charges before
    the training by value): a key to remember its answers by."""
    return (float(eps), float(acct.rate), float(delta), np.asarray(orders, dtype=float).tobytes(), acct.sampling,
            _charges_key(acct.prior))


def _charges_key(charges) -> tuple:
    """Charges as plain values, their arrays by bytes and shape: a key to remember an answer about them by."""
    return tuple((c.sampling, *(np.asarray(v, dtype=float).tobytes() + bytes(str(np.shape(v)), "ascii")
                                for v in (c.rate, c.noise_multiplier, c.steps))) for c in charges)


#: :meth:`Problem.epsilon_of`'s answers, by the charges, δ, orders and view asked (bounded)
_EPSILONS: dict = {}


def _initial_grid(q, eps, delta, t_cap, s_lo, s_hi, orders, acct):
    """T(σ) = min(t_cap, T_max(σ)) on 17 geometric σ's: the search's start
    (copies of :func:`_grid_of`'s, which a design choosing its local work
    asks for once per candidate K: the accountant's answer does not depend
    on κ)."""
    s, t = _grid_of(float(q), float(eps), float(delta), int(t_cap), float(s_lo), float(s_hi), tuple(orders), acct)
    return s.copy(), t.copy()


@functools.lru_cache(maxsize=256)
def _grid_of(q, eps, delta, t_cap, s_lo, s_hi, orders, acct):
    s = np.geomspace(s_lo, s_hi, 17) if s_hi > s_lo else np.array([s_lo])
    return s, np.minimum(t_cap, _tmax(eps, q, s, delta, orders, acct))


def _best_for_q(q, n, eps, delta, t_cap, s_lo, s_hi, kappa, orders, acct, incumbent=math.inf, grid=None,
                ratios=None):
    """Minimise u = 1/T + κσ²r(T)/(qN) over σ ∈ [s_lo, s_hi], integer T ∈ [1, t_cap],
    subject to ε_exact(q, T, σ) <= eps.  Optimal to a relative 1e-4 in u
    (and 1e-8 in σ).  ``ratios``: r(1..t_cap) (None: r = 1); the best T at
    a σ is then the largest only where r does not rise with T, which
    :mod:`paretofl.theory.bandmf`'s strategy's does not (tested).

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
    # lower bounds need r's least value up to T: its running minimum
    low = None if ratios is None else np.minimum.accumulate(ratios)

    def tmax(s):
        return np.minimum(t_cap, _tmax(eps, q, s, delta, orders, acct))

    def u(t, s):
        if ratios is None:
            return 1.0 / t + c * s * s
        return 1.0 / t + c * s * s * ratios[np.asarray(t, dtype=int) - 1]

    def u_low(t, s):
        return u(t, s) if low is None else 1.0 / t + c * s * s * low[int(t) - 1]

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
            heapq.heappush(heap, (u_low(tb, a), a, b, int(ta), int(tb)))

    for j in range(1, len(s)):
        push(s[j - 1], s[j], t[j - 1], t[j])
    tol = 1e-4
    while heap:
        lb, a, b, ta, tb = heapq.heappop(heap)
        if lb >= min(best[0], incumbent) * (1 - tol):
            break
        if tb - max(ta, 0) == 1 or acct.rounds_for(1) > 1 and _one_new_value(acct, ta, tb, t_cap):
            # one new T value: the least σ that reaches it
            offer(tb, _least_sigma_remembered(a, b, tb, eps, q, delta, orders, acct))
        else:
            pts = np.geomspace(a, b, 17)
            tp = tmax(pts[1:-1])
            ts = np.concatenate([[ta], tp, [tb]])
            offer(tp, pts[1:-1])
            for j in range(1, len(pts)):
                push(pts[j - 1], pts[j], ts[j - 1], ts[j])
    return best if best[1] is not None else None


def _bisect(lo: float, hi: float, reaches) -> tuple[float, float]:
    """The 16-way bisection of (lo, hi] to 1e-8 relative for the least σ where ``reaches(σ's)`` (monotone: no
    below, yes above); returns the upper end of the last bracket and that bracket's lower end."""
    while hi / lo > 1 + 1e-8:
        pts = np.geomspace(lo, hi, 17)[1:-1]
        ok = reaches(pts)
        k = int(np.argmax(ok)) if ok.any() else len(pts)
        lo = pts[k - 1] if k > 0 else lo
        hi = pts[k] if k < len(pts) else hi
    return hi, lo


def _fewest_participations(acct, tb: int) -> int:
    """The fewest charged participations k whose rounds reach ``tb`` (rounds_for grows with k)."""
    k = 1
    while acct.rounds_for(k) < tb and k < 1 << 50:
        k *= 2
    lo_k = k // 2
    while k - lo_k > 1:
        mid = (lo_k + k) // 2
        lo_k, k = (lo_k, mid) if acct.rounds_for(mid) >= tb else (mid, k)
    return int(k)


def _least_sigma(a: float, b: float, tb: int, reaches, eps, q, delta, orders, acct) -> float:
    """The least σ in (a, b] whose most rounds reach ``tb`` (``reaches``: the accountant's answer, as a mask),
    as :func:`_bisect` finds it, mostly without asking the accountant at each of its points: the accountant's
    root is guessed (:func:`~paretofl.theory.privacy.least_noise_guess`, a few orders' RDP), the bisection
    replayed against the guess, and its last bracket's two ends asked.  Where they answer no below and yes
    above, every point the bisection visits lies at or below the one or at or above the other, and the answer
    grows with σ, so the accountant would have answered each as the guess did: the same σ, to the bit.
    Otherwise (a wrong guess), the bisection asks the accountant at each point itself."""
    guess = least_noise_guess(eps, acct.rate, _fewest_participations(acct, tb), delta, (a * acct.zf, b * acct.zf),
                              orders, sampling=acct.sampling, prior=acct.prior)
    if guess is not None:
        hi, lo = _bisect(a, b, lambda pts: pts >= guess / acct.zf)
        ends = [x for x, known in ((lo, lo == a), (hi, hi == b)) if not known]
        ok = dict(zip(ends, reaches(np.array(ends)))) if ends else {}
        if not ok.get(lo, False) and ok.get(hi, True):
            return hi
    return _bisect(a, b, reaches)[0]


def _least_sigma_remembered(a: float, b: float, tb: int, eps, q, delta, orders, acct) -> float:
    """:func:`_least_sigma` with the accountant's own answer (:func:`_tmax`), remembered by every input of it
    (σ's at this charge are σ·``acct.zf``; what reaches ``tb`` is what makes its fewest participations): the
    searches of a design choosing its local work, one per K, ask mostly the same intervals (172 asked, 39
    distinct for bandmf-amplified at N 100)."""
    key = (float(a), float(b), int(tb), _fewest_participations(acct, tb), float(acct.zf),
           *_question(eps, delta, orders, acct))
    if key not in _LEAST_SIGMA:
        if len(_LEAST_SIGMA) >= 4096:
            _LEAST_SIGMA.clear()
        _LEAST_SIGMA[key] = _least_sigma(a, b, tb, lambda pts: _tmax(eps, q, pts, delta, orders, acct) >= tb, eps, q,
                                         delta, orders, acct)
    return _LEAST_SIGMA[key]


def _one_new_value(acct, ta, tb, t_cap) -> bool:
    """Do the T values a σ interval spans hold one new value only, where T
    moves in steps (rounds_for(k) = b·k, capped at t_cap)."""
    k = np.arange(1, int(tb // acct.rounds_for(1)) + 2)
    values = sorted_unique(np.minimum(t_cap, acct.rounds_for(k)))
    return int(np.sum((values > max(ta, 0)) & (values < tb))) == 0


def _closed_form_for_q(q, n, eps, delta, t_cap, s_lo, s_hi, kappa, orders, acct):
    """The map: walk Theorem 3's Pareto set (continuous T) from the most
    private end, where the utility bound is worst, and stop where the exact
    ε reaches the budget.  Along the set ε rises and u falls, so this is a
    bisection on the position along the concatenated pieces."""
    ps = pareto.theorem3(pareto.Box(q, n, kappa, s_lo, s_hi, t_cap), n_points=400)
    pts = np.vstack([p.points for p in ps.pieces])
    def epsilon(i):
        s, tt = pts[i]
        return acct.epsilon(s * acct.zf, max(1, int(math.floor(tt))), delta, orders)

    def meets(i):
        s, tt = pts[i]
        return acct.meets(eps, s * acct.zf, max(1, int(math.floor(tt))), delta, orders)

    if not meets(0):
        return None
    lo, hi = 0, len(pts) - 1
    if meets(hi):
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            lo = mid
        else:
            hi = mid
    s, tt = pts[lo]
    tt = max(1, int(math.floor(tt)))
    return {"q": q, "rounds": tt, "sigma": float(s), "utility_bound": 1 / tt + kappa * s * s / (q * n),
            "epsilon": epsilon(lo)}


def _q_candidates(n, q, q_min, q_max):
    if q is not None:       # a q whose qN is within 1e-9 of a whole m is m/N: what a fixed draw of m takes
        return [whole_cohort_rate(float(q), n)]
    lo = q_min if q_min is not None else 1.0 / n
    if not (0 < lo <= q_max <= 1):
        raise ValueError(f"empty or invalid q range [{lo:g}, {q_max:g}]; it must lie in (0, 1] with q_min <= q_max")
    m = np.arange(math.ceil(cohort_size(lo, n)), math.floor(cohort_size(q_max, n)) + 1)
    m = m[m >= 1]
    if m.size == 0:
        raise ValueError(f"no cohort size m with q = m/N in [{lo:g}, {q_max:g}] for N = {n}")
    if m.size > 24:  # keep the search short: 24 cohort sizes, geometric, ends included
        m = sorted_unique(np.round(np.geomspace(m[0], m[-1], 24)).astype(int))
    return [float(k) / n for k in m]


def _why_q(d: Design, per_q: dict, qs: list) -> str:
    """Why this q: where it sits among the cohort sizes searched."""
    others = sorted((u, qq) for qq, u in per_q.items() if qq != d.q)
    what = "utility bound" if d.predicted_utility_loss is None else "predicted utility loss"
    text = (f"q = {d.q:.3g} ({d.clients_per_round:,.4g} clients a round) has the lowest {what} of the "
            f"{len(qs)} cohort sizes searched in [{min(qs):.3g}, {max(qs):.3g}]")
    if others:
        u2, q2 = others[0]
        base = per_q.get(d.q, u2)
        if d.predicted_utility_loss is None and base > 0:      # the bound is positive: a ratio means something
            text += f"; the next best, q = {q2:.3g}, is {100 * (u2 / base - 1):.1f} % worse"
        else:        # a fitted loss can cross zero: a percentage of it can flip sign, a difference cannot
            text += f"; the next best, q = {q2:.3g}, predicts a loss {u2 - base:.3g} higher"
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


def _sigma_range(d) -> None:
    """A design's σ range, as a file records it: two finite numbers at least 0 (NbAFL's design, which searches
    none, records 0 and 0), the σ it trains between them (a group design with noise on each update records
    its groups' blend, and those written before its σ_g were held to the range may lie outside it: not
    checked there, as a σ outside the range is the user's wish missed, never a privacy figure)."""
    lo, hi = d.sigma_min, d.sigma_max
    for name, v in (("sigma_min", lo), ("sigma_max", hi)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
            raise ValueError(f'"{name}" must be a finite number at least 0, got {v!r}')
    if hi > 0 and lo > hi:
        raise ValueError(f'"sigma_min" {lo!r} is above "sigma_max" {hi!r}: no range')
    # the aggregate view's group design has one σ, searched in the range as a design without groups is
    checked = d.groups is None or d.noise_on == "sum"
    if hi > 0 and checked and not (lo * (1 - 1e-9) <= d.sigma <= hi * (1 + 1e-9)):
        raise ValueError(f'"sigma" {d.sigma!r} lies outside its range ["sigma_min", "sigma_max"] = [{lo!r}, {hi!r}]')


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


def check_q(v, name: str = "q") -> float:
    """A share of the clients (q, q_min, q_max): a number in (0, 1]."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not (0 < v <= 1):
        raise ValueError(f"{name} must lie in (0, 1] (a share of the clients), got {v!r}")
    return float(v)
