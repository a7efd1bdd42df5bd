"""Distilling InSemRAG's controller (spec ``seed-004-insemrag.md`` §16). The training data:

* :mod:`workbench.distill.traces` — the teacher-trace dataset format (one row per controller decision: the exact
  rendered input, the target, the decision type, the source) and :class:`~workbench.distill.traces.
  RecordingController`, the prompted controller over a teacher model that records every decision it makes;
* :mod:`workbench.distill.gold` — labels derived from the gold data where the spec allows it (§16.2): relevance
  from gold-article membership, completeness from synthetically damaged chunks, coverage from gold-answer presence,
  the best channel-weight intent from the gold passage's fused rank.

The ``distill_data`` stage (:mod:`workbench.stages.distill_data`) runs both and writes the dataset; the ``distill``
stage trains a student on it. Only :mod:`workbench.distill.traces` is imported here (no training dependency).
"""

from __future__ import annotations

from workbench.distill.traces import (
    DECISIONS,
    SCORING_DECISIONS,
    SOURCES,
    TRACE_COLUMNS,
    TRACE_SPLITS,
    DecisionRecord,
    PromptRecorder,
    RecordingController,
    TraceRow,
    load_traces,
    save_traces,
)

__all__ = [
    "DECISIONS",
    "SCORING_DECISIONS",
    "SOURCES",
    "TRACE_COLUMNS",
    "TRACE_SPLITS",
    "DecisionRecord",
    "PromptRecorder",
    "RecordingController",
    "TraceRow",
    "load_traces",
    "save_traces",
]
