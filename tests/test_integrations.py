"""A design applied in Flower and Opacus: Flower's noise is the noise
charged (in its real simulation engine), the fixed-size accountant agrees
with Google's dp-accounting, Opacus's own ε agrees with paretofl's, and
`design --export` prints both frameworks' parameters."""

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as gdp

import paretofl
from paretofl.cli import main
from paretofl.integrations import flower as bridge
from paretofl.integrations import opacus as obridge
from paretofl.theory import privacy as P

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def test_flower_design_uses_flowers_sampling():
    """framework="flower": m = qN clients without replacement, replace-one
    neighbours (sensitivity 2C), so the charged noise multiplier is half
    the one on the sum; the same budget buys fewer rounds or more noise
    than Poisson sampling with add/remove neighbours."""
    d = paretofl.design(n_clients=100, epsilon=2, max_rounds=200, framework="flower", kappa=16.0)
    assert d.sampling == "fixed-size" and d.framework == "flower"
    assert d.noise_multiplier == pytest.approx(d.sigma * math.sqrt(d.q * 100))
    assert d.charged_noise_multiplier == pytest.approx(d.noise_multiplier / 2)
    p = bridge.plan(d, clipping_norm=0.5)
    assert p.num_sampled_clients == round(d.q * 100)
    assert bridge.flower_epsilon(100, p.num_sampled_clients, p.noise_multiplier, p.num_rounds) == \
        pytest.approx(d.epsilon) and d.epsilon <= 2
    poisson = paretofl.design(n_clients=100, epsilon=2, max_rounds=200, kappa=16.0)
    assert poisson.utility_bound < d.utility_bound
    with pytest.raises(ValueError, match=r"design it again for Flower \(framework flower"):
        bridge.plan(poisson, 0.5)
    with pytest.raises(ValueError, match="whole number"):
        paretofl.design(n_clients=30, epsilon=2, max_rounds=50, q=0.25, framework="flower")


@pytest.mark.parametrize("m,n,z,rounds", [(10, 100, 3.0, 50), (5, 10, 1.5, 20), (100, 100, 8.0, 10),
                                          (20, 1000, 2.0, 200)])
def test_flower_epsilon_is_dp_accountings(m, n, z, rounds):
    """The fixed-size accountant against Google's dp-accounting
    (SampledWithoutReplacementDpEvent, REPLACE_ONE, noise multiplier z/2):
    equal on dp-accounting's own orders, and at the order paretofl picks
    dp-accounting gives the same ε — so what paretofl reports is never
    below the established accountant's value at that order."""
    event = dp_accounting.SampledWithoutReplacementDpEvent(n, m, dp_accounting.GaussianDpEvent(z / 2))
    orders = [2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 256]
    acc = gdp.RdpAccountant(orders=orders, neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(event, rounds)
    theirs = acc.get_epsilon(1e-5)
    ours_grid = P.rdp_to_epsilon(orders, rounds * P.rdp_fixed_size_gaussian(m / n, z / 2, orders), 1e-5)[0]
    assert ours_grid == pytest.approx(theirs, rel=1e-6) and ours_grid >= theirs * (1 - 1e-12)
    eps, order = P.RDPAccountant().step(z / 2, m / n, rounds, "fixed-size").epsilon_and_order(1e-5)
    # ours bounds Theorem 27's forward differences from above (an ulp of slack): at most 1e-6 above
    assert eps <= theirs * (1 + 1e-6) and eps == pytest.approx(bridge.flower_epsilon(n, m, z, rounds, 1e-5))
    if order == int(order):
        at = gdp.RdpAccountant(orders=[int(order)], neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        at.compose(event, rounds)
        assert eps == pytest.approx(at.get_epsilon(1e-5), rel=1e-6)


def test_fixed_size_at_q_one_is_the_gaussian():
    """m = n: no sampling, the replace-one Gaussian α/(2z²) (closed form)."""
    a = np.array([1.5, 2.0, 7.0, 64.0])
    assert np.allclose(P.rdp_fixed_size_gaussian(1.0, 1.7, a), a / (2 * 1.7**2))


def test_flower_strategy_adds_the_noise_charged_to_an_equal_weight_mean():
    """Flower's own strategy objects, fed client results by hand: the
    aggregate moves by the equal-weight mean of the clipped updates plus
    N(0, (zC/m)²) per coordinate — over 40,000 coordinates the variance is
    within 3 % of (zC/m)² — whatever example counts clients report."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    plan = bridge.FlowerPlan(num_clients=10, num_sampled_clients=4, num_rounds=1, noise_multiplier=2.0,
                             clipping_norm=0.5, epsilon=bridge.flower_epsilon(10, 4, 2.0, 1), delta=1e-5)
    d = 40_000
    start = np.zeros(d, dtype=np.float32)
    s = bridge.strategy(plan, initial_parameters=ndarrays_to_parameters([start]))
    s.current_round_params = [start]
    rng = np.random.default_rng(0)
    ups = [rng.normal(size=d).astype(np.float32) for _ in range(4)]      # norms ≈ 200: clipped to 0.5
    results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([u]), num_examples=10 ** k, metrics={}))
               for k, u in enumerate(ups)]
    np.random.seed(1)
    params, _ = s.aggregate_fit(1, results, [])
    out = parameters_to_ndarrays(params)[0].astype(np.float64)
    mean = np.mean([u / np.linalg.norm(u) * 0.5 for u in ups], axis=0)   # equal weights, clipped to C
    noise = out - mean
    assert noise.mean() == pytest.approx(0, abs=4 * plan.noise_std_on_mean / math.sqrt(d))
    assert noise.var() == pytest.approx(plan.noise_std_on_mean ** 2, rel=0.03)
    client_side = bridge.strategy(plan, side="client")       # the clients clip (fixedclipping_mod)
    assert type(client_side).__name__ == "DifferentialPrivacyClientSideFixedClipping"
    assert client_side.noise_multiplier == plan.noise_multiplier


def test_flower_simulation_adds_the_noise_charged_and_trains():
    """A real Flower simulation (Ray engine) of a paretofl plan on digits:
    with clients sending back what they got, each round's change is Flower's
    noise — its variance over 3 rounds × 650 coordinates is (zC/m)² within
    10 %; with real clients the model learns."""
    from flower_fmnist import simulate

    plan = bridge.FlowerPlan(num_clients=10, num_sampled_clients=5, num_rounds=3, noise_multiplier=1.5,
                             clipping_norm=0.5, epsilon=bridge.flower_epsilon(10, 5, 1.5, 3), delta=1e-5)
    noise = simulate(plan, dataset="digits", clients=10, seed=0, zero_updates=True)
    steps = np.diff(np.array([np.concatenate([p.ravel() for p in ps]) for ps in noise["params"]]), axis=0)
    steps[:, -10] -= 1e-6                                               # the clients' 1e-6 in the first bias
    assert steps.var() == pytest.approx(plan.noise_std_on_mean ** 2, rel=0.10)
    learn = simulate(bridge.FlowerPlan(10, 10, 5, 0.5, 0.5, bridge.flower_epsilon(10, 10, 0.5, 5), 1e-5),
                     dataset="digits", clients=10, seed=0)
    assert learn["accuracy"] > 0.5 and learn["rounds"] == 5


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_opacus_reports_what_paretofl_planned(tmp_path, accountant):
    """A client trained with Opacus's make_private under a paretofl plan:
    Opacus's own accountant ends within the planned ε — its RDP accountant
    (on its own orders) spends the budget exactly, its PRV accountant (the
    default, tighter) less — and paretofl's ε of the history Opacus
    recorded is within it too."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from paretofl.fl.data import load_dataset

    ds = load_dataset("digits")
    x, y = ds.x_train[:600].reshape(600, -1), ds.y_train[:600]
    plan = obridge.plan(epsilon=2.0, delta=1e-5, rounds=4, local_steps=5, dataset_size=600, batch_size=60,
                        max_grad_norm=1.0)
    assert plan.sample_rate == 0.1
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(x, y), batch_size=60)
    engine = PrivacyEngine(accountant=accountant)
    model, opt, loader = obridge.make_private(engine, model, opt, loader, plan)
    it = iter(loader)
    for _ in range(plan.steps):
        try:
            xb, yb = next(it)
        except StopIteration:
            it = iter(loader)
            xb, yb = next(it)
        opt.zero_grad()
        if len(xb):
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    r = obridge.check(engine, plan)
    assert r["steps"] == plan.steps and r["within_plan"]
    assert r["opacus"] <= 2.0 + 1e-6 and r["paretofl"] <= 2.0 + 1e-6 and r["epsilon"] == max(r["opacus"], r["paretofl"])
    if accountant == "rdp":      # the same RDP on Opacus's orders: the budget is spent, not wasted
        assert r["opacus"] == pytest.approx(2.0, rel=1e-4) and r["paretofl"] <= r["opacus"] + 1e-9
    else:                        # PRV is tighter than RDP
        assert r["opacus"] < r["paretofl"]
    with pytest.raises(ValueError, match="batches of"):
        obridge.make_private(PrivacyEngine(), torch.nn.Linear(64, 10), torch.optim.SGD(model.parameters(), lr=0.1),
                             DataLoader(TensorDataset(x, y), batch_size=50), plan)


def test_design_export_contracts(capsys):
    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "100", "--export", "flower",
                 "--clip", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    e = out["export"]
    assert out["framework"] == "flower" and e["framework"] == "flower"
    assert {"num_sampled_clients", "noise_multiplier", "clipping_norm", "num_rounds", "fraction_fit"} <= set(e)
    assert "flower.strategy(plan)" in out["snippet"]
    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "100", "--export", "opacus",
                 "--clip", "1", "--client-size", "600", "--batch-size", "60", "--local-steps", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["export"]["make_private"]["poisson_sampling"] is True
    assert out["export"]["rounds"] == out["rounds"] and out["export"]["epsilon"] <= 2.0
    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "100", "--export", "opacus",
                 "--clip", "1"]) == 2
    assert "needs --client-size" in capsys.readouterr().err


def test_snippets_run():
    """The snippet `design --export flower` prints builds the strategy."""
    d = paretofl.design(n_clients=20, epsilon=3, max_rounds=30, framework="flower", kappa=16.0)
    code = bridge.snippet(bridge.plan(d, 0.3))
    env = {}
    exec(compile(code, "snippet", "exec"), env)
    assert env["plan"].num_rounds == d.rounds and env["strategy"] is not None


# --------------------------------------------------------------------------
# Flower's own accountant (flwr.serverapp, add/remove, no amplification)
# --------------------------------------------------------------------------
def _accounted_simulation(plan, dim=40):
    """A Flower Message-API simulation (Ray engine) of an accounted plan with
    clients that send back a fixed step: Flower's accountant on, max_epsilon
    the budget.  Returns the strategy's PrivacySpent."""
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    client = ClientApp()

    @client.train()
    def train(msg: Message, context: Context):
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        reply = RecordDict({"arrays": ArrayRecord([a + 0.01 for a in arrays]),
                            "metrics": MetricRecord({"num-examples": 1})})
        return Message(reply, reply_to=msg)

    server, out = ServerApp(), {}

    @server.main()
    def main(grid: Grid, context: Context):
        strategy = bridge.accounted_strategy(plan)
        strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(dim)]), num_rounds=plan.num_rounds)
        out["spent"], out["strategy"] = strategy.privacy_spent(), strategy

    run_simulation(server_app=server, client_app=client, num_supernodes=plan.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1}}, verbose_logging=False)
    return out


def test_flower_accountant_reports_the_designs_epsilon():
    """A design for Flower's own accountant, run in a Flower simulation with
    that accountant on: Flower's final ε is within the budget and within 1 %
    of paretofl's exact accountant for the same releases (m = 10 of N = 20
    a round under add/remove: T Gaussians of z/2, no amplification, since an
    added client can displace a sampled one), after the design's T
    releases; one more would pass max_epsilon, so Flower's
    PrivacyBudgetExhausted guards the budget."""
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

    budget, delta = 6.0, 1e-3
    d = paretofl.design(20, budget, delta=delta, max_rounds=8, q=0.5, framework="flower-accounted",
                        sigma_min=0.01)
    plan = bridge.plan(d, 0.5)
    assert plan.accounted and plan.num_sampled_clients == 10 and plan.num_rounds > 1
    out = _accounted_simulation(plan)
    spent = out["spent"]
    ours = P.compute_epsilon(1.0, plan.noise_multiplier / 2, plan.num_rounds, delta)   # finer orders, own code
    assert spent.num_releases == plan.num_rounds
    assert spent.epsilon <= budget
    assert spent.epsilon == pytest.approx(ours, rel=0.01)
    assert spent.epsilon == pytest.approx(d.epsilon, rel=1e-9)                   # the design says what Flower says
    more = GaussianPrivacyEvent(noise_multiplier=plan.noise_multiplier, sample_size=10, population_size=20)
    if d.rounds < d.max_rounds:                                                  # the budget, not the cap, bound T
        assert out["strategy"].accountant.would_exceed(more)


def test_flower_accountant_mistakes_the_bridge_rules_out():
    """(a) a q < 1 design for sampling without replacement (framework
    "flower") has no accountant Flower can attach: Flower would charge it
    without amplification, a larger ε than its budget; (b) Flower's
    replace-one accountant given the strategy's z as it is reports less
    than the ε paretofl charges (replace-one moves the sum by 2C)."""
    pytest.importorskip("flwr")
    from flwr.supercore.privacy_accounting import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    d = paretofl.design(100, 2.0, max_rounds=200, q=0.2, framework="flower")
    plan = bridge.plan(d, 0.5)
    with pytest.raises(ValueError, match="flower-accounted"):
        bridge.accountant(plan)
    assert P.compute_epsilon(1.0, d.noise_multiplier, d.rounds, d.delta) > 1.05 * d.budget   # (a)
    acc = RdpAccountant(PrivacyConfig(target_delta=d.delta, population_size=100,
                                      neighboring_relation=NeighboringRelation.REPLACE_ONE,
                                      sampling_method=SamplingMethod.WITHOUT_REPLACEMENT))
    acc.compose(GaussianPrivacyEvent(noise_multiplier=d.noise_multiplier, sample_size=20, population_size=100),
                d.rounds)
    naive = acc.get_privacy_spent().epsilon
    assert naive < 0.75 * d.epsilon                                                           # (b)
    assert bridge.flower_epsilon(100, 20, d.noise_multiplier, d.rounds, d.delta) == pytest.approx(d.epsilon, rel=1e-9)


@pytest.mark.parametrize("n,delta", [(60000, 1e-5), (100, 9e-4), (1000, 5e-5), (100, 0.01), (50, 0.005), (20, 0.008),
                                     (103, 1 / 103), (149, 1 / 149), (197, 0.99 / 197)])
def test_the_opacus_plan_says_what_its_delta_means_for_a_clients_samples(n, delta, capsys, tmp_path):
    """An (ε, δ) guarantee allows exposing each sample with probability δ: n·δ samples of a client's n in
    expectation.  The export's text prints n·δ; where δ is not below 1/n (Opacus's advice) the plan says the
    guarantee means nothing for the client's samples."""
    from paretofl.integrations import opacus as bridge

    p = bridge.plan(2.0, delta, 10, 5, n, 10, 1.0)
    assert p.exposed == pytest.approx(n * delta, rel=1e-12)
    assert (p.notes == []) == (Fraction(delta) * n < 1 - Fraction(1, 10**12))     # exact: δ = 1/n is 1/n
    if p.notes:
        assert "no meaningful guarantee" in p.notes[0] and f"n = {n} samples" in p.notes[0]
    assert p.to_dict()["notes"] == p.notes and p.to_dict()["exposed"] == p.exposed
    d = paretofl.design(40, 2.0, delta=delta, max_rounds=50)        # δ below 1/N: the clients are protected
    f = tmp_path / "d.json"
    d.save(f)
    capsys.readouterr()
    assert main(["export", str(f), "--to", "opacus", "--clip", "1", "--client-size", str(n), "--batch-size", "10",
                 "--local-steps", "5"]) == 0
    text = capsys.readouterr().out
    assert f"n*delta = {n * delta:.3g}" in text and ("no meaningful guarantee" in text) == bool(p.notes)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="dataset_size must be an integer"):
            bridge.OpacusPlan(1.0, 1.0, 10, bad, 5, 10, 2.0, delta)


def test_a_plan_is_never_believed_its_epsilon_is_what_its_parameters_spend():
    """attack 77: a Flower or Opacus plan built by hand, or an exported snippet whose rounds or noise were edited,
    may not say less than its parameters spend (Flower would run it): refused in one line, at a spend Google's
    accountant agrees with; a plan made from a design, and its snippet as written, stand."""
    hand = dict(num_clients=1000, num_sampled_clients=50, num_rounds=160, noise_multiplier=0.5, clipping_norm=0.3,
                epsilon=0.99, delta=1e-5)
    with pytest.raises(ValueError, match="says epsilon 0.99 where its parameters spend") as err:
        bridge.FlowerPlan(**hand)
    spent = float(str(err.value).split("spend ")[1].split(":")[0])
    # Google's accountant, sampling without replacement (replace-one: the sum moves by 2C, so z/2)
    acc = gdp.RdpAccountant(list(range(2, 257)), neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(1000, 50, dp_accounting.GaussianDpEvent(0.25)), 160)
    assert spent == pytest.approx(acc.get_epsilon(1e-5), rel=0.05) and spent > 100
    with pytest.raises(ValueError, match="over its budget"):
        bridge.FlowerPlan(**{**hand, "epsilon": spent * 2, "budget": 8.0})
    assert bridge.FlowerPlan(**{**hand, "epsilon": spent * 2}).epsilon == spent * 2     # a looser claim stands
    # a plan from a design, and its snippet as exported; the snippet with its rounds edited is refused
    d = paretofl.design(100, 2.0, 1e-5, max_rounds=500, framework="flower")
    p = bridge.plan(d, 0.3)
    line = next(x for x in bridge.snippet(p).splitlines() if x.startswith("plan = "))
    scope = {"flower": bridge}
    exec(line, scope)
    assert scope["plan"].epsilon == d.epsilon
    # checked where made, and kept as checked: no field is set afterwards, a replace() is checked again
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        p.num_rounds = p.num_rounds * 10
    with pytest.raises(ValueError, match="where its parameters spend"):
        dataclasses.replace(p, noise_multiplier=p.noise_multiplier / 10)
    # FedAvg's keywords pass through, but not the cohort: noise for m clients divided among fewer (attack 79:
    # 10 of 1000 a round at noise for 100 spends 196 where the plan says 2)
    wide = bridge.plan(paretofl.design(1000, 2.0, 1e-5, max_rounds=200, framework="flower", q=0.1), 1.0)
    for kw in ({"fraction_fit": 0.01}, {"min_fit_clients": 10}, {"min_available_clients": 10}):
        with pytest.raises(ValueError, match="how many clients train a round"):
            bridge.strategy(wide, **kw)
    assert bridge.strategy(wide, fraction_evaluate=0.5) is not None
    accounted = bridge.plan(paretofl.design(1000, 2.0, 1e-5, max_rounds=200, framework="flower-accounted",
                                            q=0.1), 1.0)
    for kw in ({"fraction_train": 0.01}, {"min_train_nodes": 10}, {"min_available_nodes": 10}):
        with pytest.raises(ValueError, match="how many clients train a round"):
            bridge.accounted_strategy(accounted, **kw)
    edited = line.replace(f"num_rounds={p.num_rounds!r}", f"num_rounds={p.num_rounds * 10}")
    assert edited != line
    with pytest.raises(ValueError, match="where its parameters spend"):
        exec(edited, scope)
    # Opacus: a hand-made plan at a tenth of the noise; the planned one, and its snippet edited
    with pytest.raises(ValueError, match="says epsilon 2 where its parameters spend"):
        obridge.OpacusPlan(noise_multiplier=0.1, max_grad_norm=1, batch_size=60, dataset_size=600, local_steps=5,
                           rounds=11, epsilon=2, delta=1e-5)
    op = obridge.plan(2.0, 1e-5, 11, 5, 600, 60, 1.0)
    assert op.epsilon <= 2.0
    line = next(x for x in obridge.snippet(op).splitlines() if x.startswith("plan = "))
    scope = {"bridge": obridge}
    exec(line, scope)
    with pytest.raises(ValueError, match="where its parameters spend"):
        exec(line.replace("'rounds': 11", "'rounds': 110"), scope)


def test_a_design_in_memory_is_exported_as_its_file_would_be():
    """attack 80: export checked a design in memory by its figures alone (local epochs set by hand were exported as
    "the design's recipe", which its statement and save refuse), and printed numpy's scalars into a snippet that
    cannot run; it reads the design as a file would hold it."""
    d = paretofl.design(100, 2.0, 1e-5, max_rounds=500, framework="flower")
    d.rounds, d.delta = np.int64(d.rounds), np.float64(d.delta)
    p, code = paretofl.api.export(d, "flower", clip=1.0)
    line = next(x for x in code.splitlines() if x.startswith("plan = "))
    assert "np." not in line and type(p.num_rounds) is int
    scope = {"flower": bridge}
    exec(line, scope)
    assert scope["plan"] == p
    d.local_epochs = d.local_epochs * 2
    with pytest.raises(ValueError, match="where its \"local_work\" chose"):
        paretofl.api.export(d, "flower", clip=1.0)
