"""NbAFL (paper 004): noise before aggregation.

Each scheduled client trains locally with the proximal term μ/2‖w - w_t‖²,
clips its *parameters* to norm C (w / max(1, ‖w‖/C)), and uploads them with
Gaussian noise σ_U = cLΔs_U/ε (Δs_U = 2C/m, m the smallest local data set).
The server averages and, past the threshold T > L√N (Theorem 1; Lemma 4 for
K-client scheduling), adds downlink noise σ_D before broadcasting.

The ε reported is not the paper's target.  Paper 004's sensitivity 2C/m
holds for a local model that averages m per-sample terms each bounded by C;
local SGD gives no such bound, and one sample can move the clipped
parameters by up to 2C (``paretofl audit`` shows a single canary sample
doing so: its empirical lower bound exceeds the paper's ε).  What clipping
does guarantee is sensitivity 2C (replace-one), so each upload is a Gaussian
mechanism with noise multiplier σ_U/(2C), and a client uploads at most T
times: :meth:`fixed_epsilon` is the RDP ε of that (the paper's target is kept
as ``epsilon_paper``).  ``calibration="clipping"`` instead calibrates σ_U so
that this guaranteed ε meets the target (far more noise).
"""

from __future__ import annotations

import numpy as np
import torch

from ...theory.privacy import calibrate_noise, compute_epsilon
from ...theory.convergence import nbafl_sigma_downlink, nbafl_sigma_downlink_k, nbafl_sigma_uplink
from .base import Policy


class NbAFL(Policy):
    name = "nbafl"

    def __init__(self, engine, epsilon, rounds, delta=1e-2, clip=10.0, exposures=None, clients_per_round=None,
                 prox_mu=0.01, lr=0.05, local_steps=5, batch_size=64, calibration="paper"):
        super().__init__(engine)
        N = engine.N
        self.eps, self.delta, self.T = float(epsilon), float(delta), int(rounds)
        self.C = float(clip)
        self.L = int(exposures) if exposures is not None else self.T
        self.K = int(clients_per_round) if clients_per_round is not None else N
        if not (1 <= self.K <= N):
            raise ValueError(f"clients per round K must lie in 1..{N}")
        if calibration not in ("paper", "clipping"):
            raise ValueError(f"calibration must be 'paper' or 'clipping', got {calibration!r}")
        m = int(engine.client_n.min())
        if calibration == "paper":
            self.sigma_u = nbafl_sigma_uplink(self.C, m, self.L, self.eps, self.delta)
        else:  # T uploads of a Gaussian mechanism with sensitivity 2C meet the target
            self.sigma_u = 2 * self.C * calibrate_noise(self.eps, 1.0, self.T, self.delta)
        if self.K == N:
            self.sigma_d = nbafl_sigma_downlink(self.C, m, N, self.L, self.T, self.eps, self.delta)
        else:
            self.sigma_d = nbafl_sigma_downlink_k(self.C, m, N, self.K, self.L, self.T, self.eps, self.delta)
        self.prox_mu, self.lr, self.local_steps, self.batch_size = prox_mu, lr, int(local_steps), int(batch_size)

    @property
    def epsilon_paper(self):
        return self.eps

    def fixed_epsilon(self):
        """The ε the uploads guarantee: T releases of a Gaussian mechanism with
        sensitivity 2C and noise σ_U (RDP), never less than the target."""
        z = self.sigma_u / (2 * self.C)
        guaranteed = compute_epsilon(1.0, z, self.T, self.delta) if z >= 1e-6 else float("inf")
        return max(guaranteed, self.eps)

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
        w, _ = eng.clip_rows(eng.flat(new), self.C)                              # clip parameters
        w = w + self.sigma_u * eng.noise_like([w])[0]                            # uplink noise
        weights = eng.p.reshape(1, -1) * sel
        weights = weights / weights.sum(1, keepdim=True)
        agg = eng.aggregate(w, weights, noise_std=self.sigma_d if self.sigma_d > 0 else None)  # downlink
        return eng.unflat(agg, glob)

    def info_row(self, r):
        return {"sigma_u": self.sigma_u, "sigma_d": self.sigma_d, "K": self.K, "epsilon_paper": self.eps}
