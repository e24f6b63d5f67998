"""The ledger: many accountants side by side, fed :class:`Charge`s.

One ledger row per accountant: a replica of a training, or a (replica,
group) pair where clients have budgets of their own.  A round's charges are
a list of :class:`~paretofl.theory.privacy.Charge` whose values are scalars
or one per row.  The stop rule prices a round on the grid of orders first
(an upper bound on the reported ε: conservative and fast) and asks a row's
own accountant, orders searched, only where the grid refuses it; what is
reported is each row's accountant with its orders searched.

numpy only: the trainer, the pre-trials and the audit all keep their books
here.
"""

from __future__ import annotations

import math

import numpy as np

from .privacy import DEFAULT_ORDERS, Charge, RDPAccountant, epsilon_on_grid, rdp_curve

__all__ = ["Ledger"]


class Ledger:
    """``rows`` accountants at one δ (see the module docstring)."""

    def __init__(self, rows: int, delta: float, orders=DEFAULT_ORDERS, fixed: bool = False):
        self.orders = np.asarray(orders)
        #: report on the orders' grid, unrefined (an outside accountant's: :func:`~.privacy.account`)
        self.fixed = bool(fixed)
        self.delta = delta
        self.rdp = np.zeros((rows, len(self.orders)))
        self.accountants = [RDPAccountant(orders=tuple(orders)) for _ in range(rows)]
        self.unlimited = np.zeros(rows, dtype=bool)  # ran without noise: ε = inf
        self._cache = {}

    @property
    def rows(self) -> int:
        return self.rdp.shape[0]

    def _columns(self, charge: Charge):
        """(noise multiplier, rate, steps) of every row, as arrays."""
        n = self.rows
        col = lambda v, dtype: np.broadcast_to(np.asarray(v, dtype=dtype), (n,))  # noqa: E731
        return col(charge.noise_multiplier, float), col(charge.rate, float), col(charge.steps, int)

    def _curve(self, sampling, z, q):
        key = (sampling, round(float(z), 12), round(float(q), 12))
        if key not in self._cache:
            self._cache[key] = rdp_curve(sampling, float(q), float(z), self.orders)
        return self._cache[key]

    def increment(self, charges: list[Charge]) -> np.ndarray:
        """The RDP a round's ``charges`` add to each row, (rows, orders)."""
        inc = np.zeros_like(self.rdp)
        for ch in charges:
            z, q, s = self._columns(ch)
            for r in range(self.rows):
                if s[r] > 0:
                    # z = 0 is a run without noise (the non-private reference of a pre-trial)
                    inc[r] += np.inf if z[r] == 0 else s[r] * self._curve(ch.sampling, z[r], q[r])
        return inc

    def commit(self, charges: list[Charge], inc, active):
        """Book the round (priced as ``inc``) on the ``active`` rows."""
        self.rdp[active] += inc[active]
        for ch in charges:
            z, q, s = self._columns(ch)
            for r in np.flatnonzero(active):
                if s[r] > 0:
                    if z[r] == 0:
                        self.unlimited[r] = True
                    else:
                        self.accountants[r].step(float(z[r]), float(q[r]), int(s[r]), ch.sampling)

    def affordable(self, charges: list[Charge], inc, epsilon, active=None) -> np.ndarray:
        """Which rows can pay for a round (``charges``, priced as ``inc``)
        within ``epsilon`` (one budget, or one per row): on the order grid
        first; a row the grid refuses is asked again with its orders
        searched (the ε reported), so a run stops where the reported ε would
        pass the budget."""
        epsilon = np.broadcast_to(np.asarray(epsilon, dtype=float), (self.rows,))
        ok = self.grid_epsilon(self.rdp + inc) <= epsilon
        if self.fixed:                       # the grid's ε is the one reported
            return ok
        ask = ~ok & ~self.unlimited & (True if active is None else np.asarray(active, dtype=bool))
        cols = [(ch.sampling, *self._columns(ch)) for ch in charges]
        for r in np.flatnonzero(ask):
            trial = RDPAccountant(orders=self.accountants[r].orders, history=list(self.accountants[r].history))
            free = True
            for sampling, z, q, s in cols:
                if s[r] > 0:
                    if z[r] == 0:
                        free = False
                        break
                    trial.step(float(z[r]), float(q[r]), int(s[r]), sampling)
            ok[r] = free and trial.get_epsilon(self.delta) <= epsilon[r]
        return ok

    def grid_epsilon(self, rdp=None) -> np.ndarray:
        """ε on the grid of orders (an upper bound on the reported one)."""
        rdp = self.rdp if rdp is None else rdp
        return np.where(np.any(rdp != 0, axis=1), epsilon_on_grid(rdp, self.delta, self.orders), 0.0)

    def epsilon(self) -> np.ndarray:
        """Each row's ε, its orders searched (what is reported), or on the grid where it is fixed."""
        if self.fixed:
            return np.where(self.unlimited, math.inf, self.grid_epsilon())
        return np.array([math.inf if u else a.get_epsilon(self.delta)
                         for a, u in zip(self.accountants, self.unlimited)])
