"""The shared round loop and the privacy ledger of every replica."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ...theory.privacy import DEFAULT_ORDERS, rdp_subsampled_gaussian, rdp_to_epsilon
from ..engine import Engine


class Ledger:
    """One RDP accountant per replica (vectorised): charges (σ, q, steps)
    per round, and says which replicas can afford a round."""

    def __init__(self, n_replicas: int, delta: float, orders=DEFAULT_ORDERS):
        self.orders = np.asarray(orders)
        self.delta = delta
        self.rdp = np.zeros((n_replicas, len(self.orders)))
        self._cache = {}

    def _curve(self, z, q):
        key = (round(float(z), 12), round(float(q), 12))
        if key not in self._cache:
            # z = 0 is a run without noise (the non-private reference of a
            # pre-trial): no privacy at all, infinite ε
            self._cache[key] = (np.full(len(self.orders), np.inf) if z == 0
                                else rdp_subsampled_gaussian(float(q), float(z), self.orders))
        return self._cache[key]

    def increment(self, charges) -> np.ndarray:
        """charges: list of (z (R,), q (R,), steps (R,)) -> RDP increment (R, n_orders)."""
        inc = np.zeros_like(self.rdp)
        for z, q, s in charges:
            for r in range(self.rdp.shape[0]):
                if s[r] > 0:
                    inc[r] += s[r] * self._curve(z[r], q[r])
        return inc

    def epsilon(self, rdp=None) -> np.ndarray:
        rdp = self.rdp if rdp is None else rdp
        return np.array([rdp_to_epsilon(self.orders, row, self.delta)[0] if row.any() else 0.0 for row in rdp])


@dataclass
class History:
    """Per-round records, one row per (round, replica)."""

    rows: list = field(default_factory=list)

    def add(self, **kw):
        self.rows.append(kw)

    def to_csv(self, path):
        import csv

        if not self.rows:
            return
        keys = list(self.rows[0].keys())
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(self.rows)


class Policy:
    """Base class: subclasses set what a round does.

    ``charges(t)`` returns what the accountant must be charged for round t
    (list of (noise multiplier (R,), sampling rate (R,), steps (R,))), or None
    when the policy accounts for itself (NbAFL: fixed ε by calibration).
    ``round(t, glob, active)`` returns the new global models (R, ...).
    ``after_round`` adapts the policy's settings from what was observed.
    """

    name = "policy"
    needs_validation = False  # does after_round use the server's validation loss?

    def __init__(self, engine: Engine):
        self.engine = engine

    def charges(self, t):
        return None

    def round(self, t, glob, active):
        raise NotImplementedError

    def after_round(self, t, glob, val_loss):
        pass

    def max_rounds(self):
        return None

    def info_row(self, r) -> dict:
        """Extra per-replica columns for the history (σ, C, τ …)."""
        return {}

    def fixed_epsilon(self):
        return None


def _freeze(new, old, active):
    """Keep the old model for replicas that did not run this round."""
    a = torch.as_tensor(active, device=new[0].device)
    return [torch.where(a.reshape(-1, *[1] * (n.ndim - 1)), n, o) for n, o in zip(new, old)]


def train(policy: Policy, rounds: int, epsilon=None, delta: float = 1e-5, eval_every: int = 1,
          progress: bool = False, val_size: int = 2000, eval_at=None, on_round=None):
    """Run up to ``rounds`` rounds for every replica; a replica stops early
    when its next round would spend more than ``epsilon`` (RDP accountant,
    charged every round before the round runs) or when its policy says so.

    The test set is evaluated every ``eval_every`` rounds, or exactly after
    the rounds listed in ``eval_at`` (a pre-trial's T grid: a run of T rounds
    is the first T rounds of a longer run with the same seed).  ``on_round(t)``
    is called after each round (progress of an outer sweep).

    Returns (global models (R, ...), History, final dict of numpy arrays).
    """
    eng = policy.engine
    R = eng.R
    ledger = Ledger(R, delta)
    glob = eng.init_global()
    active = np.ones(R, dtype=bool)
    done_rounds = np.zeros(R, dtype=int)
    hist = History()
    cap = policy.max_rounds()
    eval_at = None if eval_at is None else {int(x) for x in eval_at}
    bar, last_acc = None, float("nan")
    fresh = None  # (test_loss, acc) of the current global models, if evaluated since they last changed
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=rounds, desc=policy.name, unit="round", leave=False)
    t0 = time.perf_counter()
    for t in range(rounds):
        if cap is not None:
            active &= t < np.asarray(cap)
        ch = policy.charges(t)
        inc = ledger.increment(ch) if ch is not None else None
        if inc is not None and epsilon is not None:
            active &= ledger.epsilon(ledger.rdp + inc) <= epsilon
        if not active.any():
            break
        new = policy.round(t, glob, active)
        glob = _freeze(new, glob, active)
        fresh = None
        if inc is not None:
            ledger.rdp[active] += inc[active]
        done_rounds[active] += 1
        last = t == rounds - 1
        # the policy adapts every round (ALI-DPFL's τ*, Adap DP-FL's C and σ);
        # the server's validation loss is computed only for those that use it
        val_loss = eng.evaluate(glob, val_size)[0].cpu().numpy() if policy.needs_validation else None
        policy.after_round(t, glob, val_loss)
        due = (t + 1) in eval_at if eval_at is not None else (t + 1) % eval_every == 0
        if due or last:
            with torch.no_grad():
                test_loss, acc = fresh = eng.evaluate(glob)
                last_acc = float(acc.max())
            eps = ledger.epsilon() if policy.fixed_epsilon() is None else np.full(R, policy.fixed_epsilon())
            for r in range(R):
                hist.add(round=t + 1, replica=r, active=bool(active[r]), test_loss=float(test_loss[r]),
                         accuracy=float(acc[r]), epsilon=float(eps[r]), **policy.info_row(r))
        if on_round is not None:
            on_round(t)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(best_acc=f"{last_acc:.3f}", active=int(active.sum()))
    if bar is not None:
        bar.close()
    test_loss, acc = fresh if fresh is not None else eng.evaluate(glob)
    eps = ledger.epsilon() if policy.fixed_epsilon() is None else np.full(R, policy.fixed_epsilon())
    final = {"accuracy": acc.cpu().numpy(), "test_loss": test_loss.cpu().numpy(), "epsilon": eps,
             "rounds": done_rounds, "delta": delta, "seconds": time.perf_counter() - t0}
    return glob, hist, final


