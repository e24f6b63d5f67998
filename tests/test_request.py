"""A design is asked by one object, ``paretofl.Request``, which holds every
default: the API's keywords and the command line's flags read them there."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import paretofl
from paretofl import api, cli


def test_a_request_and_its_keywords_give_the_same_design():
    kw = dict(n_clients=50, epsilon=2.0, max_rounds=40, q=0.2, kappa=0.1)
    by_keywords = paretofl.design(**kw)
    by_request = paretofl.design(paretofl.Request(**kw))
    assert by_request.to_dict() == by_keywords.to_dict()
    with pytest.raises(ValueError, match="not both"):
        paretofl.design(paretofl.Request(**kw), max_rounds=20)
    # a keyword beside a Request is refused even at its default value (it would be dropped: an attack)
    with pytest.raises(ValueError, match="delta beside a Request"):
        paretofl.design(paretofl.Request(**kw, delta=1e-3), delta=1e-5)
    assert paretofl.design.__name__ == "design"
    with pytest.raises(ValueError, match="a Request goes alone, first"):      # one face for design and train
        paretofl.design(50, paretofl.Request(**kw))
    with pytest.raises(ValueError, match="takes a Request"):
        paretofl.recommendation.design(kw)


def test_the_api_keywords_defaults_are_the_requests():
    fields = {f.name: f.default for f in dataclasses.fields(paretofl.Request)}
    params = inspect.signature(api.design).parameters
    assert set(params) == set(fields)
    for name, p in params.items():
        if fields[name] is not dataclasses.MISSING:
            assert p.default == fields[name], name


def test_the_command_line_holds_no_design_default_of_its_own():
    """A flag left out is the Request's default, not a number of the CLI's."""
    a = cli.build_parser().parse_args(["design", "--clients", "40", "--budget", "3", "--max-rounds", "30"])
    r = cli._request(a)
    assert r == paretofl.Request(n_clients=40, epsilon=3.0, max_rounds=30, mechanism=r.mechanism)
    assert r.mechanism == paretofl.Request.mechanism
    for dest in cli._REQUEST_FLAGS:
        if dest not in ("clients", "budget", "max_rounds", "mechanism"):
            assert getattr(a, dest) is None, dest       # left to the Request


def test_every_request_field_has_a_flag():
    asked = set(cli._REQUEST_FLAGS.values()) | {"mechanism_options"}
    assert asked == {f.name for f in dataclasses.fields(paretofl.Request)}


def test_every_design_flag_reaches_the_design_with_budgets_too(tmp_path, capsys):
    """The flags travel as one Request: ``--budgets`` with ``--local-epochs``
    designs at that K (the group path once passed a list of its own, which
    left the local epochs out: the file said the pre-trial's one epoch)."""
    import json

    b = tmp_path / "b.csv"
    b.write_text("share,epsilon\n0.6,1\n0.4,4\n")
    cli.main(["design", "--clients", "50", "--max-rounds", "60", "--budgets", str(b), "--local-epochs", "2",
              "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["local_epochs"] == 2
    kw = dict(n_clients=50, epsilon=None, max_rounds=60, budgets=str(b))
    assert out["kappa"] == pytest.approx(paretofl.design(**kw, local_epochs=2).kappa)
    assert out["kappa"] != pytest.approx(paretofl.design(**kw, local_epochs=1).kappa)


def test_a_design_given_first_to_train_runs_whole():
    """train(design, dataset=...) is train(design=design, dataset=...): the
    same run (seeded), and the design given twice is refused."""
    d = paretofl.design(n_clients=10, epsilon=8.0, max_rounds=3, kappa=2.0, q=1.0, local_epochs=1)
    kw = dict(dataset="digits", model="lr", eval_every=3)
    a = paretofl.train(d, **kw)
    b = paretofl.train(design=d, **kw)
    assert a.per_replica == b.per_replica and a.rounds == d.rounds and a.epsilon <= d.budget * (1 + 1e-9)
    with pytest.raises(ValueError, match="give the design once"):
        paretofl.train(d, design=d, **kw)


def test_a_training_and_its_keywords_run_the_same():
    """``train(Training(...))`` is the keyword run (seeded: the same figures
    to the last digit), a design inside it too; a keyword beside a Training
    is refused even at its default, where it would be dropped."""
    kw = dict(dataset="digits", model="lr", clients=10, rounds=3, epsilon=8.0, eval_every=3)
    a = paretofl.train(**kw, mechanism="client-aggregate", sigma=1.0, clip=0.5)
    b = paretofl.train(paretofl.Training(**kw, options=dict(mechanism="client-aggregate", sigma=1.0, clip=0.5)))
    assert a.to_dict() | {"seconds": 0} == b.to_dict() | {"seconds": 0}
    assert b.options["clip"] == 0.5 and b.rounds == 3
    d = paretofl.design(n_clients=10, epsilon=8.0, max_rounds=3, kappa=2.0, q=1.0, local_epochs=1)
    c = paretofl.train(paretofl.Training(design=d, dataset="digits", model="lr", eval_every=3))
    assert c.per_replica == paretofl.train(d, dataset="digits", model="lr", eval_every=3).per_replica
    for given in (dict(seed=0), dict(sigma=1.0)):
        with pytest.raises(ValueError, match="beside a Training"):
            paretofl.train(paretofl.Training(**kw), **given)
    with pytest.raises(ValueError, match="beside a Training"):
        paretofl.train(paretofl.Training(**kw), "dpfedavg")


def test_the_train_keywords_defaults_are_the_trainings():
    """One place for a training's defaults: the keywords' are the
    Training's, and the command line's flags read them (api.train_defaults)."""
    fields = {f.name: f.default for f in dataclasses.fields(paretofl.Training)}
    params = inspect.signature(paretofl.train).parameters
    assert set(params) == set(fields)          # options: the **options of the keywords
    for name, p in params.items():
        if fields[name] is not dataclasses.MISSING:
            assert p.default == fields[name], name
    d = api.train_defaults()
    assert d["algorithm"] == "dpfedavg" and d["replicas"] == paretofl.Training.replicas
    a = cli.build_parser().parse_args(["train"])
    assert a.strategy == paretofl.Training.strategy
