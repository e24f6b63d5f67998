"""Adap DP-FL (paper 003): DP-SGD clients with adaptive clipping and
adaptive noise.

* clipping: C_{t+1} = α · (DP mean of last round's clipped per-sample
  gradient norms) (Eq. 6–8).  Each client releases the sum of its clipped
  norms over its last batch with Gaussian noise σ_t·C_t (sensitivity C_t);
  paretofl charges that release to the accountant too (one more (σ_t, q_b)
  step a round), so the reported ε covers it.
* noise: σ_{t+1} = β·σ_t after three consecutive drops of the server's
  validation loss (Eq. 9); the counter restarts after each decay.
* accounting with a different σ_t each round (Eq. 10) — the ledger composes
  the RDP of each round's own σ.
"""

from __future__ import annotations

import numpy as np
import torch

from .dpfedavg import DPFedAvg


class AdapDPFL(DPFedAvg):
    name = "adap-dpfl"
    needs_validation = True

    def __init__(self, engine, alpha=1.0, beta=0.9, patience=3, sigma_min=0.0, **kw):
        kw.setdefault("mechanism", "sample")
        super().__init__(engine, **kw)
        self.alpha, self.beta, self.patience = float(alpha), float(beta), int(patience)
        if not (0 < self.beta <= 1):
            raise ValueError(f"noise decay beta must lie in (0, 1], got {beta}")
        self.sigma_floor = float(sigma_min)
        self._drops = np.zeros(engine.R, dtype=int)
        self._last_val = np.full(engine.R, np.inf)

    def charges(self, t):
        ones = np.ones(self.engine.R, dtype=int)
        return [(self.sigma.copy(), self.batch_rate.copy(), self.steps_this_round()),
                (self.sigma.copy(), self.batch_rate.copy(), ones)]  # the clipped-norm statistic

    def after_round(self, t, glob, val_loss):
        eng = self.engine
        st = self.last_stats
        # DP mean of clipped norms: per client noisy sum / expected batch, then p_i-average
        std = torch.as_tensor(np.repeat(self.sigma * self.clip, eng.N), dtype=eng.dtype, device=eng.device)
        noisy = st.clipped_norm_sum + std * eng.normal((eng.N,)).reshape(-1)
        denom = eng.vec(self.batch_rate) * eng.client_n.repeat(eng.R)
        mean = (noisy / denom).reshape(eng.R, eng.N)
        dp_mean = (mean * eng.p[None, :]).sum(1).cpu().numpy()
        self.clip = np.where(dp_mean > 0, self.alpha * dp_mean, self.clip)
        self.clip = np.maximum(self.clip, 1e-3)
        drop = val_loss < self._last_val
        self._drops = np.where(drop, self._drops + 1, 0)
        decay = self._drops >= self.patience
        self.sigma = np.where(decay, np.maximum(self.sigma * self.beta, self.sigma_floor), self.sigma)
        self._drops[decay] = 0
        self._last_val = val_loss
