"""A private pre-trial (issue 38; docs/theory.md §4.D): on the clients' own
data, every run charged; its fit records what it spent; a design with it
composes the pre-trial with the training against one budget — re-accounted
here by dp-accounting, never past the budget — and training reports the
two composed."""

from __future__ import annotations

import math

import numpy as np
import pytest

import paretofl
from paretofl.pretrial.fit import fit
from paretofl.pretrial.private import charges, spent
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import COLUMNS, Store
from paretofl.pretrial.sweep import run_sweep
from paretofl.recommendation import shipped_fit
from paretofl.theory.privacy import account, charges_from_data, compute_epsilon

N = 40


def _spec(**kw):
    base = dict(dataset="digits", model="lr", subset="all", public_fraction=1.0, clients=N, q=[1.0],
                sigmas=[1.0, 2.0, 4.0], rounds=[2, 4, 8], seeds=3, clip=1.0, lr=0.5, delta=1e-4, private=True,
                epsilon=8.0)
    base.update(kw)
    return Spec.from_dict(base)


@pytest.mark.parametrize("kw,match", [
    (dict(subset="public"), "clients' own data"),
    (dict(epsilon=None), "give epsilon"),
    (dict(epsilon=0.5), "spends epsilon"),
    (dict(epsilon=-1), "epsilon must lie"),
    (dict(private=False), "set private = true"),
    (dict(private="yes"), "true or false"),
])
def test_a_private_spec_is_checked(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        _spec(**kw)
    assert "\n" not in str(e.value)


def test_the_charge_is_every_run_written_out():
    """One Poisson-subsampled Gaussian of σ√(qN) per round of every
    (q, σ, seed) run, as far as the grid's largest T; no run without noise."""
    s = _spec()
    assert 0.0 not in s.noise_levels() and all(c[0] > 0 for c in s.configurations())
    ch = charges(s)
    assert [(c.sampling, c.rate, c.noise_multiplier, c.steps) for c in ch] == [
        ("poisson", 1.0, sg * math.sqrt(N), 8 * 3) for sg in (1.0, 2.0, 4.0)]
    # composition by hand: the RDP of independent Gaussians adds; at q = 1 each is a Gaussian of z
    zs = [sg * math.sqrt(N) for sg in (1.0, 2.0, 4.0)]
    z_eff = sum(24 / z ** 2 for z in zs) ** -0.5       # 72 Gaussians as one of this multiplier
    assert spent(s) == pytest.approx(compute_epsilon(1.0, z_eff, 1, 1e-4, "none"), rel=1e-6)


def _private_copy(src_path, dst_path, sigma_min=0.0):
    """The shipped LR store's runs with noise, as a private pre-trial's store."""
    src = Store(src_path)
    tab = src.table()
    keep = tab["sigma"] > sigma_min
    dst = Store(dst_path, dict(src.base, private=True, epsilon=1e9), classes=src.classes)
    rows = [{c: tab[c][i] for c in COLUMNS} for i in np.flatnonzero(keep)]
    most = {}
    for r in rows:                  # each run charged in the spend log, as a sweep's claim would
        key = (r["q"], r["sigma"], int(r["seed"]))
        most[key] = max(most.get(key, 0), int(r["rounds"]))
    for (q, sg, sd), t in most.items():
        dst.record_spend(q, [(sg, sd)], t)
    dst.add_rows(rows)
    dst.close()
    return dst_path


def test_a_private_store_fits_the_same_kappa_without_a_noise_free_run(tmp_path):
    """The reference (the least noisy run instead of σ = 0) shifts each
    seed's utility loss by one constant: the front and κ do not move."""
    from pathlib import Path

    store = Path(paretofl.__file__).resolve().parent.parent / "pretrials" / "lr_fmnist.sqlite"
    public = fit(store, bootstrap=0)
    private = fit(_private_copy(store, tmp_path / "p.sqlite"), bootstrap=0)
    assert private.kappa == pytest.approx(public.kappa, rel=1e-12)
    where = lambda f: [(s, t, q, e) for s, t, q, _, e in f.front]  # noqa: E731  (the utility itself shifts)
    assert where(private) == where(public) and private.private and not public.private
    assert private.private_epsilon > 100          # the shipped grid on private data would cost a fortune


def test_a_private_pre_trial_too_noisy_to_learn_says_so_and_not_that_the_model_is_wrong(tmp_path):
    """A private grid's least noisy run is its reference; when even that one
    never improves on its first loss, the fit blocks and names the noise
    (more budget or clients), not non-private training."""
    import sqlite3
    from pathlib import Path

    store = Path(paretofl.__file__).resolve().parent.parent / "pretrials" / "lr_fmnist.sqlite"
    path = _private_copy(store, tmp_path / "p.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET test_loss = 5.0 + rounds / 1000.0")   # every run gets worse with T
    db.commit()
    db.close()
    f = fit(path, bootstrap=0)
    assert f.blocking and f.blocking[0].startswith("even the least noisy run")
    assert "larger epsilon or more clients" in f.blocking[0] and "non-private" not in f.blocking[0]


@pytest.fixture(scope="module")
def private_fit(tmp_path_factory):
    d = tmp_path_factory.mktemp("private")
    spec = _spec()
    run_sweep(spec, d / "p.sqlite", progress=False)
    f = fit(d / "p.sqlite", bootstrap=50)
    # its runs' noise is the OS's (a private pre-trial is a release): whether this tiny grid learned varies from
    # run to run, and what these tests check is its accounting, not its kappa
    f.blocking = []
    f.save(d / "p_fit.json")
    return spec, f, d / "p_fit.json"


def test_the_fit_records_what_the_pre_trial_spent(private_fit):
    spec, f, _ = private_fit
    assert f.private and f.private_epsilon == pytest.approx(spent(spec), rel=1e-9)
    assert charges_from_data(f.private_charges) == charges(spec)


def _pld(events, delta):
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for sampling, q, z, n in events:
        ev = dp_event.GaussianDpEvent(z) if q >= 1 else dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))
        acc.compose(dp_event.SelfComposedDpEvent(ev, n))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("budget", [12.0, 20.0])
def test_pre_trial_and_training_together_never_pass_the_budget(private_fit, budget):
    """The design gives the training what the pre-trial leaves, composed:
    dp-accounting's PLD accountant, re-accounting the pre-trial's runs and
    the training's rounds together, stays within the budget (and within
    paretofl's ε, which is never below it); composing buys more rounds than
    subtracting the two ε's would."""
    pytest.importorskip("dp_accounting")
    spec, f, path = private_fit
    d = paretofl.design(N, budget, delta=1e-4, max_rounds=200, fit=str(path), sigma_min=0.05)
    pre = d.details["pretrial"]
    assert pre["epsilon"] == pytest.approx(spent(spec), rel=1e-9)
    assert d.epsilon <= budget * (1 + 1e-12) and d.epsilon < pre["epsilon"] + pre["training_epsilon"]
    z = d.sigma * math.sqrt(d.q * N)
    events = [(c.sampling, c.rate, c.noise_multiplier, c.steps) for c in charges(spec)]
    events.append(("poisson", d.q, z, d.rounds))
    pld = _pld(events, 1e-4)
    assert pld <= d.epsilon * (1 + 1e-6) <= budget * (1 + 1e-6)
    # subtracting: the training alone at budget - pre-trial's epsilon
    alone = paretofl.design(N, budget - pre["epsilon"], delta=1e-4, max_rounds=200, kappa=d.kappa, q=d.q,
                            sigma_min=0.05)
    assert d.utility_bound <= alone.utility_bound * (1 + 1e-9)


def test_training_the_design_starts_from_the_pre_trials_charges(private_fit):
    _, _, path = private_fit
    d = paretofl.design(N, 12.0, delta=1e-4, max_rounds=30, fit=str(path), sigma_min=0.05)
    d.dataset, d.model = "digits", "lr"
    r = paretofl.train(design=d, replicas=2)
    assert r.epsilon == pytest.approx(d.epsilon, rel=1e-9) and r.epsilon <= 12.0
    assert r.epsilon > d.details["pretrial"]["training_epsilon"]
    text = d.statement()
    assert "private pre-trial" in text and f"{d.details['pretrial']['epsilon']:.4g}" in text


def test_a_private_fit_designs_only_for_its_own_clients(private_fit):
    _, _, path = private_fit
    with pytest.raises(ValueError, match="protects those"):
        paretofl.design(N + 1, 12.0, delta=1e-4, max_rounds=30, fit=str(path))


def test_a_budget_the_pre_trial_already_spent_is_refused(private_fit):
    _, f, path = private_fit
    with pytest.raises(ValueError, match="cannot be met"):
        paretofl.design(N, f.private_epsilon * 0.9, delta=1e-4, max_rounds=30, fit=str(path))


def test_every_closed_form_design_says_what_kappas_interval_moves():
    d = paretofl.design(100, 2.0, max_rounds=500)
    k = d.details["kappa_range"]
    import json

    fit = json.loads(shipped_fit().read_text())
    # at the local epochs the design chose, kappa and its interval are scaled by A(1)/A(K) (docs/theory.md 4.E)
    lw = fit["local_work"]
    r = lw["A"][0] / lw["A"][lw["epochs"].index(d.local_epochs)]
    ci = [c * r for c in fit["kappa_ci"]]
    assert k["kappa_ci"] == pytest.approx(ci)
    lo, hi = (paretofl.design(100, 2.0, max_rounds=500, kappa=c, q=d.q) for c in ci)
    assert sorted([lo.rounds, hi.rounds]) == k["rounds"]
    assert any("95 % interval" in n for n in d.notes)


def test_epsilon_of_composes_like_the_accountant():
    ch = charges(_spec())
    assert account(ch, 1e-4) == pytest.approx(spent(_spec()), rel=1e-12)


def test_the_cost_of_a_wrong_kappa_every_design_quotes_is_the_measured_table():
    """KAPPA_FACTOR3_COST is recomputed from docs/results.md §11's table
    (the design at κ × 1/3 and × 3 against κ × 1, the worst cell), and
    every closed-form design quotes it."""
    import re
    from pathlib import Path

    from paretofl.recommendation import KAPPA_FACTOR3_COST

    text = (Path(paretofl.__file__).resolve().parent.parent / "docs" / "results.md").read_text()
    section = text.split("## 11.")[1].split("\n## ")[0]
    rows = [r for r in section.splitlines() if re.match(r"\| (LR|MLP) \|", r)]
    assert len(rows) == 9
    acc = [[float(m) for m in re.findall(r"T \d+: ([\d.]+)", r)] for r in rows]   # × 1/10, 1/3, 1, 3, 10
    assert all(len(a) == 5 for a in acc)
    assert max(a[2] - a[3] for a in acc) == pytest.approx(KAPPA_FACTOR3_COST["too large"], abs=1e-9)
    assert max(a[2] - a[1] for a in acc) == pytest.approx(KAPPA_FACTOR3_COST["too small"], abs=1e-9)
    d = paretofl.design(100, 2.0, max_rounds=200)
    assert any(f"3x too large cost up to {KAPPA_FACTOR3_COST['too large']:.1f}" in n for n in d.notes)


def test_a_private_store_at_a_fits_path_is_never_passed_over(private_fit, tmp_path):
    """A fit edited to say public (its private fields dropped, its digest
    made to match the edited spec) beside nothing, its private store still
    at the path it records: refused, not designed as public (the attack: ε
    15.7 for 16.4); and a private fit whose store was replaced by another
    private pre-trial's is refused, not taken as absent."""
    import json

    from paretofl.recommendation import store_digest

    _, _, path = private_fit
    data = json.loads(path.read_text())
    forged = {k: v for k, v in data.items() if k not in ("private", "private_charges", "private_epsilon")}
    forged["spec"] = {k: v for k, v in data["spec"].items() if k != "epsilon"} | {"private": False,
                                                                                   "subset": "public"}
    forged["results_digest"] = store_digest(forged["spec"])
    (tmp_path / "forged_fit.json").write_text(json.dumps(forged))
    with pytest.raises(ValueError, match="holds another pre-trial"):
        paretofl.design(N, 12.0, delta=1e-4, max_rounds=30, fit=str(tmp_path / "forged_fit.json"), sigma_min=0.05)
    other = tmp_path / "other.sqlite"
    run_sweep(_spec(clip=0.5, sigmas=[2.0, 4.0], rounds=[2], seeds=1), other, progress=False)
    moved = dict(data, results=str(other))
    (tmp_path / "moved_fit.json").write_text(json.dumps(moved))
    with pytest.raises(ValueError, match="holds another pre-trial"):
        paretofl.design(N, 12.0, delta=1e-4, max_rounds=30, fit=str(tmp_path / "moved_fit.json"), sigma_min=0.05)
