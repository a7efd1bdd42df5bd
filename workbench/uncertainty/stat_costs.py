"""What each piece of the stats graph costs, so a router is charged only for the stats its features need.

:func:`~workbench.uncertainty.calculators.compute_stats` does its work in separable **components** (:data:`COMPONENTS`:
the greedy answer, the samples, Self-Detection's paraphrases, the attention pass, the self-check forward, the two NLI
matrices, the two embedder passes, DENSE). Each stat needs some of them (:data:`STAT_COMPONENTS`); a feature set
needs the union over its stats, the greedy answer always included (:func:`feature_components`: the routed answer is
the closed-book answer, so every router pays it — it IS the No-RAG answer). The cost of a feature set per question
is the sum of its components' costs (:func:`components_cost`), each shared component counted once.

:class:`StatCostMeter` measures the components while the graph runs: it snapshots every distinct
:class:`~workbench.backends.cost.CostCounter` of the backends (generator, judge, embedder, the run's counter) around
each step and charges the difference, with the step's wall seconds, to the step's component. A call that serves two
components is split: the greedy decode loop (greedy answers and the paraphrases' answers) per prompt, by
:func:`~workbench.backends.cost.generation_cost`; the one EOS scoring pass by the answers each component had scored;
the one judge call by the pairs each matrix added to it (a pair both matrices need is charged to the answer matrix,
which asks first). Costs are **cold-cache**: what the generation cache served counts as work
(``lm_calls + cached_lm_calls`` and the same for prompt and decoded tokens), because a router is priced for a cold
cache; the cached part is kept apart (``cached_*``) so a report can warn that seconds measured on a warm cache
understate the cost.

The ``collect`` stage writes the measurements as ``stat_costs.json`` (:func:`stat_costs_document`), read back by
:func:`load_stat_costs`. numpy / stdlib only: no torch, no training library.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.backends.cost import generation_cost
from workbench.core.errors import DataError
from workbench.uncertainty.features import get_features
from workbench.uncertainty.stats import DERIVED_STATS

__all__ = [
    "CACHED_FIELDS",
    "COMPONENTS",
    "COST_FIELDS",
    "STAT_COMPONENTS",
    "STAT_COSTS_FILE",
    "StatCostMeter",
    "components_cost",
    "feature_components",
    "load_stat_costs",
    "stat_costs_document",
    "stats_components",
    "summarise_split_costs",
]

STAT_COSTS_FILE = "stat_costs.json"
"""The file the ``collect`` stage writes in its output directory."""

COST_FIELDS = ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "embed_texts", "seconds")
"""The per-question cost fields of a component (``lm_calls`` / ``prefill_tokens`` / ``decoded_tokens`` cold-cache:
the cached work included; ``seconds``: wall time as measured)."""

CACHED_FIELDS = ("cached_lm_calls", "cached_prefill_tokens", "cached_decoded_tokens")
"""The part of the cold-cache LM work that the generation cache served (included in :data:`COST_FIELDS`)."""

_COLD = {f: f"cached_{f}" for f in ("lm_calls", "prefill_tokens", "decoded_tokens")}  # field → its cached part
_RAW = ("lm_calls", "lm_batches", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "embed_texts")
_RAW += (*CACHED_FIELDS, "seconds")  # what the meter keeps per component (counter fields as counted, wall seconds)

COMPONENTS: dict[str, str] = {
    "greedy": "the closed-book greedy answer (the No-RAG answer: every router pays it), its EOS scoring when the "
    "generator did not record it, MARS token importance",
    "samples": "the N sampled answers (shared prefill, the middle hidden layer when INSIDE needs it) and their EOS "
    "scoring when not recorded",
    "paraphrase": "Self-Detection: sampling the P - 1 paraphrases and answering them (their share of the greedy "
    "decode loop, per prompt)",
    "attention": "Attention Score: the teacher-forced eager-attention pass over prompt + greedy answer",
    "self_check": "P(True) and Verbalized Confidence: one forward over the self-check prompt",
    "nli_answers": "the judge pairs of the answer NLI matrix (samples, with the greedy answer when needed)",
    "nli_paraphrase": "the judge pairs of the paraphrase answers' NLI matrix",
    "token_relevance": "TokenSAR: the embedder pass over question + answer with each token left out",
    "sts": "SentSAR: the embedder pass over question + each sample",
    "dense": "DENSE: rephrasing the retrieved chunks, answering under each edited context, judging the answers "
    "(in collect also the retrieval of the chunks)",
}
"""Every component of the stats graph, in the order it runs, with what it covers."""

_G, _S = "greedy", "samples"
STAT_COMPONENTS: dict[str, frozenset[str]] = {
    "greedy_text": frozenset({_G}),
    "greedy_logprobs": frozenset({_G}),
    "greedy_eos": frozenset({_G}),
    "greedy_entropies": frozenset({_G}),
    "token_relevance": frozenset({_G, "token_relevance"}),
    "token_importance": frozenset({_G}),
    "attention_logdiag": frozenset({_G, "attention"}),
    "lars_score": frozenset({_G}),  # the fitted scorer reads the greedy answer's log-probs
    "ptrue": frozenset({_G, _S, "self_check"}),  # the self-check prompt lists the samples' ideas
    "verbalized_confidence": frozenset({_G, _S, "self_check"}),
    "sample_texts": frozenset({_S}),
    "sample_logprobs": frozenset({_S}),
    "sample_hidden": frozenset({_S}),
    "sts_samples": frozenset({_S, "sts"}),
    "nli_texts": frozenset({_S, "nli_answers"}),
    "nli_index_greedy": frozenset({_G, _S, "nli_answers"}),
    "nli_index_samples": frozenset({_S, "nli_answers"}),
    "nli_probs": frozenset({_S, "nli_answers"}),
    # the answers are returned with their matrix: asking for either runs the paraphrase judge pairs
    "paraphrase_answers": frozenset({_G, "paraphrase", "nli_paraphrase"}),
    "paraphrase_nli_probs": frozenset({_G, "paraphrase", "nli_paraphrase"}),
    "dense_answers": frozenset({"dense"}),
    "dense_nli_probs": frozenset({"dense"}),
}
"""Every stat of :data:`~workbench.uncertainty.stats.STATS` → the components computing it needs."""


def stats_components(stats: Iterable[str]) -> frozenset[str]:
    """The components the stats ``stats`` need (no implicit greedy answer); a loaded plugin's derived stat needs its
    inputs' (:class:`~workbench.uncertainty.stats.DerivedStat`); DataError for an unknown stat."""
    out: set[str] = set()
    for name in stats:
        if name in DERIVED_STATS:
            out |= stats_components(DERIVED_STATS[name].needs)
            continue
        if name not in STAT_COMPONENTS:
            raise DataError(f"no cost components known for stat {name!r}", "stat_costs")
        out |= STAT_COMPONENTS[name]
    return frozenset(out)


def feature_components(features: Iterable[str]) -> frozenset[str]:
    """The components the features ``features`` need: the union over their stats, always with ``greedy`` (the
    routed answer is the closed-book answer). ConfigError for an unknown feature."""
    return stats_components(s for f in get_features(list(features)) for s in f.stats) | {_G}


def components_cost(components: Iterable[str], per_question: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{field: sum over components}`` for every field of :data:`COST_FIELDS` (a field a component lacks counts
    0); DataError naming a component that ``per_question`` (a collection's measurements) does not hold."""
    out = dict.fromkeys(COST_FIELDS, 0.0)
    for name in sorted(set(components)):
        if name not in per_question:
            raise DataError(f"the collection measured no cost for stats component {name!r}", STAT_COSTS_FILE)
        for key in COST_FIELDS:
            out[key] += float(per_question[name].get(key, 0.0))
    return out


class _Mark:
    """Snapshots of every counter and the wall clock, taken by :meth:`StatCostMeter.mark`."""

    __slots__ = ("began", "snapshots")

    def __init__(self, snapshots: list[Any], began: float) -> None:
        self.snapshots, self.began = snapshots, began


class StatCostMeter:
    """Per-component cost sums of one or more stats-graph runs.

    ``sources`` are :class:`~workbench.backends.cost.CostCounter` objects or backends holding one as ``.counter``
    (a judge's ``.embedder`` counter too); each distinct counter (by identity) is read once, so backends that count
    into the run's shared counter are not double-counted. ``None`` entries and objects without a counter are
    skipped (their work then shows in ``seconds`` only). A step is measured as ``mark = meter.mark()`` … then one
    of :meth:`charge`, :meth:`charge_shares`, :meth:`charge_generations`; a charged component is recorded even at
    zero cost (it was measured). Cheap: a few counter snapshots per step.
    """

    def __init__(self, *sources: Any) -> None:
        self._counters: list[Any] = []
        seen: set[int] = set()
        for source in sources:
            for counter in _counters_of(source):
                if id(counter) not in seen:
                    seen.add(id(counter))
                    self._counters.append(counter)
        self._raw: dict[str, dict[str, float]] = {}

    def mark(self) -> _Mark:
        """Snapshot every counter and the clock: the start of a step."""
        return _Mark([c.snapshot() for c in self._counters], time.perf_counter())

    def _delta(self, mark: _Mark) -> dict[str, float]:
        out = dict.fromkeys(_RAW, 0.0)
        for counter, before in zip(self._counters, mark.snapshots, strict=True):
            for key in _RAW[:-1]:
                out[key] += float(getattr(counter, key) - getattr(before, key))
        out["seconds"] = time.perf_counter() - mark.began
        return out

    def _add(self, component: str, raw: Mapping[str, float], weight: float = 1.0) -> None:
        if component not in COMPONENTS:
            raise ValueError(f"unknown stats cost component {component!r}")
        into = self._raw.setdefault(component, dict.fromkeys(_RAW, 0.0))
        for key in _RAW:
            into[key] += weight * float(raw.get(key, 0.0))

    def charge(self, mark: _Mark, component: str) -> None:
        """Charge everything counted since ``mark`` to ``component``."""
        self._add(component, self._delta(mark))

    def charge_shares(self, mark: _Mark, shares: Mapping[str, float]) -> None:
        """Split what was counted since ``mark`` over the components in ``shares`` in proportion to their weights
        (equally when every weight is 0)."""
        delta = self._delta(mark)
        total = float(sum(shares.values()))
        for component, weight in shares.items():
            self._add(component, delta, float(weight) / total if total > 0 else 1.0 / len(shares))

    def charge_generations(self, mark: _Mark, groups: Mapping[str, Sequence[Any]]) -> None:
        """Split one generate call's cost (counted since ``mark``) over the components whose prompts it held
        (``groups``: component → its ``Generation`` objects, ``n = 1``): LM calls, prompt and decoded tokens (and
        their cached parts) by each prompt's own cold cost (:func:`~workbench.backends.cost.generation_cost`),
        everything else (batches, wall seconds) by prompt count."""

        delta = self._delta(mark)
        cold = {name: dict.fromkeys(_COLD, 0.0) for name in groups}
        for name, gens in groups.items():
            for gen in gens:
                cost = generation_cost(gen)
                for key, cached in _COLD.items():
                    cold[name][key] += float(cost.get(key, 0.0)) + float(cost.get(cached, 0.0))
        prompts = {name: float(len(gens)) for name, gens in groups.items()}
        n_prompts = sum(prompts.values())
        for name in groups:
            share: dict[str, float] = {}
            for key in _RAW:
                base = key if key in _COLD else next((b for b, c in _COLD.items() if c == key), None)
                total = sum(c[base] for c in cold.values()) if base else 0.0
                if base and total > 0:
                    share[key] = delta[key] * cold[name][base] / total
                else:
                    share[key] = delta[key] * prompts[name] / n_prompts if n_prompts else 0.0
            self._add(name, share)

    def merge(self, other: StatCostMeter) -> StatCostMeter:
        """Add ``other``'s sums into this meter (in place) and return it."""
        for component, raw in other._raw.items():
            self._add(component, raw)
        return self

    def totals(self) -> dict[str, dict[str, float]]:
        """``{component: {field: total}}`` in :data:`COMPONENTS` order: the :data:`COST_FIELDS` (LM work
        cold-cache) and the :data:`CACHED_FIELDS`."""
        out: dict[str, dict[str, float]] = {}
        for component in COMPONENTS:
            if component not in self._raw:
                continue
            raw = self._raw[component]
            row = {key: raw[key] + raw.get(_COLD.get(key, ""), 0.0) for key in COST_FIELDS}
            out[component] = {**row, **{key: raw[key] for key in CACHED_FIELDS}}
        return out

    def per_question(self, questions: int) -> dict[str, dict[str, float]]:
        """:meth:`totals` divided evenly over ``questions`` questions (the share each question of a chunk holds)."""
        n = max(int(questions), 1)
        return {c: {k: v / n for k, v in row.items()} for c, row in self.totals().items()}


def _counters_of(source: Any) -> list[Any]:
    if source is None:
        return []
    if hasattr(source, "snapshot") and hasattr(source, "lm_calls"):
        return [source]
    out = []
    counter = getattr(source, "counter", None)
    if counter is not None and hasattr(counter, "snapshot"):
        out.append(counter)
    inner = getattr(source, "embedder", None)  # an answer-equivalence judge embeds through its own embedder
    counter = getattr(inner, "counter", None)
    if counter is not None and hasattr(counter, "snapshot"):
        out.append(counter)
    return out


def summarise_split_costs(rows: Sequence[Mapping[str, Mapping[str, float]]]) -> dict[str, Any]:
    """One split's entry of ``stat_costs.json`` from its questions' per-component shares (one
    ``{component: {field: value}}`` per question, as :meth:`StatCostMeter.per_question` gives): ``questions``,
    ``per_question`` (component → the mean of each :data:`COST_FIELDS` field over the split; a component a
    question lacks counts 0 for it), ``cached_share`` (the cached part of all components' cold-cache prompt +
    decoded tokens, 0 to 1: how far measured seconds understate a cold cache) and ``cached_share_by_component``."""
    n = len(rows)
    components = [c for c in COMPONENTS if any(c in row for row in rows)]
    sums = {c: dict.fromkeys((*COST_FIELDS, *CACHED_FIELDS), 0.0) for c in components}
    for row in rows:
        for c, values in row.items():
            if c in sums:
                for key in sums[c]:
                    sums[c][key] += float(values.get(key, 0.0))
    per_question = {c: {k: (sums[c][k] / n if n else 0.0) for k in COST_FIELDS} for c in components}

    def share(parts: Iterable[Mapping[str, float]]) -> float:
        parts = list(parts)
        cold = sum(p["prefill_tokens"] + p["decoded_tokens"] for p in parts)
        cached = sum(p["cached_prefill_tokens"] + p["cached_decoded_tokens"] for p in parts)
        return float(cached / cold) if cold > 0 else 0.0

    return {
        "questions": n,
        "per_question": per_question,
        "cached_share": share(sums.values()),
        "cached_share_by_component": {c: share([sums[c]]) for c in components},
    }


def stat_costs_document(
    features: Sequence[str],
    splits: Mapping[str, Sequence[Mapping[str, Mapping[str, float]]]],
    retrieval: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The content of ``stat_costs.json``: ``fields``, ``components`` (name → what it covers), ``stat_components``,
    ``features`` (each collected feature → its components, greedy included), ``splits`` (split →
    :func:`summarise_split_costs` of its questions' shares) and ``retrieval`` (split → the per-question means of
    the rag label's retrieval and answer: ``retriever_seconds``, ``rag_answer_seconds``, ``rag_prompt_tokens``,
    ``rag_new_tokens``; empty without the rag label)."""
    return {
        "fields": list(COST_FIELDS),
        "cached_fields": list(CACHED_FIELDS),
        "components": dict(COMPONENTS),
        "stat_components": {s: sorted(c) for s, c in STAT_COMPONENTS.items()},
        "features": {f: sorted(feature_components([f])) for f in features},
        "splits": {split: summarise_split_costs(rows) for split, rows in splits.items()},
        "retrieval": {split: dict(values) for split, values in (retrieval or {}).items()},
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load_stat_costs(collect_dir: str | Path) -> dict[str, Any] | None:
    """The ``stat_costs.json`` of a collect output directory; None when it has none (a collection made before the
    file existed: callers fall back); DataError (one line) when it is not valid JSON or not of the written shape
    (``splits.<split>.per_question.<component>.<field>`` numbers for known components and :data:`COST_FIELDS`,
    ``retrieval.<split>.<name>`` numbers)."""
    path = Path(collect_dir) / STAT_COSTS_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"unreadable stat costs: {exc}", str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("splits"), dict):
        raise DataError("malformed stat costs: expected an object with a 'splits' object", str(path))
    for split, info in doc["splits"].items():
        where = f"splits.{split}"
        if not isinstance(info, dict) or not isinstance(info.get("per_question"), dict):
            raise DataError(f"malformed stat costs: {where} has no 'per_question' object", str(path))
        if not _number(info.get("questions")) or not _number(info.get("cached_share")):
            raise DataError(f"malformed stat costs: {where} needs numeric 'questions' and 'cached_share'", str(path))
        for component, row in info["per_question"].items():
            if component not in COMPONENTS:
                raise DataError(f"malformed stat costs: unknown component {component!r} in {where}", str(path))
            if not isinstance(row, dict) or any(not _number(row.get(key)) for key in COST_FIELDS):
                raise DataError(f"malformed stat costs: {where}.{component} needs a number per field", str(path))
    retrieval = doc.get("retrieval", {})
    if not isinstance(retrieval, dict) or any(
        not isinstance(v, dict) or not all(_number(x) for x in v.values()) for v in retrieval.values()
    ):
        raise DataError("malformed stat costs: 'retrieval' must map splits to objects of numbers", str(path))
    doc.setdefault("retrieval", {})
    return doc
