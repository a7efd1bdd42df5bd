"""Stage ``tune_reader``: a LoRA reader adapter for the answering model, scored against its base.

Its spec; the run code (:mod:`workbench.stages.tune_reader.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.spec import StageSpec
from workbench.stages.tune_reader.settings import TuneReaderSection, check, check_reader_adapter

__all__ = ["SPECS", "check_reader_adapter"]

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "tune_reader",
        "train a LoRA reader adapter: the answering model on training questions closed-book, with retrieval and "
        "with gold passages (Lightning; resumable); score it vs its base",
        f"{__name__}.run:run",
        trains=True,
        resources=("generator", "controller_generator", "embedder", "retriever"),
        sections=("tune_reader", "generator", "retrieval", "answer"),
        inputs=("build_data",),
        version=3,  # 3: gradient checkpointing, target-only output layer; 2: adapter.json records training_data
        uses=("generator",),
        settings=TuneReaderSection,
        check=check,
        report=f"{__name__}.report:section",
    ),
)
