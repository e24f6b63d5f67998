"""Any ``torch.nn.Module`` as an engine model, through ``torch.func``.

The engine (:mod:`paretofl.fl.engine`) trains M = replicas × clients models
side by side and asks a model for what :class:`paretofl.fl.models.Model`
lists.  :class:`paretofl.fl.models.Net` answers with hand-written kernels
for the built-in models; :class:`ModuleModel` answers for a user's module:

* the module's trainable parameters are stacked over the M models (a list of
  (M, *shape) tensors, in ``named_parameters`` order); frozen parameters and
  buffers stay the module's own, shared by all models;
* forward: :func:`torch.func.functional_call` of the module with one model's
  parameters;
* a client's summed gradient (plain local SGD): ``torch.autograd.grad`` of
  the weighted loss sum, one model at a time (``strategy="loop"``), or
  :func:`torch.func.grad` batched over the models under
  :func:`torch.func.vmap` (``strategy="vmap"``);
* per-sample clipped gradients (DP-SGD inside clients, ALI-DPFL):
  ``vmap(grad(loss of one sample))`` over the batch, each sample's gradient
  clipped to C (its norm over all trainable parameters), the clipped
  gradients summed with the batch weights.

Which strategy is faster depends on the device, the model and the step,
so ``strategy="auto"`` follows what benchmarks/generic_model.py measured
on this project's 2-core CPU: a loop (each thread a share of the models)
for convolutional modules and for per-sample gradients, ``vmap`` over the
models for the client-level gradients of the others; on CUDA, where small
per-client kernels are bound by launches, ``vmap`` (measured on an H200:
10-80x the loop, per-sample gradients included; docs/performance.md).  Modules with dropout
loop on CPU (exact per-replica masks, below).

Randomness: a module with dropout draws from PyTorch's global generator
inside ``functional_call``.  The engine then hands the model one seed per
model per step, drawn from that model's replica's own generator, and each
model runs under :func:`torch.random.fork_rng` seeded with it (the global
state is restored afterwards), so a replica's dropout masks are its own and
do not depend on which replicas ran beside it.  Under ``vmap`` over models
one chunk of models shares one seeded stream (per replica only by chunk).

What cannot be trained this way is refused before any training, in one line
naming the layer and the fix (:func:`check_module`): batch normalisation
(its statistics mix a batch's samples, so a per-sample gradient no longer
belongs to one sample, and its running buffers would be shared by all
clients), and any module whose buffers a training forward changes.
"""

from __future__ import annotations

import copy
import importlib
import math
import os
import sys
import threading

import torch
import torch.nn.functional as F
from torch import nn

from .names import is_reference  # noqa: F401  (re-exported; torch-free)

#: module types whose statistics mix the samples of a batch
_BATCH_NORMS = (nn.modules.batchnorm._BatchNorm,)
_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
STRATEGIES = ("auto", "loop", "vmap")


# --------------------------------------------------------------------------
# "package.module:function" references
# --------------------------------------------------------------------------
def resolve(ref: str, what: str):
    """The callable a "package.module:function" string names, imported with
    the current folder first on the path (added only while importing).
    ``what`` ("model factory", "data loader") names it in errors."""
    if not is_reference(ref):
        raise ValueError(f"{what} {ref!r} is not of the form package.module:function")
    mod_name, attr = ref.split(":")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # an import error, or any error the user's module raises on import
        raise ValueError(f"{what} {ref}: cannot import {mod_name} ({type(exc).__name__}: {exc})") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"{what} {ref}: {mod_name} has no attribute {attr}")
    if not callable(fn):
        raise ValueError(f"{what} {ref}: {mod_name}.{attr} is not callable")
    return fn


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------
def check_module(module, in_shape, n_classes, sample=None):
    """Refuse, before any training, a module the engine cannot train
    privately or batch: one ValueError naming the layer and the fix.
    ``sample``: a few real inputs for the trial forward (zeros otherwise).
    Returns the trial forward's output."""
    if not isinstance(module, nn.Module):
        raise ValueError(f"the model must be a torch.nn.Module, got {type(module).__name__}")
    for name, m in module.named_modules():
        where = f"layer {name or '(the model itself)'} ({type(m).__name__})"
        if isinstance(m, _BATCH_NORMS):
            ch = getattr(m, "num_features", "C")
            raise ValueError(f"{where} is batch normalisation, whose statistics mix the samples and clients of a "
                             f"batch: replace it with nn.GroupNorm(groups, {ch}) (as Opacus's ModuleValidator.fix "
                             "does) or nn.LayerNorm")
        if isinstance(m, nn.modules.instancenorm._InstanceNorm) and m.track_running_stats:
            raise ValueError(f"{where} tracks running statistics, a buffer all clients would share: "
                             "give it track_running_stats=False")
    trainable = [p for p in module.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters")
    x = torch.zeros(2, *in_shape) if sample is None else sample[:2]
    before = {k: b.detach().clone() for k, b in module.named_buffers()}
    was = module.training
    module.train()
    try:
        # under fork_rng: dropout's draws leave the user's global generator as it was
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = module(x)
    except Exception as exc:
        raise ValueError(f"the model's forward fails on inputs of shape {tuple(x.shape)} "
                         f"({type(exc).__name__}: {exc})") from None
    finally:
        module.train(was)
    for k, b in module.named_buffers():
        if k in before and (b.shape != before[k].shape or not torch.equal(b, before[k])):
            raise ValueError(f"buffer {k} changes in a training forward: buffers are shared by all clients and "
                             "cannot be private; use a layer without running state")
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"the model's forward returns {type(out).__name__}, not a tensor of logits")
    if tuple(out.shape) != (len(x), n_classes):
        raise ValueError(f"the model outputs shape {tuple(out.shape)} for {len(x)} samples of shape "
                         f"{tuple(in_shape)}; the labels need ({len(x)}, {n_classes}): one logit per class")
    if not torch.isfinite(out).all():
        raise ValueError("the model's forward gives non-finite outputs at its initialisation")
    return out


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------
class ModuleModel:
    """A user's ``nn.Module`` as M stacked models (the engine's model
    contract, :class:`paretofl.fl.models.Model`).

    ``module``: the module (a template: it is never trained itself).
    ``factory``: ``factory(in_shape, n_classes) -> nn.Module``; when given,
    each replica's initial model is a fresh factory call under its own seed
    (the module's own initialisation), else the template's submodules are
    re-initialised by their ``reset_parameters``.  ``loss``: per-sample
    loss ``loss(logits (B, classes), y (B,)) -> (B,)``; by default the
    module's own ``loss`` method if it has one, else cross-entropy.
    ``strategy``: "loop", "vmap" or "auto" (see the module docstring)."""

    wants_input_norms = False

    def __init__(self, module: nn.Module, in_shape, n_classes: int, factory=None, loss=None, name=None,
                 strategy: str = "auto", sample=None):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.in_shape, self.n_classes = tuple(int(s) for s in in_shape), int(n_classes)
        check_module(module, self.in_shape, self.n_classes, sample)
        self.module, self.factory, self.strategy = module, factory, strategy
        self._local = threading.local()
        self.name = name or type(module).__name__
        self.names = [k for k, p in module.named_parameters() if p.requires_grad]
        self.shapes = [tuple(dict(module.named_parameters())[k].shape) for k in self.names]
        self.n_params = int(sum(math.prod(s) for s in self.shapes))
        self.stochastic = any(isinstance(m, _DROPOUTS) for m in module.modules())
        self.convolutional = any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules())
        own = getattr(module, "loss", None)
        self._loss = loss if loss is not None else (own if callable(own) else None)
        self.max_activation = self._largest_activation()
        #: does the module (and its loss) run under vmap? per-sample gradients need it
        self.vmap_error = self._try_vmap(sample)
        #: values per sample a DP-SGD step holds at most: an activation, or a per-sample gradient
        self.max_per_sample = max(self.max_activation, self.n_params)

    def _try_vmap(self, sample) -> str | None:
        """Per-sample gradients of two samples under vmap, once: None if
        they run, else the reason (the first line of PyTorch's error)."""
        x = torch.zeros(2, *self.in_shape, device=self._device()) if sample is None else sample[:2]
        y = torch.zeros(len(x), dtype=torch.long, device=x.device)
        params = {k: p.detach() for k, p in self.module.named_parameters() if p.requires_grad}
        self._local.module = self.module
        try:
            self._one(params, x, y, torch.ones(len(x), device=x.device), torch.tensor(1.0, device=x.device))
            return None
        except Exception as exc:     # any failure of the user's code under vmap
            return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        finally:
            self._local.module = None

    def _largest_activation(self) -> int:
        """The largest output of any submodule in one sample's forward (values)."""
        sizes = [math.prod(self.in_shape)]

        def hook(_m, _i, out):
            if isinstance(out, torch.Tensor):
                sizes.append(out[0].numel())

        handles = [m.register_forward_hook(hook) for m in self.module.modules()]
        try:
            with torch.no_grad():
                self.module.eval()
                self.module(torch.zeros(1, *self.in_shape, device=self._device()))
        finally:
            for h in handles:
                h.remove()
        return int(max(sizes))

    def _device(self):
        for t in self.module.parameters():
            return t.device
        return torch.device("cpu")

    def fingerprint(self) -> dict:
        """What identifies the model in a results store: its class and its
        trainable parameters' names and shapes."""
        cls = type(self.module)
        return {"class": f"{cls.__module__}.{cls.__qualname__}",
                "parameters": [[k, list(s)] for k, s in zip(self.names, self.shapes)]}

    # ---------------------------------------------------------------- params
    def init(self, m: int, generator: torch.Generator, device="cpu") -> list[torch.Tensor]:
        """m initial models, each from a seed drawn from ``generator``: a
        fresh factory call (or the template re-initialised) under that seed,
        with PyTorch's global generator restored afterwards."""
        sets = []
        for _ in range(m):
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                if self.factory is not None:
                    fresh = self.factory(self.in_shape, self.n_classes)
                else:
                    fresh = copy.deepcopy(self.module)
                    for sub in fresh.modules():
                        if hasattr(sub, "reset_parameters"):
                            sub.reset_parameters()
            named = dict(fresh.named_parameters())
            try:
                sets.append([named[k].detach() for k in self.names])
            except KeyError as exc:
                raise ValueError(f"the model factory built a model without parameter {exc}: it must build "
                                 "the same architecture every call") from None
        return [torch.stack([s[j] for s in sets]).to(device) for j in range(len(self.names))]

    # -------------------------------------------------------------- functional
    def _strategy(self, device, per_sample: bool = False) -> str:
        """"auto", as measured (benchmarks/generic_model.py): on CUDA vmap;
        on CPU a loop for convolutional modules and for per-sample (DP-SGD)
        gradients, vmap over the models for the client-level gradients of
        the others (LR and an MLP: 1.4-1.6x a loop, which is at the rate of
        plain PyTorch).  Modules with dropout loop on CPU, so that each
        replica's masks are its own exactly."""
        if self.strategy != "auto":
            return self.strategy
        if self.vmap_error is not None:
            return "loop"
        if device.type != "cpu":
            return "vmap"
        return "loop" if (per_sample or self.convolutional or self.stochastic) else "vmap"

    def _template(self, device, training: bool) -> nn.Module:
        """This thread's copy of the module on ``device``.  functional_call
        swaps the parameters into the module it is given while it runs, so
        threads (the engine spreads models over the CPU's threads) must not
        share one module."""
        m = getattr(self._local, "module", None)
        if m is None:
            m = self._local.module = copy.deepcopy(self.module)
        for t in m.parameters():
            if t.device != device:
                m.to(device)
            break
        m.train(training)
        return m

    def _call(self, p: dict, x):
        return torch.func.functional_call(self._local.module, p, (x,), strict=False)

    def per_sample_loss(self, logits, y):
        """(B,) losses of logits (B, classes) against labels (B,)."""
        if self._loss is not None:
            return self._loss(logits, y).reshape(-1)
        return F.cross_entropy(logits, y, reduction="none")

    def losses(self, logits, y):
        """Per-sample losses of logits (..., classes) against y (...)."""
        return self.per_sample_loss(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).reshape(y.shape)

    def _dict(self, params, m=None):
        return {k: (p if m is None else p[m]) for k, p in zip(self.names, params)}

    @torch.no_grad()
    def forward(self, params, x):
        """Logits (M, B, classes) of x (M, B, *in_shape): evaluation mode
        (dropout off), no gradients."""
        self._template(x.device, training=False)
        if self._strategy(x.device) == "loop":
            return torch.stack([self._call(self._dict(params, m), x[m]) for m in range(x.shape[0])])
        return torch.func.vmap(lambda p, xb: self._call(p, xb))(self._dict(params), x)

    def clipped_grads(self, params, x, y, weight, clip=None, x_sqnorm=None, seeds=None):
        """The engine's step, as :meth:`paretofl.fl.models.Net.clipped_grads`:
        (summed gradients like ``params``, per-sample norms (M, B) — zeros
        without ``clip`` —, summed loss (M,)).  ``seeds`` (M,): each model's
        seed for its dropout masks (stochastic modules)."""
        if clip is not None and self.vmap_error is not None:
            raise ValueError(f"per-sample gradients (DP-SGD clients, ALI-DPFL) run the model and its loss under "
                             f"torch.func.vmap, which fails for this one ({self.vmap_error}); avoid .item(), "
                             "data-dependent control flow and in-place updates of inputs, or use a client-level "
                             "mechanism (client-aggregate, client-local)")
        if self.vmap_error is not None and self.strategy == "vmap":
            raise ValueError(f"strategy vmap: the model or its loss fails under torch.func.vmap ({self.vmap_error});"
                             " use strategy loop")
        self._template(x.device, training=True)
        M = x.shape[0]
        if clip is not None:
            clip = torch.as_tensor(clip, dtype=x.dtype, device=x.device).expand(M)
        if self._strategy(x.device, per_sample=clip is not None) == "loop":
            outs = []
            for m in range(M):
                with _seeded(None if seeds is None else seeds[m], x.device):
                    if clip is None:    # plain autograd on the thread's module: a plain PyTorch loop's speed
                        outs.append(self._one_autograd([p[m] for p in params], x[m], y[m], weight[m]))
                    else:
                        outs.append(self._one(self._dict(params, m), x[m], y[m], weight[m], clip[m]))
            grads = [torch.stack([o[0][j] for o in outs]) for j in range(len(params))]
            return grads, torch.stack([o[1] for o in outs]), torch.stack([o[2] for o in outs])
        seed = None if seeds is None else int(torch.as_tensor(seeds).reshape(-1)[0])
        with _seeded(seed, x.device):
            if clip is None:
                g, norms, loss = torch.func.vmap(lambda p, xb, yb, wb: self._one(p, xb, yb, wb, None),
                                                 randomness=self._randomness())(self._dict(params), x, y, weight)
            else:
                g, norms, loss = torch.func.vmap(self._one, randomness=self._randomness())(
                    self._dict(params), x, y, weight, clip)
        return list(g), norms, loss

    def _randomness(self):
        return "different" if self.stochastic else "error"

    def _one_autograd(self, params, x, y, w):
        """One model's summed gradient by ordinary autograd: the thread's
        module takes the model's parameters as its own (``.data``, no copy),
        runs forward and backward, and gives them back untouched."""
        module = self._local.module
        own = getattr(self._local, "params", None)
        if own is None:
            named = dict(module.named_parameters())
            own = self._local.params = [named[k] for k in self.names]
        for t, v in zip(own, params):
            t.data = v
        with torch.enable_grad():
            lo = self.per_sample_loss(module(x), y) * w
            g = torch.autograd.grad(lo.sum(), own)
        return g, torch.zeros_like(w), lo.detach().sum()

    def _one(self, p: dict, x, y, w, clip):
        """One model's (gradients (tuple, like ``p``), norms (B,), loss sum)."""
        names = self.names
        if clip is None:
            def total(q):
                lo = self.per_sample_loss(self._call(q, x), y) * w
                return lo.sum(), lo.detach().sum()

            g, loss = torch.func.grad(total, has_aux=True)(p)
            return tuple(g[k] for k in names), torch.zeros_like(w), loss

        def one_sample(q, xi, yi):
            lo = self.per_sample_loss(self._call(q, xi.unsqueeze(0)), yi.unsqueeze(0)).sum()
            return lo, lo.detach()

        g, lo = torch.func.vmap(torch.func.grad(one_sample, has_aux=True), in_dims=(None, 0, 0),
                                randomness=self._randomness())(p, x, y)
        sq = sum(g[k].reshape(len(x), -1).pow(2).sum(1) for k in names)
        norms = sq.sqrt() * w            # the norm of the weighted sample's gradient (padding: 0)
        f = torch.clamp(clip / (norms + 1e-12), max=1.0) * w
        summed = tuple(torch.tensordot(f, g[k], dims=1) for k in names)
        return summed, norms, (lo * w).sum()

    # ---------------------------------------------------------- engine hints
    def cpu_chunk(self, M: int, B: int) -> int:
        """Models per clipped_grads call on CPU: an equal share of the models
        per thread (the chunks spread over the threads, each a loop over its
        models), unless the module draws random numbers, whose global
        generator threads would share: then all models in one loop."""
        if self.stochastic:
            return M
        return max(1, -(-M // torch.get_num_threads()))

    def eval_group(self, device_type: str, R: int) -> int:
        return R


class _seeded:
    """Run a block with PyTorch's global generator seeded (dropout masks),
    restoring the global state afterwards; no-op for ``seed`` None."""

    def __init__(self, seed, device):
        self.seed, self.device, self.ctx = seed, device, None

    def __enter__(self):
        if self.seed is None:
            return
        devices = [self.device] if self.device.type == "cuda" else []
        self.ctx = torch.random.fork_rng(devices=devices)
        self.ctx.__enter__()
        torch.manual_seed(int(self.seed))

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)
        return False
