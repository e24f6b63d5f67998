"""DP-FedAvg: FedAvg on the engine wrapped by a mechanism (docs/theory.md §5).

Each round a cohort of clients trains locally from the global model and
the server averages what they send.  What makes it private is the
mechanism (``mechanism``, one of :mod:`paretofl.mechanisms`), applied by its
release (:mod:`paretofl.fl.release`): who is selected (Poisson, or a fixed m
of N), where the noise goes (on the sum, on each update, inside DP-SGD) and
what each round is charged all come from the mechanism object; this policy
trains the clients.

* client-level mechanisms (client-aggregate, client-local, flower,
  flower-accounted): each selected client runs local epochs of plain SGD;
  its update goes to the release (clipped to C, noised, averaged);
* ``sample``: each selected client runs τ DP-SGD steps (Poisson batches at
  rate q_b, per-sample clipping, noise on each clipped sum, divided by a
  public number) — "FedAvg + DP" of ALI-DPFL, Algorithm 1; the release
  averages the clients' models with their declared sizes' weights.
"""

from __future__ import annotations

import numpy as np
import torch

from ...mechanisms import get as mechanism_of
from ..engine import AdamState
from ..options import DPFedAvgConfig
from ..release import cohort_bound, make_release
from .base import Policy


def group_labels(budgets) -> list[str]:
    """Names for groups of clients by their budgets: ``%g`` where that tells
    them apart, else the shortest text that reads back to each number (two
    budgets that print alike must not share a history column)."""
    names = [f"{e:g}" for e in budgets]
    if len(set(names)) < len(names):
        names = [repr(float(e)) for e in budgets]
    return names


class DPFedAvg(Policy):
    name = "dpfedavg"
    Config = DPFedAvgConfig

    def __init__(self, engine, config=None, *, sizes=None, groups=None, **kw):
        super().__init__(engine, config, **kw)
        c = self.config
        cls = type(mechanism_of(c.mechanism))
        self.mech = cls(**{k: getattr(c, k) for k in cls.constructor_options})
        self.mechanism = c.mechanism
        self.lr = self.vec(c.lr)
        self.tau = self.vec(c.local_steps, int)
        self.local_epochs, self.batch_size = int(c.local_epochs), int(c.batch_size)
        self.optimizer, self.adam = c.optimizer, None
        # DP-SGD's divisor and weights are the clients' declared sizes: a number, or the data's own counts
        # ("data", or none given to this constructor; paretofl.fl.build.assemble, the library's one assembly,
        # refuses a run that declares none)
        ds = getattr(c, "declared_sizes", None)
        if self.mech.noise_on == "gradient" and sizes is None and ds not in (None, "data"):
            sizes = np.full(engine.N, float(ds))
        settings = dict(sigma=c.sigma, clip=c.clip, client_rate=c.client_rate, groups=groups, sizes=sizes)
        if self.mech.noise_on == "gradient":
            settings.update(batch_rate=c.batch_rate, batch_divisor=c.batch_divisor)
        self.release = make_release(self.mech, engine, **settings)

    # ------------------------------------------------- the release's settings
    @property
    def sigma(self) -> np.ndarray:
        return self.release.sigma

    @sigma.setter
    def sigma(self, v):
        self.release.sigma = np.asarray(v, dtype=float)

    @property
    def clip(self) -> np.ndarray:
        return self.release.clip

    @clip.setter
    def clip(self, v):
        self.release.clip = np.asarray(v, dtype=float)

    @property
    def client_rate(self) -> np.ndarray:
        return self.release.client_rate

    @property
    def batch_rate(self) -> np.ndarray:
        return self.release.batch_rate

    @property
    def batch_divisor(self):
        return self.release.batch_divisor

    @property
    def sizes(self) -> np.ndarray:
        return self.release.sizes

    @property
    def weights(self):
        return self.release.weights

    @property
    def groups(self):
        return self.release.groups

    @property
    def group_budgets(self):
        return self.release.group_budgets

    @property
    def n_groups(self) -> int:
        return self.release.n_groups

    @property
    def last_norms(self):
        """The cohort's update norms before clipping, last round (client-level)."""
        return self.release.last_norms

    def group_names(self):
        """The groups' names in the history (ε per group): by budget."""
        return None if self.groups is None else group_labels(self.group_budgets)

    # ------------------------------------------------------------- privacy
    def steps_this_round(self):
        return self.tau

    def charges(self, t):
        return self.release.charges(self.steps_this_round())

    # ------------------------------------------------------------- a round
    def round(self, t, glob, active):
        c = self.release.select(active)
        self.last_cohort = c
        if self.mech.noise_on == "gradient":
            eng = self.engine
            steps = torch.as_tensor(self.steps_this_round(), device=eng.device)[c.replica]
            params = eng.broadcast(glob, c)
            new, self.last_stats = eng.local_steps(params, steps, eng.rows(self.lr, c), adam=self._adam_state(params),
                                                   cohort=c, dpsgd=self.release.local_noise(c))
            return self.release.release(glob, new, c, active)
        return self.release.release(glob, self.local_updates(glob, c), c, active)

    def local_updates(self, glob, c):
        """Local epochs of plain SGD on every client of the cohort: the
        updates Δ_i = w_i - w as a flat (K, d) tensor, not yet clipped."""
        eng = self.engine
        n_i = eng.client_n[c.client]
        steps = self.local_epochs * torch.ceil(n_i / self.batch_size).long()
        params = eng.broadcast(glob, c)
        new, stats = eng.local_steps(params, steps, eng.rows(self.lr, c), batch_size=self.batch_size,
                                     adam=self._adam_state(params), cohort=c)
        self.last_stats = stats
        return eng.flat(new) - eng.flat(params)

    def _adam_state(self, params):
        if self.optimizer == "adam" and self.adam is None:
            self.adam = AdamState(params, self.engine.M)
        return self.adam

    # ------------------------------------------------------------- sizes
    def max_cohort(self):
        return self.release.max_cohort()

    @classmethod
    def size_before(cls, config, n_clients, n_max, groups=None):
        rates = groups.client_rates() if groups is not None else float(np.max(config.client_rate))
        rows = cohort_bound(rates, n_clients)
        if mechanism_of(config.mechanism).noise_on == "gradient":
            m = float(np.max(np.minimum(config.batch_rate, 1.0))) * n_max
            return rows, int(min(n_max, m + 6 * m ** 0.5 + 16))
        return rows, min(int(config.batch_size), n_max)

    def max_batch(self):
        if self.mech.noise_on == "gradient":
            m = float(np.max(np.minimum(self.batch_rate, 1.0))) * self.engine.n_max
            return int(min(self.engine.n_max, m + 6 * m ** 0.5 + 16))
        return min(self.batch_size, self.engine.n_max)

    def state_bytes(self):
        """Adam's two moments of every client that trains (over T rounds at
        rate q about N(1 - (1 - q)^T) clients a replica, all N at most), and
        what the release keeps (correlated noise's past draws)."""
        if self.optimizer != "adam":
            return self.release.state_bytes()
        eng = self.engine
        seen = np.full(eng.R, eng.N, dtype=float)
        if self.rounds is not None:
            q = np.minimum(self.client_rate, 1.0)
            seen = np.minimum(seen, np.ceil(eng.N * (1 - (1 - q) ** self.rounds) * 1.1 + 10))
        return int(2 * seen.sum() * eng.net.n_params * (torch.finfo(eng.dtype).bits // 8)) + self.release.state_bytes()

    def info_row(self, r):
        return {"sigma": float(self.sigma[r]), "clip": float(self.clip[r]), "tau": int(self.tau[r])}
