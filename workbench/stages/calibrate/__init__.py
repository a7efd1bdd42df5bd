"""Stage ``calibrate``: its spec.

What it does: fit one calibrator per feature on the calibration split (out of fold there); ranking before / after.
The run code (:mod:`workbench.stages.calibrate.run`) is imported only when the stage runs.
"""

from __future__ import annotations

from workbench.stages.calibrate.settings import CalibrateSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "calibrate",
        "fit one calibrator per feature on the calibration split (out of fold there); ranking before / after",
        f"{__name__}.run:run",
        # 7: each feature's calibrator chosen (auto, beta calibration) and the choice recorded; 6: the OOD flag
        # calibrated to a false-positive rate (question embeddings); 5: isotonic by scikit-learn, BCa intervals;
        # 4: the OOD profile; 3: ±inf imputed with the range
        version=7,
        resources=("embedder",),  # the OOD flag's question embeddings
        sections=("calibrate", "embedder"),
        inputs=("collect", "build_data"),  # build_data: the questions of the fit, threshold and measured splits
        uses=("embedder",),
        settings=CalibrateSection,
        check=check,
        report=f"{__name__}.report:section",
    ),
)
