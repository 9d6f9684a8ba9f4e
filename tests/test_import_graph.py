"""No import loop anywhere in the package, outside ``if TYPE_CHECKING:``.

The floors between the top-level packages are kept by the ``layers`` contract in
``.importlinter`` (run by ``make lint``); this holds the rest: within every package, its
direct children (sub-packages and modules) import each other without a loop, so each
package, and each module, can be read from the bottom up. A lazy import inside a function
counts: it is a loop that only waits for the right call."""

from __future__ import annotations

from collections import defaultdict

import grimp
import pytest


def _child(parent: str, module: str) -> str | None:
    if not module.startswith(parent + "."):
        return None
    return parent + "." + module[len(parent) + 1 :].split(".")[0]


def _loops(adj: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(adj.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return out


def import_loops(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """Every loop among the direct children of every package of ``graph``."""
    modules = graph.modules
    packages = {p for p in modules if any(m.startswith(p + ".") for m in modules)}
    loops: list[tuple[str, ...]] = []
    for package in sorted(packages):
        adj: dict[str, set[str]] = defaultdict(set)
        for m in modules:
            a = _child(package, m)
            if a is None:
                continue
            for d in graph.find_modules_directly_imported_by(m):
                b = _child(package, d)
                if b is not None and b != a:
                    adj[a].add(b)
        loops.extend(_loops(adj))
    return loops


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("preheat", exclude_type_checking_imports=True)


def test_no_import_loop_in_the_package(graph: grimp.ImportGraph) -> None:
    assert import_loops(graph) == []


def test_a_loop_is_found() -> None:
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c", "p.c.x", "p.c.y"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.c.x")
    g.add_import(importer="p.c.y", imported="p.b")
    g.add_import(importer="p.b", imported="p.a")
    g.add_import(importer="p.c.x", imported="p.c.y")  # inside p.c: no loop there
    assert import_loops(g) == [("p.a", "p.b", "p.c")]
