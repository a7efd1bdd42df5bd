"""The retrieval threshold τ: retrieve when the classifier's P(correct) < τ, chosen on a validation split.

Candidate thresholds are 0 (never retrieve), the midpoints between consecutive sorted unique probabilities, and
1 + ε (always retrieve), so every distinct retrieval set is tried once. Every rule breaks ties toward the smallest τ
(the fewest retrievals), which matches "first maximum wins" on an ascending grid.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from workbench.classify.inputs import as_labels, check_vector
from workbench.core.errors import ConfigError, DataError

RULES = ("max_f1", "target_rate", "max_routed_score")
ABOVE_ONE = float(np.nextafter(1.0, 2.0))  # 1 + ε: the candidate that retrieves for every example


@dataclass(frozen=True)
class ThresholdChoice:
    """A chosen threshold: retrieve iff P(correct) < ``tau``.

    ``retrieval_rate``: the share of validation examples retrieved at ``tau``; ``value``: the rule's objective at
    ``tau`` (F1 of the retrieve class for ``max_f1``, the retrieval rate for ``target_rate``, the mean routed QA
    score for ``max_routed_score``).
    """

    tau: float
    rule: str
    retrieval_rate: float
    value: float

    def to_dict(self) -> dict[str, Any]:
        """The choice as a JSON-ready dict."""
        return asdict(self)


def candidate_thresholds(p_correct: np.ndarray) -> np.ndarray:
    """Ascending candidate τ values: 0, midpoints of sorted unique ``p_correct``, and 1 + ε."""
    u = np.unique(p_correct)
    return np.concatenate([[0.0], (u[:-1] + u[1:]) / 2.0, [ABOVE_ONE]])


def choose_threshold(
    p_correct_val: object,
    y_val: object,
    *,
    rule: str,
    target_rate: float | None = None,
    qa_closed: object = None,
    qa_rag: object = None,
) -> ThresholdChoice:
    """Choose τ on validation predictions ``p_correct_val`` with labels ``y_val`` (1 = closed-book answer correct).

    Rules:
    - ``"max_f1"``: maximise F1 of the retrieve class (positive = incorrect closed-book answer, predicted positive =
      retrieved); needs at least one incorrect answer.
    - ``"target_rate"``: the smallest τ whose retrieval rate is ≥ ``target_rate`` (in [0, 1]).
    - ``"max_routed_score"``: maximise the mean routed QA score, ``qa_rag[i]`` if example i is retrieved else
      ``qa_closed[i]``.
    ConfigError for an unknown rule or a missing/invalid rule argument; DataError for malformed arrays
    (probabilities outside [0, 1], non-binary labels, length mismatches, non-finite QA scores).
    """
    if rule not in RULES:
        raise ConfigError(f"unknown rule {rule!r}; choose one of {list(RULES)}", "threshold.rule")
    p = check_vector(p_correct_val, np.size(np.asarray(p_correct_val)), where="p_correct_val")
    if p.size == 0:
        raise DataError("no validation predictions", "p_correct_val")
    if ((p < 0) | (p > 1)).any():
        raise DataError("probabilities must lie in [0, 1]", "p_correct_val")
    y = as_labels(y_val, p.size, where="y_val", both_classes=False)

    order = np.argsort(p, kind="mergesort")
    taus = candidate_thresholds(p)
    counts = np.searchsorted(p[order], taus, side="left")  # examples with p < τ, i.e. retrieved
    rates = counts / p.size

    if rule == "max_f1":
        incorrect = (y[order] == 0).astype(np.float64)
        n_pos = incorrect.sum()
        if n_pos == 0:
            raise DataError("no incorrect answers (y = 0): F1 of the retrieve class is undefined", "y_val")
        tp = np.concatenate([[0.0], np.cumsum(incorrect)])[counts]
        values = 2.0 * tp / (counts + n_pos)
    elif rule == "target_rate":
        if target_rate is None:
            raise ConfigError("rule 'target_rate' needs target_rate", "threshold.target_rate")
        if not 0.0 <= float(target_rate) <= 1.0:
            raise ConfigError(f"must be in [0, 1], got {target_rate}", "threshold.target_rate")
        meets = rates >= float(target_rate) - 1e-12
        k = int(np.argmax(meets))
        return ThresholdChoice(float(taus[k]), rule, float(rates[k]), float(rates[k]))
    else:
        if qa_closed is None or qa_rag is None:
            raise ConfigError("rule 'max_routed_score' needs qa_closed and qa_rag", "threshold.rule")
        closed = check_vector(qa_closed, p.size, where="qa_closed")
        rag = check_vector(qa_rag, p.size, where="qa_rag")
        gain = np.concatenate([[0.0], np.cumsum((rag - closed)[order])])[counts]
        values = (closed.sum() + gain) / p.size

    k = int(np.argmax(values >= values.max() - 1e-12))  # first maximum = smallest τ (cumsum rounding ignored)
    return ThresholdChoice(float(taus[k]), rule, float(rates[k]), float(values[k]))
