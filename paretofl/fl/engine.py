"""The vectorised DP federated round: every client of a round's cohort, of
every replica, at once.

A round materialises only its :class:`Cohort`: the (replica, client) pairs
that train this round, K rows in stacked tensors (replica-major).  One call of
:meth:`Engine.local_steps` runs a local step for all K rows with one batched
forward/backward (:meth:`paretofl.fl.models.Net.clipped_grads`); between
rounds only each replica's global model is held, so a round costs
O(R × (cohort + 1) × d) whatever the population N (docs/performance.md).
Each replica has its own random generator and draws only for its own
cohort's rows, so a replica's run does not depend on which others ran beside
it (tested), and its own settings: σ, C, learning rate, batch rate, client
rate, number of local steps.

Where the noise goes is the caller's choice (the algorithms' policies):
inside DP-SGD on each clipped per-sample-gradient sum (:meth:`local_steps`
with ``sigma``), on each client's clipped update (:meth:`clip_rows` +
:meth:`noise_like`), or on the aggregate (:meth:`aggregate`'s ``noise_std``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..theory.float_noise import NOISE_CELL_BITS, NOISE_LEVELS
from .data import Dataset
from .models import Model


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the heap instead of unmapping it
    (opt-in: it changes a process-wide setting, so the library never calls
    it; the ``paretofl`` command does, for train, pretrial and audit).

    The engine allocates the same large temporaries every step (gathered
    batches, per-sample activations).  glibc serves blocks over 32 MB by
    fresh mmap and returns them on free, so each step page-faults them in
    anew: measured here, a 46 MB gather takes 22 ms into fresh memory and
    3 ms into reused memory, and a LR pre-trial job runs 1.7x faster with
    this setting.  The cost: the process keeps its peak heap.  Returns
    whether the setting was made (glibc on Linux only)."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-4, 0)          # M_MMAP_MAX: no mmap for large blocks
        libc.mallopt(-1, 1 << 30)    # M_TRIM_THRESHOLD: keep up to 1 GiB of free heap
        return True
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return False


_POOLS: dict = {}


def _chunk_pool(n):
    """A process-wide pool of n worker threads for the engine's chunks."""
    if n not in _POOLS:
        from concurrent.futures import ThreadPoolExecutor

        _POOLS[n] = ThreadPoolExecutor(n, thread_name_prefix="paretofl-chunk")
    return _POOLS[n]


@dataclass(frozen=True)
class DPSGD:
    """DP-SGD's local steps, as a release inside the client sets them
    (:meth:`Engine.local_steps`): Poisson batches at ``batch_rate``, each
    per-sample gradient clipped to ``clip``, Gaussian noise of standard
    deviation ``sigma`` times ``clip`` added to the clipped sum (``sigma``
    None: none), the sum divided by ``batch_divisor``, a public number (e.g.
    the expected batch of a declared size, never the data's own count).
    Each a scalar, per replica (R,) or per row (K,)."""

    batch_rate: object
    clip: object
    batch_divisor: object = None
    sigma: object = None

    def __post_init__(self):
        for name in ("batch_rate", "clip"):
            if getattr(self, name) is None:
                raise ValueError(f"DP-SGD's local steps need a {name}")


@dataclass
class StepStats:
    loss: torch.Tensor              # (K,) mean training loss of the last local step
    clipped_norm_sum: torch.Tensor  # (K,) Σ_b min(‖g_b‖, C) over the last batch (sensitivity C)


@dataclass
class Cohort:
    """The (replica, client) pairs a round materialises: K rows,
    replica-major, clients in increasing order within a replica.  Row k is
    client ``client[k]`` of replica ``replica[k]``; ``counts[r]`` rows belong
    to replica r; ``mask`` (R, N) says who is in."""

    replica: torch.Tensor           # (K,) long
    client: torch.Tensor            # (K,) long
    counts: np.ndarray              # (R,) rows per replica
    mask: torch.Tensor              # (R, N) bool
    full: bool                      # every client of every replica (K = R·N)

    @property
    def size(self) -> int:
        return int(self.client.shape[0])

    @property
    def bounds(self) -> np.ndarray:
        """(R + 1,) offsets: replica r's rows are bounds[r]:bounds[r+1]."""
        return np.concatenate([[0], np.cumsum(self.counts)])

    def ids(self, n_clients: int) -> torch.Tensor:
        """Each row's model number r·N + i in the population (K,)."""
        return self.replica * n_clients + self.client


class AdamState:
    """Adam's moments of each client that has trained (Kingma & Ba 2015, as
    torch.optim.Adam without weight decay).  A policy keeps one across rounds,
    as a client that keeps its optimizer does; the moments are not
    privatised separately: they are functions of the noised gradients.

    Only clients that have taken a step hold moments: a client's first
    step gives it a slot (moments zero, step count zero), so the state grows
    with the clients that have trained, not with the population."""

    def __init__(self, like, n_models: int, betas=(0.9, 0.999), eps=1e-8):
        self.shapes = [tuple(p.shape[1:]) for p in like]
        self.dtype, self.device = like[0].dtype, like[0].device
        self.betas, self.eps = tuple(betas), eps
        self.slot_of = torch.full((n_models,), -1, dtype=torch.long, device=self.device)
        self.m = [torch.zeros((0, *s), dtype=self.dtype, device=self.device) for s in self.shapes]
        self.v = [torch.zeros((0, *s), dtype=self.dtype, device=self.device) for s in self.shapes]
        self.t = torch.zeros(0, dtype=torch.long, device=self.device)
        self.used = 0

    @property
    def clients(self) -> int:
        """How many clients hold moments."""
        return self.used

    def slots(self, ids: torch.Tensor) -> torch.Tensor:
        """The slots of models ``ids`` (K,), giving new ones (zero moments)
        to those that have none; capacity doubles as clients join."""
        slot = self.slot_of[ids]
        new = ids[slot < 0]
        if len(new):
            need = self.used + len(new)
            if need > self.t.shape[0]:
                cap = max(need, 2 * self.t.shape[0], 16)
                grow = lambda t: torch.cat([t, t.new_zeros((cap - t.shape[0], *t.shape[1:]))])  # noqa: E731
                self.m, self.v, self.t = [grow(x) for x in self.m], [grow(x) for x in self.v], grow(self.t)
            self.slot_of[new] = torch.arange(self.used, need, device=self.device)
            self.used = need
            slot = self.slot_of[ids]
        return slot

    def direction(self, j, s, g):
        """Update the moments of parameter j at slots ``s`` with gradient
        g (len(s), ...); return the bias-corrected step m̂ / (√v̂ + eps).
        The caller advances ``t`` for the step first."""
        b1, b2 = self.betas
        m = self.m[j][s] * b1 + g * (1 - b1)
        v = self.v[j][s] * b2 + g * g * (1 - b2)
        self.m[j][s], self.v[j][s] = m, v
        t = self.t[s].to(g.dtype).reshape(-1, *[1] * (g.ndim - 1))
        return (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + self.eps)


def entropy_seed() -> int:
    """64 bits from the operating system's entropy (``secrets``): the seed of
    a real release's generator, drawn afresh for each replica and stored
    nowhere (docs/theory.md §5.4)."""
    import secrets

    return secrets.randbits(64)


class Engine:
    def __init__(self, net: Model, data: Dataset, parts: list, n_replicas: int, device="cpu",
                 seeds=None, dtype=torch.float32, secure: bool = False):
        self.net, self.data, self.device, self.dtype = net, data, torch.device(device), dtype
        self.N, self.R = len(parts), int(n_replicas)
        self.M = self.N * self.R                                      # rows of the full cohort
        self.x = data.x_train.to(self.device, dtype)
        self.y = data.y_train.to(self.device)
        self.x_flat = self.x.reshape(len(self.x), -1)                # index_select is 2x faster than x[idx]
        # cached input norms, for a model whose first layer is linear (LR)
        self.x_sq = self.x_flat.pow(2).sum(1) if net.wants_input_norms else None
        self.x_test = data.x_test.to(self.device, dtype)
        self.y_test = data.y_test.to(self.device)
        sizes = np.array([len(p) for p in parts])
        if np.any(sizes == 0):
            raise ValueError("every client needs at least one sample")
        self.n_max = int(sizes.max())
        # each client's samples, one after the other (client i's are
        # order[start[i]:start[i] + n_i]): memory of the data, not N × n_max
        flat = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
        self.order = torch.from_numpy(flat).to(self.device)
        self.start = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]])).to(self.device)
        self.client_n = torch.from_numpy(sizes).to(self.device)
        seeds = list(range(self.R)) if seeds is None else list(seeds)
        if len(seeds) != self.R:
            raise ValueError("one seed per replica")
        # a real release (``secure``): every generator from the operating
        # system's entropy, its own for each replica, kept nowhere but here;
        # the seeds then only label the replicas.  A seeded run is a
        # simulation: anyone with its seed can draw its noise again
        self.secure = bool(secure)
        gen_seeds = [entropy_seed() for _ in seeds] if self.secure else [int(s) for s in seeds]
        cpu_seeds = [entropy_seed() for _ in seeds] if self.secure else [int(s) + 7919 for s in seeds]
        self.gens = [torch.Generator(device=self.device).manual_seed(s) for s in gen_seeds]
        self._cpu_gens = [torch.Generator().manual_seed(s) for s in cpu_seeds]
        del gen_seeds, cpu_seeds
        self._everyone = None
        self.pairs = np.zeros(self.R, dtype=np.int64)   # Box–Muller pairs drawn, per replica

    # ------------------------------------------------------------ cohorts
    def everyone(self) -> Cohort:
        """The full cohort: every client of every replica."""
        if self._everyone is None:
            d = self.device
            self._everyone = Cohort(torch.arange(self.R, device=d).repeat_interleave(self.N),
                                    torch.arange(self.N, device=d).repeat(self.R), np.full(self.R, self.N),
                                    torch.ones(self.R, self.N, dtype=torch.bool, device=d), True)
        return self._everyone

    def cohort(self, mask) -> Cohort:
        """The cohort of the clients marked in ``mask`` (R, N)."""
        mask = torch.as_tensor(mask, device=self.device).reshape(self.R, self.N)
        if bool(mask.all()):
            return self.everyone()
        rc = torch.nonzero(mask)                 # replica-major, clients in order
        counts = mask.sum(1).cpu().numpy()
        return Cohort(rc[:, 0], rc[:, 1], counts, mask, False)

    def replica_sum(self, values, cohort: Cohort):
        """Σ over each replica's rows of ``values`` (K, ...) -> (R, ...);
        zero for a replica without rows.  In the order of the rows, one
        replica at a time (no atomics: reproducible on CUDA too)."""
        if cohort.full:
            return values.reshape(self.R, self.N, *values.shape[1:]).sum(1)
        out = values.new_zeros((self.R, *values.shape[1:]))
        b = cohort.bounds
        for r in np.flatnonzero(cohort.counts):
            out[r] = values[b[r]:b[r + 1]].sum(0)
        return out

    # ------------------------------------------------------------ parameters
    def init_global(self) -> list[torch.Tensor]:
        """Each replica's initial global model (its own seed): (R, ...) tensors."""
        per = [self.net.init(1, g) for g in self._cpu_gens]
        return [torch.cat([p[j] for p in per]).to(self.device, self.dtype) for j in range(len(per[0]))]

    def broadcast(self, glob, cohort: Cohort | None = None):
        """(R, ...) -> (K, ...): every row starts from its replica's model."""
        c = cohort or self.everyone()
        if c.full:
            return [g.repeat_interleave(self.N, dim=0) for g in glob]
        return [g.index_select(0, c.replica) for g in glob]

    # ------------------------------------------------------------ sampling
    def uniform(self, shape_per_replica):
        """Uniform draws (R, *shape) from each replica's own generator."""
        out = torch.empty((self.R, *shape_per_replica), device=self.device)
        for r, g in enumerate(self.gens):
            out[r].uniform_(generator=g)  # written in place: no stacking copy
        return out

    def _uniform_rows(self, c: Cohort, widths, drawing, fill):
        """(K, W) uniforms: replica r's rows draw ``widths[r]`` values each
        from its generator (one call, row after row), where ``drawing[r]``;
        the rest of the tensor is ``fill``.  W = the widest drawn."""
        b = c.bounds
        live = [r for r in range(self.R) if drawing[r] and c.counts[r] > 0]
        W = max([int(widths[r]) for r in live], default=1)
        out = torch.full((c.size, W), float(fill), device=self.device)
        for r in live:
            if widths[r] == W:
                out[b[r]:b[r + 1]].uniform_(generator=self.gens[r])
            else:
                out[b[r]:b[r + 1], :widths[r]] = torch.empty(
                    (int(c.counts[r]), int(widths[r])), device=self.device).uniform_(generator=self.gens[r])
        return out

    def _per_replica_max(self, values, c: Cohort) -> np.ndarray:
        """max of ``values`` (K,) over each replica's rows (R,), 0 without rows."""
        out = torch.zeros(self.R, dtype=values.dtype, device=self.device)
        out.scatter_reduce_(0, c.replica, values, "amax", include_self=True)
        return out.cpu().numpy()

    def _drawing(self, drawing):
        """Which replicas draw (R,) bool: all unless told."""
        return np.ones(self.R, dtype=bool) if drawing is None else np.asarray(drawing, dtype=bool)

    def normal(self, shape_per_replica):
        """Standard normal draws (R, *shape), each replica from its own
        generator: every DP mechanism's noise comes from here.

        Each value is one normal of :func:`gaussian_pairs`: Box–Muller on
        float64 uniforms of the replica's own generator, computed in
        float64 and rounded to the engine's dtype.  Its magnitude is bounded
        by NOISE_BOUND ≈ 37.47 (u₁ ≥ 2⁻¹⁰¹³, its lowest cell re-drawn, see
        :func:`gaussian_pairs`), and it is the ideal Gaussian's value except
        with probability 2⁻¹⁰¹³ a pair: over a run that draws n pairs the
        truncation adds at most (1 + e^ε)·n·2⁻¹⁰¹³ to δ
        (:func:`paretofl.theory.float_noise.float_delta`, docs/theory.md
        §5.4).  What floating-point noise leaves open beyond its range (its
        values lie on a grid, Mironov 2012) stays open."""
        return self._normals([shape_per_replica], np.ones(self.R, dtype=int))[0].reshape(
            self.R, *shape_per_replica)

    def _normals(self, tails, counts, drawing=None):
        """Standard normals as :meth:`normal` draws them, (K, *tail) for each
        tail, K = Σ counts: replica r draws (counts[r], *tail) for each
        tail, in order, from its own generator (where ``drawing[r]``; zeros
        elsewhere): ⌈m/2⌉ Box–Muller pairs for a block of m values, the
        cosines first, then the sines.  A generator draws serially, so where
        a replica draws at least SPREAD_NOISE_VALUES values the replicas go
        on the CPU's threads, one per task (replicas are independent: the
        values do not depend on the threads; tested).  ``self.pairs`` (R,)
        counts the pairs each replica has drawn."""
        counts = np.asarray(counts, dtype=int)
        drawing = self._drawing(drawing)
        b = np.concatenate([[0], np.cumsum(counts)])
        K = int(b[-1])
        sizes = [math.prod(t) for t in tails]
        outs = [torch.zeros((K, *t), device=self.device, dtype=self.dtype) for t in tails]

        def draw(r):
            g = self.gens[r]
            for o, p in zip(outs, sizes):
                m = int(counts[r]) * p
                if m == 0:
                    continue
                h = (m + 1) // 2
                u = torch.empty((2, h), dtype=torch.float64, device=self.device).uniform_(generator=g)
                cos, sin = gaussian_pairs(u, lambda k: torch.empty(
                    k, dtype=torch.float64, device=self.device).uniform_(generator=g))
                flat = o[b[r]:b[r + 1]].view(-1)
                flat[:h].copy_(cos)
                flat[h:].copy_(sin[:m - h])
                self.pairs[r] += h

        live = [r for r in range(self.R) if drawing[r] and counts[r] > 0]
        if int(counts.max(initial=0)) * sum(sizes) < SPREAD_NOISE_VALUES:
            for r in live:
                draw(r)
        else:
            self._spread(draw, live)
        return outs

    def poisson_batches(self, rate: torch.Tensor, cohort: Cohort | None = None, drawing=None):
        """Poisson sampling: each sample of a row's client is in the batch
        with probability ``rate`` (K,), independently.  Drawn exactly, in
        O(batch) per row, as geometric gaps between selected positions: a
        replica draws k uniforms a row, k its rows' largest mean batch + 6
        standard deviations, and draws again, twice as many, in the rare
        case that some row needs more.  ``drawing`` (R,) bool: the replicas
        that draw this step (the others' rows get empty batches).
        Returns (idx (K, B), weight (K, B)); padding has weight 0."""
        c = cohort or self.everyone()
        drawing = self._drawing(drawing)
        n = self.client_n[c.client]
        rate = torch.clamp(rate, max=1.0)
        means = self._per_replica_max(rate * n, c)
        widths = np.array([int(m + 6 * m**0.5 + 16) for m in means])
        lq = torch.log1p(-rate.clamp(max=1 - 1e-9))[:, None]
        todo = drawing & (c.counts > 0)
        pos = None
        while True:
            u = self._uniform_rows(c, widths, todo, fill=0.5).clamp_(min=1e-12)
            gaps = torch.where(rate[:, None] >= 1, torch.ones_like(u), torch.floor(torch.log(u) / lq) + 1)
            p = torch.cumsum(gaps, 1) - 1
            row_w = torch.as_tensor(widths, device=self.device)[c.replica]
            last = p.gather(1, (row_w - 1).clamp(max=p.shape[1] - 1)[:, None])[:, 0]
            # columns past a row's own width were not drawn: never selected
            p = p.masked_fill(torch.arange(p.shape[1], device=self.device)[None, :] >= row_w[:, None], math.inf)
            short = (last < n).to(torch.int64)
            bad = self.replica_sum(short, c).cpu().numpy() > 0 if c.size else np.zeros(self.R, bool)
            bad &= todo
            pos = p if pos is None else _merge_rows(pos, p, c, todo)
            if not bad.any():
                break
            todo, widths = bad, np.where(bad, 2 * widths, widths)   # rare: those replicas draw again, longer
        keep = pos < n[:, None]
        keep &= torch.as_tensor(drawing, device=self.device)[c.replica][:, None]
        B = max(1, int(keep.sum(1).max())) if c.size else 1
        if pos.shape[1] < B:
            pos = torch.cat([pos, pos.new_full((pos.shape[0], B - pos.shape[1]), math.inf)], 1)
        pos, keep = pos[:, :B], keep[:, :B]
        at = torch.where(keep, pos, torch.zeros_like(pos)).long()
        idx = self.order[self.start[c.client][:, None] + at]
        return idx, keep.to(self.dtype)

    def fixed_batches(self, batch: int, cohort: Cohort | None = None, drawing=None):
        """Uniform batches of a fixed size (with replacement across steps,
        without within a batch) — for non-private local SGD.  A replica draws
        a key for each of its largest client's positions, a row, and each row
        takes its client's smallest keys."""
        c = cohort or self.everyone()
        drawing = self._drawing(drawing)
        n = self.client_n[c.client]
        widths = self._per_replica_max(n, c)
        keys = self._uniform_rows(c, widths, drawing, fill=2.0)
        W = keys.shape[1]
        keys = keys.masked_fill(torch.arange(W, device=self.device)[None, :] >= n[:, None], 2.0)
        bsz = min(batch, W)
        order = keys.topk(bsz, dim=1, largest=False).indices
        weight = torch.arange(bsz, device=self.device)[None, :] < n[:, None]
        weight &= torch.as_tensor(drawing, device=self.device)[c.replica][:, None]
        # positions past a client's size (weight 0) read the data's first sample
        idx = torch.where(order < n[:, None], self.order[(self.start[c.client][:, None] + order).clamp(
            max=len(self.order) - 1)], torch.zeros_like(order))
        return idx, weight.to(self.dtype)

    # ------------------------------------------------------------ local work
    def local_steps(self, params, steps, lr, batch_size=None, dpsgd: DPSGD | None = None, prox=None, adam=None,
                    cohort: Cohort | None = None):
        """Run up to max(steps) local steps on the K rows of ``cohort``
        (every client of every replica by default); ``params`` are the
        rows' models (K, ...).

        * DP-SGD (``dpsgd``, a :class:`DPSGD`): Poisson batches, each
          per-sample gradient clipped to C, N(0, σ²C²) added to the sum,
          divided by the public batch divisor.
        * plain SGD (``dpsgd`` None): batches of ``batch_size``, mean gradient.
        Settings are scalars, per replica (R,) or per row (K,).
        ``steps`` (K,) lets rows stop early (e.g. an adaptive τ per replica,
        or local epochs of clients of different sizes);
        ``prox`` = (μ, anchor) adds the proximal term μ/2‖w - anchor‖² (NbAFL).
        ``adam`` (an :class:`AdamState`): Adam steps on that gradient with
        learning rate ``lr`` instead of SGD steps; the rows' moments advance
        in place.
        Returns (params, StepStats of each row's last step; zeros for a
        row that took no step).
        """
        if dpsgd is not None and not isinstance(dpsgd, DPSGD):
            raise ValueError(f"dpsgd must be a paretofl.fl.engine.DPSGD, got {type(dpsgd).__name__}")
        if dpsgd is not None and dpsgd.batch_divisor is None:
            raise ValueError("DP-SGD needs a public batch_divisor (e.g. the expected batch of a declared size)")
        batch_rate, clip, batch_divisor, sigma = (None,) * 4 if dpsgd is None else (
            dpsgd.batch_rate, dpsgd.clip, dpsgd.batch_divisor, dpsgd.sigma)
        if prox is not None and (not isinstance(prox, tuple) or len(prox) != 2):
            raise ValueError(f"prox must be (mu, anchor): the proximal term's weight and the models it pulls "
                             f"towards, got {prox!r}")
        prox_mu, anchor = (None, None) if prox is None else prox
        c = cohort or self.everyone()
        K = c.size
        steps = torch.as_tensor(steps, device=self.device).reshape(-1)
        if steps.numel() == 1:
            steps = steps.expand(K)
        params = [p.clone() for p in params]
        last_loss = torch.zeros(K, device=self.device, dtype=self.dtype)
        last_cns = torch.zeros(K, device=self.device, dtype=self.dtype)
        # the settings per row (K,), once
        rows = dict(lr=self.vec(lr, c), clip=None if clip is None else self.vec(clip, c),
                    sigma=None if sigma is None else self.vec(sigma, c),
                    divisor=None if clip is None else self.vec(batch_divisor, c),
                    prox_mu=None if prox_mu is None else self.vec(prox_mu, c),
                    slots=adam.slots(c.ids(self.N)) if adam is not None else None)
        # a replica draws at each step its rows take, for all its rows, so
        # its random stream depends on its own cohort and settings only; only
        # the rows that take the step are computed
        own_steps = self._per_replica_max(steps, c) if K else np.zeros(self.R)
        for s in range(int(own_steps.max()) if K else 0):
            drawing = own_steps > s
            if clip is not None:
                idx, w = self.poisson_batches(self.vec(batch_rate, c), c, drawing)
            else:
                idx, w = self.fixed_batches(int(batch_size), c, drawing)
            a = torch.nonzero(steps > s).reshape(-1)
            full = len(a) == K
            sub = (lambda t: t) if full else (lambda t: t[a])  # noqa: E731
            p_a = params if full else [p[a] for p in params]
            cl = sub(rows["clip"]) if clip is not None else None
            # a model that draws random numbers (dropout) gets a seed per row
            # from its replica's generator, drawn for all rows as batches are
            seeds = sub(self.model_seeds(c, drawing)) if self.net.stochastic else None
            grads, norms, loss = self._grads_chunked(p_a, sub(idx), sub(w), cl, seeds)
            if clip is not None:
                denom = sub(rows["divisor"])
                if sigma is not None:
                    std = sub(rows["sigma"]) * cl
                    noise = [sub(n) for n in self.noise_like(params, c, drawing)]
                    grads = [g + n * _col(std, g) for g, n in zip(grads, noise)]
            else:
                denom = sub(w).sum(1).clamp(min=1)
            self._descend(params, p_a, grads, (a, full, sub), denom, rows, anchor, adam)
            wa = sub(w)
            last_loss[a] = loss / wa.sum(1).clamp(min=1)
            if cl is not None:
                last_cns[a] = (torch.minimum(norms, cl[:, None]) * wa).sum(1)
        return params, StepStats(last_loss, last_cns)

    @staticmethod
    def _descend(params, p_a, grads, taking, denom, rows, anchor, adam) -> None:
        """One step on the rows ``taking`` = (a, full, sub) take, in place: SGD
        at lr/denom (with the proximal term μ·denom·(w − anchor) where asked),
        or Adam on grads/denom."""
        a, full, sub = taking
        lr = sub(rows["lr"])
        scale = lr / denom
        if adam is not None:
            slots = rows["slots"][a]
            adam.t[slots] += 1
        for j, g in enumerate(grads):
            upd = g
            if rows["prox_mu"] is not None:
                upd = upd + _col(sub(rows["prox_mu"]) * denom, g) * (p_a[j] - sub(anchor[j]))
            if adam is not None:
                params[j].index_add_(0, a, _col(lr, g) * adam.direction(j, slots, upd / _col(denom, g)), alpha=-1.0)
            elif full:
                params[j] -= _col(scale, g) * upd
            else:
                params[j].index_add_(0, a, _col(scale, g) * upd, alpha=-1.0)

    def model_seeds(self, cohort: Cohort | None = None, drawing=None):
        """One seed per row (K,), each from its replica's generator."""
        c = cohort or self.everyone()
        drawing = self._drawing(drawing)
        out = torch.zeros(c.size, dtype=torch.long, device=self.device)
        b = c.bounds
        for r, g in enumerate(self.gens):
            if drawing[r] and c.counts[r]:
                out[b[r]:b[r + 1]].random_(0, 2**62, generator=g)
        return out

    def _grads_chunked(self, params, idx, w, clip, seeds=None):
        """clipped_grads over the models in chunks of :func:`train_chunk`
        models; on CPU the chunks spread over the threads, one chunk per
        thread (each op single-threaded: small ops do not split well;
        measured 1.2x).  Chunks are independent, so the result does not
        depend on how they are scheduled."""
        B = idx.shape[1]
        M = idx.shape[0]
        size = train_chunk(self.net, self.device.type, M, B, self.dtype)

        def chunk(s):
            sl = slice(s, s + size)
            # a batch's real samples come first; padding beyond the chunk's
            # largest batch is dropped (the batch is padded to the largest of
            # all M models, ~25 % above the mean at batch 90)
            b = B if size == M else max(1, int(w[sl].sum(1).max()))
            ix, wb = idx[sl, :b], w[sl, :b]
            xb = torch.index_select(self.x_flat, 0, ix.reshape(-1)).view(*ix.shape, *self.x.shape[1:])
            g, norms, loss = self.net.clipped_grads([p[sl] for p in params], xb, self.y[ix], wb,
                                                    clip=None if clip is None else clip[sl],
                                                    x_sqnorm=None if self.x_sq is None else self.x_sq[ix],
                                                    seeds=None if seeds is None else seeds[sl])
            if b < B:
                norms = torch.cat([norms, norms.new_zeros(norms.shape[0], B - b)], 1)
            return g, norms, loss

        outs = self._spread(chunk, range(0, M, size))
        if len(outs) == 1:
            return outs[0]
        grads = [torch.cat([o[0][j] for o in outs]) for j in range(len(params))]
        return grads, torch.cat([o[1] for o in outs]), torch.cat([o[2] for o in outs])

    def _spread(self, fn, items):
        """[fn(i) for i in items]; on CPU spread over the threads, one item
        per task, each op single-threaded while they run (small ops do not
        split well).  On CUDA in order, one after the other."""
        threads = torch.get_num_threads()
        if len(items) > 1 and threads > 1 and self.device.type == "cpu":
            torch.set_num_threads(1)
            try:
                return list(_chunk_pool(threads).map(fn, items))
            finally:
                torch.set_num_threads(threads)
        return [fn(i) for i in items]

    def vec(self, v, cohort: Cohort | None = None):
        """A setting (scalar, per replica (R,) or per row (K,)) as a (K,)
        tensor over the cohort's rows (every client of every replica by
        default).  Where K = R the values are taken per row."""
        c = cohort or self.everyone()
        t = torch.as_tensor(v, dtype=self.dtype, device=self.device)
        if t.ndim == 0 or (t.shape[0] == self.R and self.R != c.size):
            return self.rows(t, c)
        if t.shape[0] != c.size:
            raise ValueError(f"a setting has {t.shape[0]} values for {self.R} replicas and {c.size} rows")
        return t

    def rows(self, v, cohort: Cohort):
        """A per-replica setting (scalar or (R,)) as a (K,) tensor: each row
        takes its replica's value."""
        t = torch.as_tensor(v, dtype=self.dtype, device=self.device)
        if t.ndim == 0:
            return t.expand(cohort.size)
        return t.repeat_interleave(self.N) if cohort.full else t[cohort.replica]

    def noise_like(self, tensors, cohort: Cohort | None = None, drawing=None):
        """Standard normal noise shaped like the cohort's (K, ...) tensors,
        each replica drawing for its own rows."""
        c = cohort or self.everyone()
        draws = self._normals([tuple(t.shape[1:]) for t in tensors], c.counts, drawing)
        return [z.reshape(t.shape) for z, t in zip(draws, tensors)]

    # ------------------------------------------------------------ server side
    @staticmethod
    def flat(params):
        return torch.cat([p.reshape(p.shape[0], math.prod(p.shape[1:])) for p in params], dim=1)

    def unflat(self, v, like):
        out, k = [], 0
        for p in like:
            n = p[0].numel()
            out.append(v[:, k:k + n].reshape(v.shape[0], *p.shape[1:]))
            k += n
        return out

    def clip_rows(self, v, clip):
        """Each row of a flat (K, d) tensor clipped to L2 norm ``clip``
        (scalar or (K,)): v · min(1, C/‖v‖).  Client updates (DP-FedAvg) and
        uploaded parameters (NbAFL) are clipped here.  Returns (clipped rows,
        norms before)."""
        norms = v.norm(dim=1)
        c = torch.as_tensor(clip, dtype=v.dtype, device=v.device)
        f = torch.clamp(c / (norms + 1e-12), max=1.0)
        return v * f[:, None], norms

    def aggregate(self, values, weights, cohort: Cohort | None = None, noise_std=None):
        """Σ_k weights[k] · values[k] over each replica's rows (K, d) ->
        (R, d), + N(0, noise_std²) per coordinate (noise drawn from each
        replica's generator); zero (plus noise) for a replica without rows."""
        c = cohort or self.everyone()
        w = weights.to(self.dtype)
        if c.full:
            out = torch.einsum("rn,rnd->rd", w.reshape(self.R, self.N), values.reshape(self.R, self.N, -1))
        else:
            out = values.new_zeros((self.R, values.shape[-1]))
            b = c.bounds
            for r in np.flatnonzero(c.counts):     # one replica at a time: reproducible, no atomics
                out[r] = w[b[r]:b[r + 1]] @ values[b[r]:b[r + 1]]
        if noise_std is not None:
            std = torch.as_tensor(noise_std, dtype=self.dtype, device=self.device).reshape(-1, 1)
            out = out + std * self.normal((values.shape[-1],))
        return out

    def sample_clients(self, rate):
        """Poisson client selection per replica: (R, N) bool, from N
        uniforms a replica (a few milliseconds at N = 10⁶).  ``rate``: one
        per replica (R,) or one per client of each replica (R, N)."""
        u = self.uniform((self.N,))
        r = torch.as_tensor(rate, dtype=u.dtype, device=self.device)
        return u < (r.reshape(-1, 1) if r.ndim <= 1 else r)

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, glob, rows: slice = slice(None)):
        """Test (loss, accuracy), each (R,), of every replica's global model,
        on the test samples ``rows`` (all by default)."""
        x, y = self.x_test[rows], self.y_test[rows]
        tot_loss = torch.zeros(self.R, device=self.device, dtype=torch.float64)
        correct = torch.zeros(self.R, device=self.device, dtype=torch.float64)
        group, chunk = self.eval_blocks(len(y))
        for r in range(0, self.R, group):
            g = [p[r:r + group] for p in glob]
            k = g[0].shape[0]
            for s in range(0, len(y), chunk):
                xb, yb = x[s:s + chunk], y[s:s + chunk]
                logits = self.net.forward(g, xb.unsqueeze(0).expand(k, *xb.shape))
                tot_loss[r:r + k] += self.net.losses(logits, yb.expand(k, -1)).sum(1).double()
                correct[r:r + k] += (logits.argmax(-1) == yb).sum(1).double()
        return (tot_loss / len(y)).float(), (correct / len(y)).float()

    def eval_blocks(self, n):
        """(replicas, samples) per evaluation forward.  The model says how
        many replicas go together (convolutional nets on CPU one at a time:
        a plain convolution, no copy per replica, as training does); the
        samples per forward keep its largest activations within
        EVAL_BLOCK_BYTES.  All replicas' test
        chunks at once (2500 samples) took 6.8 GB and 33 s for 48 LeNets
        here, 10.5 GB and 142 s for 8 CIFAR nets."""
        group = self.net.eval_group(self.device.type, self.R)
        budget = EVAL_BLOCK_BYTES.get(self.device.type, EVAL_BLOCK_BYTES["cuda"])
        per_sample = 2 * self.net.max_activation * torch.finfo(self.dtype).bits // 8   # a layer's input and output
        return group, max(1, min(n, budget // (group * per_sample)))


#: bytes of activations an evaluation forward may hold (a layer's input and
#: output, all replicas of its group)
EVAL_BLOCK_BYTES = {"cpu": 64 << 20, "cuda": 1 << 30}

#: normals a replica draws in one call from which the replicas' draws go on
#: the CPU's threads (see Engine._normals)
SPREAD_NOISE_VALUES = 1 << 18

def gaussian_pairs(u: torch.Tensor, more) -> tuple[torch.Tensor, torch.Tensor]:
    """Box–Muller in float64: (R cos θ, R sin θ), R = √(−2 ln u₁), θ = 2π U₂,
    from ``u`` (2, h) float64 uniforms in [0, 1) (overwritten), u₁ = 1 − U₁
    in (0, 1].  ``more(k)`` gives k further uniforms of the same generator.

    The tail is not cut at the uniforms' grid: where u₁ ≤ g = 2⁻⁴⁰ (one pair
    in 10¹²) it is re-drawn as g·(1 − U) — a uniform on (0, 1] given that it
    is at most g is g times a uniform on (0, 1] — and so on, at most
    NOISE_LEVELS times; at the last level 1 − U is held at 2⁻⁵³ or more
    (which a float64 U < 1 gives anyway).  With exact uniforms the u₁ used is
    max(u, 2^U_MIN_LOG2) of a uniform u on (0, 1]: the pair is the ideal
    Box–Muller pair (two independent standard normals) except with
    probability 2^U_MIN_LOG2 = 2⁻¹⁰¹³, and |R| ≤ NOISE_BOUND ≈ 37.47
    (docs/theory.md §5.4, :func:`paretofl.theory.float_noise.float_delta`)."""
    g = 2.0 ** -NOISE_CELL_BITS
    u1 = torch.rsub(u[0], 1.0)                       # exact: U on a 2⁻⁵³ grid
    low = torch.nonzero(u1 <= g).squeeze(1)
    level = 1
    while low.numel():
        v = torch.rsub(more(low.numel()), 1.0)
        if level == NOISE_LEVELS:
            v.clamp_(min=2.0 ** -53)
        u1[low] = v * 2.0 ** (-NOISE_CELL_BITS * level)   # a power of two: exact, no underflow
        if level == NOISE_LEVELS:
            break
        low, level = low[v <= g], level + 1
    r = u1.log_().mul_(-2.0).sqrt_()
    theta = u[1].mul_(2.0 * math.pi)
    return torch.cos(theta).mul_(r), theta.sin_().mul_(r)


#: bytes the largest per-sample tensor of a training step may take over all
#: models of one chunk, on CUDA (see train_chunk)
TRAIN_CHUNK_BYTES = {"cuda": 1 << 30}


def _merge_rows(old, new, c: Cohort, take):
    """Rows of replicas ``take`` from ``new``, the others from ``old``
    (positions; the narrower padded with +inf: never selected)."""
    W = max(old.shape[1], new.shape[1])

    def pad(t):
        return torch.cat([t, t.new_full((t.shape[0], W - t.shape[1]), math.inf)], 1) if t.shape[1] < W else t

    rows = torch.as_tensor(take, device=old.device)[c.replica][:, None]
    return torch.where(rows, pad(new), pad(old))


def train_chunk(net: Model, device_type: str, M: int, B: int, dtype=torch.float32) -> int:
    """Models per clipped_grads call, for M models at padded batch B.

    CPU: what the model asks for (:meth:`Net.cpu_chunk`: convolutional nets
    one model per chunk, the chunks spread over the threads).  CUDA:
    as many models as keep the step's largest per-sample tensor (an
    activation or a convolution's per-sample weight gradients, over all
    models of the chunk) within TRAIN_CHUNK_BYTES — which also keeps it
    well under 2³¹ values, past which PyTorch's CUDA convolution refuses to
    run (measured on an H100: 5,120 LeNets at batch ≈ 110 in one call
    failed with "canUse32BitIndexMath")."""
    if device_type == "cpu":
        return max(1, net.cpu_chunk(M, B))
    budget = TRAIN_CHUNK_BYTES.get(device_type, TRAIN_CHUNK_BYTES["cuda"])
    per_model = max(B, 1) * net.max_per_sample * torch.finfo(dtype).bits // 8
    return max(1, min(M, budget // per_model))


def _col(v, g):
    """A per-row vector (K,) shaped to broadcast over g (K, ...)."""
    return v.reshape(-1, *[1] * (g.ndim - 1))
