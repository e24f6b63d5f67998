"""The house's sizes (issue 47): no function longer than 80 lines, and no
public function (a name without a leading underscore, in a module and class
without one) taking more than 8 parameters (``self``/``cls`` not counted;
``*args`` and ``**kwargs`` count one each).  Measured on the source's syntax
tree, so a function grown past either is named here with its file and line."""

import ast
from pathlib import Path

import paretofl

ROOT = Path(paretofl.__file__).parent
MAX_LINES = 80
MAX_PARAMETERS = 8


def functions():
    """(file:line name, lines, parameters, public) for every function and method of the package."""
    out = []

    def walk(node, where, prefix, public):
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
                out.append((f"{where}:{n.lineno} {prefix}{n.name}", n.end_lineno - n.lineno + 1, count,
                            public and not n.name.startswith("_")))
                walk(n, where, f"{prefix}{n.name}.", False)
            elif isinstance(n, ast.ClassDef):
                walk(n, where, f"{prefix}{n.name}.", public and not n.name.startswith("_"))

    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        public = not any(part.startswith("_") and part != "__init__.py" for part in rel.parts)
        walk(ast.parse(path.read_text()), rel, "", public)
    return out


def test_the_measure_sees_the_package():
    found = functions()
    names = {f[0].split(" ")[1] for f in found}
    assert len(found) > 500 and {"design", "compute_epsilon", "max_steps", "Engine.local_steps"} <= names
    # a public function with many parameters is seen as one
    assert any(n.endswith(" max_steps") and c >= 6 and pub for n, _, c, pub in found)


def test_no_function_is_longer_than_80_lines():
    long = [f"{n}: {lines} lines" for n, lines, _, _ in functions() if lines > MAX_LINES]
    assert not long, "split these:\n" + "\n".join(long)


def test_no_public_function_takes_more_than_8_parameters():
    many = [f"{n}: {c} parameters" for n, _, c, public in functions() if public and c > MAX_PARAMETERS]
    assert not many, "group these parameters (a request object, a tuple) or make the function private:\n" + \
        "\n".join(many)
