"""Retrieval-decision classifiers: logistic regression and a small MLP on calibrated uncertainty features.

Labels are 1 when the closed-book answer is correct (no retrieval needed); every model predicts P(correct), and
retrieval happens when P(correct) < τ. Importing this package does not import torch, lightning or onnx: they are
loaded by the functions that need them.
"""

from workbench.classify.logistic import LogisticModel, fit_logistic
from workbench.classify.mlp import MLPConfig, MLPModel, fit_mlp
from workbench.classify.onnx_export import export_onnx, run_onnx
from workbench.classify.select import KindSummary, RunScore, SelectionResult, train_classifiers
from workbench.classify.threshold import ThresholdChoice, choose_threshold

__all__ = [
    "KindSummary",
    "LogisticModel",
    "MLPConfig",
    "MLPModel",
    "RunScore",
    "SelectionResult",
    "ThresholdChoice",
    "choose_threshold",
    "export_onnx",
    "fit_logistic",
    "fit_mlp",
    "run_onnx",
    "train_classifiers",
]
