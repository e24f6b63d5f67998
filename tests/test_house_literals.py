"""The house rule, held by a test (docs/architecture.md, "adding a
mechanism"): mechanisms live in ``paretofl/mechanisms/``, and no module
outside it names one by a string literal.

Code elsewhere asks the mechanism (its class attributes: ``noise_on``,
``selection``, ``framework``, ``trainable``, ``algorithm``, ...), the
registry (``names(**where)``) or the registry's default
(``mechanisms.DEFAULT``, the one place a mechanism is named as the
default; ``mechanisms.SEARCH``, the design's "auto").  Every module of
paretofl outside ``mechanisms/`` is read with ``ast``; a string constant
that equals a registered mechanism's name is a literal, and so is "auto"
where it is a mechanism's choice (compared with, passed as, or the default
or choices of something called mechanism; "auto" elsewhere is a device's or
a cluster's).  Docstrings (a module's, class's or function's first
statement) and the text of f-strings are prose, not code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import paretofl.mechanisms as mechanisms

ROOT = Path(__file__).resolve().parents[1] / "paretofl"

#: what counts as naming a mechanism: the registry's names
NAMES = frozenset(mechanisms.REGISTRY)

#: paths (relative to the repository) whose literals another change is removing: each with why; empty is the aim


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _prose(tree: ast.AST) -> set[int]:
    """ids of the string pieces of f-strings."""
    return {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
            for v in node.values if isinstance(v, ast.Constant)}


def _about_mechanism(node: ast.AST, parents: dict) -> bool:
    """Is the constant ``node`` a mechanism's choice: compared with, passed
    as, or the default or choices of something called mechanism."""
    up = parents.get(id(node))
    if isinstance(up, (ast.Tuple, ast.List, ast.Set)):       # a choice among others
        node, up = up, parents.get(id(up))
    if isinstance(up, ast.Compare):
        return "mechanism" in ast.unparse(up)
    if isinstance(up, ast.keyword):
        if up.arg == "choices":
            call = parents.get(id(up))
            return any("mechanism" in ast.unparse(a) for a in call.args)
        return "mechanism" in (up.arg or "")
    if isinstance(up, ast.arguments):
        args = up.posonlyargs + up.args
        pairs = list(zip(args[len(args) - len(up.defaults):], up.defaults)) + list(zip(up.kwonlyargs, up.kw_defaults))
        return any(d is node and "mechanism" in a.arg for a, d in pairs)
    if isinstance(up, (ast.Assign, ast.AnnAssign)):
        targets = up.targets if isinstance(up, ast.Assign) else [up.target]
        return any("mechanism" in ast.unparse(t).lower() for t in targets)
    return False


def _found(tree: ast.AST) -> list[ast.Constant]:
    skip = _docstrings(tree) | _prose(tree)
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip
            and (n.value in NAMES or (n.value == mechanisms.SEARCH and _about_mechanism(n, parents)))]


def literals() -> list[str]:
    """Every mechanism named by a string literal outside mechanisms/, as
    "path:line: 'name'", in the order of the files and lines."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        if rel.parts[1] == "mechanisms":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"{rel}:{n.lineno}: {n.value!r}" for n in sorted(_found(tree), key=lambda n: (n.lineno, n.col_offset))]
    return found


def test_the_checker_sees_a_literal(tmp_path):
    """The checker's own parts: a name in code counts, one in a docstring or
    an f-string's prose does not."""
    src = ('"""client-aggregate"""\n'
           'def f(m, strategy="auto", mechanism="auto"):\n'
           '    """nbafl"""\n'
           '    x = f"nbafl {m}"\n'
           '    if mechanism == "auto" or strategy == "auto":\n'
           '        parser.add_argument("--mechanism", choices=("a", "auto"))\n'
           '    return m == "nbafl"\n')
    assert sorted(n.lineno for n in _found(ast.parse(src))) == [2, 5, 6, 7]


def test_no_module_outside_mechanisms_names_a_mechanism():
    found = literals()
    print(f"{len(found)} mechanism literal(s) outside paretofl/mechanisms/")
    assert not found, "ask the mechanism's attributes or the registry instead:\n" + "\n".join(found)


def test_the_default_is_the_registrys():
    assert mechanisms.DEFAULT in mechanisms.REGISTRY
