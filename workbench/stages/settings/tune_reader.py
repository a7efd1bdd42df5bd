"""The 'tune_reader' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.settings import RecipeView


@dataclass
class TuneReaderSection:
    """The 'tune_reader' stage: a LoRA adapter that teaches the answering model to answer from passages, trained on a
    training split's questions in each answer mode (peft + PyTorch Lightning; docs in workbench/stages/tune_reader.py,
    docs/task.md). Prompts are rendered exactly as the answer stage renders them (``answer.passage_chars``,
    ``answer.max_new_tokens``, ``retrieval.k``)."""

    split: str = doc("split the training questions come from (never one you evaluate on)", "train")
    per_template: int | None = doc("first N questions of each question template (null: all)", 400)
    modes: list[Literal["closed_book", "rag", "gold"]] = doc(
        "answer modes each question is trained in (one training row per question and mode)",
        ["closed_book", "rag", "gold"],
    )
    lora_r: int = doc("LoRA rank r", 8)
    lora_alpha: int = doc("LoRA alpha (the adapter's update is scaled by alpha / r)", 16)
    lora_dropout: float = doc("dropout on the LoRA input, in [0, 1)", 0.0)
    target_modules: list[str] = doc("modules LoRA wraps; absent names are an error", ["q_proj", "v_proj"])
    learning_rate: float = doc("AdamW learning rate (constant)", 0.0005)
    epochs: int = doc("training epochs", 1)
    batch_size: int = doc("rows per batch and device", 8)
    grad_accum: int = doc("batches per optimizer step", 1)
    precision: Literal["32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true"] = doc(
        "Lightning precision: 32-true on CPU, bf16-mixed on recent GPUs (16-*: GPUs only)", "32-true"
    )
    accelerator: Literal["auto", "cpu", "gpu"] = doc("where to train (auto: a GPU when torch sees one)", "auto")
    max_length: int = doc("tokens per training sequence (longer prompts lose their start)", 768)
    gradient_checkpointing: bool = doc(
        "recompute each layer's activations in the backward pass instead of keeping them (about a third of the "
        "training memory for ~25 % more time per step)",
        True,
    )
    checkpoint_every: int = doc(
        "optimizer steps between checkpoints (0: at epoch ends only); an interrupted run resumes from the newest",
        25,
        minimum=0,
    )
    eval_split: str | None = doc(
        "split base and tuned model are scored on after training, in every mode (null: no scoring)", "val"
    )
    eval_per_template: int | None = doc("first N questions of each template of eval_split (null: all)", 40)
    seed: int | None = doc(
        "training seed: adapter initialisation and row order (null: the recipe's seed)", None, minimum=0
    )


def check(config: RecipeView) -> None:
    """tune_reader's load check: :func:`workbench.stages.tune_reader.validate_section` on its section (never scoring
    on its own training split). Whether an answer-reader adapter as ``generator.model`` suits the data is checked for
    every recipe (:func:`workbench.stages.tune_reader.check_reader_adapter`, a generator check of the recipe)."""
    from workbench.stages.tune_reader import validate_section

    validate_section(config.tune_reader)
