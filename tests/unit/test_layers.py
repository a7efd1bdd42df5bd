"""The import direction of docs/architecture.md, checked by walking every import in the package (lazy ones too).

A module may import from its own layer and the layers below it, never from a layer above: a wrong arrow (the data
layer reaching into backends, a method importing a stage, the runtime importing a stage) fails here. The table is
the one docs/architecture.md draws; a new top-level package must be placed in it (the test says so).

No two modules may import each other, directly or around a longer loop (lazy imports inside functions count, and so
does a package's ``__init__`` importing a submodule that imports the package back): each cycle fails with its
members and the imports that close it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.tools.import_policy import module_name

PACKAGE = Path(__file__).resolve().parents[2] / "workbench"

LAYERS: dict[str, int] = {
    "workbench.core": 0,
    "workbench.assets": 1,
    "workbench.embedded": 1,  # data only (the embedded reader adapter), read by path
    "workbench.data": 1,
    "workbench.metrics": 1,
    "workbench.plots": 1,
    "workbench.backends": 2,
    "workbench.uncertainty": 3,
    "workbench.calibration": 3,
    "workbench.classify": 3,
    "workbench.decoding": 3,
    "workbench.methods": 4,
    "workbench.tuning": 5,
    "workbench.routing": 5,
    "workbench.distill": 5,
    "workbench.bundle": 5,
    "workbench.runtime": 5,
    "workbench.scoring": 5,  # score: user records through the stats graph, a bundle through the runtime
    "workbench.serve": 5,
    "workbench.monitoring": 5,  # drift against a bundle's reference: read by serve, monitor, built by export
    "workbench.reports": 5,  # what the reports share (findings, time table, section contract); no stage
    "workbench.stages": 6,
    "workbench.bench": 6,  # the benchmarks: stages of bench recipes, beside the pipeline's
    "workbench.recipe": 6,
    "workbench.bundle.export": 6,  # export loads a finished run's recipe (workbench.recipe); no stage
    "workbench.recalibration": 6,  # recalibrate: refits with the calibrate stage's imputation, writes a bundle version
    "workbench.cli": 7,
    "workbench.doctor": 7,
    "workbench.__main__": 7,
    "workbench": 0,  # the package itself: __version__, and load_bundle re-exported lazily (see ALLOWED)
}
"""Module prefix → layer; the longest matching prefix wins (the bare package name matches only itself)."""

ALLOWED: frozenset[tuple[str, str]] = frozenset({("workbench", "workbench.runtime")})
"""Upward imports made on purpose: ``from workbench import load_bundle`` resolves the runtime on first use (PEP 562),
so ``import workbench`` stays light."""


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (a dotted name) by its longest prefix in :data:`LAYERS`; None when unplaced."""
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return LAYERS[prefix]
    return LAYERS.get(module)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every absolute import of the package in ``path``, module level or inside functions."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            # `from workbench.bundle import export` imports the submodule: place it by its own name
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def _allowed(importer: str, target: str) -> bool:
    return any(importer == a and (target == b or target.startswith(b + ".")) for a, b in ALLOWED)


def layer_violations(package_root: Path) -> list[str]:
    """One line per import that goes upwards, and per module no layer holds."""
    name = package_root.name
    problems = []
    for path in sorted(package_root.rglob("*.py")):
        importer = module_name(path, package_root)
        own = layer_of(importer)
        if own is None:
            problems.append(f"{importer}: not in any layer (add it to LAYERS and docs/architecture.md)")
            continue
        for line, target in imported_modules(path):
            if not (target == name or target.startswith(name + ".")):
                continue
            layer = layer_of(target)
            if layer is not None and layer > own and not _allowed(importer, target):
                where = path.relative_to(package_root.parent)
                problems.append(f"{where}:{line}: {importer} (layer {own}) imports {target} (layer {layer})")
    return problems


def module_files(package_root: Path) -> dict[str, Path]:
    """Every module of the package below ``package_root`` by dotted name (a package by its ``__init__.py``)."""
    return {module_name(path, package_root): path for path in sorted(package_root.rglob("*.py"))}


def import_graph(package_root: Path) -> dict[str, dict[str, int]]:
    """``{importer: {imported module: first line}}`` over the package's own modules, lazy imports included.

    An imported name resolves to the longest module of the package that prefixes it (``from workbench.plots import
    grouped_bars`` imports the package ``workbench.plots``; ``from workbench.bundle import export`` also the
    submodule ``workbench.bundle.export``). A module importing itself, and the deliberate arrows of :data:`ALLOWED`
    (made on first use, never at import), are left out."""
    files = module_files(package_root)
    graph: dict[str, dict[str, int]] = {}
    for importer, path in files.items():
        edges = graph.setdefault(importer, {})
        for line, target in imported_modules(path):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != importer and not _allowed(importer, target):
                edges.setdefault(target, line)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one member, each sorted, in sorted order
    (Tarjan's algorithm): every such component is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def import_cycles(package_root: Path) -> list[str]:
    """One message per import cycle of the package: its members, then each import inside it (``file:line``)."""
    graph = import_graph(package_root)
    files = module_files(package_root)
    messages = []
    for members in strongly_connected(graph):
        inside = set(members)
        arrows = [
            f"  {files[a].relative_to(package_root.parent)}:{line}: {a} imports {b}"
            for a in members
            for b, line in sorted(graph[a].items())
            if b in inside
        ]
        messages.append(f"import cycle of {len(members)} modules: {', '.join(members)}\n" + "\n".join(arrows))
    return messages


def test_no_module_imports_from_a_layer_above_its_own():
    problems = layer_violations(PACKAGE)
    assert not problems, "\n".join(problems)


def test_a_wrong_arrow_is_caught(tmp_path):
    package = tmp_path / "workbench"
    for sub in ("core", "data", "stages"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "data" / "loader.py").write_text("def f():\n    from workbench.stages.runner import run\n")
    (package / "core" / "fine.py").write_text("import json\nfrom workbench.core import errors\n")
    problems = layer_violations(package)
    assert problems == [
        "workbench/data/loader.py:2: workbench.data.loader (layer 1) imports workbench.stages.runner (layer 6)",
        "workbench/data/loader.py:2: workbench.data.loader (layer 1) imports workbench.stages.runner.run (layer 6)",
    ]


def test_an_unplaced_package_is_named(tmp_path):
    package = tmp_path / "workbench"
    (package / "newthing").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "newthing" / "__init__.py").write_text("")
    assert layer_violations(package) == [
        "workbench.newthing: not in any layer (add it to LAYERS and docs/architecture.md)"
    ]


def test_no_import_cycles():
    problems = import_cycles(PACKAGE)
    assert not problems, "\n".join(problems)


def test_a_planted_cycle_is_caught(tmp_path):
    package = tmp_path / "workbench"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    # a lazy import closes a two-module loop
    (package / "core" / "__init__.py").write_text("from workbench.core.a import f\n")
    (package / "core" / "a.py").write_text("from workbench.core.b import g\n\ndef f():\n    return g\n")
    (package / "core" / "b.py").write_text("def g():\n    from workbench.core.a import f\n    return f\n")
    # a package's __init__ importing a submodule that imports the package back
    (package / "data").mkdir()
    (package / "data" / "__init__.py").write_text("from workbench.data.loader import load\n")
    (package / "data" / "loader.py").write_text("from workbench.data import SCHEMA\n")
    (package / "data" / "fine.py").write_text("from workbench.core.a import f\n")
    assert import_cycles(package) == [
        "import cycle of 2 modules: workbench.core.a, workbench.core.b\n"
        "  workbench/core/a.py:1: workbench.core.a imports workbench.core.b\n"
        "  workbench/core/b.py:2: workbench.core.b imports workbench.core.a",
        "import cycle of 2 modules: workbench.data, workbench.data.loader\n"
        "  workbench/data/__init__.py:1: workbench.data imports workbench.data.loader\n"
        "  workbench/data/loader.py:1: workbench.data.loader imports workbench.data",
    ]
