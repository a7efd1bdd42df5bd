"""The fixed table of learned-artifact kinds: each ``kind`` a file may name, and the workbench class it becomes.

:mod:`workbench.methods.learned` reads and writes artifacts through this table and imports it only when an artifact
is read or written: the classes here import numpy, which the method registry (and so recipe loading) does not need.
A file only names a kind; nothing named in a file is ever imported or executed.
"""

from __future__ import annotations

from workbench.calibration.beta import BetaCalibrator
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.isotonic import IsotonicCalibrator
from workbench.calibration.ood import OODProfile
from workbench.calibration.platt import PlattCalibrator
from workbench.calibration.raw import RawCalibrator
from workbench.classify.knn import KNNModel
from workbench.classify.logistic import LogisticModel
from workbench.classify.mlp import MLPModel
from workbench.classify.tree import TreeModel
from workbench.methods.seper.utility import UtilityPredictor
from workbench.methods.seper.utility_classifier import UtilityClassifier
from workbench.uncertainty.features.probability import LarsLikeScorer

LEARNED_KINDS: dict[str, type] = {
    "calibrator_set": CalibratorSet,
    "isotonic": IsotonicCalibrator,
    "centered_isotonic": IsotonicCalibrator,
    "platt": PlattCalibrator,
    "beta": BetaCalibrator,
    "raw": RawCalibrator,
    "logistic": LogisticModel,
    "mlp": MLPModel,
    "knn": KNNModel,
    "tree": TreeModel,
    "lars": LarsLikeScorer,
    "ridge_utility": UtilityPredictor,
    "logistic_utility": UtilityClassifier,
    "ood_profile": OODProfile,
}
"""kind → the workbench's own learned-artifact class (the only classes a file can become)."""
