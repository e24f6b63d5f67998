"""Where a pre-trial scores its runs (``Spec.scored_on``): on samples held out
of its own training data by default, so that κ and the local work's curves
read nothing of the test split results are reported on; on the test split
for the stores made before, and for a private pre-trial (whose clients'
held-out samples are not public)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from paretofl.pretrial import sweep
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import read_base, read_table

pytest.importorskip("torch")

SMALL = dict(dataset="digits", model="lr", clients=8, q=[1.0], sigmas=[0.5], rounds=[2, 3], seeds=1, clip=0.3, lr=0.1,
             public_fraction=0.5)


def _losses(path) -> list:
    t = read_table(path)
    return [tuple(float(t[k][i]) for k in ("sigma", "rounds", "seed", "test_loss", "accuracy"))
            for i in range(len(t["sigma"]))]


def test_the_default_is_held_out_and_a_private_pretrial_scores_on_the_test_split():
    assert Spec.from_dict(SMALL).scored_on == "held-out"
    private = dict(SMALL, subset="rest", private=True, epsilon=50.0)
    assert Spec.from_dict(private).scored_on == "test"
    with pytest.raises(ValueError, match="release nothing charges"):
        Spec.from_dict(dict(private, scored_on="held-out"))
    with pytest.raises(ValueError, match="scored_on must be one of held-out, test"):
        Spec.from_dict(dict(SMALL, scored_on="validation"))
    # a store's identity: "test" is what every store before held-out scoring was, and is left out of it
    assert "scored_on" not in Spec.from_dict(dict(SMALL, scored_on="test")).base()
    assert Spec.from_dict(SMALL).base()["scored_on"] == "held-out"
    assert Spec.from_base(Spec.from_dict(dict(SMALL, scored_on="test")).base()).scored_on == "test"


def test_a_held_out_pretrial_never_reads_the_test_split(tmp_path):
    """With the test split's labels scrambled and its inputs zeroed, a
    held-out pre-trial writes the same losses to the last digit; one scored
    on the test split does not (the control: the scramble reaches it)."""
    def run(scored_on, scramble):
        spec = Spec.from_dict(dict(SMALL, scored_on=scored_on))
        sweep._SETUP_CACHE.clear()
        setup = sweep.prepared(spec)
        if scramble:
            ds = setup.data
            bad = replace(ds, x_test=ds.x_test * 0, y_test=(ds.y_test + 1) % ds.n_classes)
            sweep._SETUP_CACHE[next(iter(sweep._SETUP_CACHE))] = replace(setup, data=bad)
        path = tmp_path / f"{scored_on}_{scramble}.sqlite"
        try:
            sweep.run_sweep(spec, path, progress=False)
        finally:
            sweep._SETUP_CACHE.clear()
        return _losses(path)

    assert run("held-out", False) == run("held-out", True)
    assert run("test", False) != run("test", True)


def test_the_pretrial_scores_on_the_split_the_tuning_ranks_on():
    """One held-out split per spec: the same samples (20 % of each client's,
    at least one, never its last) for the pre-trial and the public tuning."""
    import numpy as np

    spec = Spec.from_dict(SMALL)
    sweep._SETUP_CACHE.clear()
    full, held = sweep.prepared(spec), sweep.scored(spec)
    assert held is sweep.held_out(spec)
    assert sweep.scored(Spec.from_dict(dict(SMALL, scored_on="test"))) is sweep.prepared(spec)
    kept = np.concatenate(held.parts)
    out = np.setdiff1d(np.concatenate(full.parts), kept)
    assert len(out) == len(held.data.y_test) and not np.intersect1d(out, kept).size
    for p, q in zip(full.parts, held.parts):
        assert 1 <= len(p) - len(q) <= max(1, round(0.2 * len(p))) and len(q) >= 1
    assert np.array_equal(held.data.y_test.numpy(), full.data.y_train.numpy()[np.sort(out)])


def test_a_store_scored_on_the_test_split_is_kept_apart_and_says_so(tmp_path):
    """A store made before held-out scoring (its base has no scored_on) is
    refused to a spec that scores held out, with the line to add; that line
    resumes it; its fit notes that κ leans on the test split."""
    import paretofl

    old = Spec.from_dict(dict(SMALL, scored_on="test"))
    path = tmp_path / "old.sqlite"
    sweep.run_sweep(old, path, progress=False)
    assert "scored_on" not in read_base(path)
    with pytest.raises(ValueError, match='differs in scored_on.*give scored_on test'):
        sweep.run_sweep(Spec.from_dict(SMALL), path, progress=False)
    assert sweep.run_sweep(old, path, progress=False)["runs_added"] == 0
    assert any("scored on the data set's test split" in n for n in paretofl.fit(path, bootstrap=0).notes)
    new = tmp_path / "new.sqlite"
    sweep.run_sweep(Spec.from_dict(SMALL), new, progress=False)
    assert not any("test split" in n for n in paretofl.fit(new, bootstrap=0).notes)
    with sqlite3.connect(new) as db:       # the store records where it scored
        assert '"scored_on": "held-out"' in dict(db.execute("SELECT key, value FROM meta"))["base"]


def test_a_split_too_small_to_score_on_is_refused_before_a_store_is_made(tmp_path):
    """Ten clients on thirteen public samples: one sample held out, every run
    scored 0 or 1 (the attack) — refused in one line, no store left behind;
    the test split (scored_on "test") still scores such a pre-trial."""
    tiny = dict(SMALL, clients=10, public_fraction=0.0075)
    with pytest.raises(ValueError, match="score its runs on 1 held-out sample"):
        sweep.run_sweep(Spec.from_dict(tiny), tmp_path / "tiny.sqlite", progress=False)
    assert not (tmp_path / "tiny.sqlite").exists()
    summary = sweep.run_sweep(Spec.from_dict(dict(tiny, scored_on="test")), tmp_path / "t.sqlite", progress=False)
    assert summary["scored_on"] == "test" and summary["runs_added"] == summary["runs_in_spec"] > 0


def test_a_pretrial_on_the_clients_own_data_scores_on_the_test_split_by_default():
    """The clients' samples are not public: a pre-trial on them (subset rest
    or all) is scored on the test split unless it asks otherwise, private or
    not; only a public share is held out by default."""
    for subset in ("rest", "all"):
        assert Spec.from_dict(dict(SMALL, subset=subset)).scored_on == "test"
        assert "scored_on" not in Spec.from_dict(dict(SMALL, subset=subset)).base()
