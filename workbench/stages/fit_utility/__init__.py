"""Stage ``fit_utility``: its spec.

What it does: train D²-RAG's gold-free utility classifier on ΔSePer labels of (question, top-k context) pairs. The
run code (:mod:`workbench.stages.fit_utility.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.fit_utility.settings import FitUtilitySection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "fit_utility",
        "train D²-RAG's gold-free utility classifier on ΔSePer labels of (question, top-k context) pairs",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        version=4,  # 4: a three-class classifier by default, out-of-fold figures next to the majority baseline
        sections=("fit_utility", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        settings=FitUtilitySection,
        check=check,
        splits=("fit_utility.split",),
        report=f"{__name__}.report:section",
    ),
)
