"""DP-FedAvg, two ways.

* ``mechanism="sample"`` — "FedAvg + DP" of paper 002, Algorithm 1: every
  (selected) client runs τ DP-SGD steps (Poisson batches at rate q_b,
  per-sample clipping C, noise σC), the server takes the p_i-weighted
  average.  Charged (σ, q_b) × τ per round (a client is charged every round,
  selected or not: conservative).
* ``mechanism="client"`` — client-level DP-FedAvg of paper 001 (after
  McMahan et al. 2018): clients are selected with probability q, run local
  epochs of plain SGD, clip their update to C and add N(0, σ²C²); the server
  sums, tops the noise up to N(0, qN·σ²C²) when fewer than qN clients came
  (theory §5), and divides by qN.  Charged (q, σ√(qN)) per round (aggregate
  view) or (q, σ) (``view="local"``).
"""

from __future__ import annotations

import numpy as np
import torch

from ..engine import AdamState
from .base import Policy


class DPFedAvg(Policy):
    name = "dpfedavg"

    def __init__(self, engine, mechanism="sample", sigma=1.0, clip=1.0, lr=0.5, batch_rate=0.015,
                 local_steps=1, client_rate=1.0, local_epochs=1, batch_size=64, view="aggregate",
                 batch_divisor=None, optimizer="sgd"):
        super().__init__(engine)
        R = engine.R
        vec = lambda v: np.broadcast_to(np.asarray(v, dtype=float), (R,)).copy()  # noqa: E731
        if mechanism not in ("sample", "client"):
            raise ValueError(f"mechanism must be 'sample' or 'client', got {mechanism!r}")
        if view not in ("aggregate", "local"):
            raise ValueError(f"view must be 'aggregate' or 'local', got {view!r}")
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
        self.mechanism, self.view = mechanism, view
        # clients' optimizer: SGD, or Adam whose moments each client keeps
        # across rounds (paper 003 trains its clients with Adam)
        self.optimizer, self.adam = optimizer, None
        self.sigma, self.clip, self.lr = vec(sigma), vec(clip), vec(lr)
        self.batch_rate, self.client_rate = vec(batch_rate), vec(client_rate)
        self.tau = vec(local_steps).astype(int)
        self.local_epochs, self.batch_size = int(local_epochs), int(batch_size)
        # DP-SGD's divisor of the noised sum: the expected batch q_b|D_i|
        # (None), or a fixed number (paper 002's code divides by 64)
        self.batch_divisor = None if batch_divisor is None else vec(batch_divisor)
        if self.batch_divisor is not None and np.any(~(self.batch_divisor > 0)):
            raise ValueError(f"batch divisor must be > 0, got {self.batch_divisor}")
        if self.batch_divisor is not None and mechanism != "sample":
            raise ValueError("a batch divisor applies to DP-SGD clients (mechanism 'sample'); "
                             "client-level clients run plain SGD on batches of batch_size")
        if np.any(self.tau < 1) or self.local_epochs < 1 or self.batch_size < 1:
            raise ValueError("local steps, local epochs and batch size must be at least 1")
        if np.any(~(self.sigma >= 0)) or np.any(np.isinf(self.sigma)):
            raise ValueError(f"sigma must be finite and >= 0 (0: no noise, no privacy), got {self.sigma}")
        for name, v, lo, hi in (("clip", self.clip, 0, np.inf),
                                ("lr", self.lr, 0, np.inf), ("batch rate", self.batch_rate, 0, 1),
                                ("client rate", self.client_rate, 0, 1)):
            if np.any(~(v > lo)) or np.any(v > hi):
                raise ValueError(f"{name} must lie in ({lo}, {hi}], got {v}")
        if mechanism == "client" and view == "aggregate" and np.any(self.client_rate * engine.N < 1):
            raise ValueError("the aggregate view needs client rate q with q*N >= 1")

    # ------------------------------------------------------------- privacy
    def steps_this_round(self):
        return self.tau

    def charges(self, t):
        if self.mechanism == "sample":
            return [(self.sigma, self.batch_rate, self.steps_this_round())]
        z = self.sigma * np.sqrt(self.client_rate * self.engine.N) if self.view == "aggregate" else self.sigma
        return [(z, self.client_rate, np.ones(self.engine.R, dtype=int))]

    # ------------------------------------------------------------- a round
    def round(self, t, glob, active):
        if self.mechanism == "sample":
            return self._sample_round(glob, active)
        return self._client_round(glob, active)

    def _selection(self, active):
        eng = self.engine
        if np.all(self.client_rate >= 1):
            sel = torch.ones(eng.R, eng.N, dtype=torch.bool, device=eng.device)
        else:
            sel = eng.sample_clients(torch.as_tensor(self.client_rate, device=eng.device))
        return sel & torch.as_tensor(active, device=eng.device)[:, None]

    def _sample_round(self, glob, active):
        eng = self.engine
        sel = self._selection(active)
        steps = torch.as_tensor(self.steps_this_round(), device=eng.device).repeat_interleave(eng.N)
        steps = steps * sel.reshape(-1)
        params = eng.broadcast(glob)
        new, stats = eng.local_steps(params, steps, eng.vec(self.lr), batch_rate=eng.vec(self.batch_rate),
                                     sigma=eng.vec(self.sigma), clip=eng.vec(self.clip),
                                     batch_divisor=None if self.batch_divisor is None else eng.vec(self.batch_divisor),
                                     adam=self._adam_state(params))
        self.last_stats = stats
        w = eng.p.reshape(1, -1) * sel
        w = w / w.sum(1, keepdim=True).clamp(min=1e-12)
        agg = eng.aggregate(eng.flat(new), w)
        out = eng.unflat(agg, glob)
        # replicas with no selected client keep their model
        none = sel.sum(1) == 0
        return [torch.where(none.reshape(-1, *[1] * (o.ndim - 1)), g, o) for o, g in zip(out, glob)]

    def _adam_state(self, params):
        if self.optimizer == "adam" and self.adam is None:
            self.adam = AdamState.zeros(params)
        return self.adam

    def _client_round(self, glob, active):
        sel = self._selection(active)
        self.last_cohort = sel.sum(1).cpu().numpy()
        return self._release(glob, self._client_updates(glob, sel), sel)

    def _client_updates(self, glob, sel):
        """Local epochs of plain SGD on every selected client: the updates
        Δ_i = w_i - w as a flat (M, d) tensor, not yet clipped."""
        eng = self.engine
        n_i = eng.client_n.repeat(eng.R)
        steps = self.local_epochs * torch.ceil(n_i / self.batch_size).long() * sel.reshape(-1)
        params = eng.broadcast(glob)
        new, stats = eng.local_steps(params, steps, eng.vec(self.lr), batch_size=self.batch_size,
                                     adam=self._adam_state(params))
        self.last_stats = stats
        return eng.flat(new) - eng.flat(params)

    def _release(self, glob, update, sel):
        """The privatisation: clip each update to C, add each client's
        N(0, σ²C²), sum the selected, top the noise up to N(0, qNσ²C²) in the
        aggregate view, divide by qN.  Everything the accountant's charge
        covers happens here (the audit drives this code with canaries)."""
        eng = self.engine
        delta, _ = eng.clip_rows(update, eng.vec(self.clip))
        std = eng.vec(self.sigma * self.clip)
        noise = eng.noise_like([delta])[0] * std[:, None]
        contrib = (delta + noise) * sel.reshape(-1, 1)
        qn = torch.as_tensor(self.client_rate * eng.N, dtype=eng.dtype, device=eng.device)
        total = eng.aggregate(contrib, torch.ones(eng.R, eng.N, device=eng.device))
        if self.view == "aggregate":
            # top-up: the released sum carries at least N(0, qN σ²C²)
            missing = torch.clamp(qn - sel.sum(1).to(eng.dtype), min=0)
            top = torch.sqrt(missing) * torch.as_tensor(self.sigma * self.clip, dtype=eng.dtype, device=eng.device)
            total = total + top[:, None] * eng.normal((total.shape[1],))
        avg = total / qn[:, None]
        return eng.unflat(eng.flat(glob) + avg, glob)

    def info_row(self, r):
        return {"sigma": float(self.sigma[r]), "clip": float(self.clip[r]), "tau": int(self.tau[r])}
