"""What a new user can get wrong, found by trying it, and how paretofl now
answers (issue 35, items 5 and 6): each case is one member of a class that
is checked in one place in the library (tests/test_fuzz_*.py generate more
members of each class)."""

import json
import sqlite3
import sys

import numpy as np
import pytest

import paretofl
from paretofl.cli import main

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "pretrial"))
from test_pretrial import synthetic_store  # noqa: E402

LOADER = """
import numpy as np

def data():
    g = np.random.default_rng({seed})
    x = g.normal(size=(240, 6))
    w = g.normal(size=(6, 3))
    y = (x @ w).argmax(1)
    public = np.zeros(200, dtype=bool)
    public[:60] = True                     # the data mark their own public 30 %
    return dict(x_train=x[:200], y_train=y[:200], x_test=x[200:], y_test=y[200:], public=public)
"""


def _cli(*args, capsys):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------- a design keeps what shapes its guarantee
def test_a_design_keeps_its_delta_and_its_model_on_the_way_to_training(tmp_path, capsys):
    """design --delta 1e-6 --out FILE, then train --design FILE: the run is
    accounted at 1e-6 (before, the printed next: command had no --delta, so
    the run accounted at 1e-5 and reported epsilon 1.78 for a design of 2 at
    1e-6), on the model and data the design's kappa came from."""
    path = tmp_path / "d.json"
    rc, out, _ = _cli("design", "--clients", "20", "--budget", "2", "--max-rounds", "10", "--delta", "1e-6",
                      "--kappa", "1", "--out", str(path), capsys=capsys)
    assert rc == 0 and f"paretofl train --design {path}" in out             # the next step names the file
    d = paretofl.Design.load(path)
    d.model, d.dataset = "lr", "digits"                                      # kappa given: say what it trains
    d.save(path)
    rc, out, _ = _cli("train", "--design", str(path), "--json", capsys=capsys)
    r = json.loads(out)
    assert rc == 0 and r["delta"] == 1e-6 and r["model"] == "lr" and r["dataset"] == "digits"
    assert r["epsilon"] <= 2.0 and r["rounds"] == d.rounds
    # at the design's own delta the budget is spent; at 1e-5 the same run would report less
    assert r["epsilon"] > 0.9 * 2.0
    rc, _, err = _cli("train", "--design", str(path), "--delta", "1e-5", capsys=capsys)
    assert rc == 2 and "--delta is set by the design" in err


def test_a_design_without_its_pretrials_model_says_so(tmp_path, capsys):
    path = tmp_path / "d.json"
    paretofl.design(20, 2.0, max_rounds=10, kappa=1.0).save(path)           # kappa given: no model, no data
    rc, _, err = _cli("train", "--design", str(path), capsys=capsys)
    assert rc == 2 and "give --model and --dataset" in err


# ---------------------------------------------------------------- validate with the data's own public mask
def test_validate_compares_the_datas_public_share_with_all_of_it(tmp_path, monkeypatch):
    """A loader that marks its own public samples: the full sweep trains on
    all of the training data, not on the public mask again; the report and
    the stores say the shares each trained on."""
    (tmp_path / "masked.py").write_text(LOADER.format(seed=0))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    spec = paretofl.api.spec(dataset="masked:data", model="lr", clients=4, q=[1.0], sigmas=[0.5, 2.0],
                             rounds=[2, 4], seeds=3, clip=1.0, lr=0.5, delta=1e-3)
    r = paretofl.api.validate(spec, tmp_path, budget=50, progress=False)
    assert r["shares"] == {"public": pytest.approx(0.3), "full": pytest.approx(1.0)}
    assert "public 30 % vs full 100 %" in r["report"][0]
    bases = {k: json.loads(sqlite3.connect(p).execute("SELECT value FROM meta WHERE key = 'base'").fetchone()[0])
             for k, p in r["stores"].items()}
    assert bases["public"]["public_share"] == pytest.approx(0.3)         # the mask's share, not public_fraction
    assert bases["full"]["subset"] == "all" and "public_share" not in bases["full"]


# ---------------------------------------------------------------- a store knows its data
def test_a_store_refuses_runs_of_changed_data_under_the_same_loader(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    args = ["pretrial", "--dataset", "mine:data", "--model", "lr", "--clients", "4", "--q", "1", "--sigmas", "1",
            "--rounds", "2", "--seeds", "1", "--out", "s.sqlite"]
    (tmp_path / "mine.py").write_text(LOADER.format(seed=0))
    assert main(args) == 0
    capsys.readouterr()
    (tmp_path / "mine.py").write_text(LOADER.format(seed=1))               # the same loader, other data
    for m in [k for k in sys.modules if k == "mine"]:
        del sys.modules[m]
    rc, _, err = _cli(*args[:-2], "--out", "s.sqlite", capsys=capsys)
    assert rc == 2 and "data_fingerprint" in err


# ---------------------------------------------------------------- labels
def test_one_based_labels_are_refused_not_trained_as_an_extra_class():
    from paretofl.fl.data import Dataset

    x = np.random.default_rng(0).normal(size=(40, 3))
    with pytest.raises(ValueError, match="no sample of class 0"):
        Dataset.from_arrays(x, 1 + np.arange(40) % 2, x[:10], 1 + np.arange(10) % 2)
    with pytest.raises(ValueError, match="no sample of class 1"):
        Dataset.from_arrays(x, 2 * (np.arange(40) % 2), x[:10], 2 * (np.arange(10) % 2))
    ok = Dataset.from_arrays(x, 2 * (np.arange(40) % 2), x[:10], 2 * (np.arange(10) % 2), n_classes=3)
    assert ok.n_classes == 3                                                 # said on purpose: allowed


# ---------------------------------------------------------------- fits that must not be designed with
def _chance_store(path):
    """A store whose non-private runs stayed at chance (10 classes, 10 %)."""
    synthetic_store(path, 0.3, noise=0.01, seeds=3, sigmas=np.geomspace(0.3, 3, 6), rounds=[2, 4, 8, 16, 32])
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET accuracy = 0.1")
    db.execute("INSERT INTO meta VALUES ('classes', '10')")
    db.commit()
    db.close()


def test_a_fit_notices_that_even_non_private_training_stayed_at_chance_and_design_refuses_it(tmp_path, capsys):
    store, fitf = tmp_path / "chance.sqlite", tmp_path / "chance_fit.json"
    _chance_store(store)
    f = paretofl.fit(store, bootstrap=20)
    assert f.blocking and "stayed at chance" in f.blocking[0]
    f.save(fitf)
    with pytest.raises(ValueError, match='says not to design with it: "even non-private training stayed at chance'):
        paretofl.design(20, 2.0, max_rounds=20, fit=str(fitf))
    rc, _, err = _cli("design", "--clients", "20", "--budget", "2", "--max-rounds", "20", "--fit", str(fitf),
                      capsys=capsys)
    assert rc == 2 and "stayed at chance" in err and len(err.strip().splitlines()) == 1


def test_a_fit_with_problems_that_do_not_block_is_used_and_its_problems_are_noted(tmp_path):
    store = tmp_path / "two.sqlite"
    synthetic_store(store, 0.3, noise=0.01, seeds=2, sigmas=np.geomspace(0.3, 3, 6), rounds=[2, 4, 8, 16, 32])
    f = paretofl.fit(store, bootstrap=20)
    assert f.problems and not f.blocking                                     # two seeds: no interval, still a kappa
    f.save(tmp_path / "two_fit.json")
    d = paretofl.design(20, 2.0, max_rounds=20, fit=str(tmp_path / "two_fit.json"))
    assert any("lists a problem" in n and "2 seeds" in n for n in d.notes)


def test_an_older_fit_file_whose_front_has_no_slope_is_refused_too(tmp_path):
    """Fits written before ``blocking`` existed are read by their problems' words."""
    shipped = json.loads(paretofl.recommendation.shipped_fit().read_text())
    old = {k: v for k, v in shipped.items() if k != "blocking"}
    old["problems"] = ["the front has no slope in the sigma-T plane (slope 0, theory -2): kappa does not describe it"]
    (tmp_path / "old_fit.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="no slope"):
        paretofl.design(20, 2.0, max_rounds=20, fit=str(tmp_path / "old_fit.json"))


# ---------------------------------------------------------------- memory: refused early, in the caller's terms
def test_a_run_that_cannot_fit_is_refused_before_anything_grows_and_names_the_callers_knob(tmp_path, monkeypatch):
    import paretofl.fl.algorithms.base as base

    monkeypatch.setattr(base, "memory_available", lambda device: 10_000)    # 10 kB free
    with pytest.raises(ValueError, match="lower the replicas"):
        paretofl.train(dataset="digits", model="lr", rounds=1, replicas=3)
    spec = paretofl.api.spec(dataset="digits", model="lr", clients=4, q=[1.0], sigmas=[1.0], rounds=[2], seeds=2)
    with pytest.raises(ValueError, match="lower chunk"):
        paretofl.api.pretrial(spec, tmp_path / "s.sqlite", progress=False)
    assert not (tmp_path / "s.sqlite").exists()                              # refused before the store exists


def test_the_replicas_are_checked_before_the_engine_makes_their_generators():
    """3,000,000 replicas of LR on the digits: refused with the estimate, by
    the check made from the options alone (it used to make 6 million random
    generators first): no engine is made."""
    import paretofl.fl.engine as engine

    made = []
    monkey = engine.Engine.__init__

    def spy(self, *a, **k):
        made.append(1)
        return monkey(self, *a, **k)

    engine.Engine.__init__ = spy
    try:
        with pytest.raises(ValueError, match=r"3,000,000 replicas .* lower the replicas"):
            paretofl.train(dataset="digits", model="lr", rounds=1, replicas=3_000_000)
    finally:
        engine.Engine.__init__ = monkey
    assert not made


def test_account_at_a_delta_that_says_nothing_says_so():
    """account --delta 0.5 printed epsilon = 0 and nothing else: true (such a
    delta is met by publishing everyone's data half the time) and useless."""
    import paretofl

    r = paretofl.account(1.0, 0.1, 10, delta=0.5)
    assert any("above 0.01" in n and "refuse" in n for n in r.notes)
    assert not paretofl.account(1.0, 0.1, 10, delta=1e-5).notes
    with pytest.raises(ValueError, match="delta"):
        paretofl.design(n_clients=100, epsilon=2, max_rounds=10, delta=0.5)


# ---------------------------------------------------------------- a value of the wrong form, in one line
@pytest.mark.parametrize("call, said", [
    (lambda: paretofl.train(dataset="digits", rounds=2, budgets=[]), "give one epsilon per client"),
    (lambda: paretofl.train(dataset="digits", rounds=2, budgets={}), "budgets must be a budgets CSV file"),
    (lambda: paretofl.train(dataset="digits", rounds=2, budgets=2.0), "budgets must be a budgets CSV file"),
    (lambda: paretofl.train(dataset="digits", rounds=2, replicas=2, clip=[0.1, 0.2, 0.3]),
     "one for each of the 2 replicas"),
    (lambda: paretofl.train(dataset="digits", rounds=2, replicas=2, lr=[[0.1, 0.2]]), "one for each of the 2"),
    (lambda: paretofl.api.spec(dataset="digits", model="lr", clients=4, q=[1.0], sigmas=[1.0], rounds=[2],
                               seeds=10**400), "seeds must lie in"),
])
def test_a_value_of_the_wrong_form_is_one_clear_line(call, said):
    """Budgets given as nothing, a mapping or one number; a per-replica
    setting of another length; an integer past a float: each a ValueError
    saying what was expected (an attack met numpy's and Python's own errors)."""
    with pytest.raises(ValueError, match=said) as e:
        call()
    assert "\n" not in str(e.value)


def test_a_users_data_pretrial_with_local_work_fits_and_its_tuning_knows_the_data(tmp_path, monkeypatch, capsys):
    """A pre-trial on a user's loader (its store records the data's
    fingerprint and public share) with local work is fitted (the fit read
    the store's spec with those keys and refused it); a tuning on that
    store says its 60 public samples give a noisy choice; after the loader
    changes its data, the tuning is refused, not run on other samples."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine2.py").write_text(LOADER.format(seed=0))
    assert main(["pretrial", "--dataset", "mine2:data", "--model", "lr", "--clients", "4", "--q", "1", "--sigmas",
                 "0.5", "2", "--rounds", "2", "4", "--seeds", "2", "--clip", "1", "--lr", "0.5", "--delta", "1e-3",
                 "--local-work", "1", "2", "--out", "u.sqlite"]) == 0
    assert main(["fit", "u.sqlite", "--out", "u_fit.json"]) in (0, 1)
    assert json.loads((tmp_path / "u_fit.json").read_text())["local_work"]["epochs"] == [1, 2]
    d = paretofl.design(20, 4.0, delta=1e-3, max_rounds=6, q=1.0, kappa=0.5)
    t = paretofl.api.tune(d, "u.sqlite", paretofl.api.Grid(clips=(0.3, 1.0), lrs=(0.5,), seeds=1)).tuning
    assert t["validation_samples"] == 12                  # 20 % of each of 4 clients' 15 public samples: 3 each
    assert any("12 held-out public samples only" in n for n in t["notes_said"])
    capsys.readouterr()
    (tmp_path / "mine2.py").write_text(LOADER.format(seed=1))               # the same loader, other data
    for m in [k for k in sys.modules if k == "mine2"]:
        del sys.modules[m]
    from paretofl.pretrial import sweep

    sweep._SETUP_CACHE.clear()
    with pytest.raises(ValueError, match="changed since its pre-trial .*data fingerprint"):
        paretofl.api.tune(paretofl.design(20, 4.0, delta=1e-3, max_rounds=6, q=1.0, kappa=0.5), "u.sqlite",
                          paretofl.api.Grid(clips=(0.3,), lrs=(0.5,), seeds=1))


@pytest.mark.parametrize("bad, said", [
    (dict(clips=()), "clips grid must hold positive"), (dict(lrs=(0.1, -1)), "lrs grid must hold positive"),
    (dict(clips=(float("inf"),)), "clips grid must hold positive"), (dict(lrs="x"), "lrs grid must be a list"),
    (dict(epochs=(0,)), "local-epochs grid must hold integers"), (dict(epochs=(1.5,)), "local-epochs grid"),
])
def test_a_tuning_grid_refuses_a_bad_axis_when_it_is_made(bad, said):
    with pytest.raises(ValueError, match=said):
        paretofl.api.Grid(**bad)


def test_a_tuning_takes_its_grid_as_a_grid():
    """A grid given as a list (the old keywords' shape) is refused in one line, never read as something else."""
    d = paretofl.design(20, 4.0, delta=1e-3, max_rounds=6, q=1.0, kappa=0.5)
    with pytest.raises(ValueError, match="grid must be a paretofl.api.Grid"):
        paretofl.api.tune(d, "pretrials/lr_fmnist.sqlite", [0.3, 1.0])
    assert paretofl.api.Grid(clips=(1, 0.3, 1)).clips == (0.3, 1.0)      # sorted, once each
