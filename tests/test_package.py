"""paretofl as a package: the wheel installs without torch (on this Python
and on the newest one this machine has), answers as the checkout does, and
the library leaves process-wide settings alone."""

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the environment of a fresh shell: no PYTHONPATH (Ray, started by another test, sets one in this process)
CLEAN = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
DESIGN = ["design", "--clients", "100", "--budget", "2", "--max-rounds", "500", "--json"]
KEYS = ("q", "rounds", "sigma", "epsilon", "kappa", "kappa_source", "utility_bound")


def _newest_python():
    """The newest CPython this machine has beside the running one (pyenv)."""
    for v in ("3.13", "3.12"):
        exe = shutil.which(f"python{v}")
        if exe is None:
            continue
        env = {**CLEAN, "PYENV_VERSION": f"{v}.0"}
        r = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True,
                           env=env)
        if r.returncode == 0:
            return exe, env
    return None, None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = out.glob("paretofl-*.whl")
    return whl


def _install(wheel, where, python=None, env=None):
    if python is None:
        venv.EnvBuilder(with_pip=True).create(where)
    else:
        subprocess.run([python, "-m", "venv", str(where)], check=True, env=env, timeout=300)
    py = where / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True,
                       timeout=900, env=CLEAN)
    assert r.returncode == 0, r.stderr[-2000:]
    return py


def _checkout_answer():
    r = subprocess.run([sys.executable, "-m", "paretofl.cli", *DESIGN], capture_output=True, text=True,
                       cwd=ROOT, timeout=300, env=CLEAN)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("which", ["this", "newest"])
def test_wheel_without_torch_answers_as_the_checkout(wheel, tmp_path, which):
    """`pip install paretofl` pulls only the analytic side (no torch); the
    installed `paretofl design` and `paretofl.design(...)` give the
    checkout's answer (the default κ is package data, not a repository
    path)."""
    python, env = (None, None) if which == "this" else _newest_python()
    if which == "newest" and python is None:
        pytest.skip("no newer Python on this machine")
    py = _install(wheel, tmp_path / "venv", python, env)
    probe = subprocess.run([str(py), "-c", "import torch, sys; print(torch.__file__, sys.path)"], capture_output=True,
                           text=True, env=CLEAN, cwd=tmp_path)
    assert probe.returncode != 0, probe.stdout
    r = subprocess.run([str(py.parent / "paretofl"), *DESIGN], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300, env=CLEAN)
    assert r.returncode == 0, r.stderr
    got, want = json.loads(r.stdout), _checkout_answer()
    for k in KEYS:
        assert got[k] == want[k], k
    code = ("import sys, paretofl; d = paretofl.design(n_clients=100, epsilon=2, delta=1e-5, max_rounds=500); "
            "print(d.rounds, repr(d.sigma), 'torch' in sys.modules, paretofl.__version__)")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=CLEAN)
    assert r.returncode == 0, r.stderr
    rounds, sigma, torch_loaded, version = r.stdout.split()
    assert (int(rounds), float(sigma)) == (want["rounds"], want["sigma"]) and torch_loaded == "False"
    assert version == __import__("paretofl").__version__
    # the commands that need the trainer say what to install, in one line
    r = subprocess.run([str(py.parent / "paretofl"), "train", "--dataset", "digits", "--rounds", "1"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300, env=CLEAN)
    assert r.returncode == 2 and "paretofl[train]" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # and so does the API
    code = "import paretofl\ntry:\n    paretofl.train()\nexcept ModuleNotFoundError as e:\n    print(e)"
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=CLEAN)
    assert r.returncode == 0 and "pip install 'paretofl[train]'" in r.stdout, r.stdout + r.stderr


def test_importing_and_using_the_library_changes_no_process_setting():
    """No glibc mallopt, no lasting torch.set_num_threads, no matplotlib
    backend switch behind the user's back: importing paretofl, designing,
    plotting and training leave them as they were."""
    code = r"""
import matplotlib, torch, sys, tempfile, os
backend, threads = matplotlib.get_backend(), torch.get_num_threads()
import paretofl
from paretofl import plots
d = paretofl.design(n_clients=50, epsilon=2, max_rounds=100)
plots.design_figure(d, os.path.join(tempfile.mkdtemp(), "d.png"))
r = paretofl.train(dataset="fashion-mnist", model="lenet", clients=4, rounds=1, batch_rate=0.002, epsilon=50)
assert matplotlib.get_backend() == backend, (matplotlib.get_backend(), backend)
assert torch.get_num_threads() == threads
print("ok")
"""
    env = {**CLEAN, "MPLBACKEND": "svg"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    src = (ROOT / "paretofl").rglob("*.py")
    for f in src:
        text = f.read_text()
        if f.name != "engine.py":
            assert "mallopt" not in text, f
        if f.name != "cli.py":
            assert "matplotlib.use(" not in text, f


def test_no_private_name_is_imported_across_modules():
    """`from x import _name` between paretofl's modules: none."""
    import re

    bad = []
    for f in (ROOT / "paretofl").rglob("*.py"):
        for line in f.read_text().splitlines():
            if re.match(r"\s*from \S+ import .*\b_[a-z]", line) and "__" not in line:
                bad.append(f"{f.relative_to(ROOT)}: {line.strip()}")
    assert not bad, bad


def test_nothing_points_outside_the_repository():
    """Docs and code cite docs/theory.md, never a path outside the repository."""
    hits = []
    for f in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "paretofl").rglob("*.py"),
              *(ROOT / "analysis").rglob("*"), *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
              *(ROOT / "pretrials").rglob("*.md"), *(ROOT / "examples").rglob("*.py")]:
        if f.is_file() and f.suffix in (".md", ".py", ".toml") and f.name != "test_package.py":
            text = f.read_text(errors="ignore")
            if "../shared" in text or "shared/design" in text or "shared/papers" in text:
                hits.append(str(f.relative_to(ROOT)))
    assert not hits, hits
