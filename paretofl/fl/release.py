"""The trainer's side of a mechanism: how a round's cohort is drawn and what
it releases, read from the torch-free mechanism object
(:mod:`paretofl.mechanisms`).

One class per kind of release, chosen by the mechanism's
:attr:`~paretofl.mechanisms.Mechanism.noise_on`, never by its name:

* :class:`SumRelease` — noise on the cohort's sum (client-aggregate,
  Flower's two): clip each update to C, add the mechanism's noise on the
  sum (split into the clients' shares and the server's top-up, or all at
  the server), divide by the expected cohort; adaptive clipping where the
  mechanism has it;
* :class:`CorrelatedRelease` — noise on the sum correlated across rounds
  (bandmf, bandmf-amplified): the cohort is a group in turn;
* :class:`UpdateRelease` — noise on each update (client-local);
* :class:`GradientRelease` — noise inside DP-SGD (sample-level).

A policy (:class:`paretofl.fl.algorithms.DPFedAvg`) trains the cohort's
clients and hands their updates to :meth:`Release.release`; the audit
drives the same public methods with canaries.  Every replica's settings
(σ, C, its clients' rates) are the release's own arrays.

How much noise a round adds is never worked out here: it is the
mechanism's :meth:`~paretofl.mechanisms.Mechanism.noise` for the replica's
(q, σ, expected cohort) — :meth:`Release.noise` — times the replica's C;
a release only says who adds which part of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..mechanisms import REGISTRY, Mechanism
from ..theory.privacy import cohort_size
from .engine import DPSGD, Cohort, Engine
from .options import per_replica

__all__ = ["Release", "SumRelease", "CorrelatedRelease", "UpdateRelease", "GradientRelease", "DistributedRelease",
           "make_release",
           "cohort_bound", "ClientGroups"]


@dataclass
class ClientGroups:
    """Clients with budgets of their own, as the trainer needs them: the
    mechanism they are designed for, each group's ``q`` and ``sigma`` (and
    ``budget``, ``clients``), and each client's group.  A design with groups
    (:class:`paretofl.recommendation.Design`) has the same fields."""

    mechanism: str
    n_clients: int
    groups: list
    group_of: list

    def client_rates(self) -> np.ndarray:
        return np.array([self.groups[g]["q"] for g in self.group_of])


def cohort_bound(rates, n_clients: int | None = None) -> int:
    """The most clients a round of one replica is expected to hold: the
    expected cohort m = Σ q_i plus six standard deviations of a Poisson
    cohort's size (a fixed cohort of m holds m, below this).  ``rates``:
    each client's (N,), or one rate for ``n_clients`` clients."""
    r = np.minimum(np.asarray(rates, dtype=float), 1.0)
    if r.ndim == 0:
        n = int(n_clients)
        qn, var = float(r) * n, n * float(r) * (1.0 - float(r))
    else:
        n = len(r)
        qn, var = float(r.sum()), float((r * (1 - r)).sum())
    return int(min(n, math.ceil(qn + 6 * math.sqrt(var) + 1)))


class Release:
    """A mechanism applied to a run: its selection and its release.

    ``sigma``, ``clip`` and ``client_rate`` are per replica (R,); ``groups``
    (:class:`ClientGroups`, or a design with groups: clients with budgets of
    their own) gives each
    client its group's rate and, in the local view, its σ; ``sizes``: the
    clients' declared sizes (public numbers: DP-SGD's divisor, the
    aggregation weights)."""

    def __init__(self, mechanism: Mechanism, engine: Engine, sigma, clip, client_rate, groups=None, sizes=None):
        self.mech, self.engine = mechanism, engine
        R, N = engine.R, engine.N
        vec = lambda v: per_replica(v, R)  # noqa: E731
        self.sigma, self.clip, self.client_rate = vec(sigma), vec(clip), vec(client_rate)
        self.sizes = np.asarray(engine.client_n.cpu().numpy() if sizes is None else sizes, dtype=float)
        if self.sizes.shape != (N,) or np.any(~(self.sizes > 0)):
            raise ValueError(f"sizes must list a positive declared size for each of the {N} clients")
        self.weights = torch.as_tensor(self.sizes / self.sizes.sum(), dtype=engine.dtype, device=engine.device)
        for q in self.client_rate:                    # the mechanism's own checks (qN >= 1, whole cohorts, ...)
            mechanism.check_rate(float(q), N)
        # each client's sampling rate (R, N), the expected cohort m (R,), and
        # each client's share of the sum's noise variance m/N (qN/N = q)
        self.rates = np.repeat(self.client_rate[:, None], N, axis=1)
        self.cohort, self.share = cohort_size(self.client_rate, N), self.client_rate
        self.groups = None
        if groups is not None:
            if not mechanism.groups:        # one cohort for all, or noise the group design does not plan
                raise ValueError(f"per-client budgets run with "
                                 f"{' or '.join(k for k, m in REGISTRY.items() if m.groups)}, not {mechanism.name}")
            self._use_groups(groups)

    def _use_groups(self, gd):
        """Clients with budgets of their own (a design with ``groups``): each
        client sampled at its group's rate; one ledger per group."""
        eng, N = self.engine, self.engine.N
        if gd.mechanism != self.mech.name:
            raise ValueError(f"the design is for mechanism {gd.mechanism}, the run uses {self.mech.name}")
        if gd.n_clients != N:
            raise ValueError(f"the budgets are for {gd.n_clients} clients, the run has {N}")
        self.groups = gd
        self.group_of = np.asarray(gd.group_of, dtype=int)
        self.group_budgets = np.array([g["budget"] for g in gd.groups])
        self.group_rates = np.array([g["q"] for g in gd.groups])
        self.group_sigmas = np.array([g["sigma"] for g in gd.groups])
        self.rates = np.repeat(self.group_rates[self.group_of][None, :], eng.R, axis=0)
        self.cohort = cohort_size(None, cohort=self.rates.sum(1))
        self.share = self.cohort / N
        self.client_rate = self.cohort / N            # the mean rate, for what reads one
        if self.mech.noise_on == "sum":               # one noise on the sum: the groups share sigma
            self.sigma = np.full(eng.R, float(self.group_sigmas[0]))
        else:                                         # each client its own: their root mean square, for the history
            self.sigma = np.full(eng.R, float(np.sqrt(np.mean(self.group_sigmas[self.group_of] ** 2))))
        if np.any(self.cohort < 1 - 1e-9):
            raise ValueError(f"the expected cohort {float(self.cohort.min()):g} is below one client a round")

    @property
    def n_groups(self) -> int:
        return 1 if self.groups is None else len(self.group_budgets)

    # ------------------------------------------------------------ selection
    def select(self, active, present=None) -> Cohort:
        """This round's cohort of every active replica, drawn as the
        mechanism says: Poisson (each client with its rate, from N uniforms
        a replica) or a fixed m = qN of the clients present, uniformly
        without replacement.  ``present`` (N,) bool: the clients in the
        population (all by default; the audit removes one)."""
        eng = self.engine
        act = torch.as_tensor(active, device=eng.device)[:, None]
        if self.mech.selection == "fixed":
            sel = self._fixed(present)
        elif np.all(self.rates >= 1):
            sel = torch.ones(eng.R, eng.N, dtype=torch.bool, device=eng.device)
        elif self.groups is None:
            sel = eng.sample_clients(torch.as_tensor(self.client_rate, device=eng.device))
        else:
            sel = eng.sample_clients(torch.as_tensor(self.rates, device=eng.device))
        if present is not None and self.mech.selection != "fixed":
            sel = sel & torch.as_tensor(present, device=eng.device)[None, :]
        return eng.cohort(sel & act)

    def _fixed(self, present):
        """m = round(qN) of the present clients, uniformly without replacement
        (each replica's keys from its own generator; the m smallest)."""
        eng = self.engine
        m = np.rint(self.cohort).astype(int)
        keys = eng.uniform((eng.N,))
        if present is not None:
            keys = keys.masked_fill(~torch.as_tensor(present, device=eng.device)[None, :], float("inf"))
        rank = keys.argsort(dim=1).argsort(dim=1)
        return rank < torch.as_tensor(m, device=eng.device)[:, None]

    def max_cohort(self) -> np.ndarray:
        """The most rows a round of each replica is expected to hold (R,):
        :func:`cohort_bound` of its clients' rates."""
        return np.array([cohort_bound(r) for r in self.rates], dtype=int)

    # ------------------------------------------------------------ privacy
    def charges(self, steps=None) -> list:
        """What a round charges each ledger (one per replica, or per
        (replica, group)): the mechanism's :class:`Charge`."""
        R, N = self.engine.R, self.engine.N
        if self.groups is None:
            return [self.mech.charge(self.client_rate, self.sigma, N)]
        # one ledger per (replica, group): each group charged at its own rate
        # (and, in the local view, its own σ)
        g = np.arange(self.n_groups)
        sig = (np.repeat(self.sigma, self.n_groups) if self.mech.noise_on == "sum"
               else np.tile(self.group_sigmas, R))
        return [self.mech.charge(np.tile(self.group_rates[g], R), sig, N, cohort=np.repeat(self.cohort, self.n_groups))]

    def noise(self):
        """The mechanism's :class:`~paretofl.mechanisms.Noise` for each
        replica's round (``std``, ``divisor``: (R,), in units of C) at the
        release's σ and expected cohort: what the release adds."""
        return self.mech.noise(self.client_rate, self.sigma, self.engine.N, cohort=self.cohort)

    def release(self, glob, updates, cohort: Cohort, active):
        raise NotImplementedError

    def state_bytes(self) -> int:
        """Bytes the release keeps between rounds (0: none)."""
        return 0


class SumRelease(Release):
    """Noise on the sum (see the module docstring).  The total variance on
    the sum is (zC)², z the mechanism's noise multiplier, a fixed number
    whatever the cohort: with ``split="shares"`` each selected client adds
    its share (m/N)σ²C² and the server the rest (N − |S|)(m/N)σ²C²; with
    ``"server"`` the server adds it all.  Adaptive clipping (Andrew et al.
    2021, Algorithm 1 with §3's centred count, as TensorFlow Privacy's
    QuantileEstimatorQuery runs it): after each round b̄ = (Σ_S (b_i − ½) +
    N(0, σ_b²))/m + ½, clamped to [0, 1], b_i = 1[‖Δ_i‖ <= C], and
    C ← C·exp(−η_C(b̄ − γ)); the next round clips to the new C, and the sum's
    noise always uses the C its updates were clipped to.  The charge is
    unchanged: the sum's own noise multiplier is raised to z_Δ so that sum
    and count together are one Gaussian of z
    (:func:`paretofl.mechanisms.adaptive_update_multiplier`): the
    mechanism's :meth:`~paretofl.mechanisms.Mechanism.noise` says z_Δ, and
    that is what is added."""

    def __init__(self, mechanism, engine, sigma, clip, client_rate, groups=None, sizes=None):
        super().__init__(mechanism, engine, sigma, clip, client_rate, groups, sizes)
        self.split = mechanism.split
        self.adaptive = bool(getattr(mechanism, "adaptive", False))
        self.last_count = None
        if self.adaptive:
            self._use_adaptive_clipping()

    def _use_adaptive_clipping(self):
        mech, R = self.mech, self.engine.R
        self.clip = np.array(self.clip, dtype=float)
        self.clip_lr, self.clip_quantile = mech.clip_lr, mech.clip_quantile
        # the count's noise σ_b from the charged z (the sum's own, z_Δ, is the mechanism's noise())
        z = np.broadcast_to(self.mech.charge(self.client_rate, self.sigma, self.engine.N,
                                             cohort=self.cohort).noise_multiplier, (R,))
        sb = np.array([mech.count_std(m, float(zr)) for m, zr in zip(self.cohort, z)])
        self.count_noise = np.where(self.sigma > 0, sb, 0.0)
        self.noise()          # refused here, before any round, where the count leaves the update no budget

    def noise_stds(self, c: Cohort):
        """(each cohort client's noise std (K,), the server's std (R,)) per
        coordinate, in units of the update (docs/theory.md §5): the sum
        carries the mechanism's noise, std s = noise().std·C.  "server": the
        server adds it all.  "shares": the total variance s² is cut into N
        equal shares s²/N; each selected client adds one and the server the
        N − |S| left, so the total is s² whatever the cohort's size."""
        eng = self.engine
        total = self.noise().std * self.clip                          # s (R,), float64
        if self.split == "server":
            return (torch.zeros(c.size, dtype=eng.dtype, device=eng.device),
                    torch.as_tensor(total, dtype=eng.dtype, device=eng.device))
        n = eng.N
        share = torch.as_tensor(total / math.sqrt(n), dtype=eng.dtype, device=eng.device)   # s/√N
        rest = (n - torch.as_tensor(c.counts, dtype=eng.dtype, device=eng.device)).clamp(min=0)
        return share[c.replica], share * rest.sqrt()

    def clip_updates(self, updates, c: Cohort):
        """Each update clipped to its replica's C; the norms before clipping
        are kept (adaptive clipping's count, the tuning's norms)."""
        clipped, self.last_norms = self.engine.clip_rows(updates, self.engine.rows(self.clip, c))
        return clipped

    def privatise(self, clipped, c: Cohort):
        """The clients' noisy clipped updates (K, d) and the server's noise
        (R, d): what the mechanism adds before anything leaves a client or
        the server."""
        eng = self.engine
        client_std, top_std = self.noise_stds(c)
        if self.split == "server":
            noisy = clipped
        else:
            noisy = clipped + eng.noise_like([clipped], c)[0] * client_std[:, None]
        top = top_std[:, None] * eng.normal((clipped.shape[1],))
        return noisy, top

    def noisy_mean(self, glob, clipped, c: Cohort):
        """Sum the cohort's noisy updates, add the server's noise, divide by
        the expected cohort (a public number), add to the global model."""
        eng = self.engine
        noisy, top = self.privatise(clipped, c)
        total = eng.aggregate(noisy, torch.ones(c.size, device=eng.device), c) + top
        m = torch.as_tensor(self.cohort, dtype=eng.dtype, device=eng.device)
        return eng.unflat(eng.flat(glob) + total / m[:, None], glob)

    def release(self, glob, updates, c: Cohort, active):
        """The round's release: clip, noise, sum, divide; then, with
        adaptive clipping, the noised count and the next C."""
        out = self.noisy_mean(glob, self.clip_updates(updates, c), c)
        if self.adaptive:
            self.adapt_clip(c, active)
        return out

    def count_bits(self, c: Cohort):
        """Each cohort client's centred bit b_i − ½, b_i = 1[‖Δ_i‖ <= C]."""
        eng = self.engine
        return (self.last_norms <= eng.rows(self.clip, c)).to(eng.dtype) - 0.5

    def adapt_clip(self, c: Cohort, active):
        """The geometric step of adaptive clipping, from this round's noised,
        centred count of updates that fitted under C (released: ``last_count``)."""
        eng = self.engine
        count = eng.replica_sum(self.count_bits(c), c) + eng.normal((1,))[:, 0] * torch.as_tensor(
            self.count_noise, dtype=eng.dtype, device=eng.device)
        self.last_count = count
        b = np.clip(count.cpu().numpy().astype(float) / self.cohort + 0.5, 0.0, 1.0)   # a share (post-processing)
        step = np.exp(-self.clip_lr * (b - self.clip_quantile))
        self.clip = np.where(np.asarray(active, dtype=bool), self.clip * step, self.clip)


class UpdateRelease(SumRelease):
    """Noise on each update, on the client (the local view): each cohort
    client adds N(0, σ²C²) — its group's σ_g where it has one — and the
    server adds nothing; the server's sum is divided by the expected cohort."""

    def noise_stds(self, c: Cohort):
        """(each cohort client's noise std (K,), zeros for the server): the
        mechanism's noise on each update, noise().std·C — of its group's σ_g
        where clients have budgets of their own."""
        eng = self.engine
        none = torch.zeros(eng.R, dtype=eng.dtype, device=eng.device)
        if self.groups is not None:
            client, replica = c.client.cpu().numpy(), c.replica.cpu().numpy()
            row = self.mech.noise(self.rates[replica, client], self.group_sigmas[self.group_of][client], eng.N,
                                  cohort=self.cohort[replica])           # one per cohort row
            own = row.std * self.clip[replica]
            return torch.as_tensor(own, dtype=eng.dtype, device=eng.device), none
        std = torch.as_tensor(self.noise().std * self.clip, dtype=eng.dtype, device=eng.device)
        return std[c.replica], none


class GradientRelease(Release):
    """Noise inside DP-SGD (sample-level): the clients' local steps carry
    the mechanism's noise on each clipped per-sample-gradient sum, divided
    by a public number; the server averages the clients' models with
    weights from their declared sizes."""

    def __init__(self, mechanism, engine, sigma, clip, client_rate, groups=None, sizes=None, batch_rate=0.015,
                 batch_divisor=None):
        super().__init__(mechanism, engine, sigma, clip, client_rate, groups, sizes)
        R = engine.R
        self.batch_rate = per_replica(batch_rate, R)
        self.batch_divisor = None if batch_divisor is None else \
            per_replica(batch_divisor, R)

    def charges(self, steps=None) -> list:
        """(q_b, σ) per local step, every round, selected or not (conservative)."""
        return [self.mech.charge(self.batch_rate, self.sigma, steps=steps)]

    def divisor(self, c: Cohort):
        """DP-SGD's divisor of each row's noised sum (K,): a public number."""
        eng = self.engine
        if self.batch_divisor is not None:
            return eng.rows(self.batch_divisor, c)
        n = torch.as_tensor(self.sizes, dtype=eng.dtype, device=eng.device)[c.client]
        return eng.rows(self.batch_rate, c) * n

    def local_noise(self, c: Cohort) -> DPSGD:
        """What DP-SGD's local steps need: per-sample clipping, noise and the public divisor."""
        eng = self.engine
        std = self.mech.noise(self.batch_rate, self.sigma, eng.N).std       # σ on each step's clipped sum
        return DPSGD(batch_rate=eng.rows(self.batch_rate, c), clip=eng.rows(self.clip, c),
                     batch_divisor=self.divisor(c), sigma=eng.rows(std, c))

    def release(self, glob, new, c: Cohort, active):
        """The clients' models averaged with their declared sizes' weights;
        replicas with no selected client keep their model."""
        eng = self.engine
        w = self.weights[c.client]
        w = w / eng.replica_sum(w, c).clamp(min=1e-12)[c.replica]
        agg = eng.aggregate(eng.flat(new), w, c)
        out = eng.unflat(agg, glob)
        none = torch.as_tensor(c.counts == 0, device=eng.device)
        return [torch.where(none.reshape(-1, *[1] * (o.ndim - 1)), g, o) for o, g in zip(out, glob)]


class CorrelatedRelease(SumRelease):
    """Noise on the sum, correlated across rounds (``bandmf`` and
    ``bandmf-amplified``; docs/theory.md §7).  Client i belongs to group
    i mod b; round t's cohort is group t mod b — every client of it
    (``selection="cyclic"``) or each with the group's rate q_g = q·b
    (``"cyclic-poisson"``).  The server adds to the clipped sum z·C·y_t,
    y_t = (Z_t − Σ_{j=1}^{b−1} c_j y_{t−j}) / c_0 with Z_t standard normal:
    row t of C⁻¹Z for the b-banded Toeplitz strategy C
    (:mod:`paretofl.theory.bandmf`), kept as the last b − 1 draws of each
    replica (a ring of (R, b − 1, d)).  The sum is divided by the expected
    cohort m = qN.  Each round charges the clients of group t mod b; the
    ledger books the most exposed group, 0, in rounds t ≡ 0 (mod b)."""

    def __init__(self, mechanism, engine, sigma, clip, client_rate, groups=None, sizes=None):
        super().__init__(mechanism, engine, sigma, clip, client_rate, groups, sizes)
        self.bands = int(mechanism.bands)
        self.coef = torch.as_tensor(np.asarray(mechanism.coefficients()), dtype=engine.dtype, device=engine.device)
        self.group_of = torch.arange(engine.N, device=engine.device) % self.bands
        self.t = 0                                   # the next round's index (every active replica's)
        self.ring = None                             # y_{t-1}, ..., y_{t-b+1} at slots (t - j) mod (b - 1)

    # ------------------------------------------------------------ selection
    def group_rate(self) -> np.ndarray:
        """q_g of each replica (R,): 1 for ``bandmf``, q·b for the amplified."""
        if self.mech.selection == "cyclic":
            return np.ones(self.engine.R)
        return np.minimum(self.client_rate * self.bands, 1.0)

    def selected(self) -> torch.Tensor:
        """(R, N) bool: group t mod b, all of it or each client at q_g."""
        eng = self.engine
        member = (self.group_of == self.t % self.bands)[None, :].expand(eng.R, eng.N)
        if self.mech.selection == "cyclic":
            return member.clone()
        return member & eng.sample_clients(torch.as_tensor(self.group_rate(), device=eng.device))

    def select(self, active, present=None) -> Cohort:
        """This round's cohort (of the ``present`` clients, all by default)."""
        eng = self.engine
        sel = self.selected()
        if present is not None:
            sel = sel & torch.as_tensor(present, device=eng.device)[None, :]
        return eng.cohort(sel & torch.as_tensor(active, device=eng.device)[:, None])

    def max_cohort(self) -> np.ndarray:
        size = -(-self.engine.N // self.bands)           # the largest group
        return np.array([size if q >= 1 else cohort_bound(q, size) for q in self.group_rate()], dtype=int)

    # ------------------------------------------------------------ privacy
    def charges(self, steps=None) -> list:
        """The mechanism's charge in the rounds group 0 joins, nothing in the others."""
        ch = self.mech.charge(self.client_rate, self.sigma, self.engine.N)
        steps = np.full(self.engine.R, 1 if self.mech.charged_in_round(self.t) else 0)
        return [replace(ch, steps=steps)]

    # ------------------------------------------------------------ the noise
    def correlated_noise(self, d: int) -> torch.Tensor:
        """y_t (R, d): this round's row of C⁻¹Z per unit of Z's std; the
        ring of past draws advances."""
        eng, b = self.engine, self.bands
        z = eng.normal((d,))
        if b == 1:
            return z / self.coef[0]
        if self.ring is None:
            self.ring = torch.zeros(eng.R, b - 1, d, dtype=eng.dtype, device=eng.device)
        slots = [(self.t - j) % (b - 1) for j in range(1, b)]
        weight = torch.zeros(b - 1, dtype=eng.dtype, device=eng.device)
        weight[torch.as_tensor(slots, device=eng.device)] = self.coef[1:]
        y = (z - torch.einsum("j,rjd->rd", weight, self.ring)) / self.coef[0]
        self.ring[:, self.t % (b - 1)] = y
        return y

    def privatise(self, clipped, c: Cohort):
        """The clipped updates as they are, and the server's noise z·C·y_t
        (R, d), z the mechanism's noise() (Z's std per unit C)."""
        eng = self.engine
        zc = torch.as_tensor(self.noise().std * self.clip, dtype=eng.dtype, device=eng.device)
        return clipped, zc[:, None] * self.correlated_noise(clipped.shape[1])

    def release(self, glob, updates, c: Cohort, active):
        out = self.noisy_mean(glob, self.clip_updates(updates, c), c)
        self.t += 1
        return out

    def state_bytes(self) -> int:
        eng = self.engine
        return eng.R * (self.bands - 1) * eng.net.n_params * (torch.finfo(eng.dtype).bits // 8)


class DistributedRelease(SumRelease):
    """Distributed DP with Skellam noise and secure aggregation (the
    ``distributed`` mechanism; docs/theory.md §8), simulated in integers.
    Each cohort client clips its update to C, rotates it (randomised
    Hadamard over d' coordinates, the replica's signs drawn each round: the
    round's public seed), scales it by γ = c/C, rounds it conditionally to
    L2 norm <= Δ₂, adds Skellam noise of variance μ/n_min (μ = (zΔ)²,
    n_min = ⌈(1 − dropout)|S|⌉) and holds its share modulo 2^bits.  Each
    client then survives with probability 1 − ``drop_rate`` (0 by default:
    the simulation's dropout, separate from the bound the noise is set
    for); fewer than n_min survivors abort the round (the model stays).
    Otherwise the survivors' shares are summed modulo 2^bits, centred,
    divided by γ, rotated back and divided by the survivors' count.  Every
    draw comes from its replica's own generator."""

    def __init__(self, mechanism, engine, sigma, clip, client_rate, groups=None, sizes=None):
        from ..theory import skellam as sk

        super().__init__(mechanism, engine, sigma, clip, client_rate, groups, sizes)
        d = engine.net.n_params
        if mechanism.dim is not None and mechanism.dim != d:
            raise ValueError(f"the distributed mechanism was set for dim = {mechanism.dim} weights, the model has "
                             f"{d}: its sensitivity (and the charge) depend on it; design again with dim {d} for this "
                             "model, or train the model it was designed for")
        self.dim, self.padded = d, sk.padded_dim(d)
        self.bits, self.scaled = mechanism.bits, mechanism.scaled_clip
        self.l2 = sk.rounded_l2_bound(self.scaled, self.padded, mechanism.beta)
        # Δ(z), the mechanism's (what it charges), on this model's d'
        self.sensitivity_at = lambda z: mechanism.sensitivity_at(z, self.padded)
        self.dropout, self.drop_rate = mechanism.dropout, 0.0
        # what broken copies change (paretofl.fl.audit): the sensitivity the noise is set for (None: the
        # mechanism's Δ(z)), the modulus, the clients the noise is split among, the rounding
        self.calibrated_to, self.modulus_bits, self.noise_split, self.nearest = None, self.bits, None, False
        self.aborted = np.zeros(engine.R, dtype=bool)
        self.survived = np.zeros(engine.R, dtype=int)
        self.keep = None                                   # a client that never drops (the audit's canary)

    def variance(self, r: int) -> float:
        """μ of replica r: (z·Δ(z))², z the mechanism's noise multiplier on the sum, in grid units."""
        z = float(self.noise().std[r])
        delta = self.sensitivity_at(z) if self.calibrated_to is None else self.calibrated_to
        return (z * delta) ** 2

    def release(self, glob, updates, c: Cohort, active):
        from . import quantise as qz

        eng = self.engine
        clipped = self.clip_updates(updates, c).to(torch.float64)
        flat = eng.flat(glob)
        out = flat.clone()
        b = c.bounds
        for r in range(eng.R):
            g = eng.gens[r]
            n = int(c.counts[r])
            signs = (torch.rand(self.padded, dtype=torch.float64, device=eng.device, generator=g) < 0.5) * 2.0 - 1.0
            if n == 0 or not active[r]:
                self.aborted[r], self.survived[r] = n > 0, 0
                continue
            gamma = self.scaled / float(self.clip[r])
            x = qz.rotate(clipped[b[r]:b[r + 1]], signs[None, :], self.padded) * gamma
            ints = qz.round_conditional(x, self.l2, g, nearest=self.nearest).to(torch.int64)
            need = qz.n_min(n, self.dropout)
            split = need if self.noise_split is None else self.noise_split(n, need)
            mu = self.variance(r) if self.sigma[r] > 0 else 0.0
            shares = ints + qz.skellam(ints.shape, mu / split, g, eng.device)
            alive = qz.survivors(n, self.drop_rate, g, eng.device)
            if self.keep is not None:                      # the audit's canary client survives
                alive = alive | (c.client[b[r]:b[r + 1]] == self.keep)
            k = int(alive.sum())
            self.survived[r] = k
            if k < need:                                   # secure aggregation aborts: nothing released
                self.aborted[r] = True
                continue
            self.aborted[r] = False
            total = qz.modular_sum(shares[alive], self.modulus_bits).to(torch.float64) / gamma
            mean = qz.unrotate(total[None, :], signs[None, :], self.dim)[0] / k
            out[r] = flat[r] + mean.to(flat.dtype)
        return eng.unflat(out, glob)


#: the trainer's release for each place a mechanism puts its noise
RELEASES = {"sum": SumRelease, "correlated-sum": CorrelatedRelease, "update": UpdateRelease,
            "gradient": GradientRelease, "modular-sum": DistributedRelease}


def make_release(mechanism: Mechanism, engine: Engine, **settings) -> Release:
    """The release of ``mechanism`` on ``engine`` (``settings``: sigma, clip,
    client_rate, groups, sizes, and DP-SGD's batch_rate, batch_divisor)."""
    if mechanism.noise_on not in RELEASES:
        raise ValueError(f"mechanism {mechanism.name} puts its noise on {mechanism.noise_on!r}, which "
                         "client-level DP-FedAvg does not run")
    return RELEASES[mechanism.noise_on](mechanism, engine, **settings)
