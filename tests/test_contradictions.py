"""Numbers that contradicted themselves and refusals with no way out (issue
45, items 5 and 6): each symptom as it was found, and what paretofl says
now.  tests/test_fuzz_api.py and tests/test_fuzz_cli.py generate more
members of each class."""

import itertools
import json
import math
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

import paretofl
from paretofl.cli import main
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import Store
from paretofl.theory import privacy as P
from paretofl.theory.privacy import asymptotic_epsilon

ROOT = Path(__file__).resolve().parent.parent
PRETRIALS = ROOT / "pretrials"


def offset_store(path, kappa=0.3, offset=0.0, q=0.5, n=20, seeds=3, sigmas=(0.3, 0.6, 1.2, 2.4),
                 rounds=(2, 4, 8, 16, 32), noise=0.0):
    """A store whose losses follow the bound plus a constant: 1/T +
    κσ²/(qN) + offset (a negative offset: private runs that end below the
    non-private reference, as a fitted constant c < 0 says)."""
    spec = Spec.from_dict(dict(dataset="digits", model="lr", clients=n, q=[q], sigmas=[1.0], rounds=[1], seeds=seeds))
    st = Store(path, spec.base())
    rng = np.random.default_rng(1)
    orders = P.DEFAULT_ORDERS
    curves = {s: P.rdp_subsampled_gaussian(q, s * math.sqrt(q * n), orders) for s in sigmas}
    rows = []
    for s, t, k in itertools.product([0.0, *sigmas], rounds, range(seeds)):
        loss = 1.0 if s == 0 else 1.0 + 1 / t + kappa * s * s / (q * n) + offset + noise * rng.standard_normal()
        rows.append(dict(sigma=s, rounds=int(t), q=q, seed=k, test_loss=loss, accuracy=0.9,
                         epsilon=math.inf if s == 0 else P.rdp_to_epsilon(orders, int(t) * curves[s], 1e-5)[0],
                         epsilon_asymptotic=math.inf if s == 0 else asymptotic_epsilon(s, t, q, n, 1e-5),
                         seconds=0.0))
    st.add_rows(rows)
    st.close()
    return path


def _cli(*args, capsys):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------- 5: figures that cannot contradict themselves
def test_a_fitted_loss_below_zero_is_said_as_zero_and_no_percentage_is_taken_of_it(tmp_path, capsys):
    """Was: predicted loss -0.02288, "572.74 % lower", "-29.7 % worse" in one
    --from-store design."""
    store = offset_store(tmp_path / "below.sqlite", offset=-0.3)
    d = paretofl.design(n_clients=2000, epsilon=8.0, max_rounds=200, from_store=str(store))
    assert d.predicted_utility_loss == 0.0
    assert any("below the non-private loss" in n and "negative" in n for n in d.notes)
    rc, out, _ = _cli("design", "--clients", "2000", "--budget", "8", "--max-rounds", "200", "--from-store",
                      str(store), capsys=capsys)
    assert rc == 0
    assert not re.search(r"predicted loss\s+-", out)
    assert "% worse" not in out and "predicts a loss" in out                 # a difference, not a percentage
    rel = re.search(r"the design's .* is ([\d.]+) % (lower|higher)", out)   # of two bounds, both positive
    assert rel and float(rel.group(1)) < 100


def test_the_round_cap_binds_only_where_the_design_is_at_it(capsys):
    """Was: "the round cap binds: the front ends ... at T = max rounds" at T
    = 7 of 100 (Theorem 3's case II describes the front, not the design)."""
    for cap in ("100", "6"):
        rc, out, _ = _cli("design", "--from-store", str(PRETRIALS / "cnn_fmnist.sqlite"), "--clients", "100",
                          "--budget", "2", "--max-rounds", cap, capsys=capsys)
        assert rc == 0
        t = int(re.search(r"rounds T\s+(\d+)", out).group(1))
        line = re.search(r"Theorem 3 case.*", out).group(0)
        assert ("the cap binds this design" in line) == (t == int(cap))
        assert ("does not bind this design" in line) == (t < int(cap))


def test_two_seeds_give_no_interval_rather_than_one_said_impossible(tmp_path, capsys):
    """Was: a 2-seed interval printed, then "a bootstrap over seeds cannot
    give an interval"."""
    store = offset_store(tmp_path / "two.sqlite", seeds=2, noise=0.01)
    f = paretofl.fit(store, bootstrap=200)
    assert all(math.isnan(x) for x in f.kappa_ci) and all(math.isnan(x) for x in f.slope_ci)
    assert f.kappa_ci_method.startswith("none: 2 seeds")
    rc, out, _ = _cli("fit", str(store), "--out", str(tmp_path / "f.json"), capsys=capsys)
    kappa_line = next(line for line in out.splitlines() if line.strip().startswith("kappa"))
    assert rc == 0 and "interval none" in kappa_line and "[" not in kappa_line


def test_kappa_at_the_end_of_its_interval_says_why(tmp_path, capsys):
    """Was: kappa printed at the edge of its own interval (9.07 [9.07, 9.41])
    with nothing said: now the interval's method is named, and why the
    estimate is its end (a front on a grid takes few values)."""
    f = paretofl.fit(PRETRIALS / "mlp_fmnist.sqlite", bootstrap=300)
    lo, hi = f.kappa_ci
    assert lo <= f.kappa <= hi
    assert "percentile bootstrap over the 3 seeds" in f.kappa_ci_method
    if math.isclose(f.kappa, lo) or math.isclose(f.kappa, hi):
        assert "end" in f.kappa_ci_method and "give exactly this kappa" in f.kappa_ci_method
    rc, out, _ = _cli("fit", str(PRETRIALS / "mlp_fmnist.sqlite"), "--out", str(tmp_path / "f.json"),
                      "--bootstrap", "300", capsys=capsys)
    assert rc == 0 and "percentile bootstrap" in out


# ------------------------------------------------------------- 6: every refusal names the way out
def test_a_fit_refused_for_its_front_names_a_command_that_works_on_the_same_store(tmp_path, capsys, monkeypatch):
    """Was: "the front has no slope ... fix the pre-trial and --fit again, or
    give --kappa yourself", and fit's "design refuses a fit whose pre-trial
    did not learn" of a pre-trial that learned.  Now design names the
    store's own design, which is run here exactly as said."""
    monkeypatch.chdir(ROOT)
    rc, out, _ = _cli("fit", "pretrials/cnn_fmnist.sqlite", "--out", str(tmp_path / "cnn_fit.json"), "--bootstrap",
                      "200", capsys=capsys)
    assert rc == 0 and "did not learn" not in out
    problem = next(line for line in out.splitlines() if "no slope" in line)
    assert "longer training" in problem and "add rounds 128, 256 to the pre-trial" in problem
    then = next(line for line in out.splitlines() if "what works on this store today" in line)
    cmd = shlex.split(then.split("today: ", 1)[1].replace("N", "100").replace("EPS", "2").replace(" T", " 50"))
    assert cmd[0] == "paretofl" and _cli(*cmd[1:], capsys=capsys)[0] == 0
    args = ["design", "--clients", "100", "--budget", "2", "--max-rounds", "50"]
    rc, _, err = _cli(*args, "--fit", str(tmp_path / "cnn_fit.json"), capsys=capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--kappa does not" not in err                           # the fit's own words are not made flags
    way = re.search(r"(--from-store=\S+) in place of --fit", err)
    assert way, err
    rc, out, _ = _cli(*args, way.group(1), capsys=capsys)
    assert rc == 0 and "Recommendation" in out


def test_fit_json_writes_no_file_unasked(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    offset_store(store)
    rc, out, _ = _cli("fit", str(store), "--json", "--bootstrap", "20", capsys=capsys)
    assert rc == 0 and json.loads(out)["fit_file"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    rc, out, _ = _cli("fit", str(store), "--json", "--bootstrap", "20", "--out", str(tmp_path / "f.json"),
                      capsys=capsys)
    assert rc == 0 and (tmp_path / "f.json").is_file()


def test_a_spec_files_field_is_named_as_the_file_names_it_and_a_flag_as_a_flag(tmp_path, capsys):
    """Was: "--batch-size must lie ..." of a batch_size set in the TOML."""
    spec = tmp_path / "bad.toml"
    spec.write_text('dataset = "digits"\nmodel = "lr"\nclients = 4\nsigmas = [1.0]\nrounds = [2]\nseeds = 1\n'
                    'batch_size = 0\n')
    for cmd in (["pretrial", str(spec), "--out", str(tmp_path / "x.sqlite")],
                ["validate", str(spec), "--out-dir", str(tmp_path)]):
        rc, _, err = _cli(*cmd, capsys=capsys)
        assert rc == 2 and "batch_size must lie" in err and "--batch-size" not in err, err
    spec.write_text('dataset = "digits"\nmodel = "lr"\nclients = 4\nsigmas = [1.0]\nrounds = [2]\nseeds = 1\n')
    rc, _, err = _cli("pretrial", str(spec), "--batch-size", "0", "--out", str(tmp_path / "x.sqlite"), capsys=capsys)
    assert rc == 2 and "--batch-size must lie" in err


def test_a_closed_pipe_ends_the_command_quietly(capsys, monkeypatch):
    """Was: `design ... | head` printing "error: [Errno 32] Broken pipe"."""
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    rc = main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "50"])
    monkeypatch.undo()
    assert rc == 1 and capsys.readouterr().err == ""


def test_labels_missing_a_class_name_what_the_cli_user_can_give(tmp_path, capsys, monkeypatch):
    """Was: "give n_classes", a flag the CLI lacks: the loader's mapping can carry it."""
    (tmp_path / "onecls.py").write_text(
        "import numpy as np\n\ndef data():\n    g = np.random.default_rng(0)\n    x = g.normal(size=(80, 4))\n"
        "    y = np.ones(80, dtype=int)\n    return dict(x_train=x[:60], y_train=y[:60], x_test=x[60:], "
        "y_test=y[60:])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, _, err = _cli("train", "--dataset", "onecls:data", "--model", "lr", "--clients", "4", "--rounds", "1",
                      capsys=capsys)
    assert rc == 2 and "'n_classes' entry in what your data loader returns" in err and "--n-classes" not in err


def test_every_fit_shipped_in_pretrials_is_the_one_the_code_makes_and_design_accepts(tmp_path, monkeypatch):
    """Was: the shipped pretrials/cnn_fmnist_fit.json refused by design --fit."""
    monkeypatch.chdir(ROOT)
    shipped = sorted(PRETRIALS.glob("*_fit.json"))
    assert shipped
    for path in shipped:
        data = json.loads(path.read_text())
        again = paretofl.fit(data["results"], bootstrap=data["bootstrap"])
        assert math.isclose(again.kappa, data["kappa"], rel_tol=1e-9), path
        assert np.allclose(again.kappa_ci, data["kappa_ci"]), path
        assert again.problems == data["problems"] and data["kappa_ci_method"] == again.kappa_ci_method, path
        paretofl.design(n_clients=100, epsilon=2.0, max_rounds=100, fit=str(path))


@pytest.mark.slow
def test_the_grid_change_a_refused_fit_names_makes_a_fit_design_accepts(tmp_path, monkeypatch):
    """The user's pre-trial of the issue: a residual CNN on their digits, 12
    clients, 4 sigma x 4 T, 2 seeds: its fit is refused (two front points
    inside the grid, both at one T); the grid the refusal names (the
    midpoints added, 3 seeds) gives a fit that design accepts."""
    monkeypatch.chdir(ROOT / "examples")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    base = dict(dataset="your_model:digits", model="your_model:cnn", clients=12, q=[0.5], clip=1.0, lr=0.5)
    coarse = paretofl.api.spec(None, **base, sigmas=[0.05, 0.1, 0.2, 0.4], rounds=[4, 8, 16, 32], seeds=2)
    paretofl.api.pretrial(coarse, tmp_path / "coarse.sqlite", progress=False)
    f = paretofl.fit(tmp_path / "coarse.sqlite", bootstrap=200)
    assert f.blocking and "no slope" in f.blocking[0]
    grid = re.search(r"add sigmas ([\d., ]+) and rounds ([\d, ]+) to the pre-trial", f.blocking[0])
    assert grid and "seeds up to at least 3" in f.blocking[0]
    sigmas = sorted(coarse.sigmas + [float(x) for x in grid.group(1).split(", ")])
    rounds = sorted(coarse.rounds + [int(x) for x in grid.group(2).split(", ")])
    fine = paretofl.api.spec(None, **base, sigmas=sigmas, rounds=rounds, seeds=3)
    paretofl.api.pretrial(fine, tmp_path / "fine.sqlite", progress=False)
    f = paretofl.fit(tmp_path / "fine.sqlite", bootstrap=200)
    assert not f.blocking, f.problems
    f.save(tmp_path / "fine_fit.json")
    paretofl.design(n_clients=100, epsilon=2.0, max_rounds=100, fit=str(tmp_path / "fine_fit.json"))
