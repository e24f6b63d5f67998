"""Progress on every long command (issue 45, item 2): one helper,
:mod:`paretofl.progress`, draws the bar of train, pretrial, tune, validate
and audit on stderr when it is a terminal and not under --json."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from paretofl.progress import Progress, shown

PY = sys.executable


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_bar_is_drawn_only_on_a_terminal_and_when_wanted():
    tty, pipe = _Terminal(), io.StringIO()
    assert shown(True, tty) and not shown(False, tty) and not shown(True, pipe)
    for f, wanted in ((pipe, True), (tty, False)):
        with Progress(5, "train", "round", wanted=wanted, file=f) as bar:
            bar.update(5)
        assert f.getvalue() == "" and not bar.active
    with Progress(5, "train", "round", file=tty) as bar:
        bar.note(best_acc="0.500")
        time.sleep(0.15)            # tqdm redraws at most every 0.1 s
        bar.update(2)
    text = tty.getvalue()
    assert "train" in text and "2/5" in text and "round" in text


def test_a_long_step_still_shows_time_moving():
    """One round of a huge local-epoch run: no update for seconds, but the
    heartbeat redraws the bar with its elapsed time."""
    tty = _Terminal()
    bar = Progress(1, "dpfedavg", "round", file=tty, tick=0.05)
    time.sleep(0.2)
    drawn = tty.getvalue().count("\r")
    time.sleep(1.3)
    later = tty.getvalue()
    bar.close()
    assert later.count("\r") > drawn + 3           # redrawn without an update
    assert "00:01" in later                        # and the elapsed time moved
    assert bar._beat is None                       # the heartbeat stopped with the bar


def test_a_bar_closed_twice_or_never_shown_is_harmless():
    bar = Progress(3, "x", "run", wanted=False)
    bar.update(1)
    bar.note(a=1)
    bar.close()
    bar.close()


def _under_a_terminal(args, timeout=240):
    """Run the CLI with its stderr on a pseudo-terminal; (rc, stdout, stderr)."""
    pty = pytest.importorskip("pty")
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    # a terminal of 24 x 100 (a fresh pseudo-terminal is 0 x 0, where tqdm draws nothing)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = dict(os.environ)
    p = subprocess.Popen([PY, "-m", "paretofl.cli", *args], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:        # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    out = p.stdout.read().decode()
    p.wait(timeout=timeout)
    os.close(master)
    return p.returncode, out, b"".join(chunks).decode(errors="replace")


_TRAIN = ["train", "--dataset", "digits", "--model", "lr", "--clients", "4", "--rounds", "3", "--epsilon", "50",
          "--lr", "0.5", "--sigma", "0.3"]


def test_train_shows_its_rounds_on_a_terminal_and_nothing_under_json():
    pytest.importorskip("torch")
    rc, out, err = _under_a_terminal(_TRAIN)
    assert rc == 0, err
    assert "round" in err and "/3" in err, err       # the bar: rounds done of 3
    assert "test accuracy" in out
    rc, out, err = _under_a_terminal([*_TRAIN, "--json"])
    assert rc == 0 and "/3" not in err, err
    r = subprocess.run([PY, "-m", "paretofl.cli", *_TRAIN], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and "/3" not in r.stderr     # not a terminal: nothing


def test_audit_shows_its_runs_on_a_terminal():
    rc, out, err = _under_a_terminal(["audit", "--mechanism", "client-aggregate", "--runs", "2000"])
    assert rc == 0, err
    assert "audit" in err and "run" in err and "/" in err, err


def test_pretrial_shows_its_replica_rounds_on_a_terminal(tmp_path, monkeypatch):
    """The sweep's bar (pretrial, validate) is the same helper, on stderr."""
    pytest.importorskip("torch")
    from paretofl.pretrial.spec import Spec
    from paretofl.pretrial.sweep import run_sweep

    spec = Spec.from_dict(dict(dataset="digits", public_fraction=1.0, clients=5, model="lr", q=[0.6], sigmas=[0.5],
                               rounds=[2, 3], seeds=1, clip=0.5, lr=0.2, batch_size=32))
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    run_sweep(spec, tmp_path / "p.sqlite", progress=True)
    assert "pretrial" in tty.getvalue() and "replica-round" in tty.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    run_sweep(spec, tmp_path / "q.sqlite", progress=True)
    assert pipe.getvalue() == ""
