"""Stage ``evaluate``: its spec.

What it does: run the selected methods over a split; save every trace; compare quality, retrieval rate, cost,
latency. The run code (:mod:`workbench.stages.evaluate.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.evaluate.settings import EvaluateSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "evaluate",
        "run the selected methods over a split; save every trace; compare quality, retrieval rate, cost, latency",
        f"{__name__}.run:run",
        resources=("generator", "controller_generator", "embedder", "retriever"),
        sections=("evaluate", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        optional_inputs=("collect", "calibrate", "classify", "fit_utility", "study", "distill"),
        version=5,  # 2: DENSE-RAG / InSemRAG chunk by their papers, DTR searches densely, choice scoring;
        # 3: the generation cache's savings (cached_*, *_uncached) and prompt / generated tokens in the outputs;
        # 4: InSemRAG's controller options and keep_threshold; a refine round that drops every candidate keeps
        # the top k2; 5: 90% BCa intervals of each method's EM / F1 / containment / decision accuracy in summary.json
        uses=("generator", "embedder"),
        settings=EvaluateSection,
        check=check,
        splits=("evaluate.split",),
        report=f"{__name__}.report:section",
    ),
)
