"""The controller package: every name other modules, tests and docs import from ``workbench.methods.controller``
still comes from there, one module per job, and the package's modules import only downwards."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

_BY_CALLER = {
    "workbench/methods/insemrag.py, registry.py, workbench/distill/*.py, workbench/stages/distill*.py": (
        "CHANNELS INTENTS INTENT_TEMPLATES STOP_WORDS ChannelWeights Completeness Compression Controller Coverage "
        "Decision Elements Enrichment FollowUp HeuristicController PromptedLMController Relevance completeness_checks "
        "content_words uniform_weights parse_verdict"
    ),
    "tests/unit/methods/test_insemrag.py, tests/unit/distill/*, tests/integration/test_distill*.py": (
        "extractive_stitch CONTROLLER_SYSTEM COMPLETENESS_PROMPT RELEVANCE_PROMPT ENTAIL_PROMPT WEIGHTS_PROMPT"
    ),
    "the rest of the old module's public names": "words ENRICH_PROMPT COMPRESS_PROMPT ELEMENTS_PROMPT FOLLOW_UP_PROMPT",
}
IMPORTED_ELSEWHERE = [name for names in _BY_CALLER.values() for name in names.split()]


@pytest.mark.parametrize("name", IMPORTED_ELSEWHERE)
def test_the_package_re_exports_every_name_imported_elsewhere(name):
    controller = importlib.import_module("workbench.methods.controller")
    assert name in controller.__all__ and getattr(controller, name) is not None


def test_each_module_has_one_job_and_imports_only_modules_below_it():
    package = Path(importlib.import_module("workbench.methods.controller").__file__).parent
    order = ["decisions", "base", "text", "prompts", "replies", "heuristic", "prompted"]
    assert sorted(p.stem for p in package.glob("*.py")) == sorted([*order, "__init__"])
    for rank, module in enumerate(order):
        tree = ast.parse((package / f"{module}.py").read_text())
        inside = {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench.methods.controller.")
        }
        assert inside <= set(order[:rank]), f"{module} imports {sorted(inside - set(order[:rank]))}"
    from workbench.methods.controller import HeuristicController, PromptedLMController

    assert HeuristicController.__module__.endswith(".heuristic")
    assert PromptedLMController.__module__.endswith(".prompted")
