"""A run that did not do what was asked is not a success (issue 45, item 3).

The contract (README, Commands; docs/api.md): ``TrainResult.complete`` is
False and ``TrainResult.problems`` says why, one sentence each, when

* no round was trained (the first round passes the budget: a design whose
  σ, q or clients were edited, a group whose q was raised);
* fewer rounds were trained than the design's T or an explicit ``rounds``
  (a run given no rounds trains until its budget is spent, at most 100:
  stopping there is what it was asked);
* the final test loss is not finite (the training diverged).

``paretofl train`` prints each as a ``warning:`` line on stderr, exits 3,
and ``--json`` carries ``complete`` and ``problems``.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("torch")

import paretofl  # noqa: E402
from paretofl.cli import EXIT_INCOMPLETE, main  # noqa: E402

_LR = dict(dataset="digits", model="lr")


def _cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_run_that_did_what_was_asked_is_complete():
    r = paretofl.train(**_LR, clients=10, rounds=3, epsilon=50, mechanism="client-aggregate", sigma=1.0)
    assert r.complete and r.problems == [] and r.rounds == 3


def test_explicit_rounds_cut_short_by_the_budget(capsys):
    r = paretofl.train(**_LR, clients=10, rounds=50, mechanism="client-aggregate", sigma=1.0)
    assert r.rounds < 50 and not r.complete
    assert len(r.problems) == 1 and f"trained {r.rounds} of the 50 rounds asked" in r.problems[0]
    rc, out, err = _cli(capsys, "train", "--dataset", "digits", "--model", "lr", "--clients", "10", "--rounds", "50",
                        "--mechanism", "client-aggregate", "--sigma", "1", "--json")
    d = json.loads(out)
    assert rc == EXIT_INCOMPLETE == 3 and d["complete"] is False and "rounds asked" in d["problems"][0]
    assert err.startswith("paretofl train: warning: trained ") and err.count("\n") == 1


def test_no_rounds_given_stopping_at_the_budget_is_what_was_asked(capsys):
    r = paretofl.train(**_LR, clients=10, mechanism="client-aggregate", sigma=1.0)
    assert r.rounds < 100 and r.complete
    rc, out, err = _cli(capsys, "train", "--dataset", "digits", "--model", "lr", "--clients", "10",
                        "--mechanism", "client-aggregate", "--sigma", "1")
    assert rc == 0 and "warning" not in err


def test_a_design_edited_so_the_budget_allows_fewer_rounds_is_refused_before_it_trains():
    """The issue's symptom (an edited design trained 1 round to 10 % and
    exited 0) cannot happen now: a design whose recorded figures are not
    what its parameters give is refused before training (issue 44)."""
    d = paretofl.design(100, 2, max_rounds=30)
    edited = dataclasses.replace(d, sigma=d.sigma * 0.5)
    with pytest.raises(ValueError, match="does not add up"):
        paretofl.train(design=edited, **_LR)


def test_a_group_whose_q_was_raised_is_refused_before_it_trains(tmp_path, capsys):
    from paretofl.budgets import Budgets

    d = paretofl.design(100, None, budgets=Budgets.shares([0.5, 0.5], [1, 8], 100), max_rounds=20)
    groups = copy.deepcopy(d.groups)
    groups[0]["q"] = min(1.0, groups[0]["q"] * 20)
    edited = dataclasses.replace(d, groups=groups)
    with pytest.raises(ValueError, match="does not add up"):
        paretofl.train(design=edited, **_LR)
    path = tmp_path / "edited.json"
    with pytest.raises(ValueError, match="not saved: .*does not add up"):     # save writes only what load reads
        edited.save(path)
    assert not path.exists()
    d.save(path)                                         # the file edited instead
    data = json.loads(path.read_text())
    data["groups"] = groups
    path.write_text(json.dumps(data))
    rc, out, err = _cli(capsys, "train", "--design", str(path), "--dataset", "digits", "--model", "lr")
    assert rc == 2 and "does not add up" in err and len(err.strip().splitlines()) == 1


def test_features_times_1e30_give_a_diverged_run():
    from sklearn.datasets import load_digits

    raw = load_digits()
    x, y = raw.data.astype(np.float32) * 1e30, raw.target
    r = paretofl.train(dataset={"x_train": x[:1500], "y_train": y[:1500], "x_test": x[1500:], "y_test": y[1500:]},
                       model="lr", clients=10, rounds=3, epsilon=50, mechanism="client-aggregate", sigma=1.0)
    assert not r.complete and not np.isfinite(r.test_loss)
    assert any("diverged" in p for p in r.problems)


def test_the_problems_of_several_replicas_say_how_many():
    from paretofl.api import train_problems

    fin = {"rounds": np.array([5, 2, 0]), "epsilon": np.array([1.0, 2.0, 0.0]),
           "test_loss": np.array([0.5, np.nan, 2.3])}
    p = train_problems(fin, 5, 2.0)
    assert len(p) == 3
    assert "(1 of 3 replicas)" in p[0] and "trained 2 of the 5" in p[1] and "nan (1 of 3 replicas)" in p[2]
    assert train_problems({"rounds": [5], "epsilon": [1.0], "test_loss": [0.3]}, 5, 2.0) == []
    assert train_problems({"rounds": [3], "epsilon": [2.0], "test_loss": [0.3]}, None, 2.0) == []
