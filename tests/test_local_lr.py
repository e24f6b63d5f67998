"""The design chooses the clients' learning rate η with the local epochs K
(issue 46; docs/theory.md §4.E, "η with K").

* a pre-trial with ``local_lrs`` measures every K at every η, stores the
  runs at η other than its own apart (a store from before reads as it was),
  resumes without training again, and its fit carries one curve per (K, η);
* the design's choice is the argmin of (4.E.2) over the pairs, found here by
  a brute-force scan over integer T and bisected σ, not by the design's
  search; with η measured at one rate (every fit before) it is unchanged;
* the design trains the η it chose (``lr``), says where it came from, and a
  file whose η, candidates or choice were edited is refused on load;
* a spec asking for η it cannot measure is one line.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_local_work import DELTA, EPS, SPEC, TMAX, N, _brute_u, _fit_file

import paretofl
from paretofl.recommendation import read_fit
from paretofl.theory.local_work import LOCAL_WORK_FORMAT, LocalWork, curve

#: (K, η) pairs in the fit's order (by η, then K), their A and c: at η 0.1 (the reference, K₀ = 1) and 0.05
PAIRS = [(1, 0.05), (2, 0.05), (4, 0.05), (1, 0.1), (2, 0.1), (4, 0.1)]


def _lw2(A=(1.6, 1.1, 0.75, 1.0, 0.7, 0.6), c=(0.58, 0.57, 0.56, 0.60, 0.57, 0.60), draws=True, spread=0.03):
    rng = np.random.default_rng(0)
    dA = [list(np.array(A) * rng.uniform(1 - spread, 1 + spread, len(A))) for _ in range(60)] if draws else []
    dc = [list(np.array(c) + rng.normal(0, spread / 10, len(c))) for _ in range(60)] if draws else []
    return dict(format=LOCAL_WORK_FORMAT, epochs=[k for k, _ in PAIRS], lrs=[lr for _, lr in PAIRS],
                reference_lr=0.1, A=list(A), c=list(c), reference_epochs=1, rounds=[2, 256], draws_A=dA, draws_c=dc,
                seeds=3, dissimilarity={"b2": 1.5, "zeta2": 2.0})


def _u_by_brute_force(lw, q=1.0):
    """(4.E.2) at each pair, each pair's design found by a scan over T (test_local_work._brute_u)."""
    a0, c0 = lw["A"][PAIRS.index((1, 0.1))], lw["c"][PAIRS.index((1, 0.1))]
    return {p: _brute_u(16.0 * a0 / a, q) * a / a0 + (c - c0) / a0 for p, a, c in zip(PAIRS, lw["A"], lw["c"])}


@pytest.mark.parametrize("A,c", [
    ((1.6, 1.1, 0.75, 1.0, 0.7, 0.6), (0.58, 0.57, 0.56, 0.60, 0.57, 0.60)),     # the smaller eta, four epochs
    ((1.9, 1.6, 1.4, 1.0, 0.7, 0.6), (0.60, 0.60, 0.60, 0.60, 0.57, 0.60)),     # eta 0.1 at two epochs
    ((1.9, 1.6, 1.4, 1.0, 0.9, 0.85), (0.50, 0.60, 0.70, 0.60, 0.62, 0.70)),    # drift: the reference itself
])
def test_the_chosen_pair_is_the_argmin_of_the_objective_by_brute_force(tmp_path, A, c):
    lw = _lw2(A, c, spread=0.0)         # every draw the point: the bootstrap rule keeps the argmin
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw), q=1.0)
    U = _u_by_brute_force(lw)
    best = min(U, key=U.get)
    assert (d.local_epochs, d.lr) == best, (U, d.local_work["candidates"])
    assert (d.local_work["epochs"], d.local_work["lr"]) == best
    for cand in d.local_work["candidates"]:
        assert cand["objective"] == pytest.approx(U[(cand["epochs"], cand["lr"])], rel=2e-3)
    assert d.sources["lr"].startswith("the design") and "0.05, 0.1" in d.sources["lr"]


def test_a_fit_of_one_rate_designs_as_before_and_the_pairs_reduce_to_it(tmp_path):
    """The η = 0.1 curves alone, as a fit of one rate: the same K, q, T, σ as the pairs' design restricted to
    them; and the pairs' design at K fixed with only η 0.1's curve is today's at κ_K."""
    lw = _lw2(spread=0.0)
    one = dict(lw, epochs=[1, 2, 4], A=lw["A"][3:], c=lw["c"][3:], draws_A=[r[3:] for r in lw["draws_A"]],
               draws_c=[r[3:] for r in lw["draws_c"]])
    del one["lrs"], one["reference_lr"]
    d1 = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, one, name="one.json"))
    assert "lr" not in d1.local_work and "lr" not in d1.local_work["candidates"][0]
    pairs = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw))
    at = {(c["epochs"], c["lr"]): c for c in pairs.local_work["candidates"]}
    for c in d1.local_work["candidates"]:           # η 0.1's candidates: the same design points and objectives
        twin = at[(c["epochs"], 0.1)]
        assert (twin["q"], twin["rounds"], twin["sigma"], twin["objective"]) == \
            (c["q"], c["rounds"], c["sigma"], c["objective"])


def test_the_design_trains_the_eta_it_chose_and_its_file_reads_back(tmp_path):
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, _lw2()))
    assert (d.local_epochs, d.lr) == (4, 0.05)
    assert d.prediction_applies() and d.predicted_at()["lr"] == 0.05
    d.save(tmp_path / "d.json")
    back = paretofl.Design.load(tmp_path / "d.json")
    assert (back.local_epochs, back.lr) == (4, 0.05) and back.loaded_prediction["rederived"]
    assert back.local_work == json.loads(json.dumps(d.local_work))


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(lr=0.1), 'trains "lr" 0.1'),
    (lambda d: d["local_work"].update(lr=0.1), 'trains "lr" 0.05 where its "local_work" chose 0.1'),
    (lambda d: d.update(lr=0.1) or d["local_work"].update(lr=0.1), "another candidate's objective is lower"),
    (lambda d: d["local_work"]["candidates"][2].update(lr=0.2), "not among its candidates"),
    (lambda d: d["local_work"]["candidates"][0].update(lr=0.2), "not a design the fit measured"),
    (lambda d: d["local_work"]["candidates"][0].update(lr=True), "learning rate"),
    (lambda d: d["local_work"].update(measured_lrs=[0.1] * 6), "measured other local epochs, learning rates"),
    (lambda d: d["local_work"]["candidates"][5].update(lr=0.05), "objective is lower|twice"),
])
def test_a_design_files_edited_eta_is_refused_on_load(tmp_path, edit, match):
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, _lw2()))
    with pytest.raises(ValueError, match=match):
        paretofl.Design.load(_edited(tmp_path, d, edit))


def test_local_epochs_given_choose_eta_among_that_ks_pairs(tmp_path):
    lw = _lw2(spread=0.0)
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw), q=1.0, local_epochs=2)
    U = _u_by_brute_force(lw)
    assert d.local_epochs == 2 and d.lr == min((0.05, 0.1), key=lambda lr: U[(2, lr)])
    assert {c["epochs"] for c in d.local_work["candidates"]} == {2}
    with pytest.raises(ValueError, match="local epochs 8 was not measured"):
        paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw), local_epochs=8)


def test_another_pair_is_chosen_only_where_the_seeds_agree_and_the_kept_pair_reads_back(tmp_path):
    lw = _lw2(spread=0.0)
    rng = np.random.default_rng(2)
    i = PAIRS.index((4, 0.05))
    lw["draws_c"] = [[x + (rng.normal(0, 0.3) if j == i else 0.0) for j, x in enumerate(lw["c"])]
                     for _ in range(200)]
    lw["draws_A"] = [list(lw["A"]) for _ in range(200)]
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw), q=1.0)
    U = _u_by_brute_force(lw)
    assert min(U, key=U.get) == (4, 0.05)
    assert (d.local_epochs, d.lr) == (1, 0.1)
    assert (d.local_work["kept_reference"], d.local_work["kept_reference_lr"]) == (4, 0.05)
    assert any("4 local epochs at eta 0.05 predict a lower loss" in n for n in d.notes)
    d.save(tmp_path / "d.json")
    assert paretofl.Design.load(tmp_path / "d.json").lr == 0.1


# ----------------------------------------------------------------------------- the pre-trial
def test_a_pretrial_measures_each_k_at_each_eta_and_its_fit_carries_the_pairs(tmp_path):
    from paretofl.pretrial.fit import fit
    from paretofl.pretrial.spec import Spec
    from paretofl.pretrial.store import Store
    from paretofl.pretrial.sweep import run_sweep

    store = tmp_path / "s.sqlite"
    spec = {**SPEC, "local_lrs": [0.2]}
    run_sweep(Spec.from_dict(spec), store, progress=False)
    st = Store(store)
    try:
        tab = st.local_work_table()
    finally:
        st.close()
    got = sorted({(int(k), float(lr), int(t), int(s))
                  for k, lr, t, s in zip(tab["epochs"], tab["lr"], tab["rounds"], tab["seed"])})
    assert got == sorted((k, lr, t, s) for lr in (0.2, 0.5) for k in (1, 3) for t in (2, 4, 8) for s in (0, 1))
    with sqlite3.connect(store) as db:          # the pre-trial's own eta where every store keeps it, the other apart
        assert db.execute("SELECT COUNT(*) FROM local_work").fetchone()[0] == 12
        assert db.execute("SELECT COUNT(*) FROM local_work_lr WHERE lr = 0.2").fetchone()[0] == 12
    assert run_sweep(Spec.from_dict(spec), store, progress=False)["runs_trained"] == 0      # resumed
    f = fit(store, bootstrap=50)
    f.save(tmp_path / "f.json")
    lw = LocalWork.from_dict(read_fit(tmp_path / "f.json")["local_work"])
    assert lw.settings() == [(1, 0.2), (3, 0.2), (1, 0.5), (3, 0.5)] and lw.reference == (1, 0.5)
    for i, (k, lr) in enumerate(lw.settings()):     # each pair's curve from its own rows
        m = (tab["epochs"] == k) & np.isclose(tab["lr"], lr)
        mean = [float(np.mean(tab["test_loss"][m & (tab["rounds"] == t)])) for t in (2, 4, 8)]
        assert (lw.A[i], lw.c[i]) == pytest.approx(curve([2, 4, 8], mean))
    figs = paretofl.api.pretrial_figures(str(store), fit=str(tmp_path / "f.json"), outdir=str(tmp_path))
    assert (tmp_path / "s_local_work.png").stat().st_size > 10_000 and any("local_work" in p for p in figs)
    # the same store without its runs at 0.2 (as a store from before eta was measured): one rate, as before
    old = tmp_path / "old.sqlite"
    old.write_bytes(store.read_bytes())
    with sqlite3.connect(old) as db:
        db.execute("DROP TABLE local_work_lr")
    lw_old = fit(old, bootstrap=50).local_work
    assert lw_old["epochs"] == [1, 3] and "lrs" not in lw_old


@pytest.mark.parametrize("fields,match", [
    (dict(local_lrs=[0.05]), "give the local epochs to measure too"),
    (dict(local_work=[1, 2], local_lrs=[0.0]), "local_lrs values"),
    (dict(local_work=[1, 2], local_lrs=["fast"]), "local_lrs must hold numbers"),
    (dict(local_work=[1, 2], local_lrs=[math.inf]), "local_lrs"),
])
def test_a_spec_asking_for_rates_it_cannot_measure_is_refused(fields, match):
    from paretofl.pretrial.spec import Spec

    with pytest.raises(ValueError, match=match):
        Spec.from_dict({**SPEC, "local_work": [], **fields})


def test_a_spec_with_local_lrs_keeps_its_stores_identity():
    from paretofl.pretrial.spec import Spec

    assert Spec.from_dict({**SPEC, "local_lrs": [0.05, 0.2]}).base() == Spec.from_dict(SPEC).base()
    assert Spec.from_dict({**SPEC, "local_lrs": [0.5, 0.05]}).local_work_lrs() == [0.05, 0.5]


@pytest.mark.parametrize("edit,match", [
    (lambda lw: lw.update(lrs=[0.1] * 6), "distinct"),
    (lambda lw: lw.update(lrs=lw["lrs"][:5]), "one in \\(0, 1000\\] per curve"),
    (lambda lw: lw.pop("reference_lr"), "one in \\(0, 1000\\] per curve"),
    (lambda lw: lw.update(reference_lr=0.2), "does not measure the local epochs the pre-trial's own runs used"),
    (lambda lw: lw.update(lrs=[0.1, 0.1, 0.1, 0.05, 0.05, 0.05]), "out of order"),
    (lambda lw: lw.update(lrs=[-0.05, -0.05, -0.05, 0.1, 0.1, 0.1]), "per curve"),
])
def test_a_fits_pairs_are_checked_on_load(tmp_path, edit, match):
    lw = _lw2()
    edit(lw)
    with pytest.raises(ValueError, match=match):
        paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw))


def test_the_cli_prints_eta_beside_each_k(tmp_path, capsys):
    from paretofl.cli import main

    fit = _fit_file(tmp_path, _lw2())
    main(["design", "--clients", str(N), "--budget", str(EPS), "--max-rounds", str(TMAX), "--fit", fit])
    out = capsys.readouterr().out
    assert "(local epochs, learning rate)" in out
    assert sum(" epoch(s) eta 0.05 " in line for line in out.splitlines()) == 3
    assert any("4 epoch(s) eta 0.05" in line and "<- chosen" in line for line in out.splitlines())


_EDITS = ("lr", "reference_lr", "kept_reference_lr", "measured_lrs", "not_falling_lrs", "epochs")
_VALUES = (0.1, 0.05, 0.025, 0.2, -0.05, 0.0, 1e9, True, "0.05", None, [0.05], math.nan, 4, 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(("record", "candidate", "top", "measured_at")), field=st.sampled_from(_EDITS),
       value=st.sampled_from(_VALUES), which=st.integers(0, 5))
def test_any_edit_of_a_design_files_eta_is_refused_or_changes_nothing(tmp_path_factory, where, field, value,
                                                                      which):
    """The class of the edited η: any field of a design file's local work that names a learning rate (or the
    epochs beside it), in the record, a candidate or the design's own lr, set to any value; the file loads as it
    was made (an edit that changes nothing) or is refused in one ValueError, never believed."""
    tmp = tmp_path_factory.mktemp("eta")
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp, _lw2()))
    d.save(tmp / "d.json")
    data = json.loads((tmp / "d.json").read_text())
    target = {"record": data["local_work"], "candidate": data["local_work"]["candidates"][which],
              "top": data, "measured_at": data["local_work"]["measured_at"]}[where]
    name = "lr" if where == "top" and field not in ("lr", "epochs") else field
    if where == "measured_at":                 # what the prediction is of: any knob of its recipe
        name = ("clip", "lr", "batch_size", "model", "dataset", "partition", "optimizer")[
            6 if field == "epochs" else which]
    if where == "top" and name == "epochs":
        name = "local_epochs"
    before = json.dumps(target.get(name, "absent"))
    target[name] = value
    (tmp / "e.json").write_text(json.dumps(data, allow_nan=True))
    try:
        back = paretofl.Design.load(tmp / "e.json")
    except ValueError:
        return
    assert json.dumps(value) == before or (value is None and before == '"absent"'), (where, name, value)
    assert (back.local_epochs, back.lr) == (d.local_epochs, d.lr)


def test_a_design_with_local_epochs_given_reads_back_and_keeps_eta0_where_the_seeds_do_not_agree(tmp_path):
    """Attack 71: every --local-epochs K design of a fit with several η was refused on load (its candidates are
    K's pairs, not every pair); and K given chose η with no draws agreeing.  Now its candidates are re-derived
    as K's pairs, and the rule keeps K at the pre-trial's own η where the draws do not agree."""
    lw = _lw2(spread=0.0)
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw), local_epochs=4)
    assert d.local_work["given_epochs"] == 4 and (d.local_epochs, d.lr) == (4, 0.05)
    d.save(tmp_path / "d.json")
    back = paretofl.Design.load(tmp_path / "d.json")
    assert (back.local_epochs, back.lr) == (4, 0.05) and back.loaded_prediction["rederived"]
    lw["draws_A"], lw["draws_c"] = [], []           # no draws: nothing agrees that another eta helps at K = 4
    kept = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw, name="nd.json"),
                           local_epochs=4)
    assert (kept.local_epochs, kept.lr) == (4, 0.1) and kept.local_work["kept_reference_lr"] == 0.05
    assert kept.sources["lr"].startswith("the pre-trial's own")
    kept.save(tmp_path / "k.json")
    assert paretofl.Design.load(tmp_path / "k.json").lr == 0.1


def test_a_fit_whose_reference_eta_is_not_its_pre_trials_is_refused(tmp_path):
    lw = _lw2()
    lw["reference_lr"], lw["lrs"] = 0.05, [0.1 if x == 0.05 else 0.05 for x in lw["lrs"]]     # a swapped reference
    lw["epochs"], lw["lrs"] = lw["epochs"][3:] + lw["epochs"][:3], lw["lrs"][3:] + lw["lrs"][:3]
    lw["A"], lw["c"] = lw["A"][3:] + lw["A"][:3], lw["c"][3:] + lw["c"][:3]
    lw["draws_A"] = [r[3:] + r[:3] for r in lw["draws_A"]]
    lw["draws_c"] = [r[3:] + r[:3] for r in lw["draws_c"]]
    with pytest.raises(ValueError, match="its pre-trial ran at lr 0.05, its spec 0.1"):
        paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw))


def test_a_tuning_record_does_not_move_the_eta_the_prediction_is_of(tmp_path):
    """Attack 71: a tuning record added to a file switched off the check of its lr, and the run at 0.1 was
    compared with the prediction at 0.05.  The prediction is of the η chosen whatever the record says, so a run
    at another η is not compared with it."""
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, _lw2()))
    d.save(tmp_path / "d.json")
    data = json.loads((tmp_path / "d.json").read_text())
    for said in (0.1, 0.05):
        data.update(lr=0.1, tuning={"measured_at": {"clip": 0.3, "lr": said}})
        (tmp_path / "e.json").write_text(json.dumps(data))
        e = paretofl.Design.load(tmp_path / "e.json")
        assert e.predicted_at()["lr"] == 0.05 and not e.prediction_applies()    # it trains 0.1: not compared
        assert e.prediction_applies(lr=0.05)


def test_the_tuning_keeps_the_eta_the_design_chose_and_searches_c(tmp_path):
    from test_local_work import ROOT_PRETRIALS

    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, _lw2()))
    with pytest.raises(ValueError, match="learning rate 0.05 was chosen with its 4 local epoch"):
        paretofl.api.tune(d, str(ROOT_PRETRIALS / "lr_fmnist.sqlite"), paretofl.api.Grid(clips=(0.3,), lrs=(0.1,)))
    paretofl.api.tune(d, str(ROOT_PRETRIALS / "lr_fmnist.sqlite"), paretofl.api.Grid(clips=(0.3, 1.0), seeds=1))
    assert d.lr == 0.05 and {row["lr"] for row in d.tuning["grid"]} == {0.05}


#: the C of the shipped pre-trial, whose spec _fit_file's fits keep
SHIPPED_CLIP = 0.3


def _edited(tmp_path, d, edit, name="e.json"):
    d.save(tmp_path / "d.json")
    data = json.loads((tmp_path / "d.json").read_text())
    edit(data)
    (tmp_path / name).write_text(json.dumps(data))
    return tmp_path / name


def _as(data, c):
    """A design file made to claim candidate ``c`` as its choice (its point, prediction and lr)."""
    lw = data["local_work"]
    lw.update(epochs=c["epochs"], lr=c["lr"], predicted_loss=c["predicted_loss"], interval=c["interval"])
    lw.pop("kept_reference", None), lw.pop("kept_reference_lr", None)
    lw["measured_at"] = {**lw["measured_at"], "lr": c["lr"]}
    data.update(local_epochs=c["epochs"], lr=c["lr"], kappa=c["kappa"],
                utility_bound=1.0 / c["rounds"] + c["kappa"] * c["sigma"] ** 2 / (c["q"] * N))


def test_a_file_cut_to_one_pair_or_choosing_past_the_rule_is_refused(tmp_path):
    """Attack 72: a file of a several-η fit cut down to one candidate loaded (one candidate was a one-η fit's K
    given); and a file choosing the least pair where the draws did not agree (the design keeps the reference
    there) loaded: the rule was held one way only."""
    # two eta at K = 2 with one A (so one design point) and another c: the file's one candidate is the worse
    lw = _lw2(A=(1.6, 0.7, 0.75, 1.0, 0.7, 0.6), c=(0.58, 0.55, 0.56, 0.60, 0.57, 0.60), spread=0.0)
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw, name="same.json"),
                        local_epochs=2)
    assert (d.local_epochs, d.lr) == (2, 0.05)
    other = next(c for c in d.local_work["candidates"] if c["lr"] != d.lr)
    assert (other["q"], other["rounds"], other["sigma"]) == (d.q, d.rounds, d.sigma)

    def cut(data):
        data["local_work"]["candidates"] = [dict(other)]
        _as(data, other)
    with pytest.raises(ValueError, match="other candidates than the local epochs its fit measured"):
        paretofl.Design.load(_edited(tmp_path, d, cut))
    # (1, 0.05): the reference's A (one point) and a lower c; no draws, so the design keeps (1, 0.1)
    lw = _lw2(A=(1.0, 1.6, 1.6, 1.0, 1.2, 1.3), c=(0.55, 0.60, 0.60, 0.60, 0.62, 0.63), draws=False)
    kept = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, lw, name="nd.json"))
    assert (kept.local_epochs, kept.lr) == (1, 0.1) and "kept_reference" in kept.local_work
    best = min(kept.local_work["candidates"], key=lambda c: c["objective"])
    assert (best["q"], best["rounds"], best["sigma"]) == (kept.q, kept.rounds, kept.sigma)   # one point: only the rule
    with pytest.raises(ValueError, match="where the fit's draws do not agree it helps"):
        paretofl.Design.load(_edited(tmp_path, kept, lambda data: _as(data, best), name="past.json"))


@pytest.mark.parametrize("measured_at,clip", [({"clip": "0.5", "lr": 0.05}, 0.5), ({"clip": True, "lr": 0.05}, 1.0),
                                              ({"clip": {}, "lr": 0.05}, 0.3), ({"clip": [0.3], "lr": 0.05}, 0.3)])
def test_a_tuning_record_that_is_not_numbers_is_unknown_and_never_compared(tmp_path, measured_at, clip, capsys):
    """Attack 72: strings and booleans in a tuning record were read as numbers (float("0.5")), so a run at a C
    the fit never measured was compared with its prediction; a dict crashed the printout.  The record is read
    only for a file from before the design recorded its pair and whose fit is not here; otherwise the pair is
    the design's own record."""
    from paretofl.cli import _local_work_lines

    fit = _fit_file(tmp_path, _lw2())
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=fit)
    e = paretofl.Design.load(_edited(tmp_path, d, lambda data: data.update(
        clip=clip, tuning={"measured_at": measured_at})))
    assert e.predicted_at()["clip"] == SHIPPED_CLIP and e.prediction_applies() is (clip == SHIPPED_CLIP)
    old = _edited(tmp_path, d, lambda data: (data.update(clip=clip, tuning={"measured_at": measured_at}),
                                             data["local_work"].pop("measured_at")), name="old.json")
    Path(fit).unlink()
    e = paretofl.Design.load(old)
    assert e.predicted_at()["clip"] is None and e.prediction_applies() is False
    assert any("not recorded" in line for line in _local_work_lines(e))


def test_the_prediction_is_of_the_pair_the_fit_measured_whatever_the_design_is_set_to_train(tmp_path):
    """The prediction was said to be of the C and lr the design trains: set apart from the fit's pair (by hand,
    or in a file whose fit is here), a run at C = 1 was compared with a loss the fit measured at C = 0.3.  The
    recipe is recorded when designed, re-derived from the fit on load, and given to a file from before it was."""
    d = paretofl.design(100, 2.0, 1e-5, max_rounds=200)          # the shipped fit: C 0.3, lr 0.1
    assert d.local_work["measured_at"] == SHIPPED_RECIPE and d.prediction_applies()
    d.clip = 1.0
    assert d.predicted_at()["clip"] == 0.3 and d.prediction_differs() == ["clip"]
    assert d.prediction_applies(clip=0.3)
    e = paretofl.Design.load(_edited(tmp_path, d, lambda data: None))
    assert e.clip == 1.0 and not e.prediction_applies() and e.prediction_applies(clip=0.3)
    # a file from before the recipe was recorded: its fit gives it
    old = paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].pop("measured_at")))
    assert old.local_work["measured_at"] == SHIPPED_RECIPE and not old.prediction_applies()
    for edit in ({"clip": 1.0}, {"lr": 0.2}, {"batch_size": 32}, {"model": "cnn"}, {"dataset": "digits"},
                 {"partition": "shards:2"}, {"optimizer": "adam"}, {"clip": "0.3"}, {"batch_size": 64.0},
                 {"extra": 1}, {"clip": 10 ** 400}):
        with pytest.raises(ValueError, match="its prediction is of|holds a number out of range"):
            paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].update(
                measured_at={**SHIPPED_RECIPE, **edit})))
    for whole in ([0.3, 0.1], None, "x", {"clip": 0.3, "lr": 0.1}, [0.3] * 100_000):
        with pytest.raises(ValueError, match="its prediction is of") as err:
            paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].update(measured_at=whole)))
        assert len(str(err.value)) < 1000                       # one line, not the file's value whole
    # every knob edited is named, each cut short: a long one does not hide another (attack 76)
    with pytest.raises(ValueError, match="optimizer 'adam'.*adaptive_clipping True.*measured.*optimizer 'sgd'") as err:
        paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].update(measured_at={
            **SHIPPED_RECIPE, "model": "x" * 5000, "optimizer": "adam", "adaptive_clipping": True})))
    assert len(str(err.value)) < 1000 and "model 'xxx" in str(err.value)
    for edit, says in ((lambda r: r.update(extra=1), "fields 'extra'.*newer paretofl's, or edited"),
                       (lambda r: r.pop("optimizer"), "no optimizer.*newer paretofl's, or edited")):
        rec = dict(SHIPPED_RECIPE)
        edit(rec)
        with pytest.raises(ValueError, match=says):
            paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].update(measured_at=rec)))
    # eta chosen with K: the recipe holds the fit's C and the chosen eta
    m = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=_fit_file(tmp_path, _lw2()))
    assert m.local_work["measured_at"] == {**SHIPPED_RECIPE, "lr": 0.05}
    m.lr = 0.1
    assert not m.prediction_applies() and m.prediction_applies(lr=0.05)


#: what the shipped pre-trial trained, whose spec _fit_file's fits keep
SHIPPED_RECIPE = {"clip": 0.3, "lr": 0.1, "batch_size": 64, "model": "lr", "dataset": "fashion-mnist",
                  "partition": "iid", "optimizer": "sgd", "adaptive_clipping": False}


def test_a_run_unlike_the_pretrials_in_any_knob_is_not_compared(tmp_path):
    """Attack 73: a run on other data, at another batch size, with Adam, or on clients split otherwise than the
    pre-trial's, was compared with its prediction (only C, lr, local epochs, model and data were checked, model
    and data from fields a hand may set).  Every knob of the recipe the fit measured is compared, and a value
    that is not a knob's (a string C, an integer past any float) is not the one predicted."""
    from types import SimpleNamespace

    from paretofl.cli import _local_work_lines, _predicted_lines

    d = paretofl.design(100, 2.0, 1e-5, max_rounds=200)
    run = dict(model="lr", dataset="fashion-mnist", partition="iid", test_loss=0.7,
               options={"clip": 0.3, "lr": 0.1, "local_epochs": d.local_epochs, "batch_size": 64, "optimizer": "sgd"})
    out = {}
    assert "realized" in _predicted_lines(d, SimpleNamespace(**run), out)[0] and "prediction_error" in out
    for knob, value in (("dataset", "digits"), ("partition", "shards:2"), ("partition", "dirichlet:0.5"),
                        ("model", "cnn"), ("batch_size", 8), ("optimizer", "adam"), ("clip", "0.3"),
                        ("lr", 10 ** 400), ("batch_size", None), ("optimizer", None), ("clip_quantile", 0.5)):
        r = {**run, "options": dict(run["options"])}
        if knob in r["options"] or knob == "clip_quantile":
            if value is None:
                r["options"].pop(knob)                      # a run with no such knob did not train the pre-trial's
            else:
                r["options"][knob] = value
        else:
            r[knob] = value
        out = {}
        line = _predicted_lines(d, SimpleNamespace(**r), out)[0]
        assert "not compared" in line and "prediction_error" not in out, (knob, value)
        assert out["prediction_not_compared"] == [{"clip_quantile": "adaptive_clipping"}.get(knob, knob)]
        assert ("this run's " + {"batch_size": "batch size", "clip": "C", "clip_quantile": "adaptive clipping"}.get(
            knob, knob)) in line, line
    # the same run written otherwise (numpy's numbers, a whole float) is compared; a boolean is no number
    assert d.prediction_applies(clip=np.float64(0.3), lr=np.float64(0.1), batch_size=np.int64(64))
    assert d.prediction_differs(clip=np.float32(0.3)) == ["clip"]         # 0.30000001: another C
    assert d.prediction_applies(local_epochs=float(d.local_epochs), batch_size=64.0)
    assert d.prediction_differs(local_epochs=True, batch_size=True) == ["local_epochs", "batch_size"]
    q = paretofl.design(100, 2.0, 1e-5, max_rounds=200, mechanism_options={"clip_quantile": 0.5})
    assert q.prediction_differs() == ["adaptive_clipping"]
    # set by hand on the design: the same, and the design says which knob
    for knob, value, word in (("dataset", "digits", "dataset"), ("local_epochs", 2, "local epochs"),
                              ("batch_size", 8, "batch size")):
        e = paretofl.Design.load(_edited(tmp_path, d, lambda data: None))
        setattr(e, knob, value)
        assert e.prediction_differs() == [knob]
        assert any(f"the design trains {word} = {value}" in line for line in _local_work_lines(e))
    # clients described otherwise than the pre-trial's
    s = paretofl.design(100, 2.0, 1e-5, max_rounds=200, partition="shards:2")
    assert s.prediction_differs() == ["partition"] and s.prediction_applies(partition="iid")


def test_a_distributed_designs_recipe_is_re_derived_though_its_prediction_is_the_files(tmp_path):
    """Attack 73: the check of what the prediction is of was skipped with the rest for a mechanism whose error
    ratio its search sets (distributed DP), so an edited record was believed and an older file's not given."""
    d = paretofl.design(100, 2.0, 1e-5, max_rounds=200, mechanism="distributed", mechanism_options={"dim": 650})
    assert d.local_work["measured_at"] == SHIPPED_RECIPE
    d.clip = 1.0
    old = paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].pop("measured_at")))
    assert old.loaded_prediction["rederived"] is False and old.local_work["measured_at"] == SHIPPED_RECIPE
    assert old.prediction_differs() == ["clip"]
    with pytest.raises(ValueError, match="its prediction is of"):
        paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].update(
            measured_at={**SHIPPED_RECIPE, "clip": 1.0})))


def test_an_integer_past_any_float_is_refused_or_unknown_not_an_overflow(tmp_path):
    """Attack 73: a huge integer as the file's C passed the range check (10**400 < inf), and one in the recipe
    of a file whose fit is not here raised OverflowError after its training."""
    d = paretofl.design(100, 2.0, 1e-5, max_rounds=200)
    with pytest.raises(ValueError, match='"clip" must be a number above 0'):
        paretofl.Design.load(_edited(tmp_path, d, lambda data: data.update(clip=10 ** 400)))
    fit = _fit_file(tmp_path, _lw2())
    m = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=fit)
    path = _edited(tmp_path, m, lambda data: data["local_work"].update(
        measured_at={**SHIPPED_RECIPE, "lr": 0.05, "clip": 10 ** 400}), name="huge.json")
    Path(fit).unlink()
    e = paretofl.Design.load(path)
    assert e.predicted_at()["clip"] is None and e.prediction_differs() is None and not e.prediction_applies()
    with pytest.raises(ValueError, match='"batch_size" must be a whole number') as err:
        paretofl.Design.load(_edited(tmp_path, d, lambda data: data.update(batch_size=10 ** 400)))
    assert len(str(err.value)) < 400


def test_an_older_file_whose_fit_is_gone_still_names_what_its_prediction_is_of(tmp_path):
    """Attack 74: a file from before the recipe was recorded, its fit not here, left the batch size, the
    optimizer and the split unchecked, so a run with Adam, another batch or iid clients was compared.  What every
    pre-trial trains (SGD, a fixed C), the file's batch and the split its local work records stand in; a value
    an edit made long is cut on the design's lines."""
    from types import SimpleNamespace

    from paretofl.cli import _local_work_lines, _predicted_lines

    fit = _fit_file(tmp_path, _lw2())
    d = paretofl.design(N, EPS, DELTA, max_rounds=TMAX, fit=fit)
    path = _edited(tmp_path, d, lambda data: data["local_work"].pop("measured_at"), name="old.json")
    Path(fit).unlink()
    e = paretofl.Design.load(path)
    assert e.loaded_prediction["rederived"] is False and e.prediction_applies()
    at = e.predicted_at()
    assert (at["optimizer"], at["batch_size"], at["adaptive_clipping"]) == ("sgd", 64, False)
    run = dict(model=e.model, dataset=e.dataset, partition=at["partition"], test_loss=0.7,
               options={"clip": e.clip, "lr": e.lr, "local_epochs": e.local_epochs, "batch_size": 64,
                        "optimizer": "sgd"})
    assert "realized" in _predicted_lines(e, SimpleNamespace(**run), {})[0]
    for knob, value in (("optimizer", "adam"), ("batch_size", 8)):
        line = _predicted_lines(e, SimpleNamespace(**{**run, "options": {**run["options"], knob: value}}), {})[0]
        assert "not compared" in line
    long = paretofl.Design.load(_edited(tmp_path, d, lambda data: data["local_work"].update(
        measured_at={**SHIPPED_RECIPE, "lr": 0.05, "model": "x" * 5000}), name="long.json"))
    assert max(len(line) for line in _local_work_lines(long)) < 1000


def test_a_tuning_of_a_design_set_apart_keeps_the_fits_pair(tmp_path):
    """The tuning recorded the C and lr the design was set to as the pair its fit measured."""
    from test_local_work import ROOT_PRETRIALS

    d = paretofl.design(100, 2.0, 1e-5, max_rounds=200)
    d.clip = 1.0
    paretofl.api.tune(d, str(ROOT_PRETRIALS / "lr_fmnist.sqlite"), paretofl.api.Grid(clips=(0.3, 1.0), lrs=(0.1,),
                                                                                     seeds=1))
    assert d.tuning["measured_at"] == {"clip": 0.3, "lr": 0.1}
    assert d.prediction_applies() == (d.clip == 0.3 and d.lr == 0.1)
