"""DP-FedAvg under each of paretofl's mechanisms (docs/theory.md §5).

* ``sample`` -- "FedAvg + DP" of ALI-DPFL, Algorithm 1: every selected
  client runs τ DP-SGD steps (Poisson batches at rate q_b, per-sample
  clipping C, noise N(0, σ²C²) on the clipped sum, divided by a public
  number: q_b times the client's declared size, or ``batch_divisor``); the
  server averages with weights from the declared sizes.  Charged (q_b, σ)
  per local step, every round, selected or not (conservative).
* ``client-aggregate`` -- client-level DP-FedAvg of Gu et al. (after McMahan
  et al. 2018): clients join with probability q, run local epochs of plain
  SGD, clip their update to C; the released sum carries N(0, qN·σ²C²)
  whatever the cohort's size — each selected client adds N(0, q·σ²C²) (its
  share of the total over N clients) and the server adds the rest,
  N(0, (N - |S|)·q·σ²C²) — and is divided by qN.  Charged: rate q, noise
  multiplier σ√(qN), per round.
* ``client-local`` -- the same clients, each adding N(0, σ²C²) to its
  clipped update, which the server receives with its sender; no top-up.
  Charged: a Gaussian of noise multiplier σ at each participation
  (participations seen).
"""

from __future__ import annotations

import numpy as np
import torch

from ...theory.privacy import mechanism_charge
from ..engine import AdamState
from ..options import DPFedAvgConfig
from .base import Policy


class DPFedAvg(Policy):
    name = "dpfedavg"
    Config = DPFedAvgConfig

    def __init__(self, engine, config=None, *, sizes=None, **kw):
        super().__init__(engine, config, **kw)
        c = self.config
        N = engine.N
        self.mechanism = c.mechanism
        self.sigma, self.clip, self.lr = self.vec(c.sigma), self.vec(c.clip), self.vec(c.lr)
        self.batch_rate, self.client_rate = self.vec(c.batch_rate), self.vec(c.client_rate)
        self.tau = self.vec(c.local_steps, int)
        self.local_epochs, self.batch_size = int(c.local_epochs), int(c.batch_size)
        self.optimizer, self.adam = c.optimizer, None
        self.batch_divisor = None if c.batch_divisor is None else self.vec(c.batch_divisor)
        # the clients' declared data set sizes: public numbers of the mechanism
        # (DP-SGD's divisor, the aggregation weights), never recounted from
        # the data, so that adding or removing a sample changes no scale
        self.sizes = np.asarray(engine.client_n.cpu().numpy() if sizes is None else sizes, dtype=float)
        if self.sizes.shape != (N,) or np.any(~(self.sizes > 0)):
            raise ValueError(f"sizes must list a positive declared size for each of the {N} clients")
        self.weights = torch.as_tensor(self.sizes / self.sizes.sum(), dtype=engine.dtype, device=engine.device)
        if self.mechanism == "client-aggregate" and np.any(self.client_rate * N < 1 - 1e-9):
            raise ValueError(f"the client-aggregate mechanism needs client_rate * clients >= 1 (here "
                             f"{float(np.min(self.client_rate * N)):g}): raise client_rate or use client-local")

    # ------------------------------------------------------------- privacy
    def steps_this_round(self):
        return self.tau

    def charges(self, t):
        if self.mechanism == "sample":
            return [("poisson", self.sigma, self.batch_rate, self.steps_this_round())]
        ones = np.ones(self.engine.R, dtype=int)
        N = self.engine.N
        z = np.array([0.0 if s == 0 else mechanism_charge(self.mechanism, q, s, N).noise_multiplier
                      for s, q in zip(self.sigma, self.client_rate)])
        sampling = "poisson" if self.mechanism == "client-aggregate" else "attributed"
        return [(sampling, z, self.client_rate, ones)]

    # ------------------------------------------------------------- a round
    def round(self, t, glob, active):
        if self.mechanism == "sample":
            return self._sample_round(glob, active)
        return self._client_round(glob, active)

    def _selection(self, active):
        """This round's cohort: each client of an active replica joins with
        probability q (Poisson), drawn from N uniforms a replica."""
        eng = self.engine
        if np.all(self.client_rate >= 1):
            sel = torch.ones(eng.R, eng.N, dtype=torch.bool, device=eng.device)
        else:
            sel = eng.sample_clients(torch.as_tensor(self.client_rate, device=eng.device))
        return eng.cohort(sel & torch.as_tensor(active, device=eng.device)[:, None])

    def max_cohort(self):
        """The most rows a round of each replica is expected to hold (R,):
        qN plus six standard deviations of the Poisson cohort's size."""
        qn = np.minimum(self.client_rate, 1.0) * self.engine.N
        return np.minimum(self.engine.N, np.ceil(qn + 6 * np.sqrt(qn * (1 - np.minimum(self.client_rate, 1.0)))
                                                  + 1)).astype(int)

    def max_batch(self):
        if self.mechanism == "sample":
            m = float(np.max(np.minimum(self.batch_rate, 1.0))) * self.engine.n_max
            return int(min(self.engine.n_max, m + 6 * m ** 0.5 + 16))
        return min(self.batch_size, self.engine.n_max)

    def state_bytes(self):
        """Adam's two moments of every client that trains: over T rounds at
        rate q about N(1 - (1 - q)^T) clients a replica (all N at most)."""
        if self.optimizer != "adam":
            return 0
        eng = self.engine
        q = np.minimum(self.client_rate, 1.0)
        seen = eng.N if self.rounds is None else np.minimum(eng.N, np.ceil(eng.N * (1 - (1 - q) ** self.rounds)
                                                                          * 1.1 + 10))
        return int(2 * np.sum(seen) * eng.net.n_params * (torch.finfo(eng.dtype).bits // 8)) if np.ndim(seen) \
            else int(2 * eng.R * seen * eng.net.n_params * (torch.finfo(eng.dtype).bits // 8))

    def divisor(self, c):
        """DP-SGD's divisor of each row's noised sum (K,): a public number."""
        eng = self.engine
        if self.batch_divisor is not None:
            return eng.rows(self.batch_divisor, c)
        n = torch.as_tensor(self.sizes, dtype=eng.dtype, device=eng.device)[c.client]
        return eng.rows(self.batch_rate, c) * n

    def _sample_round(self, glob, active):
        eng = self.engine
        c = self._selection(active)
        steps = torch.as_tensor(self.steps_this_round(), device=eng.device)[c.replica]
        params = eng.broadcast(glob, c)
        new, stats = eng.local_steps(params, steps, eng.rows(self.lr, c), batch_rate=eng.rows(self.batch_rate, c),
                                     sigma=eng.rows(self.sigma, c), clip=eng.rows(self.clip, c),
                                     batch_divisor=self.divisor(c), adam=self._adam_state(params), cohort=c)
        self.last_stats, self.last_cohort = stats, c
        w = self.weights[c.client]
        w = w / eng.replica_sum(w, c).clamp(min=1e-12)[c.replica]
        agg = eng.aggregate(eng.flat(new), w, c)
        out = eng.unflat(agg, glob)
        # replicas with no selected client keep their model
        none = torch.as_tensor(c.counts == 0, device=eng.device)
        return [torch.where(none.reshape(-1, *[1] * (o.ndim - 1)), g, o) for o, g in zip(out, glob)]

    def _adam_state(self, params):
        if self.optimizer == "adam" and self.adam is None:
            self.adam = AdamState(params, self.engine.M)
        return self.adam

    def _client_round(self, glob, active):
        c = self._selection(active)
        self.last_cohort = c
        return self._release(glob, self._client_updates(glob, c), c)

    def _client_updates(self, glob, c):
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

    def noise_stds(self, c):
        """(each client's noise std (R,), the server's top-up std (R,)) per
        coordinate, in units of the update (docs/theory.md §5): client-aggregate
        releases N(0, qN σ²C²) in total, whatever |S| is — each of the
        selected clients adds its share qσ²C² of that total over the N
        clients, the server the rest (N - |S|)qσ²C² >= 0; client-local has
        each client add σ²C² and no top-up."""
        eng = self.engine
        sc = torch.as_tensor(self.sigma * self.clip, dtype=eng.dtype, device=eng.device)
        if self.mechanism == "client-local":
            return sc, torch.zeros_like(sc)
        q = torch.as_tensor(self.client_rate, dtype=eng.dtype, device=eng.device)
        rest = (eng.N - torch.as_tensor(c.counts, dtype=eng.dtype, device=eng.device)).clamp(min=0)
        return sc * q.sqrt(), sc * (q * rest).sqrt()

    def privatise(self, update, c):
        """Each cohort client's noisy clipped update (K, d) and the server's
        top-up (R, d): what the mechanism adds before anything leaves a
        client or the server."""
        eng = self.engine
        delta, _ = eng.clip_rows(update, eng.rows(self.clip, c))
        client_std, top_std = self.noise_stds(c)
        noisy = delta + eng.noise_like([delta], c)[0] * client_std[c.replica][:, None]
        top = top_std[:, None] * eng.normal((delta.shape[1],))
        return noisy, top

    def _release(self, glob, update, c):
        """The privatisation: clip each update to C, add the clients' noise,
        sum the cohort's, add the server's top-up, divide by qN (a public
        number).  Everything the accountant's charge covers happens here
        (the audit drives this code with canaries)."""
        eng = self.engine
        noisy, top = self.privatise(update, c)
        total = eng.aggregate(noisy, torch.ones(c.size, device=eng.device), c) + top
        qn = torch.as_tensor(self.client_rate * eng.N, dtype=eng.dtype, device=eng.device)
        return eng.unflat(eng.flat(glob) + total / qn[:, None], glob)

    def info_row(self, r):
        return {"sigma": float(self.sigma[r]), "clip": float(self.clip[r]), "tau": int(self.tau[r])}
