"""Stage ``transfer``: the calibrators and the shipped decision in distribution vs on another template family.

Its spec; the run code (:mod:`workbench.stages.transfer.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.spec import StageSpec
from workbench.stages.transfer.settings import TransferSection, check

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "transfer",
        "measure the calibrators and the shipped decision in distribution vs on another template family",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        # collect, generator, nli, embedder, retrieval: the shifted questions are collected as collect does
        sections=(
            "transfer",
            "data",
            "collect",
            "calibrate",
            "classify",
            "generator",
            "nli",
            "embedder",
            "retrieval",
        ),
        inputs=("build_data", "collect", "calibrate", "classify"),
        optional_inputs=("study",),
        uses=("generator", "embedder"),
        settings=TransferSection,
        check=check,
        splits=("transfer.split",),
        report=f"{__name__}.report:section",
    ),
)
