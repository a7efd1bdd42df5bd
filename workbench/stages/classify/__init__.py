"""Stage ``classify``: its spec.

What it does: train LR / MLP / k-NN / tree retrieval-decision classifiers, choose τ, export ONNX, build the routing
table. The run code (:mod:`workbench.stages.classify.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.classify.settings import ClassifySection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "classify",
        "train LR / MLP / k-NN / tree retrieval-decision classifiers, choose τ, export ONNX, build the routing table",
        f"{__name__}.run:run",
        version=5,  # 5: BCa intervals; 4: per-router costs from the collection's per-stat costs; the router search
        sections=("classify",),
        inputs=("calibrate", "collect"),
        settings=ClassifySection,
        check=check,
        report=f"{__name__}.report:section",
    ),
)
