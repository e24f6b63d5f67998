"""Property-based fuzzing of every command: a valid, cheap invocation with one
or two of its arguments replaced by something wrong — out of range, NaN or
inf, the wrong type, a missing or foreign file, an unknown name, an unknown
flag.  Whatever hypothesis draws, the command must answer with exactly one
line on stderr, exit code 2, and leave the folder it ran in as it was (no
store, fit, figure or history written)."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paretofl.cli import main

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "pretrials" / "lr_fmnist.sqlite"
#: a small design of the digits, saved into each fuzz folder (train --design, export)
import paretofl  # noqa: E402

DESIGN = paretofl.design(8, 4.0, delta=1e-3, max_rounds=3, q=1.0, framework="flower")
DESIGN.model, DESIGN.dataset, DESIGN.clip = "lr", "digits", 0.5

NOT_A_NUMBER = ["nan", "inf", "-inf", "abc", "", "1e999", "0x10", "1,5", "None"]
#: paths whose words are also parameters' (fit, clip, by, tune, kappa): said as they are, never as flags
MISSING = ["missing/none.sqlite", "nofolder/x.json", "/no/such/file", "nothere/fit.json", "kappa/clip.sqlite",
           "tune/by.json", "fit.json", "clip.csv"]


def tag(kind, *values):
    """Bad values of one class of bad input."""
    return [(v, kind) for v in values]


def nums(*bad):
    """Numbers out of range, and things that are no number at all."""
    return tag("number out of range", *bad) + tag("not a number", *NOT_A_NUMBER)


def files(*foreign):
    return tag("missing file", *MISSING) + tag("foreign or damaged file", *foreign)


def outs(*bad):
    return tag("bad output path", *bad)


def names(*bad):
    return tag("unknown name", *bad)


#: delta at or above 1/N (the clients protected, or the samples for DP-SGD)
def deltas(*high):
    return tag("delta not below 1/N", *high)


# command -> (valid arguments, {flag: (value, class) that must be refused}); files are
# relative to the folder the command runs in (a fresh copy of `store.sqlite`,
# `fit.json`, `spec.toml`, `design.json`, a non-store `junk.sqlite` and more is put there)
COMMANDS = {
    "account": (["--sigma", "1", "--q", "0.1", "--steps", "10"], {
        "--sigma": nums("0", "-1", "1e-9"), "--q": nums("0", "1.5", "-0.1"), "--steps": nums("-1", "2.5", "1e20"),
        "--delta": nums("0", "1", "-1e-5", "2"), "--accountant": names("magic", "RDP", ""),
        "--conversion": names("tight", ""), "--sampling": names("hidden", "")}),
    "pareto": (["--clients", "10", "--q", "0.5", "--kappa", "0.1", "--sigma-min", "0.5", "--sigma-max", "3",
                "--max-rounds", "20", "--plot", "front.png"], {
        "--clients": nums("0", "-3", "2.5", "10.5"), "--q": nums("0", "1.01"), "--kappa": nums("0", "-1"),
        "--sigma-min": nums("0", "-1", "5"), "--sigma-max": nums("0", "0.1"), "--max-rounds": nums("0", "-5"),
        "--points": nums("0", "-1", "1e12"), "--delta": nums("0", "1"),
        "--plot": outs("front.txt", "nofolder/front.png", "")}),
    "design": (["--clients", "10", "--budget", "2", "--max-rounds", "20", "--q", "0.5", "--kappa", "0.1",
                "--plot", "design.png", "--out", "new_design.json"], {
        "--clients": nums("0", "-1", "10000000", "1e12", "10.5"), "--budget": nums("0", "-2", "1e-7"),
        "--delta": nums("0", "1") + deltas("0.1", "0.5"), "--max-rounds": nums("0", "-1"), "--q": nums("0", "2"),
        "--q-min": tag("conflicting options", "0.2"), "--q-max": tag("conflicting options", "0.9"),
        "--time-budget": nums("0", "-1"), "--round-time": nums("0", "-1"),
        "--sigma-min": nums("0", "-1"), "--sigma-max": nums("0", "1e9"), "--kappa": nums("0", "-0.1"),
        "--fit": files("junk.sqlite", "spec.toml", "figs") + tag("a fit that says not to design with it",
                                                                "blocking_fit.json", "chance_fit.json"),
        "--mechanism": names("central", "aggregate", ""),
        "--from-store": files("junk.sqlite") + tag("conflicting options", "store.sqlite"),   # beside --kappa
        "--utility-model": names("curve", "") + tag("conflicting options", "bend"),          # without --from-store
        "--framework": names("tff", ""), "--export": names("tff") + tag("missing option", "opacus", "flower"),
        "--clip": nums("0", "-1"),
        "--budgets": files("junk.sqlite", "fit.json", "store.sqlite", "figs"),   # beside --budget, or not CSV
        "--tune": files("junk.sqlite", "fit.json", "figs"),
        "--clips": nums("0", "-1"), "--lrs": nums("0", "-0.1"),   # non-positive, or without --tune
        "--chunk": tag("conflicting options", "4"),                 # without --tune
        "--clip-quantile": nums("0", "1", "1.5"), "--count-noise": nums("0", "-1"),
        "--bands": nums("0", "-1", "2.5") + tag("an option the run would ignore", "4"),   # client-aggregate's
        "--plot": outs("design.gif", "nofolder/d.png", "figs"), "--out": outs("d.txt", "nofolder/d.json", "figs")}),
    "export": (["design.json", "--to", "flower", "--clip", "0.5"], {
        "--to": names("tff", "") + tag("a framework that cannot run the design", "jax-privacy"),
        "--clip": nums("0", "-1"),
        "--client-size": tag("missing option", "600"), "--batch-size": nums("0")}),
    "train": (["--dataset", "digits", "--model", "lr", "--clients", "4", "--rounds", "2", "--batch-rate", "0.05",
               "--history", "hist.csv"], {
        "--sigma": nums("-1", "0"), "--clip": nums("0", "-1"), "--lr": nums("0", "-0.5"),
        "--batch-rate": nums("0", "1.5", "-0.1"), "--client-rate": nums("0", "2", "0.01"),
        "--clients": nums("0", "-3", "5000", "1e12", "10.5"), "--rounds": nums("0", "-1"),
        "--epsilon": nums("0", "-1", "1e-9"), "--delta": nums("0", "1", "-1") + deltas("0.9", "0.25", "0.001"),
        "--replicas": nums("0", "-2") + tag("too large to fit", "3000000", "20000000"),
        "--eval-every": nums("0", "-1"), "--local-steps": nums("0", "-1"), "--dataset": names("imagenet", ""),
        "--model": names("resnet", ""), "--algorithm": names("fedprox", ""),
        "--budgets": files("fit.json", "figs"), "--partition": names("zipf", "shards:0", "shards:x", "shards:", "shards:100000", "dirichlet:0",
                                                                  "dirichlet:x", "dirichlet:", "dirichlet:-1", "iid:2"),
        # a Dirichlet concentration the run would drop: beside the valid call's iid clients (issue 46's partition
        # vocabulary: dirichlet:ALPHA is the one name with --beta)
        "--beta": nums("0", "-1") + tag("an option the run would ignore", "0.3", "5", "0.5"),   # 0.5: the default
        "--device": names("tpu"),
        "--data-dir": files("hist.csv"), "--history": outs("hist.txt", "nofolder/h.csv", "", "figs"),
        "--design": files("fit.json", "junk.sqlite", "figs"),
        # options of another algorithm than the one run (dpfedavg here): refused, not ignored
        "--rounds-server": tag("an option the run would ignore", "0", "5"),
        "--gamma": tag("an option the run would ignore", "-1", "10"),
        "--prox-mu": tag("an option the run would ignore", "0.1"),
        "--calibration": tag("an option the run would ignore", "paper") + names("magic"),
        "--noise-decay": tag("an option the run would ignore", "0.5"),
        # adaptive clipping: a quantile outside (0, 1), a count noise that is not positive, or either for a
        # mechanism without a released count (the valid call's sample)
        "--clip-quantile": nums("0", "1", "1.5", "-0.5") + tag("an option the run would ignore", "0.5"),
        "--count-noise": nums("0", "-1") + tag("an option the run would ignore", "2"),
        "--clip-lr": nums("0", "-1"),
        "--bands": nums("0", "-1", "2.5", "100000") + tag("an option the run would ignore", "4"),
        # a mechanism that would ignore the valid call's --batch-rate: refused, not ignored
        "--mechanism": names("client", "") + tag("an option the run would ignore", "client-aggregate",
                                                  "client-local", "flower")}),
    "pretrial": (["--dataset", "digits", "--model", "lr", "--clients", "4", "--sigmas", "1", "--rounds", "2",
                  "--seeds", "1", "--q", "1", "--out", "new.sqlite"], {
        "--clients": nums("0", "-1", "5000"), "--sigmas": nums("-1"), "--rounds": nums("0", "-2"),
        "--seeds": nums("0", "-1"), "--q": nums("0", "1.5", "0.1"), "--clip": nums("0", "-1"), "--lr": nums("0"),
        "--public-fraction": nums("0", "1.5", "-0.5", "0.0001"), "--batch-size": nums("0"),
        "--delta": nums("0", "1") + deltas("0.25", "0.4"),
        "--local-epochs": nums("0"), "--chunk": nums("0", "-1"), "--beta": nums("0", "-1"),
        "--dataset": names("imagenet") + tag("labels that skip a class", "onebased:data", "gapped:data"),
        "--model": names("resnet"), "--executor": names("dask"), "--device": names("tpu"),
        "--partition": names("zipf", "shards:0", "shards:-2", "shards:1.5", "dirichlet:0", "dirichlet:nan",
                             "dirichlet:1e400", "dirichlet-capped:x"),
        "--out": outs("new.txt", "nofolder/new.sqlite", "", "figs") + files("junk.sqlite")}),
    "fit": (["store.sqlite", "--out", "new_fit.json", "--bootstrap", "10"], {
        "--bootstrap": nums("-1", "1e12"), "--reference": names("median", ""), "--epsilon": names("approx"),
        "--out": outs("fit.txt", "nofolder/f.json", "", "figs")}),
    "plot": (["store.sqlite", "--fit", "fit.json", "--out-dir", "figs"], {
        "--fit": files("junk.sqlite", "other_fit.json", "figs"), "--out-dir": outs("store.sqlite"),
        "--format": names("gif", ""), "--max-rounds": nums("0", "-5"), "--epsilon": names("approx")}),
    "validate": (["spec.toml", "--out-dir", "vout", "--budget", "5"], {
        "--full-fraction": nums("0", "1.5", "-1"), "--budget": nums("0", "-1"), "--out-dir": outs("nofolder"),
        "--clients": nums("0"), "--sigmas": nums("-1"), "--rounds": nums("0")}),
    "audit": (["--mechanism", "client-local", "--runs", "400"], {
        "--runs": nums("0", "-5", "199", "100000000000", "2.5"),
        "--mechanism": names("laplace", "", "ALL", "sample-dpsgd"),
        "--break": names("half", "") + tag("a break the setting does not have", "private-divisor"),
        "--seed": nums("1.5")}),
}
# positional inputs that must be refused: missing, foreign, truncated
POSITIONAL = {"fit": files("junk.sqlite", "truncated.sqlite", "spec.toml"),
              "plot": files("junk.sqlite", "truncated.sqlite"),
              "validate": files("junk.sqlite") + tag("a spec that does not say what it trains", "empty.toml",
                                                     "seeds.toml"),
              "export": files("fit.json", "junk.sqlite", "spec.toml")}
#: whole invocations, each a member of a class the flags above cannot reach
_DESIGNED = ["train", "--design", "design.json"]
WHOLE = [
    ("a spec that does not say what it trains", ["pretrial", "seeds.toml", "--out", "new.sqlite"]),
    ("a spec that does not say what it trains", ["pretrial", "empty.toml", "--out", "new.sqlite"]),
    ("a spec that does not say what it trains", ["pretrial", "seeds.toml", "--dataset", "digits", "--out", "new.sqlite"]),
    ("labels that skip a class", ["train", "--dataset", "onebased:data", "--model", "lr", "--clients", "4",
                                  "--rounds", "2"]),
    ("labels that skip a class", ["train", "--dataset", "gapped:data", "--model", "lr", "--clients", "4",
                                  "--rounds", "2"]),
    ("a parameter the design fixes", _DESIGNED + ["--delta", "1e-6"]),
    ("a parameter the design fixes", _DESIGNED + ["--rounds", "5"]),
    ("a parameter the design fixes", _DESIGNED + ["--epsilon", "3"]),
    ("a parameter the design fixes", _DESIGNED + ["--sigma", "1"]),
    ("a parameter the design fixes", _DESIGNED + ["--client-rate", "0.5"]),
    ("a parameter the design fixes", _DESIGNED + ["--mechanism", "client-local"]),
    ("a parameter the design fixes", _DESIGNED + ["--clients", "7"]),
    ("a parameter the design fixes", _DESIGNED + ["--budgets", "budgets.csv"]),
    ("number out of range", ["design", "--mechanism", "nbafl", "--clients", "100", "--budget", "5", "--clip", "0",
                             "--client-size", "512"]),
    ("number out of range", ["design", "--mechanism", "nbafl", "--clients", "100", "--budget", "5", "--clip", "10",
                             "--client-size", "-5"]),
    ("number out of range", ["design", "--mechanism", "nbafl", "--clients", "100", "--budget", "0", "--clip", "10",
                             "--client-size", "512"]),
    ("delta not below 1/N", ["design", "--mechanism", "nbafl", "--clients", "100", "--budget", "5", "--clip", "10",
                             "--client-size", "512", "--delta", "0.02"]),
    # delta against the units each mechanism protects: few clients (client-level), a small data set (sample-level);
    # below 1/N but above 0.01 (everyone's data published with probability delta meets it)
    ("delta above 0.01", ["train", "--dataset", "digits", "--model", "lr", "--clients", "1", "--rounds", "2",
                          "--mechanism", "client-aggregate", "--delta", "0.5"]),
    ("delta above 0.01", ["train", "--dataset", "digits", "--model", "lr", "--clients", "2", "--rounds", "2",
                          "--mechanism", "client-local", "--delta", "0.3"]),
    ("delta above 0.01", ["design", "--clients", "1", "--budget", "2", "--max-rounds", "5", "--q", "1", "--kappa",
                          "0.1", "--delta", "0.05"]),
    ("delta above 0.01", ["train", "--dataset", "small:data", "--model", "lr", "--clients", "2", "--rounds", "2",
                          "--mechanism", "sample", "--batch-rate", "0.2", "--delta", "0.012"]),
    ("delta not below 1/N", ["train", "--dataset", "digits", "--model", "lr", "--clients", "2", "--rounds", "2",
                             "--mechanism", "sample", "--batch-rate", "0.2", "--delta", "0.0007"]),
    ("delta not below 1/N", ["train", "--dataset", "digits", "--model", "lr", "--clients", "200", "--rounds",
                             "2", "--mechanism", "client-local", "--delta", "0.006"]),
    ("number out of range", ["design", "--clients", "100", "--budgets", "budgets.csv", "--max-rounds", "20",
                             "--q-max", "0"]),
    ("number out of range", ["design", "--clients", "100", "--budgets", "budgets.csv", "--max-rounds", "20",
                             "--q-max", "1.5"]),
    # banded matrix factorization: a share no band count gives, options auto does not take, budgets it does
    # not design, frameworks that add independent noise
    ("a share no band count gives", ["design", "--clients", "100", "--budget", "2", "--max-rounds", "20",
                                     "--mechanism", "bandmf", "--q", "0.3"]),
    ("a share no band count gives", ["design", "--clients", "100", "--budget", "2", "--max-rounds", "20",
                                     "--mechanism", "bandmf", "--bands", "3", "--q-max", "0.2"]),
    ("a share no band count gives", ["train", "--dataset", "digits", "--model", "lr", "--clients", "8",
                                     "--rounds", "2", "--mechanism", "bandmf", "--bands", "4"]),
    ("conflicting options", ["design", "--clients", "100", "--budget", "2", "--max-rounds", "20", "--mechanism",
                             "auto", "--bands", "4"]),
    ("conflicting options", ["design", "--clients", "100", "--budgets", "budgets.csv", "--max-rounds", "20",
                             "--mechanism", "bandmf"]),
    ("a framework that cannot run the design", ["design", "--clients", "100", "--budget", "2", "--max-rounds",
                                                "20", "--mechanism", "bandmf", "--export", "flower"]),
    ("a framework that cannot run the design", ["design", "--clients", "100", "--budget", "2", "--max-rounds",
                                                "20", "--export", "jax-privacy"]),
    # a private pre-trial: over its own epsilon, on the public share, without an epsilon, an epsilon without it;
    # its fit used for other clients than it ran on
    ("a private pre-trial that does not add up", ["pretrial", "private_over.toml", "--out", "new.sqlite"]),
    ("a private pre-trial that does not add up", ["pretrial", "private_public.toml", "--out", "new.sqlite"]),
    ("a private pre-trial that does not add up", ["pretrial", "private_no_eps.toml", "--out", "new.sqlite"]),
    ("a private pre-trial that does not add up", ["pretrial", "eps_not_private.toml", "--out", "new.sqlite"]),
    ("a private pre-trial that does not add up", ["design", "--fit", "private_fit.json", "--clients", "100",
                                                  "--budget", "5", "--max-rounds", "20"]),
]


def _workdir():
    d = Path(tempfile.mkdtemp(prefix="paretofl-fuzz-"))
    shutil.copy(STORE, d / "store.sqlite")
    shutil.copy(ROOT / "tests" / "data" / "lr_fmnist_fit_test_scored.json", d / "fit.json")   # STORE's own fit
    fit = json.loads((ROOT / "paretofl" / "data" / "lr_fmnist_fit.json").read_text())
    (d / "other_fit.json").write_text(json.dumps({**fit, "spec": {**fit["spec"], "model": "lenet"}}))   # another
    (d / "blocking_fit.json").write_text(json.dumps({**fit, "problems": [
        "the front has no slope in the sigma-T plane (slope 0, theory -2): kappa does not describe it"]}))
    (d / "chance_fit.json").write_text(json.dumps({**fit, "blocking": [
        "even non-private training stayed at chance: the pre-trial learned nothing"]}))
    (d / "spec.toml").write_text('dataset = "digits"\nmodel = "lr"\nclients = 4\nsigmas = [1.0]\n'
                                 'rounds = [2]\nseeds = 1\npublic_fraction = 0.5\n')
    (d / "seeds.toml").write_text("seeds = 2\n")
    private = 'dataset = "digits"\nmodel = "lr"\nclients = 4\nsigmas = [1.0]\nrounds = [2]\nseeds = 1\n'
    (d / "private_over.toml").write_text(private + 'subset = "all"\nprivate = true\nepsilon = 0.01\n')
    (d / "private_public.toml").write_text(private + 'private = true\nepsilon = 50\n')
    (d / "private_no_eps.toml").write_text(private + 'subset = "all"\nprivate = true\n')
    (d / "eps_not_private.toml").write_text(private + 'epsilon = 5\n')
    (d / "private_fit.json").write_text(json.dumps({**fit, "private": True, "clients": 7, "private_charges": [
        {"sampling": "poisson", "rate": 1.0, "noise_multiplier": 5.0, "steps": 4}]}))
    (d / "junk.sqlite").write_text("this is not a results store\n")
    (d / "empty.toml").write_text("")
    (d / "truncated.sqlite").write_bytes(STORE.read_bytes()[:5000])
    (d / "budgets.csv").write_text("share,epsilon\n0.5,1\n0.5,4\n")
    for name, labels in (("onebased", "1 + (y % 2)"), ("gapped", "2 * (y % 2)"),    # labels skipping a class
                         ("small", "y % 2")):                                       # 60 samples: delta < 1/60
        (d / f"{name}.py").write_text(
            "import numpy as np\n\ndef data():\n    g = np.random.default_rng(0)\n    x = g.normal(size=(80, 4))\n"
            f"    y = np.arange(80)\n    y = {labels}\n"
            "    return dict(x_train=x[:60], y_train=y[:60], x_test=x[60:], y_test=y[60:])\n")
    DESIGN.save(d / "design.json")
    (d / "figs").mkdir()
    (d / "vout").mkdir()
    return d


def _flags_of(cmd: str) -> set:
    """Every flag of a command, from its parser."""
    import argparse

    from paretofl.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[cmd]
    return {f for a in sub._actions for f in a.option_strings}


def _snapshot(d):
    return {str(p.relative_to(d)): p.stat().st_size for p in d.rglob("*") if "__pycache__" not in p.parts}


@st.composite
def bad_invocations(draw):
    """(class, invocation): a valid invocation with one or two arguments
    replaced by members of classes of bad input, or a whole bad invocation."""
    kind = draw(st.sampled_from(["flag", "flag", "flag", "positional", "unknown", "abbreviated", "whole"]))
    if kind == "whole":
        return draw(st.sampled_from(WHOLE))
    cmd = draw(st.sampled_from(sorted(COMMANDS if kind != "positional" else POSITIONAL)))
    base, flags = COMMANDS[cmd]
    args = list(base)
    if kind == "positional":
        value, what = draw(st.sampled_from(POSITIONAL[cmd]))
        args[0] = value
        return what, [cmd] + args
    if kind == "unknown":
        return "unknown flag", [cmd] + args + [draw(st.sampled_from(["--nosuch", "--sigma-max-typo", "-x"])), "1"]
    if kind == "abbreviated":
        # a real flag cut short (train --budget for --budgets): never read as the flag it begins
        real = _flags_of(cmd)
        f = draw(st.sampled_from(sorted(f for f in real if len(f) > 4)))
        cut = f[:draw(st.integers(3, len(f) - 1))]
        if cut in real:
            cut = f + "x"
        return "abbreviated flag", [cmd] + args + [cut, "1"]
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), min_size=1, max_size=2, unique=True))
    whats = []
    for f in chosen:
        v, what = draw(st.sampled_from(flags[f]))
        whats.append(what)
        if f in args:
            args[args.index(f) + 1] = v
        else:
            args += [f, v]
    return " + ".join(sorted(set(whats))), [cmd] + args


@settings(max_examples=int(os.environ.get("PARETOFL_FUZZ_CASES", 1000)), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=bad_invocations())
def test_every_command_refuses_bad_input_in_one_line_and_writes_nothing(case, capsys, monkeypatch):
    from conftest import FUZZ_CLASSES, FUZZ_TRIED

    what, args = case

    d = _workdir()
    before = _snapshot(d)
    monkeypatch.chdir(d)
    monkeypatch.syspath_prepend(str(d))       # the user's loaders are found from the folder they run in
    try:
        try:
            rc = main(args)
        except SystemExit as exc:  # argparse's own usage errors
            rc = exc.code
        err = capsys.readouterr().err
        assert rc == 2, (args, rc, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
        if what == "missing file" and "exist" in err:   # the path it names is the one given, word for word
            assert any(a in err for a in args if a in MISSING), (args, err)
        assert _snapshot(d) == before, (args, set(_snapshot(d)) - set(before))
        FUZZ_TRIED[args[0]] = FUZZ_TRIED.get(args[0], 0) + 1
        for w in what.split(" + "):
            FUZZ_CLASSES[w] = FUZZ_CLASSES.get(w, 0) + 1
    finally:
        monkeypatch.undo()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_the_fuzzed_base_invocations_are_valid(cmd, tmp_path, monkeypatch, capsys):
    """The fuzz starts from invocations that work, so a refusal is caused by
    the corruption (validate's base is checked by its own, slower test)."""
    if cmd == "validate":
        pytest.skip("a full validate run is exercised in tests/pretrial")
    d = _workdir()
    monkeypatch.chdir(d)
    try:
        assert main([cmd] + COMMANDS[cmd][0] + ["--json"]) in (0, 1)
    finally:
        monkeypatch.undo()
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------- issue 45, item 6: every refusal names its way out
_SPEC_BASE = 'dataset = "digits"\nmodel = "lr"\nclients = 4\nsigmas = [1.0]\nrounds = [2]\nseeds = 1\n'
#: a spec field out of range, and its flag
_SPEC_BAD = [("batch_size", "0", "--batch-size"), ("clients", "0", "--clients"), ("lr", "0", "--lr"),
             ("local_epochs", "0", "--local-epochs"), ("public_fraction", "1.5", "--public-fraction"),
             ("clip", "-1", "--clip"), ("seeds", "0", "--seeds")]
_FRONT = "the front has no slope in the sigma-T plane (slope 0, theory -2): kappa does not describe it"


@st.composite
def refusals(draw):
    kind = draw(st.sampled_from(["front", "front-missing", "field", "flag", "classes", "pipe"]))
    if kind in ("front", "front-missing"):
        return kind, draw(st.sampled_from(["10", "100"])), draw(st.sampled_from(["1", "2", "8"])), \
            draw(st.sampled_from(["5", "50"]))
    if kind in ("field", "flag"):
        return kind, draw(st.sampled_from(_SPEC_BAD)), draw(st.sampled_from(["pretrial", "validate"]))
    if kind == "classes":
        return kind, draw(st.sampled_from(["np.ones(80, dtype=int)", "1 + (np.arange(80) % 2)",
                                           "2 * (np.arange(80) % 2)"])), draw(st.sampled_from(["train", "pretrial"]))
    return kind, draw(st.sampled_from([["design", "--clients", "100", "--budget", "2", "--max-rounds", "50"],
                                       ["account", "--sigma", "1", "--q", "0.1", "--steps", "10"],
                                       ["pareto", "--clients", "10", "--q", "0.5", "--kappa", "0.1", "--sigma-min", "0.5",
                                        "--sigma-max", "3", "--max-rounds", "20"]])), None


@settings(max_examples=int(os.environ.get("PARETOFL_FUZZ_WAYS", 40)), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=refusals())
def test_every_refusal_names_a_way_out_that_works(case, capsys, monkeypatch):
    """A fit refused for its front (its store here, or not), a spec field out
    of range in the file or as a flag, labels missing a class, a reader that
    closes the pipe: the refusal names the way out in the user's terms (the
    file's field or the flag, the loader's entry), and where it names a
    command, that command is run and works."""
    import re
    import sys

    from conftest import FUZZ_WAYS_OUT

    kind, a, b, *rest = case
    d = _workdir()
    monkeypatch.chdir(d)
    monkeypatch.syspath_prepend(str(d))
    try:
        if kind in ("front", "front-missing"):
            fit = json.loads((d / "fit.json").read_text())
            named = "store.sqlite" if kind == "front" else "elsewhere/gone.sqlite"
            (d / "front_fit.json").write_text(json.dumps({**fit, "blocking": [_FRONT], "results": named}))
            args = ["design", "--clients", a, "--budget", b, "--max-rounds", rest[0]]
            rc = main(args + ["--fit", "front_fit.json"])
            err = capsys.readouterr().err
            assert rc == 2 and len(err.strip().splitlines()) == 1 and "--kappa does not" not in err, err
            if kind == "front":
                way = re.search(r"(--from-store=\S+) in place of --fit", err)
                assert way, err
                rc = main(args + [way.group(1)])
                capsys.readouterr()
                assert rc in (0, 2)       # 2 only where the budget itself is infeasible, as with any kappa
                if rc == 2:
                    assert main(args + ["--kappa", "1"]) == 2
                    capsys.readouterr()
            else:
                assert "is not here" in err and "--from-store=STORE" in err, err
        elif kind in ("field", "flag"):
            field, value, flag = a
            if kind == "field":
                (d / "bad.toml").write_text(_SPEC_BASE.replace(f"{field} = ", "# ") + f"{field} = {value}\n")
                extra = []
            else:
                (d / "bad.toml").write_text(_SPEC_BASE)
                extra = [flag, value]
            args = [b, "bad.toml"] + extra + (["--out", "new.sqlite"] if b == "pretrial" else ["--out-dir", "vout"])
            rc = main(args)
            err = capsys.readouterr().err
            assert rc == 2 and len(err.strip().splitlines()) == 1, err
            said = flag if kind == "flag" else field
            assert re.search(rf"(?<![-\w]){re.escape(said)} (must|values)", err), err
            assert kind == "flag" or flag not in err, err
        elif kind == "classes":
            (d / "lbl.py").write_text("import numpy as np\n\ndef data():\n    g = np.random.default_rng(0)\n"
                                      f"    x = g.normal(size=(80, 4))\n    y = {a}\n"
                                      "    return dict(x_train=x[:60], y_train=y[:60], x_test=x[60:], y_test=y[60:])\n")
            args = ["--dataset", "lbl:data", "--model", "lr", "--clients", "4"]
            args = (["train", *args, "--rounds", "1"] if b == "train" else
                    ["pretrial", *args, "--sigmas", "1", "--rounds", "1", "--seeds", "1", "--q", "1",
                     "--out", "new.sqlite"])
            rc = main(args)
            err = capsys.readouterr().err
            assert rc == 2 and ("'n_classes' entry" in err or "one class only" in err), err
            assert "--n-classes" not in err
        else:
            class Closed:
                def write(self, text):
                    raise BrokenPipeError(32, "Broken pipe")

                def flush(self):
                    raise BrokenPipeError(32, "Broken pipe")

            monkeypatch.setattr(sys, "stdout", Closed())
            rc = main(a)
            monkeypatch.setattr(sys, "stdout", sys.__stdout__)
            assert rc == 1 and capsys.readouterr().err == ""
        label = {"front": "a fit refused for its front, its store here",
                 "front-missing": "a fit refused for its front, its store not here",
                 "field": "a spec file's field out of range", "flag": "a flag out of range beside a spec file",
                 "classes": "labels missing a class", "pipe": "a reader that closes the pipe"}[kind]
        FUZZ_WAYS_OUT[label] = FUZZ_WAYS_OUT.get(label, 0) + 1
    finally:
        monkeypatch.undo()
        shutil.rmtree(d, ignore_errors=True)
