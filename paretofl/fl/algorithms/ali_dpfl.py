"""ALI-DPFL (Ling et al., Algorithm 2): DP-SGD clients with an adaptive number
of local iterations τ*, recomputed every round on the server.

* R_c, the most DP-SGD iterations the budget allows, comes from the
  accountant (Algorithm 3, :func:`paretofl.theory.privacy.max_steps`);
  R_s is the round limit.  A replica stops at R_s rounds or R_c iterations.
* τ* = 1 when R_s >= R_c (Lemma 1), else Eq. (9) with T = min(R_s τ*, R_c),
  B̂ = min_i q·|D_i| over the declared sizes, d the model size, Γ (default
  10, as the paper).  B̂ stands for the batch the noised sum is divided by,
  so with a fixed ``batch_divisor`` (ALI-DPFL's code) B̂ is that divisor.
* μ, the strong-convexity estimate, is formed on the server from two
  consecutive global models and the aggregated (already privatised) update
  directions: μ ≈ ‖g_t - g_{t-1}‖ / ‖w_t - w_{t-1}‖.  The paper's step 4.1
  uses each client's exact gradients at its local and the global model,
  which is not covered by its privacy analysis; paretofl uses only released
  quantities (post-processing, no privacy cost).
"""

from __future__ import annotations

import numpy as np
import torch

from ...theory.convergence import ALIStep, ali_batch_hat, ali_next_tau
from ...theory.privacy import max_steps_searched
from ..options import ALIDPFLConfig
from .dpfedavg import DPFedAvg


class ALIDPFL(DPFedAvg):
    name = "ali-dpfl"
    Config = ALIDPFLConfig

    def __init__(self, engine, config=None, **kw):
        super().__init__(engine, config, **kw)
        if self.epsilon is None:
            raise ValueError("ali-dpfl calibrates its iterations R_c to the budget: give epsilon")
        c, R = self.config, engine.R
        self.gamma, self.tau_max = float(c.gamma), int(c.tau_max)
        charge = self.mech.charge(self.batch_rate, self.sigma)     # one DP-SGD step of each replica
        self.R_c = np.array([max_steps_searched(self.epsilon, ch.rate, ch.noise_multiplier, self.delta,
                                                sampling=ch.sampling) for ch in map(charge.at, range(R))])
        rs = c.rounds_server if c.rounds_server is not None else self.rounds
        self.R_s = np.full(R, int(rs) if rs is not None else 10**9)
        self.t_iter = np.zeros(R, dtype=int)
        self.tau = np.ones(R, dtype=int)
        self.mu = np.full(R, float(c.mu_default))
        self._prev = None   # (flat global model, aggregated direction)
        self.B_hat = self.batch_divisor if self.batch_divisor is not None else \
            np.array([ali_batch_hat(self.batch_rate[r], self.sizes) for r in range(R)])

    limit_text = "ALI-DPFL's own limit (its R_s rounds, or the R_c DP-SGD iterations the budget allows)"

    def max_rounds(self):
        return self.R_s

    def finished(self):
        return self.t_iter >= self.R_c          # a replica stops at R_c iterations (no round of zero steps)

    def steps_this_round(self):
        return np.maximum(0, np.minimum(self.tau, self.R_c - self.t_iter))

    def round(self, t, glob, active):
        self._start = self.engine.flat(glob).clone()
        self._steps = self.steps_this_round() * np.asarray(active)
        out = super().round(t, glob, active)
        self.t_iter += self._steps
        return out

    def after_round(self, t, glob, val_loss):
        eng = self.engine
        w = eng.flat(glob)
        g = (self._start - w) / torch.as_tensor(self.lr * np.maximum(self._steps, 1), dtype=eng.dtype,
                                                device=eng.device)[:, None]
        if self._prev is not None:
            w_prev, g_prev = self._prev
            dw = (w - w_prev).norm(dim=1)
            dg = (g - g_prev).norm(dim=1)
            ok = dw > 1e-12
            est = (dg / dw.clamp(min=1e-12)).cpu().numpy()
            self.mu = np.where(ok.cpu().numpy() & np.isfinite(est) & (est > 0), est, self.mu)
        self._prev = (w.clone(), g.clone())
        d = eng.net.n_params
        for r in range(eng.R):
            step = ALIStep(mu=self.mu[r], C=self.clip[r], sigma=self.sigma[r], d=d, B=max(self.B_hat[r], 1.0),
                           gamma=self.gamma)
            nt = ali_next_tau(self.R_s[r], self.R_c[r], step, int(self.tau[r]))
            self.tau[r] = int(min(self.tau_max, nt))

    def info_row(self, r):
        return {**super().info_row(r), "mu": float(self.mu[r]), "iterations": int(self.t_iter[r]),
                "R_c": int(self.R_c[r])}
