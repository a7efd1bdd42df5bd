"""The monitoring reference of a recalibrated version: the feedback's fit part, described as export describes its
calibration split.

A new version decides differently from its parent, so the parent's ``monitoring/reference.json`` (its calibration
split under its own decision) no longer says what in-distribution traffic looks like for it. The new reference is
:func:`~workbench.monitoring.reference.build_reference` — the one builder export uses — over the feedback rows the
new calibrators were fitted on: their raw features after the NaN policy, the new decision's P(correct) on them and
its retrieval decision (P < τ), with the parent reference's alarm settings (the defaults when it had none).

The ``ood`` series is the parent's OOD profile run on the rows' questions, as export runs it on its split. A profile
whose embedding check needs the bundle's embedder is run only when one is given (``embed``); without it the parent's
``ood`` series is kept (an OOD rate without the embedding check would be lower than what ``serve`` measures, and
raise an alarm on in-distribution traffic), and the caller's note says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.classify.policy import DecisionPolicy
from workbench.monitoring.reference import DriftReference, build_reference
from workbench.monitoring.settings import DriftSettings

SPLIT = "feedback"
"""The ``split`` a recalibrated version's reference names: the fit part of its feedback."""


def feedback_reference(
    policy: DecisionPolicy,
    features: np.ndarray,
    questions: Sequence[str],
    parent: DriftReference | None,
    ood: Any = None,
    embed: Callable[[list[str]], Any] | None = None,
) -> tuple[DriftReference, bool]:
    """The reference of the fit part's ``features`` (rows × ``policy.features``, after the NaN policy) and
    ``questions`` under ``policy``, and whether its ``ood`` series was kept from ``parent`` (module docstring).
    ``ood`` is the parent's OOD profile (None: the bundle has none, and the reference no ``ood`` series)."""
    p_correct = policy.p_correct(features)
    flags, kept = None, False
    if ood is not None and (ood.embedding is None or embed is not None):
        flags = np.array([result.ood for result in ood.check_questions(list(questions), embed)], dtype=float)
    elif ood is not None:
        kept = parent is not None and "ood" in parent.series
    settings = parent.settings if parent is not None else DriftSettings()
    reference = build_reference(
        SPLIT,
        {name: features[:, j] for j, name in enumerate(policy.features)},
        p_correct,
        (p_correct < policy.tau).astype(float),
        flags,
        settings,
    )
    if kept:
        reference.series["ood"] = parent.series["ood"]
    return reference, kept
