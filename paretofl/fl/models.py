"""Models as stacks of M independent parameter sets, with one-pass
per-sample gradient norms ("book-keeping", after Bu et al. 2023).

A :class:`Net` is a list of layers.  Its parameters carry a leading model
axis M (clients × replicas), so one batched forward/backward trains every
client of every replica at once.  Convolutions run as unfold + batched
matmul; the backward pass asks autograd only for the gradients at each
layer's output (no weight gradients), from which the per-sample gradient
norms and the clipped, summed weight gradients are formed directly:

* linear layer: per-sample grad a_i g_iᵀ, norm² = ‖a_i‖²‖g_i‖², clipped sum
  Aᵀ diag(f) G (one matmul);
* convolution: per-sample grad A_iᵀ G_i over positions (materialised: it is
  small for these models), clipped sum Σ_i f_i A_iᵀ G_i.

Models: logistic regression, LeNet-5, the MNIST/FashionMNIST CNN of paper 002
Table V (also used by paper 003) and the CIFAR-10 CNN of its Table VI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


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
    """A feed-forward network over M stacked parameter sets."""

    def __init__(self, name: str, layers: list[Layer], in_shape: tuple):
        self.name, self.layers, self.in_shape = name, layers, tuple(in_shape)
        self.param_shapes = []  # per trainable layer: (fan_in, out)
        shape = self.in_shape
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
        self.out_shape = shape
        self.n_params = sum(k * c + c for k, c in self.param_shapes)

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

        With ``record``, also returns, per trainable layer, its input A in
        matmul form and its output z (which then requires grad), for
        :meth:`clipped_grads`."""
        M, B = x.shape[:2]
        h = x
        tape = []
        p = 0
        for layer in self.layers:
            if layer.kind == "linear":
                W, b = params[p], params[p + 1]
                p += 2
                a = h.reshape(M, B, -1)
                z = torch.baddbmm(b.unsqueeze(1), a, W)
                if record:
                    if not z.requires_grad:
                        z.requires_grad_()
                    tape.append(("linear", a, z, None))
                h = z
            elif layer.kind == "conv":
                W, b = params[p], params[p + 1]
                p += 2
                C, H, Wd = h.shape[2:]
                cols = F.unfold(h.reshape(M * B, C, H, Wd), layer.k, padding=layer.pad, stride=layer.stride)
                L = cols.shape[-1]
                a = cols.view(M, B, -1, L)                                    # (M, B, Ck², L)
                # (M, 1, out, Ck²) @ (M, B, Ck², L): NCHW output, no transposed copy
                z = torch.matmul(W.transpose(1, 2).unsqueeze(1), a) + b.view(M, 1, -1, 1)
                if record:
                    if not z.requires_grad:
                        z.requires_grad_()
                    tape.append(("conv", a, z, L))
                ho = (H + 2 * layer.pad - layer.k) // layer.stride + 1
                wo = (Wd + 2 * layer.pad - layer.k) // layer.stride + 1
                h = z.view(M, B, layer.out, ho, wo)
            elif layer.kind == "relu":
                h = torch.relu(h)
            elif layer.kind == "maxpool":
                s = h.shape
                h = F.max_pool2d(h.reshape(M * B, *s[2:]), layer.k, layer.stride)
                h = h.reshape(M, B, *h.shape[1:])
            elif layer.kind == "flatten":
                h = h.reshape(M, B, -1)
        return (h, tape) if record else h

    # -------------------------------------------------------------- gradients
    def clipped_grads(self, params, x, y, weight, clip=None):
        """Summed gradients of the weighted cross-entropy, per model.

        ``weight`` (M, B) is 1 for a real sample and 0 for padding.  With
        ``clip`` (a tensor (M,) or a number), each sample's gradient is first
        clipped to L2 norm ``clip`` (DP-SGD).  Returns (grads, norms, loss):
        grads like ``params``, per-sample gradient norms (M, B) before
        clipping (zeros without ``clip``), and the summed loss per model (M,).
        """
        logits, tape = self.forward(params, x, record=True)
        M, B = x.shape[:2]
        losses = F.cross_entropy(logits.reshape(M * B, -1), y.reshape(-1), reduction="none").reshape(M, B)
        losses = losses * weight
        gz = torch.autograd.grad(losses.sum(), [t[2] for t in tape])
        per_sample = []
        sq = torch.zeros(M, B, device=x.device, dtype=x.dtype)
        for (kind, a, _, L), g in zip(tape, gz):
            if kind == "linear":
                if clip is not None:
                    gg = g.pow(2).sum(-1)
                    sq += a.pow(2).sum(-1) * gg + gg
                per_sample.append(None)
            else:
                if clip is not None:
                    P = torch.matmul(g, a.transpose(-1, -2))                  # (M, B, out, Ck²)
                    gb = g.sum(-1)                                            # (M, B, out)
                    sq += P.pow(2).sum((-1, -2)) + gb.pow(2).sum(-1)
                    per_sample.append((P, gb))
                else:
                    per_sample.append(None)
        if clip is not None:
            norms = sq.sqrt()
            c = torch.as_tensor(clip, dtype=x.dtype, device=x.device).reshape(-1, 1) if not \
                isinstance(clip, (int, float)) else clip
            f = torch.clamp(c / (norms + 1e-12), max=1.0)
        else:
            norms = torch.zeros(M, B, device=x.device, dtype=x.dtype)
            f = None
        grads = []
        for (kind, a, _, L), g, ps in zip(tape, gz, per_sample):
            if kind == "linear":
                af = a if f is None else a * f.unsqueeze(-1)
                grads.append(torch.bmm(af.transpose(1, 2), g))
                grads.append((g if f is None else g * f.unsqueeze(-1)).sum(1))
            elif f is None:
                grads.append(torch.einsum("mbcl,mbkl->mkc", g, a))
                grads.append(g.sum((1, 3)))
            else:
                P, gb = ps
                grads.append(torch.einsum("mb,mbck->mkc", f, P))
                grads.append(torch.einsum("mb,mbc->mc", f, gb))
        return grads, norms, losses.detach().sum(1)


def build_model(name: str, in_shape: tuple, n_classes: int = 10) -> Net:
    """``lr``, ``lenet``, ``cnn`` (paper 002 Table V) or ``cifar-cnn`` (Table VI)."""
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
    elif name == "cifar-cnn":
        layers = []
        for ch in (32, 64, 128):
            layers += [L("conv", ch, 3, pad=1), L("relu"), L("conv", ch, 3, pad=1), L("relu"),
                       L("maxpool", k=2, stride=2)]
        layers += [L("flatten"), L("linear", 128), L("relu"), L("linear", n_classes)]
    else:
        raise ValueError(f"unknown model {name!r}; use lr, lenet, cnn or cifar-cnn")
    return Net(name, layers, in_shape)


MODELS = ("lr", "lenet", "cnn", "cifar-cnn")
