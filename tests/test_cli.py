"""The command line: JSON contracts, one-line errors with exit code 2, no torch
on the analytic commands, plots written."""

import json
import math
import re
import shlex
import subprocess
import sys

import pytest

from paretofl.cli import main
from paretofl.theory.privacy import compute_epsilon

PY = sys.executable


def run(*args):
    r = subprocess.run([PY, "-m", "paretofl.cli", *args], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def run_json(capsys, *args):
    assert main(list(args) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_account_json_contract(capsys):
    out = run_json(capsys, "account", "--sigma", "1.1", "--q", "0.015", "--steps", "1000", "--delta", "1e-5")
    assert {"epsilon", "delta", "accountant"} <= set(out)
    assert out["accountant"] == "rdp" and out["delta"] == 1e-5
    assert out["epsilon"] == pytest.approx(compute_epsilon(0.015, 1.1, 1000, 1e-5))


def test_account_says_the_relation_and_accounts_a_flower_design_at_half_z(capsys):
    """account --sampling fixed-size is replace-one: its sigma is relative
    to the replace-one sensitivity (2C on a sum of updates clipped to C),
    so a Flower design of noise multiplier z is accounted at z/2 — the
    design's ε, which dp-accounting's own replace-one fixed-size
    accountant (independent code) confirms at the same z/2."""
    import dp_accounting

    import paretofl

    d = paretofl.design(60, 3.0, max_rounds=40, q=0.5, framework="flower", delta=1e-5)
    z = d.noise_multiplier
    out = run_json(capsys, "account", "--sigma", repr(z / 2), "--q", repr(d.q), "--steps", str(d.rounds),
                   "--sampling", "fixed-size")
    assert out["relation"].startswith("replace-one") and "z/2" in out["relation"]
    assert out["epsilon"] == pytest.approx(d.epsilon, rel=1e-9)
    acc = dp_accounting.rdp.RdpAccountant(
        [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)),
        dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        60, d.clients_per_round, dp_accounting.GaussianDpEvent(z / 2)), d.rounds)
    # the improved conversion is tighter than dp-accounting's; both from the same replace-one curve
    assert out["epsilon"] <= acc.get_epsilon(1e-5) * (1 + 1e-6)
    assert out["epsilon"] >= 0.8 * acc.get_epsilon(1e-5)
    assert main(["account", "--sigma", "1", "--q", "0.5", "--steps", "3", "--sampling", "fixed-size"]) == 0
    assert "relation: replace-one" in capsys.readouterr().out
    assert "replace-one" in paretofl.account(1.0, 0.5, 3, sampling="fixed-size").relation
    assert paretofl.account(1.0, 0.5, 3).relation.startswith("add/remove")


def test_account_prv_is_tighter(capsys):
    rdp = run_json(capsys, "account", "--sigma", "1.1", "--q", "0.015", "--steps", "1000")["epsilon"]
    prv = run_json(capsys, "account", "--sigma", "1.1", "--q", "0.015", "--steps", "1000",
                   "--accountant", "prv")
    assert prv["accountant"] == "prv" and prv["epsilon"] <= rdp


def test_pareto_json_contract(capsys):
    out = run_json(capsys, "pareto", "--clients", "100", "--q", "0.1", "--kappa", "0.05", "--sigma-min", "0.5",
                   "--sigma-max", "5", "--max-rounds", "300")
    assert out["case"] == "II"
    assert out["T_a"] == pytest.approx(0.1 * 100 / 0.05 / 25) and out["T_b"] == pytest.approx(800)
    kinds = [p["kind"] for p in out["pieces"]]
    assert kinds == ["sigma_max", "relation", "rounds_max"]
    for p in out["pieces"]:
        assert all(len(pt) == 2 for pt in p["points"])
    rel = next(p for p in out["pieces"] if p["kind"] == "relation")["points"]
    assert all(math.isclose(0.05 * s * s * t, 10.0, rel_tol=1e-9) for s, t in rel)


def test_design_json_contract(capsys):
    out = run_json(capsys, "design", "--clients", "20", "--budget", "3", "--max-rounds", "100", "--q", "0.5",
                   "--kappa", "0.1")
    for key in ("q", "rounds", "sigma", "epsilon", "delta", "case", "utility_bound", "noise_multiplier",
                "sampling", "mechanism", "notes"):
        assert key in out
    assert out["epsilon"] <= 3.0 and out["case"] in ("I", "II", "III")
    z = out["sigma"] * math.sqrt(0.5 * 20)  # aggregate view by default
    assert out["noise_multiplier"] == pytest.approx(z) and out["mechanism"] == "client-aggregate"
    assert compute_epsilon(0.5, z, out["rounds"], out["delta"]) <= 3.0
    local = run_json(capsys, "design", "--clients", "20", "--budget", "3", "--max-rounds", "100", "--q", "0.5",
                     "--kappa", "0.1", "--mechanism", "client-local")
    assert local["mechanism"] == "client-local" and local["sampling"] == "attributed"
    assert compute_epsilon(0.5, local["sigma"], local["rounds"], 1e-5, "attributed") <= 3.0


def test_design_for_a_million_clients_is_small():
    """10⁶ clients: one σ, not a list of a million equal ones."""
    import subprocess as sp

    r = sp.run([PY, "-m", "paretofl.cli", "design", "--clients", "1000000", "--budget", "2", "--max-rounds", "100",
                "--q", "0.001", "--delta", "1e-12", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and len(r.stdout) < 20_000


def test_design_and_account_do_not_import_torch():
    """Neither torch nor flwr, for any mechanism designed (a Flower design
    is accounted by paretofl; Flower is imported only by export and train)."""
    code = ("import sys; from paretofl.cli import main; "
            "main(['design','--clients','20','--budget','3','--max-rounds','50','--q','0.5','--kappa','0.1']); "
            "[main(['design','--clients','20','--budget','3','--max-rounds','20','--kappa','0.1', *x]) for x in "
            "(['--framework','flower'],['--framework','flower-accounted'],['--mechanism','bandmf'],"
            "['--mechanism','client-local'],['--mechanism','nbafl','--clip','1','--client-size','100'])]; "
            "main(['account','--sigma','1','--q','0.1','--steps','10']); "
            "heavy = [m for m in ('torch', 'flwr') if m in sys.modules]; "
            "sys.exit(f'imported {heavy}' if heavy else 0)")
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args", [
    ["account", "--sigma", "0", "--q", "0.1", "--steps", "10"],
    ["account", "--sigma", "-1", "--q", "0.1", "--steps", "10"],
    ["account", "--sigma", "1", "--q", "1.5", "--steps", "10"],
    ["account", "--sigma", "1", "--q", "0", "--steps", "10"],
    ["account", "--sigma", "nan", "--q", "0.1", "--steps", "10"],
    ["account", "--sigma", "1", "--q", "0.1", "--steps", "ten"],
    ["account", "--sigma", "1", "--q", "0.1", "--steps", "10", "--accountant", "magic"],
    ["pareto", "--clients", "10", "--q", "0.1", "--kappa", "1", "--sigma-min", "3", "--sigma-max", "1",
     "--max-rounds", "10"],
    ["pareto", "--clients", "10", "--q", "0.1", "--kappa", "inf", "--sigma-min", "1", "--sigma-max", "3",
     "--max-rounds", "10"],
    ["design", "--clients", "10", "--budget", "2", "--max-rounds", "50", "--fit", "/no/such/fit.json"],
    ["design", "--clients", "10", "--budget", "2"],
    ["design", "--clients", "10", "--budget", "2", "--max-rounds", "50", "--q-min", "0.9", "--q-max", "0.2"],
    ["design", "--clients", "10", "--budget", "2", "--max-rounds", "50", "--plot", "/no/such/dir/x.png"],
    ["design", "--clients", "10", "--budget", "0.0001", "--max-rounds", "5", "--q", "0.5"],
    ["nosuchcommand"],
])
def test_bad_input_one_line_exit_2(args):
    code, out, err = run(*args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "error" in err


def test_plots_written(tmp_path, capsys):
    p1, p2 = tmp_path / "front.png", tmp_path / "design.pdf"
    out = run_json(capsys, "pareto", "--clients", "50", "--q", "0.2", "--kappa", "0.1", "--sigma-min", "0.5",
                   "--sigma-max", "4", "--max-rounds", "200", "--integer", "--plot", str(p1))
    assert out["plot"] == str(p1) and p1.stat().st_size > 10_000
    run_json(capsys, "design", "--clients", "50", "--budget", "2", "--max-rounds", "200", "--plot", str(p2))
    assert p2.read_bytes()[:4] == b"%PDF"


def test_text_output_is_readable(capsys):
    assert main(["design", "--clients", "20", "--budget", "3", "--max-rounds", "100", "--q", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "rounds T" in text and "epsilon spent" in text and "Theorem 3 case" in text


def test_train_json_contract_and_history(tmp_path, capsys, device):
    h = tmp_path / "hist.csv"
    out = run_json(capsys, "train", "--dataset", "digits", "--model", "lr", "--clients", "4", "--epsilon", "3",
                   "--rounds", "5", "--batch-rate", "0.05", "--history", str(h), "--device", device)
    for key in ("accuracy", "test_loss", "epsilon", "delta", "rounds"):
        assert key in out
    assert 0 <= out["accuracy"] <= 1 and out["epsilon"] <= 3 and out["rounds"] == 5
    assert h.read_text().splitlines()[0].startswith("round,replica")
    assert len(h.read_text().splitlines()) == 6


def test_train_batch_divisor_divides_the_noised_sum(capsys):
    """--batch-divisor D with learning rate η takes the step that η·q_b|D_i|/D
    takes with the default divisor q_b|D_i| (5 equal clients of 300 digits,
    q_b = 0.1: 30), on the same random draws."""
    base = ["train", "--dataset", "digits", "--model", "lr", "--clients", "5", "--rounds", "3", "--batch-rate",
            "0.1", "--sigma", "1", "--epsilon", "50"]
    with_div = run_json(capsys, *base, "--lr", "0.5", "--batch-divisor", "60")
    scaled = run_json(capsys, *base, "--lr", "0.25")
    plain = run_json(capsys, *base, "--lr", "0.5")
    assert with_div["test_loss"] == pytest.approx(scaled["test_loss"], rel=1e-5)
    assert abs(with_div["test_loss"] - plain["test_loss"]) > 1e-3
    assert with_div["epsilon"] == scaled["epsilon"]       # the divisor changes no privacy charge


@pytest.mark.parametrize("args", [
    ["train", "--dataset", "digits", "--model", "lr", "--sigma", "-1", "--rounds", "2"],
    ["train", "--dataset", "digits", "--model", "lr", "--batch-rate", "2", "--rounds", "2"],
    ["train", "--dataset", "digits", "--model", "resnet"],
    ["train", "--dataset", "digits", "--model", "lr", "--rounds", "2", "--history", "/no/such/h.csv"],
    ["train", "--dataset", "digits", "--model", "lr", "--rounds", "2", "--partition", "shards", "--clients", "7"],
    ["train", "--dataset", "digits", "--model", "lr", "--rounds", "2", "--algorithm", "nbafl", "--optimizer", "adam"],
    ["train", "--dataset", "digits", "--model", "lr", "--rounds", "2", "--batch-divisor", "0"],
    ["train", "--dataset", "digits", "--model", "lr", "--rounds", "2", "--algorithm", "nbafl", "--batch-divisor", "64"],
    ["train", "--dataset", "digits", "--model", "lr", "--rounds", "2", "--mechanism", "client-aggregate",
     "--batch-divisor", "64"],
])
def test_train_bad_input_one_line_exit_2(args):
    code, out, err = run(*args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


EDGE = ["0", "-1", "1e-300", "1e300", "nan", "inf", "0.5", "1", "2", "abc", "", "3", "1e-9", "100000000"]
BASE = {"account": ["--sigma", "1", "--q", "0.1", "--steps", "10"],
        "pareto": ["--clients", "10", "--q", "0.5", "--kappa", "0.1", "--sigma-min", "0.5", "--sigma-max", "3",
                   "--max-rounds", "20"],
        "design": ["--clients", "10", "--budget", "2", "--max-rounds", "20", "--q", "0.5", "--kappa", "0.1"]}
FLAGS = {"account": ["--sigma", "--q", "--steps", "--delta"],
         "pareto": ["--clients", "--q", "--kappa", "--sigma-min", "--sigma-max", "--max-rounds", "--points",
                    "--delta"],
         "design": ["--clients", "--budget", "--delta", "--max-rounds", "--q", "--q-min", "--q-max",
                    "--sigma-min", "--sigma-max", "--kappa"]}


def _edge_cases(n_per_command=40, seed=0):
    import random

    rng = random.Random(seed)
    out = []
    for cmd in BASE:
        for _ in range(n_per_command):
            args = list(BASE[cmd])
            for f in rng.sample(FLAGS[cmd], 2):
                v = rng.choice(EDGE)
                if f in args:
                    args[args.index(f) + 1] = v
                else:
                    args += [f, v]
            out.append([cmd] + args)
    return out


@pytest.mark.parametrize("args", _edge_cases())
def test_edge_values_answer_or_fail_in_one_line(args, capsys):
    """Out-of-range numbers, NaN, inf, words, huge sizes: either an answer
    (exit 0) or one line on stderr with exit 2 — never a traceback, never a
    warning spilled on stderr."""
    try:
        rc = main(args + ["--json"])
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code
    captured = capsys.readouterr()
    assert rc in (0, 2)
    if rc == 0:
        json.loads(captured.out)
        assert captured.err == ""
    else:
        assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("sigma,q,steps", [(1.1, 0.015, 1000), (0.8, 0.1, 50), (3.0, 0.5, 20)])
def test_account_both_reports_the_larger(capsys, sigma, q, steps):
    """Two accountants: never under-report. PRV (Opacus) and RDP (ours)
    agree within their slack, and the reported epsilon is their maximum."""
    args = ["account", "--sigma", str(sigma), "--q", str(q), "--steps", str(steps)]
    both = run_json(capsys, *args, "--accountant", "both")
    rdp = run_json(capsys, *args)["epsilon"]
    prv = run_json(capsys, *args, "--accountant", "prv")["epsilon"]
    assert both["by_accountant"] == pytest.approx({"rdp": rdp, "prv": prv})
    assert both["epsilon"] == max(rdp, prv)
    assert abs(rdp - prv) < 0.35 * rdp  # same mechanism: the two bounds are close


@pytest.mark.parametrize("args, words", [
    (["train", "--seed", "-3", "--dataset", "digits"], "seed must be a non-negative integer, got -3"),
    (["fit", "pretrials"], "is a folder, not a results store"),
    (["pareto", "--clients", "10", "--q", "0.5", "--kappa", "10", "--sigma-min", "0.1", "--sigma-max", "2",
      "--max-rounds", "50", "--plot", "/dev/null/x.png"], "cannot write or read /dev/null/x.png: not a directory"),
    (["validate", "pretrials/demo.toml", "--out-dir", "README.md"], "README.md is a file, not a folder"),
])
def test_errors_name_what_the_user_typed(args, words, capsys, monkeypatch):
    """One line that names the parameter or the path, never Python's own
    wording ("[Errno 20]", "expected non-negative integer")."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Errno" not in err, err


@pytest.mark.parametrize("rounds", ["200", "8", "2"])
def test_design_says_its_terms_in_words(rounds, capsys):
    """No bare paper labels in what design prints: Theorem 3's case is said
    in words, the bound's unit and the closed form's distance too; a missing
    efficiency budget or two sources of kappa are named by their flags."""
    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", rounds]) == 0
    out = capsys.readouterr().out
    for jargon in ("units of A", "(4.1)", "% better", "T̃"):
        assert jargon not in out
    case = re.search(r"Theorem 3 case\s+(I+)\s+\((.+)\)", out)
    t = int(re.search(r"rounds T\s+(\d+)", out).group(1))
    assert case and ("does not bind" in case.group(2)) == (t < int(rounds))       # "binds" only when it binds
    assert "lower is better" in out and re.search(r"the exact search's is [\d.]+ % (lower|higher)", out)
    assert main(["design", "--clients", "100", "--budget", "2"]) == 2
    assert "--max-rounds" in capsys.readouterr().err
    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "9", "--kappa", "1", "--fit",
                 "x.json"]) == 2
    err = capsys.readouterr().err
    assert "--kappa, --fit or --from-store" in err and "from_store" not in err


def test_the_api_refuses_what_the_command_line_refuses(tmp_path):
    """One set of checks: a number given as text, a flag-like boolean, and a
    history file that is not .csv are refused by the library too."""
    import paretofl

    for call, msg in ((lambda: paretofl.account("1", 0.1, 10), "noise_multiplier must be a number, got '1'"),
                      (lambda: paretofl.account(1.0, True, 10), "sample_rate must be a number, got True"),
                      (lambda: paretofl.design(10, "2", max_rounds=5), "epsilon"),
                      (lambda: paretofl.train(dataset="digits", model="lr", history=str(tmp_path / "h.txt")),
                       "must end in .csv"),
                      (lambda: paretofl.train(dataset="digits", model="lr", history=str(tmp_path / "no" / "h.csv")),
                       "does not exist")):
        with pytest.raises(ValueError, match=msg):
            call()
    assert list(tmp_path.iterdir()) == []


def test_account_errors_name_the_flags(capsys):
    for args, flag in ((["--sigma", "0", "--q", "0.1"], "--sigma"), (["--sigma", "1", "--q", "0"], "--q")):
        assert main(["account", *args, "--steps", "10"]) == 2
        err = capsys.readouterr().err
        assert flag in err and "noise_multiplier" not in err and "sample_rate" not in err


def test_a_delta_past_one_says_there_is_no_guarantee(capsys):
    """NbAFL's paper calibration spends epsilon in the thousands, where the noise sampler's floating-point delta
    (1 + e^eps)·n·2^-U passes 1: the run reports delta = 1 (a probability) and says it guarantees nothing, not
    delta = 1e+231."""
    args = ("train", "--algorithm", "nbafl", "--dataset", "digits", "--model", "lr", "--clients", "10",
            "--rounds", "2", "--clip", "1", "--calibration", "paper")
    rc, out, err = run(*args)
    assert rc == 0, err
    assert "delta = 1 " in out and "no guarantee" in out
    got = run_json(capsys, *args)
    assert got["delta"] == 1.0 and got["epsilon"] > 700
    assert got["guarantee"] is False and got["budget_met"] is False      # the JSON says it too, not only the text


@pytest.mark.parametrize("extra", [["--time-budget", "10", "--round-time", "1"], ["--sigma-min", "50"],
                                   ["--bands", "2"], ["--framework", "flower"], ["--clip-quantile", "0.5"],
                                   ["--local-epochs", "2"], ["--dim", "10"], ["--q", "0.5"],
                                   # given at their defaults, or the tuning's own flags (the second attack)
                                   ["--sigma-min", "0.3"], ["--framework", "paretofl"], ["--chunk", "4"],
                                   ["--tune-epochs", "2"], ["--tune-by", "loss"]])
def test_nbafl_design_refuses_every_flag_it_would_ignore(capsys, extra):
    """An attack found --time-budget, --sigma-min/max, --bands, --framework,
    --clip-quantile, --local-epochs and --dim accepted and ignored by
    NbAFL's design: every flag but those it reads is refused, by name."""
    argv = ["design", "--mechanism", "nbafl", "--clients", "10", "--budget", "2", "--clip", "1", "--client-size",
            "100", "--max-rounds", "50"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert extra[0] in err and "not apply to --mechanism nbafl" in err and len(err.strip().splitlines()) == 1


def test_an_option_of_another_algorithm_is_named_as_a_flag(capsys):
    assert main(["train", "--dataset", "digits", "--algorithm", "nbafl", "--optimizer", "adam"]) == 2
    text = capsys.readouterr().err
    assert "--optimizer is not an option of nbafl" in text and ", clip," not in text and "--clip" in text


@pytest.mark.parametrize("args, flag", [
    (["--mechanism", "bandmf", "--bands", "0"], "--bands must be a whole number"),
    (["--mechanism", "distributed", "--bits", "99"], "--bits must be a whole number"),
    (["--mechanism", "distributed", "--dropout", "3"], "--dropout must be a number"),
    (["--mechanism", "client-aggregate", "--bits", "8"], "takes no option --bits;"),
])
def test_a_familys_one_word_knob_is_named_by_its_flag(args, flag, capsys):
    """A mechanism's own knob of one word (bits, bands) is refused in the
    command line's words, as its knobs with an underscore are."""
    assert main(["design", "--clients", "100", "--budget", "2", *args]) == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


def test_a_plain_word_that_is_also_a_knob_stays_a_word():
    from paretofl.cli import _flagged

    m = {"bits": "--bits", "q": "--q"}
    assert _flagged("16 bits: too few; allow more bits (at most 32)", m, error=True) == \
        "16 bits: too few; allow more bits (at most 32)"


@pytest.mark.parametrize("argv, said", [
    (["design", "--clients", "100", "--epsilon", "2"], "did you mean --budget?"),      # Opacus's word for it
    (["train", "--budget", "2"], "did you mean --epsilon?"),       # not read as --budgets (a file) by prefix
    (["design", "--clients", "100", "--budjet", "2"], "did you mean --budget?"),
    (["design", "--clients", "100", "--budget", "2", "--local-epoch", "2"], "did you mean --local-epochs?"),
    # named before argparse reads the flag's value as the spec, or says the flags it stands for are missing
    (["pretrial", "--sigma", "1", "spec.toml"], "unknown flag --sigma (did you mean --sigmas?"),
    (["account", "--noise-multiplier", "1"], "unknown flag --noise-multiplier (did you mean --sigma?"),
])
def test_an_unknown_flag_is_one_line_naming_the_flag_meant(argv, said, capsys):
    with pytest.raises(SystemExit) as e:           # a usage error exits as argparse's do
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and err.startswith(f"paretofl {argv[0]}: error: unknown flag")
    assert "required" not in err and "spec.toml" not in err


@pytest.mark.parametrize("argv, said", [
    (["--json", "design", "--clients", "10", "--budget", "2"], "the command comes first"),
    (["--epsilon", "2", "train"], "the command comes first"),
    (["train", "--", "--rounds", "2"], "give it after the command"),
    (["train", "--version"], "paretofl --version"),
])
def test_a_flag_in_the_wrong_place_is_said_so_not_misspelt(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and said in err and "did you mean" not in err


def test_train_names_a_one_word_knob_its_mechanism_does_not_use(capsys):
    assert main(["train", "--mechanism", "client-aggregate", "--bits", "8", "--dataset", "digits",
                 "--rounds", "1"]) == 2
    assert "does not use --bits:" in capsys.readouterr().err


def test_a_flags_name_without_its_dashes_is_pointed_at(capsys):
    with pytest.raises(SystemExit):
        main(["design", "--clients", "10", "--budget", "1", "tune"])
    assert "did you mean --tune?" in capsys.readouterr().err


def test_the_tunings_advice_names_the_flags_to_give(capsys):
    """A tuning's notes give their advice as the command line's flags (the
    API's keywords by='loss', lrs= as --tune-by loss, --lrs): here η 0.1 on
    the edge of a two-point grid, and the loss preferring the other η."""
    from pathlib import Path

    store = Path(__file__).resolve().parents[1] / "pretrials" / "lr_fmnist.sqlite"
    assert main(["design", "--clients", "100", "--budget", "2", "--max-rounds", "50", "--tune", str(store),
                 "--clips", "0.3", "--lrs", "0.03", "0.1", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    edge = [n for n in notes if "edge of its grid" in n]
    assert edge and all(n.endswith("(--lrs)") for n in edge), notes
    other = [n for n in notes if n.startswith("by held-out loss")]
    assert other and "--tune-by loss" in other[0] and "by=" not in other[0], notes


def test_a_message_is_said_in_flags_but_its_paths_and_quotes_word_for_word():
    """_flagged: parameters become the command's flags; what a message
    quotes and the paths it names (a slash, an extension, what the user
    typed, spaces included) stay as they are, whatever characters the text
    holds (NULs and private-use characters, as a hand-edited fit's words
    may)."""
    from paretofl.cli import _flagged, _Flags

    m = _Flags({"fit": "--fit", "kappa": "--kappa", "clip": "--clip", "from_store": "--from-store",
                "q_min": "--q-min", "q_max": "--q-max"})
    m.given = ("/tmp/my runs/tune kappa fit.json",)
    assert _flagged("fit nothere/fit.json does not exist", m, error=True) == "--fit nothere/fit.json does not exist"
    assert _flagged("fit /tmp/my runs/tune kappa fit.json is gone", m, error=True) == \
        "--fit /tmp/my runs/tune kappa fit.json is gone"
    assert _flagged("use from_store=a/s.sqlite or give kappa", m, error=True) == \
        "use --from-store=a/s.sqlite or give --kappa"
    assert _flagged("range q_min/q_max; fit tune.db, clip.JSON", m, error=True) == \
        "range --q-min/--q-max; --fit tune.db, clip.JSON"
    assert _flagged("fit outputs/lr=0.1,clip=1/fit.json", m, error=True) == "--fit outputs/lr=0.1,clip=1/fit.json"
    every = "".join(chr(c) for c in range(0xE000, 0xF900))       # no private-use character left for a sentinel
    for odd in ("\x000\x00", "\x007\x00", "\ue0000\ue000", "\ue001 1 \ue000", every, every + "\ue0000"):
        text = f'fit says "kappa {odd} clip" and clip {odd}'
        assert _flagged(text, m, error=True) == f'--fit says "kappa {odd} clip" and --clip {odd}'
    m.given = ("./tune/lrs",)                                      # said back as the library writes it: tune/lrs
    assert _flagged("fit file tune/lrs is a folder", m, error=True) == "--fit file tune/lrs is a folder"


def test_the_tunings_line_says_on_how_many_held_out_samples_it_ranked():
    """The text's tuning line names the split it ranked on and, held out, how many samples; an older tuning
    (scored on the test split) is said to be one, with no count."""
    import paretofl
    from paretofl.cli import _recipe_lines

    d = paretofl.design(100, 2, max_rounds=50, local_epochs=1)
    row = {"clip": d.clip, "lr": d.lr, "local_epochs": 1, "test_loss": 0.7, "accuracy": 0.75}
    d.tuning = {"grid": [row], "scored_on": "validation: 1200 samples held out", "validation_samples": 1200,
                "pretrial": {"noise_on_mean": 0.07, "clients": 10}, "seconds": 3.0}
    line = next(x for x in _recipe_lines(d) if "public tuning" in x)
    assert "held-out loss 0.7" in line and "(on 1200 held-out samples)" in line, line
    d.tuning = {k: v for k, v in d.tuning.items() if k not in ("scored_on", "validation_samples")}
    line = next(x for x in _recipe_lines(d) if "public tuning" in x)
    assert "test loss 0.7" in line and "held-out samples" not in line, line


@pytest.mark.parametrize("how", [(), ("--framework", "flower"), ("--framework", "flower-accounted"),
                                 ("--mechanism", "bandmf"), ("--mechanism", "client-local"),
                                 ("--clip-quantile", "0.5")])
def test_the_next_step_names_an_export_the_design_takes(capsys, tmp_path, how):
    """The line a design ends with names the framework to export it to; that
    export, run as printed (with the C it asks for), must succeed: a design
    made for paretofl's trainer is not offered to Flower, whose sampling it
    was not designed for, and one made for Flower is not sent elsewhere."""
    path = tmp_path / "my design;1.json"           # a path the shell would split: the line quotes it
    assert main(["design", "--clients", "1000", "--budget", "2", "--max-rounds", "500", *how,
                 "--out", str(path)]) == 0
    text = capsys.readouterr().out
    (line,) = [x for x in text.splitlines() if x.startswith("next:")]
    (quoted, to, flags), = re.findall(r"paretofl export ('[^']*'|\S+) --to ([\w-]+)((?: --[\w-]+ [A-Z])*)", line)
    assert shlex.split(quoted) == [str(path)], quoted       # the shell gives back the path, whole
    # as printed, with the values it leaves to the user filled in (helper 78: it named no --client-size)
    filled = [{"N": "600", "B": "60", "C": "1.0"}.get(x, x) for x in flags.split()]
    assert main(["export", str(path), "--to", to, *filled]) == 0, (to, filled, capsys.readouterr())
    if "--framework flower" in line:             # the way to Flower it names must be one Flower's design takes
        assert main(["design", "--clients", "1000", "--budget", "2", "--max-rounds", "500", *how,
                     "--framework", "flower"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("name", ["plain.json", "my design.json", "a;b.json", "-dash.json", "--x.json", "it's.json",
                                  "$(rm -rf x).json", "tab\there.json", "/abs/-x.json"])
def test_a_suggested_command_takes_the_path_whole(name):
    """Every path a next: line or a refusal prints comes from one function: the shell gives back one word,
    the same file, and never an option (a relative path starting with "-" is led by "./": argparse read
    --design -dash.json as a flag missing its value)."""
    from paretofl.api import command_path

    (word,) = shlex.split(command_path(name))
    assert not word.startswith("-")
    assert word == name or word == "./" + name


def test_fit_as_json_without_a_file_prints_the_fit(capsys):
    """--json without --out saves nothing and prints the fit; the next: line it does not print named a path
    that is not there (the sixth attack's: a traceback, since paths in suggested commands are quoted)."""
    from pathlib import Path

    store = Path(__file__).resolve().parents[1] / "pretrials" / "lr_fmnist.sqlite"
    assert main(["fit", str(store), "--json", "--bootstrap", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fit_file"] is None and out["kappa"] > 0
