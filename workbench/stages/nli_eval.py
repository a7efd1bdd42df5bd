"""Build NLI judges from a recipe and measure them on held-out NLI pairs and short-answer pairs.

Shared by the ``train_nli`` stage (which also trains the cross-encoder) and the ``bench_backends`` stage.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from workbench.core.errors import AssetError
from workbench.stages.context import Resources


def build_judge(kind: str, resources: Resources, model: str | Path | None = None):
    """The judge ``kind`` wired to the run's shared embedder / generator (:meth:`Resources.judge`); ``model`` is the
    checkpoint directory of ``cross_encoder`` and ``hf`` judges."""
    return resources.judge(kind, model)


def eval_sets(val_pairs: list, n_pairs: int, n_answer_pairs: int, seed: int) -> dict[str, list]:
    """The two evaluation sets: a seeded sample of held-out NLI pairs, and short-answer pairs (generated from
    held-out titles, plus the built-in hand-written ones)."""
    from workbench.data.nli_pairs import BUILTIN_ANSWER_PAIRS, build_answer_pairs

    rng = random.Random(seed)
    nli = rng.sample(list(val_pairs), min(n_pairs, len(val_pairs)))
    answers = [*build_answer_pairs(n=n_answer_pairs, seed=seed), *BUILTIN_ANSWER_PAIRS]
    return {"nli_pairs": nli, "short_answers": answers}


def evaluate_judges(
    kinds: list[str], resources: Resources, sets: dict[str, list], models: dict[str, str | Path | None]
) -> dict[str, Any]:
    """``{kind: {set_name: evaluate_judge(...) | {"skipped": reason}}}`` for every judge kind."""
    from workbench.backends.nli_train import evaluate_judge

    table: dict[str, Any] = {}
    for kind in kinds:
        try:
            judge = build_judge(kind, resources, models.get(kind))
        except AssetError as exc:
            table[kind] = {"skipped": str(exc)}
            continue
        table[kind] = {name: evaluate_judge(judge, pairs) for name, pairs in sets.items()}
    return table


def best_judge(table: dict[str, Any], set_name: str = "short_answers") -> str | None:
    """The judge with the highest accuracy on ``set_name`` (ties: the faster one)."""
    scored = [
        (row[set_name]["accuracy"], row[set_name]["pairs_per_s"], kind)
        for kind, row in table.items()
        if set_name in row
    ]
    return max(scored)[2] if scored else None
