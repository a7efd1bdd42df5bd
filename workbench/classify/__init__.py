"""Retrieval-decision classifiers: logistic regression, a small MLP, k-NN and a decision tree on calibrated
uncertainty features.

Labels are 1 when the closed-book answer is correct (no retrieval needed); every model predicts P(correct), and
retrieval happens when P(correct) < τ. Importing this package does not import torch, lightning, scikit-learn or onnx:
they are loaded by the functions that need them.
"""

from workbench.classify.knn import KNNConfig, KNNModel, fit_knn
from workbench.classify.logistic import LogisticModel, fit_logistic
from workbench.classify.mlp import MLPConfig, MLPModel, fit_mlp
from workbench.classify.onnx_export import export_onnx, run_onnx
from workbench.classify.select import KindSummary, RunScore, SelectionResult, train_classifiers
from workbench.classify.threshold import ThresholdChoice, choose_threshold
from workbench.classify.tree import TreeConfig, TreeModel, fit_tree

__all__ = [
    "KNNConfig",
    "KNNModel",
    "KindSummary",
    "LogisticModel",
    "MLPConfig",
    "MLPModel",
    "RunScore",
    "SelectionResult",
    "ThresholdChoice",
    "TreeConfig",
    "TreeModel",
    "choose_threshold",
    "export_onnx",
    "fit_knn",
    "fit_logistic",
    "fit_mlp",
    "fit_tree",
    "run_onnx",
    "train_classifiers",
]
