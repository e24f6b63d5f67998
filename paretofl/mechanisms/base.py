"""What every mechanism says about itself, and the registry every layer reads.

A mechanism is one class (a subclass of :class:`Mechanism`) in one module
of this package.  It owns:

* its name, a line for help texts, and the trainer options it takes
  (:attr:`Mechanism.options`: the CLI's flags and choices come from here);
* who is trusted, the neighbouring relation, what is released (the
  privacy statement's fields, :mod:`paretofl.mechanisms.statement`);
* how the trainer draws a round's cohort (:attr:`Mechanism.selection`) and
  where the noise goes (:attr:`Mechanism.noise_on`), and how much: the
  trainer, the audit's releases and the bridges add exactly what
  :meth:`Mechanism.noise` says (per replica where they run several), and
  no layer outside this package works a noise scale out of σ itself (the
  inverse, the σ that releases a given noise, is
  :meth:`Mechanism.sigma_for`);
* its charge per round, one :class:`~paretofl.theory.privacy.Charge`
  (:meth:`Mechanism.charge`): the only place the charge is worked out;
* its audit settings (:attr:`Mechanism.audits`): the canary release the
  audit runs and the broken copies it must catch.

No torch here (``paretofl design`` must start fast); the trainer's side of
each kind of release lives in :mod:`paretofl.fl.release`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from ..theory.privacy import DEFAULT_ORDERS, Charge, account, check_rate, cohort_size

__all__ = ["Mechanism", "Noise", "AuditSetting", "Break", "register", "get", "names", "REGISTRY", "positive",
           "rates", "sigmas", "sum_multiplier", "sum_noise", "sum_sigma", "InfeasibleBudget", "on_floor"]

class InfeasibleBudget(ValueError):
    """No allowed (q, T, σ) meets the budget; carries the smallest ε reachable."""

    def __init__(self, epsilon: float, min_epsilon: float, where: dict, prior_epsilon: float | None = None):
        self.epsilon, self.min_epsilon, self.where = epsilon, min_epsilon, where
        if where.get("floor"):
            top = where.get("largest_order", math.inf)
            why = (f"budget epsilon={epsilon:g} cannot be met: below epsilon {where['floor']:.4g} no round fits at "
                   f"this delta on the accountant's orders (up to {top:g}: converting RDP to (epsilon, delta) alone "
                   "costs that much); raise epsilon above it, or delta")
        elif prior_epsilon is not None and prior_epsilon >= epsilon:
            why = (f"budget epsilon={epsilon:g} cannot be met: the private pre-trial alone spent epsilon "
                   f"{prior_epsilon:.4g}; raise epsilon above it, with room for the training")
        else:
            why = (f"budget epsilon={epsilon:g} cannot be met: the smallest epsilon any (q, T, sigma) searched "
                   f"reaches is {_up(min_epsilon)} (q={where['q']:g}, T=1, sigma={where['sigma']:g}"
                   + (f", after the private pre-trial's {prior_epsilon:.4g}" if prior_epsilon is not None else "")
                   + "); raise epsilon or sigma_max"
                   + (f", or ask for q={where['other_q'][0]:g} (it reaches {_up(where['other_q'][1])})"
                      if where.get("other_q") else ""))
        super().__init__(why)


def _up(x: float) -> str:
    """A threshold to four significant figures, rounded up: a budget of the figure printed meets it."""
    if not (x > 0) or math.isinf(x):
        return f"{x:.4g}"
    step = 10.0 ** (math.floor(math.log10(x)) - 3)
    return f"{math.ceil(x / step * (1 - 1e-15)) * step:.4g}"


def on_floor(d) -> str:
    """A remark where a design compared sits on the σ floor (its best lies lower)."""
    if d.sigma <= d.sigma_min * (1 + 1e-6):
        return (f" (its sigma sits on sigma_min = {d.sigma_min:g}, and the budget is not spent: lower sigma_min to "
                "compare at its best)")
    return ""


#: name -> mechanism class, in the order the modules register them
REGISTRY: dict[str, type[Mechanism]] = {}


def register(cls):
    """Class decorator: add a mechanism to the registry (its name once)."""
    if cls.name in REGISTRY:
        raise ValueError(f"mechanism {cls.name!r} is registered twice")
    REGISTRY[cls.name] = cls
    return cls


def names(**where) -> tuple[str, ...]:
    """The registered mechanisms' names, those whose class attributes equal
    ``where`` (e.g. ``names(designable=True)``)."""
    return tuple(n for n, c in REGISTRY.items() if all(getattr(c, k) == v for k, v in where.items()))


def get(name: str, **options) -> Mechanism:
    """The mechanism called ``name``, configured with ``options`` (e.g.
    adaptive clipping's ``clip_quantile``)."""
    if name not in REGISTRY:
        raise ValueError(f"mechanism must be one of {', '.join(REGISTRY)}, got {name!r}")
    cls = REGISTRY[name]
    unknown = sorted(set(options) - set(cls.constructor_options))
    if unknown:
        takes = f"its options: {', '.join(cls.constructor_options)}" if cls.constructor_options else "it takes none"
        raise ValueError(f"mechanism {name} takes no option {', '.join(unknown)}; {takes}")
    return cls(**options)


def positive(x, name: str) -> float:
    """x as a positive finite float, else a ValueError naming ``name``."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)) \
            or not (x > 0) or math.isinf(x):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return float(x)


def rates(q):
    """Sampling rates (a number or one per ledger row), each in (0, 1]."""
    if np.ndim(q):
        q = np.asarray(q, dtype=float)
        if np.any(~(q > 0)) or np.any(q > 1):
            raise ValueError(f"q must lie in (0, 1], got {q}")
        return q
    return check_rate(q, "q")


def sigmas(sigma):
    """Noise multipliers (a number or one per ledger row), each >= 0 and
    finite (0: a run without noise, charged as unlimited)."""
    s = np.asarray(sigma, dtype=float)
    if np.any(~(s >= 0)) or np.any(~np.isfinite(s)):
        raise ValueError(f"sigma must be a non-negative finite number, got {sigma}")
    return s if s.ndim else float(s)


def sum_multiplier(q, sigma, n_clients, cohort=None):
    """z = σ√m, the noise multiplier on a sum of m clients' updates each
    noised at σ (in units of C); m = ``cohort`` or qN.  Arrays stay arrays."""
    m = cohort_size(q, n_clients, cohort)
    if not (np.ndim(q) or np.ndim(m) or np.ndim(sigma)):
        return sigma * math.sqrt(m)
    # arrays broadcast over q, σ and the cohort together: one z per replica also where only q is one per replica
    z = np.asarray(sigma, dtype=float) * np.sqrt(m)
    return np.broadcast_to(z, np.broadcast_shapes(np.shape(q), np.shape(z))).copy()


def sum_noise(kind: str, split: str, q, sigma, n_clients, cohort=None) -> Noise:
    """The noise on a sum of m clients' updates each noised at σ: multiplier
    z = σ√m, the sum divided by m (m = ``cohort`` or qN, as
    :func:`~paretofl.theory.privacy.cohort_size` gives it); one per replica
    where q, σ or the cohort are arrays.  σ is checked (>= 0, finite) as a
    charge checks it: no release carries a noise its charge would refuse."""
    sigma = sigmas(sigma)
    if np.ndim(q) or np.ndim(sigma) or np.ndim(cohort):
        m = np.asarray(cohort_size(q, n_clients, cohort), dtype=float)
        z = sum_multiplier(q, np.asarray(sigma, dtype=float), n_clients, m)
        return Noise(kind, z, split=split, divisor=np.broadcast_to(m, np.shape(z)).copy())
    m = cohort_size(float(q), n_clients, None if cohort is None else float(cohort))
    return Noise(kind, float(sigma) * math.sqrt(m), split=split, divisor=m)


def sum_sigma(std, q, n_clients, cohort=None):
    """σ = z/√m, the inverse of :func:`sum_multiplier`: the σ whose sum of m
    clients carries noise multiplier ``std``.  No checks on m (a search grid
    may hold cohorts below one: it masks them itself).  Arrays stay arrays."""
    m = cohort_size(q, n_clients, cohort)
    if not (np.ndim(q) or np.ndim(m) or np.ndim(std)):
        return std / math.sqrt(m)
    s = np.asarray(std, dtype=float) / np.sqrt(m)
    return np.broadcast_to(s, np.broadcast_shapes(np.shape(q), np.shape(s))).copy()


@dataclass(frozen=True)
class Noise:
    """The Gaussian noise one round releases, per coordinate, in units of the
    clipping norm C of what it protects.

    ``on``: "sum" (one noise on the sum of the cohort's clipped updates),
    "correlated-sum" (noise on the sum correlated across rounds: round t
    gets row t of C⁻¹Z, :mod:`paretofl.theory.bandmf`; ``std`` is Z's),
    "update" (each client's clipped update noised on the client), "gradient"
    (each DP-SGD step's sum of clipped per-sample gradients), "parameters"
    (each client's clipped parameters, NbAFL), "modular-sum" (discrete
    noise in each client's quantised share, summed modulo 2^bits by secure
    aggregation: the distributed mechanism).  ``std``: its standard
    deviation over C (scalar or one per replica).  ``split``: who adds it —
    "shares" (noise on the sum: the total variance std² cut into N equal
    shares, one added by each selected client and the rest by the server,
    so the total is fixed whatever the cohort's size: each client's share
    is (m/N)σ²C² at std = σ√m), "server" (the server adds it all) or
    "client" (each client on its own update).  ``divisor``: what the
    aggregate is divided by (the expected cohort: a public number).

    Where :meth:`Mechanism.noise` is given arrays (one q, σ or cohort per
    replica, or per client), ``std`` and ``divisor`` are arrays of their
    broadcast shape."""

    on: str
    std: object
    split: str = "server"
    divisor: object = None


@dataclass(frozen=True)
class Break:
    """A deliberately broken copy of a mechanism that the audit must catch:
    ``name``, what is broken in words, and whether the break is in the
    release (``claim=False``: the trainer releases something else while the
    unbroken mechanism's ε is claimed) or in the claim (``claim=True``: the
    real release, against an ε computed the broken way)."""

    name: str
    what: str
    claim: bool = False


#: breaks every client-level mechanism has: its noise, its clipping
NOISE_DIV10 = Break("noise/10", "the noise divided by ten")
NO_CLIP = Break("no-clip", "clipping skipped")


@dataclass(frozen=True)
class AuditSetting:
    """One audit of a mechanism (docs/theory.md §5.5): the canary release
    the audit runs and the broken copies it must catch.

    ``canary`` names the pair of neighbouring inputs:

    * "add-remove": client 0 exists and sends a canary update (10 C in a
      coordinate no other client touches) or does not exist at all;
    * "zero-out": client 0 takes part either way, sending the canary or a
      zero update, and is seen doing so;
    * "witness-add-remove": every client sends a (‖a‖ = C) and the added
      client -a (10 C before clipping); a fixed cohort of m is drawn from
      the clients present;
    * "witness-replace": every client sends a, one of them -a instead;
    * "sample-add": one client's data with or without a canary sample;
    * "sample-replace": the canary sample in place of an ordinary one;
    * "add-remove-run": add-remove over a whole run of T rounds (noise
      correlated across rounds);
    * "add-remove-pipeline": add-remove over a private pre-trial's runs and
      the training after it, all released together.

    ``params`` are the setting's numbers (clients, q, sigma, clip, samples,
    features, delta, ``canary``: the canary update's norm before clipping
    in units of C, default 10, ...), read by :mod:`paretofl.fl.audit`."""

    name: str
    mechanism: str
    canary: str
    what: str
    params: dict = field(default_factory=dict)
    breaks: tuple = ()

    def break_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.breaks)


class Mechanism:
    """Base class: a way of releasing a model, and everything said about it.

    Class attributes a subclass sets (see the module docstring);
    :meth:`charge` it must implement.  Instances carry the mechanism's
    structural options (adaptive clipping's); the numbers that vary between
    replicas and designs (q, σ, N) are arguments of the methods."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    #: whom the guarantee protects: "client" or "sample"
    unit: ClassVar[str] = "client"
    trusted: ClassVar[str] = ""
    relation: ClassVar[str] = ""
    released: ClassVar[str] = ""
    #: how a round's cohort is drawn: "poisson" (each client with its rate), "fixed" (m of N without
    #: replacement), "cyclic" (the clients of group t mod b, all of them), "cyclic-poisson" (those of group
    #: t mod b, each with its rate)
    selection: ClassVar[str] = "poisson"
    #: where the noise goes, and who adds it (see :class:`Noise`)
    noise_on: ClassVar[str] = "sum"
    split: ClassVar[str] = "server"
    #: where it runs: paretofl's trainer, or a framework's (the bridge applies it there)
    framework: ClassVar[str] = "paretofl"
    #: can ``design`` choose (q, T, σ) for it with the closed-form search
    designable: ClassVar[bool] = False
    #: can client-level DP-FedAvg (``train(algorithm="dpfedavg")``) run it
    trainable: ClassVar[bool] = True
    #: the algorithm that trains a design for it: DP-FedAvg, or one of its own (NbAFL's, named after it, which
    #: also designs with bounds of its own: ``nbafl_design``)
    algorithm: ClassVar[str] = "dpfedavg"
    #: does ``design(mechanism="auto")`` (:data:`paretofl.mechanisms.SEARCH`) compare it
    in_auto: ClassVar[bool] = False
    #: the trainer options this mechanism uses (beyond sigma, clip, lr, client_rate, optimizer)
    options: ClassVar[tuple] = ()
    #: the trainer options a design of it fixes beyond q and sigma (given beside the design they are refused)
    fixed_by_design: ClassVar[tuple] = ()
    #: can it run clients with budgets of their own (each group Poisson-sampled at its own rate: the group design
    #: of paretofl.budgets); a design or file with groups of any other mechanism is refused
    groups: ClassVar[bool] = False
    #: those of them that configure the mechanism itself (its constructor's)
    constructor_options: ClassVar[tuple] = ()
    #: each of them as ``paretofl design`` takes it: option -> ("int" or "float", its help); the CLI's flags
    #: are made from these (a family with options touches no other file for them)
    option_flags: ClassVar[dict] = {}
    #: RDP orders its ε is searched on (Flower's accountant reports on its own)
    orders: ClassVar[tuple] = DEFAULT_ORDERS
    #: does the framework it runs in report ε on :attr:`orders`, unrefined (Flower's accountant)
    fixed_orders: ClassVar[bool] = False
    #: the audit settings (each with its broken copies)
    audits: ClassVar[tuple] = ()
    #: is :meth:`error_ratio` set by the mechanism's own search (a plan), so that a design's ratio cannot be
    #: computed again from its name and options alone (a loaded design's prediction is then the file's)
    error_ratio_planned: ClassVar[bool] = False
    #: the most rounds a design of it searches (its error ratio is tabled to them), None: no cap of its own
    max_design_rounds: ClassVar[int | None] = None

    def __init__(self, **options):
        if options:
            raise ValueError(f"mechanism {self.name} takes no option {', '.join(sorted(options))}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def options_dict(self) -> dict:
        """The mechanism's options, as given to its constructor (none here)."""
        return {}

    # ---------------------------------------------------------------- privacy
    def charge(self, q, sigma, n_clients: int | None = None, cohort=None) -> Charge:
        """What one round charges the accountant: a :class:`Charge` (its
        noise multiplier linear in σ; vectorised over arrays of σ)."""
        raise NotImplementedError

    def participations(self, rounds: int) -> int:
        """How many of ``rounds`` rounds the most exposed client is charged
        for: all of them wherever a client may join any round; a mechanism
        whose clients join at most every b-th round says fewer."""
        return int(rounds)

    def rounds_for(self, participations):
        """The most rounds in which the most exposed client is charged
        ``participations`` times (the inverse of :meth:`participations`;
        vectorised)."""
        return participations

    def charged_in_round(self, t: int) -> bool:
        """Is round ``t`` (from 0) one the most exposed client is charged in
        (the ledger books the others at nothing)."""
        return True

    @property
    def unit_text(self) -> str:
        """The unit of privacy and the neighbouring relation in a few words
        ("client-level, add/remove"): said beside every ε printed."""
        return f"{self.unit}-level, {self.relation.split(':')[0]}"

    def epsilon(self, q, sigma, rounds: int, delta: float, n_clients: int | None = None, orders=None) -> float:
        """ε of ``rounds`` rounds at (q, σ): the charge composed over the
        rounds the most exposed client is charged for."""
        c = self.charge(q, sigma, n_clients)
        orders = self.orders if orders is None else orders
        return account([replace(c, steps=int(c.steps) * self.participations(rounds))], delta, orders,
                       fixed=self.reports_on_orders(orders))

    def reports_on_orders(self, orders) -> bool:
        """Are ``orders`` the fixed grid of the accountant of the framework
        this mechanism runs in, on which it reports ε unrefined (Flower's)?
        Then :func:`account` reports on that grid (the larger of that report
        and the searched ε).  Other orders are searched, as any orders are."""
        return self.fixed_orders and tuple(orders) == tuple(self.orders)

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Refuse, in one line, options given that this mechanism would
        ignore (by default: none; the constructor checks each value)."""

    def search(self, s, given: dict):
        """This mechanism's design.  ``s`` is what the design was asked
        (``s.n``, ``s.q``, ``s.q_min``, ``s.q_max``, ``s.t_cap``; ``s.cohorts(top)``,
        the cohort sizes allowed up to a share ``top``) and its exact search:
        ``s.point(mechanism, qs=None)`` is the best (q, T, σ) for one
        configured mechanism over the cohort sizes ``qs`` (default: those
        the job allows), a Design, or :class:`InfeasibleBudget` where nothing
        meets the budget.  A family with knobs of its own searches them
        around it (``given``: the options the user fixed); ``s.compare``
        says whether to put the default mechanism's design beside it (not
        when ``auto`` compares the families itself)."""
        return s.point(self)

    def derived_details(self, d) -> dict:
        """This family's own figures in design ``d``'s details (what its
        :meth:`search` wrote there), re-derived from the design's released
        parameters: name -> value.  A loaded design whose details record
        other values is refused (nothing in a file is believed); none by
        default."""
        return {}

    def float_text(self, d) -> str | None:
        """The statement's "Floating point" paragraph where this mechanism's
        noise is drawn otherwise than its framework's (None: the
        framework's; ``{here}`` is filled with the truncation's δ)."""
        return None

    def design_lines(self, d) -> list[str]:
        """The lines ``paretofl design`` prints for this mechanism's own knobs
        of design ``d`` (its :meth:`search`'s details), beside q, T and σ."""
        return []

    def error_ratio(self, rounds):
        """The share of independent noise's error on the model's trajectory
        that this mechanism's noise leaves at the same noise multiplier, for
        T = ``rounds`` (an int or an array): 1 for independent noise each
        round (the bound's noise term as it is)."""
        return np.ones(np.shape(rounds)) if np.ndim(rounds) else 1.0

    def check_rate(self, q, n_clients: int | None = None) -> float:
        """The sampling rate checked as this mechanism needs it."""
        return check_rate(q, "q")

    def noise(self, q, sigma, n_clients: int, cohort=None) -> Noise:
        """The noise a round releases (in units of C); see :class:`Noise`.
        Vectorised: q, σ and ``cohort`` may be arrays (one per replica, or
        per client), taken element by element.  What every layer adds."""
        raise NotImplementedError

    def sigma_for(self, std, q, n_clients: int | None = None, cohort=None):
        """The σ at which :meth:`noise` releases noise of std ``std`` (in
        units of C), before adaptive clipping raises the sum's share: ``std``
        itself where each client's (or step's) noise is σ, std/√m where one
        noise on the sum of m clients is σ√m (:func:`sum_sigma`).  For a
        design that searches the noise on what is released, or a framework
        that is given it (Flower's ``noise_multiplier``).  Vectorised."""
        if self.noise_on in ("sum", "correlated-sum", "modular-sum"):
            return sum_sigma(std, q, n_clients, cohort)
        return std

    # -------------------------------------------------------------- statement
    def sampling_text(self, d) -> str:
        if d.groups:
            return ("each client joins each round independently with its group's probability (Poisson; "
                    + ", ".join(f"q = {g['q']:.4g} at epsilon {g['budget']:g}" for g in d.groups)
                    + "); who took part is not released")
        return (f"each client joins each round independently with probability q = {d.q:.4g} (Poisson); who took "
                "part is not released")

    def accountant_text(self, d) -> str:
        return "RDP of the Poisson-subsampled Gaussian (paretofl's accountant), composed over the rounds"

    def mechanism_text(self, d) -> str:
        clip = f"C = {d.clip:g}" if d.clip is not None else "C (the clipping norm: not chosen by this design)"
        return (f"updates clipped to L2 norm {clip}; noise multiplier {d.noise_multiplier:.4g} on the released sum "
                f"(std {d.noise_multiplier:.4g} x C)")

    def statement_notes(self, d) -> list[str]:
        """Extra lines of the statement that only this mechanism needs."""
        return []
