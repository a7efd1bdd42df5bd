"""DENSE-RAG's θ breakpoints: the only θ values a study needs to try (every θ between two neighbouring DSE values
makes the same decisions)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["dense_breakpoints"]


def dense_breakpoints(records: Sequence[dict[str, Any]]) -> list[float]:
    """θ candidates for DENSE-RAG: midpoints between the distinct DSE values θ is compared with in ``records`` —
    DSE₀ (the triage, ``dense`` step: certain iff DSE₀ ≤ θ) and every refinement iteration's DSE (``refine`` steps: the
    stop test DSE_min < θ) — one value below the smallest (every question uncertain) and one above the largest.

    Exhaustive for θ at or above the θ the records were made with: a larger θ makes more questions certain and stops
    each refinement at the same iteration or earlier, so it only meets DSE values these runs met. Below it, a
    refinement may run past where these runs stopped and meet values they never saw: two θ's between the same
    breakpoints there make the same triage but may stop a refinement differently."""
    values = set()
    for record in records:
        for step in json.loads(record["trace"])["steps"]:
            if step["name"] in ("dense", "refine") and step["detail"].get("dse") is not None:
                values.add(round(float(step["detail"]["dse"]), 9))
    points = sorted(values)
    if not points:
        return []
    mids = [(a + b) / 2 for a, b in itertools.pairwise(points)]
    below = points[0] / 2 if points[0] > 0 else None  # θ ≥ 0; triage is DSE ≤ θ, so θ < min(DSE) needs min > 0
    return [round(x, 6) for x in ([below] if below is not None else []) + mids + [points[-1] + 0.05]]
