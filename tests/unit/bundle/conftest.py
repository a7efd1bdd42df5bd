"""Fixtures of the bundle attack tests: a fresh copy of the committed tiny bundle, a file outside it that an attack
points at, and the paths the process opens while a test runs (a sys.audit hook: "never read" is checked, not
assumed)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny"

_OPENED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str | Path):
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed: it records only while a test holds `opened`


@pytest.fixture
def opened():
    """The paths opened by this process while the test runs."""
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


@pytest.fixture
def bundle(tmp_path) -> Path:
    """A fresh copy of the committed fixture bundle directory."""
    return Path(shutil.copytree(FIXTURE / "1.0.0", tmp_path / "tiny" / "1.0.0"))


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file outside the bundle that an attack points at; valid JSON, so only the path check can stop it."""
    path = tmp_path / "outside" / "secret.json"
    path.parent.mkdir()
    path.write_text('{"kind": "calibrator_set", "version": 1}')
    return path
