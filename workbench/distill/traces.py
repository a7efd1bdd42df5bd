"""The teacher-trace dataset a distilled InSemRAG controller learns from, and the controller that records it.

**Format** (read by the ``distill`` stage; one row per controller decision, :data:`TRACE_COLUMNS`):

=================  ======  ===================================================================================
column             type    meaning
=================  ======  ===================================================================================
``decision``       string  one of :data:`DECISIONS` (spec §9.1 S1–S8)
``source``         string  ``teacher`` (a prompted model's reply) or ``gold`` (a label built from the gold data)
``question_id``    string  the QA row's ``id``
``input``          string  the exact rendered chat prompt the controller model saw:
                           ``generator.render_chat(message, system=CONTROLLER_SYSTEM)`` (chat template and the
                           assistant-turn opener included)
``target``         string  the reply to learn: ``Yes`` / ``No`` (refine, completeness, coverage), the intent
                           letter ``A`` / ``B`` / ``C`` (channel_weights), else the reply text as the controller
                           reads it (enrich: ``{"dense": ..., "keywords": [...]}``; elements: a JSON list; compress:
                           the repaired passage; follow_up: the query)
``single_token``   bool    True for the scoring decisions (:data:`SCORING_DECISIONS`): read with one next-token
                           forward, trained on the one answer token
``score``          float   yes / no decisions: the teacher's p(Yes) / (p(Yes) + p(No)), or the gold label 0 / 1;
                           NaN otherwise
=================  ======  ===================================================================================

Splits: ``train`` and ``heldout`` (:data:`TRACE_SPLITS`), saved with
:func:`workbench.data.dataset_store.save_dataset_dict` (a ``fingerprint.json`` next to what
``DatasetDict.save_to_disk`` writes, so ``datasets.load_from_disk`` reads it).

**Recording.** :class:`RecordingController` is :class:`~workbench.methods.controller.PromptedLMController` (the same
prompts, the same parsing, the same fallbacks) over the teacher generator wrapped in a :class:`PromptRecorder`,
which keeps every rendered prompt and raw reply. Each decision method calls the prompted controller's own and then
files one :class:`DecisionRecord` per model prompt it made: refine and completeness one per passage, coverage one per
(element, passage) pair, the others one each. A record is *usable* unless the controller fell back (its
``Decision.fallback``; for coverage, an unreadable verdict of that pair): unusable replies are kept in the records,
counted per decision, and never become rows.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.core.errors import DataError
from workbench.methods.controller import (
    INTENTS,
    ChannelWeights,
    Completeness,
    Compression,
    Coverage,
    Decision,
    Elements,
    Enrichment,
    FollowUp,
    PromptedLMController,
    Relevance,
    parse_verdict,
)

if TYPE_CHECKING:
    import datasets

__all__ = [
    "DECISIONS",
    "INTENT_LETTERS",
    "SCORING_DECISIONS",
    "SOURCES",
    "TRACE_COLUMNS",
    "TRACE_SPLITS",
    "YES_NO_DECISIONS",
    "DecisionRecord",
    "ModelCall",
    "PromptRecorder",
    "RecordingController",
    "TraceRow",
    "deduplicate",
    "intent_letter",
    "load_traces",
    "save_traces",
    "trace_features",
    "verdict_score",
    "yes_no",
]

DECISIONS: tuple[str, ...] = (
    "enrich",
    "channel_weights",
    "refine",
    "completeness",
    "compress",
    "elements",
    "coverage",
    "follow_up",
)
"""The controller decisions, in the order of spec §9.1 (S1 enrich … S8 follow_up; S2 = channel_weights)."""

YES_NO_DECISIONS = frozenset({"refine", "completeness", "coverage"})
"""Decisions read as p(Yes) of the next token (S3, S4, S7)."""

SCORING_DECISIONS = frozenset({"channel_weights", *YES_NO_DECISIONS})
"""Decisions trained and read as one answer token (channel_weights: the intent letter)."""

SOURCES: tuple[str, ...] = ("teacher", "gold")
"""Where a row's target comes from."""

TRACE_SPLITS: tuple[str, ...] = ("train", "heldout")
"""The dataset's splits."""

TRACE_COLUMNS: tuple[str, ...] = ("decision", "source", "question_id", "input", "target", "single_token", "score")
"""The dataset's columns, in order (module doc)."""

INTENT_LETTERS: tuple[str, ...] = ("A", "B", "C")
"""The letter of each intent of :data:`~workbench.methods.controller.INTENTS` in the weights prompt (A entity,
B explanatory, C multi-hop)."""


# ------------------------------------------------------------------------------------------------------ rows
def yes_no(score: float) -> str:
    """The single-token target of a yes / no score: ``Yes`` iff ``score >= 0.5`` (the model prefers Yes)."""
    return "Yes" if score >= 0.5 else "No"


def intent_letter(intent: str) -> str:
    """The weights prompt's letter of ``intent`` (one of :data:`~workbench.methods.controller.INTENTS`)."""
    return INTENT_LETTERS[INTENTS.index(intent)]


@dataclass(frozen=True)
class TraceRow:
    """One row of the dataset (module doc). Construction checks the row against the format: a bad decision,
    source or target for the decision is a ValueError (a programming error, never a user's)."""

    decision: str
    source: str
    question_id: str
    input: str
    target: str
    single_token: bool
    score: float = math.nan

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown decision {self.decision!r}")
        if self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r}")
        if self.single_token != (self.decision in SCORING_DECISIONS):
            raise ValueError(f"single_token must be {self.decision in SCORING_DECISIONS} for {self.decision}")
        if not self.input or not self.target.strip():
            raise ValueError(f"{self.decision}: empty input or target")
        if self.decision in YES_NO_DECISIONS:
            if self.target not in ("Yes", "No") or not 0.0 <= self.score <= 1.0:
                raise ValueError(f"{self.decision}: target must be Yes / No with a score in [0, 1]")
        elif not math.isnan(self.score):
            raise ValueError(f"{self.decision}: score must be NaN")
        if self.decision == "channel_weights" and self.target not in INTENT_LETTERS:
            raise ValueError(f"channel_weights: target must be one of {INTENT_LETTERS}, got {self.target!r}")

    def to_dict(self) -> dict[str, Any]:
        """The row as a dict of the dataset's columns."""
        return asdict(self)


def trace_features() -> datasets.Features:
    """The dataset's HF features (column types of the module doc)."""
    from datasets import Features, Value

    return Features(
        {
            "decision": Value("string"),
            "source": Value("string"),
            "question_id": Value("string"),
            "input": Value("string"),
            "target": Value("string"),
            "single_token": Value("bool"),
            "score": Value("float64"),
        }
    )


def deduplicate(rows: Sequence[TraceRow]) -> list[TraceRow]:
    """``rows`` without repeats of the same (decision, source, input), first kept (a candidate met again in a
    later round, the same element and passage twice)."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for row in rows:
        key = (row.decision, row.source, row.input)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def save_traces(splits: Mapping[str, Sequence[TraceRow]], path: str | Path) -> str:
    """Write the dataset (splits :data:`TRACE_SPLITS`) to ``path`` atomically; returns its content fingerprint.

    A split that is missing or has no rows is a :class:`DataError` (nothing is written): the student needs both."""
    import datasets

    from workbench.data.dataset_store import save_dataset_dict

    for split in TRACE_SPLITS:
        if not splits.get(split):
            raise DataError(f"no rows in the {split!r} split: nothing to learn from or score on", str(path))
    features = trace_features()
    dd = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list([r.to_dict() for r in splits[split]], features=features)
            for split in TRACE_SPLITS
        }
    )
    return save_dataset_dict(dd, path)


def load_traces(path: str | Path) -> datasets.DatasetDict:
    """The dataset at ``path`` (a ``distill_data`` output's ``traces/``): DataError naming ``path`` when it is
    missing, lacks a split of :data:`TRACE_SPLITS` or a column of :data:`TRACE_COLUMNS`."""
    import datasets

    path = Path(path)
    if not (path / "dataset_dict.json").is_file():
        raise DataError("no trace dataset here (run the distill_data stage)", str(path))
    try:
        dd = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises several types for a damaged directory
        raise DataError(f"cannot load the trace dataset: {type(exc).__name__}", str(path)) from exc
    for split in TRACE_SPLITS:
        if split not in dd:
            raise DataError(f"the trace dataset has no {split!r} split (has: {', '.join(dd)})", str(path))
        missing = [c for c in TRACE_COLUMNS if c not in dd[split].column_names]
        if missing:
            raise DataError(f"the {split!r} split lacks column(s) {missing}", str(path))
    return dd


# ------------------------------------------------------------------------------------------------------ recording
@dataclass
class ModelCall:
    """One call the controller made to its model: ``kind`` (``generate`` or ``logprobs``), the rendered
    ``prompts`` and one raw reply per prompt (the generated text, or ``{option: log-prob}``)."""

    kind: str
    prompts: list[str]
    replies: list[Any]


@dataclass
class _DryReply:
    """What a dry :class:`PromptRecorder` returns for a generation: an empty reply."""

    text: str = ""
    finish_reason: str = "stop"


class PromptRecorder:
    """A generator proxy that keeps every prompt the controller renders and every reply it gets.

    ``generator``: anything with ``render_chat`` (and ``generate`` / ``next_token_logprobs`` unless ``dry``).
    ``render_chat``, ``generate`` and ``next_token_logprobs`` behave as the generator's; every ``generate`` /
    ``next_token_logprobs`` call is appended to ``calls`` (:class:`ModelCall`). ``dry=True`` runs no model:
    generations come back empty and log-probs as zeros — used to render a decision's exact inputs through the
    controller's own prompt code (the gold labels). Other attributes are the generator's.
    """

    def __init__(self, generator: Any, *, dry: bool = False) -> None:
        self.generator = generator
        self.dry = dry
        self.calls: list[ModelCall] = []

    def __getattr__(self, name: str) -> Any:
        if name == "generator":  # not set yet (copy / unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.generator, name)

    def render_chat(self, messages: Any, system: str | None = None) -> str:
        """The generator's rendering of ``messages`` (with ``system``)."""
        return self.generator.render_chat(messages, system=system)

    def generate(self, prompts: Sequence[str], **kwargs: Any) -> list[Any]:
        """The generator's ``generate`` (nothing run when dry); the prompts and the texts are recorded."""
        prompts = list(prompts)
        out = [_DryReply() for _ in prompts] if self.dry else list(self.generator.generate(prompts, **kwargs))
        self.calls.append(ModelCall("generate", prompts, [str(g.text) for g in out]))
        return out

    def next_token_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> np.ndarray:
        """The generator's next-token log-probs of ``options`` (zeros when dry); recorded per prompt."""
        prompts, options = list(prompts), list(options)
        if self.dry:
            out = np.zeros((len(prompts), len(options)), dtype=np.float32)
        else:
            out = np.asarray(self.generator.next_token_logprobs(prompts, options))
        replies = [{o: float(v) for o, v in zip(options, row, strict=True)} for row in out]
        self.calls.append(ModelCall("logprobs", prompts, replies))
        return out

    def take(self) -> list[ModelCall]:
        """The calls recorded since the last ``take`` (and forget them)."""
        calls, self.calls = self.calls, []
        return calls


def verdict_score(raw: Any) -> float | None:
    """p(Yes) of one yes / no verdict as the prompted controller reads it: a ``{"yes": lp, "no": lp}`` log-prob
    pair (log-prob mode) → p(Yes) / (p(Yes) + p(No)); a generated text → its parsed verdict; None when unreadable."""

    if isinstance(raw, Mapping):
        try:
            yes, no = float(raw["yes"]), float(raw["no"])
        except (KeyError, TypeError, ValueError):
            return None
        if math.isnan(yes) or math.isnan(no) or not (math.isfinite(yes) or math.isfinite(no)):
            return None
        return float(np.exp(yes - np.logaddexp(yes, no)))
    if isinstance(raw, str):
        return parse_verdict(raw)
    return None


@dataclass
class DecisionRecord:
    """One model prompt a recorded controller decision made: the ``decision``, the ``question_id``, the rendered
    ``input``, the raw ``reply`` (text, or the log-probs as JSON), whether it was ``usable``, the ``target`` to
    learn (None when unusable), the ``score`` (p(Yes) for yes / no decisions, else NaN) and a ``note``."""

    decision: str
    question_id: str
    input: str
    reply: str
    usable: bool
    target: str | None
    score: float = math.nan
    note: str = ""

    def row(self, source: str = "teacher") -> TraceRow:
        """The dataset row of a usable record (ValueError for an unusable one)."""
        if not self.usable or self.target is None:
            raise ValueError(f"an unusable {self.decision} reply is never a row")
        return TraceRow(
            decision=self.decision,
            source=source,
            question_id=self.question_id,
            input=self.input,
            target=self.target,
            single_token=self.decision in SCORING_DECISIONS,
            score=self.score if self.decision in YES_NO_DECISIONS else math.nan,
        )


def _reply_text(reply: Any) -> str:
    return reply if isinstance(reply, str) else json.dumps(reply, sort_keys=True)


def _zero_cost() -> dict[str, float]:
    return {
        "invocations": 0,
        "prompts": 0,
        "lm_calls": 0,
        "prompt_tokens": 0,
        "generated_tokens": 0,
        "seconds": 0.0,
    }


class RecordingController(PromptedLMController):
    """The prompted controller over a teacher model, recording every decision (module doc).

    ``generator``: the teacher (a :class:`~workbench.backends.generator.Generator` or anything the prompted
    controller accepts); ``controller_options``: the prompted controller's keyword options (``score_mode``,
    ``keep_threshold``, the token caps ...). Decisions are returned unchanged, so InSemRAG runs exactly as with the
    plain prompted controller. Set the question with :meth:`question`; read ``records`` (every prompt, usable or
    not), :meth:`rows`, :meth:`skipped`, ``costs`` (per decision: controller calls, prompts, LM calls, prompt and
    generated tokens — cached generations counted as if run — and seconds) and ``listed_elements`` (question id →
    the usable key elements the teacher listed).
    """

    def __init__(self, generator: Any, **controller_options: Any) -> None:
        mode = controller_options.pop("score_mode", "auto")
        if mode == "auto":  # decided on the teacher itself: the recorder always offers next_token_logprobs
            mode = "logprobs" if hasattr(generator, "next_token_logprobs") else "generate"
        self.teacher = generator
        self.recorder = PromptRecorder(generator)
        super().__init__(self.recorder, score_mode=mode, **controller_options)
        self.records: list[DecisionRecord] = []
        self.costs: dict[str, dict[str, float]] = {d: _zero_cost() for d in DECISIONS}
        self.listed_elements: dict[str, list[str]] = {}
        self.question_id = ""

    # ------------------------------------------------------------------ bookkeeping
    @contextmanager
    def question(self, question_id: str) -> Iterator[None]:
        """Attribute the decisions made inside the block to ``question_id``."""
        previous, self.question_id = self.question_id, str(question_id)
        try:
            yield
        finally:
            self.question_id = previous

    def rows(self, source: str = "teacher") -> list[TraceRow]:
        """The dataset rows of the usable records, in order."""
        return [r.row(source) for r in self.records if r.usable]

    def skipped(self) -> Counter[str]:
        """Unusable replies per decision (never rows)."""
        return Counter(r.decision for r in self.records if not r.usable)

    def made(self) -> Counter[str]:
        """Recorded model prompts per decision, usable or not."""
        return Counter(r.decision for r in self.records)

    def drain(self) -> list[DecisionRecord]:
        """The records so far, cleared (one split at a time)."""
        records, self.records = self.records, []
        return records

    def _call(self, decision: str, method: Any, *args: Any) -> tuple[Any, list[str], list[Any]]:
        """Run the prompted controller's ``method``; returns its result, the prompts it rendered and the raw
        replies, in order, and adds the cost to ``costs[decision]``."""
        self.recorder.take()
        counter = getattr(self.teacher, "counter", None)
        before = counter.snapshot() if counter is not None else None
        started = time.perf_counter()
        result = method(*args)
        calls = self.recorder.take()
        cost = self.costs[decision]
        cost["seconds"] += time.perf_counter() - started
        cost["invocations"] += 1
        prompts = [p for call in calls for p in call.prompts]
        cost["prompts"] += len(prompts)
        if before is not None:
            spent = counter.since(before)
            cost["lm_calls"] += spent.lm_calls + spent.cached_lm_calls
            cost["prompt_tokens"] += spent.prefill_tokens + spent.cached_prefill_tokens
            cost["generated_tokens"] += spent.decoded_tokens + spent.cached_decoded_tokens
        return result, prompts, [reply for call in calls for reply in call.replies]

    def _add(
        self, decision: str, prompt: str, reply: Any, usable: bool, target: str | None, score: float, note: str = ""
    ) -> None:
        self.records.append(
            DecisionRecord(
                decision=decision,
                question_id=self.question_id,
                input=prompt,
                reply=_reply_text(reply),
                usable=usable and target is not None,
                target=target if usable else None,
                score=score,
                note=note,
            )
        )

    def _one(self, decision: str, result: Decision, prompts: list[str], replies: list[Any], target: str | None) -> None:
        """Record a one-prompt decision (usable unless the controller fell back)."""
        if len(prompts) != 1:  # the controller made no call or several: nothing to pair the reply with
            self._add(decision, prompts[0] if prompts else "", replies, False, None, math.nan, "not one prompt")
            return
        self._add(decision, prompts[0], replies[0], not result.fallback, target, math.nan, result.note)

    def _per_prompt(
        self, decision: str, results: Sequence[Relevance | Completeness], prompts: list[str], replies: list[Any]
    ) -> None:
        """Record one yes / no decision per prompt (refine, completeness)."""
        if len(results) != len(prompts):
            for prompt, reply in zip(prompts, replies, strict=False):
                self._add(decision, prompt, reply, False, None, math.nan, "replies and prompts differ in number")
            return
        for result, prompt, reply in zip(results, prompts, replies, strict=True):
            score = float(result.score)
            usable = not result.fallback and math.isfinite(score)
            self._add(decision, prompt, reply, usable, yes_no(score) if usable else None, score, result.note)

    # ------------------------------------------------------------------ the decisions
    def enrich(self, query: str) -> Enrichment:
        """S1, recorded; target ``{"dense": ..., "keywords": [...]}`` as the controller parsed it."""
        result, prompts, replies = self._call("enrich", super().enrich, query)
        target = json.dumps({"dense": result.dense, "keywords": list(result.keywords)}, ensure_ascii=False)
        self._one("enrich", result, prompts, replies, target)
        return result

    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        """S2, recorded; target the letter of the teacher's most probable intent."""
        result, prompts, replies = self._call("channel_weights", super().channel_weights, query, channels)
        target = None
        if result.intents:
            target = intent_letter(max(INTENTS, key=lambda i: result.intents.get(i, 0.0)))
        self._one("channel_weights", result, prompts, replies, target)
        return result

    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        """S3, recorded per passage; target Yes iff p(Yes) ≥ 0.5."""
        results, prompts, replies = self._call("refine", super().refine, query, passages)
        self._per_prompt("refine", results, prompts, replies)
        return results

    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        """S4, recorded per chunk; target Yes iff p(Yes) ≥ 0.5."""
        results, prompts, replies = self._call("completeness", super().completeness, query, passages)
        self._per_prompt("completeness", results, prompts, replies)
        return results

    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        """S5, recorded; target the repaired passage as the controller cleaned and cut it."""
        result, prompts, replies = self._call(
            "compress", super().compress, query, previous, center, following, max_tokens
        )
        self._one("compress", result, prompts, replies, result.text)
        return result

    def elements(self, question: str) -> Elements:
        """S6, recorded; target the JSON list of the elements the controller parsed."""
        result, prompts, replies = self._call("elements", super().elements, question)
        self._one("elements", result, prompts, replies, json.dumps(list(result.elements), ensure_ascii=False))
        if not result.fallback:
            self.listed_elements[self.question_id] = list(result.elements)
        return result

    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        """S7, recorded per (element, passage) pair (element-major, the controller's order); a pair's verdict is
        usable unless unreadable (the controller then counts it covered)."""
        result, prompts, replies = self._call("coverage", super().coverage, question, elements, passages)
        raws = [raw for row in result.raw for raw in row] if isinstance(result.raw, list) else []
        if len(raws) != len(prompts) or not all(isinstance(row, list) for row in result.raw or []):
            for prompt, reply in zip(prompts, replies, strict=False):
                self._add("coverage", prompt, reply, False, None, math.nan, "replies and pairs differ in number")
            return result
        for prompt, reply, raw in zip(prompts, replies, raws, strict=True):
            score = verdict_score(raw)
            if score is None:
                self._add("coverage", prompt, reply, False, None, math.nan, "unreadable verdict")
            else:
                self._add("coverage", prompt, reply, True, yes_no(score), score)
        return result

    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        """S8, recorded; target the query as the controller cleaned it."""
        result, prompts, replies = self._call("follow_up", super().follow_up, question, element, passages)
        self._one("follow_up", result, prompts, replies, result.query)
        return result
