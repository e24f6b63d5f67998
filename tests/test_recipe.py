"""The whole recipe (issue 27): adaptive clipping and its joint charge, C and
η from the public pre-trial, Flower's own accountant, the privacy statement."""

import math

import numpy as np
import pytest

from paretofl.mechanisms import adaptive_update_multiplier
from paretofl.theory.privacy import rdp_subsampled_gaussian


# --------------------------------------------------------------------------
# adaptive clipping: the charge
# --------------------------------------------------------------------------
def _rdp_2d_mixture(q, shift, alpha, half_width=14.0, n=1401):
    """D_α between the Poisson-subsampled 2-D Gaussian (1-q)N(0, I) +
    qN(shift, I) and N(0, I), both orders, by integration on a grid: the
    adaptive release (noised sum along the update's direction, noised
    count) as it is, without reducing it to one dimension."""
    x = np.linspace(-half_width, half_width, n)
    h = x[1] - x[0]
    X, Y = np.meshgrid(x, x, indexing="ij")
    log_q0 = -0.5 * (X ** 2 + Y ** 2) - math.log(2 * math.pi)
    log_q1 = -0.5 * ((X - shift[0]) ** 2 + (Y - shift[1]) ** 2) - math.log(2 * math.pi)
    log_p = np.logaddexp(math.log1p(-q) + log_q0, math.log(q) + log_q1)
    out = []
    for a, b in ((log_p, log_q0), (log_q0, log_p)):
        v = alpha * a + (1 - alpha) * b
        m = v.max()
        out.append((m + math.log(np.exp(v - m).sum() * h * h)) / (alpha - 1))
    return max(out)


@pytest.mark.parametrize("z_update,count_noise", [(1.3, 1.0), (3.0, 5.0)])
def test_adaptive_joint_charge_by_integration(z_update, count_noise):
    """The sum (noise multiplier z_Δ, sensitivity C) and the centred count
    (noise σ_b, sensitivity ½) released together, Poisson-subsampled at q:
    its RDP, integrated in two dimensions, equals the one-dimensional
    subsampled Gaussian at the joint multiplier (z_Δ⁻² + (2σ_b)⁻²)^(-1/2)
    that paretofl charges — and adaptive_update_multiplier inverts it."""
    q = 0.1
    z_joint = (z_update ** -2 + (2 * count_noise) ** -2) ** -0.5
    assert adaptive_update_multiplier(z_joint, count_noise) == pytest.approx(z_update, rel=1e-12)
    shift = (1.0 / z_update, 0.5 / count_noise)
    for alpha in (2, 4, 8):
        direct = _rdp_2d_mixture(q, shift, alpha)
        charged = float(rdp_subsampled_gaussian(q, z_joint, [alpha])[0])
        assert charged >= direct * (1 - 1e-3)
        assert charged == pytest.approx(direct, rel=1e-3)


def test_adaptive_count_noise_that_leaves_no_budget_is_refused():
    with pytest.raises(ValueError, match="leaves no budget for the update"):
        adaptive_update_multiplier(2.0, 1.0)
    assert adaptive_update_multiplier(2.0, 1.0001) > 100   # just above: nearly all of it goes to the count


# --------------------------------------------------------------------------
# adaptive clipping: the trainer
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    from paretofl.fl import data as D

    return D.load_dataset("digits")


def _policy(digits, R, n_clients=10, **kw):
    from paretofl.fl import data as D
    from paretofl.fl.algorithms import ALGORITHMS
    from paretofl.fl.engine import Engine
    from paretofl.fl.models import build_model

    parts = D.partition_iid(digits.y_train.numpy(), n_clients)
    eng = Engine(build_model("lr", digits.shape), digits, parts, R, seeds=range(R))
    return eng, ALGORITHMS["dpfedavg"](eng, mechanism="client-aggregate", local_epochs=1, batch_size=32, **kw)


@pytest.mark.parametrize("lr,fits", [(1e-9, True), (5.0, False)])
def test_adaptive_clip_moves_as_andrew_et_al(digits, lr, fits):
    """Updates that all fit under C (lr ≈ 0) make C shrink by about
    exp(-η(1 - γ)); updates that all exceed it make it grow by about exp(ηγ)
    — Andrew et al.'s Algorithm 1 — with the count's noise N(0, σ_b²)/m on
    the share, clamped to [0, 1]: the steps' mean and spread are those of a
    direct simulation of that rule."""
    R, m, gamma, eta, sb = 400, 10, 0.3, 0.2, 0.5
    eng, pol = _policy(digits, R, sigma=0.1, clip=1e-3 if not fits else 10.0, lr=lr, client_rate=1.0,
                       clip_quantile=gamma, clip_lr=eta, count_noise=sb)
    c0 = pol.clip.copy()
    pol.round(0, eng.init_global(), np.ones(R, bool))
    log_step = np.log(pol.clip / c0)
    # the paper's step on the noised share (clamped to [0, 1] as TensorFlow Privacy does), simulated
    share = np.clip((1.0 if fits else 0.0) + np.random.default_rng(0).normal(0, sb / m, 1_000_000), 0, 1)
    expected = -eta * (share - gamma)
    assert np.sign(expected.mean()) == (-1 if fits else 1)             # fit under C: shrink; exceed it: grow
    assert log_step.mean() == pytest.approx(expected.mean(), abs=4 * expected.std() / math.sqrt(R))
    assert log_step.std() == pytest.approx(expected.std(), rel=0.15)


def test_adaptive_noise_uses_the_clip_its_updates_were_clipped_to(digits):
    """Each round's mean carries noise of std z_Δ·C_t/m per coordinate: the
    update's raised multiplier z_Δ (so that sum and count are charged z
    together) at the C_t the round clipped to, not the next round's."""
    R, n, sigma, gamma = 300, 10, 1.0, 0.5
    eng, pol = _policy(digits, R, n_clients=n, sigma=sigma, clip=0.05, lr=1e-9, client_rate=1.0,
                       clip_quantile=gamma, count_noise=3.0)
    z = sigma * math.sqrt(n)
    f = adaptive_update_multiplier(z, 3.0) / z
    g = eng.init_global()
    for _ in range(2):
        c_round = pol.clip.copy()
        out = pol.round(0, g, np.ones(R, bool))
        step = (eng.flat(out) - eng.flat(g)).cpu().numpy().astype(np.float64)
        ratio = (step ** 2).mean(1) / ((sigma * f * c_round) ** 2 / n)
        assert ratio.mean() == pytest.approx(1.0, rel=0.03)
        assert not np.allclose(pol.clip, c_round)             # C moved after the round
        g = out


def test_adaptive_clipping_charges_the_design(digits):
    """The ledger charges the joint multiplier σ√m: adaptive clipping spends
    the same ε as fixed clipping at the same σ."""
    from paretofl.fl.algorithms import History, train

    eps = []
    for quantile in (None, 0.5):
        eng, pol = _policy(digits, 1, sigma=1.0, clip=0.1, lr=0.1, client_rate=0.5, clip_quantile=quantile,
                           count_noise=2.0)
        h = History()
        train(pol, rounds=5, epsilon=None, delta=1e-5, history=h)
        eps.append(h.rows[-1]["epsilon"])
    assert eps[0] == pytest.approx(eps[1], rel=1e-12)


@pytest.mark.parametrize("sigma,client_rate", [(1.0, 1.0), (0.05, 0.5), (3.0, 0.3)])
def test_adaptive_default_count_noise_leaves_the_update_a_budget(digits, sigma, client_rate):
    """Without count_noise the count's std is max(m/20, z) (issue 44, item
    5: TFF's m/20 alone leaves no budget where z >= m/10, e.g. m = 10 at
    σ = 1): the trainer accepts it, and the sum's own multiplier z_Δ and
    the count's σ_b together are the charged z, (z_Δ⁻² + (2σ_b)⁻²)^(-1/2),
    computed here from the release's numbers."""
    _, pol = _policy(digits, 1, sigma=sigma, clip=0.1, lr=0.1, client_rate=client_rate, clip_quantile=0.5)
    rel = pol.release
    m = client_rate * 10
    z = sigma * math.sqrt(m)
    sb = float(rel.count_noise[0])
    assert sb == pytest.approx(max(m / 20, z), rel=1e-12)
    z_update = float(rel.noise().std[0])            # the sum's own multiplier, as the release adds it
    assert (z_update ** -2 + (2 * sb) ** -2) ** -0.5 == pytest.approx(z, rel=1e-12)
    assert pol.charges(0)[0].noise_multiplier == pytest.approx(z, rel=1e-12)


@pytest.mark.parametrize("kw,msg", [({"clip_quantile": 0.0}, "strictly between 0 and 1"),
                                    ({"clip_quantile": 1.0}, "strictly between 0 and 1"),
                                    ({"clip_quantile": 0.5, "count_noise": 0.2}, "leaves no budget"),
                                    ({"clip_quantile": 0.5, "mechanism": "client-local"}, "client-aggregate")])
def test_adaptive_bad_input(digits, kw, msg):
    kw = {"mechanism": "client-aggregate", **kw}
    from paretofl.fl.algorithms import ALGORITHMS

    with pytest.raises(ValueError, match=msg):
        from paretofl.fl import data as D
        from paretofl.fl.engine import Engine
        from paretofl.fl.models import build_model

        eng = Engine(build_model("lr", digits.shape), digits, D.partition_iid(digits.y_train.numpy(), 10), 1)
        ALGORITHMS["dpfedavg"](eng, sigma=1.0, clip=0.1, lr=0.1, client_rate=1.0, **kw)


# --------------------------------------------------------------------------
# Flower's adaptive wrapper, as it is in flwr 1.41
# --------------------------------------------------------------------------
def _flower_adaptive(noise_multiplier, count_noise, m=5, d=20_000, clip=0.1):
    pytest.importorskip("flwr")
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import DifferentialPrivacyServerSideAdaptiveClipping

    from paretofl.integrations.flower import equal_weight_fedavg

    strat = DifferentialPrivacyServerSideAdaptiveClipping(
        equal_weight_fedavg()(), noise_multiplier=noise_multiplier, num_sampled_clients=m,
        initial_clipping_norm=clip, target_clipped_quantile=0.5, clip_norm_lr=0.2,
        clipped_count_stddev=count_noise)
    strat.current_round_params = [np.zeros(d)]
    big = np.zeros(d)
    big[0] = 100.0                                                   # every update far above C
    res = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([big.copy()]), 1, {})) for _ in range(m)]
    return strat, res


def test_flower_adaptive_wrapper_moves_c_the_other_way():
    """Flower's server-side adaptive wrapper counts the updates it *clipped*
    and steps C <- C·exp(-η(fraction clipped - γ)): when every update
    exceeds C it shrinks C, where Andrew et al.'s rule (the fraction that
    fits) grows it by exp(ηγ).  paretofl's trainer grows it."""
    strat, res = _flower_adaptive(0.0, 0.0)
    strat.aggregate_fit(1, res, [])
    assert strat.clipping_norm == pytest.approx(0.1 * math.exp(-0.2 * 0.5))   # Flower: shrinks
    assert 0.1 * math.exp(0.2 * 0.5) > 0.1                                    # the paper: grows


def test_flower_adaptive_wrapper_noises_with_the_next_c():
    """Flower adds the sum's noise with the C it has just updated, not the C
    the updates were clipped to: when C shrinks, the noise is below what
    the charge assumes (by exp(-η(b - γ)) a round)."""
    from paretofl.fl.data import Dataset  # noqa: F401  (torch is there: the test runs with the train extra)

    z, sb, m = 1.0, 2.0, 5
    strat, res = _flower_adaptive(z, sb, m=m)
    c_clipped = strat.clipping_norm
    np.random.seed(0)
    params, _ = strat.aggregate_fit(1, res, [])
    from flwr.common import parameters_to_ndarrays

    out = parameters_to_ndarrays(params)[0]
    std = out[1:].std()                                              # coordinates the updates do not touch
    z_update = strat.noise_multiplier
    assert z_update == pytest.approx(adaptive_update_multiplier(z, sb))
    assert strat.clipping_norm < c_clipped
    assert std == pytest.approx(z_update * strat.clipping_norm / m, rel=0.03)     # the new C
    assert std < 0.97 * z_update * c_clipped / m                                   # not the one it clipped to


# --------------------------------------------------------------------------
# C and η from the public pre-trial
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits_store(tmp_path_factory):
    from paretofl.cli import main

    path = tmp_path_factory.mktemp("tune") / "digits.sqlite"
    assert main(["pretrial", "--dataset", "digits", "--model", "lr", "--clients", "8", "--sigmas", "1",
                 "--rounds", "2", "--seeds", "1", "--q", "1", "--clip", "0.3", "--lr", "0.1",
                 "--out", str(path)]) in (0, None)
    return path


def test_tune_returns_the_grids_best_at_the_designs_noise(digits_store):
    """tune(design, store), the recipe's own step: the chosen (C, η) is the grid's highest mean test
    accuracy (lowest mean loss with by="loss"); the public runs carry the design's noise on the mean, z/m (here
    m = 20 > the pre-trial's 8 clients, so all 8 train and z is scaled by
    8/20); norms are ordered quantiles; every knob says where it came from;
    κ given (not measured by a pre-trial) draws no note about refitting it."""
    import paretofl
    from paretofl import api

    d = api.tune(paretofl.design(20, 4.0, delta=1e-3, max_rounds=6, q=1.0, kappa=0.5), str(digits_store),
                 paretofl.api.Grid(clips=(0.01, 0.3, 3.0), lrs=(0.05, 0.5)))
    t = d.tuning
    assert len(t["grid"]) == 6 and t["select"] == "accuracy"
    best = max(t["grid"], key=lambda g: g["accuracy"])
    assert (d.clip, d.lr) == (best["clip"], best["lr"])
    by_loss = api.tune(paretofl.design(20, 4.0, delta=1e-3, max_rounds=6, q=1.0, kappa=0.5), str(digits_store),
                       paretofl.api.Grid(clips=(0.01, 0.3, 3.0), lrs=(0.05, 0.5)), by="loss",
                       chunk=4)   # in chunks: the same runs
    assert by_loss.tuning["grid"] == t["grid"]                        # the same seeded public runs
    low = min(t["grid"], key=lambda g: g["test_loss"])
    assert (by_loss.clip, by_loss.lr) == (low["clip"], low["lr"])
    assert t["pretrial"]["clients"] == 8 and t["pretrial"]["q"] == 1.0
    assert t["pretrial"]["noise_on_mean"] == pytest.approx(d.noise_multiplier / (d.q * d.n_clients), rel=1e-12)
    assert t["norms"]["q10"] <= t["norms"]["q50"] <= t["norms"]["q90"]
    assert (d.local_epochs, d.batch_size) == (1, 64)
    assert "public tuning" in d.sources["clip"] and "public tuning" in d.sources["lr"]
    assert set(d.sources) >= {"q", "rounds", "sigma", "clip", "lr", "local_epochs", "batch_size"}
    assert "public share" in d.statement() and "no client data was used" in d.statement()
    assert not any("refit kappa" in n for n in d.notes)


def test_tune_never_reads_the_test_split(digits_store):
    """The tuning ranks its pairs on samples held out of the public share,
    not on the test split results are reported on: with the test split's
    labels scrambled (and its inputs zeroed) the grid and the choice are the
    same, and the held-out samples are public training samples no tuning run
    trains on."""
    from dataclasses import replace

    from paretofl.pretrial import sweep
    from paretofl.pretrial.tune import At, Grid, spec_of_store, tune

    kw = dict(grid=Grid(clips=(0.01, 0.3), lrs=(0.05, 0.5), seeds=1))
    before = tune(str(digits_store), At(1.0, 3, 2.0, 20), **kw)
    spec = spec_of_store(str(digits_store))
    setup = sweep.prepared(spec)
    ds = setup.data
    scrambled = replace(ds, x_test=ds.x_test * 0, y_test=(ds.y_test + 1) % ds.n_classes)
    key = next(iter(sweep._SETUP_CACHE))
    sweep._SETUP_CACHE[key] = replace(setup, data=scrambled)
    try:
        after = tune(str(digits_store), At(1.0, 3, 2.0, 20), **kw)
    finally:
        sweep._SETUP_CACHE.clear()
    assert after["grid"] == before["grid"] and (after["clip"], after["lr"]) == (before["clip"], before["lr"])
    assert "validation" in before["scored_on"] and "held out" in before["scored_on"]


def test_hold_out_takes_a_share_of_each_client_out_of_training():
    """hold_out: the validation samples are the training samples no client
    keeps; each client gives about the fraction (at least one, never its
    last); the clients' order and labels are kept; a split with no client of
    two samples is refused in one line."""
    import numpy as np
    import torch

    from paretofl.fl.build import Setup, hold_out
    from paretofl.fl.data import Dataset

    n = 103
    x = torch.arange(n, dtype=torch.float32)[:, None]
    y = torch.arange(n) % 3
    parts = [np.arange(0, 50), np.arange(50, 60), np.arange(60, 62), np.arange(62, 63), np.arange(63, 103)]
    ds = Dataset("toy", x, y, x[:5] * 0 - 1, y[:5])
    out = hold_out(Setup(ds, parts, None), 0.2, seed=3)
    kept = np.concatenate(out.parts)
    held = out.data.x_test[:, 0].long().numpy()                 # each input is its own index
    assert len(set(kept) & set(held)) == 0 and sorted(set(kept) | set(held)) == list(range(n))
    assert [len(p) for p in out.parts] == [40, 8, 1, 1, 32]
    assert all(np.all(np.diff(p) > 0) for p in out.parts)
    assert torch.equal(out.data.y_test, y[torch.from_numpy(held)])
    assert torch.equal(hold_out(Setup(ds, parts, None), 0.2, seed=3).data.x_test, out.data.x_test)
    assert not torch.equal(hold_out(Setup(ds, parts, None), 0.2, seed=4).data.x_test, out.data.x_test)
    with pytest.raises(ValueError, match="hold one sample each"):
        hold_out(Setup(ds, [np.array([0]), np.array([1])], None), 0.2)
    with pytest.raises(ValueError, match="must lie in"):
        hold_out(Setup(ds, parts, None), 1.0)


def test_matched_noise_keeps_the_noise_on_the_mean():
    """Same cohort where the pre-trial has enough clients; else all of them,
    z scaled so that z/m is the design's."""
    from paretofl.pretrial.tune import matched_noise

    assert matched_noise(0.1, 100, 3.0, 50) == pytest.approx((0.2, 3.0))
    q, z = matched_noise(0.5, 1000, 20.0, 10)
    assert q == 1.0 and z / 10 == pytest.approx(20.0 / 500)


def test_the_recipes_epsilon_reaccounted_by_dp_accounting():
    """The recipe (q, T, z) a design returns, re-accounted by Google's
    dp-accounting (RDP at integer orders, the Poisson-subsampled Gaussian
    composed T times): no larger than the design's ε, within 2 %."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as gdp

    import paretofl

    for eps in (1.0, 4.0):
        d = paretofl.design(100, eps, max_rounds=300, q_max=0.3)
        acc = gdp.RdpAccountant(orders=list(range(2, 257)))
        acc.compose(dp_accounting.PoissonSampledDpEvent(d.q, dp_accounting.GaussianDpEvent(d.noise_multiplier)),
                    d.rounds)
        theirs = acc.get_epsilon(d.delta)
        assert theirs >= d.epsilon * (1 - 1e-9) and theirs <= d.budget * 1.02 and theirs == pytest.approx(d.epsilon, rel=0.02)


# --------------------------------------------------------------------------
# the privacy statement
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kw,relation,released,trusted,sampling", [
    ({}, "add/remove", "global model", "the server", "Poisson"),
    ({"mechanism": "client-local"}, "replaced by none", "with its sender", "nobody", "is seen"),
    ({"framework": "flower"}, "replace-one", "global model", "the server", "without replacement"),
    ({"framework": "flower-accounted"}, "add/remove", "global model", "the server", "no amplification"),
])
def test_statement_fields_for_each_view(kw, relation, released, trusted, sampling):
    """Every field Ponomareva et al. (§5.3) ask for, in each mechanism view:
    guarantee and unit, neighbours, what is released, who is trusted,
    sampling, accountant and conversion, the hyperparameters' cost."""
    import paretofl

    d = paretofl.design(100, 2.0, max_rounds=200, **kw)
    s = d.statement()
    fields = dict(line[2:].split(": ", 1) for line in s.splitlines()[1:] if line.startswith("- "))
    assert set(fields) >= {"Guarantee", "Neighbouring relation", "Released", "Trusted", "Sampling", "Mechanism",
                           "Accountant", "Privacy cost of choosing the hyperparameters"}
    assert f"({d.epsilon:.4g}, {d.delta:g})" in fields["Guarantee"] and "one client" in fields["Guarantee"]
    assert relation in fields["Neighbouring relation"]
    assert released in fields["Released"] and f"{d.rounds} round" in fields["Released"]
    assert trusted in fields["Trusted"]
    assert sampling in fields["Sampling"]
    assert "Balle" in fields["Accountant"]
    assert "public" in fields["Privacy cost of choosing the hyperparameters"]
    given = paretofl.design(100, 2.0, max_rounds=200, kappa=1.0, **kw).statement()
    assert "not accounted here" in given


def test_design_statement_on_the_command_line(capsys):
    import json

    from paretofl.cli import main

    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "200", "--statement",
                 "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["statement"].startswith("Privacy statement") and out["clip"] == 0.3 and out["lr"] == 0.1


@pytest.mark.parametrize("args,msg", [
    (["train", "--dataset", "digits", "--model", "lr", "--clients", "4", "--rounds", "1", "--mechanism", "client-aggregate",
      "--clip-quantile", "1.5"], "strictly between 0 and 1"),
    (["train", "--dataset", "digits", "--model", "lr", "--clients", "4", "--rounds", "1", "--mechanism", "client-aggregate",
      "--clip-quantile", "0.5", "--count-noise", "0.01", "--epsilon", "50"], "leaves no budget"),
    (["design", "--clients", "100", "--budget", "2", "--max-rounds", "200", "--tune", "STORE",
      "--clips", "0.1", "-1"], "positive"),
    (["design", "--clients", "100", "--budget", "2", "--max-rounds", "200", "--tune", "STORE",
      "--lrs", "0"], "positive"),
    (["design", "--clients", "100", "--budget", "2", "--max-rounds", "200", "--clips", "0.1"], "give --tune"),
])
def test_bad_recipe_input_is_one_line_exit_2_nothing_written(args, msg, capsys, tmp_path, monkeypatch, digits_store):
    from paretofl.cli import main

    monkeypatch.chdir(tmp_path)
    args = [str(digits_store) if a == "STORE" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err
    assert list(tmp_path.iterdir()) == []
