"""The import rules of the layout: layers point one way, no cycles, the core needs no extra.

Edges are read from the source (``ast``): every ``import`` counts, also one inside a function
(a lazy import is still a dependency); one under ``if TYPE_CHECKING:`` does not. An edge goes to
the most specific module named (``from callgate.temporal import _nodes`` is an edge to
``callgate.temporal._nodes``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: each part of the package, and the parts it may import (the root modules are "base")
LAYERS: dict[str, set[str]] = {
    "base": set(),  # _errors, _model, _jsonlimits, _aliases
    "abstraction": {"base"},
    "matchers": {"base", "abstraction"},
    "temporal": {"base"},
    "policy": {"base", "matchers"},
    "audit": {"base"},
    # guards: the fingerprints in PostgreSQL reuse the audit store's connections and locks
    "guards": {"base", "matchers", "policy", "audit"},
    "sandbox": {"base", "matchers", "policy"},
    "kernel": {"base", "abstraction", "matchers", "temporal", "policy", "audit", "guards",
               "sandbox"},
    "manifest": {"base", "matchers", "policy", "kernel"},  # discovery finds declared tools
    "testing": {"base", "kernel", "policy", "temporal", "audit"},
    # policy tests: cases run on a fresh kernel, and pinned from a recorded run
    "policytest": {"base", "kernel", "policy", "audit"},
    # replay: a recorded run through a fresh kernel, its guards rebuilt from settings
    "replay": {"base", "kernel", "policy", "audit", "guards"},
    "executors": {"base", "abstraction", "matchers", "policy", "sandbox"},
    "integrations": {"base", "kernel", "policy", "audit", "temporal", "abstraction"},
    # measuring detection on recorded runs: the abstraction and the language, no kernel
    "evaluation": {"base", "abstraction", "temporal", "policy"},
    # compiling a skill's specification: the language, the abstraction for sample traces
    "compile": {"base", "abstraction", "temporal", "policy"},
    # the sidecar's client: the values it returns and the receipt check
    "client": {"base", "temporal", "integrations"},
    "cli": {"base", "abstraction", "matchers", "temporal", "policy", "audit", "guards",
            "sandbox", "manifest", "kernel", "executors", "integrations", "evaluation",
            "client", "policytest", "replay", "compile"},
    "facade": {"base", "kernel", "policy"},  # callgate/__init__.py
    # the program's entry: the Claude Code hook's fast path, else the command line
    "entry": {"integrations", "cli"},
}
CORE = ("base", "matchers", "policy", "kernel", "temporal", "audit")
#: the one module of the core that imports an extra: the Z3 reference engine (``--engine smt``)
SOLVER = "callgate.temporal._smt"
#: the modules of the core that import the postgres extra: the PostgreSQL stores, which
#: ``open_store`` imports only for a ``postgresql://`` URL
POSTGRES = ("callgate.audit._pgschema", "callgate.audit._postgres")
OPTIONAL = ("z3", "tree_sitter", "tree_sitter_bash", "tree_sitter_javascript", "httpx",
            "sqlglot", "starlette", "uvicorn", "psycopg")


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "callgate").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, *, typing_only: bool = False) -> set[str]:
    """What ``module`` imports at run time, or with ``typing_only`` also for type checking."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    skip = set() if typing_only else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking(node)
        for body in node.body for n in ast.walk(body)}
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                deeper = f"{base}.{alias.name}"
                found.add(deeper if deeper in MODULES else base)
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    if module == "callgate":
        return "facade"
    if module == "callgate._entry":
        return "entry"
    if (len(parts) == 2 and parts[1].startswith("_")) or parts[1] == "_aliases":
        return "base"
    return parts[1]


GRAPH = {m: {i for i in _imports(m) if i.startswith("callgate")} - {m} for m in MODULES}
#: with the imports made for type checking only: the layers hold for those too
TYPED = {m: {i for i in _imports(m, typing_only=True) if i.startswith("callgate")} - {m}
         for m in MODULES}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith(".__main__")))
def test_a_module_imports_only_from_the_parts_below_it(module: str) -> None:
    # (a ``__main__`` module is an entry point, like the console script: not a layer)
    part = _part(module)
    allowed = LAYERS[part] | {part}
    wrong = sorted(i for i in TYPED[module] if _part(i) not in allowed)
    assert not wrong, f"{module} ({part}) imports {wrong}"


def test_the_layers_themselves_have_no_cycle() -> None:
    seen: dict[str, int] = {}

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, f"layer cycle: {' -> '.join((*path, part))}"
        for below in LAYERS[part]:
            visit(below, (*path, part))
        seen[part] = 1

    for part in LAYERS:
        visit(part, ())


def test_no_module_is_in_an_import_cycle() -> None:
    # Tarjan's strongly connected components; a package's __init__ re-exporting its own
    # modules is the package's facade, not a cycle: edges from a module to its own package
    # __init__ are not counted.
    def own_package(src: str, dst: str) -> bool:
        return MODULES[dst].name == "__init__.py" and src.startswith(dst + ".")

    edges = {m: {d for d in GRAPH[m] if d in MODULES and not own_package(m, d)}
             for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    assert not cycles, cycles


def test_the_core_imports_no_optional_dependency() -> None:
    core = sorted(m for m in MODULES if _part(m) in CORE and m != SOLVER
                  and m not in POSTGRES)
    code = (f"import importlib, sys\nfor m in {core!r}:\n    importlib.import_module(m)\n"
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r})\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
