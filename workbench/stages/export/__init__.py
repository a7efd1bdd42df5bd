"""Stage ``export``: its spec.

What it does: export the run's decision logic as a versioned bundle (+ .tar.gz) for the runtime, infer and serve. The
run code (:mod:`workbench.stages.export.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.export.settings import ExportSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "export",
        "export the run's decision logic as a versioned bundle (+ .tar.gz) for the runtime, infer and serve",
        f"{__name__}.run:run",
        sections=("export",),
        optional_inputs=("build_data", "collect", "calibrate", "classify", "fit_utility", "study", "evaluate"),
        cacheable=False,
        settings=ExportSection,
        check=check,
        report=f"{__name__}.report:section",
    ),
)
