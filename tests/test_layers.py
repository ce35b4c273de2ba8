"""The layering of the first-party packages, read from the source with ``ast``: every import, at
module level or inside a function, is an edge of the import graph.

    experiments.cli  ->  experiments  ->  bpo  ->  envs        (an arrow: "may import")

No cycles among the modules; the command line, ``experiments.cli``, is the top layer: it may import
anything and only the console script's entry point (``experiments.program``, which sets the signal
mask first) imports it; ``bpo`` and ``envs`` never import ``experiments``; ``envs`` imports
nothing from ``bpo``; inside ``bpo`` imports point down through its folders:
core -> config -> infra -> instruments -> agents -> runners -> training.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bpo", "envs", "experiments")
# The command line, the top layer: it may import any module, and only the script's entry point imports it.
COMMAND_LINE = "experiments.cli"
# The console script ``bpo``: blocks the stop signals before any import (bpo.infra.processes), then runs the
# command line; it imports nothing else of ours, and nothing imports it.
ENTRY_POINT = "experiments.program"


@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the first-party packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _owning_module(name: str) -> str:
    """The longest prefix of a dotted name that is a first-party module (``bpo.config.schema.replace`` ->
    ``bpo.config.schema``)."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute package of ``from ... import`` in ``module`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_package = modules()[module].name == "__init__.py"
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(module: str) -> set[str]:
    """First-party modules that ``module`` imports anywhere in its source."""
    tree = ast.parse(modules()[module].read_text(), filename=str(modules()[module]))
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = _absolute(module, node)
            # ``from pkg import name``: the module pkg.name when there is one, else pkg itself.
            names = [f"{package}.{alias.name}" if f"{package}.{alias.name}" in modules() else package
                     for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                owner = _owning_module(name)
                if owner and owner != module:
                    targets.add(owner)
    return targets


@cache
def import_graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(imported_modules(module)) for module in modules()}


def reachable(graph: dict[str, frozenset[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (depth-first)."""
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def strongly_connected_components(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Modules that reach each other, grouped; a group of more than one module is an import cycle.
    (Quadratic in the number of modules, which is about a hundred.)"""
    reach = {node: reachable(graph, node) for node in graph}
    components, placed = [], set()
    for node in sorted(graph):
        if node not in placed:
            component = sorted({node} | {m for m in reach[node] if node in reach.get(m, ())})
            placed.update(component)
            components.append(component)
    return components


def _cycle_in(component: list[str], graph) -> list[str]:
    """One concrete cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(m for m in graph[path[-1]] if m in members)
        if start in nxt and len(path) > 1:
            return path + [start]
        unvisited = [m for m in nxt if m not in seen]
        if not unvisited:  # dead end inside the component: fall back to listing it
            return component
        path.append(unvisited[0])
        seen.add(unvisited[0])


def test_the_graph_sees_every_package_and_function_level_imports():
    graph = import_graph()
    assert {COMMAND_LINE, "bpo.config.schema", "envs", "experiments.sweep"} <= set(graph)
    assert "bpo.config.schema" in graph[COMMAND_LINE]  # a module-level import
    assert "experiments.commands" in graph[COMMAND_LINE]  # imported inside main()


def test_components_find_cycles():
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert [c for c in strongly_connected_components(graph) if len(c) > 1] == [["a", "b", "c"]]
    assert _cycle_in(["a", "b", "c"], graph) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    graph = import_graph()
    cycles = [c for c in strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(
        f"  {' -> '.join(_cycle_in(c, graph))}   (modules: {', '.join(c)})" for c in cycles)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _edges(importers: str, imported: str) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                  if _in(a, importers) and _in(b, imported))


def test_bpo_and_envs_do_not_import_experiments():
    assert not _edges("bpo", "experiments") + _edges("envs", "experiments")


def test_envs_import_nothing_from_bpo():
    assert not _edges("envs", "bpo")


def test_nothing_imports_the_command_line_but_the_script_s_entry_point():
    assert [edge for package in PACKAGES for edge in _edges(package, COMMAND_LINE)] == \
        [f"{ENTRY_POINT} -> {COMMAND_LINE}"]
    assert not [edge for package in PACKAGES for edge in _edges(package, ENTRY_POINT)]
    assert import_graph()[ENTRY_POINT] == {COMMAND_LINE}


# The folders of ``bpo`` by kind, lowest first (docs/design.md): a module imports only modules of
# its own folder or a lower one. The package's own ``__init__`` applies the process-wide runtime
# settings, so it ranks with the run infrastructure.
BPO_LAYERS = (("mathematics", "bpo.core"), ("configuration", "bpo.config"), ("run infrastructure", "bpo.infra"),
              ("instruments", "bpo.instruments"), ("learners", "bpo.agents"), ("runners", "bpo.runners"),
              ("training", "bpo.training"))
TOP = len(BPO_LAYERS) + 1  # experiments; then the command line, then the script's entry point


def layer_of(module: str) -> int:
    """0 for envs, 1 to 7 for bpo's folders (BPO_LAYERS), 8 for experiments, 9 for the command
    line, 10 for the script's entry point."""
    if _in(module, "envs"):
        return 0
    if module == ENTRY_POINT:
        return TOP + 2
    if module == COMMAND_LINE:
        return TOP + 1
    if _in(module, "experiments"):
        return TOP
    if module == "bpo":
        return 1 + [name for name, _ in BPO_LAYERS].index("run infrastructure")
    for rank, (_, package) in enumerate(BPO_LAYERS, start=1):
        if _in(module, package):
            return rank
    raise AssertionError(f"{module} is in no folder of bpo: put it in one of {[p for _, p in BPO_LAYERS]}")


def test_every_module_of_bpo_is_in_a_folder_of_its_kind():
    loose = sorted(m for m in modules() if _in(m, "bpo") and m != "bpo"
                   and not any(_in(m, package) for _, package in BPO_LAYERS))
    assert not loose, f"modules of bpo outside its folders: {loose}"
    assert {package for _, package in BPO_LAYERS} <= set(modules())  # each folder is a package


def test_layers_point_down():
    """Every import, in every package: from a module to one of its own layer or a lower one."""
    upward = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                    if layer_of(b) > layer_of(a))
    assert not upward, "imports from a higher layer:\n  " + "\n  ".join(upward)


def test_layer_ranks():
    assert [layer_of(m) for m in ("envs.functional", "bpo.core.returns", "bpo.config.schema", "bpo.infra.publish",
                                  "bpo.instruments.probe", "bpo.agents.bpo", "bpo.agents.learner",
                                  "bpo.runners.host", "bpo.training.run", "experiments.sweep",
                                  "experiments.commands", COMMAND_LINE, ENTRY_POINT)] == \
        [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10]
    assert layer_of("bpo") == layer_of("bpo.infra.runtime")
