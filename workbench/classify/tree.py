"""A decision-tree retrieval-decision classifier: fitted with scikit-learn, stored as node arrays, applied in numpy.

The tree is scikit-learn's ``DecisionTreeClassifier`` (Gini impurity, best splits) with its depth capped
(:data:`MAX_DEPTH`: the exported graph unrolls one step per level) and a minimum leaf size; P(correct) of a row is
the share of correct answers in its leaf. The model keeps only arrays — per node the split feature, the threshold,
the two children (−1 at a leaf) and the leaf's P(correct) — written as JSON, never a pickle. A row goes left iff its
feature, read at float32 precision, is <= the float64 threshold: scikit-learn's own rule, which numpy and the ONNX
graph apply alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.classify.inputs import as_features, as_labels, resolve_feature_names
from workbench.core.errors import ConfigError, DataError

FORMAT_VERSION = 1
"""Version of the dict layout written by :meth:`TreeModel.to_dict`."""

MAX_DEPTH = 32
"""Deepest tree accepted (the ONNX graph takes one step per level)."""

MAX_NODES = 1 << 16
"""Most nodes a tree may hold."""


@dataclass(frozen=True)
class TreeConfig:
    """The tree's settings: ``max_depth`` (1 to :data:`MAX_DEPTH`; scikit-learn's unbounded default cannot be
    exported) and ``min_samples_leaf`` (>= 1); ConfigError otherwise."""

    max_depth: int = 5
    min_samples_leaf: int = 10

    def __post_init__(self) -> None:
        for key, low, high in (("max_depth", 1, MAX_DEPTH), ("min_samples_leaf", 1, None)):
            value = getattr(self, key)
            ok = not isinstance(value, bool) and isinstance(value, int) and value >= low
            if not ok or (high is not None and value > high):
                bound = f"{low} to {high}" if high is not None else f">= {low}"
                raise ConfigError(f"must be an integer {bound}, got {value!r}", f"tree.{key}")


@dataclass(frozen=True, eq=False)
class TreeModel:
    """A fitted tree as arrays over its nodes (node 0 the root): ``feature`` and ``threshold`` of each split,
    ``left`` / ``right`` children (−1 at a leaf; a child's index is above its parent's), ``value`` = P(correct) of
    the node's training rows; ``depth`` the number of splits on the longest path."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    depth: int
    feature_names: tuple[str, ...]

    kind: ClassVar[str] = "tree"

    @property
    def n_features(self) -> int:
        """The number of input features."""
        return len(self.feature_names)

    def step_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(feature, threshold, left, right)`` with every leaf pointing to itself (feature 0, threshold 0), so a
        fixed number of steps (``max(depth, 1)``) takes every row to its leaf."""
        leaf = self.left < 0
        index = np.arange(self.left.size)
        return (
            np.where(leaf, 0, self.feature),
            np.where(leaf, 0.0, self.threshold),
            np.where(leaf, index, self.left),
            np.where(leaf, index, self.right),
        )

    def leaves(self, X: object) -> np.ndarray:
        """The leaf index of each row of ``X`` (read at float32 precision, as scikit-learn and the graph read it)."""
        arr = as_features(X, n_features=self.n_features).astype(np.float32).astype(np.float64)
        feature, threshold, left, right = self.step_tables()
        node = np.zeros(arr.shape[0], dtype=np.int64)
        rows = np.arange(arr.shape[0])
        for _ in range(max(self.depth, 1)):
            node = np.where(arr[rows, feature[node]] <= threshold[node], left[node], right[node])
        return node

    def predict_proba(self, X: object) -> np.ndarray:
        """P(correct) for each row of ``X``: its leaf's share of correct answers, float64 ``[rows]``; DataError on
        bad input."""
        return self.value[self.leaves(X)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: feature names, depth and the node arrays as lists."""
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "feature_names": list(self.feature_names),
            "depth": int(self.depth),
            "feature": [int(v) for v in self.feature],
            "threshold": [float(v) for v in self.threshold],
            "left": [int(v) for v in self.left],
            "right": [int(v) for v in self.right],
            "value": [float(v) for v in self.value],
        }

    @classmethod
    def from_dict(cls, d: Any) -> TreeModel:
        """Rebuild from :meth:`to_dict` output; DataError unless the arrays make a tree: equal lengths, children
        both present or both −1, every child above its parent and each node a child once (no cycle, no sharing),
        split features in range, finite thresholds, values in [0, 1], the recorded depth the real one."""
        where = "tree model"
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError("not a decision-tree description (kind != 'tree')", where)
        if d.get("version") != FORMAT_VERSION:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {FORMAT_VERSION})", where)
        keys = {"kind", "version", "feature_names", "depth", "feature", "threshold", "left", "right", "value"}
        extra, missing = sorted(set(d) - keys), sorted(keys - set(d))
        if extra or missing:
            raise DataError(f"unknown key(s) {extra}" if extra else f"missing key(s) {missing}", where)
        try:
            names = tuple(str(n) for n in d["feature_names"])
            ints = {k: np.asarray(d[k], dtype=np.int64).reshape(-1) for k in ("feature", "left", "right")}
            floats = {k: np.asarray(d[k], dtype=np.float64).reshape(-1) for k in ("threshold", "value")}
            depth = int(d["depth"])
        except (TypeError, ValueError, OverflowError) as exc:
            raise DataError(f"malformed decision-tree description ({exc})", where) from None
        sizes = {k: a.size for k, a in (ints | floats).items()}
        n_nodes = sizes["value"]
        if set(sizes.values()) != {n_nodes} or not 1 <= n_nodes <= MAX_NODES:
            raise DataError(f"node arrays must share one length of 1 to {MAX_NODES}, got {sizes}", where)
        _check_structure(ints, floats, len(names), depth, where)
        return cls(ints["feature"], floats["threshold"], ints["left"], ints["right"], floats["value"], depth, names)


def _check_structure(
    ints: dict[str, np.ndarray], floats: dict[str, np.ndarray], n: int, depth: int, where: str
) -> None:
    """DataError unless the node arrays make one tree of ``depth`` over ``n`` features (see ``from_dict``)."""
    left, right, feature = ints["left"], ints["right"], ints["feature"]
    index = np.arange(left.size)
    leaf = left < 0
    if not np.array_equal(leaf, right < 0) or (leaf & ((left != -1) | (right != -1))).any():
        raise DataError("a node must have both children or none (-1)", where)
    children = np.concatenate([left[~leaf], right[~leaf]])
    if (left[~leaf] <= index[~leaf]).any() or (right[~leaf] <= index[~leaf]).any() or (children >= left.size).any():
        raise DataError("every child must come after its parent, inside the tree", where)
    if np.unique(children).size != children.size or children.size != left.size - 1:
        raise DataError("every node but the root must be the child of exactly one node", where)
    if ((feature[~leaf] < 0) | (feature[~leaf] >= n)).any():
        raise DataError(f"split features must be in 0 to {n - 1}", where)
    if not np.isfinite(floats["threshold"]).all() or not ((floats["value"] >= 0) & (floats["value"] <= 1)).all():
        raise DataError("thresholds must be finite and values in [0, 1]", where)
    levels = np.zeros(left.size, dtype=np.int64)
    for node in index[~leaf]:  # parents come before children, so one pass gives every depth
        levels[left[node]] = levels[right[node]] = levels[node] + 1
    if int(levels.max()) != depth or depth > MAX_DEPTH:
        raise DataError(f"the recorded depth is not the tree's, or the tree is deeper than {MAX_DEPTH}", where)


def fit_tree(
    X: object,
    y: object,
    config: TreeConfig | None = None,
    *,
    seed: int = 0,
    feature_names: Sequence[str] | None = None,
) -> TreeModel:
    """Fit scikit-learn's ``DecisionTreeClassifier`` (Gini, ``max_depth``, ``min_samples_leaf``,
    ``random_state=seed``) on ``X`` and ``y`` (1 = correct) and keep its nodes as arrays. DataError on non-finite
    features or one-class labels."""
    from sklearn.tree import DecisionTreeClassifier

    config = config or TreeConfig()
    arr = as_features(X)
    labels = as_labels(y, arr.shape[0])
    names = resolve_feature_names(feature_names, arr.shape[1])
    fitted = DecisionTreeClassifier(
        max_depth=config.max_depth, min_samples_leaf=config.min_samples_leaf, random_state=seed
    ).fit(arr, labels)
    tree = fitted.tree_
    shares = tree.value[:, 0, :] / tree.value[:, 0, :].sum(axis=1, keepdims=True)
    correct = int(np.flatnonzero(fitted.classes_ == 1.0)[0])
    left = np.asarray(tree.children_left, dtype=np.int64)
    leaf = left < 0
    return TreeModel(
        feature=np.where(leaf, 0, tree.feature).astype(np.int64),
        threshold=np.where(leaf, 0.0, tree.threshold).astype(np.float64),
        left=left,
        right=np.asarray(tree.children_right, dtype=np.int64),
        value=shares[:, correct].astype(np.float64),
        depth=int(tree.max_depth),
        feature_names=names,
    )
