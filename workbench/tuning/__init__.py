"""Hyperparameter studies of the methods' thresholds and decoding coefficients, on Optuna.

Pure parts (:mod:`~workbench.tuning.space`, :mod:`~workbench.tuning.replay`) import no Optuna; the study itself
(:mod:`~workbench.tuning.study`, :mod:`~workbench.tuning.storage`) does. Nothing here is imported by the runtime.
"""
