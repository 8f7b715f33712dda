"""The import graph of the suite's packages has no cycle, lazy imports included.

Every ``import`` and ``from ... import`` in every module of ``sde_sim``, ``estimators``,
``kernels``, ``verify`` and ``figures`` is an edge, wherever it stands (a function-level import
hides a cycle from the interpreter, not from this test). An import of ``a.b.c`` also runs the
packages ``a.b`` and ``a`` first: those are edges too, except to the importer's own parent
packages (which are already running when it is imported). The test fails with each cycle's
modules named.
"""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT

PACKAGES = ("sde_sim", "estimators", "kernels", "verify", "figures")
# The KLA family still lives in `kernels.functional.kla` and `kernels.triton.kla_scan`; the KLA
# part of issue 15 moves it to `kernels.ops.kla` (and with it their cycle through `_prepare`).
# Until that merge, imports of these two modules are left out of the graph; delete this set
# with the move.
PENDING = {"kernels.functional.kla", "kernels.triton.kla_scan"}


def _modules() -> dict[str, tuple[bool, ast.Module]]:
    """``{dotted name: (is a package __init__, parsed source)}`` for every module."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = (is_package, ast.parse(path.read_text(), filename=str(path)))
    return found


def _targets(name: str, is_package: bool, node, modules) -> list[str]:
    """The modules an import statement runs (the deepest module of each imported name)."""
    if isinstance(node, ast.Import):
        dotted = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = name.split(".") if is_package else name.split(".")[:-1]
            anchor = here[: len(here) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        dotted = [f"{base}.{alias.name}" for alias in node.names]
    out = []
    for target in dotted:
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts:
            out.append(".".join(parts))
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (is_package, tree) in modules.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(name, is_package, node, modules):
                if target in PENDING or name in PENDING:
                    continue
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    step = ".".join(parts[:i])
                    if step in modules and step not in own and step != name:
                        graph[name].add(step)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in graph:
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
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_has_no_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_check_sees_a_cycle_hidden_in_a_function():
    """The checker itself: a lazy import closing a loop is a cycle."""
    graph = {"a": {"b"}, "b": set(), "c": {"a"}}
    assert _cycles(graph) == []
    graph["b"].add("c")
    assert _cycles(graph) == [["a", "b", "c"]]
    lazy = ast.parse("def f():\n    import kernels.ops.afa.params\n")
    node = next(n for n in ast.walk(lazy) if isinstance(n, ast.Import))
    modules = _modules()
    assert _targets("kernels.ops.afa.triton", False, node, modules) == ["kernels.ops.afa.params"]
    assert "kernels.ops.afa.params" in _graph()["kernels.ops.afa.triton"]
