"""The clients' dissimilarity (issue 46, paretofl.pretrial.dissimilarity):
ζ² and B² against brute-force sums over linear least-squares clients, their
invariants, the clients' gradients against torch.autograd for the built-in
LR and LeNet and for user modules, and the order of label-skewed
FashionMNIST partitions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paretofl.pretrial.dissimilarity import dissimilarity_of


def least_squares_clients(seed=0, sizes=(5, 9, 3, 12), dim=4):
    """Client i: f_i(w) = 1/(2 n_i) ‖X_i w − y_i‖², gradient X_iᵀ(X_i w − y_i)/n_i,
    at one w; clients differ in their data's scale and offset."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    grads = []
    for i, n in enumerate(sizes):
        X = rng.normal(size=(n, dim)) * (1 + i)
        y = rng.normal(size=n) + i
        grads.append(X.T @ (X @ w - y) / n)
    return np.array(grads), np.array(sizes, dtype=float)


def brute_force(grads, weights):
    """ζ² by the double sum (Σ p_i‖g_i‖² − ‖g‖²) and the pairwise form
    (½ Σ_ij p_i p_j ‖g_i − g_j‖²), and B², by explicit loops."""
    n, dim = len(grads), len(grads[0])
    total = sum(weights)
    p = [float(w) / total for w in weights]
    g = [sum(p[i] * grads[i][k] for i in range(n)) for k in range(dim)]
    g2 = sum(v * v for v in g)
    second = sum(p[i] * sum(grads[i][k] ** 2 for k in range(dim)) for i in range(n))
    pairwise = 0.5 * sum(p[i] * p[j] * sum((grads[i][k] - grads[j][k]) ** 2 for k in range(dim))
                         for i in range(n) for j in range(n))
    return second - g2, pairwise, second / g2, g2


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("weighted", [True, False])
def test_least_squares_clients_match_brute_force(seed, weighted):
    grads, sizes = least_squares_clients(seed)
    weights = sizes if weighted else np.ones(len(sizes))
    zeta2_sum, zeta2_pairs, b2, g2 = brute_force(grads.tolist(), weights.tolist())
    assert zeta2_sum == pytest.approx(zeta2_pairs, rel=1e-10)
    d = dissimilarity_of(grads, sizes if weighted else None)
    assert d["zeta2"] == pytest.approx(zeta2_sum, rel=1e-10)
    assert d["b2"] == pytest.approx(b2, rel=1e-10)
    assert d["grad_norm2"] == pytest.approx(g2, rel=1e-10)
    assert d["clients"] == len(sizes)
    assert d["b2"] == pytest.approx(1 + d["zeta2"] / d["grad_norm2"], rel=1e-10)


def test_identical_clients_and_scaling():
    grads, sizes = least_squares_clients(3)
    same = dissimilarity_of(np.tile(grads[1], (5, 1)), [1, 2, 3, 4, 5])
    assert same["zeta2"] == pytest.approx(0, abs=1e-12)
    assert same["b2"] == pytest.approx(1, rel=1e-12)
    base = dissimilarity_of(grads, sizes)
    for c in (0.01, 3.0, -7.5):
        scaled = dissimilarity_of(c * grads, sizes)
        assert scaled["zeta2"] == pytest.approx(c * c * base["zeta2"], rel=1e-10)
        assert scaled["b2"] == pytest.approx(base["b2"], rel=1e-10)
    # scaling the weights together changes nothing
    assert dissimilarity_of(grads, 10 * sizes)["zeta2"] == pytest.approx(base["zeta2"], rel=1e-12)


@pytest.mark.parametrize("grads, weights, says", [
    (np.ones((1, 3)), None, "at least 2 clients"),
    (np.ones(3), None, "at least 2 clients"),
    (np.array([[1.0, np.nan], [1.0, 2.0]]), None, "NaN or infinite"),
    (np.array([[1.0, np.inf], [1.0, 2.0]]), None, "NaN or infinite"),
    (np.array([[1.0, 2.0], [-1.0, -2.0]]), None, "infinite"),
    (np.ones((3, 2)), [1, 2], "one sample count per client"),
    (np.ones((2, 2)), [1, -2], ">= 0"),
    (np.ones((2, 2)), [1, np.nan], "NaN or infinite"),
    (np.ones((2, 2)), [0, 0], "sum to zero"),
])
def test_bad_input_is_one_line(grads, weights, says):
    with pytest.raises(ValueError, match=says) as e:
        dissimilarity_of(grads, weights)
    assert "\n" not in str(e.value)


def test_core_never_imports_torch():
    code = ("import sys; from paretofl.pretrial.dissimilarity import dissimilarity_of; "
            "dissimilarity_of([[1.0, 2.0], [3.0, 4.0]]); assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_zero_global_gradient_says_b2_is_infinite():
    with pytest.raises(ValueError, match="zero.*infinite"):
        dissimilarity_of([[1.0, 2.0], [-1.0, -2.0]])


# ----------------------------------------------------------------- with torch
def small_setup(model, shape=(1, 6, 6), clients=3, n=40, partition="dirichlet", seed=0):
    torch = pytest.importorskip("torch")
    from paretofl.fl.build import prepare
    from paretofl.fl.data import Dataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *shape, generator=g)
    y = torch.arange(n) % 3
    ds = Dataset.from_arrays(x, y, x[:6], y[:6])
    return prepare(ds, model, clients, partition="dirichlet:1" if partition == "dirichlet" else partition, seed=seed)


def autograd_means(setup, loss_of, seed=0):
    """Each client's mean loss gradient by torch.autograd, at the model's
    initial parameters, flattened in the parameters' order."""
    import torch

    params = [p[0].clone().requires_grad_() for p in setup.model.init(1, torch.Generator().manual_seed(seed))]
    out = []
    for part in setup.parts:
        idx = torch.as_tensor(part)
        loss = loss_of(params, setup.data.x_train[idx], setup.data.y_train[idx])
        out.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double().numpy())
    return np.stack(out)


def test_lr_gradients_match_autograd():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from paretofl.pretrial.dissimilarity import client_gradients

    s = small_setup("lr")
    W, b = s.model.init(1, torch.Generator().manual_seed(0))
    assert W.abs().max() > 0, "LR starts at U(±1/√fan_in), not at zero"
    grads, weights = client_gradients(s, seed=0)
    expected = autograd_means(s, lambda p, x, y: F.cross_entropy(x.reshape(len(x), -1) @ p[0] + p[1], y))
    assert grads.shape == (3, s.model.n_params)
    np.testing.assert_allclose(grads, expected, rtol=1e-5, atol=1e-6)
    assert weights.tolist() == [len(p) for p in s.parts]


def test_lenet_gradients_match_autograd():
    """The hand-written backward of a convolutional net against autograd
    through the same net's forward."""
    torch = pytest.importorskip("torch")
    from paretofl.pretrial.dissimilarity import client_gradients

    s = small_setup("lenet", shape=(1, 28, 28), n=24, partition="iid")
    grads, _ = client_gradients(s, batch=7)       # summed over several batches
    expected = autograd_means(s, lambda p, x, y: s.model.losses(s.model.forward([t[None] for t in p], x[None]),
                                                                y[None]).mean())
    np.testing.assert_allclose(grads, expected, rtol=1e-4, atol=1e-6)
    assert torch.isfinite(torch.from_numpy(grads)).all()


@pytest.mark.parametrize("model", ["module", "examples.your_model:mlp"])
def test_user_module_gradients_match_autograd(model, monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[2])              # "examples.your_model" from the repository root
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch import nn

    from paretofl.pretrial.dissimilarity import client_gradients

    if model == "module":
        model = nn.Sequential(nn.Flatten(), nn.Linear(36, 8), nn.Tanh(), nn.Linear(8, 3))
    s = small_setup(model)
    names = s.model.names
    template = s.model.module

    def loss(p, x, y):
        return F.cross_entropy(torch.func.functional_call(template, dict(zip(names, p)), (x,)), y)

    np.testing.assert_allclose(client_gradients(s)[0], autograd_means(s, loss), rtol=1e-5, atol=1e-6)


def test_subsets_are_seeded_and_at_most_max_per_client():
    pytest.importorskip("torch")
    from paretofl.pretrial.dissimilarity import client_gradients, dissimilarity

    s = small_setup("lr", n=60, partition="iid")                       # 20 samples per client
    full, _ = client_gradients(s, max_per_client=20)
    sub, weights = client_gradients(s, max_per_client=5, seed=0)
    assert not np.allclose(sub, full)
    np.testing.assert_array_equal(sub, client_gradients(s, max_per_client=5, seed=0)[0])
    assert weights.tolist() == [20, 20, 20]                               # the clients' own counts
    d = dissimilarity(s)
    assert d["partition"] is None and d["clients"] == 3
    assert d["b2"] == pytest.approx(dissimilarity_of(full, weights)["b2"], rel=1e-9)


@pytest.fixture(scope="module")
def fashion():
    pytest.importorskip("torch")
    from paretofl.fl.data import load_dataset

    try:
        return load_dataset("fashion-mnist", download=False)
    except ValueError:
        pytest.skip("FashionMNIST is not installed (apt-get install dataset-fashion-mnist)")


def test_fashion_mnist_label_skew_orders_b2(fashion):
    from paretofl.fl.build import prepare
    from paretofl.fl.names import split_name
    from paretofl.pretrial.dissimilarity import dissimilarity

    def b2(partition, beta=0.5):
        s = prepare(fashion, "lr", 10, partition=split_name(partition, beta, strict=False), public_fraction=0.1,
                    subset="public", seed=0)
        return dissimilarity(s, max_per_client=300)

    iid, mild, skewed = b2("iid"), b2("dirichlet", 0.5), b2("dirichlet", 0.1)
    assert iid["b2"] < mild["b2"] < skewed["b2"]
    assert iid["zeta2"] < mild["zeta2"] < skewed["zeta2"]
    assert 1 < iid["b2"] < 1.5                                            # iid: sampling noise only


def test_fashion_mnist_global_gradient_does_not_depend_on_the_partition(fashion):
    """With every sample used, Σ p_i g_i weighted by the clients' counts is
    the whole public share's mean gradient, however it is split."""
    from paretofl.fl.build import prepare
    from paretofl.pretrial.dissimilarity import dissimilarity

    norms = [dissimilarity(prepare(fashion, "lr", 10, partition=p, public_fraction=0.1, subset="public", seed=0),
                           max_per_client=6000)["grad_norm2"] for p in ("iid", "dirichlet:0.1", "shards")]
    assert norms == pytest.approx([norms[0]] * 3, rel=1e-5)
