"""The README's examples run: every Python block, and every `$ paretofl ...`
block prints the lines the README shows."""

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PY_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
CONSOLE = list(re.findall(r"```\n(\$ paretofl .*?)```", README, flags=re.S))


def test_the_readme_is_a_guide_not_a_diary():
    assert README.startswith("# paretofl") and "make demo" in README[:400] and "make test" in README[:400]
    assert len(README.splitlines()) <= 250


@pytest.mark.parametrize("code", PY_BLOCKS, ids=[f"python{i}" for i in range(len(PY_BLOCKS))])
def test_python_examples_run(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert out.getvalue().strip()


@pytest.mark.parametrize("block", CONSOLE, ids=[f"console{i}" for i in range(len(CONSOLE))])
def test_console_examples_print_what_the_readme_shows(block):
    first, *shown = block.strip().splitlines()
    cmd = shlex.split(first[2:].replace("\\\n", " "))
    r = subprocess.run([sys.executable, "-m", "paretofl.cli", *cmd[1:]], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for line in shown:
        if line.strip() == "...":
            continue
        assert line in lines, line


def test_your_model_section_runs_as_written(tmp_path):
    """The "Fit κ to your own model" block, line by line as a shell runs it,
    in a copy of examples/: every command exits 0 and the design is printed."""
    section = README.split("## Fit κ to your own model", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "your_model.py").write_text((ROOT / "examples" / "your_model.py").read_text())
    script = f'set -e\nparetofl() {{ "{sys.executable}" -m paretofl.cli "$@"; }}\n' + block
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Recommendation for N = 50 clients" in r.stdout and "dpfedavg on your_model:digits" in r.stdout
    shown = re.search(r"# q (\S+), T (\d+), sigma (\S+)", block).groups()   # the design the README shows
    assert f"sample ratio q      {shown[0]}" in r.stdout and f"rounds T            {shown[1]}" in r.stdout
    assert f"noise sigma         {shown[2]}" in r.stdout
    assert (tmp_path / "examples" / "mlp.sqlite").is_file() and (tmp_path / "examples" / "mlp_fit.json").is_file()


def test_budgets_section_runs_as_written(tmp_path):
    """The "Clients with budgets of their own" block, as a shell runs it:
    the budgets file it writes is read, and each group's rate is printed."""
    section = README.split("## Clients with budgets of their own", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    block = block.replace(".venv/bin/paretofl", f'"{sys.executable}" -m paretofl.cli')
    r = subprocess.run(["bash", "-c", "set -e\n" + block], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "3 groups" in r.stdout
    rates = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)$", r.stdout, flags=re.M)
    assert [b for b, *_ in rates] == ["1", "2", "8"] and float(rates[0][2]) < float(rates[2][2])


COMMANDS = list(re.findall(r"```\n(paretofl .*?)```", README, flags=re.S))


def _shell_lines(block):
    """A block's commands, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", block)
    return [re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("block", [pytest.param(b, marks=pytest.mark.slow) if "pretrial" in b else b
                                   for b in COMMANDS], ids=[f"commands{i}" for i in range(len(COMMANDS))])
def test_command_blocks_run_as_written(block, tmp_path):
    """Every plain command block of the README runs as written, in order, in
    a fresh folder with the README's relative paths (pretrials/) in place,
    and each command exits 0 (the pre-trial's block is slow: make test-slow)."""
    import shutil

    shutil.copytree(ROOT / "pretrials", tmp_path / "pretrials")
    for line in _shell_lines(block):
        args = shlex.split(line)
        assert args[0] == "paretofl"
        r = subprocess.run([sys.executable, "-m", "paretofl.cli", *args[1:]], capture_output=True, text=True,
                           cwd=tmp_path, timeout=900)
        assert r.returncode == 0, (line, r.stderr[-2000:])
        assert r.stdout.strip() and "Traceback" not in r.stderr
