"""Stages ``train_nli`` and ``eval_nli``.

``train_nli`` trains the workbench's MiniLM NLI cross-encoder on pairs built from the Wikipedia corpus; output:
``model/`` (safetensors, config, tokenizer, ``workbench_nli.json`` holding settings and validation metrics).
``eval_nli`` measures every NLI judge on held-out NLI pairs and on short-answer pairs; output: ``judges.json``.
They are separate so that re-measuring the judges never retrains the model.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.core.atomic import atomic_write_json
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import best_judge, eval_sets, evaluate_judges


def run(ctx: StageContext) -> dict[str, Any]:
    """Build pairs and train; return the validation accuracy and training time."""
    from workbench.backends.nli_train import train_cross_encoder
    from workbench.data.nli_pairs import build_nli_pairs

    section = ctx.config.train_nli
    train, val = build_nli_pairs(val_fraction=section.val_fraction, seed=ctx.config.seed)
    ctx.log.info("NLI pairs: %d train, %d validation (split by article)", len(train), len(val))
    model_dir = ctx.out_dir / "model"
    metrics = train_cross_encoder(
        train,
        val,
        out_dir=model_dir,
        epochs=section.epochs,
        batch_size=section.batch_size,
        lr=section.lr,
        max_length=section.max_length,
        seed=ctx.config.seed,
        max_train_pairs=section.max_train_pairs,
        max_val_pairs=section.max_val_pairs,
    )
    return {
        "val_accuracy": round(metrics["val_accuracy"], 4),
        "train_seconds": round(metrics["train_seconds"], 1),
    }


def evaluate(ctx: StageContext) -> dict[str, Any]:
    """Measure every configured judge; return the best one on short answers."""
    from workbench.data.nli_pairs import build_nli_pairs

    section = ctx.config.train_nli
    _, val = build_nli_pairs(val_fraction=section.val_fraction, seed=ctx.config.seed)
    model_dir = ctx.inputs["train_nli"] / "model"
    training = json.loads((model_dir / "workbench_nli.json").read_text())["metrics"]
    sets = eval_sets(val, section.eval_pairs, section.answer_pairs, ctx.config.seed)
    models = {"cross_encoder": model_dir, "hf": ctx.config.nli.model}
    table = evaluate_judges(list(section.judges), ctx.resources, sets, models)
    atomic_write_json(ctx.out_dir / "judges.json", {"training": training, "judges": table})
    return {"best_short_answer_judge": best_judge(table)}
