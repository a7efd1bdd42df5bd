"""InSemRAG's controller: every intermediate decision of the method (spec ``seed-004-insemrag.md`` §9.1, S1–S8).

The paper runs a prompted small LM (Llama-3.2-1B-Instruct) as a "semantic controller"; a later stage distils one
into a small student. Both plug in here, behind :class:`Controller`, one method per decision:

=====  ======================  ====================================================================================
 spec  method                  returns
=====  ======================  ====================================================================================
 S1    :meth:`enrich`          :class:`Enrichment` — a dense paraphrase of the query and sparse keywords
 S2    :meth:`channel_weights` :class:`ChannelWeights` — a weight per retrieval channel, summing to 1
 S3    :meth:`refine`          one :class:`Relevance` per candidate — a relevance score and keep / drop
 S4    :meth:`completeness`    one :class:`Completeness` per chunk — semantic completeness in [0, 1] (damage if < τ)
 S5    :meth:`compress`        :class:`Compression` — a repaired chunk: previous + chunk + next, compressed
 S6    :meth:`elements`        :class:`Elements` — the key information elements of the question
 S7    :meth:`coverage`        :class:`Coverage` — per element, how well the evidence covers it (uncovered if < γ)
 S8    :meth:`follow_up`       :class:`FollowUp` — a new search query for one uncovered element
=====  ======================  ====================================================================================

Every returned dataclass is a :class:`Decision`: besides its values it carries ``raw`` (the controller's raw reply:
text, a list of texts, or next-token log-probs), ``fallback`` (True when the reply could not be used and the
documented fallback value was returned instead), ``note`` (why) and ``detail`` (anything else worth logging). The
method writes ``to_dict()`` of every decision into its trace and counts each fallback.

Two implementations:

* :class:`PromptedLMController` — the paper's controller: a generator (any object with ``render_chat`` and
  ``generate``; ``next_token_logprobs`` for the log-prob scoring mode) prompted with this module's own prompts.
  Scores (S3, S4, S7) are p(Yes) / (p(Yes) + p(No)) of the next token (``score_mode="logprobs"``, the spec's
  recommendation for a 1B model) or parsed from a short generated verdict (``"generate"``: yes / no or a number in
  [0, 1]). Channel weights follow the spec's Option B: an intent distribution over entity / explanatory / multi-hop
  mixes per-intent weight templates.
* :class:`HeuristicController` — a deterministic, model-free substitute (not in the paper): keywords by stop-word
  filtering, weights from query length and specificity, completeness from sentence boundaries and balanced
  brackets, relevance and coverage from token overlap, extractive compression. Useful for tests, as a baseline and
  as a floor a distilled controller must beat.

The distilled controller is no third class: it is :class:`PromptedLMController` (``name="distilled"``, log-prob
scoring) over the distilled student, so the student is read exactly as its teacher was prompted. The controller's
model may differ from the answering model (InSemRAG's ``controller_model`` option).

Fallbacks (spec §9.1): S1 → dense = the query, keywords = its content words; S2 → uniform weights; S3 → keep with
score 0.5 (the method breaks ties by the fused retrieval rank; when a filter drops every candidate, the method
keeps the top k2 by score); S4 → intact (score 1); S5 → the extractive stitch
of previous + chunk + next cut to the budget; S6 → the question itself as the only element; S7 → covered (score 1,
which stops the loop); S8 → the element text as the query.
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CHANNELS",
    "INTENTS",
    "INTENT_TEMPLATES",
    "STOP_WORDS",
    "ChannelWeights",
    "Completeness",
    "Compression",
    "Controller",
    "Coverage",
    "Decision",
    "Elements",
    "Enrichment",
    "FollowUp",
    "HeuristicController",
    "PromptedLMController",
    "Relevance",
    "content_words",
    "extractive_stitch",
    "parse_verdict",
    "uniform_weights",
]

CHANNELS: tuple[str, ...] = ("dense", "sparse", "extended")
"""Retrieval channels a controller can weight: dense (paraphrase), sparse (keywords), extended (query + both)."""

INTENTS: tuple[str, ...] = ("entity", "explanatory", "multihop")
"""The three query intents of the paper's appendix A.3 (used by the prompted controller's weighting)."""

INTENT_TEMPLATES: dict[str, dict[str, float]] = {
    "entity": {"dense": 0.25, "sparse": 0.50, "extended": 0.25},
    "explanatory": {"dense": 0.50, "sparse": 0.15, "extended": 0.35},
    "multihop": {"dense": 0.34, "sparse": 0.33, "extended": 0.33},
}
"""Per-intent channel weights (spec §6.2 Option B starting templates; tune on a dev split)."""

STOP_WORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where
    which while who whom whose why will with would you your yours yourself yourselves also did does many much
    tell give name list describe explain please known called""".split()  # noqa: SIM905
)
"""English stop words (and question words) dropped when extracting keywords."""

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’\-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DANGLING_STARTS = frozenset(
    """he she it they them this that these those his her its their such however therefore thus hence moreover
    furthermore also then besides meanwhile consequently additionally otherwise nevertheless instead but and or
    so because which who whom whose where""".split()  # noqa: SIM905
)
_DANGLING_PHRASES = ("as a result", "in addition", "on the other hand", "for this reason", "in turn", "after that")
_CLOSERS = "\"'”’)]}»"


# ------------------------------------------------------------------------------------------------------ decisions
@dataclass(kw_only=True)
class Decision:
    """What every controller decision carries besides its values.

    ``raw``: the controller's raw reply (generated text, a list of texts, next-token log-probs; None for the
    heuristic controller); ``fallback``: the reply was unusable and the documented fallback value was returned;
    ``note``: why; ``detail``: anything else worth logging (checks, intent probabilities, prompts' sizes).
    """

    raw: Any = None
    fallback: bool = False
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the values and the bookkeeping fields."""
        return _jsonable(asdict(self))


@dataclass(kw_only=True)
class Enrichment(Decision):
    """S1: ``dense`` — a paraphrase that states the query's full intent; ``keywords`` — entities and rare terms."""

    dense: str
    keywords: list[str]


@dataclass(kw_only=True)
class ChannelWeights(Decision):
    """S2: one non-negative weight per channel, summing to 1; ``intents``: the intent distribution, when used."""

    weights: dict[str, float]
    intents: dict[str, float] | None = None


@dataclass(kw_only=True)
class Relevance(Decision):
    """S3: ``score`` in [0, 1] — how useful the candidate is for the query; ``keep`` — keep (True) or drop it."""

    score: float
    keep: bool


@dataclass(kw_only=True)
class Completeness(Decision):
    """S4: semantic completeness ``score`` in [0, 1]; the method calls the chunk damaged when it is below τ."""

    score: float


@dataclass(kw_only=True)
class Compression(Decision):
    """S5: the repaired chunk's ``text`` (previous + chunk + next, compressed to the length budget)."""

    text: str


@dataclass(kw_only=True)
class Elements(Decision):
    """S6: the key information ``elements`` the evidence must cover (1 to ``max_elements`` short statements)."""

    elements: list[str]


@dataclass(kw_only=True)
class Coverage(Decision):
    """S7: per element of ``elements``, the coverage score in [0, 1] by the evidence (``scores``) and the passage
    that covers it best (``best``, an index into the passages; None without passages). ``score`` is the lowest
    element score (1 for no elements): the evidence covers the question iff ``score >= γ``."""

    elements: list[str]
    scores: list[float]
    best: list[int | None] = field(default_factory=list)
    score: float = field(init=False)

    def __post_init__(self) -> None:
        self.score = float(min(self.scores)) if self.scores else 1.0

    def uncovered(self, gamma: float) -> list[str]:
        """The elements whose score is below ``gamma``."""
        return [e for e, s in zip(self.elements, self.scores, strict=True) if s < gamma]


@dataclass(kw_only=True)
class FollowUp(Decision):
    """S8: a standalone search ``query`` for one uncovered element."""

    query: str


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


# ------------------------------------------------------------------------------------------------------ interface
class Controller(ABC):
    """The decisions InSemRAG delegates to its controller (spec §9.1). Implementations must be deterministic for
    a given input and never raise on a bad model reply: they return the documented fallback with ``fallback=True``.

    Passages are plain strings: ``refine``, ``coverage`` and ``follow_up`` get ``"title: text"``; ``completeness``
    and ``compress`` get the chunk text alone (its boundaries matter).
    """

    name: str = "controller"

    @abstractmethod
    def enrich(self, query: str) -> Enrichment:
        """S1: a dense paraphrase and sparse keywords for ``query``."""

    @abstractmethod
    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        """S2: a weight per name in ``channels`` (a subset of :data:`CHANNELS`), non-negative, summing to 1."""

    @abstractmethod
    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        """S3: for each candidate passage, a relevance score for ``query`` and whether to keep it."""

    @abstractmethod
    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        """S4: for each chunk, its semantic completeness (can it be understood and used on its own?)."""

    @abstractmethod
    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        """S5: rewrite ``center``, stitched with its neighbours in the source document, into a self-contained
        passage of at most ``max_tokens`` tokens (no neighbour is None at a document boundary)."""

    @abstractmethod
    def elements(self, question: str) -> Elements:
        """S6: the key information elements needed to answer ``question``."""

    @abstractmethod
    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        """S7: how well ``passages`` (the evidence so far) cover each of ``elements``."""

    @abstractmethod
    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        """S8: a standalone search query for the uncovered ``element`` of ``question``."""


# ------------------------------------------------------------------------------------------------------ helpers
def words(text: str) -> list[str]:
    """Word tokens of ``text`` (letters, digits, inner apostrophes and hyphens)."""
    return _WORD.findall(text)


def _norm(word: str) -> str:
    word = word.lower().replace("’", "'")
    return word[:-2] if word.endswith("'s") else word


def content_words(text: str) -> list[str]:
    """The words of ``text`` that are not stop words, in order, without repeats (case of first occurrence kept)."""
    seen: set[str] = set()
    out = []
    for word in words(text):
        key = _norm(word)
        if key in STOP_WORDS or (len(key) < 2 and not key.isdigit()) or key in seen:
            continue
        seen.add(key)
        out.append(word)
    return out


def _token_set(text: str) -> set[str]:
    return {_norm(w) for w in words(text)}


def uniform_weights(channels: Sequence[str]) -> dict[str, float]:
    """Equal weights over ``channels``."""
    return {c: 1.0 / len(channels) for c in channels} if channels else {}


def _normalise(raw: Mapping[str, float], channels: Sequence[str]) -> dict[str, float]:
    row = {c: max(float(raw.get(c, 0.0)), 0.0) for c in channels}
    total = sum(row.values())
    return {c: v / total for c, v in row.items()} if total > 0 else uniform_weights(channels)


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def _cut_words(text: str, max_words: int) -> str:
    parts = text.split()
    return text.strip() if len(parts) <= max_words else " ".join(parts[:max_words])


def extractive_stitch(previous: str | None, center: str, following: str | None, max_tokens: int) -> str:
    """``previous + center + following`` cut to ``max_tokens`` whitespace tokens, keeping the center whole.

    The center comes first (cut only if alone it is over budget); the remaining budget goes to the neighbours'
    sentences nearest to the center, alternating previous (from its end) and next (from its start). Everything
    fits → the plain concatenation.
    """
    center = center.strip()
    if len(center.split()) >= max_tokens:
        return _cut_words(center, max_tokens)
    budget = max_tokens - len(center.split())
    before = _sentences(previous or "")
    after = _sentences(following or "")
    head: list[str] = []
    tail: list[str] = []
    take_before = True
    while before or after:
        source = before if (take_before and before) or not after else after
        sentence = source[-1] if source is before else source[0]
        size = len(sentence.split())
        if size > budget:
            if source is before:
                before = []
            else:
                after = []
            continue
        budget -= size
        if source is before:
            head.insert(0, before.pop())
        else:
            tail.append(after.pop(0))
        take_before = not take_before
    return " ".join([*head, center, *tail])


def completeness_checks(text: str, min_words: int = 0) -> dict[str, bool]:
    """The heuristic completeness checks of a chunk.

    ``starts_clean``: the first word starts with a capital, a digit or a quote and is not a dangling pronoun or
    connective ("He", "This", "As a result"); ``ends_clean``: terminal punctuation (``.``, ``?``, ``!``) after
    stripping closing quotes and brackets; ``balanced``: (), [], {} balanced and an even number of straight double
    quotes; ``long_enough``: at least ``min_words`` words.
    """
    stripped = text.strip()
    first = words(stripped)[:1]
    lowered = stripped.lower()
    starts = bool(stripped) and (stripped[0].isupper() or stripped[0].isdigit() or stripped[0] in "\"'“‘(")
    dangling = (bool(first) and _norm(first[0]) in _DANGLING_STARTS) or lowered.startswith(_DANGLING_PHRASES)
    end = stripped.rstrip(_CLOSERS + " ")
    balanced = stripped.count('"') % 2 == 0 and stripped.count("“") == stripped.count("”")
    depth = {"(": 0, "[": 0, "{": 0}
    closing = {")": "(", "]": "[", "}": "{"}
    for char in stripped:
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            balanced = balanced and depth[closing[char]] >= 0
    balanced = balanced and not any(depth.values())
    return {
        "starts_clean": starts and not dangling,
        "ends_clean": end.endswith((".", "?", "!")),
        "balanced": balanced,
        "long_enough": len(stripped.split()) >= min_words,
    }


_CHECK_PENALTY = {"starts_clean": 0.6, "ends_clean": 0.6, "balanced": 0.3, "long_enough": 0.3}


# ------------------------------------------------------------------------------------------------------ heuristic
class HeuristicController(Controller):
    """A deterministic, model-free controller (a documented substitute, not the paper's; see the module doc).

    * S1 — dense view = the query unchanged; keywords = its content words (stop words dropped).
    * S2 — specificity σ = share of keywords that are capitalised or hold a digit; length λ = min(1, words / 20);
      explanatory cue ε = 1 for why / how / explain / describe / cause; multi-entity cue μ = 1 for two or more
      capitalised keywords. Raw weights dense = 1 + λ + ε, sparse = 1 + 2σ, extended = 1 + 0.5μ, normalised over
      the requested channels: entity lookups lean sparse, explanations lean dense (the paper's A.3 pattern).
    * S3 — score = share of the query's keywords found in the passage; keep iff ≥ ``min_overlap``.
    * S4 — 1 minus penalties for a broken start (0.6), a broken end (0.6), unbalanced brackets (0.3) and fewer
      than ``min_words`` words (0.3), clipped to [0, 1] (so a broken boundary is below τ = 0.5).
      ``min_words=50`` reproduces the paper's third heuristic rule; the default 0 turns that rule off.
    * S5 — :func:`extractive_stitch` (center whole, nearest neighbour sentences within the budget).
    * S6 — the question itself, as one element.
    * S7 — per element, the share of its keywords found anywhere in the evidence (set-level token overlap).
    * S8 — the element's keywords missing from the evidence (the element itself if none are missing).
    """

    name = "heuristic"

    def __init__(self, *, min_overlap: float = 1e-9, min_words: int = 0) -> None:
        self.min_overlap = min_overlap
        self.min_words = min_words

    def enrich(self, query: str) -> Enrichment:
        return Enrichment(dense=query.strip(), keywords=content_words(query))

    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        keywords = content_words(query)
        capitalised = [k for k in keywords if k[0].isupper() or any(ch.isdigit() for ch in k)]
        sigma = len(capitalised) / max(len(keywords), 1)
        lam = min(1.0, len(words(query)) / 20.0)
        lowered = query.lower()
        eps = float(bool(re.search(r"\b(why|how|explain|describe|cause[sd]?|reason)\b", lowered)))
        mu = float(len(capitalised) >= 2)
        raw = {"dense": 1.0 + lam + eps, "sparse": 1.0 + 2.0 * sigma, "extended": 1.0 + 0.5 * mu}
        detail = {"specificity": sigma, "length": lam, "explanatory": eps, "multi_entity": mu}
        return ChannelWeights(weights=_normalise(raw, channels), detail=detail)

    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        wanted = {_norm(k) for k in content_words(query)}
        out = []
        for passage in passages:
            score = len(wanted & _token_set(passage)) / len(wanted) if wanted else 0.0
            out.append(Relevance(score=score, keep=score >= self.min_overlap))
        return out

    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        out = []
        for passage in passages:
            checks = completeness_checks(passage, self.min_words)
            score = 1.0 - sum(_CHECK_PENALTY[name] for name, ok in checks.items() if not ok)
            out.append(Completeness(score=min(max(score, 0.0), 1.0), detail={"checks": checks}))
        return out

    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        return Compression(text=extractive_stitch(previous, center, following, max_tokens))

    def elements(self, question: str) -> Elements:
        return Elements(elements=[question.strip()])

    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        pooled = _token_set(" ".join(passages))
        per_passage = [_token_set(p) for p in passages]
        scores, best = [], []
        for element in elements:
            wanted = {_norm(k) for k in content_words(element)}
            if not wanted:
                scores.append(1.0 if passages else 0.0)
                best.append(0 if passages else None)
                continue
            scores.append(len(wanted & pooled) / len(wanted))
            hits = [len(wanted & tokens) for tokens in per_passage]
            best.append(int(np.argmax(hits)) if hits else None)
        return Coverage(elements=list(elements), scores=scores, best=best)

    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        pooled = _token_set(" ".join(passages))
        missing = [k for k in content_words(element) if _norm(k) not in pooled]
        return FollowUp(query=" ".join(missing) if missing else element.strip(), detail={"missing": missing})


# ------------------------------------------------------------------------------------------------------ prompts
CONTROLLER_SYSTEM = "You are a careful assistant inside a search engine. Follow the output format exactly."

ENRICH_PROMPT = (
    "Search request: {query}\n\n"
    "Prepare this request for two search engines.\n"
    '1. "dense": restate the request as one complete, explicit sentence. Keep every name, date and number; '
    "add no facts of your own.\n"
    '2. "keywords": the terms an index should match: names of people, places and things, key nouns and verbs, '
    "rare or technical words, numbers and dates.\n"
    'Reply with a JSON object only, for example {{"dense": "...", "keywords": ["...", "..."]}}.'
)
WEIGHTS_PROMPT = (
    "Search request: {query}\n\n"
    "What kind of request is this?\n"
    "A) a lookup about a specific, named person, place, organisation, work or event\n"
    "B) a request for an explanation, a cause or a general description of a concept\n"
    "C) a question that needs several facts, possibly from different sources, to be combined\n"
    "Reply with the letter only."
)
RELEVANCE_PROMPT = (
    "Question: {query}\n\nPassage: {passage}\n\n"
    "Does this passage contain information that helps answer the question? Reply Yes or No."
)
COMPLETENESS_PROMPT = (
    "Question: {query}\n\nPassage: {passage}\n\n"
    "Can this passage be read and used on its own to support an answer? Reply No if it begins or ends in the "
    "middle of a sentence, uses a pronoun or a reference such as 'this' or 'the former' whose meaning is not in "
    "the passage, opens with a connective such as 'As a result' or 'Therefore' whose premise is missing, or "
    "announces a list it does not finish. Otherwise reply Yes."
)
COMPRESS_PROMPT = (
    "Three consecutive pieces of one document:\n"
    "BEFORE: {previous}\n"
    "MIDDLE: {center}\n"
    "AFTER: {following}\n\n"
    "Rewrite MIDDLE as one self-contained passage of at most {max_words} words. Replace its pronouns and vague "
    "references with the names they stand for and restore any premise or cause it depends on, taking them only "
    "from BEFORE and AFTER. Keep every fact of MIDDLE; add facts from BEFORE and AFTER only where they are needed "
    "to understand it, preferring those that bear on: {query}\n"
    "Use no outside knowledge. Reply with the passage only."
)
ELEMENTS_PROMPT = (
    "Question: {question}\n\n"
    "List the separate pieces of information someone must find to answer or verify this question: between 1 "
    "and {max_elements} short statements, one fact each. Reply with a JSON list of strings only."
)
ENTAIL_PROMPT = (
    "Information needed: {element}\n\nPassage: {passage}\n\nDoes the passage state this information? Reply Yes or No."
)
FOLLOW_UP_PROMPT = (
    "Original question: {question}\n"
    "Still missing: {element}\n"
    "Found so far:\n{found}\n\n"
    "Write one standalone search query that would find the missing information. Use the names found so far "
    "instead of pronouns. Reply with the query only."
)

_YES = ("Yes", "yes")
_NO = ("No", "no")
_LETTERS = ("A", "B", "C")
_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|okay|ok)[,!.]?\s*)?(?:here(?:'s| is)[^:\n]*:|(?:rewritten |repaired )?passage\s*:|"
    r"(?:search )?query\s*:)\s*",
    re.IGNORECASE,
)


def _clean_reply(text: str) -> str:
    text = _PREAMBLE.sub("", text.strip()).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def _json_value(text: str, opener: str) -> Any:
    """The first JSON value starting with ``opener`` (``{`` or ``[``) found in ``text``; None if there is none."""
    decoder = json.JSONDecoder()
    for match in re.finditer(re.escape(opener), text):
        try:
            value, _ = decoder.raw_decode(text[match.start() :])
        except ValueError:
            continue
        return value
    return None


def parse_verdict(text: str) -> float | None:
    """A generated yes / no verdict as the prompted controller reads it, as a score in [0, 1].

    A reply whose first word (after leading punctuation, any case) is yes / true gives 1.0, no / false 0.0;
    otherwise its first number (``0.7``, or a percentage: ``70%`` → 0.7) when that lies in [0, 1]. None otherwise
    (no verdict word, no number, or a first number outside [0, 1]): the caller falls back. Never raises.
    """
    lowered = text.strip().lower()
    match = re.match(r"^\W*(yes|no|true|false)\b", lowered)
    if match:
        return 1.0 if match.group(1) in ("yes", "true") else 0.0
    number = re.search(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*(%?)", lowered)
    if number:
        value = float(number.group(1)) / (100.0 if number.group(2) else 1.0)
        if 0.0 <= value <= 1.0:
            return value
    return None


def _parse_intent(text: str) -> str | None:
    """The intent named by a reply: a bare letter A / B / C, or an intent word; None otherwise."""
    stripped = text.strip()
    match = re.match(r"^\W*([ABCabc])(?:\W|$)", stripped)
    if match:
        return INTENTS[_LETTERS.index(match.group(1).upper())]
    lowered = stripped.lower()
    for intent, pattern in (("entity", r"entity|lookup|named"), ("explanatory", r"explan"), ("multihop", r"several")):
        if re.search(pattern, lowered):
            return intent
    return None


def _keyword_list(value: Any) -> list[str] | None:
    if isinstance(value, str):
        value = re.split(r"[,;\n]", value)
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        return None
    out = [str(v).strip().strip("\"'") for v in value]
    return list(dict.fromkeys(v for v in out if v)) or None


class PromptedLMController(Controller):
    """The paper's controller: a small instruction LM prompted for every decision (module doc; own prompts).

    ``generator``: anything with ``render_chat(message, system=...)`` and ``generate(prompts, max_new_tokens=...,
    temperature=..., stop=...)`` returning objects with ``.text``; for ``score_mode="logprobs"`` also
    ``next_token_logprobs(prompts, options)``. ``score_mode``: ``"auto"`` (log-probs when the generator offers
    them), ``"logprobs"`` or ``"generate"``. ``keep_threshold`` in [0, 1]: keep a candidate iff its relevance ≥
    it (0.5 = the model prefers Yes; not in the paper, which re-ranks and keeps the top k2 — InSemRAG's
    ``keep_threshold`` setting). ``templates``: per-intent channel weights (:data:`INTENT_TEMPLATES`).
    ``max_elements``: cap on S6. ``passage_chars``: passages are cut to this many characters in prompts. Generative
    decisions decode greedily. ``name``: how the trace names the controller (``"distilled"`` for the same code over a
    distilled student: the student is read exactly like the prompted model).
    """

    name = "prompted"

    def __init__(
        self,
        generator: Any,
        *,
        score_mode: str = "auto",
        keep_threshold: float = 0.5,
        templates: Mapping[str, Mapping[str, float]] | None = None,
        max_elements: int = 4,
        passage_chars: int = 2000,
        enrich_tokens: int = 128,
        elements_tokens: int = 128,
        follow_up_tokens: int = 48,
        name: str = "prompted",
    ) -> None:
        if score_mode not in ("auto", "logprobs", "generate"):
            raise ValueError(f"score_mode must be auto, logprobs or generate, got {score_mode!r}")
        threshold_ok = isinstance(keep_threshold, int | float) and not isinstance(keep_threshold, bool)
        if not threshold_ok or not 0.0 <= float(keep_threshold) <= 1.0:
            raise ValueError(f"keep_threshold must be a number in [0, 1], got {keep_threshold!r}")
        self.name = name
        if score_mode == "auto":
            score_mode = "logprobs" if hasattr(generator, "next_token_logprobs") else "generate"
        self.generator = generator
        self.score_mode = score_mode
        self.keep_threshold = float(keep_threshold)
        self.templates = {k: dict(v) for k, v in (templates or INTENT_TEMPLATES).items()}
        missing = set(INTENTS) - set(self.templates)
        if missing:
            raise ValueError(f"templates miss intent(s) {sorted(missing)}")
        self.max_elements = max_elements
        self.passage_chars = passage_chars
        self.enrich_tokens = enrich_tokens
        self.elements_tokens = elements_tokens
        self.follow_up_tokens = follow_up_tokens

    # ------------------------------------------------------------------ plumbing
    def _chat(self, message: str) -> str:
        return self.generator.render_chat(message, system=CONTROLLER_SYSTEM)

    def _generate(self, messages: Sequence[str], max_new_tokens: int, stop: tuple[str, ...] = ()) -> list[Any]:
        prompts = [self._chat(m) for m in messages]
        if not prompts:
            return []
        return list(self.generator.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0, stop=stop))

    def _passage(self, text: str) -> str:
        from workbench.backends.prompts import cut_text

        return cut_text(" ".join(text.split()), self.passage_chars)

    def _scores(self, messages: Sequence[str]) -> list[tuple[float | None, Any]]:
        """p(Yes) / (p(Yes) + p(No)) per message, with the raw reply; None where the reply is unusable."""
        if not messages:
            return []
        if self.score_mode == "logprobs":
            prompts = [self._chat(m) for m in messages]
            logprobs = np.asarray(self.generator.next_token_logprobs(prompts, [*_YES, *_NO]), dtype=np.float64)
            out = []
            for row in logprobs:
                yes, no = np.logaddexp.reduce(row[: len(_YES)]), np.logaddexp.reduce(row[len(_YES) :])
                raw = {"yes": float(yes), "no": float(no)}
                if not (np.isfinite(yes) or np.isfinite(no)) or np.isnan(yes) or np.isnan(no):
                    out.append((None, raw))
                    continue
                out.append((float(np.exp(yes - np.logaddexp(yes, no))), raw))
            return out
        replies = self._generate(messages, max_new_tokens=6, stop=("\n",))
        return [(parse_verdict(r.text), r.text) for r in replies]

    # ------------------------------------------------------------------ S1
    def enrich(self, query: str) -> Enrichment:
        reply = self._generate([ENRICH_PROMPT.format(query=query)], self.enrich_tokens)[0].text
        parsed = _json_value(reply, "{")
        dense = keywords = None
        if isinstance(parsed, dict):
            value = parsed.get("dense")
            dense = value.strip() if isinstance(value, str) and value.strip() else None
            keywords = _keyword_list(parsed.get("keywords"))
        else:  # tolerate "dense: ..." / "keywords: ..." lines
            match = re.search(r"dense\W*[:=]\s*(.+)", reply, re.IGNORECASE)
            dense = _clean_reply(match.group(1)) if match else None
            match = re.search(r"keywords\W*[:=]\s*(.+)", reply, re.IGNORECASE)
            keywords = _keyword_list(match.group(1).strip("[] ")) if match else None
        missing = [name for name, value in (("dense", dense), ("keywords", keywords)) if not value]
        note = f"unusable {' and '.join(missing)} in the reply: used the fallback" if missing else ""
        return Enrichment(
            dense=dense or query.strip(),
            keywords=keywords or content_words(query),
            raw=reply,
            fallback=bool(missing),
            note=note,
        )

    # ------------------------------------------------------------------ S2
    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        message = WEIGHTS_PROMPT.format(query=query)
        probs: dict[str, float] | None = None
        if self.score_mode == "logprobs":
            row = np.asarray(self.generator.next_token_logprobs([self._chat(message)], list(_LETTERS))[0], np.float64)
            raw: Any = {letter: float(v) for letter, v in zip(_LETTERS, row, strict=True)}
            if np.isfinite(row).any() and not np.isnan(row).any():
                exp = np.exp(row - row.max())
                probs = {intent: float(p) for intent, p in zip(INTENTS, exp / exp.sum(), strict=True)}
        else:
            raw = self._generate([message], max_new_tokens=8, stop=("\n",))[0].text
            intent = _parse_intent(raw)
            if intent is not None:
                probs = {name: float(name == intent) for name in INTENTS}
        if probs is None:
            return ChannelWeights(
                weights=uniform_weights(channels),
                raw=raw,
                fallback=True,
                note="no intent could be read from the reply: uniform weights",
            )
        mixed = {c: sum(probs[i] * self.templates[i].get(c, 0.0) for i in INTENTS) for c in channels}
        return ChannelWeights(weights=_normalise(mixed, channels), intents=probs, raw=raw)

    # ------------------------------------------------------------------ S3
    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        messages = [RELEVANCE_PROMPT.format(query=query, passage=self._passage(p)) for p in passages]
        out = []
        for score, raw in self._scores(messages):
            if score is None:
                out.append(Relevance(score=0.5, keep=True, raw=raw, fallback=True, note="unreadable verdict: kept"))
            else:
                out.append(Relevance(score=score, keep=score >= self.keep_threshold, raw=raw))
        return out

    # ------------------------------------------------------------------ S4
    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        messages = [COMPLETENESS_PROMPT.format(query=query, passage=self._passage(p)) for p in passages]
        out = []
        for score, raw in self._scores(messages):
            if score is None:
                out.append(Completeness(score=1.0, raw=raw, fallback=True, note="unreadable verdict: intact"))
            else:
                out.append(Completeness(score=score, raw=raw))
        return out

    # ------------------------------------------------------------------ S5
    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        message = COMPRESS_PROMPT.format(
            previous=self._passage(previous) if previous else "(start of the document)",
            center=self._passage(center),
            following=self._passage(following) if following else "(end of the document)",
            max_words=max(1, int(max_tokens * 0.75)),
            query=query,
        )
        reply = self._generate([message], max_new_tokens=max_tokens)[0]
        text = _clean_reply(reply.text)
        if getattr(reply, "finish_reason", "") == "length":  # cut mid-sentence: end at the last full sentence
            ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
            text = text[: ends[-1]] if ends else text
        if len(words(text)) < 3:
            return Compression(
                text=extractive_stitch(previous, center, following, max_tokens),
                raw=reply.text,
                fallback=True,
                note="empty or too short compression: extractive stitch used",
            )
        return Compression(text=_cut_words(text, max_tokens), raw=reply.text)

    # ------------------------------------------------------------------ S6
    def elements(self, question: str) -> Elements:
        message = ELEMENTS_PROMPT.format(question=question, max_elements=self.max_elements)
        reply = self._generate([message], self.elements_tokens)[0].text
        parsed = _json_value(reply, "[")
        items: list[str] = []
        if isinstance(parsed, list):
            items = [str(v).strip() for v in parsed if isinstance(v, str | int | float) and str(v).strip()]
        else:  # tolerate a bulleted or numbered list
            items = [m.strip() for m in re.findall(r"^\s*(?:[-*•]|\d+[.)])\s+(.+)$", reply, re.MULTILINE)]
        items = list(dict.fromkeys(items))[: self.max_elements]
        if not items:
            return Elements(elements=[question.strip()], raw=reply, fallback=True, note="no element list in the reply")
        return Elements(elements=items, raw=reply)

    # ------------------------------------------------------------------ S7
    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        elements = list(elements)
        if not passages:
            return Coverage(elements=elements, scores=[0.0] * len(elements), best=[None] * len(elements), raw=[])
        pairs = [(e, p) for e in elements for p in passages]
        messages = [ENTAIL_PROMPT.format(element=e, passage=self._passage(p)) for e, p in pairs]
        results = self._scores(messages)
        scores, best, raws, unreadable = [], [], [], 0
        for i, _ in enumerate(elements):
            row = results[i * len(passages) : (i + 1) * len(passages)]
            raws.append([raw for _, raw in row])
            values = [1.0 if s is None else s for s, _ in row]  # unreadable → covered (spec fallback e = 1)
            unreadable += sum(s is None for s, _ in row)
            scores.append(float(max(values)))
            best.append(int(np.argmax(values)))
        note = f"{unreadable} of {len(pairs)} verdicts unreadable: counted as covered" if unreadable else ""
        return Coverage(elements=elements, scores=scores, best=best, raw=raws, fallback=bool(unreadable), note=note)

    # ------------------------------------------------------------------ S8
    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        found = "\n".join(f"- {self._passage(p)[:160]}" for p in passages[:10]) or "- nothing yet"
        message = FOLLOW_UP_PROMPT.format(question=question, element=element, found=found)
        reply = self._generate([message], self.follow_up_tokens, stop=("\n",))[0].text
        query = _clean_reply(reply)
        if len(words(query)) < 2:
            return FollowUp(query=element.strip(), raw=reply, fallback=True, note="no query in the reply: element used")
        return FollowUp(query=query, raw=reply)
