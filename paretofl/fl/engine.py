"""The vectorised DP federated round: every client of every replica at once.

M = R × N models live in stacked tensors (replica-major: model m = r·N + i is
client i of replica r).  One call of :meth:`Engine.local_steps` runs a local
step for all M models with one batched forward/backward
(:meth:`paretofl.fl.models.Net.clipped_grads`).  Each replica has its own
random generator, so a replica's run does not depend on which others ran
beside it (tested), and its own settings: σ, C, learning rate, batch rate,
client rate, number of local steps.

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


@dataclass
class StepStats:
    loss: torch.Tensor              # (M,) mean training loss of the last local step
    clipped_norm_sum: torch.Tensor  # (M,) Σ_b min(‖g_b‖, C) over the last batch (sensitivity C)


@dataclass
class AdamState:
    """Adam's moments for each of the M models (Kingma & Ba 2015, as
    torch.optim.Adam without weight decay).  A policy keeps one across rounds,
    as a client that keeps its optimizer does; the moments are not
    privatised separately: they are functions of the noised gradients."""

    m: list
    v: list
    t: torch.Tensor                 # (M,) steps each model has taken
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8

    @classmethod
    def zeros(cls, params, betas=(0.9, 0.999), eps=1e-8):
        return cls([torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params],
                   torch.zeros(params[0].shape[0], dtype=torch.long, device=params[0].device), tuple(betas), eps)

    def direction(self, j, a, g):
        """Update the moments of parameter j for models ``a`` with gradient
        g (len(a), ...); return the bias-corrected step m̂ / (√v̂ + eps).
        The caller advances ``t`` for the step first."""
        b1, b2 = self.betas
        m = self.m[j][a] * b1 + g * (1 - b1)
        v = self.v[j][a] * b2 + g * g * (1 - b2)
        self.m[j][a], self.v[j][a] = m, v
        t = self.t[a].to(g.dtype).reshape(-1, *[1] * (g.ndim - 1))
        return (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + self.eps)


class Engine:
    def __init__(self, net: Model, data: Dataset, parts: list, n_replicas: int, device="cpu",
                 seeds=None, dtype=torch.float32):
        self.net, self.data, self.device, self.dtype = net, data, torch.device(device), dtype
        self.N, self.R = len(parts), int(n_replicas)
        self.M = self.N * self.R
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
        table = np.zeros((self.N, self.n_max), dtype=np.int64)
        for i, p in enumerate(parts):
            table[i, : len(p)] = p
        self.client_idx = torch.from_numpy(table).to(self.device)
        self.client_n = torch.from_numpy(sizes).to(self.device)
        self.valid = torch.arange(self.n_max, device=self.device)[None, :] < self.client_n[:, None]
        seeds = list(range(self.R)) if seeds is None else list(seeds)
        if len(seeds) != self.R:
            raise ValueError("one seed per replica")
        self.gens = [torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds]
        self._cpu_gens = [torch.Generator().manual_seed(int(s) + 7919) for s in seeds]

    # ------------------------------------------------------------ parameters
    def init_global(self) -> list[torch.Tensor]:
        """Each replica's initial global model (its own seed): (R, ...) tensors."""
        per = [self.net.init(1, g) for g in self._cpu_gens]
        return [torch.cat([p[j] for p in per]).to(self.device, self.dtype) for j in range(len(per[0]))]

    def broadcast(self, glob):
        """(R, ...) -> (M, ...): every client starts from its replica's model."""
        return [g.repeat_interleave(self.N, dim=0) for g in glob]

    # ------------------------------------------------------------ sampling
    def uniform(self, shape_per_replica):
        """Uniform draws (R, *shape) from each replica's own generator."""
        out = torch.empty((self.R, *shape_per_replica), device=self.device)
        for r, g in enumerate(self.gens):
            out[r].uniform_(generator=g)  # written in place: no stacking copy
        return out

    def normal(self, shape_per_replica):
        """Standard normal draws (R, *shape), each replica from its own
        generator: every DP mechanism's noise comes from here.

        Each value is (Z₁ + Z₂)/√2 of two of PyTorch's normals, as Opacus
        draws noise in its secure mode.  PyTorch's float32 ``normal_`` is
        Box–Muller on 24-bit uniforms, so on CPU |Z| never exceeds
        √(48 ln 2) ≈ 5.768 (1.5·10⁹ draws here: largest 5.7681, 8 beyond
        5.7 where a Gaussian gives 18).  Noise that is bounded fails where a
        neighbour's output lands beyond the bound, with probability about
        q·P(Z > 5.768 − 1/z) per step at noise multiplier z: over paper
        002's 317 steps (z = 1.1, q = 0.015) 2.8·10⁻⁶, a quarter of
        δ = 10⁻⁵, and more than δ at z ≤ 0.8 with q·T ≥ 50 — outside the
        accountant's ε.  The sum reaches 8.16 with a tail no heavier than the
        Gaussian's: the same term is 4·10⁻¹³ a step at z = 1 and 4·10⁻¹⁰ at
        z = 0.5.  It costs a second draw (and what floating-point noise
        leaves open beyond its range, Mironov 2012, stays open)."""
        return self._normals([shape_per_replica])[0]

    def _normals(self, shapes):
        """Standard normals (R, *shape) for each shape, as :meth:`normal`
        draws them: each replica draws all of its shapes, in order, from its
        own generator.  A generator draws serially, so where a replica draws
        at least SPREAD_NOISE_VALUES values the replicas go on the CPU's
        threads, one per task (replicas are independent: the values do not
        depend on the threads; tested).  Measured in one process, old and
        new code alternated, on the benchmark's 4 replicas: LeNet's step
        285 → 273–277 ms, its noise (1.2M values a replica) 21 → 14 ms.
        LR's (157k a replica) stays serial: drawn in tasks, its step went
        7.7 → 8.2 ms — the threads' hand-over cost more than it saved."""
        pairs = [torch.empty((self.R, 2, *s), device=self.device, dtype=self.dtype) for s in shapes]
        c = math.sqrt(0.5)
        if 2 * sum(math.prod(s) for s in shapes) < SPREAD_NOISE_VALUES:
            for r in range(self.R):
                for z in pairs:
                    z[r].normal_(generator=self.gens[r])   # written in place: no stacking copy
            return [(z[:, 0] + z[:, 1]).mul_(c) for z in pairs]
        outs = [torch.empty((self.R, *s), device=self.device, dtype=self.dtype) for s in shapes]

        def draw(r):   # the same draws, and the sum formed in the task
            for z, o in zip(pairs, outs):
                z[r].normal_(generator=self.gens[r])
                torch.add(z[r, 0], z[r, 1], out=o[r]).mul_(c)

        self._spread(draw, range(self.R))
        return outs

    def poisson_batches(self, rate: torch.Tensor):
        """Poisson sampling: each sample of client i is in the batch with
        probability ``rate`` (M,), independently.  Drawn exactly, in
        O(batch) per model, as geometric gaps between selected positions.
        Returns (idx (M, B), weight (M, B)); padding has weight 0."""
        n = self.client_n.repeat(self.R)
        rate = torch.clamp(rate, max=1.0)
        mean = float((rate * n).max())
        k = int(mean + 6 * mean**0.5 + 16)
        while True:
            u = self.uniform((self.N, k)).reshape(self.M, k).clamp_(min=1e-12)
            lq = torch.log1p(-rate.clamp(max=1 - 1e-9))[:, None]
            gaps = torch.where(rate[:, None] >= 1, torch.ones_like(u), torch.floor(torch.log(u) / lq) + 1)
            pos = torch.cumsum(gaps, 1) - 1
            if bool((pos[:, -1] >= n).all()):
                break
            k *= 2  # rare: some model may select more than k samples; draw again, longer
        keep = pos < n[:, None]
        B = max(1, int(keep.sum(1).max()))
        pos, keep = pos[:, :B].long(), keep[:, :B]
        src = self.client_idx.repeat(self.R, 1)
        idx = torch.gather(src, 1, torch.where(keep, pos, torch.zeros_like(pos)))
        return idx, keep.to(self.dtype)

    def fixed_batches(self, batch: int):
        """Uniform batches of a fixed size (with replacement across steps,
        without within a batch) — for non-private local SGD."""
        keys = self.uniform((self.N, self.n_max)).reshape(self.M, self.n_max)
        keys = keys.masked_fill(~self.valid.repeat(self.R, 1), 2.0)
        b = min(batch, self.n_max)
        order = keys.topk(b, dim=1, largest=False).indices
        src = self.client_idx.repeat(self.R, 1)
        idx = torch.gather(src, 1, order)
        weight = (torch.arange(b, device=self.device)[None, :] < self.client_n.repeat(self.R)[:, None]).to(self.dtype)
        return idx, weight

    # ------------------------------------------------------------ local work
    def local_steps(self, params, steps, lr, batch_rate=None, sigma=None, clip=None, batch_size=None,
                    prox_mu=None, anchor=None, batch_divisor=None, adam=None):
        """Run up to max(steps) local steps on all M models.

        * DP-SGD (``clip`` given): Poisson batches at ``batch_rate``, each
          per-sample gradient clipped to ``clip``, N(0, σ²C²) added to the
          sum, divided by ``batch_divisor`` (M,): a public number, e.g. the
          expected batch of a declared size, never the data's own count.
        * plain SGD (``clip`` None): batches of ``batch_size``, mean gradient.
        ``steps`` (M,) lets models stop early (e.g. an adaptive τ per replica);
        ``prox_mu`` adds the proximal term μ/2‖w - anchor‖² (NbAFL).
        ``adam`` (an :class:`AdamState`): Adam steps on that gradient with
        learning rate ``lr`` instead of SGD steps; its moments advance in place.
        Returns (params, StepStats of each model's last step; zeros for a
        model that took no step).
        """
        if clip is not None and batch_divisor is None:
            raise ValueError("DP-SGD needs a public batch_divisor (e.g. the expected batch of a declared size)")
        steps = torch.as_tensor(steps, device=self.device).reshape(-1)
        if steps.numel() == 1:
            steps = steps.expand(self.M)
        lr = self.vec(lr)
        params = [p.clone() for p in params]
        last_loss = torch.zeros(self.M, device=self.device, dtype=self.dtype)
        last_cns = torch.zeros(self.M, device=self.device, dtype=self.dtype)
        cl_all = self.vec(clip) if clip is not None else None
        col = lambda v, g: v.reshape(-1, *[1] * (g.ndim - 1))  # noqa: E731
        for s in range(int(steps.max()) if steps.numel() else 0):
            # every replica draws its batches (and noise) for all its clients,
            # so its random stream does not depend on who is active; only the
            # active models are computed (unselected clients cost nothing)
            if clip is not None:
                idx, w = self.poisson_batches(self.vec(batch_rate))
            else:
                idx, w = self.fixed_batches(int(batch_size))
            a = torch.nonzero(steps > s).reshape(-1)
            full = len(a) == self.M
            sub = (lambda t: t) if full else (lambda t: t[a])  # noqa: E731
            p_a = params if full else [p[a] for p in params]
            cl = sub(cl_all) if cl_all is not None else None
            # a model that draws random numbers (dropout) gets a seed per model
            # from its replica's generator, drawn for all models as batches are
            seeds = sub(self.model_seeds()) if self.net.stochastic else None
            grads, norms, loss = self._grads_chunked(p_a, sub(idx), sub(w), cl, seeds)
            if clip is not None:
                denom = sub(self.vec(batch_divisor))
                if sigma is not None:
                    std = sub(self.vec(sigma)) * cl
                    noise = [sub(n) for n in self.noise_like(params)]
                    grads = [g + n * col(std, g) for g, n in zip(grads, noise)]
            else:
                denom = sub(w).sum(1).clamp(min=1)
            scale = sub(lr) / denom
            if adam is not None:
                adam.t[a] += 1
            for j, g in enumerate(grads):
                upd = g
                if prox_mu is not None:
                    upd = upd + col(sub(self.vec(prox_mu)) * denom, g) * (p_a[j] - sub(anchor[j]))
                if adam is not None:
                    params[j].index_add_(0, a, col(sub(lr), g) * adam.direction(j, a, upd / col(denom, g)),
                                         alpha=-1.0)
                elif full:
                    params[j] -= col(scale, g) * upd
                else:
                    params[j].index_add_(0, a, col(scale, g) * upd, alpha=-1.0)
            wa = sub(w)
            last_loss[a] = loss / wa.sum(1).clamp(min=1)
            if cl is not None:
                last_cns[a] = (torch.minimum(norms, cl[:, None]) * wa).sum(1)
        stats = StepStats(last_loss, last_cns)
        return params, stats

    def model_seeds(self):
        """One seed per model (M,), each from its replica's generator."""
        out = torch.empty((self.R, self.N), dtype=torch.long, device=self.device)
        for r, g in enumerate(self.gens):
            out[r].random_(0, 2**62, generator=g)
        return out.reshape(self.M)

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

    def vec(self, v):
        """A setting (scalar, per replica (R,) or per model (M,)) as an (M,) tensor."""
        t = torch.as_tensor(v, dtype=self.dtype, device=self.device)
        if t.ndim == 0:
            return t.expand(self.M)
        if t.shape[0] == self.R and self.R != self.M:
            return t.repeat_interleave(self.N)
        return t

    def noise_like(self, tensors):
        """Standard normal noise shaped like (M, ...) tensors, drawn per replica."""
        draws = self._normals([(self.N, *t.shape[1:]) for t in tensors])
        return [z.reshape(t.shape) for z, t in zip(draws, tensors)]

    # ------------------------------------------------------------ server side
    @staticmethod
    def flat(params):
        return torch.cat([p.reshape(p.shape[0], -1) for p in params], dim=1)

    def unflat(self, v, like):
        out, k = [], 0
        for p in like:
            n = p[0].numel()
            out.append(v[:, k:k + n].reshape(v.shape[0], *p.shape[1:]))
            k += n
        return out

    def clip_rows(self, v, clip):
        """Each row of a flat (M, d) tensor clipped to L2 norm ``clip``
        (scalar or (M,)): v · min(1, C/‖v‖).  Client updates (DP-FedAvg) and
        uploaded parameters (NbAFL) are clipped here.  Returns (clipped rows,
        norms before)."""
        norms = v.norm(dim=1)
        f = torch.clamp(self.vec(clip) / (norms + 1e-12), max=1.0)
        return v * f[:, None], norms

    def aggregate(self, values, weights, noise_std=None):
        """Σ_i weights[r, i] · values[r, i] per replica, + N(0, noise_std²) per
        coordinate (noise drawn from each replica's generator)."""
        v = values.reshape(self.R, self.N, -1)
        out = torch.einsum("rn,rnd->rd", weights.to(self.dtype), v)
        if noise_std is not None:
            std = torch.as_tensor(noise_std, dtype=self.dtype, device=self.device).reshape(-1, 1)
            out = out + std * self.normal((v.shape[-1],))
        return out

    def sample_clients(self, rate):
        """Poisson client selection per replica: (R, N) bool."""
        u = self.uniform((self.N,))
        return u < torch.as_tensor(rate, dtype=u.dtype, device=self.device).reshape(-1, 1)

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, glob, n=None):
        """Test (loss, accuracy), each (R,), of every replica's global model,
        on the first ``n`` test samples (all by default)."""
        x, y = self.x_test[:n], self.y_test[:n]
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
SPREAD_NOISE_VALUES = 1 << 20

#: bytes the largest per-sample tensor of a training step may take over all
#: models of one chunk, on CUDA (see train_chunk)
TRAIN_CHUNK_BYTES = {"cuda": 1 << 30}


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
