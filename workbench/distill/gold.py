"""Labels for the controller's scoring decisions built from the gold data (spec §16.2), not from a teacher.

The QA schema gives, per question, its gold answers and its gold passages (``gold_passages``: the supporting
documents, by corpus ``doc_id``). From them, with InSemRAG's own retrieval (its chunked view, its routed hybrid
retriever, its weighted fusion), :class:`GoldLabeler` builds rows of the trace format
(:class:`~workbench.distill.traces.TraceRow`, source ``gold``) whose inputs are rendered by the prompted
controller's own prompt code (a dry :class:`~workbench.distill.traces.PromptRecorder`: no model runs):

* **refine (S3)** — ``Yes`` for a chunk of a gold document (those the fused pool holds first, then the gold
  document's other chunks), ``No`` for hard negatives: the highest-ranked non-gold candidates of the pool,
  ``negatives_per_positive`` (3) per positive (the spec's 1:3), at most ``max_positives`` positives per question;
* **completeness (S4)** — per gold passage an intact chunk (whole sentences, a clean start and end: ``Yes``) and the
  same chunk damaged (``No``, seeded per question): cut at a random word inside its first sentence (starts
  mid-sentence) or inside its last (ends mid-sentence), opened with a dangling connective ("As a result, …"), or
  its opening title mention replaced by a pronoun ("It …");
* **coverage (S7)** — (element, passage) → ``Yes`` iff the passage contains a gold answer string (distant
  supervision, whole words after normalisation); elements are the question itself (the controller's S6 fallback)
  plus any the teacher listed; per element the first ``max_positives`` containing passages of the pool and as many
  non-containing ones, best-ranked first;
* **channel_weights (S2)** — the intent letter whose channel-weight template
  (:data:`~workbench.methods.controller.INTENT_TEMPLATES`, restricted to InSemRAG's channels) ranks a gold chunk
  best when the channels' scores are fused: the three templates are searched as one batch, scored by the
  reciprocal rank of the first gold chunk in the top ``k1``, then by the share of the gold chunks in it; a tie goes
  to the template closest to uniform weights. No label when no template finds a gold chunk.

Every query is the question itself (round 1), with the controller's fallback views (dense = the question, sparse =
its content words), so the labels do not depend on a teacher.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.data.chunkers import split_sentences
from workbench.distill.traces import PromptRecorder, TraceRow, intent_letter
from workbench.methods.controller import (
    INTENTS,
    STOP_WORDS,
    Enrichment,
    PromptedLMController,
    completeness_checks,
    content_words,
    uniform_weights,
)
from workbench.metrics.qa import containment

__all__ = [
    "CONNECTIVES",
    "DAMAGE_KINDS",
    "GoldLabeler",
    "answer_in",
    "best_intent",
    "completeness_examples",
    "coverage_examples",
    "damage_chunk",
    "gold_rank",
    "intact_chunk",
    "relevance_examples",
    "template_weights",
]

DAMAGE_KINDS: tuple[str, ...] = ("cut_start", "cut_end", "connective", "pronoun")
"""The synthetic damages of a completeness ``No`` (module doc)."""

CONNECTIVES: tuple[str, ...] = (
    "As a result,",
    "Therefore,",
    "However,",
    "In addition,",
    "For this reason,",
    "Because of this,",
)
"""Openers whose premise is missing from the chunk they open."""

MIN_WORDS = 5
"""Shortest chunk (in words) a completeness example is made from."""


# ------------------------------------------------------------------------------------------------------ pure builders
def answer_in(text: str, answers: Sequence[str]) -> bool:
    """Whether ``text`` contains any of ``answers`` as whole words after normalisation (the QA containment)."""
    return bool(answers) and containment(text, list(answers)) > 0


def _clean(text: str) -> bool:
    checks = completeness_checks(text)
    return checks["starts_clean"] and checks["ends_clean"] and checks["balanced"]


def intact_chunk(text: str, rng: random.Random, max_words: int) -> str | None:
    """An intact chunk of ``text``: consecutive whole sentences from a random sentence whose start is clean (no
    dangling pronoun or connective), as many as fit ``max_words`` (at least one); None when no such chunk of at least
    :data:`MIN_WORDS` words with a clean start and end exists."""
    sentences = split_sentences(" ".join(text.split()))
    starts = [i for i, s in enumerate(sentences) if completeness_checks(s)["starts_clean"]]
    rng.shuffle(starts)
    for start in starts:
        picked: list[str] = []
        for sentence in sentences[start:]:
            if picked and len(" ".join([*picked, sentence]).split()) > max_words:
                break
            picked.append(sentence)
        chunk = " ".join(picked)
        if len(chunk.split()) >= MIN_WORDS and _clean(chunk):
            return chunk
    return None


def damage_chunk(chunk: str, rng: random.Random, title: str = "") -> tuple[str, str] | None:
    """``(damaged chunk, kind)``: ``chunk`` with one damage of :data:`DAMAGE_KINDS` chosen by ``rng`` among those
    that apply (``pronoun`` needs the chunk to open with ``title``); None when none applies."""
    sentences = split_sentences(chunk)
    if not sentences:
        return None
    first, last = sentences[0].split(), sentences[-1].split()
    words = chunk.split()
    kinds = []
    if len(first) >= 2 and len(words) - 1 >= 3:
        kinds.append("cut_start")
    if len(last) >= 2 and len(words) - 1 >= 3:
        kinds.append("cut_end")
    kinds.append("connective")
    if title and chunk.startswith(title + " ") and len(chunk) > len(title) + 1:
        kinds.append("pronoun")
    kind = rng.choice(kinds)
    if kind == "cut_start":  # drop 1 .. len(first) - 1 words: the chunk now starts inside its first sentence
        cut = rng.randint(1, min(len(first) - 1, len(words) - 3))
        return " ".join(words[cut:]), kind
    if kind == "cut_end":  # drop 1 .. len(last) - 1 words: it now ends inside its last sentence
        cut = rng.randint(1, min(len(last) - 1, len(words) - 3))
        return " ".join(words[:-cut]).rstrip(".,;:!?"), kind
    if kind == "pronoun":
        return "It" + chunk[len(title) :], kind
    head, _, rest = chunk.partition(" ")
    opener = head.lower() if head.lower().strip("\"'“‘(") in STOP_WORDS else head  # "The" → "the", "Paris" stays
    return f"{rng.choice(CONNECTIVES)} {opener} {rest}".strip(), kind


def completeness_examples(
    passages: Sequence[tuple[str, str]], rng: random.Random, max_words: int
) -> list[tuple[str, bool, str]]:
    """Per ``(title, text)`` passage: ``(intact chunk, True, "intact")`` and ``(its damaged copy, False, kind)``
    (:func:`intact_chunk`, :func:`damage_chunk`); a passage with no intact chunk gives none, so the classes stay
    balanced."""
    out: list[tuple[str, bool, str]] = []
    for title, text in passages:
        chunk = intact_chunk(text, rng, max_words)
        damaged = damage_chunk(chunk, rng, title) if chunk else None
        if chunk and damaged and damaged[0] != chunk:
            out += [(chunk, True, "intact"), (damaged[0], False, damaged[1])]
    return out


def relevance_examples(
    pool: Sequence[Any],
    gold_docs: set[str],
    extra: Sequence[Any] = (),
    *,
    negatives_per_positive: int = 3,
    max_positives: int = 2,
) -> list[tuple[Any, bool]]:
    """``(candidate, is_gold)`` pairs: positives are the ``pool`` candidates (objects with ``doc_id`` and
    ``chunk_id``, best first) from a gold document, then the ``extra`` gold chunks the pool missed, at most
    ``max_positives``; negatives the best-ranked non-gold candidates, ``negatives_per_positive`` per positive."""
    positives: list[Any] = []
    for candidate in [*pool, *extra]:
        if str(candidate.doc_id) in gold_docs and all(p.chunk_id != candidate.chunk_id for p in positives):
            positives.append(candidate)
    positives = positives[:max_positives]
    negatives = [c for c in pool if str(c.doc_id) not in gold_docs][: negatives_per_positive * len(positives)]
    return [(p, True) for p in positives] + [(n, False) for n in negatives]


def coverage_examples(
    elements: Sequence[str], passages: Sequence[str], answers: Sequence[str], *, max_positives: int = 2
) -> list[tuple[str, str, bool]]:
    """``(element, passage, contains a gold answer)`` triples: per element the first ``max_positives`` passages
    (best first) that contain a gold answer and as many that do not (none when no passage contains one)."""
    contains = [answer_in(p, answers) for p in passages]
    positives = [p for p, c in zip(passages, contains, strict=True) if c][:max_positives]
    negatives = [p for p, c in zip(passages, contains, strict=True) if not c][: len(positives)]
    return [(e, p, True) for e in elements for p in positives] + [(e, p, False) for e in elements for p in negatives]


def gold_rank(ranked_docs: Sequence[str], gold_docs: set[str], gold_chunks: int) -> tuple[float, float]:
    """``(reciprocal rank of the first gold chunk, share of the gold_chunks in the ranking)`` of a ranking given
    by the documents of its chunks, best first; (0, 0) when it holds no gold chunk."""
    hits = [i for i, doc in enumerate(ranked_docs) if str(doc) in gold_docs]
    if not hits:
        return 0.0, 0.0
    return 1.0 / (hits[0] + 1), len(hits) / max(gold_chunks, len(hits))


def template_weights(
    templates: Mapping[str, Mapping[str, float]], channels: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per intent, its template's weights restricted to ``channels`` and normalised to sum to 1 (uniform for a
    template with no weight on them) — how the prompted controller mixes one certain intent."""
    out = {}
    for intent in INTENTS:
        row = {c: max(float(templates[intent].get(c, 0.0)), 0.0) for c in channels}
        total = sum(row.values())
        out[intent] = {c: v / total for c, v in row.items()} if total > 0 else uniform_weights(channels)
    return out


def best_intent(quality: Mapping[str, tuple[float, float]], weights: Mapping[str, Mapping[str, float]]) -> str | None:
    """The intent whose fused ranking is best by ``quality[intent]`` = (reciprocal rank, recall), ties to the
    weights closest to uniform (then :data:`~workbench.methods.controller.INTENTS` order); None when no ranking
    holds a gold chunk."""
    if not quality or max(rr for rr, _ in quality.values()) <= 0:
        return None

    def spread(intent: str) -> float:
        row = list(weights[intent].values())
        return math.dist(row, [1.0 / len(row)] * len(row)) if row else 0.0

    ordered = [i for i in INTENTS if i in quality]
    return max(ordered, key=lambda i: (quality[i][0], quality[i][1], -round(spread(i), 9), -ordered.index(i)))


# ------------------------------------------------------------------------------------------------------ the labeler
class GoldLabeler:
    """Gold-derived rows for one question at a time, with an :class:`~workbench.methods.insemrag.InSemRAG`'s own
    chunked view and retriever (module doc).

    ``method``: the InSemRAG whose view, retriever and settings (``k1``, ``chunk_tokens``) are used;
    ``renderer``: the generator whose chat template renders the inputs (no model runs); ``controller_options``:
    the prompted controller's options (its ``templates``, ``passage_chars``); ``seed``: the synthetic damage's seed
    (with the question id). ``stats`` counts what was found (questions, gold chunks in the view and in the pool,
    labels per decision).
    """

    def __init__(
        self,
        method: Any,
        renderer: Any,
        *,
        controller_options: Mapping[str, Any] | None = None,
        seed: int = 0,
        negatives_per_positive: int = 3,
        max_positives: int = 2,
    ) -> None:
        self.method = method
        self.tools = method.tools
        self.capture = PromptRecorder(renderer, dry=True)
        options = {**(controller_options or {}), "score_mode": "logprobs"}  # one prompt per item, as rendered
        self.controller = PromptedLMController(self.capture, **options)
        self.channels: tuple[str, ...] = tuple(method.channels)
        self.weights = template_weights(self.controller.templates, self.channels)
        self.seed = seed
        self.negatives_per_positive = negatives_per_positive
        self.max_positives = max_positives
        self.stats: Counter[str] = Counter()
        self._doc_rows: dict[str, list[int]] | None = None

    def _gold_rows(self, gold_docs: set[str]) -> list[int]:
        """Rows of the view that are chunks of a gold document, in document order."""
        if self._doc_rows is None:
            self._doc_rows = {}
            for row, doc in enumerate(self.tools.column("doc_id")):
                self._doc_rows.setdefault(str(doc), []).append(row)
        return [row for doc in sorted(gold_docs) for row in self._doc_rows.get(doc, [])]

    def _inputs(self, decision: Any, *args: Any) -> list[str]:
        """The rendered prompts of one controller decision (dry: nothing runs)."""
        self.capture.take()
        decision(*args)
        return [p for call in self.capture.take() for p in call.prompts]

    def _rows(
        self, decision: str, question_id: str, prompts: list[str], targets: list[tuple[str, float]]
    ) -> list[TraceRow]:
        if len(prompts) != len(targets):  # the controller rendered a different number of prompts: label nothing
            self.stats[f"{decision}_misaligned"] += 1
            return []
        single = decision in ("channel_weights", "refine", "completeness", "coverage")
        self.stats[f"{decision}_rows"] += len(prompts)
        return [
            TraceRow(decision, "gold", question_id, prompt, target, single, score)
            for prompt, (target, score) in zip(prompts, targets, strict=True)
        ]

    def label(self, example: Mapping[str, Any], question_id: str, extra_elements: Sequence[str] = ()) -> list[TraceRow]:
        """The gold rows of one QA row (``question``, ``answers``, ``gold_passages``); ``extra_elements``: key
        elements to audit besides the question (the teacher's)."""
        question = " ".join(str(example["question"]).split())
        answers = [str(a) for a in example.get("answers") or []]
        gold_passages = list(example.get("gold_passages") or [])
        gold_docs = {str(p["doc_id"]) for p in gold_passages}
        rng = random.Random(f"{self.seed}:{question_id}")
        settings = self.method.settings
        self.stats["questions"] += 1

        fallback = Enrichment(dense=question, keywords=content_words(question))
        composite = json.dumps(self.method.query_views(question, fallback), sort_keys=True)
        rows_of_weights = [uniform_weights(self.channels), *(self.weights[i] for i in INTENTS)]
        results = self.method.retriever.search(
            [composite] * len(rows_of_weights), k=settings.k1, weights=rows_of_weights
        )
        pool = [
            self.tools.passage(int(i), float(s)) for i, s in zip(results[0].indices, results[0].scores, strict=True)
        ]
        gold_rows = self._gold_rows(gold_docs)
        self.stats["gold_in_view"] += bool(gold_rows)
        self.stats["gold_in_pool"] += any(p.doc_id in gold_docs for p in pool)
        rows: list[TraceRow] = []

        if gold_rows:  # S2: which template's fusion ranks a gold chunk best
            docs = self.tools.column("doc_id")
            quality = {
                intent: gold_rank([docs[int(i)] for i in result.indices], gold_docs, len(gold_rows))
                for intent, result in zip(INTENTS, results[1:], strict=True)
            }
            best = best_intent(quality, self.weights)
            if best is not None:
                prompts = self._inputs(self.controller.channel_weights, question, self.channels)
                rows += self._rows("channel_weights", question_id, prompts, [(intent_letter(best), math.nan)])

        extra = [self.tools.passage(row) for row in gold_rows]  # S3: gold-article chunks vs hard negatives
        pairs = relevance_examples(
            pool,
            gold_docs,
            extra,
            negatives_per_positive=self.negatives_per_positive,
            max_positives=self.max_positives,
        )
        texts = [p.prompt_text(self.tools.passage_chars) for p, _ in pairs]
        prompts = self._inputs(self.controller.refine, question, texts) if texts else []
        rows += self._rows("refine", question_id, prompts, [_yes_no(label) for _, label in pairs])

        max_words = max(2 * MIN_WORDS, int(settings.chunk_tokens * 0.75))  # S4: a chunk of about L tokens
        examples = completeness_examples([(str(p["title"]), str(p["text"])) for p in gold_passages], rng, max_words)
        prompts = self._inputs(self.controller.completeness, question, [c for c, _, _ in examples]) if examples else []
        rows += self._rows("completeness", question_id, prompts, [_yes_no(label) for _, label, _ in examples])
        for _, _, kind in examples:
            self.stats[f"completeness_{kind}"] += 1

        elements = list(dict.fromkeys([question, *(" ".join(e.split()) for e in extra_elements if e.strip())]))
        texts = [p.prompt_text(self.tools.passage_chars) for p in pool]  # S7: as InSemRAG's audit sees them
        for element, passage, label in coverage_examples(elements, texts, answers, max_positives=self.max_positives):
            prompts = self._inputs(self.controller.coverage, question, [element], [passage])
            rows += self._rows("coverage", question_id, prompts, [_yes_no(label)])
        return rows


def _yes_no(label: bool) -> tuple[str, float]:
    return ("Yes", 1.0) if label else ("No", 0.0)
