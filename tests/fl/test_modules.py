"""Any nn.Module through the engine (paretofl.fl.modules): the built-in LR and
LeNet written as nn.Sequential must give the hand-written kernels' clipped
gradient sums and rounds; what cannot be trained privately is refused;
a user's arrays and partition are checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from paretofl.fl import data as D
from paretofl.fl.algorithms import train
from paretofl.fl.algorithms.dpfedavg import DPFedAvg
from paretofl.fl.build import model_from, prepare
from paretofl.fl.engine import Engine
from paretofl.fl.models import build_model
from paretofl.fl.modules import ModuleModel


def lr_module(in_shape, n_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), n_classes))


def lenet_module(in_shape, n_classes):
    return nn.Sequential(nn.Conv2d(in_shape[0], 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_classes))


def to_module_params(net_params):
    """The Net's stacked parameters in nn.Module layout: a linear layer's W
    (M, fan_in, out) is weight.T; a convolution's W (M, C·k·k, out), rows in
    (c, ki, kj) order, is weight (out, C, k, k) flattened and transposed."""
    out = []
    for j in range(0, len(net_params), 2):
        W, b = net_params[j], net_params[j + 1]
        out += [W.transpose(1, 2).contiguous(), b]
    return out


def reshape_like(params, module_model):
    return [p.reshape(p.shape[0], *s) for p, s in zip(params, module_model.shapes)]


@pytest.fixture(scope="module")
def digits():
    return D.load_dataset("digits")


CASES = {"lr": ((1, 8, 8), lr_module), "lenet": ((1, 28, 28), lenet_module)}


@pytest.mark.parametrize("strategy", ["loop", "vmap"])
@pytest.mark.parametrize("name", ["lr", "lenet"])
@pytest.mark.parametrize("clip", [None, 0.7])
def test_generic_path_gives_the_hand_written_gradients(name, clip, strategy):
    shape, factory = CASES[name]
    torch.manual_seed(0)
    net = build_model(name, shape, 10)
    mm = ModuleModel(factory(shape, 10), shape, 10, strategy=strategy)
    M, B = 3, 6
    params = [p.double() for p in net.init(M, torch.Generator().manual_seed(2))]
    mp = reshape_like(to_module_params(params), mm)
    mm.module.double()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(M, B, *shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (M, B), generator=g)
    w = torch.ones(M, B, dtype=torch.float64)
    w[1, -2:] = 0                                   # padding
    g_net, n_net, l_net = net.clipped_grads(params, x, y, w, clip=clip)
    g_mod, n_mod, l_mod = mm.clipped_grads(mp, x, y, w, clip=clip)
    want = reshape_like(to_module_params(g_net), mm)
    for a, b in zip(want, g_mod):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(n_mod, n_net, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(l_mod, l_net, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(mm.forward(mp, x), net.forward(params, x), rtol=1e-9, atol=1e-10)


def test_per_sample_clipping_against_one_sample_at_a_time():
    """An independent computation: each sample's gradient by plain autograd
    on a module, clipped, summed."""
    torch.manual_seed(1)
    shape = (1, 8, 8)
    module = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 10))
    mm = ModuleModel(module, shape, 10)
    params = mm.init(1, torch.Generator().manual_seed(0))
    x, y = torch.randn(1, 5, *shape), torch.randint(0, 10, (1, 5))
    clip = 0.3
    grads, norms, _ = mm.clipped_grads(params, x, y, torch.ones(1, 5), clip=clip)
    ref = [torch.zeros_like(p[0]) for p in params]
    ref_module = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 10))
    with torch.no_grad():
        for p, v in zip(ref_module.parameters(), params):
            p.copy_(v[0])
    for b in range(5):
        ref_module.zero_grad()
        nn.functional.cross_entropy(ref_module(x[0, b:b + 1]), y[0, b:b + 1]).backward()
        gs = [p.grad for p in ref_module.parameters()]
        n = torch.sqrt(sum(g.pow(2).sum() for g in gs))
        assert norms[0, b].item() == pytest.approx(n.item(), rel=1e-5)
        for r, g in zip(ref, gs):
            r += g * min(1.0, clip / n.item())
    for r, g in zip(ref, grads):
        torch.testing.assert_close(g[0], r, rtol=1e-5, atol=1e-6)


def _engine(net, ds, parts, seeds):
    return Engine(net, ds, parts, len(seeds), seeds=seeds)


class NetLayoutLR(nn.Module):
    """LR with the hand-written Net's parameter layout (W: in × out), so
    that noise drawn for the flat parameter vector lands on the same
    coordinates in both paths."""

    def __init__(self, d, n):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(d, n))
        self.b = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x.flatten(1) @ self.W + self.b


def _one_round(net, mm, ds, glob, glob_module, **opts):
    parts = D.partition_iid(ds.y_train.numpy(), 10, seed=0)
    e1, e2 = _engine(net, ds, parts, [4, 5]), _engine(mm, ds, parts, [4, 5])
    active = np.ones(2, dtype=bool)
    return DPFedAvg(e1, **opts).round(0, glob, active), DPFedAvg(e2, **opts).round(0, glob_module, active)


@pytest.mark.parametrize("mechanism", ["client-aggregate", "client-local", "sample"])
def test_one_round_with_noise_matches_the_hand_written_engine(digits, mechanism):
    """Same start, same seeds: one DP round (client sampling, batches, local
    steps, clipping, noise) gives the same global model through both paths."""
    net = build_model("lr", digits.shape, 10)
    mm = model_from(lambda s, n: NetLayoutLR(64, n), digits)
    glob = _engine(net, digits, [np.arange(10)], [4, 5]).init_global()
    opts = dict(mechanism=mechanism, sigma=0.8, clip=0.5, lr=0.1, client_rate=0.5, batch_rate=0.1, local_steps=2)
    new1, new2 = _one_round(net, mm, digits, glob, glob, **opts)
    for a, b in zip(new1, new2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(new1[0], glob[0])


@pytest.mark.parametrize("mechanism", ["client-aggregate", "sample"])
@pytest.mark.parametrize("name", ["lr", "lenet"])
def test_one_round_of_sequential_twins_matches(name, mechanism):
    """nn.Sequential LR and LeNet: one round's clipped, aggregated update
    equals the hand-written engine's (noise off, as the two layouts order
    the flat parameter vector differently)."""
    shape, factory = CASES[name]
    g = torch.Generator().manual_seed(0)
    ds = D.Dataset("synthetic", torch.randn(300, *shape, generator=g), torch.randint(0, 10, (300,), generator=g),
                   torch.randn(20, *shape, generator=g), torch.randint(0, 10, (20,), generator=g))
    net = build_model(name, shape, 10)
    mm = model_from(factory, ds)
    glob = _engine(net, ds, [np.arange(10)], [4, 5]).init_global()
    opts = dict(mechanism=mechanism, sigma=0.0, clip=0.5, lr=0.1, client_rate=0.5, batch_rate=0.2, local_steps=2)
    new1, new2 = _one_round(net, mm, ds, glob, reshape_like(to_module_params(glob), mm), **opts)
    for a, b in zip(reshape_like(to_module_params(new1), mm), new2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_built_in_and_module_lr_train_alike(digits):
    """Trained side by side at epsilon = 2 (same settings, 4 replicas each):
    the means differ by less than the replicas' spread allows."""
    parts = D.partition_iid(digits.y_train.numpy(), 100, seed=0)
    accs = {}
    for key, model in (("net", "lr"), ("module", lr_module)):
        eng = _engine(model_from(model, digits), digits, parts, [0, 1, 2, 3])
        pol = DPFedAvg(eng, mechanism="client-aggregate", sigma=0.5, clip=1.0, lr=0.5, client_rate=1.0)
        _, _, fin = train(pol, rounds=30, epsilon=2.0, evaluate=30)
        assert (fin["rounds"] == 5).all()
        accs[key] = fin["accuracy"]
        assert fin["epsilon"].max() <= 2.0
    spread = max(accs["net"].std(ddof=1), accs["module"].std(ddof=1))
    assert accs["net"].mean() > 0.5 and accs["module"].mean() > 0.5
    assert abs(accs["net"].mean() - accs["module"].mean()) < 3 * spread + 0.01


def test_dropout_stays_each_replicas_own(digits):
    """A replica's dropout masks come from its own generator: its run beside
    others equals its run alone, and two seeds differ."""
    def factory(in_shape, n):
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, n))

    parts = D.partition_iid(digits.y_train.numpy(), 5, seed=0)
    state = torch.random.get_rng_state()
    mm = model_from(factory, digits)
    assert mm.stochastic

    def run(seeds):
        eng = _engine(mm, digits, parts, seeds)
        pol = DPFedAvg(eng, mechanism="client-aggregate", sigma=0.5, clip=0.5, lr=0.2, client_rate=1.0)
        glob, _, _ = train(pol, rounds=3)
        return glob

    both = run([7, 8])
    alone = run([8])
    for a, b in zip(both, alone):
        torch.testing.assert_close(a[1], b[0])
    assert not torch.allclose(both[0][0], both[0][1])
    assert torch.equal(torch.random.get_rng_state(), state)   # the global generator is left as it was


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        if self.training:
            self.seen += len(x)
        return self.lin(x.flatten(1))


@pytest.mark.parametrize("module, words", [
    (nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.Linear(16, 10)),
     ["layer 2", "BatchNorm1d", "GroupNorm"]),
    (nn.Sequential(nn.InstanceNorm2d(1, track_running_stats=True), nn.Flatten(), nn.Linear(64, 10)),
     ["layer 0", "track_running_stats=False"]),
    (_Counter(), ["buffer seen", "changes"]),
    (nn.Sequential(nn.Flatten(), nn.Linear(64, 5)), ["shape (2, 5)", "(2, 10)"]),
    (nn.Sequential(nn.Flatten(), nn.Linear(63, 10)), ["forward fails"]),
    (nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).requires_grad_(False), ["no trainable"]),
])
def test_refused_before_training(digits, module, words):
    with pytest.raises(ValueError) as err:
        model_from(module, digits)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_factory_errors(digits):
    def raises(in_shape, n):
        raise RuntimeError("boom")

    with pytest.raises(ValueError, match="raised RuntimeError: boom"):
        model_from(raises, digits)
    with pytest.raises(ValueError, match="returned int, not a torch.nn.Module"):
        model_from(lambda s, n: 3, digits)
    with pytest.raises(ValueError, match="cannot import"):
        model_from("no_such_package_xyz.models:mlp", digits)


def test_frozen_parameters_are_shared_not_trained(digits):
    base = nn.Linear(64, 64)
    base.requires_grad_(False)
    module = nn.Sequential(nn.Flatten(), base, nn.ReLU(), nn.Linear(64, 10))
    mm = model_from(module, digits)
    assert mm.names == ["3.weight", "3.bias"] and mm.n_params == 650


# ------------------------------------------------------------------ your data
def _arrays(n=40, **kw):
    g = np.random.default_rng(0)
    d = dict(x_train=g.normal(size=(n, 3, 4)), y_train=g.integers(0, 3, n), x_test=g.normal(size=(10, 3, 4)),
             y_test=g.integers(0, 3, 10))
    d.update(kw)
    return d


@pytest.mark.parametrize("change, words", [
    (dict(y_train=np.zeros(39, int)), "x_train has 40 samples but y_train has 39"),
    (dict(x_train=np.full((40, 3, 4), np.nan)), "NaN or infinite values in 40 sample"),
    (dict(y_train=np.full(40, -1)), "negative label"),
    (dict(y_train=np.full(40, 0.5)), "integer class labels"),
    (dict(n_classes=2), "out of range for n_classes = 2"),
    (dict(x_test=np.zeros((10, 12))), "x_test's (12,)"),
    (dict(clients=np.r_[np.zeros(20, int), np.full(20, 2)]), "client 1 has no training sample"),
    (dict(clients=np.zeros(39, int)), "one client id per training sample"),
    (dict(public=np.zeros(40, bool)), "no training sample as public"),
    (dict(x_train=np.array(["a"] * 40)), "must hold numbers"),
])
def test_bad_arrays_are_one_clear_line(change, words):
    with pytest.raises(ValueError) as err:
        D.from_mapping(_arrays(**change))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_own_partition_and_public_share():
    clients = np.repeat(np.arange(8), 5)
    public = np.zeros(40, bool)
    public[clients >= 6] = True          # clients 6 and 7 are public
    ds = D.from_mapping(_arrays(clients=clients, public=public))
    pub = prepare(ds, lr_module, None, partition="given", subset="public")
    rest = prepare(ds, lr_module, None, partition="given", subset="rest")
    assert len(pub.parts) == 2 and len(rest.parts) == 6
    assert sorted(len(p) for p in rest.parts) == [5] * 6
    assert torch.equal(pub.data.x_train, ds.x_train[torch.from_numpy(np.flatnonzero(public))])
    # every client's samples are the ones with its id
    for k, p in enumerate(rest.parts):
        assert (D._renumber(clients[~public])[p] == k).all()
    with pytest.raises(ValueError, match="has 6 clients, not 5"):
        prepare(ds, lr_module, 5, partition="given", subset="rest")


# ------------------------------------------------------------- from the CLI
USER_CODE = '''
import numpy as np
from torch import nn

WIDTH = {width}

def mlp(in_shape, n_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), WIDTH), nn.ReLU(), nn.Linear(WIDTH, n_classes))

def bn(in_shape, n_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), 8), nn.BatchNorm1d(8), nn.Linear(8, n_classes))

def raises(in_shape, n_classes):
    raise RuntimeError("no weights here")

def data():
    g = np.random.default_rng(0)
    x = g.normal(size=(300, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int)
    return dict(x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:], clients=np.arange(240) % 12,
                public=np.arange(240) % 12 >= 8)

def a_list():
    return [1, 2]

def nan_data():
    d = data()
    d["x_train"][5, 3] = np.nan
    return d
'''


def _cli(folder, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "paretofl.cli", *args], capture_output=True, text=True, cwd=folder,
                          timeout=300)


PRETRIAL = ("pretrial", "--dataset", "usercode:data", "--partition", "given", "--clients", "4", "--q", "1",
            "--sigmas", "0.1", "--rounds", "2", "4", "--seeds", "2", "--lr", "0.5", "--clip", "1")


def test_pretrial_of_a_user_model_and_its_fingerprint(tmp_path):
    (tmp_path / "usercode.py").write_text(USER_CODE.format(width=8))
    r = _cli(tmp_path, *PRETRIAL, "--model", "usercode:mlp", "--out", "s.sqlite")
    assert r.returncode == 0, r.stderr
    from paretofl.pretrial.store import Store

    st = Store(tmp_path / "s.sqlite")
    assert len(st) == 8 and st.base["model_fingerprint"]["parameters"][0] == ["1.weight", [8, 12]]
    st.close()
    # the same name, another architecture: refused, the store untouched
    (tmp_path / "usercode.py").write_text(USER_CODE.format(width=16))
    r = _cli(tmp_path, *PRETRIAL, "--rounds", "8", "--model", "usercode:mlp", "--out", "s.sqlite")
    assert r.returncode == 2 and "model_fingerprint" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    st = Store(tmp_path / "s.sqlite")
    assert len(st) == 8
    st.close()


@pytest.mark.parametrize("model, dataset, words", [
    ("usercode:bn", "usercode:data", "BatchNorm1d"),
    ("usercode:raises", "usercode:data", "raised RuntimeError: no weights here"),
    ("usercode:nothere", "usercode:data", "has no attribute nothere"),
    ("nosuchmodule:mlp", "usercode:data", "cannot import nosuchmodule"),
    ("usercode:mlp", "usercode:nan_data", "NaN"),
    ("usercode:mlp", "usercode:bn", "data loader usercode:bn raised TypeError"),
    ("usercode:mlp", "usercode:a_list", "must return a mapping"),
])
@pytest.mark.parametrize("command", ["pretrial", "train"])
def test_bad_user_code_is_one_line_and_writes_nothing(tmp_path, model, dataset, words, command):
    (tmp_path / "usercode.py").write_text(USER_CODE.format(width=8))
    if command == "pretrial":
        args = [a if a != "usercode:data" else dataset for a in PRETRIAL] + ["--model", model, "--out", "s.sqlite"]
    else:
        args = ["train", "--model", model, "--dataset", dataset, "--rounds", "2", "--history", "h.csv"]
    r = _cli(tmp_path, *args)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["usercode.py"]


@pytest.mark.parametrize("algorithm", ["dpfedavg", "ali-dpfl", "adap-dpfl", "nbafl"])
def test_every_algorithm_takes_a_user_module(digits, algorithm):
    import paretofl

    def factory(in_shape, n):
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, n))

    r = paretofl.train(algorithm, dataset=digits, model=factory, clients=5, rounds=2, epsilon=8.0, replicas=2)
    assert r.rounds >= 1 and r.epsilon <= 8.0 and np.isfinite(r.test_loss) and r.model == "factory"


class _OwnLoss(nn.Module):
    """A module that brings its own per-sample loss (squared error on one-hot)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10)

    def forward(self, x):
        return self.lin(x.flatten(1))

    def loss(self, logits, y):
        return (logits - torch.eye(10)[y]).pow(2).sum(1)


class _OneHotLoss(_OwnLoss):
    """The same loss through F.one_hot, which checks its input's values and
    so cannot run under vmap."""

    def loss(self, logits, y):
        return (logits - nn.functional.one_hot(y, 10).float()).pow(2).sum(1)


class _Tied(nn.Module):
    """An encoder and a decoder sharing one weight matrix."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(64, 16)
        self.dec = nn.Linear(16, 64)
        self.dec.weight = nn.Parameter(self.enc.weight.t())   # placeholder, tied below
        self.dec.weight = self.enc.weight                      # not transposed: a (16, 64) matrix used twice
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h = torch.tanh(nn.functional.linear(x.flatten(1), self.enc.weight, self.enc.bias))
        return self.head(torch.tanh(nn.functional.linear(h, self.dec.weight.t(), self.dec.bias)))


@pytest.mark.parametrize("strategy", ["loop", "vmap"])
@pytest.mark.parametrize("make", [_OwnLoss, _Tied])
@pytest.mark.parametrize("clip", [None, 0.4])
def test_own_loss_and_tied_weights_against_plain_autograd(make, strategy, clip):
    torch.manual_seed(0)
    module = make()
    mm = ModuleModel(module, (1, 8, 8), 10, strategy=strategy)
    params = mm.init(2, torch.Generator().manual_seed(1))
    x, y = torch.randn(2, 4, 1, 8, 8), torch.randint(0, 10, (2, 4))
    grads, _, _ = mm.clipped_grads(params, x, y, torch.ones(2, 4), clip=clip)
    ref = make()
    loss_fn = ref.loss if hasattr(ref, "loss") else (lambda o, t: nn.functional.cross_entropy(o, t, reduction="none"))
    named = dict(ref.named_parameters())
    for m in range(2):
        with torch.no_grad():
            for k, v in zip(mm.names, params):
                named[k].copy_(v[m])
        want = [torch.zeros_like(named[k]) for k in mm.names]
        for b in range(4):
            g = torch.autograd.grad(loss_fn(ref(x[m, b:b + 1]), y[m, b:b + 1]).sum(), [named[k] for k in mm.names])
            f = 1.0 if clip is None else min(1.0, clip / float(torch.sqrt(sum(t.pow(2).sum() for t in g))))
            for w, t in zip(want, g):
                w += f * t
        for w, got in zip(want, grads):
            torch.testing.assert_close(got[m], w, rtol=1e-4, atol=1e-5)


def test_a_loss_that_cannot_run_under_vmap(digits):
    """Client-level training loops instead (auto); DP-SGD, which needs
    per-sample gradients under vmap, is refused in one line that says why."""
    mm = model_from(_OneHotLoss(), digits)
    assert mm.vmap_error is not None
    params = mm.init(2, torch.Generator().manual_seed(0))
    x, y = torch.randn(2, 3, 1, 8, 8), torch.randint(0, 10, (2, 3))
    grads, _, _ = mm.clipped_grads(params, x, y, torch.ones(2, 3))
    assert all(torch.isfinite(g).all() for g in grads)
    with pytest.raises(ValueError, match="vmap, which fails for this one") as err:
        mm.clipped_grads(params, x, y, torch.ones(2, 3), clip=1.0)
    assert "\n" not in str(err.value)


def test_client_rate_is_checked_on_the_clients_that_train():
    """8 client ids, 2 of them public: 6 clients train, so a rate of 0.15
    selects 0.9 a round and is refused (over all 8 ids it would pass)."""
    import paretofl

    clients = np.repeat(np.arange(8), 5)
    ds = D.from_mapping(_arrays(clients=clients, public=clients >= 6))
    with pytest.raises(ValueError, match="client_rate x clients = 0.9 < 1"):
        paretofl.train(dataset=ds, model=lr_module, client_rate=0.15, mechanism="client-aggregate", rounds=1)
