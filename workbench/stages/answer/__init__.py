"""Stage ``answer``: answer a split closed-book, with retrieval and with its gold passages; score the answers.

Its spec; the run code (:mod:`workbench.stages.answer.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.answer.settings import AnswerSection
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "answer",
        "answer a split closed-book, with retrieval and with its gold passages; score the answers; count tokens",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        sections=("generator", "embedder", "retrieval", "answer"),
        inputs=("build_data",),
        version=2,  # 2: either-or questions scored by the option named; format_ok; the gold mode
        uses=("generator",),
        settings=AnswerSection,
        splits=("answer.split",),
        report=f"{__name__}.report:section",
    ),
)
