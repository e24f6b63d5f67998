"""NbAFL (Wei et al. 2020): noise before aggregation.

Each scheduled client trains locally with the proximal term μ/2‖w - w_t‖²,
clips its *parameters* to norm C (w / max(1, ‖w‖/C)), and uploads them with
Gaussian noise σ_U.  The server averages and, past the threshold T > L√N
(Theorem 1; Lemma 4 for K-client scheduling), adds downlink noise σ_D before
broadcasting.

What is guaranteed.  Parameter clipping bounds how far any change of a
client's data can move its upload: by 2C (replace-one, at the client level
and so at the sample level too).  Each upload is then a Gaussian mechanism
with noise multiplier σ_U/(2C), seen with its sender, at most T times per
client: :meth:`fixed_epsilon` is the RDP ε of that, the ε paretofl reports.

Calibration.  ``clipping`` (the default) sets σ_U so that this guaranteed ε
meets the run's budget.  ``paper`` is NbAFL's σ_U = cLΔs_U/ε with
Δs_U = 2C/m (m the smallest declared data set): it assumes a local model
averages m per-sample terms each bounded by C, which local SGD does not
guarantee — ``paretofl audit`` shows one canary sample moving the upload
far more — so its guaranteed ε is far above the budget; it is offered for
reproducing the paper only, and ``paretofl train`` says so first.
"""

from __future__ import annotations

import numpy as np
import torch

from ...mechanisms import NbAFLMechanism
from ...theory.convergence import nbafl_sigma_downlink, nbafl_sigma_downlink_k, nbafl_sigma_uplink
from ...theory.privacy import calibrate_noise
from ..options import NbAFLConfig
from .base import Policy


class NbAFL(Policy):
    name = NbAFLMechanism.algorithm
    Config = NbAFLConfig

    def __init__(self, engine, config=None, *, sizes=None, **kw):
        super().__init__(engine, config, **kw)
        self.mech = NbAFLMechanism()
        c, N = self.config, engine.N
        if self.epsilon is None or self.rounds is None:
            raise ValueError("nbafl calibrates its noise to the budget: give epsilon and rounds")
        self.eps, self.T = float(self.epsilon), int(self.rounds)
        self.C = float(c.clip)
        self.L = int(c.exposures) if c.exposures is not None else self.T
        self.K = int(c.clients_per_round) if c.clients_per_round is not None else N
        if self.K > N:
            raise ValueError(f"clients_per_round must lie in 1..{N}, got {self.K}")
        self.calibration = c.calibration
        sizes = np.asarray(engine.client_n.cpu().numpy() if sizes is None else sizes, dtype=float)
        self.weights = torch.as_tensor(sizes / sizes.sum(), dtype=engine.dtype, device=engine.device)
        m = int(sizes.min())
        if self.calibration == "paper":
            self.sigma_u = nbafl_sigma_uplink(self.C, m, self.L, self.eps, self.delta)
        else:  # T uploads of a Gaussian mechanism with sensitivity 2C meet the budget: the design's z, or calibrated
            z = c.sigma
            if z is None:
                unit = self.mech.charge(1.0, 1.0)
                z = calibrate_noise(self.eps, unit.rate, self.T, self.delta, sampling=unit.sampling)
            else:
                spends = self.mech.charge(1.0, z).epsilon(self.delta, self.T)
                if spends > self.eps * (1 + 1e-9):
                    raise ValueError(f"sigma {z:g} over {self.T} rounds of uploads spends epsilon {spends:.4g} > "
                                     f"{self.eps:g}: raise sigma or lower the rounds (or leave sigma out: it is "
                                     "calibrated to the budget)")
            self.sigma_u = 2 * self.C * float(self.mech.noise(1.0, z).std)    # the std on the 2C a client moves
        if self.K == N:
            self.sigma_d = nbafl_sigma_downlink(self.C, m, N, self.L, self.T, self.eps, self.delta)
        else:
            self.sigma_d = nbafl_sigma_downlink_k(self.C, m, N, self.K, self.L, self.T, self.eps, self.delta)
        self.prox_mu, self.lr = float(c.prox_mu), float(c.lr)
        self.local_steps, self.batch_size = int(c.local_steps), int(c.batch_size)

    @property
    def epsilon_paper(self):
        return self.eps

    def fixed_epsilon(self):
        """The ε the uploads guarantee: T releases of a Gaussian mechanism with
        sensitivity 2C and noise σ_U (RDP); where σ_U was calibrated here,
        never less than the budget it was calibrated to (where it was given,
        a design's, what it spends)."""
        z = self.sigma_u / (2 * self.C)
        guaranteed = self.mech.charge(1.0, z).epsilon(self.delta, self.T) if z >= 1e-6 else float("inf")
        return guaranteed if self.config.sigma is not None else max(guaranteed, self.eps)

    limit_text = "NbAFL's own T rounds (its noise is calibrated to them)"

    def max_rounds(self):
        return np.full(self.engine.R, self.T)

    def max_cohort(self):
        return np.full(self.engine.R, self.K)

    @classmethod
    def size_before(cls, config, n_clients, n_max, groups=None):
        k = config.clients_per_round if config.clients_per_round is not None else n_clients
        return min(int(k), n_clients), min(int(config.batch_size), n_max)

    def max_batch(self):
        return min(self.batch_size, self.engine.n_max)

    def round(self, t, glob, active):
        eng = self.engine
        if self.K < eng.N:          # K of the N clients, uniformly without replacement
            keys = eng.uniform((eng.N,))
            kth = keys.sort(dim=1).values[:, self.K - 1:self.K]
            sel = keys <= kth
        else:
            sel = torch.ones(eng.R, eng.N, dtype=torch.bool, device=eng.device)
        c = eng.cohort(sel & torch.as_tensor(active, device=eng.device)[:, None])
        params = eng.broadcast(glob, c)
        new, _ = eng.local_steps(params, self.local_steps, self.lr, batch_size=self.batch_size,
                                 prox=(self.prox_mu, params), cohort=c)
        w, _ = eng.clip_rows(eng.flat(new), self.C)                              # clip parameters
        w = w + self.sigma_u * eng.noise_like([w], c)[0]                         # uplink noise
        weights = self.weights[c.client]
        weights = weights / eng.replica_sum(weights, c).clamp(min=1e-30)[c.replica]
        agg = eng.aggregate(w, weights, c, noise_std=self.sigma_d if self.sigma_d > 0 else None)  # downlink
        return eng.unflat(agg, glob)

    def info_row(self, r):
        return {"sigma_u": self.sigma_u, "sigma_d": self.sigma_d, "K": self.K, "epsilon_paper": self.eps}
