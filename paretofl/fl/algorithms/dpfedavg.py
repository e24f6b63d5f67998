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

from ...theory.privacy import adaptive_update_multiplier, mechanism_charge
from ..engine import AdamState
from ..options import DPFedAvgConfig
from .base import Policy


class DPFedAvg(Policy):
    name = "dpfedavg"
    Config = DPFedAvgConfig

    def __init__(self, engine, config=None, *, sizes=None, groups=None, **kw):
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
        if self.mechanism == "client-aggregate":   # the charge's own checks (q·N >= 1), in one place
            for q, s in zip(self.client_rate, self.sigma):
                mechanism_charge(self.mechanism, float(q), float(s) if s > 0 else 1.0, N)
        # each client's sampling rate (R, N), the expected cohort m (R,), and
        # each client's share of the sum's noise variance m/N (qN/N = q)
        self.rates = np.repeat(self.client_rate[:, None], N, axis=1)
        self.cohort, self.share = self.client_rate * N, self.client_rate
        self.groups = None
        if groups is not None:
            self._use_groups(groups)
        self.clip_quantile = c.clip_quantile
        self.update_factor = np.ones(engine.R)
        if self.clip_quantile is not None:
            self._use_adaptive_clipping(c)

    def _use_adaptive_clipping(self, c):
        """Adaptive clipping (Andrew et al. 2021, Algorithm 1 with §3's
        centred count, as TensorFlow Privacy's QuantileEstimatorQuery runs
        it): after each round b̄ = (Σ_S (b_i - ½) + N(0, σ_b²))/m + ½,
        clamped to [0, 1], b_i = 1[‖Δ_i‖ <= C], and C <- C·exp(-η_C(b̄ - γ)); the next
        round clips to the new C, and the sum's noise always uses the C its
        updates were clipped to.  The charge is unchanged: the update's noise
        multiplier is raised to z_Δ so that sum and count together are one
        Gaussian of the charged z (:func:`adaptive_update_multiplier`)."""
        R = self.engine.R
        self.clip = np.array(self.clip, dtype=float)
        self.clip_lr = float(c.clip_lr)
        sb = self.cohort / 20.0 if c.count_noise is None else np.full(R, float(c.count_noise))
        self.count_noise = np.where(self.sigma > 0, sb, 0.0)
        for r in range(R):
            if self.sigma[r] > 0:
                z = mechanism_charge(self.mechanism, float(self.client_rate[r]), float(self.sigma[r]), self.engine.N,
                                     cohort=float(self.cohort[r])).noise_multiplier
                self.update_factor[r] = adaptive_update_multiplier(z, float(sb[r])) / z

    def _use_groups(self, gd):
        """Clients with budgets of their own (a :class:`paretofl.budgets.GroupDesign`):
        each client sampled at its group's rate; the aggregate view's sum
        carries N(0, mσ²C²) with m = Σ_i q_i, divided by m; the local view's
        clients each add their group's σ; one ledger per group."""
        eng, N = self.engine, self.engine.N
        if self.mechanism not in ("client-aggregate", "client-local"):
            raise ValueError("per-client budgets apply to client-level DP-FedAvg (client-aggregate or client-local)")
        if gd.mechanism != self.mechanism:
            raise ValueError(f"the design is for mechanism {gd.mechanism}, the run uses {self.mechanism}")
        if gd.n_clients != N:
            raise ValueError(f"the budgets are for {gd.n_clients} clients, the run has {N}")
        self.groups = gd
        self.group_of = np.asarray(gd.group_of, dtype=int)
        self.group_budgets = np.array([g["budget"] for g in gd.groups])
        self.group_rates = np.array([g["q"] for g in gd.groups])
        self.group_sigmas = np.array([g["sigma"] for g in gd.groups])
        self.rates = np.repeat(self.group_rates[self.group_of][None, :], eng.R, axis=0)
        self.cohort = self.rates.sum(1)
        self.share = self.cohort / N
        self.client_rate = self.cohort / N            # the mean rate, for what reads one
        if self.mechanism == "client-aggregate":
            self.sigma = np.full(eng.R, float(gd.sigma))
        else:
            self.sigma = np.full(eng.R, float(np.sqrt(np.mean(self.group_sigmas[self.group_of] ** 2))))
        if np.any(self.cohort < 1 - 1e-9):
            raise ValueError(f"the expected cohort {float(self.cohort.min()):g} is below one client a round")

    @property
    def n_groups(self) -> int:
        return 1 if self.groups is None else len(self.group_budgets)

    def group_names(self):
        """The groups' names in the history (ε per group): by budget."""
        return None if self.groups is None else [f"{e:g}" for e in self.group_budgets]

    # ------------------------------------------------------------- privacy
    def steps_this_round(self):
        return self.tau

    def charges(self, t):
        if self.mechanism == "sample":
            return [("poisson", self.sigma, self.batch_rate, self.steps_this_round())]
        R, N = self.engine.R, self.engine.N
        if self.groups is None:
            ones = np.ones(R, dtype=int)
            z = np.array([0.0 if s == 0 else mechanism_charge(self.mechanism, q, s, N).noise_multiplier
                          for s, q in zip(self.sigma, self.client_rate)])
            sampling = "poisson" if self.mechanism == "client-aggregate" else "attributed"
            return [(sampling, z, self.client_rate, ones)]
        # one ledger per (replica, group): each group charged at its own rate
        # (and, in the local view, its own σ)
        z, q = [], []
        for r in range(R):
            for g in range(self.n_groups):
                sig = self.sigma[r] if self.mechanism == "client-aggregate" else self.group_sigmas[g]
                ch = mechanism_charge(self.mechanism, float(self.group_rates[g]), float(sig), N,
                                      cohort=float(self.cohort[r]))
                z.append(ch.noise_multiplier)
                q.append(ch.rate)
        return [(ch.sampling, np.array(z), np.array(q), np.ones(R * self.n_groups, dtype=int))]

    # ------------------------------------------------------------- a round
    def round(self, t, glob, active):
        if self.mechanism == "sample":
            return self._sample_round(glob, active)
        return self._client_round(glob, active)

    def _selection(self, active):
        """This round's cohort: each client of an active replica joins with
        probability q (Poisson), drawn from N uniforms a replica."""
        eng = self.engine
        if np.all(self.rates >= 1):
            sel = torch.ones(eng.R, eng.N, dtype=torch.bool, device=eng.device)
        elif self.groups is None:
            sel = eng.sample_clients(torch.as_tensor(self.client_rate, device=eng.device))
        else:
            sel = eng.sample_clients(torch.as_tensor(self.rates, device=eng.device))
        return eng.cohort(sel & torch.as_tensor(active, device=eng.device)[:, None])

    def max_cohort(self):
        """The most rows a round of each replica is expected to hold (R,):
        qN plus six standard deviations of the Poisson cohort's size."""
        r = np.minimum(self.rates, 1.0)
        qn, var = r.sum(1), (r * (1 - r)).sum(1)
        return np.minimum(self.engine.N, np.ceil(qn + 6 * np.sqrt(var) + 1)).astype(int)

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
        seen = np.full(eng.R, eng.N, dtype=float)
        if self.rounds is not None:
            q = np.minimum(self.client_rate, 1.0)
            seen = np.minimum(seen, np.ceil(eng.N * (1 - (1 - q) ** self.rounds) * 1.1 + 10))
        return int(2 * seen.sum() * eng.net.n_params * (torch.finfo(eng.dtype).bits // 8))

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
        out = self._release(glob, self._client_updates(glob, c), c)
        if self.clip_quantile is not None:
            self._adapt_clip(c, active)
        return out

    def _adapt_clip(self, c, active):
        """The geometric step of adaptive clipping, from this round's
        noised, centred count of updates that fitted under C."""
        eng = self.engine
        bits = (self.last_norms <= eng.rows(self.clip, c)).to(eng.dtype) - 0.5
        count = eng.replica_sum(bits, c) + eng.normal((1,))[:, 0] * torch.as_tensor(
            self.count_noise, dtype=eng.dtype, device=eng.device)
        b = np.clip(count.cpu().numpy().astype(float) / self.cohort + 0.5, 0.0, 1.0)   # a share (post-processing)
        step = np.exp(-self.clip_lr * (b - self.clip_quantile))
        self.clip = np.where(np.asarray(active, dtype=bool), self.clip * step, self.clip)

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
        """(each cohort client's noise std (K,), the server's top-up std (R,))
        per coordinate, in units of the update (docs/theory.md §5):
        client-aggregate releases N(0, m σ²C²) in total (m = qN, or Σ_i q_i
        where clients have rates of their own), whatever |S| is — each of the
        selected clients adds its share (m/N)σ²C² of that total over the N
        clients, the server the rest (N - |S|)(m/N)σ²C² >= 0; client-local
        has each client add its σ²C² and no top-up."""
        eng = self.engine
        sc = torch.as_tensor(self.sigma * self.update_factor * self.clip, dtype=eng.dtype, device=eng.device)
        if self.mechanism == "client-local":
            if self.groups is not None:
                own = self.group_sigmas[self.group_of][c.client.cpu().numpy()] * self.clip[c.replica.cpu().numpy()]
                return torch.as_tensor(own, dtype=eng.dtype, device=eng.device), torch.zeros_like(sc)
            return sc[c.replica], torch.zeros_like(sc)
        q = torch.as_tensor(self.share, dtype=eng.dtype, device=eng.device)
        rest = (eng.N - torch.as_tensor(c.counts, dtype=eng.dtype, device=eng.device)).clamp(min=0)
        return (sc * q.sqrt())[c.replica], sc * (q * rest).sqrt()

    def privatise(self, update, c):
        """Each cohort client's noisy clipped update (K, d) and the server's
        top-up (R, d): what the mechanism adds before anything leaves a
        client or the server."""
        eng = self.engine
        delta, self.last_norms = eng.clip_rows(update, eng.rows(self.clip, c))
        client_std, top_std = self.noise_stds(c)
        noisy = delta + eng.noise_like([delta], c)[0] * client_std[:, None]
        top = top_std[:, None] * eng.normal((delta.shape[1],))
        return noisy, top

    def _release(self, glob, update, c):
        """The privatisation: clip each update to C, add the clients' noise,
        sum the cohort's, add the server's top-up, divide by the expected
        cohort qN (Σ_i q_i with rates of their own: a public number).
        Everything the accountant's charge covers happens here (the audit
        drives this code with canaries)."""
        eng = self.engine
        noisy, top = self.privatise(update, c)
        total = eng.aggregate(noisy, torch.ones(c.size, device=eng.device), c) + top
        qn = torch.as_tensor(self.cohort, dtype=eng.dtype, device=eng.device)
        return eng.unflat(eng.flat(glob) + total / qn[:, None], glob)

    def info_row(self, r):
        return {"sigma": float(self.sigma[r]), "clip": float(self.clip[r]), "tau": int(self.tau[r])}
