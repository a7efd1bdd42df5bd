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
5. Attention Score, only when ``attention_logdiag`` is needed: the last layer's diagonal A^h_jj at the answer
   tokens' own positions, read by the greedy decode of step 2 (``return_answer_attention``: one extra forward of
   the answers that end at the token cap); a teacher-forced eager-attention pass over prompt + answer only for
   answers that lack it (:func:`_attention_logdiag`);
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

This module orchestrates the calls; each family that needs more than a few lines has a module of its own:
:mod:`~workbench.uncertainty.paraphrase_stats` (Self-Detection's paraphrases),
:mod:`~workbench.uncertainty.attention_stats` (the attention diagonal),
:mod:`~workbench.uncertainty.self_check_stats` (P(True), verbalized confidence),
:mod:`~workbench.uncertainty.nli_matrix` (the NLI matrices) and :mod:`~workbench.uncertainty.dense_stats` (DENSE);
:mod:`~workbench.uncertainty.stat_settings` holds :class:`StatSettings` and :mod:`~workbench.uncertainty.stat_prompts`
the prompt-group fingerprints. Their public names are importable from here as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from workbench.backends.prompts import ANSWER_SYSTEM
from workbench.core.errors import DataError
from workbench.uncertainty.attention_stats import ATTENTION_SCOPE, answer_attention_logdiag
from workbench.uncertainty.dense_stats import dense_stats
from workbench.uncertainty.features import get_features
from workbench.uncertainty.features.probability import heuristic_token_importance
from workbench.uncertainty.nli_matrix import NLIMatrices, judge_is_symmetric
from workbench.uncertainty.paraphrase_stats import (
    PARAPHRASE_PROMPT,
    PARAPHRASE_REPLY_PREFIX,
    clean_paraphrase,
    paraphrase_token_cap,
    sample_paraphrases,
)
from workbench.uncertainty.self_check_stats import (
    PTRUE_OPTIONS_FALSE,
    PTRUE_OPTIONS_TRUE,
    SELF_CHECK_PROMPT,
    ptrue_from_logprobs,
    self_check_prompt,
    self_check_stats,
)
from workbench.uncertainty.stat_prompts import (
    STAT_PROMPT_GROUPS,
    prompt_fingerprints,
    prompt_group_fingerprints,
    prompt_groups,
    prompts_fingerprint,
)
from workbench.uncertainty.stat_settings import StatSettings
from workbench.uncertainty.stats import DERIVED_STATS, STATS

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


_GREEDY_STATS = {"greedy_text", "greedy_logprobs", "greedy_eos", "greedy_entropies", "token_relevance"}
_GREEDY_STATS |= {"token_importance", "attention_logdiag", "paraphrase_answers"} | {"ptrue", "verbalized_confidence"}
_SAMPLE_STATS = {"sample_texts", "sample_logprobs", "sample_hidden", "sts_samples", "ptrue", "verbalized_confidence"}
_SELF_CHECK_STATS = {"ptrue", "verbalized_confidence"}
_NLI_STATS = {"nli_texts", "nli_index_greedy", "nli_index_samples", "nli_probs"}
_PARAPHRASE_STATS = {"paraphrase_answers", "paraphrase_nli_probs"}


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
    answers: Sequence[Any] | None = None,
    samples: Sequence[Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """One ``{stat: value}`` dict per example (each needs a ``"question"``) holding every stat in ``needed``.

    ``needed`` may name a loaded feature plugin's derived stats (:class:`~workbench.uncertainty.stats.DerivedStat`):
    their inputs are computed with the rest, then each derived stat per question (the inputs kept only when asked for).
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

    ``answers`` / ``samples`` (optional) are a *given answer source*: one closed-book answer per example / one list of
    ``settings.samples`` sampled answers per example, as :class:`~workbench.backends.generation_types.Generation`
    objects (e.g. existing answers teacher-forced by :mod:`workbench.scoring.given`), used in place of the greedy
    generation / the sampling call, so every stat downstream is computed from them exactly as from generated ones
    (``sample_hidden`` only where each given sample holds ``hidden_last``).
    """
    settings = settings or StatSettings()
    settings.validate()
    needed = set(needed)
    # a loaded plugin's derived stats are computed last, from the built-in stats they need
    derived = [DERIVED_STATS[name] for name in sorted(needed & set(DERIVED_STATS))]
    asked = needed
    needed = (needed - set(DERIVED_STATS)) | {s for stat in derived for s in stat.needs}
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
    for given, name in ((answers, "answers"), (samples, "samples")):
        if given is not None and len(given) != len(questions):
            raise DataError(f"{len(given)} given {name} for {len(questions)} examples", "compute_stats")
    if samples is not None and any(len(group) != settings.samples for group in samples):
        raise DataError(f"each example needs {settings.samples} given samples (settings.samples)", "compute_stats")
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
    paraphrased = sample_paraphrases(questions, generator, settings) if needed & _PARAPHRASE_STATS else []
    para_prompts = [
        generator.build_prompt(p, None, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM).text
        for p in paraphrased
    ]
    if meter is not None and needed & _PARAPHRASE_STATS:
        meter.charge(mark, "paraphrase")
    greedy: list[Any] = []
    para_texts: list[str] = []
    # the attention diagonal is read while decoding where the generator can (no second pass over the prompts)
    decode_attention = "attention_logdiag" in needed and bool(getattr(generator, "records_answer_attention", False))
    if need_greedy:  # no hidden states, no attention weights: the decode runs as bare greedy decoding does
        mark = meter.mark() if meter is not None else None
        extra = {"return_answer_attention": True} if decode_attention else {}
        own = list(answers) if answers is not None else []  # a given answer is not decoded again
        decode = [*(prompts if answers is None else []), *para_prompts]
        answered = generator.generate(decode, temperature=0.0, **common, **extra) if decode else []
        greedy = own if answers is not None else answered[: len(prompts)]
        para_generations = answered[len(decode) - len(para_prompts) :]
        para_texts = [g.text.strip() for g in para_generations]
        if meter is not None:  # one decode loop: each prompt's own cost to its component
            groups = {"greedy": greedy, **({"paraphrase": para_generations} if para_prompts else {})}
            meter.charge_generations(mark, groups)
    sampled: list[list[Any]] = [[] for _ in questions]
    if need_samples and samples is not None:  # given samples: nothing is sampled
        sampled = [list(group) for group in samples]
    elif need_samples:
        mark = meter.mark() if meter is not None else None
        n = settings.samples
        hidden = middle_layer(generator) if "sample_hidden" in needed else None
        flat = generator.generate(
            prompts, temperature=settings.temperature, n=n, seed=settings.seed, return_hidden_layer=hidden, **common
        )
        sampled = [flat[i * n : (i + 1) * n] for i in range(len(questions))]
        if meter is not None:
            meter.charge(mark, "samples")
    mark = meter.mark() if meter is not None else None
    eos_scored: dict[str, int] = {}
    eos_extra = _eos_logprobs(generator, prompts, greedy, sampled, needed, eos_scored)
    greedy_texts = [g.text.strip() for g in greedy]
    sample_texts = [[s.text.strip() for s in group] for group in sampled]
    if meter is not None and eos_scored:  # one scoring pass: split by the answers each component had scored
        meter.charge_shares(mark, eos_scored)

    mark = meter.mark() if meter is not None else None
    attention = _attention_logdiag(generator, prompts, greedy) if "attention_logdiag" in needed else None
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
            for j, s in enumerate(sampled[i]):
                lp = [float(v) for v in s.logprobs]
                extra = eos_extra.get(("s", i, j))
                logprobs.append([*lp, extra[0]] if extra is not None else lp)
            row["sample_logprobs"] = logprobs
            if "sample_hidden" in needed and all(s.hidden_last is not None for s in sampled[i]):
                row["sample_hidden"] = np.stack([np.asarray(s.hidden_last, dtype=np.float32) for s in sampled[i]])
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
        assert contexts is not None  # checked above
        mark = meter.mark() if meter is not None else None
        dense = dense_stats(
            questions, contexts, generator=generator, judge=judge, system=ANSWER_SYSTEM, settings=dense_settings
        )
        for row, extra in zip(out, dense, strict=True):
            row.update(extra)
        if meter is not None:
            meter.charge(mark, "dense")
    for stat in derived:
        for question, row in zip(questions, out, strict=True):
            row[stat.name] = stat.compute(question, row)
    keep = asked | {"greedy_text", "sample_texts", "dense_fallbacks"}  # answers are kept whenever generated
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


def _attention_logdiag(generator: Any, prompts: Sequence[str], greedy: Sequence[Any]) -> list[np.ndarray]:
    """Each greedy answer's ``attention_logdiag``: the one its decode recorded (``Generation.attention_logdiag``),
    else — a generation from a cache, a served or wrapped generator, a last token never fed — from one
    teacher-forced pass over the answers that lack it (:func:`answer_attention_logdiag`)."""
    out: list[Any] = [getattr(g, "attention_logdiag", None) for g in greedy]
    missing = [i for i, value in enumerate(out) if value is None]
    if missing:
        scored = answer_attention_logdiag(generator, [prompts[i] for i in missing], [greedy[i] for i in missing])
        for i, value in zip(missing, scored, strict=True):
            out[i] = value
    return [np.asarray(value, dtype=np.float64) for value in out]


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
