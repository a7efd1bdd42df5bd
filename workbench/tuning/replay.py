"""Threshold trials without regeneration: re-route answers computed once.

A threshold that only decides *whether* a method retrieves (DTR's τ on the normalised NLL, D²-RAG's τ on P(correct))
changes nothing the method generates on either side of the decision. So the method is run once with the threshold at
"always retrieve" (DTR τ = 0, D²-RAG τ = 1 + ε, with ``score_always`` so that it still computes P(correct)): each
question's trace then holds its decision score, its closed-book answer and its answer with retrieval, and the cost of
both branches. :class:`ReplayTable` chooses per question between the two for any τ — a trial is a few numpy
operations. Its quality, LM calls, tokens and NLI pairs equal what the method reports when run at that τ on the same
generations (tests/unit/tuning/test_replay_exact.py checks it against the method itself, at a τ where some questions
retrieve and some do not): the methods record each question's own cost of every stage after the decision, so a
question's retrieval branch costs the same whichever others retrieve with it. Where a trace says a stage's cost was
split evenly over its batch (``split: "even"``: a stage whose parts did not add up, a served model), a τ that splits
the questions is priced approximately and the replay says so (``costs_exact`` 0). Latency is never exact: a batched
stage's wall time is the always-retrieve run's even share per question, not what a smaller batch would take.

D²-RAG's replay answers a question that does not retrieve with a_para, the closed-book answer its Stage 1 made; that
is the method's answer only when the stats budget equals its answer budget (``closed_book_is_answer`` in the trace),
so a trace that says otherwise is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import DataError

__all__ = ["ALWAYS", "ALWAYS_OPTIONS", "BRANCH_STEPS", "QUALITY", "ReplayTable", "replay_table"]

QUALITY = ("em", "f1", "contains")
"""Quality metrics a replay reports (means over the questions)."""

ALWAYS: dict[str, float] = {"dtr": 0.0, "d2rag": float(np.nextafter(1.0, 2.0))}
"""The threshold at which each replayable method retrieves for every question."""

ALWAYS_OPTIONS: dict[str, dict[str, Any]] = {"d2rag": {"score_always": True}}
"""Options of the always-retrieve run besides its threshold: D²-RAG at τ > 1 computes P(correct) only when asked."""

BRANCH_STEPS: dict[str, tuple[str, ...]] = {"dtr": ("closed_book",), "d2rag": ("features", "decide")}
"""The trace steps a question that does not retrieve still runs (the closed-book branch's cost)."""

_COSTS = ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "seconds")
_CACHED = ("cached_lm_calls", "cached_prefill_tokens", "cached_decoded_tokens")


def _cost(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Summed cost of ``steps`` (trace step dicts); ``tokens`` counts what the prompts would cost uncached."""
    out = {name: 0.0 for name in (*_COSTS, *_CACHED)}
    for step in steps:
        out["seconds"] += float(step.get("seconds", 0.0))
        for name in (*_COSTS, *_CACHED):
            if name != "seconds":
                out[name] += float(step.get("cost", {}).get(name, 0.0))
    out["tokens"] = sum(out[k] for k in ("prefill_tokens", "decoded_tokens", "scored_tokens", *_CACHED[1:]))
    out["cached_tokens"] = out["cached_prefill_tokens"] + out["cached_decoded_tokens"]
    out["lm_calls"] += out["cached_lm_calls"]
    return out


@dataclass(frozen=True)
class ReplayTable:
    """Per question: the decision ``score``, and for the closed-book (index 0) and retrieval (index 1) branches the
    quality and cost. ``retrieve_below``: retrieve iff score < τ (D²-RAG's P(correct)); otherwise iff score ≥ τ
    (DTR's NLL). Costs count cached generations at what they would cost uncached, so a replayed trial is priced
    like a run."""

    method: str
    score: np.ndarray
    retrieve_below: bool
    quality: dict[str, np.ndarray]  # metric -> (n, 2)
    cost: dict[str, np.ndarray]  # cost name -> (n, 2)
    retrieved: np.ndarray  # (n,) whether retrieved text reached the prompt on the retrieval branch
    costs_exact: bool = True  # every stage after the decision recorded each question's own cost

    def __len__(self) -> int:
        return int(self.score.shape[0])

    def decisions(self, tau: float) -> np.ndarray:
        """Which questions retrieve at threshold ``tau``."""
        if self.retrieve_below:
            return self.score < tau
        return (self.score >= tau) & (tau != np.inf)

    def evaluate(self, tau: float) -> dict[str, float]:
        """Quality, retrieval rate and mean cost per question at ``tau`` (the keys of an evaluate summary), and
        ``costs_exact``: 1.0 when the costs (latency aside) are what a run at ``tau`` reports, 0.0 when a stage split
        evenly over a batch that ``tau`` splits makes them an approximation."""
        pick = self.decisions(tau).astype(int)
        rows = np.arange(len(self))
        out = {name: float(values[rows, pick].mean()) for name, values in self.quality.items()}
        out["retrieval_rate"] = float((pick.astype(bool) & self.retrieved).mean())
        for name, values in self.cost.items():
            out[name] = float(values[rows, pick].mean())
        out["latency"] = out.pop("seconds")
        out["n"] = float(len(self))
        out["costs_exact"] = float(self.costs_exact or bool(pick.all()) or not pick.any())
        return out


def replay_table(method: str, records: Sequence[dict[str, Any]], examples: Sequence[dict[str, Any]]) -> ReplayTable:
    """A :class:`ReplayTable` from an always-retrieve run's trace records (one per example, same order).

    DataError when a record is not an always-retrieve trace of ``method`` (a question that did not reach its
    retrieval decision's "retrieve" side), or (D²-RAG) when its closed-book answer a_para is not the answer the method
    returns without retrieval (the stats budget differs from the answer budget)."""
    from workbench.metrics.qa import score_answer

    if method not in BRANCH_STEPS:
        raise DataError(f"{method} has no replayable threshold (replayable: {', '.join(BRANCH_STEPS)})", "replay")
    if len(records) != len(examples):
        raise DataError(f"{len(records)} records for {len(examples)} questions", "replay")
    scores, retrieved, exact = [], [], True
    quality = {name: [] for name in QUALITY}
    costs: dict[str, list[tuple[float, float]]] = {}
    for record, example in zip(records, examples, strict=True):
        trace = json.loads(record["trace"])
        steps = {s["name"]: s for s in trace["steps"]}
        score, closed_text, retrieves = _decision(method, steps, trace)
        if not retrieves:
            raise DataError(f"question {record['id']} did not retrieve: not an always-retrieve run", "replay")
        scores.append(score)
        retrieved.append(bool(trace["retrieved"]))
        closed = score_answer(closed_text, list(example["answers"]), list(example.get("options") or []))
        for name in QUALITY:
            quality[name].append((float(closed[name]), float(record[name])))
        branch = [s for s in trace["steps"] if s["name"] not in BRANCH_STEPS[method]]
        exact = exact and all(s.get("split") == "own" for s in branch)
        closed_cost = _cost([s for s in trace["steps"] if s["name"] in BRANCH_STEPS[method]])
        full_cost = _cost(trace["steps"])
        for name in full_cost:
            costs.setdefault(name, []).append((closed_cost[name], full_cost[name]))
    return ReplayTable(
        method,
        np.asarray(scores, dtype=float),
        retrieve_below=method == "d2rag",
        quality={k: np.asarray(v, dtype=float).reshape(-1, 2) for k, v in quality.items()},
        cost={k: np.asarray(v, dtype=float).reshape(-1, 2) for k, v in costs.items()},
        retrieved=np.asarray(retrieved, dtype=bool),
        costs_exact=exact,
    )


def _decision(method: str, steps: dict[str, dict[str, Any]], trace: dict[str, Any]) -> tuple[float, str, bool]:
    """(score, closed-book answer, retrieved-side decision) from one trace."""
    try:
        if method == "dtr":
            detail = steps["closed_book"]["detail"]
            return float(detail["nll"]), str(detail["answer"]), bool(detail["retrieve"])
        decide, features = steps["decide"]["detail"], steps["features"]["detail"]
        if features.get("closed_book_is_answer") is not True:
            raise DataError(
                "D²-RAG's τ replay answers a question that does not retrieve with a_para, made at collect's stats "
                "budget: that budget (collect.max_new_tokens) must equal D²-RAG's answer budget "
                "(evaluate.options.d2rag.max_new_tokens, else evaluate.max_new_tokens)",
                "replay",
            )
        if decide.get("p_correct") is None:
            raise DataError("the trace holds no P(correct): run D²-RAG with score_always at τ > 1", "replay")
        closed = features.get("closed_book_answer") or ""
        return float(decide["p_correct"]), str(closed).strip(), bool(decide["retrieve"])
    except KeyError as exc:
        raise DataError(f"trace of {trace.get('method')} lacks {exc}", "replay") from None
