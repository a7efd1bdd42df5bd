"""The monitoring reference of a recalibrated version: the feedback's fit part, described as export describes its
calibration split.

A new version decides differently from its parent, so the parent's ``monitoring/reference.json`` (its calibration
split under its own decision) no longer says what in-distribution traffic looks like for it. The new reference is
:func:`~workbench.monitoring.reference.build_reference` — the one builder export uses — over the feedback rows the
new calibrators were fitted on: their raw features after the NaN policy, the new decision's P(correct) on them and
its retrieval decision (P < τ), with the parent reference's alarm settings (the defaults when it had none).

The ``ood`` series is the parent's OOD profile run on the rows' questions, as export runs it on its split. A profile
whose embedding check needs the bundle's embedder is run only when one is given (``embed``: ``recalibrate`` loads it
with :func:`profile_embed`, as the runtime does); without it the parent's ``ood`` series is kept (an OOD rate without
the embedding check would be lower than what ``serve`` measures, and raise an alarm on in-distribution traffic), and
the caller's note says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.bundle.files import BundleFiles
from workbench.classify.policy import DecisionPolicy
from workbench.monitoring.reference import DriftReference, build_reference
from workbench.monitoring.settings import DriftSettings
from workbench.runtime.options import RuntimeOptions
from workbench.runtime.tools import bundle_embedder

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


def profile_embed(root: str | Path, manifest: dict[str, Any]) -> Callable[[list[str]], Any] | None:
    """The ``encode`` of the embedder of the bundle directory ``root`` (its verified ``manifest``) for its OOD
    profile's embedding check, when the profile has one: the embedder loaded as the runtime loads it
    (:func:`~workbench.runtime.tools.bundle_embedder`: a local one's weights checked against the manifest, an embedded
    MiniLM resolved from its package, a served one's probe vectors compared), and used only when it is the one the
    profile was fitted with (:meth:`~workbench.calibration.ood.OODProfile.embedder_for`). None without a profile or an
    embedding check, or for another embedder; AssetError (one line) when the embedder cannot be loaded."""
    path = ((manifest.get("decision") or {}).get("files") or {}).get("ood")
    if not path:
        return None
    profile = BundleFiles(Path(root), manifest).learned(path, "decision.files.ood", {"ood_profile"})
    if profile.embedding is None:
        return None
    embedder = bundle_embedder(manifest["models"]["embedder"], RuntimeOptions(), CostCounter(), [])
    return profile.embedder_for(embedder())
