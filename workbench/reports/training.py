"""The training-loss plot of a LoRA-training stage, shared by the ``distill`` and ``tune_reader`` stages' sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.plots import loss_curve


def lora_loss_plot(summary: dict[str, Any], path: Path, stage: str) -> list[dict[str, Any]]:
    """Draw the training loss of stage ``stage`` from its ``summary.json`` (``loss_curve``, ``base_model``,
    ``resumed_from_step``) at ``path``; return the curve ([] when the summary has none, and nothing is drawn)."""
    curve = summary.get("loss_curve") or []
    if curve:
        loss_curve(
            path,
            curve,
            title=f"{stage}: training loss, {summary.get('base_model')} + LoRA",
            resumed_from=summary.get("resumed_from_step"),
        )
    return curve
