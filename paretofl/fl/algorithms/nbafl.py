"""NbAFL (paper 004): noise before aggregation.

Each scheduled client trains locally with the proximal term μ/2‖w - w_t‖²,
clips its *parameters* to norm C (w / max(1, ‖w‖/C)), and uploads them with
Gaussian noise σ_U = cLΔs_U/ε (Δs_U = 2C/m, m the smallest local data set).
The server averages and, past the threshold T > L√N (Theorem 1; Lemma 4 for
K-client scheduling), adds downlink noise σ_D before broadcasting.  The ε
is the target the noise was calibrated for (paper 004's Gaussian-mechanism
calibration, not the RDP accountant).
"""

from __future__ import annotations

import numpy as np
import torch

from ...theory.convergence import nbafl_sigma_downlink, nbafl_sigma_downlink_k, nbafl_sigma_uplink
from .base import Policy


class NbAFL(Policy):
    name = "nbafl"

    def __init__(self, engine, epsilon, rounds, delta=1e-2, clip=10.0, exposures=None, clients_per_round=None,
                 prox_mu=0.01, lr=0.05, local_steps=5, batch_size=64):
        super().__init__(engine)
        N = engine.N
        self.eps, self.delta, self.T = float(epsilon), float(delta), int(rounds)
        self.C = float(clip)
        self.L = int(exposures) if exposures is not None else self.T
        self.K = int(clients_per_round) if clients_per_round is not None else N
        if not (1 <= self.K <= N):
            raise ValueError(f"clients per round K must lie in 1..{N}")
        m = int(engine.client_n.min())
        self.sigma_u = nbafl_sigma_uplink(self.C, m, self.L, self.eps, self.delta)
        if self.K == N:
            self.sigma_d = nbafl_sigma_downlink(self.C, m, N, self.L, self.T, self.eps, self.delta)
        else:
            self.sigma_d = nbafl_sigma_downlink_k(self.C, m, N, self.K, self.L, self.T, self.eps, self.delta)
        self.prox_mu, self.lr, self.local_steps, self.batch_size = prox_mu, lr, int(local_steps), int(batch_size)

    def fixed_epsilon(self):
        return self.eps

    def max_rounds(self):
        return np.full(self.engine.R, self.T)

    def round(self, t, glob, active):
        eng = self.engine
        if self.K < eng.N:
            keys = eng.uniform((eng.N,))
            kth = keys.sort(dim=1).values[:, self.K - 1:self.K]
            sel = keys <= kth
        else:
            sel = torch.ones(eng.R, eng.N, dtype=torch.bool, device=eng.device)
        params = eng.broadcast(glob)
        steps = torch.full((eng.M,), self.local_steps, device=eng.device) * sel.reshape(-1)
        new, _ = eng.local_steps(params, steps, self.lr, batch_size=self.batch_size,
                                 prox_mu=self.prox_mu, anchor=params)
        w = eng.flat(new)
        w = w / torch.clamp(w.norm(dim=1, keepdim=True) / self.C, min=1.0)      # clip parameters
        w = w + self.sigma_u * eng.noise_like([w])[0]                            # uplink noise
        weights = eng.p.reshape(1, -1) * sel
        weights = weights / weights.sum(1, keepdim=True)
        agg = eng.aggregate(w, weights, noise_std=self.sigma_d if self.sigma_d > 0 else None)  # downlink
        return eng.unflat(agg, glob)

    def info_row(self, r):
        return {"sigma_u": self.sigma_u, "sigma_d": self.sigma_d, "K": self.K}
