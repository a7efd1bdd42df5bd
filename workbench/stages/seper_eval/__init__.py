"""Stage ``seper_eval``: its spec.

What it does: rank retrievers (BM25, dense, hybrid, DTR dual path) by mean ΔSePer on a labelled split. The run code
(:mod:`workbench.stages.seper_eval.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.seper_eval.settings import SeperEvalSection
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "seper_eval",
        "rank retrievers (BM25, dense, hybrid, DTR dual path) by mean ΔSePer on a labelled split",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever", "seper_eval"),
        sections=("seper_eval", "generator", "embedder", "nli"),
        inputs=("build_data",),
        version=4,  # 2: DTR's dual path searches densely by default; 3: gold and random controls; 4: BCa intervals
        uses=("generator", "embedder"),
        settings=SeperEvalSection,
        splits=("seper_eval.split",),
        report=f"{__name__}.report:section",
    ),
)
