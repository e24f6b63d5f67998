"""C and η from the public pre-trial (docs/theory.md §4.C).

A design fixes q, T and the noise; the clipping norm C and the clients'
learning rate η are left, and they move accuracy most.  :func:`tune` trains
a small (C, η) grid on the pre-trial's public share, at the design's T and
at the noise the design puts on the average of the updates, z·C/m (m = qN
the expected cohort): where the pre-trial has fewer clients than m, it runs
every client a round and scales z so that z/m is the design's.  Every
pair is a replica of one engine (three seeds each), so the grid trains as
one batch.  It records the clients' update norms before clipping (quantiles
over rounds) and returns the pair with the highest mean final accuracy
(``select="accuracy"``, the default) or the lowest mean loss (``"loss"``,
the utility of the bound (1.2)), both on a validation split: 20 % of each
public client's samples, held out of the grid's training
(:func:`paretofl.fl.build.hold_out`).  The data set's test split, the one
results are reported on, is never read, so a choice does not lean towards
the split it is scored on (the grid's ``test_loss`` and ``accuracy`` keys
are of the validation split; ``scored_on`` says so).  docs/results.md §9 measured
both against an oracle tuned on the clients' data: by accuracy the public
choice was the oracle's pair in five of six cells; by loss it favoured a
smaller η (less confident models, more errors) and trailed by 1-3.5 points
in four.

The data are the pre-trial's public share: choosing (C, η) here costs the
clients no privacy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

from ..mechanisms import get as mechanism_of
from ..progress import Progress
from ..theory.privacy import cohort_size
from .spec import MECHANISM, Spec
from .sweep import HELD_OUT, held_out

#: the default grid: clipping norms and learning rates, each a factor of about 3 apart
CLIPS = (0.03, 0.1, 0.3, 1.0, 3.0)
LRS = (0.03, 0.1, 0.3, 1.0)
#: the update-norm quantiles recorded
QUANTILES = (0.1, 0.5, 0.9)
#: what the public runs are ranked by
SELECT = ("accuracy", "loss")


def _axis(values, name: str) -> list:
    """A grid axis's values: a list (tuple, ...) of numbers, never text or a mapping read item by item."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError(f"the {name} grid must be a list of numbers, got {values!r}")
    v = list(values)
    if any(isinstance(x, bool) or not isinstance(x, Real) for x in v):
        raise ValueError(f"the {name} grid must hold numbers, got {v!r}")
    return v


def check_grid(values, name: str) -> tuple:
    """A (C, η) grid axis: a non-empty list of positive finite numbers."""
    v = [float(x) for x in _axis(values, name)]
    if not v or any(not (x > 0) or math.isinf(x) for x in v):
        raise ValueError(f"the {name} grid must hold positive finite numbers, got {list(values)}")
    return tuple(sorted(set(v)))


def check_epochs(values) -> tuple:
    """The local epochs a tuning searches: a non-empty list of integers in [1, 64]."""
    from ..theory.local_work import MAX_LOCAL_EPOCHS

    v = _axis(values, "local-epochs")
    if not v or any(not math.isfinite(x) or float(x) != int(x) for x in v) or min(v) < 1 \
            or max(v) > MAX_LOCAL_EPOCHS:
        raise ValueError(f"the local-epochs grid must hold integers in [1, {MAX_LOCAL_EPOCHS}], got {list(values)}")
    return tuple(sorted({int(x) for x in v}))


def best_pair(grid: list, by: str = "accuracy") -> dict:
    """The row of a tuning ``grid`` ranked first ``by`` "accuracy" (highest,
    lower loss breaking ties) or "loss" (lowest, higher accuracy breaking ties)."""
    if by not in SELECT:
        raise ValueError(f"select must be one of {', '.join(SELECT)}, got {by!r}")
    if by == "accuracy":
        return max(grid, key=lambda g: (g["accuracy"], -g["test_loss"]))
    return min(grid, key=lambda g: (g["test_loss"], -g["accuracy"]))


def spec_of_store(path) -> Spec:
    """The pre-trial spec a results store was written by (its data, clients,
    model, local epochs and batch)."""
    from .store import read_base

    return Spec.from_base(read_base(path), where=str(path))


def check_same_data(store, spec: Spec) -> None:
    """A tuning trains the store's pre-trial again: its user's data and model
    must be the ones the store recorded (their fingerprints, the public
    share), else it would tune on other samples than the fit measured."""
    from .store import read_base
    from .sweep import identity

    base, now = read_base(store), identity(spec)
    changed = [k.replace("_", " ") for k in ("data_fingerprint", "public_share", "model_fingerprint")
               if (k in base or k in now) and base.get(k) != now.get(k)]
    if changed:
        raise ValueError(f"the data or model behind {store} changed since its pre-trial ({', '.join(changed)}): a "
                         "tuning would train on other samples than the pre-trial did; run the pre-trial again on "
                         "this data")


def matched_noise(q: float, n_clients: int, noise_multiplier: float, pretrial_clients: int):
    """(q', z') on the pre-trial's N' clients with the design's noise on the
    average, z'/m' = z/m: the same cohort where N' >= m, else every client
    and z scaled by N'/m."""
    m = cohort_size(q, n_clients)
    if m <= pretrial_clients:
        return m / pretrial_clients, noise_multiplier
    return 1.0, noise_multiplier * pretrial_clients / m


@dataclass(frozen=True)
class Grid:
    """What a public tuning searches: the clips C and learning rates η
    (each a non-empty list of positive numbers, kept sorted), the local
    epochs (None: the design's, else the pre-trial's), every combination
    trained ``seeds`` times."""

    clips: tuple = CLIPS
    lrs: tuple = LRS
    epochs: tuple | None = None
    seeds: int = 3

    def __post_init__(self):
        object.__setattr__(self, "clips", check_grid(self.clips, "clips"))
        object.__setattr__(self, "lrs", check_grid(self.lrs, "lrs"))
        if self.epochs is not None:
            object.__setattr__(self, "epochs", check_epochs(self.epochs))
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, Integral) or not 1 <= self.seeds <= 1000:
            raise ValueError(f"the tuning's seeds must be an integer in [1, 1000], got {self.seeds!r}")


class At(NamedTuple):
    """The design a tuning trains at: its q, T and noise multiplier z for N clients."""

    q: float
    rounds: int
    noise_multiplier: float
    n_clients: int


def _check_args(seeds, rounds, chunk, select) -> None:
    if select not in SELECT:
        raise ValueError(f"select must be one of {', '.join(SELECT)}, got {select!r}")
    for name, v in (("seeds", seeds), ("rounds", rounds), ("chunk", chunk)):
        if v is None and name == "chunk":
            continue
        if isinstance(v, bool) or not isinstance(v, Integral) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _chunks(reps: list, epochs: tuple, size: int) -> list:
    """(first, last) bounds of the replicas trained together: one local-epochs
    value a chunk (the engine runs one local loop for all its replicas),
    ``size`` replicas at most."""
    bounds = []
    for k in epochs:
        ids = [i for i, r in enumerate(reps) if r[2] == k]       # contiguous: reps are ordered by K first
        bounds += [(i, min(i + size, ids[-1] + 1)) for i in range(ids[0], ids[-1] + 1, size)]
    return bounds


def _train_grid(spec: Spec, reps: list, bounds: list, rounds: int, noise: tuple, bar: Progress) -> tuple:
    """Train the grid's replicas chunk by chunk at the pre-trial's matched
    (q', σ); returns the History of all replicas and each replica's update-norm
    quantiles per recorded round."""
    from ..fl.algorithms import History, train
    from ..fl.build import assemble

    qp, sigma = noise
    # ranked on samples held out of the public share, never on the test split results report (results §9)
    setup = held_out(spec)          # the split a pre-trial scored on held-out samples scored on
    every = max(1, rounds // 40)
    norms = [[] for _ in reps]        # per replica: (round, quantiles)
    hist = History()
    # each replica's random stream is its own: the chunks change no result
    for first, last in bounds:
        part = reps[first:last]
        pol = assemble(setup, "dpfedavg", [s for *_, s in part], device=spec.device,
                       lower="lower chunk (the replicas of the grid trained together) or use a smaller model",
                       mechanism=MECHANISM, sigma=sigma,
                       clip=np.array([c for c, *_ in part]), lr=np.array([e for _, e, *_ in part]), client_rate=qp,
                       local_epochs=part[0][2], batch_size=spec.batch_size).policy

        def record(t, pol=pol, first=first, part=part):
            bar.note(replicas=f"{first + 1}-{first + len(part)} of {len(reps)}")
            bar.update(1)
            if t % every and t != rounds - 1:
                return
            c = pol.last_cohort
            b = c.bounds
            v = pol.last_norms.detach().double().cpu().numpy()
            for r in np.flatnonzero(c.counts):
                norms[first + r].append((t + 1, *np.quantile(v[b[r]:b[r + 1]], QUANTILES)))

        part_hist = History(on_round=record)
        train(pol, rounds=rounds, epsilon=None, delta=spec.delta, evaluate=[rounds], history=part_hist)
        for h in part_hist.rows:
            hist.add(**{**h, "replica": first + h["replica"]})
    return hist, norms, len(setup.data.y_test)


def _grid_rows(pairs: list, reps: list, final: dict) -> list:
    """Per (C, η, K): the mean and sd over seeds of the final loss and accuracy on the validation split."""
    grid = []
    for c, e, k in pairs:
        idx = [i for i, (cc, ee, kk, _) in enumerate(reps) if (cc, ee, kk) == (c, e, k)]
        loss = np.array([final[i]["test_loss"] for i in idx], dtype=float)
        acc = np.array([final[i]["accuracy"] for i in idx], dtype=float)
        loss = np.where(np.isfinite(loss), loss, np.inf)
        grid.append({"clip": c, "lr": e, "local_epochs": k, "test_loss": float(loss.mean()),
                     "test_loss_sd": float(loss.std(ddof=1)) if len(loss) > 1 else 0.0,
                     "accuracy": float(acc.mean()), "accuracy_sd": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0})
    return grid


def _norm_summaries(rows: list, rounds: int) -> tuple[dict, dict]:
    """The chosen pair's update-norm quantiles: the median over all recorded
    rounds, and over the first tenth of them."""
    rows = np.array(rows, dtype=float)
    early = rows[rows[:, 0] <= max(1, rounds // 10)] if len(rows) else rows

    def summary(r):
        return {f"q{int(100 * qq)}": float(np.median(r[:, 1 + j])) if len(r) else math.nan
                for j, qq in enumerate(QUANTILES)}

    return summary(rows), summary(early)


def _on_edges(best: dict, clips: tuple, lrs: tuple, epochs: tuple) -> list:
    """The axes whose chosen value lies on the grid's edge (where a wider grid may gain)."""
    edges = []
    if best["clip"] in (clips[0], clips[-1]) and len(clips) > 1:
        edges.append("clip")
    if best["lr"] in (lrs[0], lrs[-1]) and len(lrs) > 1:
        edges.append("lr")
    if best["local_epochs"] == epochs[-1] and len(epochs) > 1:
        edges.append("local_epochs")
    return edges


def tune(store, at: At, grid: Grid = Grid(), select: str = "accuracy", device: str = "cpu",
         progress: bool = False, chunk: int | None = None) -> dict:
    """Train the (C, η) ``grid`` on the public share of the pre-trial
    ``store`` at the design's (q, T, z) for N clients, ``at`` (see the
    module's docstring), ``chunk`` replicas at most at a time (default:
    all); the grid's local epochs (issue 46) default to the pre-trial's
    alone.  Returns the chosen ``clip``, ``lr`` and
    ``local_epochs`` (best by ``select``), the pre-trial's ``batch_size``, the
    ``grid`` (mean and sd over seeds of the final
    loss and accuracy on the validation split held out of the public share),
    the update ``norms`` of the chosen pair
    (quantiles over clients, median over rounds, and over the first tenth
    of the rounds), and what was run."""
    if not isinstance(grid, Grid):
        raise ValueError(f"the tuning's grid must be a paretofl.api.Grid, got {type(grid).__name__}")
    clips, lrs, seeds = grid.clips, grid.lrs, grid.seeds
    _check_args(seeds, at.rounds, chunk, select)
    rounds, seeds = int(at.rounds), int(seeds)
    spec = spec_of_store(store)
    spec.device = device
    check_same_data(store, spec)
    epochs = (spec.local_epochs,) if grid.epochs is None else grid.epochs
    qp, zp = matched_noise(at.q, at.n_clients, at.noise_multiplier, spec.clients)
    mp = qp * spec.clients
    # the σ at which the pre-trial's mechanism releases the matched noise multiplier zp on its sum
    sigma = mechanism_of(MECHANISM).sigma_for(zp, qp, spec.clients, cohort=mp) if zp > 0 else 0.0
    pairs = [(c, e, k) for k in epochs for c in clips for e in lrs]
    reps = [(c, e, k, s) for c, e, k in pairs for s in range(seeds)]
    bounds = _chunks(reps, epochs, len(reps) if chunk is None else int(chunk))
    t0 = time.perf_counter()
    # rounds of the grid's chunks done and the time left, on a terminal (paretofl.progress)
    bar = Progress(len(bounds) * rounds, "tuning C and lr on the public share", "round", wanted=progress)
    try:
        hist, norms, n_val = _train_grid(spec, reps, bounds, rounds, (qp, sigma), bar)
    finally:
        bar.close()
    final = {h["replica"]: h for h in hist.rows if h["round"] == rounds}
    grid = _grid_rows(pairs, reps, final)
    best = best_pair(grid, select)
    chosen = (best["clip"], best["lr"], best["local_epochs"])
    norm_summary, norm_early = _norm_summaries(
        [row for i, r in enumerate(reps) if r[:3] == chosen for row in norms[i]], rounds)
    return {"clip": best["clip"], "lr": best["lr"], "local_epochs": best["local_epochs"], "epochs": list(epochs),
            "batch_size": spec.batch_size,
            "grid": grid, "norms": norm_summary, "norms_early": norm_early,
            "on_grid_edge": _on_edges(best, clips, lrs, epochs),
            "store": str(store), "seeds": seeds, "rounds": rounds, "select": select,
            "scored_on": f"validation: {n_val} samples (about {HELD_OUT:.0%} of each public client's) held "
                         "out of the tuning's training", "validation_samples": n_val,
            "pretrial": {"clients": spec.clients, "q": qp, "noise_multiplier": zp,
                         "noise_on_mean": zp / mp, "model": spec.model, "dataset": spec.dataset,
                         "spec_clip": spec.clip, "spec_lr": spec.lr},
            "seconds": time.perf_counter() - t0}
