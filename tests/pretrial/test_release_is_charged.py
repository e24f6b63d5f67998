"""What is released is what is charged (issue 44): the private pre-trial's
noise cannot be undone, its spend follows every path that reads it, and
nothing a file says about privacy is believed.

The attack of the issue: two released runs that share their noise W,
y₁ = A + z₁W and y₂ = A + z₂W, give back A = (z₂y₁ − z₁y₂)/(z₂ − z₁), the
run without noise.  Three runs that share W are collinear in z, so the A
recovered from runs (1, 2) and from runs (1, 3) agree; with independent
noise they differ by about the noise itself.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch

import paretofl
from paretofl.pretrial.private import charges, of_store, spent
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import Store
from paretofl.pretrial.sweep import Job, run_job, run_sweep

ROOT = Path(__file__).resolve().parents[2]

N = 40
SIGMAS = [1.0, 2.0, 4.0]


def _spec(**kw):
    base = dict(dataset="digits", model="lr", subset="all", public_fraction=1.0, clients=N, q=[1.0],
                sigmas=SIGMAS, rounds=[2, 4], seeds=2, clip=1.0, lr=0.5, delta=1e-4, private=True, epsilon=8.0)
    base.update(kw)
    return Spec.from_dict(base)


def _recovered(models, zs):
    """A from runs (0, 1) and from runs (0, 2): (z_j y_0 − z_0 y_j)/(z_j − z_0)."""
    y = [torch.cat([p[r].reshape(-1) for p in models]).double() for r in range(3)]
    a = [(zs[j] * y[0] - zs[0] * y[j]) / (zs[j] - zs[0]) for j in (1, 2)]
    return a[0], a[1], (y[1] - y[0]).norm().item()


def _one_round(secure: bool):
    """One round of three replicas with one seed and three noise levels, q = 1."""
    from paretofl.fl.algorithms import train
    from paretofl.fl.build import assemble, prepare

    setup = prepare("digits", "lr", N, subset="all")
    pol = assemble(setup, "dpfedavg", [0, 0, 0], secure=secure, mechanism="client-aggregate",
                   sigma=np.array(SIGMAS), clip=1.0, lr=0.5, client_rate=1.0).policy
    glob, _, _ = train(pol, rounds=1)
    return glob


def test_seeded_runs_that_share_a_seed_give_back_the_run_without_noise():
    """The attack works on a simulation (seeded: reproducible, not a release)."""
    a1, a2, noise = _recovered(_one_round(secure=False), SIGMAS)
    assert (a1 - a2).norm().item() < 1e-4 * noise


def test_secure_runs_that_share_a_seed_do_not():
    a1, a2, noise = _recovered(_one_round(secure=True), SIGMAS)
    assert (a1 - a2).norm().item() > 0.1 * noise


def test_a_private_pre_trial_draws_noise_no_one_can_draw_again(monkeypatch):
    """The pre-trial's own path (run_job, as pretrial and Ray run it): its
    replicas at one seed do not share noise, and the same spec run twice
    does not give the same runs."""
    import paretofl.fl.algorithms as algorithms

    caught = []
    real = algorithms.train

    def spy(pol, **kw):
        out = real(pol, **kw)
        caught.append(out[0])
        return out

    monkeypatch.setattr(algorithms, "train", spy)
    spec = _spec(rounds=[1])
    rows = run_job(spec, Job(1.0, [(s, 0) for s in SIGMAS], [1]))
    a1, a2, noise = _recovered(caught[0], SIGMAS)
    assert (a1 - a2).norm().item() > 0.1 * noise
    again = run_job(spec, Job(1.0, [(s, 0) for s in SIGMAS], [1]))
    assert all(r["test_loss"] != g["test_loss"] for r, g in zip(rows, again))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("spend")
    run_sweep(_spec(), d / "p.sqlite", progress=False)
    return d / "p.sqlite"


def test_the_spend_log_charges_every_run_the_sweep_claimed(store):
    s = of_store(store)
    assert s.verified and s.clients == N
    assert [(c.sampling, c.rate, c.noise_multiplier, c.steps) for c in s.charges] == [
        (c.sampling, c.rate, c.noise_multiplier, c.steps) for c in charges(_spec())]
    assert s.epsilon == pytest.approx(spent(_spec()), rel=1e-12)


def _copy(src, dst):
    import shutil

    shutil.copy(src, dst)
    return dst


def test_rows_deleted_from_a_private_store_stay_charged(store, tmp_path):
    p = _copy(store, tmp_path / "cut.sqlite")
    db = sqlite3.connect(p)
    db.execute("DELETE FROM runs WHERE sigma = 1.0")
    db.commit()
    db.close()
    assert of_store(p).epsilon == pytest.approx(of_store(store).epsilon, rel=1e-12)
    f = paretofl.fit(str(p), bootstrap=0)
    assert f.private_epsilon == pytest.approx(of_store(store).epsilon, rel=1e-12)
    assert any("stay charged" in n for n in f.notes)


@pytest.mark.parametrize("sql,match", [
    ("DELETE FROM spend WHERE sigma = 1.0", "spend log holds"),
    ("UPDATE meta SET value = '0' WHERE key = 'spend_rows'; DELETE FROM spend", "never charged"),
    ("UPDATE spend SET rounds = 1", "never charged"),
    ("DELETE FROM meta WHERE key = 'noise'", "before paretofl 0.3"),
])
def test_a_spend_log_changed_by_hand_is_refused(store, tmp_path, sql, match):
    p = _copy(store, tmp_path / "edited.sqlite")
    db = sqlite3.connect(p)
    db.executescript(sql)
    db.commit()
    db.close()
    for read in (lambda: of_store(p), lambda: paretofl.fit(str(p), bootstrap=0),
                 lambda: paretofl.design(N, 20.0, delta=1e-4, max_rounds=50, from_store=str(p))):
        with pytest.raises(ValueError, match=match) as e:
            read()
        assert "\n" not in str(e.value)


def _pld(events, delta, interval=1e-2):
    """dp-accounting's PLD accountant (pessimistic: never below the true ε)."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    for q, z, n in events:
        ev = dp_event.GaussianDpEvent(z) if q >= 1 else dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))
        acc.compose(dp_event.SelfComposedDpEvent(ev, n))
    return acc.get_epsilon(delta)


@pytest.fixture(scope="module")
def shipped_private(tmp_path_factory):
    """The shipped LR store's noised runs as a private pre-trial's store
    (its losses fixed, so the empirical fit is the same on every run), each
    run charged in its spend log as a sweep's claim would."""
    from pathlib import Path

    from paretofl.pretrial.store import COLUMNS

    src = Store(Path(paretofl.__file__).resolve().parent.parent / "pretrials" / "lr_fmnist.sqlite")
    tab, base, classes = src.table(), src.base, src.classes
    src.close()
    path = tmp_path_factory.mktemp("shipped") / "private.sqlite"
    dst = Store(path, dict(base, private=True, epsilon=1e4, subset="rest"), classes=classes)
    keep = np.flatnonzero((tab["sigma"] > 0.1) & (tab["rounds"] <= 64))    # a pre-trial of epsilon about 2,100
    rows = [{c: tab[c][i] for c in COLUMNS} for i in keep]
    most = {}
    for r in rows:
        key = (r["q"], r["sigma"], int(r["seed"]))
        most[key] = max(most.get(key, 0), int(r["rounds"]))
    for (q, sg, sd), t in most.items():
        dst.record_spend(q, [(sg, sd)], t)
    dst.add_rows(rows)
    dst.close()
    return path, int(base["clients"]), float(base["delta"])


def test_design_from_store_composes_the_pre_trial(shipped_private):
    """The path fit itself recommends (item 2): the pre-trial's spend is
    composed with the training's (re-accounted by dp-accounting's PLD, never
    above paretofl's ε), and the statement names it."""
    pytest.importorskip("dp_accounting")
    path, n, delta = shipped_private
    spend = of_store(path)
    budget = 1.5 * spend.epsilon
    d = paretofl.design(n, budget, delta=delta, max_rounds=60, sigma_min=0.05, from_store=str(path))
    pre = d.details["pretrial"]
    assert pre["verified"] and pre["epsilon"] == pytest.approx(spend.epsilon, rel=1e-12)
    events = [(c.rate, c.noise_multiplier, c.steps) for c in spend.charges]
    events.append((d.q, d.sigma * math.sqrt(d.q * n), d.rounds))
    assert _pld(events, delta) <= d.epsilon * (1 + 1e-6) <= budget * (1 + 1e-6)
    assert d.epsilon > pre["training_epsilon"] and d.epsilon > spend.epsilon
    text = d.statement()
    assert "private pre-trial" in text and "spend log" in text


def test_tuning_on_a_store_of_the_clients_data_is_refused(shipped_private):
    """Item 3: tuning trains on the store's data; a private store's is the clients'."""
    path, n, delta = shipped_private
    d = paretofl.design(n, 1.5 * of_store(path).epsilon, delta=delta, max_rounds=60, sigma_min=0.05,
                        from_store=str(path))
    with pytest.raises(ValueError, match="clients' own data") as e:
        paretofl.api.tune(d, str(path))
    assert "\n" not in str(e.value)


def test_training_a_design_of_a_private_store_starts_from_its_spend(shipped_private, tmp_path):
    """train(design=...) composes the pre-trial it re-derives from the store;
    a fit of the store without its spend is not believed."""
    import json

    path, n, delta = shipped_private
    f = paretofl.fit(str(path), bootstrap=0)
    fit_path = tmp_path / "fit.json"
    f.save(fit_path)
    budget = 1.2 * f.private_epsilon
    d = paretofl.design(n, budget, delta=delta, max_rounds=5, sigma_min=0.05, fit=str(fit_path))
    assert d.details["pretrial"]["verified"]
    r = paretofl.train(design=d, replicas=1)
    assert r.epsilon == pytest.approx(d.epsilon, rel=1e-9) and r.epsilon > d.details["pretrial"]["training_epsilon"]
    # the same fit marked public: its spec and its store still say what was spent
    data = json.loads(fit_path.read_text())
    data.update(private=False)
    fit_path.write_text(json.dumps(data))
    again = paretofl.design(n, budget, delta=delta, max_rounds=5, sigma_min=0.05, fit=str(fit_path))
    assert again.epsilon == pytest.approx(d.epsilon, rel=1e-12) and again.details["pretrial"]["verified"]


def _consistent(data: dict, got: dict) -> None:
    """A forger's file made to agree with itself: its ε, and its closed-form point's beside it, re-derived."""
    data["epsilon"] = got["epsilon"]
    if data.get("closed_form"):
        data["closed_form"]["epsilon"] = got["closed_form"]["epsilon"]


def test_a_design_file_whose_pretrial_charges_were_swapped_or_moved_to_flower_is_refused(shipped_private, tmp_path):
    """The charges composed are the store's: a file whose pre-trial charges
    were replaced by others of no smaller ε alone (which compose to less),
    or whose mechanism was edited to one Flower accounts (which cannot be
    told of the pre-trial), is refused on load, in one line."""
    import json

    from paretofl.recommendation import Design, account_design
    from paretofl.theory.privacy import account, charges_from_data

    path, n, delta = shipped_private
    d = paretofl.design(n, 1.5 * of_store(path).epsilon, delta=delta, max_rounds=30, sigma_min=0.05,
                        from_store=str(path))
    out = tmp_path / "d.json"
    d.save(out)
    real = json.loads(out.read_text())
    alone = account(charges_from_data(real["details"]["pretrial"]["charges"]), delta)
    def fake(steps):
        return [{"sampling": "poisson", "rate": 1e-3, "noise_multiplier": 0.3, "steps": int(steps)}]

    lo, hi = 1, 1
    while account(charges_from_data(fake(hi)), delta) < alone:
        lo, hi = hi, hi * 2
    while hi - lo > 1:                     # the fewest steps of no smaller ε alone than the real charges'
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if account(charges_from_data(fake(mid)), delta) < alone else (lo, mid)
    fake = fake(hi)
    edited = json.loads(out.read_text())
    edited["details"]["pretrial"].update(charges=fake, epsilon=account(charges_from_data(fake), delta))
    body = {k: v for k, v in edited.items() if k not in ("format", "framework")}
    _consistent(edited, account_design(Design(**body)))                 # consistent with its own charges
    bad = tmp_path / "swapped.json"
    bad.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="charges other than") as e:
        paretofl.api.load_design(str(bad))
    assert "\n" not in str(e.value)
    # the pre-trial record dropped (the fitted model's store, named in kappa_source, is still found), or
    # pointed at a public store (which would hide the private one κ came from): refused too
    dropped = json.loads(out.read_text())
    del dropped["details"]["pretrial"]
    body = {k: v for k, v in dropped.items() if k not in ("format", "framework")}
    _consistent(dropped, account_design(Design(**body)))
    (tmp_path / "dropped.json").write_text(json.dumps(dropped))
    with pytest.raises(ValueError, match="composes no private pre-trial"):
        paretofl.api.load_design(str(tmp_path / "dropped.json"))
    public = json.loads(out.read_text())
    public["details"]["pretrial"]["store"] = str(ROOT / "pretrials" / "lr_fmnist.sqlite")
    (tmp_path / "public.json").write_text(json.dumps(public))
    with pytest.raises(ValueError, match="one pre-trial"):
        paretofl.api.load_design(str(tmp_path / "public.json"))
    flower = json.loads(out.read_text())
    flower["mechanism"] = "flower-accounted"
    (tmp_path / "flower.json").write_text(json.dumps(flower))
    with pytest.raises(ValueError, match="Flower") as e:
        paretofl.api.load_design(str(tmp_path / "flower.json"))
    assert "\n" not in str(e.value)


def test_validate_refuses_a_private_spec(tmp_path):
    with pytest.raises(ValueError, match="private") as e:
        paretofl.api.validate(_spec(), tmp_path)
    assert "\n" not in str(e.value)


def test_the_design_figure_draws_the_budget_the_pre_trial_leaves(shipped_private, tmp_path):
    """The plots compose the pre-trial's spend too: the frontier of a design
    made after a private pre-trial is what the budget leaves after it."""
    from paretofl import plots
    from paretofl.mechanisms import get

    path, n, delta = shipped_private
    d = paretofl.design(n, 1.5 * of_store(path).epsilon, delta=delta, max_rounds=60, sigma_min=0.05,
                        from_store=str(path))
    mech = get(d.mechanism)
    args = (mech, d.q, n, d.budget, d.delta, d.sigma, d.sigma * 1.0001, 10 ** 6, d.kappa)
    with_prior = plots._frontier(*args, plots._prior(d))[1][0]
    alone = plots._frontier(*args)[1][0]
    assert d.rounds <= with_prior < alone
    paretofl.api.design_figure(d, tmp_path / "design.png")
    assert (tmp_path / "design.png").stat().st_size > 0


def test_a_private_store_never_spends_past_its_epsilon_across_sweeps(tmp_path):
    """Another grid run into the same private store (the store's identity
    leaves the grid out) counts what the store already charged, and is
    refused before it trains where the total would pass the spec's epsilon;
    the store is left as it was."""
    first = _spec(sigmas=[2.0, 4.0], rounds=[2], seeds=1)
    eps = 1.01 * spent(first)
    first = _spec(sigmas=[2.0, 4.0], rounds=[2], seeds=1, epsilon=eps)
    run_sweep(first, tmp_path / "p.sqlite", progress=False)
    before = of_store(tmp_path / "p.sqlite").epsilon
    second = _spec(sigmas=[3.0], rounds=[2], seeds=1, epsilon=eps)      # alone within eps, not on top
    assert spent(second) < eps
    with pytest.raises(ValueError, match="has charged epsilon") as e:
        run_sweep(second, tmp_path / "p.sqlite", progress=False)
    assert "\n" not in str(e.value)
    assert of_store(tmp_path / "p.sqlite").epsilon == before


# ---------------------------------------------------------------------------
# what an attacker found on a fresh clone (each a class, fixed in one place)
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped_fit_file(shipped_private, tmp_path_factory):
    path, n, delta = shipped_private
    f = paretofl.fit(str(path), bootstrap=0)
    out = path.parent / "private_fit.json"
    f.save(out)
    return out, n, delta, f.private_epsilon


@pytest.mark.parametrize("kw,why", [
    (dict(framework="flower"), "Flower"),
    (dict(framework="flower-accounted"), "Flower"),
    (dict(budgets="BUDGETS", epsilon=None), "per-client budgets"),
])
def test_a_private_pre_trial_is_composed_only_where_one_accountant_can_hold_it(shipped_fit_file, tmp_path, kw, why):
    """Group designs, Flower's two modes (its own accountant; replace-one)
    would print an ε without the pre-trial's spend, or under the wrong
    relation: refused in one line."""
    fit_path, n, delta, pre = shipped_fit_file
    if kw.get("budgets") == "BUDGETS":
        (tmp_path / "b.csv").write_text(f"share,epsilon\n0.5,{2 * pre:g}\n0.5,{4 * pre:g}\n")
        kw = dict(kw, budgets=str(tmp_path / "b.csv"))
    args = dict(n_clients=n, epsilon=2 * pre, delta=delta, max_rounds=60, sigma_min=0.05, fit=str(fit_path))
    args.update(kw)
    with pytest.raises(ValueError, match=why) as e:
        paretofl.design(**args)
    assert "cannot be composed" in str(e.value) and "\n" not in str(e.value)


def test_a_pre_trial_on_the_clients_data_without_privacy_designs_nothing(tmp_path):
    """subset rest or all without private = true: its runs (a noise-free
    reference among them) released the clients' data; every reader refuses."""
    spec = Spec.from_dict(dict(dataset="digits", model="lr", subset="all", public_fraction=1.0, clients=N, q=[1.0],
                               sigmas=[1.0, 2.0], rounds=[2, 4], seeds=1, clip=1.0, lr=0.5, delta=1e-4))
    run_sweep(spec, tmp_path / "rest.sqlite", progress=False)
    with pytest.raises(ValueError, match="without privacy"):
        paretofl.design(N, 8.0, delta=1e-4, max_rounds=30, from_store=str(tmp_path / "rest.sqlite"))
    f = paretofl.fit(str(tmp_path / "rest.sqlite"), bootstrap=0)
    f.blocking = []
    f.save(tmp_path / "rest_fit.json")
    with pytest.raises(ValueError, match="without privacy"):
        paretofl.design(N, 8.0, delta=1e-4, max_rounds=30, fit=str(tmp_path / "rest_fit.json"))


def test_a_fit_finds_its_store_beside_it_wherever_it_is_read_from(shipped_fit_file, tmp_path, monkeypatch):
    """Recorded paths resolve from the working folder or beside the file
    that records them: a fit and store moved together, a design read from
    another folder, are re-derived from the store, not marked unverified."""
    import shutil

    fit_path, n, delta, pre = shipped_fit_file
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(fit_path, moved / "private_fit.json")
    shutil.copy(fit_path.parent / "private.sqlite", moved / "private.sqlite")
    data = json.loads((moved / "private_fit.json").read_text())
    data["results"] = "private.sqlite"                      # relative, as an older fit recorded it
    (moved / "private_fit.json").write_text(json.dumps(data))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    d = paretofl.design(n, 2 * pre, delta=delta, max_rounds=60, sigma_min=0.05, fit=str(moved / "private_fit.json"))
    assert d.details["pretrial"]["verified"]
    d.save(moved / "design.json")
    # the design's recorded store is absolute: move the folder, read it from elsewhere
    shutil.move(str(moved), str(tmp_path / "again"))
    back = paretofl.api.load_design(tmp_path / "again" / "design.json")
    assert back.details["pretrial"]["verified"] and str(tmp_path / "again") in back.details["pretrial"]["source"]


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(private_charges=[]), "lists no charges"),
    (lambda d: d.pop("private_charges"), "missing or damaged"),
    (lambda d: (d.update(private=False, private_charges=[], private_epsilon=None), d["spec"].pop("private")),
     "was edited"),                     # its spec is not the one its store's digest records
    (lambda d: d["spec"].update(lr=0.2), "was edited"),
    # an older fit (no digest): its store tells the edit apart
    (lambda d: (d.pop("results_digest"), d["spec"].update(lr=0.2)), "another pre-trial"),
    (lambda d: (d.pop("results_digest"), d.update(private=False, private_charges=[], private_epsilon=None),
                d["spec"].pop("private")), "another pre-trial|without privacy"),
])
def test_a_fit_that_disagrees_with_its_store_is_refused(shipped_fit_file, tmp_path, edit, match):
    fit_path, n, delta, pre = shipped_fit_file
    data = json.loads(fit_path.read_text())
    edit(data)
    path = tmp_path / "edited_fit.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match) as e:
        paretofl.design(n, 2 * pre, delta=delta, max_rounds=60, sigma_min=0.05, fit=str(path))
    assert "\n" not in str(e.value)


def test_a_budget_the_pre_trial_spent_names_the_pre_trial(shipped_fit_file):
    fit_path, n, delta, pre = shipped_fit_file
    with pytest.raises(ValueError, match="the private pre-trial alone spent"):
        paretofl.design(n, 0.9 * pre, delta=delta, max_rounds=60, sigma_min=0.05, fit=str(fit_path))
