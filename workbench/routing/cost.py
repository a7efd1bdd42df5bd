"""What a retrieval router costs per question: its features' stats plus the retrieval it triggers.

A router answers closed-book first (the greedy answer every feature reads), computes the stats its features need
and, when it retrieves, pays the retrieval: the retriever call and a second answer with the passages in the prompt.
Per question, in each cost field (``lm_calls``, prompt / generated / scored tokens, NLI pairs, embedded texts,
seconds)::

    cost(router) = Σ_{c ∈ components(features)} cost_c  +  rate · retrieval

where ``components(features)`` is the union of the stats-graph work its features need (each shared piece — the
greedy answer, the samples, the NLI matrix — counted once: :func:`~workbench.uncertainty.stat_costs.
feature_components`) and ``rate`` the share of questions it retrieves for. Always-RAG pays the retrieval only (it
never answers closed-book), No-RAG the greedy answer only. One scalar — the recipe's ``cost_unit`` — orders
routers: ``tokens`` (prompt + generated + scored LM tokens: what a served model bills; NLI pairs and embeddings are
not LM tokens and count 0), ``seconds`` (measured wall time of every component, the retriever's latency included:
the unit for a slow retriever such as a web search) or ``lm_calls``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.core.errors import ConfigError, DataError

COST_UNITS = ("tokens", "seconds", "lm_calls")
"""The scalar a router's cost is ordered by (:func:`scalar_cost`)."""

COST_FIELDS = ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "embed_texts", "seconds")
"""The per-question cost fields of a router (the stats graph's cost components and the retrieval share them)."""


def scalar_cost(cost: Mapping[str, float], unit: str) -> float:
    """One number per cost record: LM tokens (prefill + decoded + scored), seconds or LM calls."""
    if unit == "tokens":
        return float(cost.get("prefill_tokens", 0.0) + cost.get("decoded_tokens", 0.0) + cost.get("scored_tokens", 0.0))
    if unit == "seconds":
        return float(cost.get("seconds", 0.0))
    if unit == "lm_calls":
        return float(cost.get("lm_calls", 0.0))
    raise ConfigError(f"unknown cost unit {unit!r} (known: {', '.join(COST_UNITS)})", "cost_unit")


@dataclass(frozen=True)
class RetrievalCost:
    """The cost of one retrieval, per question that retrieves: the retriever's latency, and the answer with the
    passages (one LM call, its prompt — the question plus the context — and its answer tokens, and its seconds).
    ``source`` says where each figure came from (``measured`` by collect, or ``recipe``)."""

    retriever_seconds: float
    answer_prompt_tokens: float
    answer_new_tokens: float
    answer_seconds: float
    source: dict[str, str] = field(default_factory=dict)

    def as_cost(self) -> dict[str, float]:
        """The retrieval as a cost record (one LM call, tokens, seconds)."""
        return {
            **dict.fromkeys(COST_FIELDS, 0.0),
            "lm_calls": 1.0,
            "prefill_tokens": self.answer_prompt_tokens,
            "decoded_tokens": self.answer_new_tokens,
            "seconds": self.retriever_seconds + self.answer_seconds,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def retrieval_cost(
    measured: Mapping[str, float] | None,
    columns: Mapping[str, Any],
    *,
    seconds: float | None = None,
    tokens: float | None = None,
) -> RetrievalCost:
    """The retrieval cost model: measured figures (collect's ``stat_costs.json`` ``retrieval`` block for the split;
    the answer's tokens from the split's ``rag_prompt_tokens`` / ``rag_new_tokens`` columns), each replaceable from
    the recipe: ``seconds`` — the retriever's latency per call (e.g. a web search); ``tokens`` — the extra prompt
    tokens the retrieved context adds to the answer's prompt (the question's own tokens and the answer stay
    measured). DataError when a figure is neither measured nor given."""
    import numpy as np

    source: dict[str, str] = {}
    measured = dict(measured or {})

    def mean(name: str) -> float:
        if name not in columns:
            raise DataError(f"the retrieval cost needs the {name!r} column: add rag to collect.labels", "collect")
        return float(np.mean(np.asarray(columns[name], dtype=float))) if len(columns[name]) else 0.0

    prompt = mean("rag_prompt_tokens")
    source["answer_prompt_tokens"] = "measured"
    if tokens is not None:
        closed = mean("closed_prompt_tokens") if "closed_prompt_tokens" in columns else 0.0
        prompt, source["answer_prompt_tokens"] = closed + float(tokens), "recipe (context tokens) + measured question"
    if seconds is not None:
        retriever, source["retriever_seconds"] = float(seconds), "recipe"
    elif "retriever_seconds" in measured:
        retriever, source["retriever_seconds"] = float(measured["retriever_seconds"]), "measured"
    else:
        raise DataError("no measured retriever latency: set classify.retrieval_seconds", "classify")
    answer_seconds = float(measured.get("rag_answer_seconds", 0.0))
    source["answer_seconds"] = "measured" if "rag_answer_seconds" in measured else "unknown (0)"
    return RetrievalCost(retriever, prompt, mean("rag_new_tokens"), answer_seconds, source)


@dataclass(frozen=True)
class CostModel:
    """Per-question costs of the stats graph's components (``components``: name → cost record, measured on one
    split) and of one retrieval; ``unit`` orders routers."""

    components: Mapping[str, Mapping[str, float]]
    retrieval: RetrievalCost
    unit: str = "tokens"

    def __post_init__(self) -> None:
        if self.unit not in COST_UNITS:
            raise ConfigError(f"unknown cost unit {self.unit!r} (known: {', '.join(COST_UNITS)})", "cost_unit")

    def features_cost(self, features: Iterable[str]) -> dict[str, float]:
        """The per-question cost of computing ``features`` (the greedy answer included), by field."""
        from workbench.uncertainty.stat_costs import feature_components

        return self.components_cost(feature_components(features))

    def components_cost(self, components: Iterable[str]) -> dict[str, float]:
        """The summed cost of ``components`` by field; DataError naming a component that was never measured."""
        out = dict.fromkeys(COST_FIELDS, 0.0)
        for name in components:
            if name not in self.components:
                raise DataError(f"the collection measured no cost for stats component {name!r}", "stat_costs.json")
            for key in COST_FIELDS:
                out[key] += float(self.components[name].get(key, 0.0))
        return out

    def routed(self, features_cost: Mapping[str, float], rate: float) -> dict[str, float]:
        """A router's cost per question: its features' cost plus ``rate`` retrievals."""
        retrieval = self.retrieval.as_cost()
        return {key: float(features_cost.get(key, 0.0)) + rate * retrieval[key] for key in COST_FIELDS}

    def scalar(self, cost: Mapping[str, float]) -> float:
        """:func:`scalar_cost` in this model's unit."""
        return scalar_cost(cost, self.unit)

    def baselines(self) -> dict[str, dict[str, float]]:
        """No-RAG (the greedy answer), Always-RAG (one retrieval, no closed-book answer) per question."""
        return {"No-RAG": self.components_cost(["greedy"]), "Always-RAG": self.routed({}, 1.0)}
