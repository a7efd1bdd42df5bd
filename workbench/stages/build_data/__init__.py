"""Stage ``build_data``: its spec.

What it does: build the QA splits and the passage corpus as HF datasets on disk. The run code
(:mod:`workbench.stages.build_data.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "build_data",
        "build the QA splits and the passage corpus as HF datasets on disk",
        f"{__name__}.run:run",
        sections=("data",),
        uses=("data",),
    ),
)
