"""Validation and standardisation of classifier inputs: one place that says what a feature matrix and labels are.

A feature matrix is a finite 2-D float array ``[rows, features]``; labels are 0/1 with 1 = the closed-book answer is
correct (no retrieval needed). Problems are reported as one-line :class:`DataError`\\ s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.core.errors import DataError


def as_features(X: object, *, n_features: int | None = None, where: str = "X") -> np.ndarray:
    """``X`` as a float64 ``[rows, features]`` array; DataError if it is not 2-D, empty, non-finite or the wrong width.

    ``n_features``, when given, is the width the caller expects (the width the model was fitted on).
    """
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"features are not numeric ({exc})", where) from None
    if arr.ndim != 2:
        raise DataError(f"features must be a 2-D array [rows, features], got shape {arr.shape}", where)
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"features are empty (shape {arr.shape})", where)
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).any(axis=1).sum())
        raise DataError(f"{bad} row(s) hold NaN or infinite features; clean or impute them first", where)
    if n_features is not None and arr.shape[1] != n_features:
        raise DataError(f"expected {n_features} features per row, got {arr.shape[1]}", where)
    return arr


def as_labels(y: object, n_rows: int, *, where: str = "y", both_classes: bool = True) -> np.ndarray:
    """``y`` as a float64 vector of 0/1 of length ``n_rows``; DataError otherwise.

    With ``both_classes`` (the default) a vector holding one class only is refused: no classifier can be fitted or
    scored on it.
    """
    try:
        arr = np.asarray(y, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DataError(f"labels are not numeric ({exc})", where) from None
    if arr.size != n_rows:
        raise DataError(f"{arr.size} labels for {n_rows} feature rows", where)
    if not np.isin(arr, (0.0, 1.0)).all():
        raise DataError("labels must be 0 (incorrect: retrieve) or 1 (correct: no retrieval)", where)
    if both_classes and np.unique(arr).size < 2:
        raise DataError(f"labels hold one class only (all {int(arr[0])}); both 0 and 1 are needed", where)
    return arr


def resolve_feature_names(feature_names: Sequence[str] | None, n_features: int) -> tuple[str, ...]:
    """The feature names as a tuple (``f0``, ``f1``, … when none are given); DataError if the count or names are bad."""
    if feature_names is None:
        return tuple(f"f{i}" for i in range(n_features))
    names = tuple(str(name) for name in feature_names)
    if len(names) != n_features:
        raise DataError(f"{len(names)} feature names for {n_features} features", "feature_names")
    if len(set(names)) != len(names):
        raise DataError("feature names are not unique", "feature_names")
    return names


def check_vector(values: object, size: int, *, where: str) -> np.ndarray:
    """A float64 vector of ``size`` finite values read from ``values``; DataError otherwise."""
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DataError(f"values are not numeric ({exc})", where) from None
    if arr.size != size:
        raise DataError(f"expected {size} values, got {arr.size}", where)
    if not np.isfinite(arr).all():
        raise DataError("values hold NaN or infinity", where)
    return arr
