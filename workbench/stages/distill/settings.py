"""The 'distill' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.settings import RecipeView, check_own_section


@dataclass
class DistillSection:
    """The 'distill' stage: a LoRA student (peft + PyTorch Lightning) trained on the distill_data traces to be
    InSemRAG's controller, then scored on the traces' heldout rows against its base prompted as the controller
    (docs in workbench/stages/distill/run.py; multi-GPU launches: docs/distillation.md)."""

    base_model: str = doc(
        "the student's base model: embedded 'smollm2', a local model directory or an explicit HF hub id", "smollm2"
    )
    lora_r: int = doc("LoRA rank r", 16)
    lora_alpha: int = doc("LoRA alpha (the adapter's update is scaled by alpha / r)", 32)
    lora_dropout: float = doc("dropout on the LoRA input, in [0, 1)", 0.05)
    target_modules: list[str] = doc(
        "modules LoRA wraps (default: the attention projections of Llama-style models); absent names are an error",
        ["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    learning_rate: float = doc("AdamW learning rate (constant)", 0.0001)
    epochs: int = doc("training epochs", 2)
    batch_size: int = doc("rows per batch and device", 8)
    grad_accum: int = doc(
        "batches per optimizer step (effective batch: batch_size x grad_accum x devices x num_nodes)", 1
    )
    precision: Literal["32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true"] = doc(
        "Lightning precision: 32-true on CPU, bf16-mixed on recent GPUs (16-*: GPUs only)", "32-true"
    )
    accelerator: Literal["auto", "cpu", "gpu"] = doc("where to train (auto: a GPU when torch sees one)", "auto")
    devices: int = doc(
        "devices (processes) per node; more than 1 needs a multi-process launch (docs/distillation.md)", 1
    )
    num_nodes: int = doc("nodes (launch with torchrun or srun; docs/distillation.md)", 1)
    strategy: Literal["auto", "ddp", "deepspeed_stage_2", "deepspeed_stage_3"] = doc(
        "Lightning strategy: auto (one device, DDP for several), ddp, or DeepSpeed ZeRO stage 2 / 3 (needs the "
        "deepspeed package; on CPU a C++ compiler for its communication op)",
        "auto",
    )
    max_length: int = doc("tokens per training sequence (longer prompts lose their start)", 1024)
    sources: list[Literal["teacher", "gold"]] = doc(
        "which rows of the trace dataset to train on: teacher replies, gold-derived labels, or both",
        ["teacher", "gold"],
    )
    gradient_checkpointing: bool = doc(
        "recompute each layer's activations in the backward pass instead of keeping them (about a third of the "
        "training memory for ~25 % more time per step)",
        True,
    )
    checkpoint_every: int = doc(
        "optimizer steps between checkpoints (0: at epoch ends only); an interrupted run resumes from the newest",
        50,
        minimum=0,
    )
    merge: bool = doc("also write the merged model (base + LoRA) to merged/ in the stage output", False)
    eval_limit: int | None = doc("heldout rows scored per decision and source (null: all)", 50)
    eval_batch_size: int = doc("prompts per batch when base and student are scored on the heldout rows", 8)
    seed: int | None = doc(
        "training seed: adapter initialisation and row order (null: the recipe's seed)", None, minimum=0
    )


def check(config: RecipeView) -> None:
    """distill's load check: :func:`workbench.stages.distill.run.validate_section` on its section (no torch import)."""
    from workbench.stages.distill.run import validate_section

    check_own_section("distill", validate_section, config)
