"""Measure "the house" (issue 44, item 6): how far a method's or a stage's facts are spread over the package.

Run from a checkout: ``python tests/tools/house_metrics.py [ROOT] [--json]``. ROOT (default: this checkout) is the
repository to measure — another checkout, e.g. ``git worktree add /tmp/base 1268cdc`` for the figures before issue
44. Only ROOT's files are read (as text and Python syntax trees); none of its code is imported or run. The import
graph and its cycles come from this checkout's tests/unit/test_layers.py (the same computation the test holds to 0),
and the duplicate pairs from the ``duplicates`` tool on PATH. What each figure counts:

- ``d2rag_files``: ``.py`` files under ``workbench/`` whose text names ``d2rag`` (any case), outside
  ``workbench/methods/d2rag/`` (issue 44's goal: at most 8).
- ``largest_modules``: the 10 longest ``.py`` files under ``workbench/`` (lines).
- ``import_cycles``: strongly connected components of the package's import graph (imports inside functions included:
  a cycle of module-level imports is one of them too).
- ``imports``: import statements in ``workbench/``, all and those inside a function (or method) body.
- ``module_name_strings``: string constants in ``workbench/`` of the form ``"package.module:Name"`` naming a module of
  the package (``workbench.``…), i.e. references resolved by a string lookup.
- ``duplicate_pairs``: the ``duplicates`` tool's pairs of places sharing 6+ lines over ``workbench/``: all, by shape
  alone, and identical (all minus shape-only).
- ``registration_places``: for stages, methods and features, the literal tables in ``workbench/`` (dict keys, or the
  string elements of a list, tuple or set, not passed as a keyword argument) that name at least two members of that
  kind — each a place beside the registry that a new member may have to be added to — and the files holding them.
  The registries themselves build their tables from objects (``StageSpec("collect", ...)``), so they are not among
  them. The members are the names of 1268cdc (:data:`KINDS`); a name added later is not counted.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from tests.unit.test_layers import import_graph, strongly_connected  # noqa: E402  (this checkout's tests)

_STAGES = """build_data answer report train_nli eval_nli report_nli bench_backends report_bench collect bench_features
report_bench_features calibrate classify evaluate seper_eval fit_utility distill_data distill tune_reader bench_decoding
report_bench_decoding study export bench_served report_bench_served bench_retrievers report_bench_retrievers
bench_runtime report_bench_runtime transfer bench_gpu report_bench_gpu"""
_METHODS = "no_rag standard_rag oracle dtr dense_rag d2rag d2rag_oracle insemrag insemrag_distilled seper"
_FEATURES = """entropy semantic_entropy mars lars sent_sar token_sar confidence inside attention_score
eccentricity_uncertainty eccentricity_confidence matrix_degree_confidence matrix_degree_uncertainty
sum_eigen_uncertainty self_detection directional_entailment_graph dtr_nll dense"""

KINDS: dict[str, frozenset[str]] = {
    "stage": frozenset(_STAGES.split()),
    "method": frozenset(_METHODS.split()),
    "feature": frozenset(_FEATURES.split()),
}
"""The members of each kind at 1268cdc by name: ``STAGES``; ``METHODS`` and SePer; ``FEATURES`` but ``ptrue`` and
``verbalized_confidence``, which are stat names too (the stats graph's tables name them as stats)."""

MODULE_NAME = re.compile(r"^workbench(\.[A-Za-z_]\w*)+:[A-Za-z_]\w*$")
DUPLICATES_SUMMARY = re.compile(r"^(\d+) pairs of places \((\d+) files read\).*?\((\d+) by shape alone")


def python_files(package: Path) -> list[Path]:
    """Every ``.py`` file below ``package``, sorted."""
    return sorted(package.rglob("*.py"))


def d2rag_files(package: Path) -> list[str]:
    """The ``.py`` files below ``package`` naming d2rag (any case), outside ``methods/d2rag/``."""
    inside = package / "methods" / "d2rag"
    return [
        str(p.relative_to(package.parent))
        for p in python_files(package)
        if inside not in p.parents and "d2rag" in p.read_text(encoding="utf-8").lower()
    ]


def largest_modules(package: Path, count: int = 10) -> list[tuple[str, int]]:
    """The ``count`` longest files below ``package``: ``(path, lines)``, longest first."""
    sizes = [
        (str(p.relative_to(package.parent)), len(p.read_text(encoding="utf-8").splitlines()))
        for p in python_files(package)
    ]
    return sorted(sizes, key=lambda item: (-item[1], item[0]))[:count]


def import_counts(trees: dict[Path, ast.Module]) -> dict[str, int]:
    """``{"all": n, "in_functions": m}``: import statements, and those inside a function body (at any depth)."""
    every, inside = set(), set()
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                every.add((path, node.lineno, node.col_offset))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                inside |= {
                    (path, n.lineno, n.col_offset) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)
                }
    return {"all": len(every), "in_functions": len(inside)}


def module_name_strings(trees: dict[Path, ast.Module]) -> int:
    """String constants of the form ``"workbench.module:Name"``."""
    return sum(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and bool(MODULE_NAME.match(n.value))
        for tree in trees.values()
        for n in ast.walk(tree)
    )


def _literal_names(node: ast.AST) -> list[str]:
    """The string keys of a dict literal, or the string elements of a list / tuple / set literal."""
    if isinstance(node, ast.Dict):
        items: list[Any] = list(node.keys)
    elif isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = list(node.elts)
    else:
        return []
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def registration_places(trees: dict[Path, ast.Module], package: Path) -> dict[str, dict[str, Any]]:
    """Per kind: the literal tables naming two or more of its members (``places``) and the files holding them.

    A literal passed as a keyword argument (``StageSpec(..., inputs=("collect", "calibrate"))``) is one member's own
    declaration, not a table, and is left out."""
    out: dict[str, dict[str, Any]] = {}
    for kind, members in KINDS.items():
        places = []
        for path, tree in trees.items():
            declared = {id(k.value) for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords}
            for node in ast.walk(tree):
                if id(node) not in declared and len(set(_literal_names(node)) & members) >= 2:
                    places.append(f"{path.relative_to(package.parent)}:{node.lineno}")
        by_file = Counter(p.rsplit(":", 1)[0] for p in places)
        out[kind] = {"places": len(places), "files": len(by_file), "by_file": dict(by_file), "where": places}
    return out


def duplicate_pairs(package: Path) -> dict[str, int]:
    """The ``duplicates`` tool's counts over ``package``: pairs, shape-only pairs, identical pairs, files read."""
    done = subprocess.run(
        ["duplicates", "--repo", str(package), "--most", "1", "--seconds", "300"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    first = done.stdout.splitlines()[0] if done.stdout else ""
    match = DUPLICATES_SUMMARY.match(first)
    if not match:
        raise SystemExit(f"house_metrics: cannot read the duplicates tool's summary line: {first!r}")
    pairs, files, shape = (int(g) for g in match.groups())
    incomplete = [line for line in done.stdout.splitlines() if line.startswith("incomplete:")]
    return {
        "pairs": pairs,
        "shape_only": shape,
        "identical": pairs - shape,
        "files_read": files,
        "incomplete": len(incomplete),
    }


def measure(root: Path) -> dict[str, Any]:
    """Every figure of the module docstring for the repository at ``root``."""
    package = root / "workbench"
    if not (package / "__init__.py").is_file():
        raise SystemExit(f"house_metrics: {root} holds no workbench/ package")
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in python_files(package)}
    d2rag = d2rag_files(package)
    cycles = strongly_connected(import_graph(package))
    return {
        "root": str(root),
        "commit": _commit(root),
        "python_files": len(trees),
        "lines": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in trees),
        "d2rag_files": {"count": len(d2rag), "files": d2rag},
        "largest_modules": largest_modules(package),
        "import_cycles": {"count": len(cycles), "cycles": cycles},
        "imports": import_counts(trees),
        "module_name_strings": module_name_strings(trees),
        "duplicate_pairs": duplicate_pairs(package),
        "registration_places": registration_places(trees, package),
    }


def _commit(root: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def render(figures: dict[str, Any]) -> str:
    """The figures as plain text, one per line (lists indented below their figure)."""
    imports = figures["imports"]
    share = imports["in_functions"] / imports["all"] if imports["all"] else 0.0
    dup = figures["duplicate_pairs"]
    lines = [
        f"root: {figures['root']} (commit {figures['commit']}); "
        f"{figures['python_files']} .py files, {figures['lines']} lines",
        f"files naming d2rag outside workbench/methods/d2rag/: {figures['d2rag_files']['count']}",
        *(f"  {f}" for f in figures["d2rag_files"]["files"]),
        "largest modules (lines):",
        *(f"  {lines_:5d}  {path}" for path, lines_ in figures["largest_modules"]),
        f"import cycles: {figures['import_cycles']['count']}",
        *(f"  {', '.join(c)}" for c in figures["import_cycles"]["cycles"]),
        f"imports inside functions: {imports['in_functions']} of {imports['all']} ({share:.0%})",
        f"'workbench.module:Name' strings: {figures['module_name_strings']}",
        f"duplicate pairs (duplicates tool, 6+ lines): {dup['pairs']}, identical {dup['identical']}, by shape alone "
        f"{dup['shape_only']}" + (" (incomplete)" if dup["incomplete"] else ""),
    ]
    for kind, places in figures["registration_places"].items():
        lines.append(
            f"{kind} registration places (literal tables naming 2+ {kind}s): "
            f"{places['places']} in {places['files']} files"
        )
        lines += [
            f"  {count:3d}  {path}" for path, count in sorted(places["by_file"].items(), key=lambda i: (-i[1], i[0]))
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the figures of ROOT (text, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(HERE), help="the repository to measure (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(Path(args.root).resolve())
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
