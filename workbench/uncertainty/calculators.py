"""The stats graph: every stat a feature set needs, computed once per question and batched across questions.

:func:`compute_stats` takes a batch of questions and the set of stat names to produce (usually
``required_stats(feature_names)``) and returns one ``{stat: value}`` mapping per question, following the contract in
:mod:`workbench.uncertainty.stats`. Model calls per batch (each one call over every question of the batch):

1. one greedy generation of the closed-book answer (the middle hidden layer when ``sample_hidden`` is needed; the
   attention diagonal only when ``attention_logdiag`` is needed);
2. one sampling call with ``n = samples`` (the generator shares each prompt's prefill across its samples);
3. the EOS token's log-prob and entropy of answers that ended with EOS, recorded by the generator while decoding
   (it drops EOS from the answer text; the contract keeps it in ``greedy_logprobs`` / ``sample_logprobs``) — a
   teacher-forced scoring pass only for answers that lack them (e.g. from an older generation cache);
4. P(True): one next-token read over the options "true" / "false" after a prompt of our own (ptrue =
   P(true) / (P(true) + P(false)); the TTLM forced-reply reading in the stats contract is not used);
5. verbalized confidence: one greedy generation;
6. Self-Detection: one sampling call for the P − 1 paraphrases, one greedy batch answering them;
7. one ``judge.entail`` call holding every NLI pair of the batch (answer matrices and paraphrase matrices);
8. DENSE, only when its stats are needed and ``contexts`` (each question's ranked chunks) are given: one rephrasing
   call, one greedy call over the k + 1 single-edit contexts, one ``judge.entail`` call
   (:func:`~workbench.uncertainty.dense_stats.dense_stats`).

SAR similarities and token relevance use the embedder (cosine of unit rows, clipped to [0, 1]); MARS importance uses
:func:`~workbench.uncertainty.features.probability.heuristic_token_importance`. ``lars_score`` is not produced
here (:data:`UNAVAILABLE_STATS`): it needs a scorer fitted on labelled answers, which the ``collect`` stage does
after the stats pass (:mod:`workbench.uncertainty.lars_fit`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import ConfigError, DataError
from workbench.uncertainty.features import get_features
from workbench.uncertainty.features.probability import heuristic_token_importance
from workbench.uncertainty.stats import STATS

UNAVAILABLE_STATS: frozenset[str] = frozenset({"lars_score"})
"""Stats this graph cannot produce: LARS needs a scorer fitted on labelled answers (``collect`` fits one)."""

DENSE_STATS: frozenset[str] = frozenset({"dense_answers", "dense_nli_probs"})
"""Stats that need each question's retrieved chunks (``contexts=``)."""

ATTENTION_SCOPE = "answer_positions"
"""``attention_logdiag`` holds the answer positions only (the generator's ``attentions[-1]``), not prompt + answer."""

ANSWER_SYSTEM = "You answer quiz questions. Reply with the answer only: a name, a date, a number or a short phrase."
PTRUE_PROMPT = (
    "Question: {question}\n"
    "Some candidate answers that came to mind:\n{ideas}\n"
    "Proposed answer: {answer}\n"
    "Is the proposed answer true or false? Reply with one word: true or false."
)
VERBALIZED_PROMPT = (
    "Question: {question}\n"
    "Proposed answer: {answer}\n"
    "How sure are you that the proposed answer is correct? Reply with a number from 0 to 100 only."
)
VERBALIZED_REPLY_PREFIX = "Confidence (0-100): "
"""Appended after the rendered verbalized-confidence chat: small models then reply with a number, not a sentence."""
PARAPHRASE_PROMPT = (
    "Reword this question so that it asks exactly the same thing in different words. "
    "Reply with the new question only.\nQuestion: {question}"
)
PTRUE_OPTIONS_TRUE: tuple[str, ...] = ("true", "True")
PTRUE_OPTIONS_FALSE: tuple[str, ...] = ("false", "False")


def prompts_fingerprint() -> str:
    """A hash of every prompt text and format the features and answers are made with (the answering templates and
    system prompt, the passage format, P(True), verbalized confidence, paraphrasing, DENSE's rephrasing).

    A collection and a bundle record it; a runtime whose prompts differ would compute different features than its
    calibrators were fitted on, so it refuses the bundle (the prompts' version, without a number to forget to bump).
    """
    from workbench.backends.prompts import CLOSED_BOOK_TEMPLATE, CONTEXT_TEMPLATE, format_passages
    from workbench.core.hashing import stable_hash
    from workbench.uncertainty.dense_stats import REPHRASE_PROMPT

    passage_sample = format_passages(["Title", "Other"], ["word " * 30, "short text"], 40)
    return stable_hash(
        [
            ANSWER_SYSTEM,
            CONTEXT_TEMPLATE,
            CLOSED_BOOK_TEMPLATE,
            passage_sample,
            PTRUE_PROMPT,
            PTRUE_OPTIONS_TRUE,
            PTRUE_OPTIONS_FALSE,
            VERBALIZED_PROMPT,
            VERBALIZED_REPLY_PREFIX,
            PARAPHRASE_PROMPT,
            REPHRASE_PROMPT,
        ]
    )


_GREEDY_STATS = {"greedy_text", "greedy_logprobs", "greedy_eos", "greedy_entropies", "token_relevance"}
_GREEDY_STATS |= {"token_importance", "attention_logdiag", "ptrue", "verbalized_text", "paraphrase_answers"}
_SAMPLE_STATS = {"sample_texts", "sample_logprobs", "sample_hidden", "sts_samples", "ptrue"}
_NLI_STATS = {"nli_texts", "nli_index_greedy", "nli_index_samples", "nli_probs"}
_PARAPHRASE_STATS = {"paraphrase_answers", "paraphrase_nli_probs"}


@dataclass(frozen=True)
class StatSettings:
    """How the stats are produced (documented in the collection metadata).

    ``samples`` N answers sampled at ``temperature`` (each at most ``max_new_tokens`` tokens, cut at ``stop``);
    the greedy answer uses the same length and stop strings. ``paraphrases`` P (the question + P − 1 paraphrases,
    sampled at ``paraphrase_temperature``, at most ``paraphrase_max_new_tokens`` tokens); ``verbalized_max_new_tokens``
    caps the confidence reply; ``ptrue_ideas`` samples are listed as ideas in the P(True) prompt. ``seed`` overrides
    the generator's sampling seed (None: the generator's).
    """

    samples: int = 5
    temperature: float = 0.7
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ("\n",)
    paraphrases: int = 5
    paraphrase_temperature: float = 1.0
    paraphrase_max_new_tokens: int = 40
    verbalized_max_new_tokens: int = 6
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
        ConfigError on an unknown key or a bad value."""
        from dataclasses import fields

        if not isinstance(d, dict):
            raise ConfigError(f"expected a mapping of settings, got {type(d).__name__}", where)
        known = {f.name for f in fields(cls)}
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
) -> list[dict[str, Any]]:
    """One ``{stat: value}`` dict per example (each needs a ``"question"``) holding every stat in ``needed``.

    Raises :class:`DataError` for an unknown stat, a stat in :data:`UNAVAILABLE_STATS`, a missing judge /
    embedder that a needed stat requires, or DENSE stats without ``contexts`` (one list of ranked chunk texts per
    example; ``dense_settings`` is a :class:`~workbench.uncertainty.dense_stats.DenseSettings`). Values follow
    :data:`~workbench.uncertainty.stats.STATS`; texts are stripped of surrounding white space. ``greedy_text`` /
    ``sample_texts`` are also returned whenever the greedy answer / the samples were generated for another stat.
    Deterministic for a given generator seed.
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
    need_greedy = bool(needed & (_GREEDY_STATS | _NLI_STATS | _PARAPHRASE_STATS))
    need_samples = bool(needed & (_SAMPLE_STATS | _NLI_STATS))
    hidden = middle_layer(generator) if "sample_hidden" in needed else None
    prompts = [
        generator.build_prompt(q, None, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM).text
        for q in questions
    ]
    common = {"max_new_tokens": settings.max_new_tokens, "stop": settings.stop, "return_hidden_layer": hidden}

    greedy = []
    if need_greedy:
        greedy = generator.generate(prompts, temperature=0.0, return_attentions="attention_logdiag" in needed, **common)
    samples: list[list[Any]] = [[] for _ in questions]
    if need_samples:
        n = settings.samples
        flat = generator.generate(prompts, temperature=settings.temperature, n=n, seed=settings.seed, **common)
        samples = [flat[i * n : (i + 1) * n] for i in range(len(questions))]
    eos_extra = _eos_logprobs(generator, prompts, greedy, samples, needed)
    greedy_texts = [g.text.strip() for g in greedy]
    sample_texts = [[s.text.strip() for s in group] for group in samples]

    for i, row in enumerate(out):
        if need_greedy:
            _greedy_stats(row, greedy[i], eos_extra.get(("g", i)), needed, generator)
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

    if needed & {"token_relevance"}:
        _token_relevance(out, questions, greedy, generator, embedder)
    if "sts_samples" in needed:
        texts = [f"{q} {s}" for q, group in zip(questions, sample_texts, strict=True) for s in group]
        vectors = _unit(embedder.encode(texts))
        n = settings.samples
        for i, row in enumerate(out):
            block = vectors[i * n : (i + 1) * n]
            row["sts_samples"] = np.clip(block @ block.T, 0.0, 1.0)
    if "ptrue" in needed:
        _ptrue(out, questions, greedy_texts, sample_texts, generator, settings)
    if "verbalized_text" in needed:
        chats = [
            generator.render_chat(VERBALIZED_PROMPT.format(question=q, answer=a)) + VERBALIZED_REPLY_PREFIX
            for q, a in zip(questions, greedy_texts, strict=True)
        ]
        replies = generator.generate(chats, max_new_tokens=settings.verbalized_max_new_tokens, temperature=0.0)
        for row, reply in zip(out, replies, strict=True):
            row["verbalized_text"] = reply.text.strip()
    para_answers = (
        _paraphrase_answers(questions, greedy_texts, generator, settings) if needed & _PARAPHRASE_STATS else []
    )
    _nli_stats(out, questions, greedy_texts, sample_texts, para_answers, needed, judge)
    if needed & DENSE_STATS:
        from workbench.uncertainty.dense_stats import dense_stats

        assert contexts is not None  # checked above
        dense = dense_stats(
            questions, contexts, generator=generator, judge=judge, system=ANSWER_SYSTEM, settings=dense_settings
        )
        for row, extra in zip(out, dense, strict=True):
            row.update(extra)
    keep = needed | {"greedy_text", "sample_texts", "dense_fallbacks"}  # answers are kept whenever generated
    for row in out:
        for name in list(row):
            if name not in keep:
                del row[name]
    return out


def _eos_logprobs(
    generator: Any, prompts: list[str], greedy: list[Any], samples: list[list[Any]], needed: set[str]
) -> dict[tuple, tuple[float, float]]:
    """``{key: (EOS log-prob, entropy)}`` for every answer that ended with EOS.

    The generator records them while decoding (``Generation.eos_logprob``); only answers without them (e.g. read
    from an older generation cache) are scored, in one teacher-forced pass.
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
    scored = generator.score([p for p, _ in unique], [c for _, c in unique], add_eos=True)
    by_pair = {pair: (float(s.logprobs[-1]), float(s.entropies[-1])) for pair, s in zip(unique, scored, strict=True)}
    out.update({key: by_pair[pair] for key, pair in zip(keys, pairs, strict=True)})
    return out


def _greedy_stats(row: dict[str, Any], gen: Any, eos: tuple[float, float] | None, needed: set[str], generator: Any):
    """The greedy answer's text, log-probs (+ EOS), entropies, importance and attention diagonal."""
    row["greedy_text"] = gen.text.strip()
    row["greedy_eos"] = eos is not None
    lp = [float(v) for v in gen.logprobs]
    ent = [float(v) for v in gen.entropies]
    row["greedy_logprobs"] = [*lp, eos[0]] if eos is not None else lp
    row["greedy_entropies"] = [*ent, eos[1]] if eos is not None else ent
    if "token_importance" in needed:
        tokens = [generator.tokenizer.decode([int(t)]) for t in gen.token_ids]
        row["token_importance"] = heuristic_token_importance(tokens)
    if "attention_logdiag" in needed:
        attn = np.asarray(gen.attentions, dtype=np.float64)[-1]  # (heads, L) of the last layer
        row["attention_logdiag"] = np.log(np.maximum(attn, 1e-12))


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


def _ptrue(out, questions, greedy_texts, sample_texts, generator, settings: StatSettings) -> None:
    """ptrue = P("true") / (P("true") + P("false")) over the next-token options (case variants pooled)."""
    chats = []
    for q, a, ideas in zip(questions, greedy_texts, sample_texts, strict=True):
        listed = "\n".join(f"- {s}" for s in ideas[: settings.ptrue_ideas]) or "- (none)"
        chats.append(generator.render_chat(PTRUE_PROMPT.format(question=q, ideas=listed, answer=a)))
    options = [*PTRUE_OPTIONS_TRUE, *PTRUE_OPTIONS_FALSE]
    lp = np.asarray(generator.next_token_logprobs(chats, options), dtype=np.float64)
    k = len(PTRUE_OPTIONS_TRUE)
    yes = np.logaddexp.reduce(lp[:, :k], axis=1)
    no = np.logaddexp.reduce(lp[:, k:], axis=1)
    values = 1.0 / (1.0 + np.exp(no - yes))
    for row, value in zip(out, values, strict=True):
        row["ptrue"] = float(value)


def _paraphrase_answers(questions, greedy_texts, generator, settings: StatSettings) -> list[list[str]]:
    """[greedy answer of q] + greedy answers of P − 1 sampled paraphrases, per question (two generator calls)."""
    extra = settings.paraphrases - 1
    if extra == 0:
        return [[a] for a in greedy_texts]
    chats = [generator.render_chat(PARAPHRASE_PROMPT.format(question=q)) for q in questions]
    flat = generator.generate(
        chats,
        n=extra,
        temperature=settings.paraphrase_temperature,
        max_new_tokens=settings.paraphrase_max_new_tokens,
        stop=settings.stop,
        seed=settings.seed,
    )
    paraphrased = [g.text.strip() or questions[i // extra] for i, g in enumerate(flat)]
    prompts = [
        generator.build_prompt(p, None, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM).text
        for p in paraphrased
    ]
    answers = generator.generate(prompts, temperature=0.0, max_new_tokens=settings.max_new_tokens, stop=settings.stop)
    texts = [a.text.strip() for a in answers]
    return [[greedy_texts[i], *texts[i * extra : (i + 1) * extra]] for i in range(len(questions))]


def _nli_stats(out, questions, greedy_texts, sample_texts, para_answers, needed: set[str], judge) -> None:
    """The shared answer NLI matrix and the paraphrase matrix of every question, from ONE ``judge.entail`` call.

    Off-diagonal ordered pairs are judged (question-prefixed); diagonals are (0, 0, 1) — a text entails itself.
    """
    want_nli = bool(needed & _NLI_STATS)
    want_para = bool(needed & _PARAPHRASE_STATS)
    if not (want_nli or want_para):
        return
    premises: list[str] = []
    hypotheses: list[str] = []
    asked: list[str] = []
    plans = []
    for i, q in enumerate(questions):
        plan: dict[str, Any] = {}
        if want_nli:
            texts = list(dict.fromkeys([greedy_texts[i], *sample_texts[i]]))
            plan["nli"] = (texts, len(premises))
            for x, a in enumerate(texts):
                for y, b in enumerate(texts):
                    if x != y:
                        premises.append(a)
                        hypotheses.append(b)
                        asked.append(q)
        if want_para:
            answers = para_answers[i]
            plan["para"] = (answers, len(premises))
            for x, a in enumerate(answers):
                for y, b in enumerate(answers):
                    if x != y:
                        premises.append(a)
                        hypotheses.append(b)
                        asked.append(q)
        plans.append(plan)
    probs = np.asarray(judge.entail(premises, hypotheses, asked), dtype=np.float64) if premises else np.zeros((0, 3))
    for i, (row, plan) in enumerate(zip(out, plans, strict=True)):
        if "nli" in plan:
            texts, start = plan["nli"]
            row["nli_texts"] = texts
            row["nli_index_greedy"] = texts.index(greedy_texts[i])
            row["nli_index_samples"] = [texts.index(s) for s in sample_texts[i]]
            row["nli_probs"] = _square(probs, start, len(texts))
        if "para" in plan:
            answers, start = plan["para"]
            row["paraphrase_answers"] = answers
            row["paraphrase_nli_probs"] = _square(probs, start, len(answers))


def _square(probs: np.ndarray, start: int, size: int) -> np.ndarray:
    """Rebuild a (size, size, 3) matrix from its off-diagonal pairs (row-major from ``start``); diagonal (0,0,1)."""
    matrix = np.zeros((size, size, 3), dtype=np.float64)
    k = start
    for x in range(size):
        for y in range(size):
            if x == y:
                matrix[x, y] = (0.0, 0.0, 1.0)
            else:
                matrix[x, y] = probs[k]
                k += 1
    return matrix
