"""A pre-trial spec: the data, the model, the fixed training settings and the
σ × T (× q) grid with its seeds (docs/theory.md §4, Gu et al. Algorithm 2).

Written as a flat TOML file (see ``pretrials/*.toml``) or given by flags;
every field is checked here, with a sentence that says what to change.
No torch here.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields

from ..fl.names import DATASETS, MODELS, PARTITIONS, is_reference, partition_label, split_partition  # noqa: F401
from ..mechanisms import DEFAULT
from ..theory.local_work import SCORED_ON

#: what every pre-trial runs: the registry's default, client-level DP-FedAvg in the aggregate view (Gu et al.'s
#: mechanism)
MECHANISM = DEFAULT

#: fields that do not change what a run computes (grid, seeds, where it runs)
_NOT_BASE = ("sigmas", "rounds", "q", "seeds", "device", "chunk", "local_work", "local_lrs")
#: fields added after stores were shipped: left out of a store's identity at their default
_NEW_DEFAULTS = {"subset": "public", "private": False, "epsilon": None, "scored_on": "test"}
SUBSETS = ("public", "rest", "all")


def read_toml(path) -> dict:
    """A TOML file as a dict; a missing or malformed file is a ValueError."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        if not data:
            raise ValueError(f"spec file {path} is empty: write the grid you want (e.g. sigmas, rounds, q) or "
                             "give the flags alone, without a file")
        return data
    except FileNotFoundError:
        raise ValueError(f"spec file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"spec file {path} is a folder") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"spec file {path} is not valid TOML ({exc})") from None


class _Checker:
    """A spec's field checks: each refuses with one line ``where: ...`` and
    stores the value turned to its type (grids sorted)."""

    def __init__(self, spec, where: str):
        self.spec, self.where = spec, where

    def bad(self, msg):
        raise ValueError(f"{self.where}: {msg}")

    def refusal(self, check, *args) -> None:
        """Run a library check, its refusal prefixed with where it was met."""
        try:
            check(*args)
        except ValueError as exc:
            self.bad(str(exc))

    def _value(self, name, v, lo, hi, integer, lo_open, grid):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                integer and isinstance(v, float) and not v.is_integer()):
            kind = ("integers" if integer else "numbers") if grid else ("an integer" if integer else "a number")
            self.bad(f"{name} must {'hold' if grid else 'be'} {kind}, got {v!r}")
        try:
            fv = float(v)
        except OverflowError:             # an integer past what a float holds: out of range below
            fv = math.inf
        if not math.isfinite(fv) or (v <= lo if lo_open else v < lo) or v > hi:
            self.bad(f"{name}{' values' if grid else ''} must lie in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}")
        return int(v) if integer else float(v)

    def num(self, name, lo, hi, integer=False, lo_open=True):
        setattr(self.spec, name, self._value(name, getattr(self.spec, name), lo, hi, integer, lo_open, False))

    def choice(self, name, options):
        if getattr(self.spec, name) not in options:
            self.bad(f"{name} must be one of {', '.join(options)}, got {getattr(self.spec, name)!r}")

    def grid(self, name, lo, hi, integer=False, lo_open=True):
        vals = getattr(self.spec, name)
        if not vals:
            self.bad(f"{name} must list at least one value")
        if len(vals) > 1000:
            self.bad(f"{name} lists {len(vals)} values; at most 1000")
        out = [self._value(name, v, lo, hi, integer, lo_open, True) for v in vals]
        if len(set(out)) != len(out):
            self.bad(f"{name} lists a value twice")
        setattr(self.spec, name, sorted(out))


@dataclass
class Spec:
    """One pre-trial.  Client-level DP-FedAvg (Gu et al.'s mechanism): each
    round every client joins with probability ``q``, runs ``local_epochs`` of
    SGD, clips its update to ``clip`` and adds N(0, σ²·clip²); privacy is
    accounted in the aggregate view (docs/theory.md §5)."""

    dataset: str = "fashion-mnist"     # a built-in name, or a loader "package.module:function"
    data_dir: str | None = None
    public_fraction: float = 0.1      # share of the training set the pre-trial trains on
    data_seed: int = 0                # which subset, which partition
    subset: str = "public"            # the public share, the rest (the clients' private data), or all of it
    partition: str = "iid"
    beta: float | None = None         # Dirichlet concentration (partition dirichlet; default 0.5; or dirichlet:ALPHA)
    clients: int = 10
    model: str = "lr"                 # a built-in name, or a factory "package.module:function"
    q: list = field(default_factory=lambda: [0.5])
    sigmas: list = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    rounds: list = field(default_factory=lambda: [5, 10, 20, 40])
    seeds: int = 3
    clip: float = 0.1
    lr: float = 0.1
    local_epochs: int = 1
    batch_size: int = 64
    delta: float = 1e-5
    device: str = "cpu"
    chunk: int = 48                   # most replicas (σ, seed) trained together in one job
    # a private pre-trial: on the clients' own data (subset "rest" or "all", the federation's own clients),
    # every run DP, none without noise, and all of it charged: at most ``epsilon`` (docs/theory.md §4.D)
    private: bool = False
    epsilon: float | None = None
    # the local work to measure (issue 46; docs/theory.md §4.E): noise-free runs at each of these local
    # epochs, for the grid's largest T at the largest q, evaluated at every T of the grid; public data only
    local_work: list = field(default_factory=list)
    # the clients' learning rates the local work is measured at besides ``lr`` (docs/theory.md §4.E): each K of
    # local_work at each of these too, so that the design chooses η with K; empty: at ``lr`` only
    local_lrs: list = field(default_factory=list)
    # where the runs' loss is scored (κ and the local work are fitted to it): "held-out", 20 % of each client's
    # samples held out of the pre-trial's training (paretofl.fl.build.hold_out), so that nothing fitted reads the
    # test split results are reported on; or "test", the data set's test split (stores made before held-out
    # scoring, and a pre-trial on the clients' own data, whose samples are not public).  Default: held-out on the
    # public share, test on the clients' data (subset rest or all; held-out refused there where private)
    scored_on: str | None = None

    # ------------------------------------------------------------------ load
    @classmethod
    def from_base(cls, base: dict, where: str = "store") -> Spec:
        """The spec a results store's base records (its data, clients, model,
        local epochs and batch), without what the store adds beside it (the
        fingerprints of a user's model and data, the public share): the one
        reader of a store's spec."""
        known = {f.name for f in fields(cls)}
        # a base without scored_on is a store's from before held-out scoring: its runs were scored on the test split
        return cls.from_dict({"scored_on": "test", **{k: v for k, v in base.items() if k in known}}, where=where,
                             grid=False)

    @classmethod
    def from_dict(cls, d: dict, where: str = "spec", grid: bool = True) -> Spec:
        """A spec from its fields.  It must say what it trains: a spec that
        names no data set or no model (an empty file, or one holding only
        ``seeds = 2``) is refused, never run on defaults.  ``grid=False``:
        the fields are a store's base, without its grid (a private spec's
        grid is then not checked against its epsilon: the store's spend log
        says what it spent)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        absent = [k for k in ("dataset", "model") if d.get(k) is None]
        if absent:
            raise ValueError(f"{where}: it does not say what the pre-trial trains: give {' and '.join(absent)} "
                             "(a built-in name, e.g. the data set fashion-mnist and the model lr, or your own as "
                             "package.module:function)")
        d = dict(d)
        for k in ("q", "sigmas", "rounds", "local_work", "local_lrs"):
            if k in d and not isinstance(d[k], (list, tuple)):
                d[k] = [d[k]]
        spec = cls(**d)
        spec.validate(where, grid=grid)
        return spec

    @classmethod
    def from_toml(cls, path) -> Spec:
        return cls.from_dict(read_toml(path), where=str(path))

    # ------------------------------------------------------------------ check
    def validate(self, where="spec", grid: bool = True):
        """Check every field, turning numbers to their types and grids to sorted
        lists; one clear line (``where: ...``) for the first thing wrong."""
        check = _Checker(self, where)
        for name, known, what in (("dataset", DATASETS, "data loader"), ("model", MODELS, "model factory")):
            v = getattr(self, name)
            if v not in known and not is_reference(v):
                check.bad(f"{name} must be one of {', '.join(known)} or your {what} as package.module:function, "
                          f"got {v!r}")
        # one vocabulary with design --partition and train: dirichlet:ALPHA is dirichlet at beta ALPHA; its one name
        # (shards:2, not shards:02); a beta beside another ALPHA is refused (one beside iid is kept, as stores have it)
        check.refusal(split_partition, self.partition, self.beta, False)
        self.partition, self.beta = split_partition(self.partition, self.beta, False)
        check.num("beta", 0, 1e6)
        check.choice("device", ("cpu", "cuda"))
        check.choice("subset", SUBSETS)
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            check.bad(f"data_dir must be a path, got {self.data_dir!r}")
        check.num("public_fraction", 0, 1)
        check.num("data_seed", 0, 2**31, integer=True, lo_open=False)
        check.num("clients", 1, 100_000, integer=True)
        check.grid("q", 0, 1)
        check.grid("sigmas", 0, 1e4)
        check.grid("rounds", 0, 100_000, integer=True)
        check.num("seeds", 0, 10_000, integer=True)
        check.num("clip", 0, 1e6)
        check.num("lr", 0, 1e3)
        check.num("local_epochs", 0, 1000, integer=True)
        check.num("batch_size", 0, 1_000_000, integer=True)
        check.num("delta", 0, 0.5)
        if isinstance(self.clients, int):      # the one check every delta meets (theory.privacy.check_delta)
            from ..theory.privacy import check_delta

            check.refusal(check_delta, self.delta, self.clients)
        check.num("chunk", 0, 100_000, integer=True)
        self._check_scored_on(check)
        if self.local_work or self.local_lrs:
            self._check_local_work(check)
        from ..mechanisms import get as mechanism_of

        mech = mechanism_of(MECHANISM)
        for q in self.q:      # what the aggregate view needs (q·N >= 1), asked of the mechanism itself
            check.refusal(mech.check_rate, q, self.clients)
        self._check_private(check, grid)

    def _check_scored_on(self, check: _Checker) -> None:
        if self.scored_on is None:     # held out of a public share; the test split on the clients' own data
            self.scored_on = "held-out" if self.subset == "public" and self.private is not True else "test"
        check.choice("scored_on", SCORED_ON)
        if self.private is True and self.scored_on == "held-out":
            check.bad("a private pre-trial scores its runs on the data set's test split (scored_on test): a "
                      "loss on samples held out of the clients' data would be a release nothing charges")

    def _check_local_work(self, check: _Checker) -> None:
        from ..theory.local_work import MAX_LOCAL_EPOCHS

        if self.local_lrs and not self.local_work:
            check.bad("local_lrs are the learning rates the local work is measured at besides lr: give the local "
                      "epochs to measure too (local_work, e.g. [1, 2, 4, 8])")
        check.grid("local_work", 0, MAX_LOCAL_EPOCHS, integer=True)
        if self.private or self.subset != "public":
            check.bad("local_work trains without noise: it runs on the public share only (subset = \"public\", not "
                      "private), never on the clients' data; measure the local work on a public pre-trial "
                      "partitioned like your clients")
        if len(self.local_work) < 2:
            check.bad("local_work needs at least two local epochs to compare (e.g. [1, 2, 4, 8])")
        if self.local_epochs not in self.local_work:
            check.bad(f"local_work must include local_epochs = {self.local_epochs}, the local work kappa is "
                      f"measured at (e.g. [{self.local_epochs}, {2 * self.local_epochs}, {4 * self.local_epochs}])")
        if self.local_lrs:
            check.grid("local_lrs", 0, 1e3)

    def local_work_lrs(self) -> list:
        """The learning rates the local work is measured at: ``lr`` and ``local_lrs``, ascending, once each."""
        own = round(float(self.lr), 12)
        return sorted({own, *(round(float(x), 12) for x in self.local_lrs)})

    def _check_private(self, check: _Checker, grid: bool) -> None:
        """A private pre-trial: on the clients' data, with a budget its grid's composed spend stays within."""
        if not isinstance(self.private, bool):
            check.bad(f"private must be true or false, got {self.private!r}")
        if not self.private:
            if self.epsilon is not None:
                check.bad("epsilon is the budget of a private pre-trial: set private = true, or leave epsilon out")
            return
        if self.subset == "public":
            check.bad("a private pre-trial trains on the clients' own data: set subset = \"rest\" (the data beside "
                      "a public share) or \"all\" (all of it), with clients and partition those of your federation")
        if self.epsilon is None:
            check.bad("a private pre-trial is charged: give epsilon, the most it may spend (it comes out of the "
                      "design's budget)")
        check.num("epsilon", 0, 1e4)
        from ..theory.privacy import account

        cost = account(self.private_charges(), self.delta) if grid else 0.0
        if cost > self.epsilon * (1 + 1e-12):
            check.bad(f"this grid spends epsilon {cost:.4g} on the clients' data ({len(self.q) * len(self.sigmas)} "
                      f"noise levels x {self.seeds} seeds, {max(self.rounds)} rounds each, composed), above the "
                      f"epsilon = {self.epsilon:g} allowed: raise the sigmas, or lower the seeds, the rounds or the "
                      "number of sigmas")

    # ------------------------------------------------------------------ views
    def base(self) -> dict:
        """What fixes a run apart from its grid point and seed (the store's identity)."""
        return {k: v for k, v in asdict(self).items()
                if k not in _NOT_BASE and not (k in _NEW_DEFAULTS and v == _NEW_DEFAULTS[k])}

    @property
    def partition_name(self) -> str:
        """The partition as a design names it: dirichlet with its beta ("dirichlet:0.5"), else as given."""
        return partition_label(self.partition, self.beta)

    def seed_list(self) -> list[int]:
        return list(range(self.seeds))

    def private_charges(self) -> list:
        """What the grid's runs charge on the clients' data (a private
        pre-trial; docs/theory.md §4.D): one :class:`Charge` per (q, σ), for
        max(rounds) rounds of each of its seeds."""
        from ..mechanisms import get as mechanism_of
        from ..theory.privacy import Charge

        mech = mechanism_of(MECHANISM)
        out = []
        for q in self.q:
            for s in self.sigmas:
                c = mech.charge(float(q), float(s), int(self.clients))
                out.append(Charge(c.sampling, float(c.rate), float(c.noise_multiplier),
                                  int(max(self.rounds)) * int(self.seeds)))
        return out

    def noise_levels(self) -> list[float]:
        """The σ the pre-trial trains: the grid and the non-private reference
        σ = 0, which a private pre-trial leaves out (it would publish the
        clients' data without noise)."""
        return list(self.sigmas) if self.private else [0.0, *self.sigmas]

    def configurations(self) -> list[tuple]:
        """Every run (σ, T, q, seed) the spec asks for, the non-private
        reference σ = 0 included unless the pre-trial is private."""
        return [(s, t, q, seed) for q in self.q for s in self.noise_levels() for t in self.rounds
                for seed in self.seed_list()]

    def to_dict(self) -> dict:
        return asdict(self)
