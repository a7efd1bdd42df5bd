"""DENSE-RAG's θ breakpoints hold every DSE value θ is compared with: the triage's DSE₀ and, with refinement, each
refinement iteration's DSE (the stop test DSE_min < θ) — not the triage values alone."""

from __future__ import annotations

import json

from workbench.methods.dense_rag import should_stop
from workbench.methods.dense_rag.breakpoints import dense_breakpoints


def _record(dse0: float, refined: list[float]) -> dict:
    steps = [{"name": "retrieve", "detail": {}}, {"name": "dense", "detail": {"dse": dse0, "certain": False}}]
    steps += [{"name": "refine", "detail": {"iteration": i + 1, "dse": v}} for i, v in enumerate(refined)]
    return {"trace": json.dumps({"steps": steps})}


def test_refinement_dse_values_are_breakpoints_too():
    # one question certain at the triage, one refined through DSE 0.9 → 0.5 → 0.3
    points = dense_breakpoints([_record(0.2, []), _record(1.1, [0.9, 0.5, 0.3])])
    assert points == [0.1, 0.25, 0.4, 0.7, 1.0, 1.15]
    # θ = 0.45 and θ = 0.6 make the same triage (the DSE₀ values alone put them in one gap, between 0.2 and 1.1) but
    # stop the refinement at different iterations; each stops where the breakpoint of its own gap stops
    best = [0.9, 0.5, 0.3]  # the running DSE_min over the iterations
    stops = {
        theta: next(i for i, v in enumerate(best, 1) if should_stop(v, 1, theta)) for theta in (0.4, 0.45, 0.6, 0.7)
    }
    assert stops == {0.4: 3, 0.45: 3, 0.6: 2, 0.7: 2}
    assert dense_breakpoints([_record(0.2, []), _record(1.1, [])]) == [0.1, 0.65, 1.15]  # the triage values alone


def test_the_docstring_says_where_the_breakpoints_are_exhaustive():
    doc = " ".join(dense_breakpoints.__doc__.split())
    assert (
        "refinement iteration's DSE" in doc and "Exhaustive for θ at or above the θ the records were made with" in doc
    )
