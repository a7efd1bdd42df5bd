"""Stages ``train_nli`` (train the MiniLM NLI cross-encoder) and ``eval_nli`` (measure every NLI judge).

Their specs; the run code (:mod:`workbench.stages.train_nli.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.stages.spec import StageSpec
from workbench.stages.train_nli.settings import TrainNLISection

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "train_nli",
        "train the MiniLM NLI cross-encoder on pairs built from the Wikipedia corpus",
        f"{__name__}.run:run",
        trains=True,
        resources=("generator", "embedder"),
        sections=("train_nli",),
        uses=("embedder",),
        settings=TrainNLISection,
    ),
    StageSpec(
        "eval_nli",
        "measure every NLI judge on held-out NLI pairs and short-answer pairs",
        f"{__name__}.run:evaluate",
        resources=("generator", "embedder"),
        sections=("train_nli", "nli", "generator", "embedder"),
        inputs=("train_nli",),
        uses=("generator", "embedder"),
    ),
)
