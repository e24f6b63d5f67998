"""Clients with budgets of their own: the budgets files, the group design
(each group's ε re-accounted by independent accountants), the trainer's
per-group sampling and ledgers, and the command line."""

import json
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant as pld
from scipy.optimize import brentq
from scipy.stats import norm

import paretofl
from paretofl.budgets import Budgets, read_budgets
from paretofl.cli import main
from paretofl.theory.privacy import DEFAULT_ORDERS

KAPPA = 16.4


def _pld_epsilon(q, z, T, delta):
    """dp-accounting's privacy-loss-distribution ε of T Poisson-subsampled
    Gaussians (tight, unlike RDP: an upper bound on ε holds only if this is
    below it too)."""
    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), T)
    return acc.get_epsilon(delta)


def _rdp_integer_epsilon(q, z, T, delta):
    """dp-accounting's RDP ε at integer orders (where its RDP is exact)."""
    acc = dp_accounting.rdp.RdpAccountant(orders=list(range(2, 257)))
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), T)
    return acc.get_epsilon(delta)


def _seen_gaussians_epsilon(T, z, delta):
    """The tight ε of T Gaussians of noise multiplier z, each seen
    (μ = √T/z; Balle & Wang 2018): the local view at q = 1."""
    mu = math.sqrt(T) / z
    f = lambda e: norm.cdf(mu / 2 - e / mu) - math.exp(e) * norm.cdf(-mu / 2 - e / mu) - delta  # noqa: E731
    return brentq(f, 0, 500) if f(0) > 0 else 0.0


def _random_budgets(rng, n):
    g = int(rng.integers(1, 4))
    eps = np.sort(rng.choice([0.5, 1, 2, 3, 4, 8], size=g, replace=False)).astype(float)
    shares = rng.dirichlet(np.ones(g)) * 0.8 + 0.2 / g
    return Budgets.shares(shares / shares.sum(), eps, n)


@pytest.mark.parametrize("seed", range(5))
def test_each_groups_epsilon_re_accounted_is_within_its_budget_aggregate_view(seed):
    """Aggregate view: the group design's (q_g, z, T), re-accounted by
    dp-accounting (PLD, tight; and RDP at integer orders), keeps each
    group within its own budget; paretofl's own ε never falls below the
    tight one (no under-report)."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([20, 100, 1000]))
    b = _random_budgets(rng, n)
    d = paretofl.design(n, None, max_rounds=int(rng.choice([30, 200])), budgets=b, kappa=KAPPA, sigma_min=0.01)
    assert len(d.groups) == len(b.epsilons) and sum(g["clients"] for g in d.groups) == n
    assert d.cohort == pytest.approx(sum(g["clients"] * g["q"] for g in d.groups))
    z = d.noise_multiplier
    assert z == pytest.approx(d.sigma * math.sqrt(d.cohort))
    for g in d.groups:
        tight = _pld_epsilon(g["q"], z, d.rounds, d.delta)
        assert tight <= g["budget"] * (1 + 1e-9)
        assert g["epsilon"] >= tight * (1 - 1e-3)
        assert g["epsilon"] <= g["budget"] * (1 + 1e-9)
        # RDP at integer orders only is coarser than paretofl's searched orders: a little above, never far
        assert _rdp_integer_epsilon(g["q"], z, d.rounds, d.delta) <= g["budget"] * 1.05
    rates = [g["q"] for g in d.groups]
    assert rates == sorted(rates)                                      # a stricter group is sampled less


@pytest.mark.parametrize("seed", range(3))
def test_each_groups_epsilon_re_accounted_is_within_its_budget_local_view(seed):
    """Local view: each group's own σ_g, re-accounted where the design
    samples everyone (q = 1) by the tight composition of T seen Gaussians,
    keeps each group within its budget; stricter groups add more noise."""
    rng = np.random.default_rng(10 + seed)
    b = _random_budgets(rng, 50)
    d = paretofl.design(50, None, max_rounds=100, budgets=b, kappa=KAPPA, mechanism="client-local", sigma_min=0.01)
    sig = [g["sigma"] for g in d.groups]
    assert sig == sorted(sig, reverse=True)
    for g in d.groups:
        assert g["epsilon"] <= g["budget"] * (1 + 1e-9)
        if g["q"] == 1.0:
            tight = _seen_gaussians_epsilon(d.rounds, g["sigma"], d.delta)
            assert tight <= g["budget"] and g["epsilon"] >= tight * (1 - 1e-3)


@pytest.mark.parametrize("mechanism", ["client-aggregate", "client-local"])
@pytest.mark.parametrize("lo, hi", [(2.0, 5.0), (0.5, 0.9), (1.0, 1.0)])
def test_a_group_design_keeps_its_noise_in_the_sigma_range_asked(mechanism, lo, hi):
    """--sigma-min/--sigma-max hold for group designs as for one budget: every
    σ a group design trains (each group's σ_g in the local view, the one σ in
    the aggregate view) lies in the range, each group's ε re-accounted from
    its σ_g stays within its budget, and where the range leaves a group no
    round the design is refused (the local view searched a fixed grid of σ_g
    whatever the range, and trained σ_g = 0.64 when asked for 2 to 5)."""
    b = Budgets.shares([0.6, 0.3, 0.1], [1, 2, 8], 100)
    try:
        d = paretofl.design(100, None, max_rounds=200, budgets=b, kappa=KAPPA, mechanism=mechanism,
                            sigma_min=lo, sigma_max=hi)
    except ValueError as e:
        # refused only where the strictest group cannot be served at the most noise allowed, at every rate
        assert "allows no round" in str(e)
        assert mechanism == "client-local"
        assert _seen_gaussians_epsilon(1, hi, 1e-5) > 1.0
        return
    sigmas = [g["sigma"] for g in d.groups] if mechanism == "client-local" else [d.sigma]
    assert all(lo * (1 - 1e-12) <= s <= hi * (1 + 1e-12) for s in sigmas), sigmas
    for g in d.groups:
        assert g["epsilon"] <= g["budget"] * (1 + 1e-9)
        if mechanism == "client-local" and g["q"] == 1.0:
            assert _seen_gaussians_epsilon(d.rounds, g["sigma"], d.delta) <= g["budget"] * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_shares_that_sum_to_one_within_the_tolerance_give_n_clients(seed):
    """Shares summing to one within 1e-6 are accepted; they must give exactly N clients, each group at most
    one from its share of N (at N = 10⁷, shares summing to 1 + 9e-7 gave 10,000,009 clients)."""
    rng = np.random.default_rng(seed)
    g = int(rng.integers(1, 6))
    s = rng.dirichlet(np.ones(g)) * (1 + rng.uniform(-9e-7, 9e-7))
    n = int(rng.choice([7, 100, 10**6 + 3, 10**7]))
    if np.any(s * n < 1):
        return
    b = Budgets.shares(s, np.arange(1, g + 1, dtype=float), n)
    assert len(b.group_of) == n and b.counts.sum() == n
    assert np.all(np.abs(b.counts - s / s.sum() * n) < 1 + 1e-9)


@pytest.mark.parametrize("mechanism, q_max", [("client-aggregate", 0.001), ("client-local", 0.0099)])
def test_a_group_design_refused_for_its_rate_cap_names_the_cap(mechanism, q_max):
    """Where q_max (below 1/N: no client a round on average) is what leaves no round, the refusal names it
    beside the budget and the σ range (it named those two only, and neither helps)."""
    b = Budgets.shares([0.5, 0.5], [1, 8], 100)
    with pytest.raises(ValueError, match=r"or q_max \(.*below 1/N\)"):
        paretofl.design(100, None, max_rounds=10, budgets=b, kappa=KAPPA, mechanism=mechanism, q_max=q_max)


def test_a_group_held_at_the_sigma_floor_is_told_why_it_underspends():
    """A client-local group whose budget allows less noise than sigma_min gets sigma_min and spends less: the
    note says the floor is why (it said its clients could not use more, which a lower floor lets them)."""
    b = Budgets.shares([0.3, 0.4, 0.3], [1, 3, 8], 10)
    d = paretofl.design(10, None, max_rounds=10, budgets=b, kappa=KAPPA, mechanism="client-local", sigma_min=2,
                        sigma_max=5, delta=1e-3)
    floor = [g for g in d.groups if g["sigma"] == 2.0]
    assert floor and all(g["epsilon"] < 0.95 * g["budget"] for g in floor)
    (note,) = [n for n in d.notes if "sigma_min" in n]
    assert "lower sigma_min" in note and all(f"{g['budget']:g}" in note for g in floor)
    assert not any("cannot use more" in n for n in d.notes)


def test_the_group_design_beats_everyone_at_the_strictest_budget_in_its_bound():
    """The group design's search holds the design that gives everyone the
    strictest budget (every group at the strict group's rate), so its
    bound is no worse; with one group it is today's design."""
    b = Budgets.shares([0.34, 0.43, 0.23], [1, 2, 3], 100)
    g = paretofl.design(100, None, max_rounds=200, budgets=b, kappa=KAPPA, sigma_min=0.01)
    strict = paretofl.design(100, 1.0, max_rounds=200, kappa=KAPPA, sigma_min=0.01)
    assert g.utility_bound <= strict.utility_bound
    one = paretofl.design(100, None, max_rounds=200, budgets=Budgets.shares([1.0], [2.0], 100), kappa=KAPPA,
                          sigma_min=0.01)
    same = paretofl.design(100, 2.0, max_rounds=200, kappa=KAPPA, sigma_min=0.01)
    assert one.utility_bound == pytest.approx(same.utility_bound, rel=0.02)


def test_shares_become_whole_clients_by_largest_remainder(tmp_path):
    b = Budgets.shares([0.34, 0.43, 0.23], [1, 2, 3], 10)
    assert b.counts.tolist() == [4, 4, 2] and b.n_clients == 10          # 3.4, 4.3, 2.3: the 0.4 rounds up
    f = tmp_path / "c.csv"
    f.write_text("client,epsilon\n2,8\n0,1\n1,1\n")
    r = read_budgets(f)
    assert r.epsilons.tolist() == [1.0, 8.0] and r.group_of.tolist() == [0, 0, 1]


@pytest.mark.parametrize("text,msg", [
    ("client,epsilon\n0,1\n2,2\n", "client 1 is missing"),
    ("client,epsilon\n0,1\n0,2\n", "client 0 is listed twice"),
    ("client,epsilon\n0,1\n1,0\n", "epsilon must be positive"),
    ("client,epsilon\n0,1\n1,-2\n", "epsilon must be positive"),
    ("client,epsilon\n0,1\n1,nan\n", "epsilon must be positive"),
    ("share,epsilon\n0.5,1\n0.4,2\n", "sum to one"),
    ("share,epsilon\n0.5,1\n0.5,1\n", "one share only"),
    ("share,epsilon\n1.2,1\n-0.2,2\n", "every share must be positive"),
    ("epsilon,client\n1,0\n", "header must be"),
    ("client,epsilon\n", "no lines"),
    ("", "is empty"),
    ("client,epsilon\n0,one\n", "is not two numbers"),
    ("client,epsilon\n0,1\ninf,2\n", "client ids must be integers"),     # an IndexError once
    ("client,epsilon\n0,1\n1e20,2\n", "client 1 is missing"),             # past int64: an IndexError once
    ("client,epsilon\n0,1\n-1,2\n", "client ids must be integers"),
])
def test_a_bad_budgets_file_is_refused_in_one_line_and_nothing_is_written(text, msg, tmp_path, monkeypatch, capsys):
    f = tmp_path / "b.csv"
    f.write_text(text)
    with pytest.raises(ValueError, match=msg):
        read_budgets(f, 2)
    monkeypatch.chdir(tmp_path)
    for cmd in (["design", "--clients", "2", "--budgets", "b.csv", "--max-rounds", "10"],
                ["train", "--dataset", "digits", "--model", "lr", "--clients", "2", "--budgets", "b.csv",
                 "--mechanism", "client-aggregate", "--rounds", "2", "--history", "h.csv"]):
        rc = main(cmd)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and msg in err, (cmd, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.csv"]


def test_a_group_whose_budget_allows_no_round_is_refused(tmp_path, capsys):
    f = tmp_path / "b.csv"
    f.write_text("share,epsilon\n0.5,0.0001\n0.5,2\n")
    with pytest.raises(ValueError, match="epsilon = 0.0001.* allows no round"):
        paretofl.design(10, None, max_rounds=10, budgets=str(f), sigma_max=30.0)
    assert main(["design", "--clients", "10", "--budgets", str(f), "--max-rounds", "10"]) == 2
    assert "allows no round" in capsys.readouterr().err
    with pytest.raises(ValueError, match="the share 0.01 of epsilon = 1 is no client of 10"):
        Budgets.shares([0.01, 0.99], [1, 2], 10)


def test_design_with_budgets_on_the_command_line_lists_each_group(tmp_path, capsys):
    f = tmp_path / "b.csv"
    f.write_text("share,epsilon\n0.6,1\n0.3,2\n0.1,8\n")
    assert main(["design", "--clients", "100", "--budgets", str(f), "--max-rounds", "100", "--kappa", "16.4",
                 "--sigma-min", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "3 groups" in out and "per group" in out and "train it with paretofl train --design" in out
    assert main(["design", "--clients", "100", "--budgets", str(f), "--budget", "2", "--max-rounds", "10"]) == 2
    assert "give --budget" in capsys.readouterr().err
    assert main(["design", "--clients", "100", "--budgets", str(f), "--max-rounds", "10", "--export", "flower",
                 "--clip", "1"]) == 2
    assert "does not apply with --budgets" in capsys.readouterr().err


def test_budgets_are_taken_as_a_user_holds_them(tmp_path):
    """A CSV saved by a spreadsheet (a byte-order mark before the header), a
    list of one epsilon per client, a Budgets: the same groups; a budgets
    object of another kind is refused in one line."""
    import paretofl
    from paretofl.budgets import budgets_of

    f = tmp_path / "b.csv"
    f.write_text("\ufeffclient,epsilon\n" + "".join(f"{i},{1 if i < 5 else 4}\n" for i in range(10)),
                 encoding="utf-8")
    want = Budgets.per_client([1] * 5 + [4] * 5)
    for given in (str(f), f, [1] * 5 + [4] * 5, np.array([1.0] * 5 + [4.0] * 5), want):
        got = budgets_of(given, 10)
        assert got.epsilons.tolist() == [1.0, 4.0] and got.group_of.tolist() == want.group_of.tolist(), given
    d = paretofl.design(10, None, max_rounds=5, budgets=[1] * 5 + [4] * 5, kappa=1.0)
    assert [g["budget"] for g in d.groups] == [1.0, 4.0]
    for bad, msg in (({"0": 1}, "one epsilon per client"), ([1, "4"], "one epsilon per client"),
                     ([True] * 10, "one epsilon per client"), ([1] * 9, "for 9 clients, not 10"),
                     ([1] * 9 + [10**400], "a number a float holds")):      # an OverflowError once
        with pytest.raises(ValueError, match=msg):
            budgets_of(bad, 10)


def test_what_a_group_design_chooses_is_not_taken_from_the_caller(tmp_path):
    """train(budgets=...) designs σ and each group's rate: a σ or a rate given
    beside it is refused (it was overridden silently); the clients default to
    the budgets' own (they defaulted to 10 and the budgets were refused); a
    group id that is not whole is refused (0.9 was truncated to group 0)."""
    import paretofl

    with pytest.raises(ValueError, match="designed for each group"):
        paretofl.train(budgets=[1.0, 4.0] * 10, dataset="digits", model="lr", rounds=3, sigma=0.1)
    with pytest.raises(ValueError, match="designed for each group"):
        paretofl.train(budgets=[1.0, 4.0] * 10, dataset="digits", model="lr", rounds=3, client_rate=1.0)
    r = paretofl.train(budgets=[1.0, 4.0] * 10, dataset="digits", model="lr", rounds=3)
    assert r.clients == 20 and r.epsilon_groups["1"] <= 1.0 and r.epsilon_groups["4"] <= 4.0
    with pytest.raises(ValueError, match="whole number naming one"):
        Budgets([1.0, 4.0], [0.9, 1.9, 0.2])


def test_a_group_design_leaves_paretofl_by_no_framework(tmp_path, capsys):
    """No framework samples each group at its own rate: export refuses a
    group design in one line (it turned one into a single-budget Opacus
    plan), and design's next step names training only."""
    import warnings

    import paretofl
    from paretofl.cli import main

    b = tmp_path / "b.csv"
    b.write_text("client,epsilon\n" + "".join(f"{i},{1 if i < 50 else 4}\n" for i in range(100)))
    g = tmp_path / "g.json"
    assert main(["design", "--clients", "100", "--max-rounds", "100", "--budgets", str(b), "--out", str(g)]) == 0
    out = capsys.readouterr().out
    nxt = next(line for line in out.splitlines() if line.startswith("next:"))
    assert "train --design" in nxt and "export" not in nxt and "trainer only" in nxt
    for to, extra in (("opacus", ["--clip", "1", "--client-size", "20", "--batch-size", "5", "--local-steps", "2"]),
                      ("flower", [])):
        assert main(["export", str(g), "--to", to, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "runs in paretofl's trainer only" in err and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match="trainer only"):
        paretofl.api.export(paretofl.Design.load(g), "opacus", clip=1.0, client_size=20, batch_size=5, local_steps=2)
    # every bridge's own entry point, called directly (opacus.from_design planned at the strictest budget)
    from paretofl.integrations import flower, jax_privacy, opacus, tff

    d = paretofl.Design.load(g)
    for call in (lambda: opacus.from_design(d, 100, 10, 5, 1.0), lambda: flower.plan(d, 1.0),
                 lambda: jax_privacy.plan(d, 1.0), lambda: tff.plan(d, 1.0)):
        with pytest.raises(ValueError, match="trainer only"):
            call()
    with warnings.catch_warnings():          # a budget no float can exceed: designed, without an overflow warning
        warnings.simplefilter("error")
        d = paretofl.design(100, None, max_rounds=50, budgets=[1.0] * 99 + [1e308], kappa=1.0)
    assert d.groups[-1]["epsilon"] <= 1e308


@pytest.mark.parametrize("mech", [m for m in paretofl.api.names()["mechanisms"]
                                  if m not in ("client-aggregate", "client-local")])
def test_budgets_beside_a_mechanism_that_cannot_sample_groups_are_refused_before_training(mech):
    """Every registered mechanism but the two that sample each group at its
    own rate is refused beside per-client budgets, in one line, with nothing
    trained (DP-SGD's 'sample' once met the design's list of names instead)."""
    with pytest.raises(ValueError) as e:
        paretofl.train(dataset="digits", rounds=2, budgets=[1.0, 1.0, 4.0, 4.0], mechanism=mech)
    msg = str(e.value)
    assert "\n" not in msg and ("client-aggregate" in msg or "Flower" in msg), msg


def test_a_client_local_refusal_names_q_max_only_where_it_leaves_no_rate():
    """Each update's own noise, its participation seen: every rate from 1/N to q_max is searched and a higher
    one only spends more, so q_max is not why a group cannot be served (the refusal named it, and raising it
    changed nothing), unless it is below 1/N."""
    b = Budgets.shares([0.5, 0.3, 0.2], [1, 4, 20], 200)
    with pytest.raises(ValueError) as err:
        paretofl.design(200, None, max_rounds=20, budgets=b, kappa=KAPPA, mechanism="client-local",
                        sigma_min=0.5, sigma_max=0.8, q_max=0.2)
    assert "allows no round" in str(err.value) and "q_max" not in str(err.value)


@pytest.mark.parametrize("mechanism", ["client-aggregate", "client-local"])
def test_a_group_budget_below_the_conversion_floor_names_it(tmp_path, mechanism):
    """A strictest budget below the least cost of converting RDP to (ε, δ) on the orders (computed here from
    the conversion's formula) fits no round at any rate or noise: the refusal names that floor and no rate
    or σ range; a budget that is merely small names the range, not the floor."""
    floor = min(math.log((a - 1) / a) - (math.log(1e-5) + math.log(a)) / (a - 1) for a in DEFAULT_ORDERS)
    f = tmp_path / "b.csv"
    f.write_text(f"share,epsilon\n0.5,{floor * 0.5!r}\n0.5,8\n")
    with pytest.raises(ValueError, match=rf"below epsilon {floor:.4g} no round fits") as err:
        paretofl.design(100, None, max_rounds=50, budgets=str(f), mechanism=mechanism, q_max=0.5)
    assert "sigma range" not in str(err.value) and "q_max" not in str(err.value)
    f.write_text("share,epsilon\n0.5,0.01\n0.5,8\n")
    with pytest.raises(ValueError, match="allows no round at any rate and noise allowed: raise its budget or the "
                                         "sigma range") as err:
        paretofl.design(100, None, max_rounds=50, budgets=str(f), mechanism=mechanism, sigma_max=0.5)
    assert "below epsilon" not in str(err.value)


def test_a_group_run_says_its_epsilon_is_the_most_any_group_spent(tmp_path, capsys):
    """A run of groups reports the largest group's ε beside the strictest budget (the one it stopped at): it says
    so, and ``budget_met`` holds each group's spend against its own budget (the spends read from the JSON)."""
    f = tmp_path / "b.csv"
    f.write_text("share,epsilon\n0.5,1\n0.5,8\n")
    cmd = ["train", "--dataset", "digits", "--model", "lr", "--clients", "10", "--budgets", str(f),
           "--mechanism", "client-aggregate", "--rounds", "2"]
    assert main([*cmd, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    spent = out["epsilon_groups"]
    assert out["epsilon"] == max(spent.values()) > out["budget"] == 1.0
    assert out["budget_met"] is True and spent["1"] <= 1.0 and spent["8"] <= 8.0
    assert main(cmd) == 0
    assert "the epsilon above is the most any group spent" in capsys.readouterr().out


@pytest.mark.parametrize("mechanism", ["client-local", "client-aggregate"])
def test_budget_met_holds_each_group_to_its_exact_budget_not_its_label(tmp_path, capsys, mechanism):
    """Budgets whose printed labels round (0.6666666 -> "0.666667", 2.0000004 -> "2"): a run that spends within
    the exact budgets is met (it was said not met against the label "2"), and the figure is checked against the
    exact budgets read back from the file, not the labels."""
    f = tmp_path / "b.csv"
    f.write_text("share,epsilon\n0.5,0.6666666\n0.5,2.0000004\n")
    assert main(["train", "--dataset", "digits", "--model", "lr", "--clients", "10", "--budgets", str(f),
                 "--mechanism", mechanism, "--rounds", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    spent = sorted(out["epsilon_groups"].values())
    assert spent[0] <= 0.6666666 * (1 + 1e-9) and spent[1] <= 2.0000004 * (1 + 1e-9)
    assert out["budget_met"] is True


def test_a_group_run_that_trains_fewer_rounds_than_allowed_says_so(capsys, tmp_path):
    """With budgets, rounds is a cap: the group design may choose fewer, and the run trains its T.  That is
    no problem (the run is complete), but it is said (helper 65's case: budgets of 1/3 allowed 1 of 2 rounds,
    and the result said nothing of the other); a design that takes every round allowed has no note."""
    import paretofl
    from paretofl.cli import main

    r = paretofl.train(budgets=[0.3333331, 0.3333339] * 5, dataset="digits", model="lr", rounds=2)
    assert r.rounds == 1 and r.complete and r.notes and "1 of the at most 2 rounds" in r.notes[0]
    r = paretofl.train(budgets=[8.0, 8.0] * 5, dataset="digits", model="lr", rounds=2)
    assert r.rounds == 2 and r.notes == []
    (tmp_path / "b.csv").write_text("share,epsilon\n0.5,0.3333331\n0.5,0.3333339\n")
    assert main(["train", "--budgets", str(tmp_path / "b.csv"), "--rounds", "2", "--dataset", "digits", "--model", "lr",
                 "--clients", "10"]) == 0
    assert "note: the group design trains 1 of the at most 2 rounds allowed" in capsys.readouterr().out
