"""Threshold trials without regeneration: re-route answers computed once.

A threshold that only decides *whether* a method retrieves (DTR's τ on the normalised NLL, D²-RAG's τ on P(correct),
any method whose spec has a :class:`~workbench.methods.spec.ReplayRule`) changes nothing the method generates on
either side of the decision. So the method is run once with the threshold at "always retrieve" (the rule's
``always``, with its ``always_options``): each question's trace then holds its decision score, its closed-book answer
and its answer with retrieval, and the cost of both branches. :class:`ReplayTable` chooses per question between the
two for any τ by the method's own decision rule (its spec's ``decide``) — a trial is a few numpy operations. Its
quality, LM calls, tokens and NLI pairs equal what the method reports when run at that τ on the same generations
(tests/unit/tuning/test_replay_exact.py checks it against the method itself, at a τ where some questions retrieve and
some do not): the methods record each question's own cost of every stage after the decision, so a question's
retrieval branch costs the same whichever others retrieve with it. Where a trace says a stage's cost was split evenly
over its batch (``split: "even"``: a stage whose parts did not add up, a served model), a τ that splits the questions
is priced approximately and the replay says so (``costs_exact`` 0). Latency is never exact: a batched stage's wall
time is the always-retrieve run's even share per question, not what a smaller batch would take.

What a trace must hold to be replayed is the method's own (its rule's ``read``): D²-RAG's, for one, refuses a trace
whose closed-book answer is not the answer the method returns without retrieval.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import DataError
from workbench.methods.registry import METHOD_TABLE
from workbench.methods.spec import ReplayRule
from workbench.metrics.qa import score_answer

__all__ = ["QUALITY", "ReplayTable", "replay_rule", "replay_table", "replayable"]

QUALITY = ("em", "f1", "contains")
"""Quality metrics a replay reports (means over the questions)."""


def replay_rule(method: str) -> ReplayRule:
    """The :class:`~workbench.methods.spec.ReplayRule` of ``method``; a DataError when it has no replayable
    threshold."""

    rules = {name: spec.replay for name, spec in METHOD_TABLE.items() if spec.replay is not None}
    if method not in rules:
        raise DataError(f"{method} has no replayable threshold (replayable: {', '.join(rules)})", "replay")
    return rules[method]


def replayable(method: str) -> bool:
    """Whether ``method``'s spec says how to replay its threshold."""

    return method in METHOD_TABLE and METHOD_TABLE[method].replay is not None


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
    quality and cost. ``decide``: the method's decision rule, ``(scores, τ) -> retrieve`` (its spec's). Costs count
    cached generations at what they would cost uncached, so a replayed trial is priced like a run."""

    method: str
    score: np.ndarray
    decide: Callable[[np.ndarray, float], np.ndarray]
    quality: dict[str, np.ndarray]  # metric -> (n, 2)
    cost: dict[str, np.ndarray]  # cost name -> (n, 2)
    retrieved: np.ndarray  # (n,) whether retrieved text reached the prompt on the retrieval branch
    costs_exact: bool = True  # every stage after the decision recorded each question's own cost

    def __len__(self) -> int:
        return int(self.score.shape[0])

    def decisions(self, tau: float) -> np.ndarray:
        """Which questions retrieve at threshold ``tau`` (the method's own rule)."""
        return np.asarray(self.decide(self.score, tau), dtype=bool).reshape(self.score.shape)

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

    rule = replay_rule(method)
    if len(records) != len(examples):
        raise DataError(f"{len(records)} records for {len(examples)} questions", "replay")
    scores, retrieved, exact = [], [], True
    quality = {name: [] for name in QUALITY}
    costs: dict[str, list[tuple[float, float]]] = {}
    for record, example in zip(records, examples, strict=True):
        trace = json.loads(record["trace"])
        steps = {s["name"]: s for s in trace["steps"]}
        score, closed_text, retrieves = rule.read(steps, trace)
        if not retrieves:
            raise DataError(f"question {record['id']} did not retrieve: not an always-retrieve run", "replay")
        scores.append(score)
        retrieved.append(bool(trace["retrieved"]))
        closed = score_answer(closed_text, list(example["answers"]), list(example.get("options") or []))
        for name in QUALITY:
            quality[name].append((float(closed[name]), float(record[name])))
        branch = [s for s in trace["steps"] if s["name"] not in rule.branch_steps]
        exact = exact and all(s.get("split") == "own" for s in branch)
        closed_cost = _cost([s for s in trace["steps"] if s["name"] in rule.branch_steps])
        full_cost = _cost(trace["steps"])
        for name in full_cost:
            costs.setdefault(name, []).append((closed_cost[name], full_cost[name]))
    return ReplayTable(
        method,
        np.asarray(scores, dtype=float),
        decide=METHOD_TABLE[method].decide,
        quality={k: np.asarray(v, dtype=float).reshape(-1, 2) for k, v in quality.items()},
        cost={k: np.asarray(v, dtype=float).reshape(-1, 2) for k, v in costs.items()},
        retrieved=np.asarray(retrieved, dtype=bool),
        costs_exact=exact,
    )
