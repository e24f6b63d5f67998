"""Shared fixtures.  ``device``: a test taking it runs on the CPU and, where
PyTorch sees a CUDA GPU, again on it (skipped, and counted as skipped,
elsewhere).  CI has no GPU; the CUDA runs are for a machine that has one."""

from pathlib import Path

import pytest
import torch

CUDA = torch.cuda.is_available()

if CUDA:
    # The CUDA runs are checked against float32/float64 references at float32
    # tolerances; TF32 (PyTorch's default for cuDNN convolutions) rounds to
    # 10 mantissa bits, so it is off in the tests.  The engine itself keeps
    # PyTorch's defaults.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no CUDA device"))]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


#: what the CLI fuzz tried, per command and per class of bad input (tests/test_fuzz_cli.py fills them);
#: what the API fuzz tried, per class (tests/test_fuzz_api.py)
FUZZ_TRIED: dict = {}
FUZZ_CLASSES: dict = {}
FUZZ_API: dict = {}
#: trainings fuzzed into doing less than asked, per class (tests/test_fuzz_api.py): each flagged incomplete
FUZZ_INCOMPLETE: dict = {}
#: issue 45: members tried of each class of figure that could contradict itself (tests/test_fuzz_api.py), and of
#: each class of refusal that must name a way out that works (tests/test_fuzz_cli.py)
FUZZ_FIGURES: dict = {}
FUZZ_WAYS_OUT: dict = {}


def pytest_terminal_summary(terminalreporter):
    """Say how many bad invocations the fuzz tests tried: per command, and
    how many members of each class of bad input."""
    if FUZZ_TRIED:
        per = ", ".join(f"{k} {v}" for k, v in sorted(FUZZ_TRIED.items()))
        terminalreporter.write_line(f"CLI fuzz: {sum(FUZZ_TRIED.values())} bad invocations tried, each refused "
                                    f"in one line with nothing written ({per})")
        per = "; ".join(f"{k}: {v}" for k, v in sorted(FUZZ_CLASSES.items()))
        terminalreporter.write_line(f"CLI fuzz, members of each class of bad input: {per}")
    if FUZZ_API:
        per = "; ".join(f"{k}: {v}" for k, v in sorted(FUZZ_API.items()))
        terminalreporter.write_line(f"API fuzz: {sum(FUZZ_API.values())} bad calls, each a ValueError; per class: "
                                    f"{per}")
    if FUZZ_INCOMPLETE:
        per = "; ".join(f"{k}: {v}" for k, v in sorted(FUZZ_INCOMPLETE.items()))
        terminalreporter.write_line(f"training fuzz: {sum(FUZZ_INCOMPLETE.values())} runs short of what was asked, "
                                    f"each complete=False with its reason (or refused before training); per class: {per}")
    if FUZZ_FIGURES:
        per = "; ".join(f"{k}: {v}" for k, v in sorted(FUZZ_FIGURES.items()))
        terminalreporter.write_line(f"figures fuzz: {sum(FUZZ_FIGURES.values())} designs and fits checked against "
                                    f"themselves; members per class: {per}")
    if FUZZ_WAYS_OUT:
        per = "; ".join(f"{k}: {v}" for k, v in sorted(FUZZ_WAYS_OUT.items()))
        terminalreporter.write_line(f"refusal fuzz: {sum(FUZZ_WAYS_OUT.values())} refusals, each naming a way out "
                                    f"that was then tried; members per class: {per}")


def torch_threads(n: int):
    """A module's autouse fixture: ``n`` torch threads for its tests, the
    count before restored after them (set at import, a module's count leaked
    into the modules collected beside it).  ``_threads = torch_threads(2)``."""
    @pytest.fixture(autouse=True, scope="module")
    def _threads():
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        yield
        torch.set_num_threads(before)
    return _threads


#: the shipped LR fit until 2026-11-27, scored on the test split: the behaviour snapshots were written with it
TEST_SCORED_FIT = Path(__file__).parent / "data" / "lr_fmnist_fit_test_scored.json"


@pytest.fixture()
def test_scored_shipped_fit(monkeypatch):
    """The default κ read from the fit the behaviour snapshots were written with (the shipped fit is the
    held-out pre-trial's since 2026-11-27); ``pytestmark = pytest.mark.usefixtures("test_scored_shipped_fit")``."""
    import paretofl.recommendation as rec

    shipped = rec.shipped_fit
    monkeypatch.setattr(rec, "shipped_fit", lambda name="lr_fmnist": TEST_SCORED_FIT if name == "lr_fmnist"
                        else shipped(name))
