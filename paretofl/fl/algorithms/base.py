"""The shared round loop and what an algorithm declares: its options (a
typed config) and its charges (:class:`~paretofl.theory.privacy.Charge`s,
booked on :class:`~paretofl.theory.ledger.Ledger`, one row per replica)."""

from __future__ import annotations

import csv
import time

import numpy as np
import torch

from ...progress import Progress
from ...theory.float_noise import float_delta
from ...theory.ledger import Ledger
from ..engine import Engine
from ..options import options_of, per_replica


class History:
    """Per-round records, one row per (round, replica).  With ``path`` every
    row is written to that CSV file as it comes (flushed), so an interrupted
    run keeps the rounds it finished.  ``on_round(t)``, where given, is
    called after every round ``t`` (0-based) a run trains (an outer sweep's
    progress, or what a caller reads off the policy each round)."""

    def __init__(self, path=None, on_round=None):
        if on_round is not None and not callable(on_round):
            raise ValueError(f"on_round must be a function of the round, got {on_round!r}")
        self.rows, self.path, self.on_round = [], path, on_round
        self._file = self._writer = None

    def round_done(self, t: int) -> None:
        """Round ``t`` has been trained (and evaluated where it was due)."""
        if self.on_round is not None:
            self.on_round(t)

    def add(self, **kw):
        self.rows.append(kw)
        if self.path is not None:
            if self._writer is None:
                self._file = open(self.path, "w", newline="")
                self._writer = csv.DictWriter(self._file, fieldnames=list(kw))
                self._writer.writeheader()
            self._writer.writerow(kw)
            self._file.flush()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None


class Policy:
    """Base class of the algorithms.

    A subclass declares ``Config``, a dataclass of its options (each an
    :func:`option`, validated in ``__post_init__`` with errors that name the
    parameter), and sets what a round does:

    * ``charges(t)`` -- what the accountant is charged for round t: a list of
      :class:`~paretofl.theory.privacy.Charge` (values one per ledger row,
      or scalars), or None when the policy reports its own ε
      (:meth:`fixed_epsilon`);
    * ``round(t, glob, active)`` -- the new global models (R, ...);
    * ``after_round`` -- adapts settings from what was observed.

    ``epsilon``, ``delta`` and ``rounds`` are the run's budget, for
    policies that calibrate to it (ALI-DPFL, NbAFL).
    """

    name = "policy"
    Config = None
    needs_validation = False  # does after_round use the server's validation loss?
    #: the test samples a validating policy holds out (at most half of them; :func:`held_out`)
    val_size = 2000

    def __init__(self, engine: Engine, config=None, *, epsilon=None, delta=1e-5, rounds=None, **options):
        if config is None:
            config = self.Config(**options)
        elif options:
            raise ValueError("give either a config or options, not both")
        self.engine, self.config = engine, config
        self.epsilon, self.delta, self.rounds = epsilon, delta, rounds

    @classmethod
    def options(cls) -> dict:
        """name -> (default, help, choices, per_replica) of the algorithm's options."""
        return options_of(cls.Config)

    def charges(self, t):
        return None

    def round(self, t, glob, active):
        raise NotImplementedError

    def after_round(self, t, glob, val_loss):
        pass

    def max_rounds(self):
        """The most rounds each replica runs (R,), or None: no limit of the algorithm's own."""
        return None

    def finished(self):
        """Replicas the algorithm has finished (R,) bool, or None: checked
        before each round (ALI-DPFL: its R_c DP-SGD iterations taken)."""
        return None

    #: what the algorithm's own limit is, for a run it stopped before the rounds asked
    limit_text = "the algorithm's own round limit"

    #: one ledger per replica unless the policy has groups of clients with budgets of their own
    n_groups = 1

    def group_names(self):
        return None

    def max_cohort(self):
        """The most clients a round of each replica trains (R,): all N
        unless the policy samples fewer."""
        return np.full(self.engine.R, self.engine.N)

    @classmethod
    def size_before(cls, config, n_clients: int, n_max: int, groups=None) -> tuple[int, int]:
        """(the most clients a round of one replica trains, the largest local
        batch) from the options alone: the memory check made before the
        engine exists (:func:`paretofl.fl.build.assemble`)."""
        return n_clients, n_max

    def max_batch(self) -> int:
        """The largest local batch a client's step uses."""
        return self.engine.n_max

    def state_bytes(self) -> int:
        """Bytes of client state kept between rounds at most (0: none)."""
        return 0

    def info_row(self, r) -> dict:
        """Extra per-replica columns for the history (σ, C, τ …)."""
        return {}

    def fixed_epsilon(self):
        return None

    def ledger(self, rows: int, delta: float) -> Ledger:
        """The books of ``rows`` accountants for this policy's charges, on
        its mechanism's orders (and, where an outside accountant reports on
        them, at its fixed grid: never below it)."""
        mech = getattr(self, "mech", None)
        if mech is None:
            return Ledger(rows, delta)
        return Ledger(rows, delta, mech.orders, fixed=mech.reports_on_orders(mech.orders))

    def vec(self, v, dtype=float):
        """A setting (scalar or per replica) as an (R,) numpy array."""
        return per_replica(v, self.engine.R, dtype)


#: bytes a replica's two random generators hold (its own and its CPU one:
#: a Mersenne Twister's state and torch's wrapper)
GENERATOR_BYTES = 2 * 5120
#: what to lower when a run does not fit, unless the caller says it in its own terms
LOWER = "lower the replicas, the client rate or the model"


def memory_bytes(n_params: int, replicas: int, rows: int, batch: int, features: int, state: int = 0,
                 itemsize: int = 4) -> int:
    """A lower bound on the bytes a round takes beyond the data: ``rows``
    cohort models in all (each row's start, its local copy, gradients,
    noise and flat update: eight copies of d parameters), each replica's
    global models, the gathered batches, the replicas' random generators,
    and ``state`` bytes the policy keeps.  Per-sample activations come on
    top (bounded per chunk)."""
    models = (8 * rows + 6 * replicas) * n_params * itemsize
    batches = rows * batch * (features * itemsize + 16)
    return models + batches + replicas * GENERATOR_BYTES + int(state)


def memory_needed(policy: Policy) -> int:
    """:func:`memory_bytes` of a policy's run on its engine."""
    eng = policy.engine
    return memory_bytes(eng.net.n_params, eng.R, int(np.sum(policy.max_cohort())), int(policy.max_batch()),
                        eng.x_flat.shape[1], policy.state_bytes(), torch.finfo(eng.dtype).bits // 8)


def memory_available(device) -> int | None:
    """Bytes free for a run on ``device``: CUDA's free memory, or Linux's
    MemAvailable; None where it cannot be read (no check then)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def refuse_unless_it_fits(need: int, device, replicas: int, rows: int, n_params: int, lower: str = LOWER) -> None:
    """The one refusal of a run that cannot fit: the estimate, what is free,
    and what to lower, in the caller's terms (``lower``)."""
    free = memory_available(device)
    if free is not None and need > free:
        raise ValueError(f"this run needs at least {need / 2**30:.1f} GB a round ({replicas:,} replicas x up to "
                         f"{rows:,} clients a round x {n_params:,} parameters) and {free / 2**30:.1f} GB "
                         f"are free on {torch.device(device).type}: {lower}")


def check_memory(policy: Policy) -> None:
    """Refuse, before any round, a run whose rounds cannot fit in memory,
    with the estimate and what to lower (``policy.lower``: the caller's
    terms, set by :func:`paretofl.fl.build.assemble`)."""
    eng = policy.engine
    refuse_unless_it_fits(memory_needed(policy), eng.device, eng.R, int(np.max(policy.max_cohort())),
                          eng.net.n_params, getattr(policy, "lower", LOWER))


def _freeze(new, old, active):
    """Keep the old model for replicas that did not run this round."""
    a = torch.as_tensor(active, device=new[0].device)
    return [torch.where(a.reshape(-1, *[1] * (n.ndim - 1)), n, o) for n, o in zip(new, old)]


class _Books:
    """Every replica's privacy books for one run: one ledger per (replica,
    group) (clients with budgets of their own: each group stopped at its own
    budget, a replica when any group would pass it), opened with the charges
    already ``spent`` on the same clients (a private pre-trial).  A round is
    charged before it runs: :meth:`admit` keeps the replicas that can afford
    it, :meth:`commit` books it for those that ran it."""

    def __init__(self, policy: Policy, delta: float, epsilon, spent):
        self.policy, self.R = policy, policy.engine.R
        self.G, self.names = policy.n_groups, policy.group_names()
        self.epsilon = np.tile(policy.group_budgets, self.R) if self.names is not None else epsilon
        self.ledger = policy.ledger(self.R * self.G, delta)
        if spent:
            self.ledger.commit(list(spent), self.ledger.increment(list(spent)), np.ones(self.R * self.G, dtype=bool))
        self._due = (None, None)

    def admit(self, t: int, active):
        """The replicas of ``active`` whose round ``t`` stays within their budgets."""
        ch = self.policy.charges(t)
        inc = self.ledger.increment(ch) if ch is not None else None
        self._due = (ch, inc)
        if inc is not None and self.epsilon is not None:
            ok = self.ledger.affordable(ch, inc, self.epsilon, np.repeat(active, self.G))
            active = active & ok.reshape(self.R, self.G).all(1)
        return active

    def commit(self, active) -> None:
        """Book the round :meth:`admit` priced for the replicas that ran it."""
        ch, inc = self._due
        if inc is not None:
            self.ledger.commit(ch, inc, np.repeat(active, self.G))

    def spent(self):
        """ε of each replica's ledgers, (R, G)."""
        if self.policy.fixed_epsilon() is not None:
            return np.full((self.R, self.G), self.policy.fixed_epsilon())
        return self.ledger.epsilon().reshape(self.R, self.G)

    def per_group(self, eps_r) -> dict:
        """One replica's ε per group, as history columns."""
        return {} if self.names is None else {f"epsilon_{n}": float(e) for n, e in zip(self.names, eps_r)}


def held_out(policy: Policy) -> tuple[slice, slice]:
    """The test samples a run reports on, and those the server validates on:
    a policy that adapts to a validation loss (Adap DP-FL's noise decay)
    validates on the last ``policy.val_size`` test samples (at most half of them),
    and its accuracy and loss are reported on the others only, never on the
    samples its choices were made on."""
    n, val_size = len(policy.engine.y_test), policy.val_size
    held = min(int(val_size), n // 2) if policy.needs_validation else 0
    if policy.needs_validation and held < 1:
        raise ValueError(f"{policy.name} adapts to a validation loss on held-out test samples: it needs at least 2 "
                         f"test samples and a val_size of at least 1 (has {n} and {val_size})")
    return slice(0, n - held), slice(n - held, n)


def _when(evaluate) -> tuple:
    """(every k rounds, or None; the set of rounds to evaluate after, or None) of :func:`train`'s ``evaluate``."""
    def whole(x):
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1

    if whole(evaluate):
        return int(evaluate), None
    if isinstance(evaluate, (str, bytes, dict)) or not hasattr(evaluate, "__iter__") \
            or not (rounds := list(evaluate)) or not all(whole(x) for x in rounds):
        raise ValueError(f"evaluate must be a number of rounds >= 1, or a non-empty list of rounds (integers >= 1) "
                         f"to evaluate after, got {evaluate!r}")
    return 1, {int(x) for x in rounds}


def _final(eng: Engine, glob, fresh, books: _Books, done_rounds, delta: float, test: slice = slice(None)) -> dict:
    """The run's last evaluation (on the ``test`` rows) and what it spent,
    with the noise sampler's truncation added to δ where it is not
    negligible (docs/theory.md §5.4)."""
    test_loss, acc = fresh if fresh is not None else eng.evaluate(glob, test)
    eps = books.spent()
    final = {"accuracy": acc.cpu().numpy(), "test_loss": test_loss.cpu().numpy(), "epsilon": eps.max(1),
             "rounds": done_rounds, "delta": delta}
    final["delta_float"] = np.array([float_delta(e) for e in final["epsilon"]])
    finite = final["delta_float"][np.isfinite(final["epsilon"])]
    if finite.size and finite.max() > 1e-6 * delta:
        # δ is a probability: at 1 the guarantee says nothing (an ε so large that e^ε swamps the truncation)
        final["delta"] = min(1.0, delta + float(finite.max()))
    if books.names is not None:
        final["epsilon_groups"] = {n: eps[:, g] for g, n in enumerate(books.names)}
        final["budgets"] = {n: float(e) for n, e in zip(books.names, books.policy.group_budgets)}
    return final


def train(policy: Policy, rounds: int, epsilon=None, delta: float = 1e-5, evaluate=1, progress: bool = False,
          history: History | None = None, spent=()):
    """Run up to ``rounds`` rounds for every replica; a replica stops early
    when its next round would spend more than ``epsilon`` (RDP accountant,
    charged every round before the round runs) or when its policy says so.

    The test set (less a validating policy's held-out samples:
    :func:`held_out`) is evaluated every ``evaluate`` rounds (an integer),
    or exactly after the rounds ``evaluate`` lists (a pre-trial's T grid: a
    run of T rounds is the first T rounds of a longer run with the same
    seed), and after the last.  ``history`` (a :class:`History`, e.g. one
    writing to a file, or calling back after each round) receives the rows.
    ``spent``: charges already spent on the same clients before the run (a
    private pre-trial): every ledger starts with them, so the run stops at
    the budget they share and reports the two composed.

    Returns (global models (R, ...), History, final dict of numpy arrays).
    """
    eng = policy.engine
    check_memory(policy)
    books = _Books(policy, delta, epsilon, spent)
    eval_every, eval_at = _when(evaluate)
    test, val = held_out(policy)
    glob = eng.init_global()
    active = np.ones(eng.R, dtype=bool)
    done_rounds = np.zeros(eng.R, dtype=int)
    hist = history if history is not None else History()
    cap = policy.max_rounds()
    last_acc = float("nan")
    fresh = None  # (test_loss, acc) of the current global models, if evaluated since they last changed
    # rounds done and the time left, on a terminal; a long round still shows its elapsed time
    bar = Progress(rounds, policy.name, "round", wanted=progress)
    limited = np.zeros(eng.R, dtype=bool)      # replicas stopped by the algorithm's own limit, not the budget
    t0 = time.perf_counter()
    try:
        for t in range(rounds):
            running = active.copy()
            if cap is not None:
                active &= t < np.asarray(cap)
            done = policy.finished()
            if done is not None:
                active &= ~np.asarray(done, dtype=bool)
            limited |= running & ~active
            active = books.admit(t, active)
            if not active.any():
                break
            glob = _freeze(policy.round(t, glob, active), glob, active)
            fresh = None
            books.commit(active)
            done_rounds[active] += 1
            # the policy adapts every round (ALI-DPFL's τ*, Adap DP-FL's C and σ);
            # the server's validation loss is computed only for those that use it
            val_loss = eng.evaluate(glob, val)[0].cpu().numpy() if policy.needs_validation else None
            policy.after_round(t, glob, val_loss)
            due = (t + 1) in eval_at if eval_at is not None else (t + 1) % eval_every == 0
            if due or t == rounds - 1:
                with torch.no_grad():
                    test_loss, acc = fresh = eng.evaluate(glob, test)
                    last_acc = float(acc.max())
                eps = books.spent()
                for r in range(eng.R):
                    hist.add(round=t + 1, replica=r, active=bool(active[r]), test_loss=float(test_loss[r]),
                             accuracy=float(acc[r]), epsilon=float(eps[r].max()), **books.per_group(eps[r]),
                             **policy.info_row(r))
            hist.round_done(t)
            bar.note(best_acc=f"{last_acc:.3f}", active=int(active.sum()))
            bar.update(1)
    finally:
        bar.close()
    final = _final(eng, glob, fresh, books, done_rounds, delta, test)
    final["limited"], final["limit_text"] = limited, policy.limit_text
    final["seconds"] = time.perf_counter() - t0
    return glob, hist, final
