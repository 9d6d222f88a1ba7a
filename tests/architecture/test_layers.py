"""The layout's rules, checked on the source: library <- transforms <- pipeline, and no cycles.

Every import counts, including those inside functions and under ``TYPE_CHECKING``: a lazy
import hides a cycle from the interpreter, not from a reader.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("beameval", "transforms", "pipeline")
LAYER = {"beameval": 0, "transforms": 1, "pipeline": 2}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``module`` imports, with the packages whose ``__init__`` that runs."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            while name:  # importing a.b.c runs a/__init__ and a/b/__init__ first
                if name != module and name in known and not module.startswith(name + "."):
                    targets.add(name)
                name = name.rpartition(".")[0]
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_top_level_names_are_the_three_layers() -> None:
    from setuptools import find_packages

    top = {name.split(".")[0] for name in find_packages(str(ROOT), include=["beameval*", "pipeline*", "transforms*"])}
    assert top == set(PACKAGES)
    stray = {
        path.name
        for path in ROOT.iterdir()
        if (path / "__init__.py").exists() and path.name not in PACKAGES and path.name not in {"tests", "bench"}
    }
    assert stray == set(), f"top-level packages outside the three layers: {stray}"


def test_imports_point_down_only() -> None:
    upward = [
        f"{source} -> {target}"
        for source, targets in _graph().items()
        for target in targets
        if LAYER[target.split(".")[0]] > LAYER[source.split(".")[0]]
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in graph:
        if node not in index:
            visit(node)
    assert cycles == []


def test_library_imports_without_beam() -> None:
    modules = sorted(name for name in _modules() if name.split(".")[0] == "beameval")
    script = textwrap.dedent(
        f"""
        import importlib, sys

        class BlockBeam:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("apache_beam", "pipeline", "transforms"):
                    raise ImportError("blocked: " + name)
                return None

        sys.meta_path.insert(0, BlockBeam())
        for name in {modules!r}:
            if name.endswith("__main__"):
                continue
            importlib.import_module(name)
        print("imported", len({modules!r}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"imported {len(modules)}" in done.stdout
    assert importlib.util.find_spec("beameval") is not None
