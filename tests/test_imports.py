"""The package's import graph: no circle anywhere in ``zhlm/`` (module-level imports and those
inside functions alike: a circle closed at call time still ties the modules together), and the
light entry points stay light: prediction imports no optimizer, reading files and scoring them
import no JAX."""

import ast
import os
import subprocess
import sys

import pytest
from helpers import ROOT

PACKAGE = os.path.join(ROOT, "zhlm")


def _modules() -> dict[str, str]:
    """``{dotted name: path}`` of every module in the package."""
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: str, known: dict) -> set[str]:
    """The package modules ``name`` imports anywhere in its file (a ``from x import y`` names
    the module ``x.y`` when that is one, else ``x``)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if whole in known else base)
    return {m for m in found if m in known and m != name}


def _circle(graph: dict) -> list[str] | None:
    """One circle of ``graph`` (a list of modules, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_in_the_package():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circle(graph) is None, " -> ".join(_circle(graph))


def test_the_circle_finder_finds_one():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize(
    "code, absent",
    [
        ("import zhlm; zhlm.Predictor; zhlm.pipeline", "optax"),
        ("import zhlm.cli.cmrc_eval", "jax"),
        (
            "import pkgutil, importlib, zhlm.finetune.readers as r, zhlm.finetune.metrics as m\n"
            "for p in (r, m):\n"
            "    for info in pkgutil.iter_modules(p.__path__):\n"
            "        importlib.import_module(f'{p.__name__}.{info.name}')",
            "jax",
        ),
    ],
)
def test_light_entry_points_do_not_import_heavy_libraries(code, absent):
    check = f"{code}\nimport sys\nprint({absent!r} in sys.modules)"
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "False"
