"""Stage ``collect``: its spec.

What it does: collect uncertainty features and closed-book correctness labels per question (resumable, shardable).
The run code (:mod:`workbench.stages.collect.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.collect.settings import CollectSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "collect",
        "collect uncertainty features and closed-book correctness labels per question (resumable, shardable)",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        sections=("collect", "generator", "nli", "embedder", "retrieval"),
        inputs=("build_data",),
        version=5,  # 5: stat_cost column + stat_costs.json, rag_retriever_seconds / rag_answer_seconds columns
        uses=("generator", "embedder"),
        settings=CollectSection,
        check=check,
        splits=("collect.splits",),
        report=f"{__name__}.report:section",
    ),
)
