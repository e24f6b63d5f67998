"""The house's layers, held by a test (docs/architecture.md).

Every import in paretofl — at module level or inside a function, where
the heavy ones are — is read from the source.  Dependencies point one way:

    cli → api → integrations, validate → pretrial, plots → recommendation,
    budgets → fl → mechanisms → theory

A module may import its own layer or a lower one, never a higher one; no
two modules import each other, directly or round a circle; theory and the
mechanisms never import torch (``paretofl design`` starts without it); the
command line imports the API and nothing else of paretofl.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "paretofl"

#: lowest first; a module's layer is that of its longest matching prefix
LAYERS = [
    ("paretofl.theory", "paretofl.progress", "paretofl.shell"),
    ("paretofl.mechanisms",),
    ("paretofl.fl",),
    ("paretofl.budgets", "paretofl.recommendation"),
    ("paretofl.pretrial", "paretofl.plots"),
    ("paretofl.validate", "paretofl.integrations"),
    ("paretofl.api",),
    ("paretofl.cli",),
    ("paretofl",),          # the package itself re-exports the API
]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (i, p)
    assert best is not None, module
    return best[0]


def _imports(path: Path) -> set[str]:
    """The paretofl modules ``path`` imports (anywhere in it)."""
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "paretofl"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "paretofl":
                continue
            for a in node.names:      # "from . import api" names a module
                sub = f"{target}.{a.name}"
                is_module = (ROOT.parent / (sub.replace(".", "/") + ".py")).exists() or \
                    (ROOT.parent / sub.replace(".", "/")).is_dir()
                out.add(sub if is_module else target)
    out.discard(mod)
    return out


GRAPH = {_module(p): _imports(p) for p in ROOT.rglob("*.py")}


def test_every_module_has_a_layer():
    for m in GRAPH:
        _layer(m)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_points_up(module):
    up = sorted(t for t in GRAPH[module] if _layer(t) > _layer(module))
    assert not up, f"{module} imports a layer above it: {up}"


def test_no_circles():
    """No module reaches itself through its imports (a package's __init__
    and what it re-exports aside: importing a package runs its __init__)."""
    def deps(m):
        return {t for t in GRAPH.get(m, ()) if not m.startswith(t + ".")}

    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for t in sorted(deps(m)):
            visit(t)
        stack.pop()

    for m in sorted(GRAPH):
        visit(m)
    assert not cycles, cycles[:3]


def test_theory_and_the_mechanisms_never_import_torch():
    for path in list((ROOT / "theory").rglob("*.py")) + list((ROOT / "mechanisms").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] in ("torch", "opacus", "torchvision") for n in names), path


def test_the_command_line_imports_only_the_api():
    assert GRAPH["paretofl.cli"] == {"paretofl.api"}


def test_the_checker_sees_an_upward_import(tmp_path):
    """The test can fail: a trainer module importing the pre-trials is
    an upward arrow, and its layers say so."""
    assert _layer("paretofl.fl.engine") < _layer("paretofl.pretrial.spec")
    assert _layer("paretofl.mechanisms.aggregate") < _layer("paretofl.recommendation")


#: the accountant's inner parts: outside paretofl/theory/ ε is reached through account() (or Charge.epsilon and
#: Mechanism.epsilon, which call it); fl/prv.py is another accountant (Opacus's PRV), reported beside it
ACCOUNTANT_INSIDES = {"RDPAccountant", "compute_epsilon", "rdp_to_epsilon", "best_epsilon", "compose_epsilon"}


def _names_from_theory(tree) -> set:
    """Names a module imports from paretofl.theory.privacy / .ledger, and attributes it reads off ``privacy``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(("theory.privacy", "privacy")):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "privacy":
            out.add(node.attr)
    return out


def test_epsilon_is_reached_through_one_entry_point():
    bad = {}
    for path in ROOT.rglob("*.py"):
        if "theory" in path.relative_to(ROOT).parts or path.name == "prv.py":
            continue
        got = _names_from_theory(ast.parse(path.read_text())) & ACCOUNTANT_INSIDES
        if got:
            bad[str(path.relative_to(ROOT))] = sorted(got)
    assert not bad, bad


def test_the_entry_point_check_sees_a_second_route():
    """The check can fail: a module importing the RDP accountant directly is found."""
    tree = ast.parse("from ..theory.privacy import RDPAccountant, account\nfrom .theory import privacy\n"
                     "x = privacy.compute_epsilon(1, 1, 1, 1)\n")
    assert _names_from_theory(tree) & ACCOUNTANT_INSIDES == {"RDPAccountant", "compute_epsilon"}
