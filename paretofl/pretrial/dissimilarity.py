"""The clients' dissimilarity, from their partition: what a design prints
beside its constant κ, with its source (issue 46).

At one model w, with client i's full-batch mean gradient g_i = ∇F_i(w),
its share p_i = n_i / Σ n and the global gradient g = Σ_i p_i g_i:

* ζ² = Σ_i p_i ‖g_i − g‖², the gradient dissimilarity of local SGD
  analyses (Woodworth et al. 2020's ζ², there a supremum over w; Karimireddy
  et al. 2020, SCAFFOLD, Assumption A1 "(G,B)-BGD", Σ_i p_i ‖g_i‖² ≤ G² +
  B²‖g‖², holds here with B = 1 for any G² ≥ ζ²);
* B² = Σ_i p_i ‖g_i‖² / ‖g‖², FedProx's B-local dissimilarity at w
  (Li et al. 2020, Definition 3; A1 with G = 0).

Both are measured at one w, so they bound the suprema of the analyses
from below.  Since Σ_i p_i ‖g_i‖² = ‖g‖² + ζ², B² = 1 + ζ²/‖g‖².  An iid
split is not at ζ² = 0: each g_i is a mean over n_i samples, so ζ² keeps
their sampling variance (about tr Cov/n_i), larger on fewer samples.

:func:`dissimilarity_of` is torch-free; :func:`client_gradients` takes the
gradients from a :class:`paretofl.fl.build.Setup` through the model's own
contract (``clipped_grads`` without a clip), for the built-in models and
user modules alike.
"""

from __future__ import annotations

import numpy as np


def dissimilarity_of(grads, weights=None) -> dict:
    """ζ², B² and ‖g‖² of clients' mean gradients ``grads`` (n_clients, dim)
    weighted by ``weights`` (their sample counts; default equal), as in the
    module docstring.  Every bad input is one ValueError."""
    g = np.asarray(grads, dtype=np.float64)
    if g.ndim != 2 or len(g) < 2:
        raise ValueError(f"grads must be (n_clients, dim) with at least 2 clients, got shape {g.shape}")
    if not np.isfinite(g).all():
        raise ValueError("grads has NaN or infinite values: the dissimilarity needs finite gradients")
    p = _shares(weights, len(g))
    mean = p @ g
    norm2 = float(mean @ mean)
    if norm2 == 0:
        raise ValueError("the global gradient is zero (the model is stationary on the clients' data): "
                         "B² = Σ p_i‖g_i‖² / ‖g‖² is infinite there; take the gradients at another model")
    zeta2 = float(p @ ((g - mean) ** 2).sum(1))
    return {"zeta2": zeta2, "b2": float(p @ (g * g).sum(1)) / norm2, "grad_norm2": norm2, "clients": len(g)}


def _shares(weights, n: int) -> np.ndarray:
    """p_i = w_i / Σ w of n clients' weights (None: equal)."""
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weights must give one sample count per client ({n}), got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("weights has NaN or infinite values: give each client's sample count")
    if (w < 0).any():
        raise ValueError(f"weights must be sample counts >= 0, got {w.min():g}")
    if w.sum() <= 0:
        raise ValueError("weights sum to zero: no client holds a sample")
    return w / w.sum()


def client_gradients(setup, max_per_client: int = 2000, seed: int = 0, batch: int = 500):
    """Each client's mean gradient of its training loss (the model's
    cross-entropy, or a user module's own loss) at the model's initial
    parameters ``setup.model.init(1, Generator().manual_seed(seed))``, over
    at most ``max_per_client`` of its samples (a subset drawn with ``seed``
    if it holds more).  Returns (grads (n_clients, n_params) float64, weights:
    each client's full sample count).

    Why the initial parameters: the built-in models start at PyTorch's
    default U(±1/√fan_in), not at zero, so the logits vary by sample and
    each client's gradient follows its own labels and features (an LR model
    at w = 0 would still give Σ x(1/K − e_y), set by each client's class
    means); the initialisation is where a design's run starts, and needs no
    training to reach.  The gradient is the model's own (``clipped_grads``
    with no clip: the summed, unclipped gradient), summed ``batch`` samples
    at a time; a module with dropout gets its training-mode gradient under
    a fixed seed."""
    import torch

    model, ds = setup.model, setup.data
    params = model.init(1, torch.Generator().manual_seed(seed))
    rng = np.random.default_rng(seed)
    grads = [_mean_grad(model, params, ds.x_train[idx], ds.y_train[idx], batch, seed)
             for idx in (_subset(np.asarray(part), max_per_client, rng) for part in setup.parts)]
    return np.stack(grads), np.array([len(part) for part in setup.parts], dtype=np.float64)


def _subset(idx: np.ndarray, k: int, rng) -> np.ndarray:
    """At most k of a client's sample indices, drawn without replacement."""
    return idx if len(idx) <= k else np.sort(rng.choice(idx, k, replace=False))


def _mean_grad(model, params, x, y, batch: int, seed: int) -> np.ndarray:
    """One model's mean unclipped gradient over (x, y), flattened (float64)."""
    import torch

    total = None
    for s in range(0, len(y), batch):
        xb, yb = x[s:s + batch].unsqueeze(0), y[s:s + batch].unsqueeze(0)
        g, _, _ = model.clipped_grads(params, xb, yb, torch.ones(yb.shape, dtype=xb.dtype), clip=None,
                                      seeds=torch.tensor([seed]))
        flat = torch.cat([t.reshape(-1) for t in g]).double()
        total = flat if total is None else total + flat
    return (total / len(y)).numpy()


def dissimilarity(setup, **kw) -> dict:
    """:func:`dissimilarity_of` the clients' gradients of ``setup``
    (:func:`client_gradients`, with ``kw``), weighted by their sample
    counts; ``"partition"`` is left None for the caller to name."""
    return {**dissimilarity_of(*client_gradients(setup, **kw)), "partition": None}
