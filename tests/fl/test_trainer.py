"""The trainer: gradients, the mechanisms' noise, reproducibility, policies."""

import gzip
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import torch_threads

from paretofl.fl import data as D
from paretofl.fl import engine as engine_mod
from paretofl.fl.algorithms import ALGORITHMS, train
from paretofl.fl.engine import DPSGD, Engine
from paretofl.fl.models import build_model

_threads = torch_threads(2)


@pytest.fixture(scope="module")
def digits():
    return D.load_dataset("digits")


@pytest.mark.parametrize("clip", [0.5, None])
@pytest.mark.parametrize("name,shape", [("lr", (1, 28, 28)), ("lenet", (1, 28, 28)), ("cnn", (1, 28, 28)),
                                        ("fedavg-cnn", (1, 28, 28)), ("cifar-cnn", (3, 32, 32))])
def test_clipped_grads_equal_autograd_per_sample(name, shape, clip, device, monkeypatch):
    """One-pass clipped gradient sums (plain sums without ``clip``) equal
    clipping autograd's per-sample gradients one sample at a time (the
    reference in float64 on the CPU, on inputs where float32 takes every
    ReLU and pooling decision as float64 does: see _same_decisions).  The
    plain runs im2col one sample at a time, the clipped runs the whole
    batch at once, so both sides of the blocking are checked."""
    from paretofl.fl import models

    if clip is None:
        monkeypatch.setitem(models.IM2COL_BLOCK_BYTES, device, 1)
    net = build_model(name, shape)
    params = net.init(2, torch.Generator().manual_seed(1))
    x, y = _same_decisions(net, params, device)
    w = torch.ones(2, 3)
    w[1, 2] = 0  # padding contributes nothing
    grads, norms, _ = net.clipped_grads([p.to(device) for p in params], x.to(device), y.to(device), w.to(device),
                                        clip=clip)
    assert grads[0].device.type == device
    grads, norms = [t.cpu() for t in grads], norms.cpu()
    ref = [torch.zeros_like(p) for p in params]
    for m in range(2):
        for b in range(3):
            ps = [p[m:m + 1].double().requires_grad_() for p in params]
            loss = F.cross_entropy(net.forward(ps, x[m:m + 1, b:b + 1].double()).reshape(1, -1), y[m:m + 1, b]) * w[m, b]
            gs = [t.float() for t in torch.autograd.grad(loss, ps)]
            n = math.sqrt(sum(float((t**2).sum()) for t in gs))
            assert norms[m, b].item() == pytest.approx(n if clip else 0.0, rel=1e-4, abs=1e-6)
            for r, t in zip(ref, gs):
                r[m] += (min(1.0, clip / (n + 1e-12)) if clip else 1.0) * t[0]
    for a, b in zip(grads, ref):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def _same_decisions(net, params, device, seed=2, tries=20):
    """Inputs x (2, 3, ...) and labels y (2, 3) on which the float32 forward
    on ``device`` takes every ReLU and max-pooling decision as the float64
    one does.  A near-tie (two pooled values, or a pre-activation and zero,
    closer than float32's rounding) can go either way, and one flipped
    decision moves first-layer gradients by about 1 % (seen on an AVX-512
    CPU: the CIFAR net at seed 2, one of its 98,304 windows in one pooling layer, where
    every convolution alone agreed with float64 to 5e-7).  Such a draw
    tests rounding, not gradients, so the next seed is drawn; a forward
    whose decisions were wrong would fail every draw."""
    for s in range(seed, seed + tries):
        g = torch.Generator().manual_seed(s)
        x = torch.randn(2, 3, *net.in_shape, generator=g)
        y = torch.randint(0, 10, (2, 3), generator=g)
        _, c32 = net.forward([p.to(device) for p in params], x.to(device), record=True)
        _, c64 = net.forward([p.double() for p in params], x.double(), record=True)
        same = True
        for layer, a, b in zip(net.layers, c32, c64):
            if layer.kind == "relu":
                same &= torch.equal(a.cpu() > 0, b > 0)
            elif layer.kind == "maxpool":   # the cache's masks or arg-maxima
                same &= all(torch.equal(u.cpu().double(), v.double()) for u, v in zip(a, b)
                            if isinstance(u, torch.Tensor))
        if same:
            return x, y
    pytest.fail(f"{net.name}: float32 and float64 decide differently on {tries} draws")


@pytest.mark.parametrize("block", [1, 2, 5])
def test_plain_conv_weight_grads_are_summed_block_by_block(block, monkeypatch):
    """Plain SGD's conv weight gradients are summed a block of samples at a
    time (memory of one block); with blocks of 1, 2 (the last one partial)
    and the whole batch they equal the per-sample gradients summed, whose
    agreement with autograd the test above checks."""
    from paretofl.fl import models

    layer = models.Layer("conv", 4, 3, pad=1)
    g = torch.Generator().manual_seed(5)
    h = torch.randn(2, 5, 3, 6, 6, generator=g)
    G = torch.randn(2, 5, 4, 36, generator=g)
    per_sample = models._conv_weight_grads(h, G, layer)
    monkeypatch.setitem(models.IM2COL_BLOCK_BYTES, "cpu", block * 2 * 27 * 36 * 4)
    summed = models._conv_weight_grads(h, G, layer, summed=True)
    assert summed.shape == (2, 4, 27)
    assert torch.allclose(summed, per_sample.sum(1), rtol=1e-5, atol=1e-5)


def test_every_model_is_offered_by_the_cli_and_specs():
    from paretofl.fl.models import MODELS
    from paretofl.pretrial import spec

    assert spec.MODELS == MODELS
    for name in MODELS:
        build_model(name, (3, 32, 32) if name == "cifar-cnn" else (1, 28, 28))


def test_lenet_clipped_grads_equal_torch_nn_on_pooling_ties():
    """Pooling windows that tie exactly (images with few grey levels, box
    filters, a positive bias) must send the gradient to the first maximum,
    as torch.nn's MaxPool2d does.  Reference: an
    nn.Sequential LeNet holding the same weights, per-sample autograd in
    float64, clipped and summed."""
    net = build_model("lenet", (1, 28, 28))
    M, B, clip = 2, 4, 0.5
    params = net.init(M, torch.Generator().manual_seed(3))
    params[0][:, :, :3] = 0.0625    # three box filters: different patches with equal sums tie (exactly:
                                    # dyadic values, so float32 and float64 tie alike)
    params[1] = params[1].abs() + 0.2                      # conv1 bias > 0: tied windows survive the ReLU
    g = torch.Generator().manual_seed(4)
    x = torch.zeros(M, B, 1, 28, 28)
    x[..., 6:22, 8:20] = torch.randint(0, 4, (M, B, 1, 16, 12), generator=g) / 4.0   # four grey levels
    y = torch.randint(0, 10, (M, B), generator=g)
    grads, norms, _ = net.clipped_grads(params, x, y, torch.ones(M, B), clip=clip)
    for m in range(M):
        twin = torch.nn.Sequential(
            torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(400, 120), torch.nn.ReLU(), torch.nn.Linear(120, 84), torch.nn.ReLU(),
            torch.nn.Linear(84, 10)).double()
        mods = [mod for mod in twin if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear))]
        with torch.no_grad():
            for j, mod in enumerate(mods):
                mod.weight.copy_(params[2 * j][m].t().reshape(mod.weight.shape))
                mod.bias.copy_(params[2 * j + 1][m])
        total = [torch.zeros_like(mod.weight) for mod in mods]
        for b in range(B):
            twin.zero_grad()
            F.cross_entropy(twin(x[m, b:b + 1].double()), y[m, b:b + 1]).backward()
            gs = [t for mod in mods for t in (mod.weight.grad, mod.bias.grad)]
            n = math.sqrt(sum(float((t**2).sum()) for t in gs))
            assert norms[m, b].item() == pytest.approx(n, rel=1e-4)
            total = [acc + min(1.0, clip / n) * mod.weight.grad for acc, mod in zip(total, mods)]
        for j, mod in enumerate(mods):
            ref = total[j].reshape(mod.weight.shape[0], -1).t().float()
            assert torch.allclose(grads[2 * j][m], ref, rtol=1e-4, atol=1e-6)


def test_dpsgd_noise_has_the_claimed_mean_and_variance(digits, device):
    """Many replicas of one DP-SGD step from the same model on one client with
    full batches: the update is -lr·(clipped sum + N(0, σ²C²))/(q·n)."""
    parts = [np.arange(200)]
    R, sigma, C, lr = 400, 1.5, 0.1, 1.0
    eng = Engine(build_model("lr", digits.shape), digits, parts, R, seeds=range(R), device=device)
    g0 = eng.init_global()
    g0 = [p[:1].expand_as(p).clone() for p in g0]  # same model everywhere
    new, _ = eng.local_steps(eng.broadcast(g0), 1, lr, dpsgd=DPSGD(1.0, C, 200.0, sigma=sigma))
    upd = (eng.flat(g0) - eng.flat(new)) * 200 / lr                   # clipped sum + noise
    exact, _ = eng.local_steps(eng.broadcast(g0), 1, lr, dpsgd=DPSGD(1.0, C, 200.0))
    clean = (eng.flat(g0) - eng.flat(exact)) * 200 / lr
    noise = (upd - clean).cpu().numpy()
    d = noise.shape[1]
    # mean zero per coordinate (z-test over replicas), variance σ²C² (chi-square, pooled)
    z = noise.mean(0) / (sigma * C / math.sqrt(R))
    assert abs(z.mean()) < 4 / math.sqrt(d) * 3
    var = noise.var(0, ddof=1).mean()
    assert var == pytest.approx((sigma * C) ** 2, rel=0.02)


def test_noise_has_gaussian_tails_past_pytorchs_float32_bound(digits, device):
    """The engine's normals are not capped where PyTorch's float32 normal_
    is (|Z| <= √(48 ln 2) ≈ 5.768, Box–Muller on 24-bit uniforms) nor where
    its (Z₁+Z₂)/√2 of 0.2 was (8.157): over 10⁹ draws a Gaussian passes
    5.768 with probability 1 − e⁻⁸, and its counts beyond 4 and 5 (Gaussian
    tail masses from math.erfc) come out within 5 standard deviations."""
    eng = Engine(build_model("lr", digits.shape), digits, [np.arange(100)], 1, seeds=[11], device=device)
    n, chunk = 10**9, 25 * 10**6
    largest, beyond4, beyond5 = 0.0, 0, 0
    for _ in range(n // chunk):
        z = eng.normal((chunk,)).abs()
        largest = max(largest, float(z.max()))
        beyond4 += int((z > 4).sum())
        beyond5 += int((z > 5).sum())
    assert largest > math.sqrt(48 * math.log(2)) + 1e-4
    for k, a in ((beyond4, 4.0), (beyond5, 5.0)):
        p = math.erfc(a / math.sqrt(2))
        assert abs(k - n * p) < 5 * math.sqrt(n * p)


@pytest.mark.parametrize("spread_from", [0, 1 << 40])
def test_noise_is_each_replicas_own_stream_whether_drawn_on_threads_or_not(digits, spread_from, monkeypatch):
    """Large draws go on the CPU's threads, one replica a task: the values
    are what each replica's generator gives alone, drawn in the same order:
    for a block of m values, ⌈m/2⌉ pairs of float64 uniforms, Box–Muller's
    cosines then its sines (computed here independently of the engine, in
    NumPy: to float32 rounding), and bit for bit the same on the threads or
    not."""
    net, seeds = build_model("lr", digits.shape), [5, 6, 7]
    parts = [np.arange(50), np.arange(50, 90)]

    def drawn(spread):
        monkeypatch.setattr(engine_mod, "SPREAD_NOISE_VALUES", spread)
        eng = Engine(net, digits, parts, 3, seeds=seeds)
        params = eng.broadcast(eng.init_global())
        return eng.noise_like(params) + [eng.normal((33,))], params

    assert torch.get_num_threads() > 1
    (out, params), (other, _) = drawn(spread_from), drawn(1 << 40 if spread_from == 0 else 0)
    for a, b in zip(out, other):
        assert torch.equal(a, b)
    for r, s in enumerate(seeds):
        gen = torch.Generator().manual_seed(s)
        for z, shape in zip(out, [(2, *p.shape[1:]) for p in params] + [(33,)]):
            m = math.prod(shape)
            h = (m + 1) // 2
            u = torch.empty((2, h), dtype=torch.float64).uniform_(generator=gen).numpy()
            rad = np.sqrt(-2 * np.log(1 - u[0]))
            own = np.concatenate([rad * np.cos(2 * np.pi * u[1]), rad * np.sin(2 * np.pi * u[1])])[:m]
            np.testing.assert_allclose(z.reshape(3, *shape)[r].numpy().ravel(), own, rtol=2e-7, atol=1e-12)


def test_dpsgd_fixed_divisor_scales_the_step(digits):
    """Paper 002's code divides the noised sum by a fixed 64 instead of the
    expected batch q·|D_i|: a round with divisor d moves the model exactly
    q·|D_i|/d times as far as the default does, from the same draws."""
    n, q = 300, 0.2
    moves = {}
    for d in (None, 64.0):
        eng = Engine(build_model("lr", digits.shape), digits, [np.arange(n)], 3, seeds=[3, 4, 5])
        pol = ALGORITHMS["dpfedavg"](eng, sigma=1.0, clip=0.5, lr=0.3, batch_rate=q, batch_divisor=d)
        g0 = eng.init_global()
        out = pol.round(0, g0, np.ones(3, bool))       # one client: the round's model is its model
        moves[d] = (eng.flat(out) - eng.flat(g0)).double().norm(dim=1)
    assert torch.allclose(moves[64.0] / moves[None], torch.full((3,), q * n / 64.0, dtype=torch.float64), rtol=1e-4)
    with pytest.raises(ValueError, match="divisor"):
        ALGORITHMS["dpfedavg"](eng, batch_divisor=0.0)


def test_adam_clients_step_as_torch_optim_adam(digits):
    """Adam clients (Adap DP-FL): with full batches and no clipping or noise
    the engine's steps are torch.optim.Adam's on the mean loss, models that
    stop early keep their own step count, and the moments carry over from
    one call (round) to the next."""
    from paretofl.fl.engine import AdamState

    n, lr = 120, 0.01
    net = build_model("lr", digits.shape)
    eng = Engine(net, digits, [np.arange(n)], 2, seeds=[0, 1])
    start = eng.broadcast(eng.init_global())
    adam = AdamState(start, eng.M)
    params = start
    for steps in ([3, 1], [2, 2]):                      # two rounds; model 1 stops early in the first
        params, _ = eng.local_steps(params, torch.tensor(steps), lr, adam=adam, dpsgd=DPSGD(1.0, 1e9, float(n)))
    assert adam.t[adam.slots(eng.everyone().ids(eng.N))].tolist() == [5, 3] and adam.clients == 2
    x, y = eng.x[:n], eng.y[:n]
    for m, total in ((0, 5), (1, 3)):
        ref = [p[m:m + 1].clone().requires_grad_() for p in start]
        opt = torch.optim.Adam(ref, lr=lr)
        for _ in range(total):
            opt.zero_grad()
            F.cross_entropy(net.forward(ref, x.unsqueeze(0))[0], y).backward()
            opt.step()
        for got, want in zip(params, ref):
            assert torch.allclose(got[m], want[0].detach(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="optimizer"):
        ALGORITHMS["dpfedavg"](eng, optimizer="rmsprop")


def test_client_level_aggregate_noise_has_a_fixed_total(digits, device):
    """Client-level DP-FedAvg, aggregate view: the released sum carries noise
    of variance qN·σ²C² per coordinate whatever the cohort's size — each
    selected client adds its share qσ²C², the server the rest — and is
    divided by qN."""
    parts = D.partition_iid(digits.y_train.numpy(), 10)
    R, sigma, C, q = 300, 2.0, 0.05, 0.3
    eng = Engine(build_model("lr", digits.shape), digits, parts, R, seeds=range(R), device=device)
    pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", sigma=sigma, clip=C, lr=1e-9, client_rate=q,
                                 local_epochs=1, batch_size=32)
    g0 = eng.init_global()
    g0 = [p[:1].expand_as(p).clone() for p in g0]
    out = pol.round(0, g0, np.ones(R, bool))
    step = (eng.flat(out) - eng.flat(g0)).cpu().numpy().astype(np.float64)  # lr≈0: the update is noise only
    qn = q * 10
    ratio = (step**2).mean(1) / ((sigma * C) ** 2 / qn)                      # per replica
    small, large = pol.last_cohort.counts < qn, pol.last_cohort.counts > qn
    assert small.sum() > 20 and large.sum() > 20
    assert ratio[small].mean() == pytest.approx(1.0, rel=0.03)
    assert ratio[large].mean() == pytest.approx(1.0, rel=0.03)   # a large cohort does not show in the noise
    client_std, top_std = pol.release.noise_stds(eng.everyone())
    assert torch.allclose(client_std, torch.full((R * 10,), sigma * C * math.sqrt(q), device=device,
                                                 dtype=client_std.dtype))
    assert torch.all(top_std == 0)                                # a full cohort needs no top-up


def test_client_local_noise_and_charge(digits, device):
    """Client-level, local view: each participant adds N(0, σ²C²) to its own
    update, no top-up, and a round is charged as a Gaussian of σ at each
    participation, participation seen."""
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    R, sigma, C, q = 200, 1.5, 0.1, 0.5
    eng = Engine(build_model("lr", digits.shape), digits, parts, R, seeds=range(R), device=device)
    pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-local", sigma=sigma, clip=C, lr=1e-9, client_rate=q)
    c = pol.release.select(np.ones(R, bool))
    noisy, top = pol.release.privatise(torch.zeros(c.size, eng.net.n_params, device=device), c)
    assert noisy.shape[0] == int(c.mask.sum()) == int(c.counts.sum())     # only the participants exist
    assert abs(c.size / (R * 4) - q) < 0.05
    chosen = noisy.cpu().numpy().astype(np.float64)
    assert chosen.var() == pytest.approx((sigma * C) ** 2, rel=0.03)
    assert torch.all(top == 0)
    (ch,) = pol.charges(0)
    assert ch.sampling == "attributed" and np.all(ch.noise_multiplier == sigma) and np.all(ch.rate == q)
    assert np.all(ch.steps == 1)


def test_dpsgd_divides_by_the_declared_size_not_the_data(digits):
    """DP-SGD's divisor and the aggregation weights come from the clients'
    declared sizes, public numbers: a client with one sample more (the
    add/remove neighbour) divides by the same number."""
    parts = [np.arange(100), np.arange(100, 200)]
    more = [np.arange(101), np.arange(100, 200)]
    divs = []
    for p in (parts, more):
        eng = Engine(build_model("lr", digits.shape), digits, p, 1, seeds=[0])
        pol = ALGORITHMS["dpfedavg"](eng, batch_rate=0.1, sizes=[100, 100])
        divs.append(pol.release.divisor(eng.everyone()).cpu().numpy())
    assert np.array_equal(divs[0], divs[1]) and np.allclose(divs[0], 10.0)
    with pytest.raises(ValueError, match="batch_divisor"):
        eng.local_steps(eng.broadcast(eng.init_global()), 1, 0.1, dpsgd=DPSGD(0.1, 1.0, sigma=1.0))


def test_batched_run_equals_replica_by_replica(digits, device):
    parts = D.partition_dirichlet(digits.y_train.numpy(), 5, 0.5, seed=1)
    kw = dict(sigma=1.0, clip=1.0, lr=0.3, batch_rate=0.1, local_steps=2)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 3, seeds=[5, 6, 7], device=device)
    g_all, _, f_all = train(ALGORITHMS["dpfedavg"](eng, **kw), rounds=3, epsilon=50.0)
    for r, s in enumerate([5, 6, 7]):
        e1 = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[s], device=device)
        g1, _, f1 = train(ALGORITHMS["dpfedavg"](e1, **kw), rounds=3, epsilon=50.0)
        for a, b in zip(g_all, g1):
            assert torch.allclose(a[r], b[0], atol=1e-5)
        assert f_all["epsilon"][r] == pytest.approx(f1["epsilon"][0])


def test_lenet_threaded_batched_run_equals_single_threaded_replica_by_replica():
    """A convolutional net runs one model per chunk, chunks spread over
    threads, each chunk's batch padding trimmed: the result is the same run
    as each replica alone on one thread."""
    g = torch.Generator().manual_seed(0)
    ds = D.Dataset("synthetic", torch.randn(1000, 1, 28, 28, generator=g), torch.randint(0, 10, (1000,), generator=g),
                   torch.randn(50, 1, 28, 28, generator=g), torch.randint(0, 10, (50,), generator=g))
    parts = D.partition_iid(ds.y_train.numpy(), 5, seed=0)
    kw = dict(sigma=1.0, clip=1.0, lr=0.1, batch_rate=0.4, local_steps=2)   # batch ≈ 80: one model a chunk
    seeds = [5, 6, 7]
    assert torch.get_num_threads() > 1
    eng = Engine(build_model("lenet", ds.shape), ds, parts, 3, seeds=seeds)
    g_all, _, f_all = train(ALGORITHMS["dpfedavg"](eng, **kw), rounds=2, epsilon=50.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for r, s in enumerate(seeds):
            e1 = Engine(build_model("lenet", ds.shape), ds, parts, 1, seeds=[s])
            g1, _, f1 = train(ALGORITHMS["dpfedavg"](e1, **kw), rounds=2, epsilon=50.0)
            for a, b in zip(g_all, g1):
                assert torch.allclose(a[r], b[0], atol=1e-5)
            assert f_all["epsilon"][r] == pytest.approx(f1["epsilon"][0])
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("name", ["lr", "lenet"])
def test_a_run_repeats_bit_for_bit_and_equals_its_replicas_run_alone(name, device):
    """Reproducible for a seed on either device: the same seeds give the
    same models, history and ε, bit for bit; and the batched run equals
    each replica run alone (on CUDA a conv net's models go in chunks of
    many models — here all 12 in one — a different batching from the CPU's
    one model a chunk)."""
    g = torch.Generator().manual_seed(0)
    ds = D.Dataset("synthetic", torch.randn(600, 1, 28, 28, generator=g), torch.randint(0, 10, (600,), generator=g),
                   torch.randn(50, 1, 28, 28, generator=g), torch.randint(0, 10, (50,), generator=g))
    parts = D.partition_iid(ds.y_train.numpy(), 4, seed=0)
    kw = dict(sigma=1.0, clip=1.0, lr=0.1, batch_rate=0.3, local_steps=2)
    seeds = [5, 6, 7]

    def run(s):
        eng = Engine(build_model(name, ds.shape), ds, parts, len(s), seeds=s, device=device)
        return train(ALGORITHMS["dpfedavg"](eng, **kw), rounds=2, epsilon=50.0)

    (g_a, h_a, f_a), (g_b, h_b, f_b) = run(seeds), run(seeds)
    assert g_a[0].device.type == device
    assert all(torch.equal(a, b) for a, b in zip(g_a, g_b))
    assert h_a.rows == h_b.rows and np.array_equal(f_a["epsilon"], f_b["epsilon"])
    for r, s in enumerate(seeds):
        g1, _, f1 = run([s])
        for a, b in zip(g_a, g1):
            assert torch.allclose(a[r], b[0], atol=1e-5)
        assert f_a["epsilon"][r] == pytest.approx(f1["epsilon"][0])


@pytest.mark.parametrize("name", ["lr", "lenet", "cnn", "fedavg-cnn", "cifar-cnn"])
def test_cuda_chunks_bound_the_largest_tensor(name):
    """On CUDA a step's models go in chunks whose largest per-sample tensor
    (an activation, or a convolution's per-sample weight gradients,
    recomputed here from the layer shapes) takes at most TRAIN_CHUNK_BYTES
    over the chunk, so stays far below 2³¹ values; a chunk holds every
    model when they fit.  On CPU conv nets go one model (~64 samples) a
    chunk, other nets all at once."""
    from paretofl.fl.engine import TRAIN_CHUNK_BYTES, train_chunk
    from paretofl.fl.models import _shape_after

    shape = (3, 32, 32) if name == "cifar-cnn" else (1, 28, 28)
    net = build_model(name, shape)
    largest, s = math.prod(shape), shape
    for layer in net.layers:
        if layer.kind == "conv":
            largest = max(largest, layer.out * s[0] * layer.k ** 2)
        s = _shape_after(layer, s)
        largest = max(largest, math.prod(s))
    conv = any(layer.kind == "conv" for layer in net.layers)
    for M, B in ((40, 90), (5120, 110), (20480, 110), (3, 1)):
        size = train_chunk(net, "cuda", M, B)
        assert 1 <= size <= M
        assert size * B * largest * 4 <= TRAIN_CHUNK_BYTES["cuda"] or size == 1
        assert size * B * largest < 2**31
        assert size == M or (size + 1) * B * largest * 4 > TRAIN_CHUNK_BYTES["cuda"]   # no smaller than needed
        assert train_chunk(net, "cpu", M, B) == (max(1, 64 // B) if conv else M)
    assert train_chunk(net, "cuda", 5120, 110) < 5120 or not conv            # the failing H100 case is split


def test_chunked_trimmed_gradients_equal_one_padded_batch(device, monkeypatch):
    """The engine's chunks of models (batch padding trimmed; on CPU one
    model a chunk on threads, on CUDA chunks of 2 models here by a small
    TRAIN_CHUNK_BYTES) give the gradients, norms and losses of one call
    over all models' padded batches."""
    from paretofl.fl import engine as E

    g = torch.Generator().manual_seed(1)
    ds = D.Dataset("synthetic", torch.randn(600, 1, 28, 28, generator=g), torch.randint(0, 10, (600,), generator=g),
                   torch.randn(20, 1, 28, 28, generator=g), torch.randint(0, 10, (20,), generator=g))
    parts = D.partition_iid(ds.y_train.numpy(), 3, seed=0)
    eng = Engine(build_model("lenet", ds.shape), ds, parts, 2, seeds=[1, 2], device=device)
    params = eng.broadcast(eng.init_global())
    idx, w = eng.poisson_batches(torch.full((eng.M,), 0.4, device=device))   # batches of ~80, unequal
    assert len(set(w.sum(1).tolist())) > 1
    monkeypatch.setitem(E.TRAIN_CHUNK_BYTES, "cuda", 2 * idx.shape[1] * eng.net.max_per_sample * 4)
    assert E.train_chunk(eng.net, device, eng.M, idx.shape[1]) == (1 if device == "cpu" else 2)
    clip = torch.full((eng.M,), 0.7, device=device)
    got = eng._grads_chunked(params, idx, w, clip)
    xb = eng.x[idx]
    want = eng.net.clipped_grads(params, xb, eng.y[idx], w, clip=clip)
    for a, b in zip(got[0], want[0]):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert torch.allclose(got[1] * w, want[1] * w, rtol=1e-4)     # norms of real samples; padding is 0 or ignored
    assert torch.allclose(got[2], want[2], rtol=1e-5)


@pytest.mark.parametrize("dp", [True, False])
def test_models_that_do_not_step_cost_nothing_and_change_nothing(dp, device):
    """Only active models are computed; the active ones step exactly as when
    every model steps (models are independent, draws are per replica)."""
    g = torch.Generator().manual_seed(0)
    ds = D.Dataset("synthetic", torch.randn(120, 1, 28, 28, generator=g), torch.randint(0, 10, (120,), generator=g),
                   torch.randn(20, 1, 28, 28, generator=g), torch.randint(0, 10, (20,), generator=g))
    parts = D.partition_iid(ds.y_train.numpy(), 4, seed=0)
    net = build_model("lenet", ds.shape)
    kw = dict(dpsgd=DPSGD(0.2, 0.5, 6.0, sigma=1.0)) if dp else dict(batch_size=8)
    eng = Engine(net, ds, parts, 2, seeds=[3, 4], device=device)
    params = eng.broadcast(eng.init_global())
    some = torch.tensor([3, 0, 2, 3, 0, 3, 1, 0], device=device)
    every = torch.full((8,), 3, device=device)
    out_some, st_some = eng.local_steps(params, some, 0.1, **kw)
    eng2 = Engine(net, ds, parts, 2, seeds=[3, 4], device=device)
    out_all, _ = eng2.local_steps(params, every, 0.1, **kw)
    for a, b, p0 in zip(out_some, out_all, params):
        full, idle = some == 3, some == 0
        assert torch.allclose(a[full], b[full], atol=1e-5)
        assert torch.equal(a[idle], p0[idle])
        assert not torch.allclose(a[some == 1], b[some == 1])
    assert torch.all(st_some.loss[some == 0] == 0) and torch.all(st_some.loss[some > 0] > 0)


@pytest.mark.parametrize("name", ["lr", "lenet"])
def test_evaluation_in_blocks_equals_each_replica_on_the_whole_test_set(name, device, monkeypatch):
    """Evaluation goes in blocks of replicas and samples whose activations
    fit EVAL_BLOCK_BYTES (conv nets on CPU one replica at a time, on CUDA
    all replicas at once); with blocks of 7 samples (the last one partial)
    loss and accuracy equal each replica's model run on all 50 test
    samples at once, scored by F.cross_entropy."""
    from paretofl.fl import engine as E

    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g)
    xt, yt = torch.randn(50, 1, 28, 28, generator=g), torch.randint(0, 10, (50,), generator=g)
    net = build_model(name, (1, 28, 28))
    eng = Engine(net, D.Dataset("t", x, y, xt, yt), [np.arange(0, 20), np.arange(20, 40)], 3, device=device)
    glob = eng.init_global()
    xt, yt = xt.to(device), yt.to(device)
    group = 1 if (name == "lenet" and device == "cpu") else 3
    monkeypatch.setitem(E.EVAL_BLOCK_BYTES, device, 7 * group * 2 * net.max_activation * 4)
    assert eng.eval_blocks(50) == (group, 7)
    loss, acc = eng.evaluate(glob)
    for r in range(3):
        logits = net.forward([p[r:r + 1] for p in glob], xt.unsqueeze(0))[0]
        assert loss[r].item() == pytest.approx(F.cross_entropy(logits, yt).item(), rel=1e-5)
        assert acc[r].item() == pytest.approx((logits.argmax(1) == yt).float().mean().item())
    vl, _ = eng.evaluate(glob, slice(0, 12))             # a slice of the test samples: the first 12
    ref = [F.cross_entropy(net.forward([p[r:r + 1] for p in glob], xt[None, :12])[0], yt[:12]).item()
           for r in range(3)]
    assert vl.tolist() == pytest.approx(ref, rel=1e-5)
    assert len({round(v, 6) for v in ref}) == 3          # the replicas' models differ


def test_run_stops_when_budget_is_spent(digits):
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 2, seeds=[0, 1])
    pol = ALGORITHMS["dpfedavg"](eng, sigma=[0.8, 3.0], clip=1.0, lr=0.1, batch_rate=0.2, local_steps=1)
    _, hist, fin = train(pol, rounds=200, epsilon=1.0, delta=1e-5)
    assert np.all(fin["epsilon"] <= 1.0)
    assert fin["rounds"][0] < fin["rounds"][1]        # less noise, fewer rounds
    from paretofl.theory.privacy import compute_epsilon, max_steps_searched
    assert fin["rounds"][0] == max_steps_searched(1.0, 0.2, 0.8, 1e-5)   # as far as the reported ε allows
    assert fin["epsilon"][0] == pytest.approx(compute_epsilon(0.2, 0.8, int(fin["rounds"][0]), 1e-5))


def test_ali_dpfl_adapts_tau(digits):
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[0])
    pol = ALGORITHMS["ali-dpfl"](eng, epsilon=3.0, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.05, rounds_server=8)
    assert pol.R_c[0] > 8
    _, hist, fin = train(pol, rounds=8, epsilon=3.0)
    taus = [row["tau"] for row in hist.rows]
    assert max(taus) > 1 and len(set(taus)) > 1        # τ* recomputed, not fixed
    assert fin["epsilon"][0] <= 3.0 and fin["rounds"][0] <= 8
    # R_s >= R_c: τ* = 1 (Lemma 1)
    pol2 = ALGORITHMS["ali-dpfl"](eng, epsilon=3.0, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.05,
                                  rounds_server=10**6)
    _, hist2, _ = train(pol2, rounds=4, epsilon=3.0)
    assert all(row["tau"] == 1 for row in hist2.rows)


def test_ali_dpfl_tau_uses_the_batch_the_noise_is_divided_by(digits):
    """Eq. (9)'s noise term is σ²C²d/B̂², B̂ the batch the noised sum is
    divided by: q·min|D_i| by default, the fixed divisor when one is given
    (ALI-DPFL's code divides by 64).  After the first round (μ still its
    default) τ* is Eq. (9)'s for that B̂."""
    from paretofl.theory.convergence import ALIStep, ali_next_tau

    parts = D.partition_iid(digits.y_train.numpy(), 4)
    q, sigma, C = 0.05, 2.0, 1.0
    B_default = q * min(len(p) for p in parts)
    taus = {}
    for div, B in ((None, B_default), (64.0, 64.0)):
        eng = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[0])
        pol = ALGORITHMS["ali-dpfl"](eng, epsilon=3.0, sigma=sigma, clip=C, lr=0.5, batch_rate=q,
                                     rounds_server=8, batch_divisor=div)
        glob = pol.round(0, eng.init_global(), np.ones(1, bool))
        pol.after_round(0, glob, np.array([1.0]))
        taus[div] = int(pol.tau[0])
        assert taus[div] == ali_next_tau(8, int(pol.R_c[0]), ALIStep(mu=1.0, C=C, sigma=sigma, d=eng.net.n_params,
                                                                     B=B, gamma=10.0), 1)
    assert taus[None] != taus[64.0]


def test_adap_dpfl_decays_noise_after_three_drops(digits):
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 2, seeds=[0, 1])
    pol = ALGORITHMS["adap-dpfl"](eng, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.1, noise_decay=0.5, alpha=1.0)
    glob = eng.init_global()
    pol.round(0, glob, np.ones(2, bool))
    for t, losses in enumerate([[3.0, 3.0], [2.0, 3.5], [1.0, 3.0], [0.5, 2.0]]):
        pol.after_round(t, glob, np.array(losses))
    # replica 0: drops at rounds 2, 3, 4 -> one decay; replica 1 never three in a row
    assert pol.sigma[0] == pytest.approx(1.0) and pol.sigma[1] == pytest.approx(2.0)
    assert np.all(pol.clip > 0) and np.all(pol.clip != 1.0)  # adaptive clipping moved C


def test_nbafl_downlink_noise_only_past_threshold(digits):
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[0])
    below = ALGORITHMS["nbafl"](eng, epsilon=50.0, rounds=4, exposures=2, calibration="paper")  # T = 4 <= L√N = 4
    above = ALGORITHMS["nbafl"](eng, epsilon=50.0, rounds=10, exposures=2, calibration="paper")  # T = 10 > 4
    assert below.sigma_d == 0.0 and above.sigma_d > 0.0
    assert below.sigma_u > 0
    k = ALGORITHMS["nbafl"](eng, epsilon=50.0, rounds=10, exposures=2, clients_per_round=2, calibration="paper")
    assert k.K == 2
    _, _, fin = train(k, rounds=10)
    # reported: the ε parameter clipping guarantees, far above the paper's target (tests/fl/test_audit.py)
    assert fin["epsilon"][0] == k.fixed_epsilon() > 50.0 and fin["rounds"][0] == 10
    # the default calibration meets the budget it is given
    honest = ALGORITHMS["nbafl"](eng, epsilon=2.0, rounds=10, clients_per_round=2)
    _, _, fin = train(honest, rounds=10)
    assert fin["epsilon"][0] <= 2.0 * (1 + 1e-6) and fin["rounds"][0] == 10


def test_poisson_batches_have_the_right_rate(digits, device):
    parts = [np.arange(1000)]
    eng = Engine(build_model("lr", digits.shape), digits, [np.arange(len(digits.y_train))], 50, seeds=range(50),
                 device=device)
    idx, w = eng.poisson_batches(eng.vec(0.05))
    idx, w = idx.cpu(), w.cpu()
    sizes = w.sum(1).numpy()
    n = len(digits.y_train)
    assert abs(sizes.mean() - 0.05 * n) < 4 * math.sqrt(0.05 * 0.95 * n / 50)
    for m in range(50):  # no repeats within a batch, all indices in range
        chosen = idx[m][w[m] > 0]
        assert len(set(chosen.tolist())) == len(chosen) and int(chosen.max()) < n
    del parts


def test_partitions():
    y = np.repeat(np.arange(10), 100)
    for parts in (D.partition_iid(y, 7), D.partition_dirichlet(y, 7, 0.1, min_size=5), D.partition_shards(y, 10, 40)):
        allidx = np.concatenate(parts)
        assert len(allidx) == len(y) and len(np.unique(allidx)) == len(y)
    sh = D.partition_shards(y, 10, 40)
    assert all(len(p) == 100 for p in sh)
    skew = D.partition_dirichlet(y, 5, 0.01, min_size=1)
    assert max(len(np.unique(y[p])) for p in skew) < 10  # strong label skew
    with pytest.raises(ValueError):
        D.partition_shards(y, 7, 40)


def test_capped_dirichlet_stops_dealing_to_full_clients():
    """Capped: once a client holds N/n samples it receives nothing more, so
    no client exceeds the cap by more than the one class dealt as it filled
    up; uncapped, with the same draws, a client ends far above it."""
    y = np.repeat(np.arange(10), 600)
    cap = len(y) / 5
    over = 0
    for seed in range(8):
        capped = D.partition_dirichlet(y, 5, 0.05, seed=seed, capped=True)
        raw = D.partition_dirichlet(y, 5, 0.05, seed=seed)
        for parts in (capped, raw):
            allidx = np.concatenate(parts)
            assert len(allidx) == len(y) and len(np.unique(allidx)) == len(y)
        assert max(len(p) for p in capped) <= cap + 600
        over += max(len(p) for p in raw) > cap + 600
        assert np.mean([len(np.unique(y[p])) for p in capped]) < 7               # labels still skewed
    assert over >= 3
    assert D.make_partition("dirichlet-capped", y, 5, seed=3, beta=0.05)[0].tolist() == \
        D.partition_dirichlet(y, 5, 0.05, seed=3, capped=True)[0].tolist()


def test_idx_reader_and_clean_errors(tmp_path):
    imgs = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    labels = np.array([3, 7], dtype=np.uint8)

    def write(name, arr, code):
        header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
        with gzip.open(tmp_path / f"{name}.gz", "wb") as f:
            f.write(header + arr.tobytes())

    write("train-images-idx3-ubyte", imgs, 3)
    write("train-labels-idx1-ubyte", labels, 1)
    write("t10k-images-idx3-ubyte", imgs, 3)
    write("t10k-labels-idx1-ubyte", labels, 1)
    ds = D.load_dataset("fashion-mnist", data_dir=str(tmp_path), download=False)
    assert ds.x_train.shape == (2, 1, 28, 28) and ds.y_train.tolist() == [3, 7]
    with gzip.open(tmp_path / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big") + b"\x01")
    with pytest.raises(ValueError, match="truncated"):
        D.load_dataset("fashion-mnist", data_dir=str(tmp_path), download=False)
    with pytest.raises(ValueError, match="not found"):
        D.load_dataset("cifar10", data_dir=str(tmp_path / "empty"), download=False)
    with pytest.raises(ValueError, match="unknown data set"):
        D.load_dataset("imagenet")


def test_policies_adapt_every_round_whatever_the_eval_interval(digits):
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[0])
    calls = []

    class Spy(ALGORITHMS["adap-dpfl"]):
        def after_round(self, t, glob, val_loss):
            calls.append((t, val_loss is not None))
            super().after_round(t, glob, val_loss)

    train(Spy(eng, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.05), rounds=6, epsilon=20.0, evaluate=100)
    assert calls == [(t, True) for t in range(6)]


def test_a_policy_that_validates_is_reported_on_other_test_samples(digits):
    """Adap DP-FL decays its noise by the server's validation loss: the
    samples that loss is taken on are held out of the accuracy and loss the
    run reports (they were read for its choices), checked by evaluating the
    returned models by hand; a policy that does not validate reports on the
    whole test set."""
    import torch.nn.functional as F

    parts = D.partition_iid(digits.y_train.numpy(), 4)
    n = len(digits.y_test)
    seen = []

    class Spy(ALGORITHMS["adap-dpfl"]):
        def after_round(self, t, glob, val_loss):
            seen.append(val_loss.copy())
            super().after_round(t, glob, val_loss)

    for cls, val_size, held in ((Spy, 100, 100), (Spy, 10**6, n // 2), (ALGORITHMS["dpfedavg"], 100, 0)):
        eng = Engine(build_model("lr", digits.shape), digits, parts, 2, seeds=[0, 1])
        seen.clear()
        pol = cls(eng, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.1)
        pol.val_size = val_size
        glob, _, fin = train(pol, rounds=3, epsilon=50.0)
        xt, yt = eng.x_test, eng.y_test
        for r in range(2):
            logits = eng.net.forward([p[r:r + 1] for p in glob], xt[None, :n - held])[0]
            assert fin["test_loss"][r] == pytest.approx(F.cross_entropy(logits, yt[:n - held]).item(), rel=1e-5)
            assert fin["accuracy"][r] == pytest.approx((logits.argmax(1) == yt[:n - held]).float().mean().item())
            if held:                 # the last round's validation loss: the held-out samples, not the reported
                v = eng.net.forward([p[r:r + 1] for p in glob], xt[None, n - held:])[0]
                assert seen[-1][r] == pytest.approx(F.cross_entropy(v, yt[n - held:]).item(), rel=1e-5)
        assert bool(seen) == bool(held)


def test_a_policy_that_validates_needs_samples_to_hold_out(digits):
    """With one test sample nothing can be held out: refused, not a noise
    decay that silently never happens (the final attack)."""
    ds = D.Dataset("one", digits.x_train[:200], digits.y_train[:200], digits.x_test[:1], digits.y_test[:1])
    eng = Engine(build_model("lr", digits.shape), ds, D.partition_iid(ds.y_train.numpy(), 4), 1, seeds=[0])
    with pytest.raises(ValueError, match="at least 2 test samples"):
        train(ALGORITHMS["adap-dpfl"](eng, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.1), rounds=2, epsilon=50.0)
    pol = ALGORITHMS["adap-dpfl"](eng, sigma=2.0, clip=1.0, lr=0.5, batch_rate=0.1)
    pol.val_size = 0
    with pytest.raises(ValueError, match="val_size of at least 1"):
        train(pol, rounds=2, epsilon=50.0)


def test_adap_dpfl_reported_epsilon_is_opacus_rdp_of_the_sigmas_it_used(digits):
    """The trainer's own accounting with a σ that changes between rounds,
    against an independent composition: Opacus's RDP of the exact sequence
    of (σ_t, q_b) steps the run charged: per round τ − 1 steps at σ_t, and
    the last step with the clipped-norm statistic of its batch as one step
    at σ_t/√2."""
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    from paretofl.theory.privacy import DEFAULT_ORDERS

    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 2, seeds=[0, 1])
    pol = ALGORITHMS["adap-dpfl"](eng, sigma=3.0, clip=1.0, lr=0.5, batch_rate=0.1, noise_decay=0.6, alpha=1.0,
                                  local_steps=2, patience=1, sigma_min=0.4)
    used = []
    orig = pol.charges

    def spy(t):
        ch = orig(t)
        used.append([np.array(c.noise_multiplier, copy=True) for c in ch])
        return ch

    pol.charges = spy
    _, _, fin = train(pol, rounds=8, epsilon=None)
    from paretofl.theory.privacy import RDPAccountant

    grid = list(DEFAULT_ORDERS)
    for r in range(2):
        sig = [u[0][r] for u in used]
        assert len(set(sig)) >= 2                                # σ really changed during the run
        def opacus_rdp(orders):
            return sum(np.array(compute_rdp(q=0.1, noise_multiplier=s_, steps=1, orders=orders))
                       + np.array(compute_rdp(q=0.1, noise_multiplier=s_ / math.sqrt(2), steps=1, orders=orders))
                       for s_ in sig)

        theirs, _ = get_privacy_spent(orders=grid, rdp=opacus_rdp(grid), delta=1e-5)
        assert fin["epsilon"][r] <= theirs * (1 + 1e-9)         # the order search only improves on the grid
        acc = RDPAccountant()
        for s_ in sig:
            acc.step(s_, 0.1, 1)
            acc.step(s_ / math.sqrt(2), 0.1, 1)
        eps, order = acc.epsilon_and_order(1e-5)
        assert eps == pytest.approx(fin["epsilon"][r], rel=1e-12)
        # ... and at the order it picked, Opacus's own RDP gives the same ε
        at_order, _ = get_privacy_spent(orders=[order], rdp=opacus_rdp([order]), delta=1e-5)
        assert fin["epsilon"][r] == pytest.approx(at_order, rel=1e-6)


# ---------------------------------------------------------------- cohorts
def _population(n_clients, per_client=3, features=6, seed=0):
    """A synthetic population of ``n_clients`` clients of unequal sizes
    (1 to ``per_client`` samples each), as arrays with client ids."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, per_client + 1, (n_clients,), generator=g)
    ids = torch.repeat_interleave(torch.arange(n_clients), sizes).numpy()
    x = torch.randn(len(ids), features, generator=g)
    w = torch.randn(features, 4, generator=g)
    xt = torch.randn(40, features, generator=g)
    return D.Dataset.from_arrays(x.numpy(), (x @ w).argmax(1).numpy(), xt.numpy(), (xt @ w).argmax(1).numpy(),
                                 clients=ids, name="population")


@pytest.mark.parametrize("dp", [True, False])
def test_a_cohort_trains_as_a_population_of_just_its_clients(dp, device):
    """The engine materialises only a round's cohort, and a cohort of a large
    population trains exactly as a population made of just its clients
    would (each replica's draws come from its own rows alone, so the same
    seed gives the same batches and noise)."""
    ds = _population(40, per_client=12)
    parts = D.partition_given(ds.clients)
    net = build_model("lr", ds.shape, 4)
    kw = dict(dpsgd=DPSGD(0.3, 0.5, 2.0, sigma=1.0)) if dp else dict(batch_size=4)
    big = Engine(net, ds, parts, 2, seeds=[3, 4], device=device)
    g = torch.Generator().manual_seed(9)
    mask = torch.rand(2, 40, generator=g) < 0.2
    c = big.cohort(mask)
    assert c.size == int(mask.sum()) and list(c.counts) == mask.sum(1).tolist()
    glob = big.init_global()
    # rows stop at different steps, and replica 1's rows take more steps than replica 0's
    steps = 1 + torch.arange(c.size, device=device) % 2 + 2 * c.replica
    out, _ = big.local_steps(big.broadcast(glob, c), steps, 0.1, cohort=c, **kw)
    for r, s in enumerate([3, 4]):
        mine = torch.nonzero(mask[r]).reshape(-1).tolist()
        small = Engine(net, ds, [parts[i] for i in mine], 1, seeds=[s], device=device)
        rows = (c.replica == r).nonzero().reshape(-1)
        start = [p[r:r + 1].repeat_interleave(len(mine), 0) for p in glob]
        want, _ = small.local_steps(start, steps[rows], 0.1, **kw)
        for a, b in zip(out, want):
            assert torch.allclose(a[rows], b, atol=1e-6)


def test_a_round_materialises_only_its_cohort(monkeypatch):
    """At N = 20,000 and q = 0.005 a client-level round computes gradients
    and draws noise for its ~100 clients, not the population, and Adam's
    moments exist only for clients that have trained."""
    ds = _population(20000)
    eng = Engine(build_model("lr", ds.shape, 4), ds, D.partition_given(ds.clients), 2, seeds=[0, 1])
    rows, drawn = [], []
    grads, normals = Engine._grads_chunked, Engine._normals
    monkeypatch.setattr(Engine, "_grads_chunked", lambda self, p, idx, *a, **k: rows.append(idx.shape[0])
                        or grads(self, p, idx, *a, **k))
    monkeypatch.setattr(Engine, "_normals", lambda self, tails, counts, *a: drawn.append(int(np.sum(counts)))
                        or normals(self, tails, counts, *a))
    pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", sigma=1.0, clip=1.0, lr=0.1, client_rate=0.005,
                                 batch_size=2, optimizer="adam")
    glob, seen = eng.init_global(), set()
    for t in range(3):
        glob = pol.round(t, glob, np.ones(2, bool))
        c = pol.last_cohort
        seen |= set(c.ids(eng.N).tolist())
        assert 150 < c.size < 260 and not c.full                   # 2 replicas x ~100 clients
    assert max(rows) <= 260 and max(drawn) <= 260
    assert pol.adam.clients == len(seen) < 800
    assert pol.adam.m[0].shape[0] < 2 * len(seen) + 16              # capacity grows with the clients that train


@pytest.mark.parametrize("mechanism", ["client-aggregate", "sample"])
def test_replicas_sampling_clients_run_as_each_replica_alone(mechanism, device):
    """With client sampling and clients of unequal sizes (so cohorts take
    unequal numbers of local steps), each replica's run is still its own:
    the batched run equals each replica run alone."""
    ds = _population(30, per_client=40)
    parts = D.partition_given(ds.clients)
    kw = dict(mechanism=mechanism, sigma=0.5, clip=1.0, lr=0.2, client_rate=0.15, batch_size=2, batch_rate=0.3)
    seeds = [5, 6, 7]

    def run(s):
        eng = Engine(build_model("lr", ds.shape, 4), ds, parts, len(s), seeds=s, device=device)
        return train(ALGORITHMS["dpfedavg"](eng, **kw), rounds=3, epsilon=100.0)

    g_all, _, f_all = run(seeds)
    for r, s in enumerate(seeds):
        g1, _, f1 = run([s])
        for a, b in zip(g_all, g1):
            assert torch.allclose(a[r], b[0], atol=1e-5)
        assert f_all["epsilon"][r] == pytest.approx(f1["epsilon"][0])


def test_memory_follows_the_cohort_and_a_run_that_cannot_fit_is_refused_first(monkeypatch):
    """The bound said before starting grows with the cohort, not the
    population; a run above the memory free is refused with the estimate
    before any round (no model is even initialised)."""
    from paretofl.fl.algorithms import base

    need = {}
    for n in (1000, 10000):
        ds = _population(n, per_client=1)
        eng = Engine(build_model("lr", ds.shape, 4), ds, D.partition_given(ds.clients), 3, seeds=[0, 1, 2])
        pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", client_rate=100 / n, batch_size=1)
        need[n] = base.memory_needed(pol)
        rows = 3 * 8 * pol.max_cohort()[0] * eng.net.n_params * 4             # the cohort's copies alone
        assert need[n] >= rows
        assert 100 < pol.max_cohort()[0] < 170
    assert need[10000] / need[1000] < 1.1
    monkeypatch.setattr(base, "memory_available", lambda device: need[10000] // 2)
    monkeypatch.setattr(Engine, "init_global", lambda self: pytest.fail("work started"))
    with pytest.raises(ValueError, match=r"needs at least .* GB a round \(3 replicas x up to 1\d\d clients"):
        train(pol, rounds=2, epsilon=10.0)


def test_train_refuses_a_meaningless_delta_and_options_its_mechanism_ignores(capsys):
    """δ at or above one over the individuals protected (clients for
    client-level DP, samples for DP-SGD) is refused, and so is an option the
    chosen mechanism would ignore — in the API with its parameter names, on
    the command line with its flags: the same check."""
    import paretofl
    from paretofl.cli import main

    n = len(D.load_dataset("digits").y_train)
    common = dict(dataset="digits", model="lr", clients=4, rounds=1)
    with pytest.raises(ValueError, match=r"delta = 0.25 is not below 1/4 \(one over the clients"):
        paretofl.train(mechanism="client-aggregate", delta=0.25, **common)
    with pytest.raises(ValueError, match=rf"delta = 0.001 is not below 1/{n:,} \(one over the samples"):
        paretofl.train(delta=1e-3, **common)
    assert paretofl.train(mechanism="client-aggregate", delta=1e-3, **common).delta == 1e-3
    for mech, opt in (("client-aggregate", {"batch_rate": 0.5}), ("client-local", {"local_steps": 2}),
                      ("sample", {"batch_size": 32}), ("sample", {"local_epochs": 2})):
        with pytest.raises(ValueError, match=f"mechanism {mech} does not use {next(iter(opt))}: drop it"):
            paretofl.train(mechanism=mech, **opt, **common)
    rc = main(["train", "--dataset", "digits", "--model", "lr", "--clients", "4", "--mechanism", "client-aggregate",
               "--batch-rate", "0.5", "--local-steps", "2"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--mechanism client-aggregate does not use --batch-rate, --local-steps: drop them" in err
    assert "batch_rate" not in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------- clients with budgets of their own
def _groups(mechanism, rates, sigmas, n, budgets=(1.0, 4.0)):
    from paretofl.recommendation import Design

    group_of = [0] * (n // 2) + [1] * (n - n // 2)
    m = sum(rates[g] for g in group_of)
    groups = [dict(budget=b, clients=group_of.count(g), share=group_of.count(g) / n, q=rates[g], sigma=sigmas[g],
                   epsilon=0.0) for g, b in enumerate(budgets)]
    s = sigmas[0] if mechanism == "client-aggregate" else math.sqrt(np.mean([sigmas[g] ** 2 for g in group_of]))
    return Design(q=m / n, rounds=5, sigma=s, epsilon=0.0, delta=1e-5, case="", utility_bound=0.0, kappa=1.0,
                  kappa_source="test", mechanism=mechanism, noise_multiplier=s, charged_noise_multiplier=s,
                  sampling="", budget=min(budgets), n_clients=n, max_rounds=5, groups=groups, group_of=group_of)


def test_each_group_is_sampled_at_its_rate_and_the_sum_keeps_its_noise(digits, device):
    """Aggregate view with two groups sampled at 0.2 and 0.8: each client
    joins at its group's rate; the released update carries noise of
    variance z²C²/m² per coordinate (z = σ√m, m = Σ q_i) whatever the
    cohort, and is divided by m."""
    n, R, sigma, C = 10, 400, 1.5, 0.05
    gd = _groups("client-aggregate", (0.2, 0.8), (sigma, sigma), n)
    eng = Engine(build_model("lr", digits.shape), digits, D.partition_iid(digits.y_train.numpy(), n), R,
                 seeds=range(R), device=device)
    pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", sigma=sigma, clip=C, lr=1e-9, client_rate=0.5,
                                 batch_size=64, groups=gd)
    g0 = eng.init_global()
    g0 = [p[:1].expand_as(p).clone() for p in g0]
    out = pol.round(0, g0, np.ones(R, bool))
    mask = pol.last_cohort.mask.cpu().numpy()
    for g, q in ((0, 0.2), (1, 0.8)):
        freq = mask[:, np.array(gd.group_of) == g].mean()
        assert abs(freq - q) < 5 * math.sqrt(q * (1 - q) / (R * n / 2))
    step = (eng.flat(out) - eng.flat(g0)).cpu().numpy().astype(np.float64)
    m = 5 * 0.2 + 5 * 0.8
    ratio = (step ** 2).mean(1) / ((sigma * math.sqrt(m) * C) ** 2 / m ** 2)
    counts = pol.last_cohort.counts
    assert ratio[counts < m].mean() == pytest.approx(1.0, rel=0.04)
    assert ratio[counts > m].mean() == pytest.approx(1.0, rel=0.04)


def test_the_trainer_runs_groups_only_under_a_mechanism_that_runs_them(digits):
    """The trainer's own check, below the file's: every trainable mechanism
    that cannot run the groups' rates (Flower's one uniform cohort, the
    banded noise, the sample-level and distributed releases) refuses a
    group design in one line, before a round (an attack trained a group
    file switched to flower: one cohort of 11 of 20, the strict group
    spending twice what its rate said)."""
    from paretofl.mechanisms import REGISTRY

    n = 20
    eng = Engine(build_model("lr", digits.shape), digits, D.partition_iid(digits.y_train.numpy(), n), 1, seeds=[0])
    refused = []
    for name, cls in REGISTRY.items():
        if not cls.trainable or cls.groups:
            continue
        gd = _groups(name, (0.1, 1.0), (1.0, 1.0), n)
        opts = {"dim": eng.net.n_params} if "dim" in cls.constructor_options else {}
        with pytest.raises(ValueError, match="per-client budgets run with client-aggregate or client-local"):
            ALGORITHMS["dpfedavg"](eng, mechanism=name, sigma=1.0, clip=1.0, groups=gd, **opts,
                                   client_rate=1.0 if name == "bandmf" else 0.55)     # bandmf: q = 1/b, b = 1
        refused.append(name)
    assert {"flower", "flower-accounted", "sample", "bandmf", "distributed"} <= set(refused)
    # an algorithm of its own never reaches a release: the trainer's entry refuses it by name (it said "give either
    # a config or options")
    from paretofl.fl.build import Budget, assemble, prepare

    setup = prepare(digits, "lr", clients=n, partition="iid", seed=0)
    with pytest.raises(ValueError, match="per-client budgets run with dpfedavg under client-aggregate or "
                                         "client-local, not nbafl"):
        assemble(setup, "nbafl", 1, budget=Budget(epsilon=2.0, rounds=3,
                                                  groups=_groups("client-aggregate", (0.1, 1.0), (1.0, 1.0), n)))


def test_the_local_view_adds_each_groups_own_noise(digits, device):
    n, R, C = 8, 60, 0.1
    gd = _groups("client-local", (1.0, 1.0), (3.0, 0.5), n)
    eng = Engine(build_model("lr", digits.shape), digits, D.partition_iid(digits.y_train.numpy(), n), R,
                 seeds=range(R), device=device)
    pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-local", sigma=1.0, clip=C, lr=1e-9, groups=gd)
    c = pol.release.select(np.ones(R, bool))
    noisy, top = pol.release.privatise(torch.zeros(c.size, eng.net.n_params, device=device), c)
    grp = np.array(gd.group_of)[c.client.cpu().numpy()]
    for g, s in ((0, 3.0), (1, 0.5)):
        assert noisy[torch.as_tensor(grp == g)].double().var().item() == pytest.approx((s * C) ** 2, rel=0.03)
    assert torch.all(top == 0)
    (ch,) = pol.charges(0)
    assert ch.sampling == "attributed" and ch.noise_multiplier.tolist() == [3.0, 0.5] * R and np.all(ch.rate == 1.0)


def test_training_with_budgets_keeps_each_group_within_its_own(digits):
    """train(budgets=...): one ledger per group; the history reports ε per
    group, each equal to its own accountant's at its rate and within its
    budget; the run stops where the next round would pass any group's."""
    import paretofl
    from paretofl.theory.privacy import compute_epsilon

    b = paretofl.budgets.Budgets.shares([0.5, 0.5], [1.0, 4.0], 20)
    d = paretofl.design(20, None, max_rounds=30, budgets=b, kappa=2.0, sigma_min=0.01)
    r = paretofl.train(dataset="digits", model="lr", clients=20, design=d, lr=0.5, eval_every=1)
    assert set(r.epsilon_groups) == {"1", "4"} and r.rounds == d.rounds
    for g in d.groups:
        want = compute_epsilon(g["q"], d.noise_multiplier, d.rounds, d.delta)
        assert r.epsilon_groups[f"{g['budget']:g}"] == pytest.approx(want, rel=1e-9)
        assert want <= g["budget"] * (1 + 1e-9)
    last = r.history[-1]
    assert last["epsilon_1"] <= 1.0 and last["epsilon_4"] <= 4.0 and last["epsilon"] == last["epsilon_4"]


def test_a_run_with_groups_stops_where_the_next_round_would_pass_any_groups_budget(digits):
    from paretofl.theory.privacy import max_steps_searched

    n = 10
    gd = _groups("client-aggregate", (0.3, 0.9), (0.8, 0.8), n, budgets=(1.0, 3.0))
    eng = Engine(build_model("lr", digits.shape), digits, D.partition_iid(digits.y_train.numpy(), n), 2, seeds=[0, 1])
    pol = ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", sigma=0.8, clip=1.0, lr=0.1, client_rate=0.6,
                                 groups=gd)
    _, hist, fin = train(pol, rounds=500)
    z = gd.noise_multiplier
    want = min(int(max_steps_searched(1.0, 0.3, z, 1e-5)), int(max_steps_searched(3.0, 0.9, z, 1e-5)))
    assert np.all(fin["rounds"] == want) and want < 500
    assert np.all(fin["epsilon_groups"]["1"] <= 1.0) and np.all(fin["epsilon_groups"]["3"] <= 3.0)


def test_the_noise_bound_the_statement_gives_is_the_samplers(digits):
    """Issue 44, item 6: the statement's figures are the sampler's — its
    bound (mpmath: √(2·1013 ln 2) = 37.47) and this design's δ_fp — and the
    engine's noise never passes the bound."""
    import mpmath

    import paretofl
    from paretofl.mechanisms.statement import statement
    from paretofl.theory.float_noise import NOISE_BOUND, float_delta

    assert f"{float(mpmath.sqrt(2 * 1013 * mpmath.log(2))):.2f}" == "37.47"
    eng = Engine(build_model("lr", digits.shape), digits, [np.arange(100)], 1, seeds=[4])
    assert float(eng.normal((4_000_000,)).abs().max()) <= NOISE_BOUND
    d = paretofl.design(100, 2, max_rounds=500)
    text = statement(d).split("- Floating point: ")[1]
    assert "bounded by 37.47 standard deviations" in text and "2^-1013" in text and "Mironov 2012" in text
    assert f"at most {float_delta(d.epsilon):.1e}." in text and float_delta(d.epsilon) < 1e-270


def test_dp_sgd_divides_by_declared_sizes_and_a_real_release_must_declare_them(digits):
    """Issue 47's attack: DP-SGD in clients divided each step's noised sum by
    q_b times the client's own count, which one sample more moves (the noise
    scale then tells the neighbours apart). With declared sizes the divisor
    and the weights are those numbers, whatever the data's counts; a real
    release (secure) without them is refused in one line; a simulation
    without them says that its ε assumes the counts public."""
    import paretofl
    from paretofl.fl.build import assemble, prepare

    setup = prepare(digits, "lr", clients=4, partition="iid", seed=0)
    pol = assemble(setup, "dpfedavg", mechanism="sample", batch_rate=0.1, declared_sizes=100).policy
    c = pol.release.select(np.ones(pol.engine.R, dtype=bool))
    assert torch.allclose(pol.release.divisor(c), torch.full((c.size,), 10.0))
    assert np.all(pol.release.sizes == 100) and len(set(pol.engine.client_n.tolist())) >= 1
    with pytest.raises(ValueError, match="declared_sizes") as e:
        assemble(setup, "dpfedavg", mechanism="sample", batch_rate=0.1, secure=True)
    assert "\n" not in str(e.value)
    r = paretofl.train(dataset=digits, model="lr", clients=4, rounds=1, epsilon=50, mechanism="sample")
    assert "assumed public" in r.unit
    r = paretofl.train(dataset=digits, model="lr", clients=4, rounds=1, epsilon=50, mechanism="sample",
                       declared_sizes=400)
    assert "assumed public" not in r.unit


def test_an_nbafl_design_releases_its_own_noise_and_a_given_sigma_is_checked(digits):
    """The design's uplink noise multiplier travels into training (it was
    dropped and calibrated again); a sigma given by hand that would spend
    more than the budget over the rounds is refused; with no sigma the
    calibration to the budget is kept."""
    import paretofl

    d = paretofl.nbafl_design(4, 2.0, 1e-5, 1.0, 100, max_rounds=10)
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[0])
    pol = ALGORITHMS["nbafl"](eng, epsilon=d.budget, rounds=d.rounds, clip=1.0, sigma=d.sigma)
    assert pol.sigma_u == pytest.approx(2 * 1.0 * d.sigma, rel=1e-12)
    calibrated = ALGORITHMS["nbafl"](eng, epsilon=d.budget, rounds=d.rounds, clip=1.0)
    assert calibrated.sigma_u == pytest.approx(pol.sigma_u, rel=1e-6)      # the design's z is the budget's
    assert pol.fixed_epsilon() <= d.budget * (1 + 1e-9)
    with pytest.raises(ValueError, match="spends epsilon"):
        ALGORITHMS["nbafl"](eng, epsilon=2.0, rounds=10, clip=1.0, sigma=0.5 * d.sigma)
    with pytest.raises(ValueError, match="calibration paper"):
        ALGORITHMS["nbafl"](eng, epsilon=2.0, rounds=10, clip=1.0, sigma=d.sigma, calibration="paper")
    r = paretofl.train(dataset="digits", model="lr", design=d, rounds=None, eval_every=10)
    assert r.options["sigma"] == d.sigma and r.epsilon <= d.budget * (1 + 1e-9)


def test_nbafl_with_its_sigma_given_reports_what_its_uploads_spend(digits):
    """Calibrated to the budget, NbAFL reports at least the budget; given a
    design's σ, it reports what those uploads guarantee (a design file with
    its budget raised to 100 reported ε = 100)."""
    import paretofl

    d = paretofl.nbafl_design(4, 2.0, 1e-5, 1.0, 100, max_rounds=10)
    parts = D.partition_iid(digits.y_train.numpy(), 4)
    eng = Engine(build_model("lr", digits.shape), digits, parts, 1, seeds=[0])
    pol = ALGORITHMS["nbafl"](eng, epsilon=100.0, rounds=d.rounds, clip=1.0, sigma=d.sigma)
    assert pol.fixed_epsilon() == pytest.approx(d.epsilon, rel=1e-9) and pol.fixed_epsilon() < 2.0 + 1e-9


def test_an_nbafl_design_with_the_papers_calibration_is_refused_with_the_way_out():
    import paretofl

    d = paretofl.nbafl_design(4, 2.0, 1e-5, 1.0, 100, max_rounds=10)
    with pytest.raises(ValueError, match="train the nbafl algorithm without the design"):
        paretofl.train(d, dataset="digits", model="lr", calibration="paper")


@pytest.mark.parametrize("local_steps", [1, 3])
def test_adap_dpfl_charges_its_norm_statistic_with_the_batch_it_shares(local_steps):
    """Adap DP-FL releases the noisy sum of the last batch's clipped norms
    beside that batch's noisy gradient: one Poisson-subsampled Gaussian of
    sensitivity √2·C, noise multiplier σ/√2 (an attack found it charged as two
    independent (q_b, σ) releases: 1.76 reported against 3.01).  Against
    dp-accounting: its PLD of what is released never exceeds the reported ε,
    which is no more than its RDP of the same events at integer orders."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant as pld
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    import paretofl

    T, sigma, q, delta = 30, 1.0, 0.1, 1e-5
    r = paretofl.train("adap-dpfl", dataset="digits", clients=10, rounds=T, epsilon=1e6, delta=delta, sigma=sigma,
                       batch_rate=q, noise_decay=1.0, local_steps=local_steps, lr=0.1)
    assert r.rounds == T

    def events():
        step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
        joint = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma / math.sqrt(2)))
        return [(joint, T)] + ([(step, T * (local_steps - 1))] if local_steps > 1 else [])

    p = pld.PLDAccountant(value_discretization_interval=1e-3)
    for e, n in events():
        p.compose(e, n)
    a = rdp.RdpAccountant(orders=list(range(2, 257)))
    for e, n in events():
        a.compose(e, n)
    assert p.get_epsilon(delta) <= r.epsilon <= a.get_epsilon(delta) * (1 + 1e-9)


def test_ali_dpfl_stops_at_its_iterations_and_says_why():
    """A replica stops at R_c DP-SGD iterations (ALI-DPFL's Algorithm 2):
    no round of zero steps is counted as trained, and a run its own limit
    stopped says so, not that the budget ran out (an attack found rounds of
    zero steps reported as trained, and R_s's cap blamed on the budget)."""
    import paretofl

    r = paretofl.train("ali-dpfl", dataset="digits", rounds=10, epsilon=1.2)
    its = [h["iterations"] for h in r.history]
    assert its[-1] == r.history[-1]["R_c"] and all(b > a for a, b in zip(its, its[1:]))   # every round took a step
    assert r.rounds == len(its) < 10 and "ALI-DPFL's own limit" in r.problems[0] and "budget would" not in r.problems[0]
    none = paretofl.train("ali-dpfl", dataset="digits", rounds=10, epsilon=0.9)       # R_c = 0: no iteration allowed
    assert none.rounds == 0 and "no round was trained" in none.problems[0]          # the budget's limit, said so
    capped = paretofl.train("ali-dpfl", dataset="digits", rounds=10, epsilon=3.0, rounds_server=3)
    assert capped.rounds == 3 and "ALI-DPFL's own limit" in capped.problems[0]
    assert "would have spent more than the budget" not in " ".join(capped.problems)


def test_the_assembly_takes_replicas_as_a_number_or_their_seeds(digits):
    """``assemble(setup, alg, 3)`` seeds its replicas 0, 1, 2, the same runs
    as ``assemble(setup, alg, [0, 1, 2])``; other seeds draw other runs; a
    seed that is not an integer, a budget that is not a Budget and DP-SGD
    settings that are not a DPSGD are refused in one line."""
    from paretofl.fl.algorithms import train
    from paretofl.fl.build import Budget, assemble, prepare

    setup = prepare(digits, "lr", clients=4, partition="iid", seed=0)
    kw = dict(mechanism="client-aggregate", sigma=1.0, clip=0.5, lr=0.3, client_rate=1.0)
    finals = [train(assemble(setup, "dpfedavg", r, budget=Budget(epsilon=50.0), **kw).policy, rounds=2,
                    epsilon=50.0)[2]["test_loss"].tolist() for r in (3, [0, 1, 2], [5, 6, 7])]
    assert finals[0] == finals[1] and finals[2] != finals[0]
    assert assemble(setup, "dpfedavg", range(2), **kw).engine.R == 2
    for bad, said in (([0, 1.5], "seeds must be integers"), ([True], "seeds must be integers"),
                      (0, "replicas must be an integer >= 1")):
        with pytest.raises(ValueError, match=said):
            assemble(setup, "dpfedavg", bad, **kw)
    with pytest.raises(ValueError, match="budget must be a paretofl.fl.build.Budget"):
        assemble(setup, "dpfedavg", 1, budget=dict(epsilon=2.0), **kw)
    eng = assemble(setup, "dpfedavg", 1, **kw).engine
    with pytest.raises(ValueError, match="dpsgd must be a paretofl.fl.engine.DPSGD"):
        eng.local_steps(eng.broadcast(eng.init_global()), 1, 0.1, dpsgd=dict(batch_rate=0.1, clip=1.0))


def test_the_round_loop_refuses_an_evaluation_schedule_it_would_misread(digits):
    """``evaluate``: a number of rounds >= 1, or a non-empty list of rounds;
    text was read digit by digit ("12": after rounds 1 and 2), a fraction
    floored, nothing listed quietly meant the last round only.  The
    schedule given is the one kept, and a callback, a prox term or DP-SGD
    settings that cannot be are refused where they are given."""
    from paretofl.fl.algorithms import History, train
    from paretofl.fl.build import assemble, prepare

    setup = prepare(digits, "lr", clients=4, partition="iid", seed=0)
    kw = dict(mechanism="client-aggregate", sigma=1.0, clip=0.5, lr=0.3, client_rate=1.0)
    for bad in ("12", "2", [2.5], ["2"], {3: 1}, [0, 3], [-3], [], 0, -1, True, 1.5, None):
        with pytest.raises(ValueError, match="evaluate must be a number of rounds"):
            train(assemble(setup, "dpfedavg", 1, **kw).policy, rounds=4, evaluate=bad)
    for every, want in ((2, [2, 4]), ([1, 3], [1, 3, 4]), (np.int64(3), [3, 4])):
        h = History()
        train(assemble(setup, "dpfedavg", 1, **kw).policy, rounds=4, evaluate=every, history=h)
        assert [r["round"] for r in h.rows] == want
    seen = []
    train(assemble(setup, "dpfedavg", 1, **kw).policy, rounds=3, history=History(on_round=seen.append))
    assert seen == [0, 1, 2]
    with pytest.raises(ValueError, match="on_round must be a function"):
        History(on_round=5)
    eng = assemble(setup, "dpfedavg", 1, **kw).engine
    for prox in (0.1, (0.1,), [0.1, None]):
        with pytest.raises(ValueError, match="prox must be"):
            eng.local_steps(eng.broadcast(eng.init_global()), 1, 0.1, batch_size=8, prox=prox)
    with pytest.raises(ValueError, match="need a clip"):
        DPSGD(0.1, None, 10.0)
