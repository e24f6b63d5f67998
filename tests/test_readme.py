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
