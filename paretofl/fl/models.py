"""Models as stacks of M independent parameter sets, with one-pass
per-sample gradient norms ("book-keeping", after Bu et al. 2023).

A :class:`Net` is a list of layers.  Its parameters carry a leading model
axis M (clients × replicas), so one batched forward/backward trains every
client of every replica at once.  Convolutions run forward, and back to
their inputs, through the backend's convolution (grouped by model); the
backward pass is written out by hand (no autograd) and yields, per
trainable layer, its output gradient G and, for a linear layer, its input
A, from which the per-sample gradient norms and the clipped, summed weight
gradients are formed directly:

* linear layer: per-sample grad a_i g_iᵀ, norm² = ‖a_i‖²‖g_i‖², clipped sum
  Aᵀ diag(f) G (one matmul);
* convolution: per-sample grad A_iᵀ G_i over positions, A_i the im2col of
  sample i's input (materialised during backward, a cache-sized block of
  samples at a time; the per-sample grads are small for these models),
  clipped sum Σ_i f_i A_iᵀ G_i.

Models: logistic regression, LeNet-5, the MNIST/FashionMNIST CNN of ALI-DPFL
Table V (also used by Adap DP-FL), the FL library CNN its published code
trains instead, and the CIFAR-10 CNN of its Table VI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from .names import MODELS  # noqa: F401  (re-exported)


class Model(Protocol):
    """What the engine needs of a model: M independent parameter sets,
    stacked.  Two implementations: :class:`Net` (the built-in models, with
    hand-written kernels) and :class:`paretofl.fl.modules.ModuleModel` (any
    ``torch.nn.Module``, through ``torch.func``).

    * ``init(m, generator, device)`` -- m initial parameter sets, a list of
      (m, ...) tensors, drawn from ``generator`` alone;
    * ``forward(params, x)`` -- logits (M, B, classes) of x (M, B, *in_shape),
      for evaluation (no gradients, no dropout);
    * ``clipped_grads(params, x, y, weight, clip=None, x_sqnorm=None,
      seeds=None)`` -- (the weighted loss's gradient sums like ``params``,
      per-sample gradient norms (M, B) before clipping, the summed loss
      (M,)); with ``clip``, each sample's gradient is clipped to it first;
    * ``losses(logits, y)`` -- per-sample evaluation losses;
    * sizes: ``n_params`` (trainable values of one model), ``in_shape``;
      memory hints ``max_activation`` (values per sample a forward holds at
      most) and ``max_per_sample`` (the same for a DP-SGD step);
    * engine hints: ``cpu_chunk(M, B)`` (models per call on CPU),
      ``eval_group(device_type, R)`` (replicas per evaluation forward),
      ``wants_input_norms`` (the engine caches ‖x‖² for it), ``stochastic``
      (it needs a seed per model per step);
    * ``fingerprint()`` -- class and parameter shapes, which a results store
      records so that one store never mixes models.
    """

    name: str
    in_shape: tuple
    n_params: int
    max_activation: int
    max_per_sample: int
    wants_input_norms: bool
    stochastic: bool

    def init(self, m: int, generator: torch.Generator, device="cpu") -> list: ...

    def forward(self, params, x): ...

    def clipped_grads(self, params, x, y, weight, clip=None, x_sqnorm=None, seeds=None): ...

    def losses(self, logits, y): ...

    def cpu_chunk(self, M: int, B: int) -> int: ...

    def eval_group(self, device_type: str, R: int) -> int: ...

    def fingerprint(self) -> dict: ...


@dataclass(frozen=True)
class Layer:
    kind: str            # linear | conv | relu | maxpool | flatten
    out: int = 0         # units / filters
    k: int = 0           # kernel size (conv, maxpool)
    stride: int = 1
    pad: int = 0


def _shape_after(layer: Layer, shape: tuple) -> tuple:
    if layer.kind == "linear":
        return (layer.out,)
    if layer.kind == "conv":
        c, h, w = shape
        return (layer.out, (h + 2 * layer.pad - layer.k) // layer.stride + 1,
                (w + 2 * layer.pad - layer.k) // layer.stride + 1)
    if layer.kind == "maxpool":
        c, h, w = shape
        return (c, (h - layer.k) // layer.stride + 1, (w - layer.k) // layer.stride + 1)
    if layer.kind == "flatten":
        return (int(math.prod(shape)),)
    return shape


class Net:
    """A feed-forward network over M stacked parameter sets (a :class:`Model`)."""

    stochastic = False

    def __init__(self, name: str, layers: list[Layer], in_shape: tuple):
        # ReLU and max-pooling commute exactly (max of ReLUs = ReLU of the
        # max, and the gradient reaches the same arg-max wherever it is not
        # zeroed): pool first, so the ReLU runs on a quarter of the values
        layers = list(layers)
        for i in range(len(layers) - 1):
            if layers[i].kind == "relu" and layers[i + 1].kind == "maxpool":
                layers[i], layers[i + 1] = layers[i + 1], layers[i]
        self.name, self.layers, self.in_shape = name, layers, tuple(in_shape)
        self.param_shapes = []  # per trainable layer: (fan_in, out)
        shape = self.in_shape
        #: the largest tensor a forward pass holds, in values per sample
        self.max_activation = int(math.prod(shape))
        for layer in layers:
            if layer.kind == "linear":
                if len(shape) != 1:
                    raise ValueError(f"{name}: linear layer needs a flat input, got {shape}")
                self.param_shapes.append((shape[0], layer.out))
            elif layer.kind == "conv":
                self.param_shapes.append((shape[0] * layer.k * layer.k, layer.out))
            shape = _shape_after(layer, shape)
            if min(shape) < 1:
                raise ValueError(f"{name}: input {in_shape} is too small for its layers")
            self.max_activation = max(self.max_activation, int(math.prod(shape)))
        self.out_shape = shape
        self.n_params = sum(k * c + c for k, c in self.param_shapes)
        #: the largest tensor a DP-SGD step holds per sample, in values: an
        #: activation, or a convolution's per-sample weight gradient (out × Ck²)
        trainable = [layer for layer in layers if layer.kind in ("linear", "conv")]
        self.max_per_sample = max([self.max_activation] + [k * c for (k, c), layer in zip(self.param_shapes, trainable)
                                                           if layer.kind == "conv"])
        self.convolutional = any(layer.kind == "conv" for layer in layers)
        #: the first trainable layer is linear: the engine caches its inputs' squared norms
        self.wants_input_norms = trainable[0].kind == "linear"

    # ---------------------------------------------------------- engine hints
    def cpu_chunk(self, M: int, B: int) -> int:
        """Models per clipped_grads call on CPU.  Convolutional nets: one
        model (about 64 samples or more) per chunk, so its activations and
        im2col stay in cache (measured 3x faster on a 2-core CPU than one
        batch of all models), the chunks spread over the threads.  Others:
        every model at once."""
        return max(1, 64 // max(B, 1)) if self.convolutional else M

    def eval_group(self, device_type: str, R: int) -> int:
        """Replicas per evaluation forward: convolutional nets on CPU one at
        a time (a plain convolution, no copy per replica), as training does."""
        return 1 if (self.convolutional and device_type == "cpu") else R

    def losses(self, logits, y):
        """Per-sample cross-entropy of logits (..., classes) against y (...)."""
        return -torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)

    def fingerprint(self) -> dict:
        return {"class": f"paretofl.Net:{self.name}", "in_shape": list(self.in_shape),
                "parameters": [[f"layer{i}", [k, c]] for i, (k, c) in enumerate(self.param_shapes)]}


    # ---------------------------------------------------------------- params
    def init(self, m: int, generator: torch.Generator, device="cpu") -> list[torch.Tensor]:
        """PyTorch's default initialisation (U(±1/√fan_in)) for m models:
        a list [W_1, b_1, W_2, b_2, ...] with W (m, fan_in, out), b (m, out)."""
        params = []
        for k, c in self.param_shapes:
            bound = 1.0 / math.sqrt(k)
            params.append(((torch.rand(m, k, c, generator=generator) * 2 - 1) * bound).to(device))
            params.append(((torch.rand(m, c, generator=generator) * 2 - 1) * bound).to(device))
        return params

    # --------------------------------------------------------------- forward
    def forward(self, params, x, record: bool = False):
        """Logits (M, B, classes) for inputs x (M, B, *in_shape).

        With ``record``, also returns the cache the manual backward pass
        (:meth:`clipped_grads`) needs: each layer's input in matmul form,
        ReLU masks and pooling arg-maxima."""
        M, B = x.shape[:2]
        h = x
        cache = []
        p = 0
        for layer in self.layers:
            if layer.kind == "linear":
                W, b = params[p], params[p + 1]
                p += 2
                a = h.reshape(M, B, -1)
                h = _thin_mm(a, W) + b.unsqueeze(1)
                cache.append((a, W) if record else None)
            elif layer.kind == "conv":
                W, b = params[p], params[p + 1]
                p += 2
                cache.append((h, W) if record else None)                    # im2col waits for backward
                h = _conv(h, W, b, layer)
            elif layer.kind == "relu":
                h = torch.relu(h)
                cache.append(h if record else None)                       # backward: where the output > 0
            elif layer.kind == "maxpool":
                if record:
                    h, arg = _maxpool_arg(h, layer.k, layer.stride)
                    cache.append(arg)
                else:
                    h = _maxpool(h, layer.k, layer.stride)
                    cache.append(None)
            elif layer.kind == "flatten":
                cache.append(h.shape)
                h = h.reshape(M, B, -1)
        return (h, cache) if record else h

    # -------------------------------------------------------------- gradients
    def clipped_grads(self, params, x, y, weight, clip=None, x_sqnorm=None, seeds=None):
        """Summed gradients of the weighted cross-entropy, per model.

        ``weight`` (M, B) is 1 for a real sample and 0 for padding.  With
        ``clip`` (a tensor (M,) or a number), each sample's gradient is first
        clipped to L2 norm ``clip`` (DP-SGD).  Returns (grads, norms, loss):
        grads like ``params``, per-sample gradient norms (M, B) before
        clipping (zeros without ``clip``), and the summed loss per model (M,).

        ``x_sqnorm`` (M, B), optional: the inputs' squared norms, cached by
        the engine, saves recomputing ‖a‖² when the first layer is linear.
        ``seeds`` is unused (these models draw no random numbers).

        The backward pass is written out by hand for the layer kinds above
        (no autograd): it yields each trainable layer's output gradient G
        and its input A (linear) or per-sample weight gradients
        (convolution), from which per-sample norms and clipped sums follow.
        """
        with torch.no_grad():
            logits, cache = self.forward(params, x, record=True)
            logp = torch.log_softmax(logits, -1)
            losses = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1) * weight
            g = logp.exp()
            g.scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(y, dtype=g.dtype).unsqueeze(-1))
            g = g * weight.unsqueeze(-1)                                      # dloss/dlogits per sample
            tape = self._tape(cache, g, summed=clip is None)
            if clip is None:
                norms, f = torch.zeros(x.shape[:2], device=x.device, dtype=x.dtype), None
            else:
                norms = _per_sample_sqnorms(tape, x_sqnorm, x).sqrt()
                cl = clip if isinstance(clip, (int, float)) else \
                    torch.as_tensor(clip, dtype=x.dtype, device=x.device).reshape(-1, 1)
                f = torch.clamp(cl / (norms + 1e-12), max=1.0)
            return _scaled_sums(tape, f), norms, losses.sum(1)

    def _tape(self, cache, g, summed: bool) -> list:
        """The hand-written backward pass from dloss/dlogits ``g``: per
        trainable layer, first layer first, (kind, A, G) — a linear layer's
        input and output gradient; for a convolution, its per-sample weight
        gradients (M, B, out, Ck²) and bias gradients (M, B, out), or where
        ``summed`` their sum over samples (M, Ck², out) and the output
        gradient G."""
        M, B = g.shape[:2]
        tape = []
        first_trainable = next(i for i, l in enumerate(self.layers) if l.kind in ("linear", "conv"))
        for i in range(len(self.layers) - 1, first_trainable - 1, -1):
            layer, c = self.layers[i], cache[i]
            need_input = i > first_trainable
            if layer.kind == "linear":
                a, W = c
                tape.append(("linear", a, g))
                if need_input:
                    g = torch.bmm(g, W.transpose(1, 2))
            elif layer.kind == "conv":
                h_in, W = c
                C, H, Wd = h_in.shape[2:]
                G = g.reshape(M, B, layer.out, -1)
                tape.append(("conv", _conv_weight_grads(h_in, G, layer, summed=summed), G if summed else G.sum(-1)))
                if need_input:
                    g = _conv_input_grad(G, W, layer, C, H, Wd)
            elif layer.kind == "relu":
                # ReLU's own backward kernel: several times faster on CPU
                # than multiplying by a boolean mask (a dtype conversion)
                g = torch.ops.aten.threshold_backward(g, c, 0)
            elif layer.kind == "maxpool":
                g = _maxpool_back(g, c, layer.k, layer.stride)
            elif layer.kind == "flatten":
                g = g.reshape(c)
        tape.reverse()
        return tape


def _per_sample_sqnorms(tape: list, x_sqnorm, x):
    """Each sample's squared gradient norm (M, B) over every trainable
    layer: ‖a‖²‖G‖² + ‖G‖² for a linear layer (weights and bias), the
    per-sample weight gradients' and the bias's squares for a convolution."""
    sq = torch.zeros(x.shape[:2], device=x.device, dtype=x.dtype)
    for li, (kind, a, G) in enumerate(tape):
        if kind == "linear":
            gg = G.pow(2).sum(-1)
            asq = x_sqnorm if (li == 0 and x_sqnorm is not None) else a.pow(2).sum(-1)
            sq += asq * gg + gg
        else:
            sq += a.pow(2).sum((-1, -2)) + G.pow(2).sum(-1)          # G: the bias's per-sample gradients
    return sq


def _scaled_sums(tape: list, f) -> list:
    """The layers' gradients summed over samples, each sample scaled by its
    clipping factor ``f`` (M, B) (None: unclipped, a convolution's tape
    already summed)."""
    grads = []
    for kind, a, G in tape:
        if kind == "linear":
            Gf = G if f is None else G * f.unsqueeze(-1)         # scale the small factor
            grads.append(_thin_mm(a.transpose(1, 2), Gf))
            grads.append(Gf.sum(1))
        elif f is None:
            grads.append(a.transpose(1, 2))                            # summed: (M, Ck², out)
            grads.append(G.sum((1, 3)))
        else:
            grads.append(torch.einsum("mb,mbck->mkc", f, a))
            grads.append(torch.einsum("mb,mbc->mc", f, G))
    return grads


def _thin_mm(a, b):
    """Batched a @ b; when b has few columns (a classifier's last layer),
    computed as (bᵀ aᵀ)ᵀ, which MKL runs about 5x faster on CPU for these
    shapes (measured: 40 × (120×784)@(784×10) in 1.0 ms instead of 5.2)."""
    if b.shape[-1] < 32:
        return torch.bmm(b.transpose(1, 2), a.transpose(1, 2)).transpose(1, 2)
    return torch.bmm(a, b)


def _out_hw(layer, H, W):
    return ((H + 2 * layer.pad - layer.k) // layer.stride + 1, (W + 2 * layer.pad - layer.k) // layer.stride + 1)


def _conv(h, W, b, layer):
    """Forward convolution of M models at once, (M, B, C, H, W) -> (M, B,
    out, Ho, Wo): one grouped convolution (groups = models) through the
    backend's convolution (oneDNN on CPU, cuDNN on CUDA).  With one model
    per call, as the engine runs convolutional nets on CPU, this is a plain
    convolution and needs no copy; measured here 2–3x faster than the
    im2col matmul it replaced.  W (M, Ck², out) with rows in (c, ki, kj)
    order, b (M, out)."""
    M, B, C, H, Wd = h.shape
    x = h.transpose(0, 1).reshape(B, M * C, H, Wd)
    w = W.transpose(1, 2).reshape(M * layer.out, C, layer.k, layer.k)
    z = F.conv2d(x, w, b.reshape(-1), stride=layer.stride, padding=layer.pad, groups=M)
    return z.view(B, M, layer.out, *z.shape[-2:]).transpose(0, 1)


def _conv_input_grad(G, W, layer, C, H, Wd):
    """Gradient w.r.t. a convolution's input, for M models at once: one
    grouped transposed convolution (groups = models), which is several
    times faster on CPU than matmul + col2im.  G (M, B, out, L), W (M, Ck², out)."""
    M, B, c = G.shape[:3]
    ho, wo = _out_hw(layer, H, Wd)
    g = G.reshape(M, B, c, ho, wo).transpose(0, 1).reshape(B, M * c, ho, wo)
    w = W.reshape(M, C, layer.k, layer.k, c).permute(0, 4, 1, 2, 3).reshape(M * c, C, layer.k, layer.k)
    out_pad = (H + 2 * layer.pad - layer.k - (ho - 1) * layer.stride,
               Wd + 2 * layer.pad - layer.k - (wo - 1) * layer.stride)
    x = F.conv_transpose2d(g, w, stride=layer.stride, padding=layer.pad, groups=M, output_padding=out_pad)
    return x.reshape(B, M, C, H, Wd).transpose(0, 1)


def _maxpool_arg(h, k, stride):
    """Max-pooling that keeps, for backward, which window position won
    (the first one on ties), as one uint8 per output."""
    views = [h[..., i:i + stride * (ho_ - 1) + 1:stride, j:j + stride * (wo_ - 1) + 1:stride]
             for ho_, wo_ in [((h.shape[-2] - k) // stride + 1, (h.shape[-1] - k) // stride + 1)]
             for i in range(k) for j in range(k)]
    if k == 2 and stride == 2:
        # a tournament: each comparison keeps the earlier position on ties,
        # so the winner is the first maximum in (0,0), (0,1), (1,0), (1,1)
        # order, as F.max_pool2d's; six ops on pooled-size tensors
        v0, v1, v2, v3 = views
        m01, m23 = torch.maximum(v0, v1), torch.maximum(v2, v3)
        # masks kept as 0/1 floats: multiplying by a boolean converts it first
        f = lambda t: t.to(h.dtype)  # noqa: E731
        return torch.maximum(m01, m23), ("2x2", f(v0 >= v1), f(v2 >= v3), f(m01 >= m23), h.shape)
    val = views[0]
    for v in views[1:]:
        val = torch.maximum(val, v)
    arg = torch.full(val.shape, k * k - 1, dtype=torch.uint8, device=h.device)
    for o in range(k * k - 2, -1, -1):       # first winner takes it
        arg = torch.where(views[o] == val, torch.tensor(o, dtype=torch.uint8, device=h.device), arg)
    return val, (arg, h.shape)


def _maxpool_back(g, arg, k, stride):
    """Route each pooled gradient to its window's arg-max."""
    ho, wo = g.shape[-2:]
    if isinstance(arg[0], str):                                  # the 2x2 tournament's masks
        _, first01, first23, top, in_shape = arg
        covered = in_shape[-2] == 2 * ho and in_shape[-1] == 2 * wo         # no odd row/column left out
        out = (torch.empty if covered else torch.zeros)(in_shape, dtype=g.dtype, device=g.device)
        o = [out[..., i:2 * ho:2, j:2 * wo:2] for i in range(2) for j in range(2)]
        g_top = g * top
        g_bottom = g - g_top
        torch.mul(g_top, first01, out=o[0])
        torch.sub(g_top, o[0], out=o[1])
        torch.mul(g_bottom, first23, out=o[2])
        torch.sub(g_bottom, o[2], out=o[3])
        return out
    arg, in_shape = arg
    out = torch.zeros(in_shape, dtype=g.dtype, device=g.device)
    for o in range(k * k):
        i, j = divmod(o, k)
        sl = out[..., i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
        sl += g * (arg == o)
    return out


#: bytes of im2col unfolded at a time.  Whole batches would take 7 MB per
#: model for LeNet's first layer and over 100 MB per model for the CIFAR
#: net's second (batch 90); a block of samples (LeNet: about 25) stays in a
#: CPU core's cache instead.  The LeNet DP-SGD engine step measured the same
#: either way here; on CUDA the block only bounds memory.
IM2COL_BLOCK_BYTES = {"cpu": 2 << 20, "cuda": 512 << 20}


def _conv_weight_grads(h_in, G, layer, summed=False):
    """A convolution's per-sample weight gradients P_b = G_b A_bᵀ
    (M, B, out, Ck²) from its input h_in (M, B, C, H, W) and output gradient
    G (M, B, out, L), where A_b is sample b's im2col (Ck², L).  A is formed
    a block of samples at a time (IM2COL_BLOCK_BYTES), never whole.

    ``summed`` (plain SGD): return Σ_b P_b (M, out, Ck²) instead, summed a
    block at a time, so memory stays at one block's per-sample gradients
    (all of them take M·B·out·Ck² floats: 2.9 GB for 40 CIFAR nets at batch
    64).  Summing the products was measured faster on CPU than contracting
    over samples and positions at once, which copies A into another layout."""
    M, B, C, H, Wd = h_in.shape
    ck, L = C * layer.k * layer.k, G.shape[-1]
    budget = IM2COL_BLOCK_BYTES.get(h_in.device.type, IM2COL_BLOCK_BYTES["cuda"])
    n = max(1, min(B, budget // (M * ck * L * h_in.element_size())))
    if summed:
        total = torch.zeros(M, layer.out, ck, dtype=G.dtype, device=G.device)
        block = torch.empty(M, n, layer.out, ck, dtype=G.dtype, device=G.device)
    else:
        out = torch.empty(M, B, layer.out, ck, dtype=G.dtype, device=G.device)
    for s in range(0, B, n):
        e = min(B, s + n)
        a = _unfold(h_in[:, s:e].reshape(M * (e - s), C, H, Wd), layer.k, layer.pad, layer.stride)
        a = a.view(M, e - s, ck, L).transpose(-1, -2)
        dst = block[:, :e - s] if summed else out[:, s:e]
        if dst.is_contiguous():
            torch.matmul(G[:, s:e], a, out=dst)
        else:
            dst.copy_(torch.matmul(G[:, s:e], a))
        if summed:
            total += dst.sum(1)
    return total if summed else out


def _unfold(x, k, pad, stride):
    """im2col as a strided view and one copy: (n, C, H, W) -> (n, C·k·k, L).
    Same layout as F.unfold, measured 3–7x faster on CPU for these sizes."""
    if pad:
        x = F.pad(x, (pad, pad, pad, pad))
    v = x.unfold(2, k, stride).unfold(3, k, stride)          # (n, C, Ho, Wo, k, k)
    n, C, ho, wo = v.shape[:4]
    return v.permute(0, 1, 4, 5, 2, 3).reshape(n, C * k * k, ho * wo)


def _maxpool(h, k, stride):
    """Max-pooling over the last two axes by elementwise maxima of the k²
    strided views (6x faster than F.max_pool2d here); any leading axes."""
    ho, wo = (h.shape[-2] - k) // stride + 1, (h.shape[-1] - k) // stride + 1
    val = None
    for i in range(k):
        for j in range(k):
            v = h[..., i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
            val = v if val is None else torch.maximum(val, v)
    return val


def build_model(name: str, in_shape: tuple, n_classes: int = 10) -> Net:
    """``lr``, ``lenet``, ``cnn`` (ALI-DPFL Table V), ``fedavg-cnn`` (the CNN
    ALI-DPFL's code trains) or ``cifar-cnn`` (Table VI)."""
    L = Layer
    if name == "lr":
        layers = [L("flatten"), L("linear", n_classes)]
    elif name == "lenet":
        layers = [L("conv", 6, 5, pad=2), L("relu"), L("maxpool", k=2, stride=2),
                  L("conv", 16, 5), L("relu"), L("maxpool", k=2, stride=2), L("flatten"),
                  L("linear", 120), L("relu"), L("linear", 84), L("relu"), L("linear", n_classes)]
    elif name == "cnn":
        layers = [L("conv", 16, 8, stride=2, pad=2), L("relu"), L("maxpool", k=2, stride=1),
                  L("conv", 32, 4, stride=2), L("relu"), L("maxpool", k=2, stride=1), L("flatten"),
                  L("linear", 32), L("relu"), L("linear", n_classes)]
    elif name == "fedavg-cnn":
        # the FL library CNN that ALI-DPFL's published code trains in place
        # of its Table V (two 5×5 convolutions of 32 and 64 filters, 512 units)
        layers = [L("conv", 32, 5), L("relu"), L("maxpool", k=2, stride=2),
                  L("conv", 64, 5), L("relu"), L("maxpool", k=2, stride=2), L("flatten"),
                  L("linear", 512), L("relu"), L("linear", n_classes)]
    elif name == "cifar-cnn":
        layers = []
        for ch in (32, 64, 128):
            layers += [L("conv", ch, 3, pad=1), L("relu"), L("conv", ch, 3, pad=1), L("relu"),
                       L("maxpool", k=2, stride=2)]
        layers += [L("flatten"), L("linear", 128), L("relu"), L("linear", n_classes)]
    else:
        raise ValueError(f"unknown model {name!r}; use one of {', '.join(MODELS)}")
    return Net(name, layers, in_shape)


