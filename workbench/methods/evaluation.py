"""Evaluate one method over a list of questions: one scored record per answer and the method's summary.

The ``evaluate`` stage and the hyperparameter study share this code, so a method's quality and cost are measured
the same way wherever they are reported:

```python
result = evaluate_method(tools, "standard_rag", {"k": 3}, rows)
result.records  # one dict per question (trace_record): answer, scores, summed cost, the trace as JSON
result.summary  # summary_metrics(result.records): means per question, latency percentiles, fallbacks
```

Costs come from each answer's :class:`~workbench.methods.base.Trace`. With the generation cache on, a cached
generation costs no LM call or token; what it would have cost is reported next to the real cost
(``cached_lm_calls``, ``cached_tokens``), and ``lm_calls_uncached`` / ``tokens_uncached`` are the two summed: the
cost of the same answers on a cold cache (see :class:`~workbench.backends.cost.CostCounter`). Latency is always the
wall time actually spent.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from workbench.core.logs import track
from workbench.methods.registry import build_method
from workbench.metrics.adaptive import decision_accuracy
from workbench.metrics.qa import score_answer

if TYPE_CHECKING:
    from workbench.methods.base import Method, Tools
    from workbench.methods.learned import LearnedParts

MEAN_KEYS = (
    "em",
    "f1",
    "contains",
    "lm_calls",
    "tokens",
    "prompt_tokens",
    "generated_tokens",
    "nli_pairs",
    "retrieval_calls",
    "cached_lm_calls",
    "cached_tokens",
    "lm_calls_uncached",
    "tokens_uncached",
)
"""The per-question means in a summary (besides ``retrieval_rate``, the latency percentiles and ``fallbacks``)."""

_RECORD_COLUMNS = {"prompt_tokens": "prefill_tokens", "generated_tokens": "decoded_tokens"}
"""Summary keys whose record column has another name."""


@dataclass
class MethodEvaluation:
    """One method's answers to a list of questions.

    ``records``: one row per question, in question order (:func:`trace_record`); ``summary``: the per-question means
    (:func:`summary_metrics`); ``seconds``: the wall time the method took to answer them all."""

    name: str
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    seconds: float = 0.0


def evaluate_method(
    tools: Tools,
    name: str,
    options: dict[str, Any] | None,
    rows: Sequence[dict[str, Any]],
    learned: LearnedParts | None = None,
    *,
    batch_questions: int = 8,
    utility_fallback: Literal["oracle", "none"] = "oracle",
    progress: bool = True,
) -> MethodEvaluation:
    """Build method ``name`` with ``options`` and ``learned`` (:func:`~workbench.methods.registry.build_method`;
    :class:`~workbench.core.errors.ConfigError` for a bad name, option or missing learned part) and answer ``rows``
    with it (:func:`evaluate_built`). The generation cache is whatever ``tools.generator.cache`` is."""

    method = build_method(name, tools, options, learned, utility_fallback=utility_fallback)
    return evaluate_built(name, method, rows, batch_questions=batch_questions, progress=progress)


def evaluate_built(
    name: str,
    method: Method,
    rows: Sequence[dict[str, Any]],
    *,
    batch_questions: int = 8,
    progress: bool = True,
) -> MethodEvaluation:
    """Answer ``rows`` (QA example dicts: ``id``, ``question``, ``answers``, optional ``options``) with an already
    built ``method`` in batches of ``batch_questions`` (``method.answer_many``; a progress bar when ``progress``);
    one :func:`trace_record` per answer, in row order, labelled ``name``, and their :func:`summary_metrics`."""

    if batch_questions < 1:
        raise ValueError(f"batch_questions must be >= 1, got {batch_questions}")
    rows = list(rows)
    batches = [rows[i : i + batch_questions] for i in range(0, len(rows), batch_questions)]
    began = time.perf_counter()
    records: list[dict[str, Any]] = []
    for batch in track(batches, f"evaluate ({name})", total=len(batches)) if progress else batches:
        for example, answer in zip(batch, method.answer_many(batch), strict=True):
            records.append(trace_record(name, example, answer))
    return MethodEvaluation(name, records, summary_metrics(records), time.perf_counter() - began)


def trace_record(method: str, example: dict[str, Any], answer: Any) -> dict[str, Any]:
    """One row of the traces dataset: the question, gold aliases and prediction, its scores against the aliases
    (``em``, ``f1``, ``contains``), ``retrieved`` / ``decoding`` / ``fallbacks`` from the trace, every summed cost
    field of the trace (``lm_calls``, ``prefill_tokens``, ..., ``cached_*``, ``seconds``), ``tokens`` (prefill +
    decoded + scored), ``cached_tokens`` (cached prefill + cached decoded), ``lm_calls_uncached`` /
    ``tokens_uncached`` (real + cached) and the full trace as JSON (``trace``)."""

    scores = score_answer(answer.text, list(example["answers"]), list(example.get("options") or []))
    trace = answer.trace.to_dict()
    totals = trace["totals"]
    tokens = float(totals["prefill_tokens"] + totals["decoded_tokens"] + totals["scored_tokens"])
    cached_tokens = float(totals["cached_prefill_tokens"] + totals["cached_decoded_tokens"])
    return {
        "method": method,
        "id": str(example["id"]),
        "question": str(example["question"]),
        "answers": [str(a) for a in example["answers"]],
        "prediction": answer.text,
        "em": scores["em"],
        "f1": scores["f1"],
        "contains": scores["contains"],
        "retrieved": bool(trace["retrieved"]),
        "decoding": trace["decoding"],
        "fallbacks": int(trace["fallbacks"]),
        **{k: float(v) for k, v in totals.items()},
        "tokens": tokens,
        "cached_tokens": cached_tokens,
        "lm_calls_uncached": float(totals["lm_calls"] + totals["cached_lm_calls"]),
        "tokens_uncached": tokens + cached_tokens,
        "trace": json.dumps(trace),
    }


def summary_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Summarise any list of :func:`trace_record` rows (one method's, or a subset of them): ``n``; the per-question
    means of :data:`MEAN_KEYS` (``prompt_tokens`` / ``generated_tokens`` are the prefill / decoded tokens);
    ``retrieval_rate``; ``latency_p50`` / ``latency_p95`` (seconds); ``fallbacks`` (a total). With no records every
    mean and percentile is NaN and ``n`` / ``fallbacks`` are 0."""
    rows = list(records)
    if not rows:
        nan = math.nan
        return {
            "n": 0,
            **{k: nan for k in MEAN_KEYS},
            "retrieval_rate": nan,
            "latency_p50": nan,
            "latency_p95": nan,
            "fallbacks": 0,
        }
    seconds = np.asarray([r["seconds"] for r in rows], dtype=float)
    means = {k: float(np.mean([r[_RECORD_COLUMNS.get(k, k)] for r in rows])) for k in MEAN_KEYS}
    return {
        "n": len(rows),
        **{k: means[k] for k in ("em", "f1", "contains")},
        "retrieval_rate": float(np.mean([r["retrieved"] for r in rows])),
        **{k: means[k] for k in MEAN_KEYS if k not in ("em", "f1", "contains")},
        "latency_p50": float(np.percentile(seconds, 50)),
        "latency_p95": float(np.percentile(seconds, 95)),
        "fallbacks": int(sum(r["fallbacks"] for r in rows)),
    }


CLOSED_BOOK_METHOD = "no_rag"
"""The method whose answers label each question for decision accuracy: its closed-book answer is right or wrong."""


def decision_accuracies(records: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """Per method (first-seen order): the decision accuracy (:func:`~workbench.metrics.adaptive.decision_accuracy`)
    of its ``retrieved`` decisions, the label being that :data:`CLOSED_BOOK_METHOD`'s answer to the same question (by
    ``id``) is wrong (containment < 0.5); questions the closed-book method did not answer are left out (NaN when none
    is left). None when the records hold no closed-book answers."""
    wrong = closed_book_wrong(records)
    if not wrong:
        return None
    out: dict[str, float] = {}
    for method in dict.fromkeys(r["method"] for r in records):
        rows = [r for r in records if r["method"] == method and r["id"] in wrong]
        out[method] = decision_accuracy([r["retrieved"] for r in rows], [wrong[r["id"]] for r in rows])
    return out


def closed_book_wrong(records: Sequence[dict[str, Any]]) -> dict[Any, bool]:
    """Decision accuracy's label per question ``id``: :data:`CLOSED_BOOK_METHOD`'s answer is wrong (containment < 0.5);
    empty when the records hold no closed-book answers."""
    return {r["id"]: r["contains"] < 0.5 for r in records if r["method"] == CLOSED_BOOK_METHOD}


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per method (in first-seen order of ``record["method"]``): :func:`summary_metrics` of its records."""
    out: dict[str, Any] = {}
    for method in dict.fromkeys(r["method"] for r in records):
        out[method] = summary_metrics([r for r in records if r["method"] == method])
    return out
