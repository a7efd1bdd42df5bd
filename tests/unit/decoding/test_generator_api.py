"""Decoding uses the generator through its public step API only; the value types live outside the generator package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import workbench.decoding.contrastive as contrastive


def test_contrastive_uses_no_private_generator_name():
    tree = ast.parse(Path(contrastive.__file__).read_text())
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "workbench.backends.generator":
            private += [alias.name for alias in node.names if alias.name.startswith("_")]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_"):
            private += [f"generator.{node.attr}"] if node.value.id == "generator" else []
    assert private == []


def test_value_types_are_re_exported_and_gencache_does_not_import_the_generator():
    from workbench.backends import generation_types, generator

    for name in ("Generation", "Scored", "DecodingParams", "FINISH_REASONS"):
        assert getattr(generator, name) is getattr(generation_types, name)
    code = (
        "import sys, workbench.backends.gencache as g; "
        "print('workbench.backends.generator' in sys.modules, g.Generation.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "workbench.backends.generation_types"]
