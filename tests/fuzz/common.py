"""What every fuzz property shares: the Hypothesis profiles, the case counter, the one-line-refusal check, a watch on
the files the process opens, and a mutator of JSON documents.

Profiles (``WORKBENCH_FUZZ_PROFILE``): ``ci`` (the default: derandomised, so CI sees the same cases every run, sized
for the test budget) and ``bench`` (random, many more cases: what ``workbench run bench-runtime`` runs and counts).
With ``WORKBENCH_FUZZ_REPORT=path`` the session writes ``{property: {"cases", "accepted", "refused"}}`` there.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from workbench.core.errors import WorkbenchError

_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, suppress_health_check=_QUIET)
settings.register_profile("bench", max_examples=300, deadline=None, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("WORKBENCH_FUZZ_PROFILE", "ci"))

CASES: dict[str, Counter[str]] = {}
"""property → Counter of outcomes (``accepted`` / ``refused``)."""


def record(name: str, outcome: str) -> None:
    """Count one case of property ``name``."""
    CASES.setdefault(name, Counter())[outcome] += 1


def write_report(path: str) -> None:
    """Write the case counts (see the module docstring)."""
    table = {name: {"cases": sum(c.values()), **dict(c)} for name, c in sorted(CASES.items())}
    Path(path).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def assert_one_line(exc: BaseException) -> None:
    """A refusal must be a WorkbenchError (the CLI prints it as ``error: <one line>``, exit 2), on one line."""
    assert isinstance(exc, WorkbenchError), f"{type(exc).__name__} escaped: {exc!r}"
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, f"not one line: {text!r}"


def refused_or(name: str, action: Any) -> Any:
    """Run ``action()``: a WorkbenchError is checked to be one line and counted ``refused`` (None returned); any other
    exception fails the property; a result is counted ``accepted`` and returned."""
    try:
        result = action()
    except WorkbenchError as exc:
        assert_one_line(exc)
        record(name, "refused")
        if os.environ.get("WORKBENCH_FUZZ_REASONS"):  # debugging aid: which checks the cases reach
            with open(os.environ["WORKBENCH_FUZZ_REASONS"], "a", encoding="utf-8") as out:
                out.write(f"{name}\t{exc.what[:90]}\n")
        return None
    record(name, "accepted")
    return result


_WATCHED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _WATCHED is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _WATCHED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@contextmanager
def watch_opens() -> Iterator[list[str]]:
    """Record every path this process opens inside the block (CPython's ``open`` audit event)."""
    global _WATCHED
    _WATCHED = []
    try:
        yield _WATCHED
    finally:
        _WATCHED = None


def assert_reads_within(opened: list[str], inside: Path, sandbox: Path) -> None:
    """No path under ``sandbox`` outside ``inside`` was opened, and no well-known system file was."""
    inside, sandbox = inside.resolve(), sandbox.resolve()
    for raw in opened:
        path = Path(os.path.abspath(raw))
        assert str(path) not in ("/etc/passwd", "/etc/shadow", "/etc/hosts"), f"opened {path}"
        if path.is_relative_to(sandbox):
            assert path.is_relative_to(inside), f"read outside the verified set: {path}"


# ------------------------------------------------------------------------------------------- JSON mutation
DANGEROUS = [
    "/etc/passwd",
    "../secret.json",
    "../../../secret.json",
    "learned/../../../secret.json",
    "learned/classifier.onnx",
    "learned/calibrators.json",
    "README.md",
    "manifest.json",
    "",
    "C:\\evil.json",
    "learned//x.json",
    "\u2028",
    "NaN",
]
"""Values an attacker would try where a path or a name is read."""

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(DANGEROUS),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def paths_of(doc: Any, skip: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (tuple of keys / indices) in a parsed JSON document, the root excluded; top-level keys in ``skip``
    (bulky provenance) are kept but not descended into."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if path:
            out.append(path)
        if path and path[0] in skip:
            continue
        if isinstance(node, dict):
            stack.extend(((*path, key), value) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, i), value) for i, value in enumerate(node))
    return sorted(out, key=repr)


def mutate(doc: Any, data: Any, skip: tuple[str, ...] = ()) -> Any:
    """Apply one to three drawn edits to a deep copy of ``doc``: replace a value, delete a key or item, add a key, or
    wrap a value in a list. ``data`` is Hypothesis's ``st.data()``."""
    doc = json.loads(json.dumps(doc))
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        paths = paths_of(doc, skip)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "add", "wrap"]), label="op")
        if op == "replace":
            parent[key] = data.draw(VALUES, label="value")
        elif op == "delete":
            del parent[key]
        elif op == "wrap":
            parent[key] = [parent[key]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(max_size=8), label="new key")] = data.draw(VALUES, label="new value")
        else:
            parent.append(data.draw(VALUES, label="new item"))
    return doc
