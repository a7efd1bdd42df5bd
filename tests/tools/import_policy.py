"""Where the workbench imports inside functions, which of those imports the policy justifies, and a tool that moves the
others to the top of their module.

The policy (:mod:`workbench.core.heavy_imports`): an import inside a function is justified when importing it at the
top would make the module pull, at import, a heavy module (:data:`~workbench.core.heavy_imports.HEAVY_MODULES`) it does
not pull already; when it is of a platform-only standard module (:data:`~workbench.core.heavy_imports.PLATFORM_MODULES`)
or guarded by ``try: ... except ImportError`` (an optional package); when a lazy importer
(:data:`~workbench.core.heavy_imports.LAZY_IMPORTERS`: the CLI verbs) imports a workbench module; when it is listed,
with its reason, in :data:`~workbench.core.heavy_imports.KEPT_INSIDE`; when at the top it would close an import loop
(the module it imports imports this one back at import); and when the module is imported by a light entry point
(:data:`~workbench.core.heavy_imports.LIGHT_ENTRY_POINTS`: ``workbench.runtime``, ``workbench.cli``,
``workbench.recipe``) and the import would make that entry point import a module it does not import yet.

The verdicts read source files (``ast``); nothing is imported. What a module imports at import is followed through
the package: its import statements outside functions, the ``"module:Name"`` strings of its import-time code (counted
as imports of the module that holds them), and a package's lazy exports (PEP 562 ``__getattr__``: ``from
workbench.methods.dtr import DTR`` imports ``workbench.methods.dtr.method``; see :func:`lazy_export_modules`).
What escapes the reading (``importlib`` with a computed name) is caught by ``hoist --check``, which imports.

Run from the repository root::

    python -m tests.tools.import_policy report                  # counts, and every unjustified import by file
    python -m tests.tools.import_policy hoist [--check] FILE ...  # move a file's unjustified imports to its top
    python -m tests.tools.import_policy hoist [--check] --all     # ... in every file of the package
    python -m tests.tools.import_policy strings                 # "module:Name" strings, by file

``hoist`` leaves an import where it is when its name is bound to something else at module level, or when the function
rebinds it; it then runs ``ruff check --fix --select I,F401`` and ``ruff format`` on what it changed (``ruff check``
may then ask to merge an ``if`` whose body was only the import and another ``if``: SIM102). With ``--check`` it then
imports each light entry point and each changed module in fresh interpreters (:func:`keep_if_light`) and undoes the
hoist of every file that makes an entry point import a module it did not, or makes an import fail (a loop shows as
``ImportError: ... partially initialized module``); such an import stays inside its function, listed in
:data:`~workbench.core.heavy_imports.KEPT_INSIDE` with its reason. A hoisted import binds its name when the module
loads, not when the function runs: run the tests afterwards (a test that patches the imported name in its home
module, not in the importer, then needs its target updated), and lower ``UNJUSTIFIED_CEILING`` in
tests/unit/test_imports_policy.py to the new count.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from workbench.core.heavy_imports import (
    HEAVY_MODULES,
    KEPT_INSIDE,
    LAZY_IMPORTERS,
    LIGHT_ENTRY_POINTS,
    PLATFORM_MODULES,
)

PACKAGE = Path(__file__).resolve().parents[2] / "workbench"
"""The package the policy covers."""

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

MODULE_NAME_STRING = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+:[A-Za-z_]\w*$")
"""A ``"package.module:Name"`` reference resolved at run time (an entry-point-style target)."""


@dataclass(frozen=True)
class FunctionImport:
    """One import statement inside a function: its file, line, the modules it imports and its verdict (``reason``:
    why it may stay inside the function, or None when it should move to the top of the module)."""

    path: Path
    line: int
    modules: tuple[str, ...]
    reason: str | None
    node: ast.stmt
    function: ast.AST


def module_name(path: Path, root: Path) -> str:
    """The dotted name of ``path`` below the package directory ``root`` (a package by its ``__init__.py``); the layers
    test (tests/unit/test_layers.py) names modules with it too."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root`` by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def parsed(path: Path) -> ast.Module:
    """The syntax tree of ``path`` (cached by the file's modification time: the test and the tool read each file once,
    and again only after it changed)."""
    return _parse(path, path.stat().st_mtime_ns)


@cache
def _parse(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted modules an import statement names (``from a import b`` names ``a`` and, maybe a module, ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]


def import_time_statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported: at module level and in class bodies, inside
    ``if`` / ``try`` / ``with`` blocks, not in functions and not under ``if TYPE_CHECKING``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, FUNCTIONS) or _is_type_checking(child):
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        else:
            yield from import_time_statements(child)


def import_time_modules(tree: ast.AST) -> list[str]:
    """The dotted modules importing the module imports: its import-time statements' modules, and the modules of the
    ``"module:Name"`` strings in its import-time code (a registry's entries: counted as imported, since a registry is
    read at import by whoever composes it, as ``workbench.recipe`` composes the stages' settings)."""
    names = [name for node in import_time_statements(tree) for name in statement_modules(node)]
    return names + [text.partition(":")[0] for text in import_time_strings(tree)] + computed_imports(tree)


def computed_imports(tree: ast.Module) -> list[str]:
    """The modules a table of names makes a module import by computed name: ``f"workbench.stages.{name}" for name in
    STAGE_PACKAGES`` (anywhere in the module), where ``STAGE_PACKAGES`` is a module-level tuple or list of strings
    (the stage and benchmark tables, whose packages :func:`workbench.stages.spec.gather_specs` imports when the table
    is built). Counted as imported, as a registry's ``"module:Name"`` strings are."""
    tables: dict[str, list[str]] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Tuple | ast.List):
            items = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if items and len(items) == len(value.elts):
                tables[target.id] = items
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.GeneratorExp | ast.ListComp | ast.SetComp) or len(node.generators) != 1:
            continue
        loop = node.generators[0]
        parts = node.elt.values if isinstance(node.elt, ast.JoinedStr) else []
        if (
            isinstance(loop.iter, ast.Name)
            and loop.iter.id in tables
            and isinstance(loop.target, ast.Name)
            and len(parts) == 2
            and isinstance(parts[0], ast.Constant)
            and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.", str(parts[0].value))
            and isinstance(parts[1], ast.FormattedValue)
            and isinstance(parts[1].value, ast.Name)
            and parts[1].value.id == loop.target.id
        ):
            out += [f"{parts[0].value}{item}" for item in tables[loop.iter.id]]
    return out


def statement_modules(node: ast.Import | ast.ImportFrom, package: str = PACKAGE.name) -> list[str]:
    """The modules an import statement may import: :func:`imported_names`, less the ``a.b`` of ``from a import b``
    when ``a`` is outside the package (there ``b`` is a name far more often than a module)."""
    names = imported_names(node)
    if isinstance(node, ast.ImportFrom) and names and names[0].split(".")[0] != package:
        return names[:1]
    return names


def import_time_strings(tree: ast.AST) -> Iterator[str]:
    """The ``"module:Name"`` string constants outside functions (and outside ``if TYPE_CHECKING``)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, FUNCTIONS) or _is_type_checking(child):
            continue
        if isinstance(child, ast.Constant) and isinstance(child.value, str) and MODULE_NAME_STRING.match(child.value):
            yield child.value
        else:
            yield from import_time_strings(child)


def resolve(name: str, root: Path) -> list[str]:
    """The package modules importing ``name`` runs: the longest module prefixing it, every package above it, and,
    when the rest of ``name`` is a name that module does not bind but exports lazily (PEP 562, see
    :func:`lazy_export_modules`), the modules its ``__getattr__`` imports to find it."""
    files = package_modules(root)
    found = name
    while found and found not in files:
        found = found.rpartition(".")[0]
    out = []
    module = found
    while module:
        if module in files:
            out.append(module)
        module = module.rpartition(".")[0]
    attribute = name[len(found) + 1 :].partition(".")[0] if found else ""
    if attribute:
        for lazy in lazy_export_modules(found, attribute, root):
            out.extend(m for m in resolve(lazy, root) if m not in out)
    return out


def _defines(module: str, name: str, root: Path) -> bool:
    """Whether ``module`` binds ``name`` at module level or lists it in ``__all__``."""
    tree = parsed(package_modules(root)[module])
    if name in _module_bindings(tree):
        return True
    exported = [
        e.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        and isinstance(node.value, ast.List | ast.Tuple)
        for e in node.value.elts
        if isinstance(e, ast.Constant)
    ]
    return name in exported


def lazy_export_table(module: str, root: Path) -> tuple[str, ...]:
    """The submodules (dotted, in order) of ``module``'s ``__getattr__ = lazy_exports(__name__, "a", "b")``, the method
    packages' on-first-use exports; empty when it has none."""
    files = package_modules(root)
    for node in parsed(files[module]).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__getattr__" for t in node.targets)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).endswith("lazy_exports")
        ):
            return tuple(
                f"{module}.{arg.value}"
                for arg in node.value.args[1:]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and f"{module}.{arg.value}" in files
            )
    return ()


@cache
def lazy_export_modules(module: str, name: str, root: Path) -> tuple[str, ...]:
    """The package modules ``from module import name`` imports through ``module``'s PEP 562 ``__getattr__`` when
    ``module`` does not bind ``name`` itself (empty when it does, or has no ``__getattr__``). Three forms are read:
    ``__getattr__ = lazy_exports(__name__, "a", "b")`` (a method package: its submodules are tried in order until one
    binds the name), a module-level table whose key is ``name`` and whose value names a submodule (``"chunkers"``) or a
    ``"module:Name"`` target, and, failing those, every import inside a ``def __getattr__``."""
    files = package_modules(root)
    tree = parsed(files[module])
    if _defines(module, name, root):
        return ()
    lazy = lazy_export_table(module, root)
    if lazy:
        out = []
        for part in lazy:
            out.append(part)
            if _defines(part, name, root):
                break
        return tuple(out)
    getattr_def = next(
        (node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"), None
    )
    if getattr_def is None:
        return ()
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if not isinstance(value, ast.Dict):
            continue
        for key, target in zip(value.keys, value.values, strict=True):
            if not (isinstance(key, ast.Constant) and key.value == name and isinstance(target, ast.Constant)):
                continue
            text = str(target.value)
            if MODULE_NAME_STRING.match(text):
                return (text.partition(":")[0],)
            if f"{module}.{text}" in files:
                return (f"{module}.{text}",)
    inner = [n for n in ast.walk(getattr_def) if isinstance(n, ast.Import | ast.ImportFrom)]
    return tuple(name for node in inner for name in statement_modules(node) if name.split(".")[0] == root.name)


@cache
def direct_imports(module: str, root: Path) -> tuple[frozenset[str], tuple[str, ...]]:
    """What importing ``module`` imports itself: the outside modules (dotted, as written), and the package modules."""
    outside: set[str] = set()
    inside: list[str] = []
    for name in import_time_modules(parsed(package_modules(root)[module])):
        if name.split(".")[0] != root.name:
            outside.add(name)
        else:
            inside.extend(resolve(name, root))
    return frozenset(outside), tuple(dict.fromkeys(inside))


@cache
def closure(module: str, root: Path) -> tuple[frozenset[str], frozenset[str]]:
    """What importing ``module`` (of the package) imports, directly or through other package modules: the outside
    modules as their import statements write them, and the package modules (``module`` included)."""
    seen, todo, out = {module}, [module], set()
    while todo:
        outside, inside = direct_imports(todo.pop(), root)
        out |= outside
        for inner in inside:
            if inner not in seen:
                seen.add(inner)
                todo.append(inner)
    return frozenset(out), frozenset(seen)


def pulled_at_import(module: str, root: Path) -> frozenset[str]:
    """The top-level names of the outside modules importing ``module`` imports (see :func:`closure`), and those of
    them listed in :data:`HEAVY_MODULES` by their dotted name (``importlib.metadata``)."""
    outside = closure(module, root)[0]
    return frozenset(name.split(".")[0] for name in outside) | {name for name in outside if name in HEAVY_MODULES}


def heavy(names: frozenset[str] | set[str]) -> set[str]:
    """The heavy modules (:data:`HEAVY_MODULES`) among top-level names."""
    return {name for name in names if name in HEAVY_MODULES}


BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
"""The fields of a statement that hold statements (an import is a statement: expressions need no visit)."""


def _imports_in_functions(
    block: list[ast.stmt], function: ast.AST | None, guarded: bool
) -> Iterator[tuple[ast.Import | ast.ImportFrom, ast.AST, bool]]:
    """``(import, its innermost function, guarded)`` for every import statement inside a function below ``block``;
    ``guarded``: it sits in the body of a ``try`` whose handlers catch ImportError (or ModuleNotFoundError)."""
    for statement in block:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            if function is not None:
                yield statement, function, guarded
            continue
        inner = statement if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) else function
        for field in BLOCKS:
            children = getattr(statement, field, None)
            if not isinstance(children, list):
                continue
            catches = guarded
            if isinstance(statement, ast.Try | ast.TryStar) and field == "body":
                caught = " ".join(ast.unparse(h.type) for h in statement.handlers if h.type is not None)
                catches = guarded or "ImportError" in caught or "ModuleNotFoundError" in caught
            elif inner is not function:
                catches = False  # a try around a def does not guard the imports the function makes when called
            statements = [
                c
                for child in children
                for c in (child.body if isinstance(child, ast.excepthandler | ast.match_case) else [child])
            ]
            yield from _imports_in_functions(statements, inner, catches)


def lazy_importer(importer: str) -> str | None:
    """The :data:`LAZY_IMPORTERS` key that covers ``importer``, or None."""
    for key in LAZY_IMPORTERS:
        package = key.removesuffix(".*")
        if importer == key or (key != package and (importer == package or importer.startswith(package + "."))):
            return key
    return None


def verdict(importer: str, node: ast.Import | ast.ImportFrom, guarded: bool, root: Path) -> str | None:
    """Why the function-level import ``node`` of module ``importer`` may stay in its function, or None."""
    if guarded:
        return "optional: guarded by except ImportError"
    own = heavy(pulled_at_import(importer, root))
    package = root.name
    names = imported_names(node)
    if isinstance(node, ast.ImportFrom) and node.level:
        return None
    for name in names[:1] if isinstance(node, ast.ImportFrom) else names:
        top = name.split(".")[0]
        if top in PLATFORM_MODULES:
            return f"platform: {top}"
        if top != package:
            if top in HEAVY_MODULES and top not in own:
                return f"heavy: {top}"
            if "." in name and name in HEAVY_MODULES:  # a standard-library submodule listed by its dotted name
                return f"heavy: {name}"
            continue
    lazy = lazy_importer(importer)
    if lazy and any(name.split(".")[0] == package for name in names):
        return f"lazy importer: {lazy}"
    for name in names:
        if name.split(".")[0] == package and (kept := KEPT_INSIDE.get(f"{importer} -> {name}")):
            return f"kept inside: {kept}"
    added: set[str] = set()
    targets = [module for name in names if name.split(".")[0] == package for module in resolve(name, root)]
    if lazy_parts := set(targets) & set(lazy_export_table(importer, root)):
        return f"lazy export: {importer} imports {min(lazy_parts)} on first use"
    for module in targets:
        added |= heavy(pulled_at_import(module, root))
    added -= own
    if added:
        return f"pulls {', '.join(sorted(added))}"
    for name in names:
        if name.split(".")[0] == package and (loop := import_cycle(importer, name, root)):
            return "cycle: " + " -> ".join(loop)
    return _keeps_light(importer, node, root)


def import_cycle(importer: str, name: str, root: Path) -> list[str] | None:
    """The loop importing ``name`` at the top of ``importer`` would close (``importer``, the modules between, and
    ``importer`` again), or None. The packages above ``importer`` are not followed: Python imports them before
    ``importer``, so reaching one is no loop (a package's ``__init__`` importing a module that imports a sibling is
    fine)."""
    above = {".".join(importer.split(".")[:end]) for end in range(1, importer.count(".") + 1)}
    start = [m for m in resolve(name, root) if m not in above and m != importer]
    parent: dict[str, str] = {m: importer for m in start}
    todo = list(start)
    while todo:
        module = todo.pop(0)
        for inner in direct_imports(module, root)[1]:
            if inner == importer:
                path = [importer, module]
                while path[-1] in parent and parent[path[-1]] != importer:
                    path.append(parent[path[-1]])
                return [importer, *reversed(path[1:]), importer]
            if inner not in parent and inner not in above:
                parent[inner] = module
                todo.append(inner)
    return None


def _keeps_light(importer: str, node: ast.Import | ast.ImportFrom, root: Path) -> str | None:
    """``keeps <entry point> light`` when ``importer`` is imported by a light entry point
    (:data:`LIGHT_ENTRY_POINTS`) and hoisting ``node`` would make that entry point import a module it does not import
    yet (any module: the standard library's count too); else None."""
    for entry in LIGHT_ENTRY_POINTS:
        if entry not in package_modules(root):
            continue
        entry_outside, entry_inside = closure(entry, root)
        if importer not in entry_inside:
            continue
        new: set[str] = set()
        for name in statement_modules(node, root.name):
            if name.split(".")[0] != root.name:
                new.add(name)
                continue
            for module in resolve(name, root):
                outside, inside = closure(module, root)
                new |= outside | inside
        added = sorted(new - entry_outside - entry_inside)
        if added:
            return f"keeps {entry} light: adds {added[0]}" + (f" and {len(added) - 1} more" if len(added) > 1 else "")
    return None


def function_imports(root: Path = PACKAGE, only: Path | None = None) -> list[FunctionImport]:
    """Every import statement inside a function of the package at ``root`` (or of its file ``only``), with its
    verdict."""
    out = []
    for importer, path in package_modules(root).items():
        if only is not None and path != only:
            continue
        for node, function, guarded in _imports_in_functions(parsed(path).body, None, False):
            reason = verdict(importer, node, guarded, root)
            out.append(FunctionImport(path, node.lineno, tuple(imported_names(node)), reason, node, function))
    return out


def unjustified(imports: list[FunctionImport]) -> list[FunctionImport]:
    """The imports the policy does not justify (candidates to hoist)."""
    return [item for item in imports if item.reason is None]


# ---------------------------------------------------------------------- hoisting
def _bound(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """Name → what it is bound to, for each name the import binds."""
    out = {}
    for alias in node.names:
        if isinstance(node, ast.Import):
            name = alias.asname or alias.name.split(".")[0]
            out[name] = alias.name if alias.asname else alias.name.split(".")[0]
        else:
            out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _module_bindings(tree: ast.Module) -> dict[str, str]:
    """Names bound at module level: imports to what they import, everything else to ``"<local>"``."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.update(_bound(node))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = "<local>"
        else:
            for target in ast.walk(node):
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                    out[target.id] = "<local>"
    return out


def _rebinds(function: ast.AST, name: str, node: ast.stmt) -> bool:
    """Whether ``function`` binds ``name`` otherwise than by ``node`` (an argument, an assignment, another import)."""
    if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        args = function.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        if any(a is not None and a.arg == name for a in every):
            return True
    for inner in ast.walk(function):
        if inner is node:
            continue
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store) and inner.id == name:
            return True
        if (
            isinstance(inner, ast.Import | ast.ImportFrom)
            and name in _bound(inner)
            and ast.unparse(inner) != ast.unparse(node)
        ):
            return True
    return False


def hoist(path: Path, root: Path = PACKAGE) -> tuple[int, list[str]]:
    """Move the unjustified function-level imports of ``path`` to the top of its module; returns how many moved and
    one line per import left in place (and why)."""
    tree = parsed(path)
    items = unjustified(function_imports(root, only=path))
    bindings = _module_bindings(tree)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    moved: list[FunctionImport] = []
    kept: list[str] = []
    for item in items:
        clash = [
            name
            for name, target in _bound(item.node).items()
            if (name in bindings and bindings[name] != target) or _rebinds(item.function, name, item.node)
        ]
        if clash or ";" in lines[item.node.lineno - 1]:
            why = f"{', '.join(clash)} bound otherwise" if clash else "shares its line"
            kept.append(f"{path}:{item.line}: left in place ({why})")
            continue
        moved.append(item)
        bindings.update(_bound(item.node))
    if not moved:
        return 0, kept
    statements = sorted({ast.unparse(item.node) for item in moved})
    for item in sorted(moved, key=lambda i: -i.node.lineno):
        start, end = item.node.lineno - 1, item.node.end_lineno or item.node.lineno
        indent = re.match(r"\s*", lines[start]).group(0)
        siblings = _body_of(item.function, item.node)
        lines[start:end] = [f"{indent}pass\n"] if siblings == 1 else []
    at = _after_imports(tree)
    lines[at:at] = [statement + "\n" for statement in statements]
    path.write_text("".join(lines), encoding="utf-8")
    return len(moved), kept


def _body_of(function: ast.AST, node: ast.stmt) -> int:
    """How many statements the block holding ``node`` has."""
    for inner in ast.walk(function):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(inner, field, None)
            if isinstance(block, list) and node in block:
                return len(block)
    return 0


def _after_imports(tree: ast.Module) -> int:
    """The line index (0-based) right after the module's leading docstring and top-level imports."""
    end = 0
    for node in tree.body:
        is_doc = (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        )
        if isinstance(node, ast.Import | ast.ImportFrom) or (is_doc and end == 0):
            end = node.end_lineno or node.lineno
        else:
            break
    return end


def forget() -> None:
    """Drop what was derived from the package's files (after :func:`hoist` changed one; :func:`parsed` reads a file
    again when its modification time changed)."""
    for cached in (direct_imports, closure, lazy_export_modules):
        cached.cache_clear()


PROBE = """
import importlib, json, os, sys

found = {}
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fresh import of `name` in a copy of this small interpreter
        os.close(read)
        try:
            importlib.import_module(name)
            text = json.dumps(sorted(sys.modules))
        except BaseException as exc:
            text = json.dumps(f"{type(exc).__name__}: {exc}")
        with os.fdopen(write, "w") as out:
            out.write(text)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as inp:
        found[name] = json.loads(inp.read())
    os.waitpid(pid, 0)
print(json.dumps(found))
"""
"""Run by :func:`import_probe`: imports each module named in ``argv[1]`` (JSON) in a forked child of its own."""


def import_probe(names: list[str], root: Path = PACKAGE) -> dict[str, list[str] | str]:
    """Import each of ``names`` (dotted) in a fresh interpreter of its own (a forked child of one new process, from
    ``root``'s parent): module name → the sorted ``sys.modules`` after the import, or the error's one line (an import
    cycle shows as ``ImportError: ... partially initialized module``)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(root.parent),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(names)],
        cwd=root.parent,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def probe_problems(before: dict[str, list[str] | str], modules: list[str], root: Path = PACKAGE) -> list[str]:
    """What is wrong now compared with ``before`` (an :func:`import_probe` of the light entry points): an entry point
    that fails or imports a module it did not, or one of ``modules`` that fails to import on its own."""
    after = import_probe([*before, *modules], root)
    problems = []
    for entry, was in before.items():
        now = after[entry]
        if isinstance(now, str):
            problems.append(f"import {entry} fails: {now}")
        elif not isinstance(was, str) and (grown := sorted(set(now) - set(was))):
            problems.append(f"import {entry} grows by {len(grown)} modules ({', '.join(grown[:3])}, ...)")
    problems += [f"import {m} fails: {after[m]}" for m in modules if isinstance(after[m], str)]
    return problems


def keep_if_light(
    paths: list[Path],
    originals: dict[Path, str],
    hoisted: dict[Path, str],
    before: dict[str, list[str] | str],
    root: Path = PACKAGE,
) -> tuple[list[Path], list[str]]:
    """Write the ``hoisted`` text of ``paths`` and keep it where :func:`probe_problems` finds nothing; a batch with a
    problem is halved until the files at fault are found, and those get their ``originals`` back. Returns the files
    kept and one line per file refused."""
    for path in paths:
        path.write_text(hoisted[path], encoding="utf-8")
    problems = probe_problems(before, [module_name(path, root) for path in paths], root)
    if not problems:
        return paths, []
    for path in paths:
        path.write_text(originals[path], encoding="utf-8")
    if len(paths) == 1:
        return [], [f"{paths[0]}: not hoisted: {'; '.join(problems)}"]
    half = len(paths) // 2
    kept_a, refused_a = keep_if_light(paths[:half], originals, hoisted, before, root)
    kept_b, refused_b = keep_if_light(paths[half:], originals, hoisted, before, root)
    return kept_a + kept_b, refused_a + refused_b


# ---------------------------------------------------------------------- "module:Name" strings


def module_name_strings(root: Path = PACKAGE) -> list[tuple[Path, int, str]]:
    """Every string constant of the package that is a ``"module:Name"`` reference, with its file and line."""
    out = []
    for path in package_modules(root).values():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME_STRING.match(node.value):
                out.append((path, node.lineno, node.value))
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tests.tools.import_policy", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("report", help="counts, and every unjustified function-level import")
    hoisting = sub.add_parser("hoist", help="move unjustified function-level imports to the top of their module")
    hoisting.add_argument("files", nargs="*", type=Path)
    hoisting.add_argument("--all", action="store_true", help="every file of the package")
    hoisting.add_argument(
        "--check",
        action="store_true",
        help="import the light entry points and each changed module in fresh interpreters, and undo a file's hoist "
        "that makes one import more modules or fail",
    )
    sub.add_parser("strings", help='"module:Name" strings, by file')
    args = parser.parse_args(argv)
    root = PACKAGE.parent
    if args.command == "report":
        imports = function_imports()
        bad = unjustified(imports)
        for item in bad:
            print(f"{item.path.relative_to(root)}:{item.line}: {', '.join(item.modules[:1])}")
        print(f"{len(imports)} function-level imports, {len(bad)} unjustified")
        return 0
    if args.command == "strings":
        found = module_name_strings()
        for path, line, text in found:
            print(f"{path.relative_to(root)}:{line}: {text}")
        print(f'{len(found)} "module:Name" strings in {len({p for p, _, _ in found})} files')
        return 0
    files = sorted({item.path for item in unjustified(function_imports())}) if args.all else args.files
    before = import_probe(list(LIGHT_ENTRY_POINTS)) if args.check else {}
    originals: dict[Path, str] = {}
    for path in files:
        path = Path(path).resolve()
        text = path.read_text(encoding="utf-8")
        count, kept = hoist(path)
        forget()  # the next file's verdicts see this one's new top-level imports
        for line in kept:
            print(line)
        if count:
            originals[path] = text
            print(f"{path.relative_to(root)}: {count} import(s) hoisted")
    if not originals:
        return 0
    changed = [str(path) for path in originals]
    subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "--select", "I,F401", *changed], check=False)
    subprocess.run([sys.executable, "-m", "ruff", "format", *changed], check=False)
    if args.check:
        hoisted = {path: path.read_text(encoding="utf-8") for path in originals}
        for path, text in originals.items():
            path.write_text(text, encoding="utf-8")
        kept_files, refused = keep_if_light(list(originals), originals, hoisted, before)
        for line in refused:
            print(line)
        print(f"{len(kept_files)} file(s) hoisted, {len(refused)} refused by the import check")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
