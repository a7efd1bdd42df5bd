"""Calibrators: monotone maps from an oriented confidence score to P(correct), saved as plain JSON dicts.

``make_calibrator(kind)`` builds one ("isotonic", "centered_isotonic", "platt", "beta"; "auto" chooses among them),
``fit_calibrator`` fits it, ``out_of_fold_predict`` scores a calibration split honestly, ``choose_calibrator`` picks a
feature's kind by out-of-fold log loss guarded by the raw ranking, and ``calibrator_from_dict`` rebuilds a saved one
(numpy only: applying a calibrator needs no scikit-learn and loads no pickle).
"""

from __future__ import annotations

from workbench.calibration.base import FORMAT_VERSION, Calibrator
from workbench.calibration.beta import BetaCalibrator
from workbench.calibration.choice import CalibratorChoice, ChoosingCalibrator, choose_calibrator
from workbench.calibration.isotonic import IsotonicCalibrator
from workbench.calibration.oof import fit_calibrator, out_of_fold_predict
from workbench.calibration.platt import PlattCalibrator
from workbench.calibration.registry import KINDS, calibrator_from_dict, make_calibrator

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "BetaCalibrator",
    "Calibrator",
    "CalibratorChoice",
    "ChoosingCalibrator",
    "IsotonicCalibrator",
    "PlattCalibrator",
    "calibrator_from_dict",
    "choose_calibrator",
    "fit_calibrator",
    "make_calibrator",
    "out_of_fold_predict",
]
