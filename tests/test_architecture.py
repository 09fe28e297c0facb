"""The package's layering: no import cycle between modules, no import against the layer order.

The order is the ``layers`` block of docs/architecture.md (read here, kept nowhere
else): each line is one layer, top first; a module may import modules of its own
layer or of a layer below. Every import counts -- at module level, inside
functions, under ``TYPE_CHECKING``. Cycles are checked over the imports that run
(type-only imports cannot loop at runtime, but they must still point down).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"

Edge = tuple[str, str, int, bool]
"""(importing module, imported module, line, type-only)"""


def read_layers(doc: str) -> list[list[str]]:
    """The ``layers`` block of the architecture doc: top layer first, comments dropped."""
    m = re.search(r"```text layers\n(.*?)```", doc, re.S)
    assert m, "docs/architecture.md has no ```text layers block"
    rows = [line.split("#", 1)[0].split() for line in m.group(1).splitlines()]
    return [r for r in rows if r]


def package_sources(src: Path) -> dict[str, tuple[str, bool]]:
    """``{module name: (source text, is a package)}`` for every module under ``src/shaledb``."""
    out = {}
    for p in sorted((src / "shaledb").rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (p.read_text(), is_pkg)
    return out


def _type_only(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def imports(modules: Mapping[str, tuple[str, bool]]) -> list[Edge]:
    """Every import of a module of the package by another one (resolved, with its line)."""
    known = frozenset(modules)
    return [e for name, (text, is_pkg) in modules.items() for e in _module_imports(name, text, is_pkg, known)]


@functools.cache
def _module_imports(name: str, text: str, is_pkg: bool, known: frozenset[str]) -> tuple[Edge, ...]:
    package = name.split(".") if is_pkg else name.split(".")[:-1]
    edges: list[Edge] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            guarded = type_only or (isinstance(child, ast.If) and _type_only(child.test))
            targets: Iterable[str] = ()
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package[: len(package) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = (f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in child.names)
            elif isinstance(child, ast.Import):
                targets = (a.name for a in child.names)
            for t in targets:
                if t in known and t != name:
                    edges.append((name, t, child.lineno, guarded))
            visit(child, guarded)

    visit(ast.parse(text), False)
    return tuple(edges)


def unit(module: str) -> str:
    """The folder or top-level module a module belongs to (``shaledb`` for the package's face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(edges: Iterable[Edge], layers: list[list[str]]) -> list[str]:
    rank = {u: i for i, row in enumerate(layers) for u in row}
    return [
        f"{a} -> {b} (line {line}): layer {unit(a)!r} may not import {unit(b)!r}, which sits above it"
        for a, b, line, _ in edges
        if rank[unit(b)] < rank[unit(a)]
    ]


def cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """Groups of modules that import each other at runtime (strongly connected, more than one)."""
    graph: dict[str, set[str]] = {}
    for a, b, _, type_only in edges:
        if not type_only:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def check(modules: Mapping[str, tuple[str, bool]], layers: list[list[str]]) -> list[str]:
    """Every problem with the package's imports, one line each (empty when the layering holds)."""
    listed = {u for row in layers for u in row}
    problems = [
        f"{u!r} is not in the layers of docs/architecture.md"
        for u in sorted({unit(m) for m in modules} - listed)
    ]
    if problems:
        return problems
    edges = imports(modules)
    problems += layer_violations(edges, layers)
    problems += [f"import cycle: {' <-> '.join(group)}" for group in cycles(edges)]
    return problems


@functools.cache
def _read_real() -> tuple[dict[str, tuple[str, bool]], list[list[str]]]:
    return package_sources(SRC), read_layers(DOC.read_text())


def _real() -> tuple[dict[str, tuple[str, bool]], list[list[str]]]:
    """The package and its layers (a fresh copy: tests add modules to it)."""
    modules, layers = _read_real()
    return dict(modules), layers


def test_the_package_follows_its_layers_without_cycles() -> None:
    modules, layers = _real()
    assert check(modules, layers) == []


def test_every_layer_names_something_that_exists() -> None:
    modules, layers = _real()
    units = {unit(m) for m in modules}
    assert [u for row in layers for u in row if u not in units] == []


def test_a_back_import_is_caught() -> None:
    """A codec that imports the writer breaks the order and closes a loop (the writer reads SSTs)."""
    modules, layers = _real()
    text, is_pkg = modules["shaledb.format.sst"]
    modules["shaledb.format.sst"] = (
        text + "\n\ndef _late() -> None:\n    from ..db.writer import Db\n",
        is_pkg,
    )
    problems = check(modules, layers)
    assert any(p.startswith("shaledb.format.sst -> shaledb.db.writer") for p in problems), problems
    assert any(p.startswith("import cycle:") and "shaledb.format.sst" in p for p in problems), problems


def test_a_type_only_back_import_breaks_the_order_but_is_no_cycle() -> None:
    modules, layers = _real()
    text, is_pkg = modules["shaledb.store.base"]
    modules["shaledb.store.base"] = (
        text
        + "\n\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine.wal import WalWriter\n",
        is_pkg,
    )
    problems = check(modules, layers)
    assert any(p.startswith("shaledb.store.base -> shaledb.engine.wal") for p in problems), problems
    assert not any(p.startswith("import cycle:") for p in problems), problems


def test_a_cycle_inside_one_layer_is_caught() -> None:
    modules, layers = _real()
    text, is_pkg = modules["shaledb.compaction.executor"]
    modules["shaledb.compaction.executor"] = (text + "\nfrom . import compactor\n", is_pkg)
    problems = check(modules, layers)
    assert any("shaledb.compaction.compactor <-> shaledb.compaction.executor" in p for p in problems), (
        problems
    )


def test_a_module_outside_the_layers_is_reported() -> None:
    modules, layers = _real()
    modules["shaledb.newthing"] = ("", False)
    assert check(modules, layers) == ["'newthing' is not in the layers of docs/architecture.md"]


def test_bulk_reads_take_their_column_primitives_from_the_engine() -> None:
    """Issue 27: the checkpoint-read engines share cursors and merges with compaction
    through ``engine/columns.py``, not by importing the compaction executor."""
    modules, _layers = _real()
    bad = [
        f"{src} -> {dst} (line {line})"
        for src, dst, line, _t in imports(modules)
        if src.startswith("shaledb.bulk.") and dst.startswith("shaledb.compaction")
    ]
    assert not bad, bad
