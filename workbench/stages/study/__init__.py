"""Stage ``study``: its spec.

What it does: tune the methods' thresholds and α with Optuna on val (thresholds replayed, generations cached). The
run code (:mod:`workbench.stages.study.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.spec import StageSpec
from workbench.stages.study.settings import StudySection, check

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "study",
        "tune the methods' thresholds and α with Optuna on val (thresholds replayed, generations cached)",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        version=2,  # 2: parameter importances by fANOVA (Optuna 5's default ranks a custom target's low values)
        sections=("study", "evaluate", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        optional_inputs=("collect", "calibrate", "classify", "fit_utility"),
        uses=("generator", "embedder"),
        settings=StudySection,
        check=check,
        splits=("study.split", "study.test_split"),
        report=f"{__name__}.report:section",
    ),
)
