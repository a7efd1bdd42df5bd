"""Stage ``distill``: a LoRA student controller trained on the distill_data traces, scored against its base.

Its spec; the run code (:mod:`workbench.stages.distill.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.distill.settings import DistillSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "distill",
        "train a LoRA student controller on the distill_data traces (Lightning; resumable); score it vs its base",
        f"{__name__}.run:run",
        trains=True,
        sections=("distill",),
        inputs=("distill_data",),
        version=2,  # 2: gradient checkpointing (distill.gradient_checkpointing) and the target-only output layer
        multi_process=True,  # every rank of a torchrun / srun launch trains; rank 0 writes
        settings=DistillSection,
        check=check,
        report=f"{__name__}.report:section",
    ),
)
