"""The import graph of the five packages: no cycle, and every package on its floor.

Every module of ``sde_sim``, ``estimators``, ``kernels``, ``verify`` and ``figures`` is parsed
with `ast` (nothing is imported), and every ``import`` / ``from ... import`` statement anywhere
in it counts, those inside functions included: a lazy import hides a cycle from Python's import
machinery only until the function runs. The edges of one statement in module ``M``:

* ``import a.b.c`` and ``from a.b.c import name`` reach ``a.b.c``; ``from a.b import c`` reaches
  the submodule ``a.b.c`` when there is one, else ``a.b``; relative imports are resolved
  against ``M``'s package;
* importing ``a.b.c`` also executes the packages ``a`` and ``a.b`` (their ``__init__``), so those
  are edges too, except the packages that contain ``M`` (they are already being initialised
  when ``M`` runs, so no import of them can start a cycle through ``M``).

The second rule catches the cycle through a package's ``__init__``: a module under
``kernels/ops`` that imports ``kernels.functional.lags`` runs ``kernels/functional/__init__``,
which re-exports the ops, which import that module back.

Checks: the graph has no cycle (each strongly connected component larger than one module is
reported with one cycle through it), and the floor rule of DESIGN.md: ``sde_sim`` imports no
other package of ours, ``estimators`` only ``sde_sim``, ``kernels`` none, ``verify`` may import
``sde_sim``, ``estimators`` and ``kernels``, ``figures`` any of those. Not seen: imports by a
computed name (``importlib.import_module(name)`` in ``verify.checks`` and ``figures``); they
point down the same floors. Negative controls show the cycle finder, the edge rules and the
floor check catching what they must.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("sde_sim", "estimators", "kernels", "verify", "figures")
# package -> the packages of ours it may import (DESIGN.md section 1: the floors)
FLOORS = {
    "sde_sim": set(),
    "estimators": {"sde_sim"},
    "kernels": set(),
    "verify": {"sde_sim", "estimators", "kernels"},
    "figures": {"sde_sim", "estimators", "kernels", "verify"},
}


# --- the graph ------------------------------------------------------------------------------------


def discover(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file under each package directory
    (``pkg/__init__.py`` is the module ``pkg``)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _ancestors(module: str) -> list[str]:
    """``a.b.c -> [a, a.b]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve(name: str, known: set[str]) -> str | None:
    """The longest known module that ``name`` or a prefix of it names (None: not ours)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def imported_modules(module: str, source: str, known: set[str], *, is_package: bool) -> set[str]:
    """The modules of ``known`` that the statements of ``source`` (the text of ``module``)
    import, anywhere in the file: the targets of the module docstring's first rule."""
    package = module if is_package else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: against the package, one level up per extra dot
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            names = [f"{stem}.{alias.name}" for alias in node.names]
            names = [n if n in known else stem for n in names]  # a submodule, or the stem
        else:
            continue
        for name in names:
            target = _resolve(name, known)
            if target is not None:
                targets.add(target)
    return targets


def edges_of(module: str, targets: Iterable[str]) -> set[str]:
    """Each target and its packages, less ``module`` and the packages that contain it (the
    module docstring's second rule)."""
    running = {module, *_ancestors(module)}
    out = set()
    for target in targets:
        out.update(m for m in (*_ancestors(target), target) if m not in running)
    return out


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the packages (their modules only)."""
    modules = discover(root, packages)
    known = set(modules)
    graph = {}
    for module, path in modules.items():
        targets = imported_modules(
            module, path.read_text(), known, is_package=path.name == "__init__.py"
        )
        graph[module] = edges_of(module, targets)
    return graph


# --- cycles and floors ----------------------------------------------------------------------------


def components(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module, and the modules importing
    themselves (Tarjan's algorithm): exactly the modules on a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle ``[m0, m1, ..., m0]`` through each of the `components`, sorted."""
    return sorted(_cycle_in(graph, component) for component in components(graph))


def _cycle_in(graph: Mapping[str, Iterable[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the smallest module of ``component`` (breadth first)."""
    start = min(component)
    parents = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for succ in sorted(graph.get(node, ())):
            if succ == start:
                path = [node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if succ in component and succ not in parents:
                parents[succ] = node
                queue.append(succ)
    raise AssertionError(f"no cycle through {start} in its component {sorted(component)}")


def floor_violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """``"importer -> imported"`` for every edge from a package to one its floor forbids."""
    bad = []
    for module, targets in graph.items():
        own = module.partition(".")[0]
        for target in sorted(targets):
            other = target.partition(".")[0]
            if other != own and other not in FLOORS[own]:
                bad.append(f"{module} -> {target}")
    return sorted(bad)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(REPO_ROOT, PACKAGES)


# --- the tree -------------------------------------------------------------------------------------


def test_no_import_cycle(graph):
    report = [
        f"{' -> '.join(_cycle_in(graph, c))}  (all on cycles: {', '.join(sorted(c))})"
        for c in components(graph)
    ]
    assert not report, "import cycles:\n" + "\n".join(sorted(report))


def test_every_package_stays_on_its_floor(graph):
    bad = floor_violations(graph)
    assert not bad, "imports against the floors of DESIGN.md:\n" + "\n".join(bad)


def test_the_graph_sees_the_tree(graph):
    """The parse reaches every package, top-level and lazy imports alike (else the two tests
    above would pass on an empty graph)."""
    assert {m.partition(".")[0] for m in graph} == set(PACKAGES)
    assert len(graph) > 100
    assert "kernels.ops.kla" in graph["kernels.layers.kla"]  # top level
    assert "kernels.ops.kla.triton" in graph["kernels.ops.kla"]  # inside kla_scan: lazy
    assert "kernels.ops.kla.params" in graph["kernels.ops.kla.triton"]
    assert "kernels.ops.kla.scan" not in graph["kernels.ops.kla.triton"]  # params, never torch


# --- negative controls ----------------------------------------------------------------------------


def test_cycle_finder_finds_a_planted_cycle():
    acyclic = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert find_cycles(acyclic) == []
    planted = {**acyclic, "c": {"d"}}  # a -> c -> d -> a, and a -> b -> c -> d -> a
    assert find_cycles(planted) == [["a", "c", "d", "a"]]
    two = {"x": {"y"}, "y": {"x"}, "p": {"p"}, "q": {"x"}}
    assert find_cycles(two) == [["p", "p"], ["x", "y", "x"]]


def test_edges_of_lazy_relative_and_package_imports():
    known = {"pkg", "pkg.sub", "pkg.sub.a", "pkg.sub.b", "pkg.other", "pkg.other.lags"}
    source = (
        "import os\n"
        "from pkg.sub import b\n"  # a submodule: pkg.sub.b
        "from . import b as again\n"  # relative, same
        "from ..other import lags\n"  # relative two levels: pkg.other.lags
        "def f():\n"
        "    from pkg.other import name_in_init\n"  # lazy, a name: the package pkg.other
        "    import pkg.sub.a\n"
    )
    targets = imported_modules("pkg.sub.a", source, known, is_package=False)
    assert targets == {"pkg.sub.b", "pkg.other.lags", "pkg.other", "pkg.sub.a"}
    # the packages that contain pkg.sub.a (and the module itself) are no edges; pkg.other is
    assert edges_of("pkg.sub.a", targets) == {"pkg.sub.b", "pkg.other", "pkg.other.lags"}


def test_a_cycle_through_a_package_init_is_found():
    """``ops.kla.params`` importing ``functional.lags`` runs ``functional/__init__``, which
    imports ``ops.kla``, which imports ``ops.kla.params``: a cycle only the package edge shows."""
    known = {"k", "k.functional", "k.functional.lags", "k.ops", "k.ops.kla", "k.ops.kla.params"}
    sources = {
        "k.functional": ("from k.ops.kla import kla_scan\n", True),
        "k.ops.kla": ("from k.ops.kla.params import prepare\n", True),
        "k.ops.kla.params": ("from k.functional.lags import relaxation\n", False),
    }
    graph = {
        module: edges_of(module, imported_modules(module, text, known, is_package=is_package))
        for module, (text, is_package) in sources.items()
    }
    assert find_cycles(graph) == [["k.functional", "k.ops.kla", "k.ops.kla.params", "k.functional"]]


def test_floor_check_flags_an_upward_import():
    graph = {
        "estimators.kalman": {"sde_sim.models", "verify.checks"},
        "kernels.layers.afa": {"estimators.mle"},
        "figures.fig1": {"verify.training", "kernels.ops.kla"},
        "sde_sim.io": set(),
    }
    assert floor_violations(graph) == [
        "estimators.kalman -> verify.checks",
        "kernels.layers.afa -> estimators.mle",
    ]
