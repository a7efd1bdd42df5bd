"""Stage ``distill_data``: InSemRAG's controller decisions from a prompted teacher plus gold-derived labels.

Its spec; the run code (:mod:`workbench.stages.distill_data.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.distill_data.settings import DistillDataSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "distill_data",
        "record InSemRAG's controller decisions from a prompted teacher plus gold-derived labels (trace dataset)",
        f"{__name__}.run:run",
        resources=("generator", "controller_generator", "embedder", "retriever"),
        # evaluate: its passage_chars / max_new_tokens shape the passages the controller is shown
        sections=("distill_data", "generator", "embedder", "evaluate"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        settings=DistillDataSection,
        check=check,
        splits=("distill_data.split", "distill_data.heldout_split"),
        report=f"{__name__}.report:section",
    ),
)
