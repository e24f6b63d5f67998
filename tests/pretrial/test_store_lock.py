"""One writer per store (issue 45, item 4).

Sweeps of the *same* spec may share a store (each claims its replicas:
tests/pretrial/test_pretrial.py); sweeps of different specs never mix in
one, whatever the timing: the store's creation, its identity check and the
sweep's registration are one exclusive SQLite step.  A store replaced,
removed or changed under a sweep ends it with one line, and nothing is
written under the wrong metadata."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import Store, StoreChanged, read_table

PY = sys.executable
SMALL = dict(dataset="digits", public_fraction=1.0, clients=5, model="lr", q=[0.6], sigmas=[0.05, 0.5],
             rounds=[2, 5], seeds=2, clip=0.5, lr=0.2, batch_size=32)


def _row(sigma=0.5, rounds=2, q=0.6, seed=0):
    return dict(sigma=sigma, rounds=rounds, q=q, seed=seed, test_loss=1.0, accuracy=0.5, epsilon=1.0,
                epsilon_asymptotic=1.0, seconds=0.1)


def _count(path):
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        db.close()


def test_a_second_spec_is_refused_while_the_first_sweep_writes_to_an_empty_store(tmp_path):
    path = tmp_path / "s.sqlite"
    holder = subprocess.Popen([PY, "-c", "import sys; from paretofl.pretrial.store import Store; "
                               f"s = Store({str(path)!r}, {{'lr': 0.2}}); print('open', flush=True); "
                               "sys.stdin.readline(); s.add_rows([]); s.close()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(ValueError, match=r"another sweep \(process \d+ on .*\) is writing runs of a different "
                                             "spec"):
            Store(path, {"lr": 0.3})
        assert Store(path).base == {"lr": 0.2}
    finally:
        holder.communicate("go\n", timeout=60)
    assert holder.returncode == 0
    s = Store(path, {"lr": 0.3})            # empty and its sweep gone: it takes the new spec (as before)
    s.add_rows([_row()])
    s.close()
    with pytest.raises(ValueError, match="holds runs of a different spec"):
        Store(path, {"lr": 0.2})
    same = Store(path, {"lr": 0.3})          # the same spec may always come back (and share, by claims)
    same.close()


def test_an_empty_store_left_by_a_dead_sweep_takes_another_spec(tmp_path):
    import socket

    path = tmp_path / "e.sqlite"
    Store(path, {"lr": 0.2}).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO writers VALUES (?, ?, ?)", (socket.gethostname(), 2**22 + 12345, 0.0))   # not running
    db.commit()
    db.close()
    s = Store(path, {"lr": 0.3})
    assert s.base == {"lr": 0.3}
    s.close()


@pytest.mark.parametrize("how", ["replaced", "removed", "overwritten", "runs dropped", "meta dropped"])
def test_a_store_changed_under_a_sweep_ends_it_in_one_line_and_writes_nothing_more(tmp_path, how):
    path, other = tmp_path / "s.sqlite", tmp_path / "other.sqlite"
    st = Store(path, {"lr": 0.2})
    st.add_rows([_row(seed=0)])
    got, _ = st.claim(0.6, [(0.5, 1)], [2])
    assert got == [(0.5, 1)]
    o = Store(other, {"lr": 0.9})
    for i in range(5):       # a history of its own (SQLite notices a file rewritten in place by its change counter)
        o.add_rows([_row(sigma=0.05, seed=i)])
    o.close()
    if how == "replaced":
        os.replace(other, path)
        expect = "was replaced under this sweep"
    elif how == "removed":
        os.remove(path)
        expect = "was removed under this sweep"
    elif how == "overwritten":                   # the same file, another store's contents (cp onto it)
        shutil.copyfile(other, path)
        expect = "was changed under this sweep"
    else:
        db = sqlite3.connect(path)
        db.execute(f"DROP TABLE {how.split()[0]}")
        db.commit()
        db.close()
        expect = "was changed under this sweep"
    with pytest.raises(StoreChanged, match=expect + r".*; nothing more was written to it$") as err:
        st.add_rows([_row(seed=1)])
    assert "\n" not in str(err.value)
    with pytest.raises(StoreChanged, match=expect):
        st.claim(0.6, [(0.05, 1)], [2])
    st.release(0.6, [(0.5, 1)])               # nothing to give back in a store that is not ours: no error
    st.close()
    if how in ("replaced", "overwritten"):   # the other spec's store: its one row, under its own metadata
        assert Store(path).base == {"lr": 0.9} and _count(path) == 5


def _spec_file(tmp_path, name, **kw):
    f = tmp_path / f"{name}.toml"
    f.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in {**SMALL, **kw}.items()))
    return f


def test_two_sweeps_of_different_specs_started_together_never_mix(tmp_path):
    """Two `paretofl pretrial` processes of different specs, released at the
    same instant (a barrier: both wait for one wall-clock time) into one new
    store: one trains, the other is refused in one line (exit 2), and the
    store holds the runs of one spec only, under that spec's metadata.
    Three tries (the report saw the mix twice in two)."""
    pytest.importorskip("torch")
    a, b = _spec_file(tmp_path, "a", lr=0.2), _spec_file(tmp_path, "b", lr=0.3)
    outcomes = []
    for attempt in range(3):
        path = tmp_path / f"shared{attempt}.sqlite"
        start = time.time() + 4.0                # after both have imported and loaded the data
        code = ("import sys, time; from paretofl.cli import main; from paretofl import api; "
                "spec = api.spec(sys.argv[1]); from paretofl.pretrial.sweep import prepared; prepared(spec); "
                "time.sleep(max(0.0, float(sys.argv[3]) - time.time())); "
                "sys.exit(main(['pretrial', sys.argv[1], '--out', sys.argv[2], '--json']))")
        procs = [subprocess.Popen([PY, "-c", code, str(f), str(path), repr(start)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for f in (a, b)]
        outs = [p.communicate(timeout=600) for p in procs]
        rcs = sorted(p.returncode for p in procs)
        assert rcs == [0, 2], outs
        loser = outs[[p.returncode for p in procs].index(2)][1]
        assert loser.count("\n") == 1 and "different spec" in loser, loser
        winner = json.loads(outs[[p.returncode for p in procs].index(0)][0])
        st = Store(path)
        won_lr = st.base["lr"]
        st.close()
        n = len(Spec.from_dict(SMALL).configurations())
        assert winner["runs_total"] == n == len(read_table(path)["sigma"])   # one spec's rows, all of them
        outcomes.append(won_lr)
    print(f"\nwinning specs (lr) over {len(outcomes)} simultaneous starts: {outcomes}; never mixed")


def test_a_store_removed_under_a_running_sweep_ends_it_in_one_clean_line(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from paretofl.pretrial import sweep

    path = tmp_path / "gone.sqlite"
    real = sweep.run_job
    calls = []

    def job_then_remove(spec, job, on_round=None, on_rows=None):
        calls.append(job)
        if len(calls) == 2:
            os.remove(path)
        return real(spec, job, on_round=on_round, on_rows=on_rows)

    monkeypatch.setattr(sweep, "run_job", job_then_remove)
    spec = Spec.from_dict({**SMALL, "chunk": 1})
    with pytest.raises(StoreChanged, match=f"the store {path} was removed under this sweep; nothing more"):
        sweep.run_sweep(spec, path, progress=False)
    assert not path.exists()
