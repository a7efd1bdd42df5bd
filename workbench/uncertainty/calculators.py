"""The stats graph: every stat a feature set needs, computed once per question and batched across questions.

:func:`compute_stats` takes a batch of questions and the set of stat names to produce (usually
``required_stats(feature_names)``) and returns one ``{stat: value}`` mapping per question, following the contract in
:mod:`workbench.uncertainty.stats`. Model calls per batch (each one call over every question of the batch):

1. Self-Detection, only when its stats are needed: one sampling call for the P − 1 paraphrases of every question
   (one line each, the reply opened with :data:`PARAPHRASE_REPLY_PREFIX`, capped near the question's length,
   preambles stripped by :func:`clean_paraphrase`);
2. one greedy generation of the closed-book answers AND the paraphrases' answers (one decode loop), without hidden
   states or attention weights;
3. one sampling call with ``n = samples`` (the generator shares each prompt's prefill across its samples; the
   middle hidden layer only when ``sample_hidden`` is needed);
4. the EOS token's log-prob and entropy of answers that ended with EOS, recorded by the generator while decoding
   (it drops EOS from the answer text; the contract keeps it in ``greedy_logprobs`` / ``sample_logprobs``) — a
   teacher-forced scoring pass only for answers that lack them (e.g. from an older generation cache);
5. Attention Score, only when ``attention_logdiag`` is needed: one teacher-forced eager-attention pass over
   prompt + greedy answer, reading the last layer's diagonal A^h_jj at the answer tokens' own positions
   (:func:`answer_attention_logdiag`);
6. P(True) and Verbalized Confidence, when either is needed: ONE forward over one self-check prompt per question,
   read at two positions (:func:`~workbench.uncertainty.self_check_stats.self_check_stats`);
7. one ``judge.entail`` call holding every NLI pair of the batch that needs the judge (answer and paraphrase
   matrices; identical texts and, for a symmetric judge, mirrored pairs need none:
   :class:`~workbench.uncertainty.nli_matrix.NLIMatrices`);
8. DENSE, only when its stats are needed and ``contexts`` (each question's ranked chunks) are given: one rephrasing
   call, one greedy call over the k + 1 single-edit contexts, one ``judge.entail`` call
   (:func:`~workbench.uncertainty.dense_stats.dense_stats`).

SAR similarities and token relevance use the embedder (cosine of unit rows, clipped to [0, 1]); MARS importance uses
:func:`~workbench.uncertainty.features.probability.heuristic_token_importance`. ``lars_score`` is not produced
here (:data:`UNAVAILABLE_STATS`): it needs a scorer fitted on labelled answers, which the ``collect`` stage does
after the stats pass (:mod:`workbench.uncertainty.lars_fit`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.backends.prompts import ANSWER_SYSTEM
from workbench.core.errors import ConfigError, DataError
from workbench.uncertainty.features import get_features
from workbench.uncertainty.features.probability import heuristic_token_importance
from workbench.uncertainty.nli_matrix import NLIMatrices, judge_is_symmetric
from workbench.uncertainty.self_check_stats import (
    CONFIDENCE_OPTIONS,
    CONFIDENCE_REPLY_PREFIX,
    PTRUE_OPTIONS_FALSE,
    PTRUE_OPTIONS_TRUE,
    SELF_CHECK_PROMPT,
    ptrue_from_logprobs,
    self_check_prompt,
    self_check_stats,
)
from workbench.uncertainty.stats import STATS

__all__ = [
    "ANSWER_SYSTEM",
    "ATTENTION_SCOPE",
    "DENSE_STATS",
    "PARAPHRASE_PROMPT",
    "PARAPHRASE_REPLY_PREFIX",
    "PTRUE_OPTIONS_FALSE",
    "PTRUE_OPTIONS_TRUE",
    "SELF_CHECK_PROMPT",
    "STAT_PROMPT_GROUPS",
    "UNAVAILABLE_STATS",
    "StatSettings",
    "answer_attention_logdiag",
    "clean_paraphrase",
    "compute_stats",
    "middle_layer",
    "paraphrase_token_cap",
    "prompt_fingerprints",
    "prompt_group_fingerprints",
    "prompt_groups",
    "prompts_fingerprint",
    "ptrue_from_logprobs",
    "self_check_prompt",
    "unavailable_features",
]

UNAVAILABLE_STATS: frozenset[str] = frozenset({"lars_score"})
"""Stats this graph cannot produce: LARS needs a scorer fitted on labelled answers (``collect`` fits one)."""

DENSE_STATS: frozenset[str] = frozenset({"dense_answers", "dense_nli_probs"})
"""Stats that need each question's retrieved chunks (``contexts=``)."""

ATTENTION_SCOPE = "answer_positions"
"""``attention_logdiag`` holds the greedy answer tokens' own positions only (the response span), not the prompt's:
see :func:`answer_attention_logdiag`."""

PARAPHRASE_PROMPT = (
    "Reword this question so that it asks exactly the same thing in different words. "
    "Reply with the new question only.\nQuestion: {question}"
)
PARAPHRASE_REPLY_PREFIX = "Reworded question:"
"""Appended after the rendered paraphrase chat: the reply then starts with the reworded question, not a preamble,
so a length cap near the question's length is enough."""


STAT_PROMPT_GROUPS: dict[str, str] = {
    "ptrue": "self_check",
    "verbalized_confidence": "self_check",
    "paraphrase_answers": "paraphrase",
    "paraphrase_nli_probs": "paraphrase",
    "dense_answers": "rephrase",
    "dense_nli_probs": "rephrase",
}
"""The stats made with a prompt of their own, by prompt group; every stat reads the ``answer`` group (the answering
system prompt and templates, the passage format)."""


def _prompt_parts() -> dict[str, list[Any]]:
    """The texts (and option tokens) of each prompt group, in a fixed order."""
    from workbench.backends.prompts import CLOSED_BOOK_TEMPLATE, CONTEXT_TEMPLATE, format_passages
    from workbench.uncertainty.dense_stats import REPHRASE_PROMPT

    passage_sample = format_passages(["Title", "Other"], ["word " * 30, "short text"], 40)
    return {
        "answer": [ANSWER_SYSTEM, CONTEXT_TEMPLATE, CLOSED_BOOK_TEMPLATE, passage_sample],
        "self_check": [
            SELF_CHECK_PROMPT,
            CONFIDENCE_REPLY_PREFIX,
            PTRUE_OPTIONS_TRUE,
            PTRUE_OPTIONS_FALSE,
            CONFIDENCE_OPTIONS,
        ],
        "paraphrase": [PARAPHRASE_PROMPT, PARAPHRASE_REPLY_PREFIX],
        "rephrase": [REPHRASE_PROMPT],
    }


def prompt_fingerprints() -> dict[str, str]:
    """One hash per prompt group: ``answer`` (system prompt, closed-book and context templates, passage format),
    ``self_check`` (the P(True) / verbalized-confidence prompt, reply opening and option tokens), ``paraphrase``
    (Self-Detection's rewording prompt and reply opening) and ``rephrase`` (DENSE's chunk rephrasing)."""
    from workbench.core.hashing import stable_hash

    return {name: stable_hash(parts) for name, parts in _prompt_parts().items()}


def prompt_groups(stats: Iterable[str]) -> list[str]:
    """The prompt groups (see :func:`prompt_fingerprints`) whose texts the stats ``stats`` are made with."""
    return sorted({"answer"} | {STAT_PROMPT_GROUPS[s] for s in stats if s in STAT_PROMPT_GROUPS})


def prompt_group_fingerprints(stats: Iterable[str]) -> dict[str, str]:
    """``{group: fingerprint}`` of the prompt groups ``stats`` read: what a collection (and a bundle, schema 1.1)
    records so that a later change to a prompt its features never read does not refuse it."""
    current = prompt_fingerprints()
    return {group: current[group] for group in prompt_groups(stats)}


def prompts_fingerprint() -> str:
    """A hash of every prompt text and format the features and answers are made with (all the groups of
    :func:`prompt_fingerprints`, in one list).

    A collection and a bundle record it, and since bundle schema 1.1 also the fingerprints of the groups their
    features read (``prompt_groups``): a runtime whose prompts differ in a group a bundle's features read would
    compute other features than its calibrators were fitted on, so it refuses the bundle. A bundle without
    ``prompt_groups`` (schema 1.0) is checked against this whole-set fingerprint.
    """
    from workbench.core.hashing import stable_hash

    return stable_hash([part for parts in _prompt_parts().values() for part in parts])


_GREEDY_STATS = {"greedy_text", "greedy_logprobs", "greedy_eos", "greedy_entropies", "token_relevance"}
_GREEDY_STATS |= {"token_importance", "attention_logdiag", "paraphrase_answers"} | {"ptrue", "verbalized_confidence"}
_SAMPLE_STATS = {"sample_texts", "sample_logprobs", "sample_hidden", "sts_samples", "ptrue", "verbalized_confidence"}
_SELF_CHECK_STATS = {"ptrue", "verbalized_confidence"}
_NLI_STATS = {"nli_texts", "nli_index_greedy", "nli_index_samples", "nli_probs"}
_PARAPHRASE_STATS = {"paraphrase_answers", "paraphrase_nli_probs"}


_RETIRED_SETTINGS = frozenset({"verbalized_max_new_tokens"})
"""Settings older collections and bundles record that no longer exist (ignored on load): the verbalized
confidence is read from a digit distribution now, not generated. Their prompts fingerprint differs anyway."""


@dataclass(frozen=True)
class StatSettings:
    """How the stats are produced (documented in the collection metadata).

    ``samples`` N answers sampled at ``temperature`` (each at most ``max_new_tokens`` tokens, cut at ``stop``);
    the greedy answer uses the same length and stop strings. N = 5 by default: every feature but INSIDE reads at
    most 5 samples; INSIDE reads min(10, N), so K = 5 instead of the paper's 10 unless N = 10 is asked for (each
    extra sample is one more decoded sequence per question). ``paraphrases`` P (the question + P − 1 paraphrases,
    sampled at ``paraphrase_temperature``, one line each, at most :func:`paraphrase_token_cap` tokens — about
    ``paraphrase_length_ratio`` × the question's tokens + ``paraphrase_length_margin``, never more than
    ``paraphrase_max_new_tokens`` — then cleaned by :func:`clean_paraphrase`); the first ``ptrue_ideas`` samples are
    listed (distinct, with counts) in the self-check prompt of P(True) and Verbalized Confidence. ``seed``
    overrides the generator's sampling seed (None: the generator's).
    """

    samples: int = 5
    temperature: float = 0.7
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ("\n",)
    paraphrases: int = 5
    paraphrase_temperature: float = 1.0
    paraphrase_max_new_tokens: int = 64
    paraphrase_length_ratio: float = 1.5
    paraphrase_length_margin: int = 4
    ptrue_ideas: int = 5
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (``stop`` as a list)."""
        from dataclasses import asdict

        out = asdict(self)
        out["stop"] = list(self.stop)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str = "stats settings") -> StatSettings:
        """Settings from :meth:`to_dict` output (e.g. a collection's ``metadata.json`` or a bundle manifest);
        ConfigError on an unknown key or a bad value (a retired key is ignored)."""
        from dataclasses import fields

        if not isinstance(d, dict):
            raise ConfigError(f"expected a mapping of settings, got {type(d).__name__}", where)
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k not in _RETIRED_SETTINGS}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown stats setting(s) {unknown} (known: {', '.join(sorted(known))})", where)
        values = dict(d)
        if "stop" in values:
            values["stop"] = tuple(str(s) for s in values["stop"])
        try:
            out = cls(**values)
            out.validate()
        except (TypeError, ConfigError) as exc:
            raise ConfigError(f"bad stats settings: {exc}", where) from None
        return out

    def validate(self) -> None:
        """Raise :class:`ConfigError` on out-of-range settings."""
        if self.samples < 1 or self.paraphrases < 1 or self.max_new_tokens < 1:
            raise ConfigError("samples, paraphrases and max_new_tokens must be >= 1", "StatSettings")
        if self.temperature <= 0 or self.paraphrase_temperature <= 0:
            raise ConfigError("sampling temperatures must be > 0", "StatSettings")
        if self.paraphrase_max_new_tokens < 1 or self.paraphrase_length_ratio <= 0 or self.paraphrase_length_margin < 0:
            raise ConfigError(
                "paraphrase_max_new_tokens must be >= 1, paraphrase_length_ratio > 0, paraphrase_length_margin >= 0",
                "StatSettings",
            )


def unavailable_features(names: Iterable[str]) -> dict[str, list[str]]:
    """``{feature: [stats it needs that this graph cannot produce]}`` for the features among ``names``."""
    out = {}
    for feature in get_features(names):
        missing = sorted(set(feature.stats) & UNAVAILABLE_STATS)
        if missing:
            out[feature.name] = missing
    return out


def middle_layer(generator: Any) -> int:
    """Index floor(n_hs / 2) into HF ``hidden_states`` (embeddings included: n_hs = layers + 1)."""
    return (int(generator.model.config.num_hidden_layers) + 1) // 2


def _unit(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def compute_stats(
    examples: Sequence[dict[str, Any]],
    needed: set[str],
    *,
    generator: Any,
    judge: Any = None,
    embedder: Any = None,
    settings: StatSettings | None = None,
    contexts: Sequence[Sequence[str]] | None = None,
    dense_settings: Any = None,
    nli_saved: dict[str, int] | None = None,
    cost_meter: Any = None,
) -> list[dict[str, Any]]:
    """One ``{stat: value}`` dict per example (each needs a ``"question"``) holding every stat in ``needed``.

    Raises :class:`DataError` for an unknown stat, a stat in :data:`UNAVAILABLE_STATS`, a missing judge /
    embedder that a needed stat requires, or DENSE stats without ``contexts`` (one list of ranked chunk texts per
    example; ``dense_settings`` is a :class:`~workbench.uncertainty.dense_stats.DenseSettings`). Values follow
    :data:`~workbench.uncertainty.stats.STATS`; texts are stripped of surrounding white space. ``greedy_text`` /
    ``sample_texts`` are also returned whenever the greedy answer / the samples were generated for another stat.
    Deterministic for a given generator seed. ``nli_saved`` (optional) receives, added to its counts, the ordered
    NLI pairs answered without the judge, by reason (``identical``, ``symmetric``, ``repeated``; see
    :class:`~workbench.uncertainty.nli_matrix.NLIMatrices`). ``cost_meter`` (optional, a
    :class:`~workbench.uncertainty.stat_costs.StatCostMeter` over the generator's, judge's and embedder's counters)
    receives each step's cost, charged to its component; the stats are the same with or without it.
    """
    settings = settings or StatSettings()
    settings.validate()
    needed = set(needed)
    unknown = sorted(needed - set(STATS))
    if unknown:
        raise DataError(f"unknown stat(s) {unknown}", "compute_stats")
    blocked = sorted(needed & UNAVAILABLE_STATS)
    if blocked:
        raise DataError(f"stat(s) {blocked} cannot be produced by the stats graph", "compute_stats")
    if needed & (_NLI_STATS | _PARAPHRASE_STATS) and judge is None:
        raise DataError("NLI stats need a judge", "compute_stats")
    if needed & {"token_relevance", "sts_samples"} and embedder is None:
        raise DataError("token_relevance / sts_samples need an embedder", "compute_stats")
    if needed & DENSE_STATS:
        if judge is None:
            raise DataError("DENSE stats need a judge", "compute_stats")
        if contexts is None or len(contexts) != len(examples):
            raise DataError("DENSE stats need one list of retrieved chunks per example (contexts=)", "compute_stats")
    questions = [str(ex["question"]) for ex in examples]
    out: list[dict[str, Any]] = [{} for _ in questions]
    if not questions:
        return out
    # the greedy answer enters the answer NLI matrix only when a feature reads its position there
    need_greedy = bool(needed & (_GREEDY_STATS | {"nli_index_greedy"} | _PARAPHRASE_STATS))
    need_samples = bool(needed & (_SAMPLE_STATS | _NLI_STATS))
    meter = cost_meter
    reader = "greedy" if need_greedy else "samples" if need_samples else None  # the component reading answers
    mark = meter.mark() if meter is not None else None
    prompts = [
        generator.build_prompt(q, None, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM).text
        for q in questions
    ]
    common = {"max_new_tokens": settings.max_new_tokens, "stop": settings.stop}
    if meter is not None and reader is not None:  # building the answer prompts
        meter.charge(mark, reader)

    # Self-Detection's paraphrases first, so that their answers join the greedy answers in ONE decode loop
    mark = meter.mark() if meter is not None else None
    paraphrased = _paraphrases(questions, generator, settings) if needed & _PARAPHRASE_STATS else []
    para_prompts = [
        generator.build_prompt(p, None, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM).text
        for p in paraphrased
    ]
    if meter is not None and needed & _PARAPHRASE_STATS:
        meter.charge(mark, "paraphrase")
    greedy: list[Any] = []
    para_texts: list[str] = []
    if need_greedy:  # no hidden states, no attention weights: the decode runs as bare greedy decoding does
        mark = meter.mark() if meter is not None else None
        answered = generator.generate([*prompts, *para_prompts], temperature=0.0, **common)
        greedy, para_texts = answered[: len(prompts)], [g.text.strip() for g in answered[len(prompts) :]]
        if meter is not None:  # one decode loop: each prompt's own cost to its component
            groups = {"greedy": greedy, **({"paraphrase": answered[len(prompts) :]} if para_prompts else {})}
            meter.charge_generations(mark, groups)
    samples: list[list[Any]] = [[] for _ in questions]
    if need_samples:
        mark = meter.mark() if meter is not None else None
        n = settings.samples
        hidden = middle_layer(generator) if "sample_hidden" in needed else None
        flat = generator.generate(
            prompts, temperature=settings.temperature, n=n, seed=settings.seed, return_hidden_layer=hidden, **common
        )
        samples = [flat[i * n : (i + 1) * n] for i in range(len(questions))]
        if meter is not None:
            meter.charge(mark, "samples")
    mark = meter.mark() if meter is not None else None
    eos_scored: dict[str, int] = {}
    eos_extra = _eos_logprobs(generator, prompts, greedy, samples, needed, eos_scored)
    greedy_texts = [g.text.strip() for g in greedy]
    sample_texts = [[s.text.strip() for s in group] for group in samples]
    if meter is not None and eos_scored:  # one scoring pass: split by the answers each component had scored
        meter.charge_shares(mark, eos_scored)

    mark = meter.mark() if meter is not None else None
    attention = answer_attention_logdiag(generator, prompts, greedy) if "attention_logdiag" in needed else None
    if meter is not None and attention is not None:
        meter.charge(mark, "attention")
    mark = meter.mark() if meter is not None else None
    for i, row in enumerate(out):
        if need_greedy:
            _greedy_stats(row, greedy[i], eos_extra.get(("g", i)), needed, generator)
        if attention is not None:
            row["attention_logdiag"] = attention[i]
        if need_samples:
            row["sample_texts"] = sample_texts[i]
            logprobs = []
            for j, s in enumerate(samples[i]):
                lp = [float(v) for v in s.logprobs]
                extra = eos_extra.get(("s", i, j))
                logprobs.append([*lp, extra[0]] if extra is not None else lp)
            row["sample_logprobs"] = logprobs
            if "sample_hidden" in needed:
                row["sample_hidden"] = np.stack([np.asarray(s.hidden_last, dtype=np.float32) for s in samples[i]])
    if meter is not None and reader is not None:  # reading the answers (MARS importance decodes the greedy tokens)
        meter.charge(mark, reader)

    if needed & {"token_relevance"}:
        mark = meter.mark() if meter is not None else None
        _token_relevance(out, questions, greedy, generator, embedder)
        if meter is not None:
            meter.charge(mark, "token_relevance")
    if "sts_samples" in needed:
        mark = meter.mark() if meter is not None else None
        texts = [f"{q} {s}" for q, group in zip(questions, sample_texts, strict=True) for s in group]
        vectors = _unit(embedder.encode(texts))
        n = settings.samples
        for i, row in enumerate(out):
            block = vectors[i * n : (i + 1) * n]
            row["sts_samples"] = np.clip(block @ block.T, 0.0, 1.0)
        if meter is not None:
            meter.charge(mark, "sts")
    if needed & _SELF_CHECK_STATS:  # one forward over one prompt per question, whichever of the two is selected
        mark = meter.mark() if meter is not None else None
        checks = self_check_stats(generator, questions, greedy_texts, sample_texts, settings.ptrue_ideas)
        for row, (ptrue, verbalized) in zip(out, checks, strict=True):
            row["ptrue"], row["verbalized_confidence"] = ptrue, verbalized
        if meter is not None:
            meter.charge(mark, "self_check")
    para_answers: list[list[str]] = []
    if needed & _PARAPHRASE_STATS:  # [answer to q (the greedy answer)] + the answers to its P − 1 paraphrases
        extra = settings.paraphrases - 1
        para_answers = [[greedy_texts[i], *para_texts[i * extra : (i + 1) * extra]] for i in range(len(questions))]
    mark = meter.mark() if meter is not None else None
    nli_pairs: dict[str, int] = {}
    saved = _nli_stats(out, questions, greedy_texts, sample_texts, para_answers, needed, judge, nli_pairs)
    if meter is not None and nli_pairs:  # one judge call: split by the pairs each matrix added to it
        meter.charge_shares(mark, nli_pairs)
    if nli_saved is not None:
        for reason, count in saved.items():
            nli_saved[reason] = nli_saved.get(reason, 0) + count
    if needed & DENSE_STATS:
        from workbench.uncertainty.dense_stats import dense_stats

        assert contexts is not None  # checked above
        mark = meter.mark() if meter is not None else None
        dense = dense_stats(
            questions, contexts, generator=generator, judge=judge, system=ANSWER_SYSTEM, settings=dense_settings
        )
        for row, extra in zip(out, dense, strict=True):
            row.update(extra)
        if meter is not None:
            meter.charge(mark, "dense")
    keep = needed | {"greedy_text", "sample_texts", "dense_fallbacks"}  # answers are kept whenever generated
    for row in out:
        for name in list(row):
            if name not in keep:
                del row[name]
    return out


def _eos_logprobs(
    generator: Any,
    prompts: list[str],
    greedy: list[Any],
    samples: list[list[Any]],
    needed: set[str],
    scored_by: dict[str, int] | None = None,
) -> dict[tuple, tuple[float, float]]:
    """``{key: (EOS log-prob, entropy)}`` for every answer that ended with EOS.

    The generator records them while decoding (``Generation.eos_logprob``); only answers without them (e.g. read
    from an older generation cache) are scored, in one teacher-forced pass. ``scored_by`` (optional) receives the
    scored (prompt, answer) pairs by cost component (``greedy`` / ``samples``; a pair both need counts as greedy's).
    """
    keys: list[tuple] = []
    pairs: list[tuple[str, str]] = []
    out: dict[tuple, tuple[float, float]] = {}

    def want(key: tuple, prompt: str, gen: Any) -> None:
        if gen.finish_reason != "eos":
            return
        if getattr(gen, "eos_logprob", None) is not None and getattr(gen, "eos_entropy", None) is not None:
            out[key] = (float(gen.eos_logprob), float(gen.eos_entropy))
        else:
            keys.append(key)
            pairs.append((prompt, gen.text))

    if needed & {"greedy_logprobs", "greedy_entropies", "greedy_eos"}:
        for i, g in enumerate(greedy):
            want(("g", i), prompts[i], g)
    if "sample_logprobs" in needed:
        for i, group in enumerate(samples):
            for j, s in enumerate(group):
                want(("s", i, j), prompts[i], s)
    if not pairs:
        return out
    unique = list(dict.fromkeys(pairs))
    if scored_by is not None:
        first = {pair: key[0] for key, pair in reversed(list(zip(keys, pairs, strict=True)))}
        for pair in unique:
            component = "greedy" if first[pair] == "g" else "samples"
            scored_by[component] = scored_by.get(component, 0) + 1
    scored = generator.score([p for p, _ in unique], [c for _, c in unique], add_eos=True)
    by_pair = {pair: (float(s.logprobs[-1]), float(s.entropies[-1])) for pair, s in zip(unique, scored, strict=True)}
    out.update({key: by_pair[pair] for key, pair in zip(keys, pairs, strict=True)})
    return out


def _greedy_stats(row: dict[str, Any], gen: Any, eos: tuple[float, float] | None, needed: set[str], generator: Any):
    """The greedy answer's text, log-probs (+ EOS), entropies and MARS importance."""
    row["greedy_text"] = gen.text.strip()
    row["greedy_eos"] = eos is not None
    lp = [float(v) for v in gen.logprobs]
    ent = [float(v) for v in gen.entropies]
    row["greedy_logprobs"] = [*lp, eos[0]] if eos is not None else lp
    row["greedy_entropies"] = [*ent, eos[1]] if eos is not None else ent
    if "token_importance" in needed:
        tokens = [generator.tokenizer.decode([int(t)]) for t in gen.token_ids]
        row["token_importance"] = heuristic_token_importance(tokens)


def answer_attention_logdiag(generator: Any, prompts: Sequence[str], answers: Sequence[Any]) -> list[np.ndarray]:
    """log A^h_jj of the LAST layer at the answer tokens' own positions, one ``(H, L)`` array per answer.

    LLM-Check's attention score (D²-RAG paper eqs. 22–23; Sriramanan et al. 2024) reads the diagonal of each head's
    post-softmax attention matrix Ker^h. For a sequence prompt (P tokens) + answer y_0..y_{L−1}, answer token y_j
    sits at position P + j, and its diagonal entry is the weight that the query at P + j puts on key P + j. One
    teacher-forced forward pass with eager attention over prompt + answer (left-padded, batched by
    ``generator.batch_size``) reads exactly those entries: column j of the result is log A^h_{P+j, P+j}, for
    every head h. The prompt positions are left out (the scope :data:`ATTENTION_SCOPE`; LLM-Check's code slices the
    matrices to the response's token span the same way). The D²-RAG paper and TTLM average over prompt + answer
    (m = the whole sequence), where the prompt positions — which do not depend on the answer — dominate m.

    ``answers`` are :class:`~workbench.backends.generator.Generation` objects of ``prompts`` (their ``token_ids``
    — EOS excluded — and ``prompt_tokens``, the prompt ids the generator kept after left truncation). An answer
    with no token gets an ``(H, 0)`` array (the feature is then NaN). Probabilities are floored at 1e-12 before the
    log. Counts ``lm_calls`` (one per answer), ``lm_batches``, ``prefill_tokens`` (prompt) and ``scored_tokens``
    (answer) on ``generator.counter``.

    The decoding loop cannot give these entries for free: the step that predicts y_j runs the query at position
    P + j − 1 (its diagonal belongs to the previous token), and the last answer token is fed only when a
    terminator follows it.
    """
    import torch

    from workbench.backends.generator import left_padded_batch
    from workbench.backends.prompts import encode

    model = generator.model
    heads = int(model.config.num_attention_heads)
    out = [np.zeros((heads, 0)) for _ in answers]
    rows: list[tuple[int, list[int], int]] = []  # (answer index, prompt + answer ids, answer length)
    for i, (prompt, gen) in enumerate(zip(prompts, answers, strict=True)):
        answer = [int(t) for t in gen.token_ids]
        if not answer:
            continue
        ids = encode(generator.tokenizer, prompt)
        kept = int(getattr(gen, "prompt_tokens", 0) or len(ids))
        rows.append((i, ids[-kept:] + answer, len(answer)))
    if not rows:
        return out
    pad = generator.tokenizer.pad_token_id
    pad = generator.tokenizer.eos_token_id if pad is None else pad
    device = getattr(generator, "device", None) or next(model.parameters()).device
    counter = generator.counter
    previous = getattr(model.config, "_attn_implementation", None)
    if previous != "eager":
        model.set_attn_implementation("eager")  # SDPA / flash kernels do not return attention weights
    try:
        with torch.inference_mode():
            for start in range(0, len(rows), max(int(generator.batch_size), 1)):
                batch = rows[start : start + max(int(generator.batch_size), 1)]
                width = max(len(seq) for _, seq, _ in batch)
                input_ids, mask, positions = left_padded_batch([seq for _, seq, _ in batch], pad)
                with counter.timed("score"):
                    result = model(
                        input_ids=input_ids.to(device),
                        attention_mask=mask.to(device),
                        position_ids=positions.to(device),
                        output_attentions=True,
                        use_cache=False,
                        logits_to_keep=1,
                    )
                diagonal = torch.diagonal(result.attentions[-1], dim1=-2, dim2=-1).float().cpu().numpy()  # (B, H, T)
                for b, (i, _, length) in enumerate(batch):
                    out[i] = np.log(np.maximum(diagonal[b, :, width - length :].astype(np.float64), 1e-12))
                counter.lm_calls += len(batch)  # prompts run through the model
                counter.lm_batches += 1
                counter.prefill_tokens += sum(len(seq) - length for _, seq, length in batch)
                counter.scored_tokens += sum(length for _, _, length in batch)
    finally:
        if previous is not None and previous != "eager":
            model.set_attn_implementation(previous)
    return out


def _token_relevance(out: list[dict], questions: list[str], greedy: list[Any], generator: Any, embedder: Any):
    """RT_i = 1 − clip(cos(q + answer without token i, q + answer), 0, 1), all questions in one encode call."""
    texts: list[str] = []
    spans = []
    for q, g in zip(questions, greedy, strict=True):
        ids = [int(t) for t in g.token_ids]
        start = len(texts)
        texts.append(f"{q} {generator.tokenizer.decode(ids, skip_special_tokens=True).strip()}")
        for k in range(len(ids)):
            rest = ids[:k] + ids[k + 1 :]
            texts.append(f"{q} {generator.tokenizer.decode(rest, skip_special_tokens=True).strip()}")
        spans.append((start, len(ids)))
    vectors = _unit(embedder.encode(texts)) if texts else np.zeros((0, 1))
    for row, (start, length) in zip(out, spans, strict=True):
        full = vectors[start]
        sims = vectors[start + 1 : start + 1 + length] @ full
        row["token_relevance"] = 1.0 - np.clip(sims, 0.0, 1.0)


_LEAD_IN = re.compile(
    r"^(?:(?:sure|certainly|of course|okay|ok|absolutely|alright|no problem|here you go)\b[\s!.,:;-]*"
    r"|(?:great|good question|happy to help)[!.,:;-]+\s*)",
    flags=re.IGNORECASE,
)
_HERE_IS = re.compile(r"^(?:here\s+is|here's|here\s+are)\b[^:?\n]{0,80}(?::\s*|$)", flags=re.IGNORECASE)
_LABEL = re.compile(
    r"^(?:(?:the|a|an|my|your|one)\s+)?"
    r"(?:(?:new|reworded|rephrased|paraphrased|rewritten|restated|reformulated|revised|alternative|alternate|"
    r"different|possible)\s+)*"
    r"(?:question|version|paraphrase|rephrasing|rewording|reformulation|rewrite|query|wording|q"
    r"|reworded|rephrased|paraphrased|rewritten|restated)"
    r"\s*(?:#?\d{1,2})?\s*[:：]\s*",
    flags=re.IGNORECASE,
)
_SAID_AS = re.compile(
    r"^.{0,120}?\b(?:reworded|rephrased|paraphrased|rewritten|restated|reformulated|asked|phrased)\s+as"
    r"(?:\s+follows)?\s*(?::\s*|(?=[\"“'‘]))",
    flags=re.IGNORECASE,
)
_NUMBERING = re.compile(r"^(?:\(?\d{1,2}[.)]|[-*•]|#{1,6})\s+")
_OPENING_QUOTES = {'"': '"', "“": "”", "‘": "’", "'": "'", "«": "»", "`": "`"}


def _strip_quotes(text: str) -> str:
    """The text inside a leading quote and its closing quote (anything after the closing quote dropped); a closing
    quote is one followed by white space, punctuation or the end, so "'Who is Hamlet's author?'" keeps its
    apostrophe."""
    if text and text[0] in _OPENING_QUOTES:
        close = re.search(re.escape(_OPENING_QUOTES[text[0]]) + r"(?=\s|$|[.,;:!?)])", text[1:])
        inner = text[1 : 1 + close.start()] if close else text[1:]
        if inner.strip():
            return inner.strip()
    return text


def _paraphrase_line(line: str) -> str:
    """One line with its preamble, label, numbering, markdown emphasis and wrapping quotes removed ('' if none
    is left). A line that ends with ':' and asks nothing ("Sure! Here is a paraphrase:") is all preamble."""
    text = line.strip()
    for _ in range(6):  # the wrappers nest: '1. **Reworded question:** "..."'
        before = text
        text = _LEAD_IN.sub("", text, count=1).strip()
        text = text.replace("**", "").replace("__", "").strip()
        text = _NUMBERING.sub("", text, count=1).strip()
        text = _HERE_IS.sub("", text, count=1).strip()
        text = _SAID_AS.sub("", text, count=1).strip()
        text = _LABEL.sub("", text, count=1).strip()
        text = _strip_quotes(text)
        if text == before:
            break
    if text.endswith(":") and "?" not in text:
        return ""
    return " ".join(text.split())


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def clean_paraphrase(text: str, question: str | None = None) -> str:
    """The paraphrased question in a model's reply, without preambles: '' when the reply holds none.

    Small chat models wrap the one question they were asked for: "Sure! Here is a paraphrase:\n\nWhat is ...?",
    "Paraphrased question: ...", "**Reworded question:** ...", '"What is ...?"', numbered or bulleted lists
    ("1. ...\n2. ..."), a closing remark or an answer after the question. Rules, line by line:

    * remove a lead-in ("Sure!", "Certainly,"), a "Here is ...:" preamble, a "... can be rephrased as:" lead, a
      label ("Question:", "Rephrased:", "New question 2:"), list numbering or bullets, markdown emphasis and
      wrapping quotes (text after the closing quote is dropped); a line ending in ':' without a '?' is preamble;
    * when some line asks a question ('?'), the paraphrase is the first such line, cut after its first '?' (the
      closing remark or answer that follows is dropped); otherwise it is the first non-empty line;
    * with ``question`` given, a question line that merely repeats it (case and spacing ignored) is skipped when a
      later question line differs (the model echoed the question before rewording it).
    """
    lines = [c for c in (_paraphrase_line(line) for line in (text or "").splitlines()) if c]
    asking = [line[: line.index("?") + 1] for line in lines if "?" in line]
    if not asking:
        return lines[0] if lines else ""
    if question is not None:
        for line in asking:
            if not _same_text(line, question):
                return line
    return asking[0]


def paraphrase_token_cap(generator: Any, questions: Sequence[str], settings: StatSettings) -> int:
    """The token cap of one paraphrasing call: ⌈``paraphrase_length_ratio`` × the longest question's tokens⌉ +
    ``paraphrase_length_margin``, at most ``paraphrase_max_new_tokens`` (a paraphrase is about as long as its
    question; the forced reply opening leaves no preamble to pay for)."""
    import math

    longest = max((len(generator.tokenizer(q, add_special_tokens=False)["input_ids"]) for q in questions), default=0)
    cap = math.ceil(settings.paraphrase_length_ratio * longest) + settings.paraphrase_length_margin
    return max(1, min(settings.paraphrase_max_new_tokens, cap))


def _paraphrases(questions: list[str], generator: Any, settings: StatSettings) -> list[str]:
    """The P − 1 paraphrases of every question (question-major), from ONE sampling call.

    ``n = P − 1`` per question (shared prefill, T = ``paraphrase_temperature``), the reply started with
    :data:`PARAPHRASE_REPLY_PREFIX`, one line each (stop at a newline), at most :func:`paraphrase_token_cap`
    tokens; each reply is cleaned by :func:`clean_paraphrase`, and one with no paraphrase left falls back to the
    question itself (its answer is then the greedy answer again).
    """
    extra = settings.paraphrases - 1
    if extra == 0:
        return []
    chats = [generator.render_chat(PARAPHRASE_PROMPT.format(question=q)) + PARAPHRASE_REPLY_PREFIX for q in questions]
    flat = generator.generate(
        chats,
        n=extra,
        temperature=settings.paraphrase_temperature,
        max_new_tokens=paraphrase_token_cap(generator, questions, settings),
        stop=("\n",),
        seed=settings.seed,
    )
    return [clean_paraphrase(g.text, questions[i // extra]) or questions[i // extra] for i, g in enumerate(flat)]


def _nli_stats(
    out, questions, greedy_texts, sample_texts, para_answers, needed: set[str], judge, pairs_by=None
) -> dict[str, int]:
    """The answer NLI matrix and the paraphrase matrix of every question, from ONE ``judge.entail`` call.

    The answer matrix holds the unique texts among the samples, with the greedy answer first only when
    ``nli_index_greedy`` is needed (no selected feature reads it otherwise). Pairs are planned by
    :class:`~workbench.uncertainty.nli_matrix.NLIMatrices` (question-prefixed by the judge; identical texts →
    (0, 0, 1) without a call; for a symmetric judge each unordered pair once). Returns the pairs saved, by reason.
    ``pairs_by`` (optional) receives the judge pairs each matrix added, by cost component (``nli_answers`` /
    ``nli_paraphrase``; a pair both matrices need is the one that asked first's).
    """
    want_nli = bool(needed & _NLI_STATS)
    want_para = bool(needed & _PARAPHRASE_STATS)
    if not (want_nli or want_para):
        return {}
    with_greedy = "nli_index_greedy" in needed
    plan = NLIMatrices(symmetric=judge_is_symmetric(judge))
    handles = []
    added = {**({"nli_answers": 0} if want_nli else {}), **({"nli_paraphrase": 0} if want_para else {})}
    for i, q in enumerate(questions):
        handle: dict[str, Any] = {}
        if want_nli:
            before = plan.pairs
            texts = list(dict.fromkeys([*(greedy_texts[i : i + 1] if with_greedy else []), *sample_texts[i]]))
            handle["nli"] = (texts, plan.add(q, texts))
            added["nli_answers"] += plan.pairs - before
        if want_para:
            before = plan.pairs
            handle["para"] = (para_answers[i], plan.add(q, para_answers[i]))
            added["nli_paraphrase"] += plan.pairs - before
        handles.append(handle)
    if pairs_by is not None:
        for component, count in added.items():
            pairs_by[component] = pairs_by.get(component, 0) + count
    plan.run(judge)
    for i, (row, handle) in enumerate(zip(out, handles, strict=True)):
        if "nli" in handle:
            texts, h = handle["nli"]
            row["nli_texts"] = texts
            if with_greedy:
                row["nli_index_greedy"] = texts.index(greedy_texts[i])
            row["nli_index_samples"] = [texts.index(s) for s in sample_texts[i]]
            row["nli_probs"] = plan.matrix(h)
        if "para" in handle:
            answers, h = handle["para"]
            row["paraphrase_answers"] = answers
            row["paraphrase_nli_probs"] = plan.matrix(h)
    return dict(plan.saved)
