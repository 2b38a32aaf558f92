"""No import cycles in the package: every import statement of every ``pipeaudit`` module
(module level and inside functions; ``if TYPE_CHECKING:`` blocks left out) is an edge, and
the graph must have no cycle. Lazy imports inside functions count: they hide a cycle from
the interpreter, not from the design."""

from __future__ import annotations

import ast
from pathlib import Path
from tests.support.paths import REPO

PACKAGE = REPO / "pipeaudit"

#: Cycles known and not fixed yet (none: the package's __init__ reaches the API lazily, and
#: the facts the run and the job both report live in audit/summary.py). The test fails on
#: any cycle not listed here.
KNOWN_CYCLES: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    """Module name -> file, including compiled extensions (named by their C source)."""
    mods: dict[str, Path] = {}
    for p in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.c")):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph() -> dict[str, set[str]]:
    """Module -> the pipeaudit modules it imports."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        if path.suffix != ".py":
            continue
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges = graph[mod]

        class Imports(ast.NodeVisitor):
            def visit_If(self, node: ast.If) -> None:
                if _is_type_checking(node.test):
                    for child in node.orelse:
                        self.visit(child)
                    return
                self.generic_visit(node)

            def visit_Import(self, node: ast.Import) -> None:
                for alias in node.names:
                    target = resolve(alias.name) if alias.name.startswith("pipeaudit") else None
                    if target and target != mod:
                        edges.add(target)

            def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if not source.startswith("pipeaudit"):
                    return
                for alias in node.names:  # a submodule by name, or a name of the module
                    full = f"{source}.{alias.name}"
                    target = full if full in mods else resolve(source)
                    if target and target != mod:
                        edges.add(target)

        Imports().visit(ast.parse(path.read_text(), str(path)))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_the_graph_sees_the_imports() -> None:
    """The walker finds real edges (a test that could not fail would prove nothing)."""
    graph = import_graph()
    assert "pipeaudit.trace.source" in graph["pipeaudit.trace.decode"]
    assert "pipeaudit.trace._kscan" in graph["pipeaudit.trace.scanner"]  # the compiled module
    assert "pipeaudit.trace.cut" in graph["pipeaudit.trace.decode"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    in_trace = [sorted(c) for c in found if any(m.startswith("pipeaudit.trace") for m in c)]
    assert not in_trace, f"import cycles in pipeaudit.trace: {in_trace}"
    unknown = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unknown, f"new import cycles: {unknown}"


def test_the_trace_layer_does_not_reach_up_to_the_start_up() -> None:
    """The pool is the trace layer's (trace/pool.py); the command's start-up
    (``pipeaudit.prestart``) and the CLI use it, never the other way round."""
    graph = import_graph()
    assert "pipeaudit.trace.pool" in graph["pipeaudit.prestart"]
    for name, targets in graph.items():
        if name.startswith("pipeaudit.trace"):
            up = {t for t in targets if t == "pipeaudit.prestart" or t.startswith("pipeaudit.cli")}
            assert not up, f"{name} imports {sorted(up)}"
