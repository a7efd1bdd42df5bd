"""An out-of-distribution profile: is a question (and D²-RAG's view of it) like the questions the calibrators saw?

The calibrators and the classifier of a bundle were fitted on one split of one kind of question (the quickstart: the
either-or wiki-qa templates, "Was X born in France or Italy?"). Their P(correct) means something only for questions
like those; asked open trivia, a bundle answers with the same confidence and nothing says it is out of its depth.
An :class:`OODProfile`, fitted by the ``calibrate`` stage on the same fit split (``ood.json`` next to
``calibrators.json``, ``learned/ood.json`` in a bundle), stores three descriptions of that split and checks a new
question against each:

* **features** (``feature:<name>``, one check per feature) — for every raw oriented feature, its fit-split quantiles
  ``q_lo`` / ``q_hi`` (:data:`QUANTILES`: 0.5 % and 99.5 %), median and finite min / max. A value is imputed exactly as
  :class:`~workbench.calibration.calibrator_set.CalibratorSet` imputes it (NaN → median, ±inf → the end of the
  finite range on its side, so a missing value is never out of range) and fails the check when it lies outside
  ``[q_lo − m, q_hi + m]``, ``m = margin × (q_hi − q_lo)`` (:data:`MARGIN`: 0.1). For a normal feature that flags
  about 0.2 % of in-distribution questions.
* **question form** (``question_form``, ``question_length``) — computed from the question text alone
  (:func:`question_form`, deterministic): its *shape* — the lead word's class (``wh`` interrogative, ``aux``
  yes/no-verb, ``imperative``, ``other``) and whether it names options (``A or B`` before the first ``?``, outside
  quotes) — and its length in words. A shape that made up less than :data:`MIN_SHARE` (1 %) of the fit split's
  questions fails ``question_form``; a length outside the words' ``[q_lo − w, q_hi + w]`` fails
  ``question_length``, ``w = max(m, WORD_SLACK × q_hi)`` (:data:`WORD_SLACK`: 0.25). Either-or questions are
  ``wh|options`` / ``aux|options``; "who has the most catches in NFL history" is ``wh|open``.
* **answer length** (``answer_length``) — the greedy (closed-book) answer's length in words; it fails when longer
  than ``q_hi + w`` of the fit split's greedy answers (only the long side: a short answer is no sign of trouble).

:meth:`OODProfile.check` returns an :class:`OODResult` (``ood`` and the names of the failed checks). The question
checks need no model, so a runtime applies them to every method; the feature and answer checks need D²-RAG's Stage 1.

A flag says the question is unlike the fit split *in one of these respects*: the bundle's calibrated probabilities
were not measured on such questions. It does not say the answer is wrong, and no flag does not make it right.

Numpy and the standard library only: the runtime reads it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from workbench.core.errors import DataError

QUANTILES = (0.005, 0.995)
"""The fit-split quantiles stored per feature (and for question and answer lengths)."""

MARGIN = 0.1
"""The tolerance beyond the stored quantiles, as a fraction of the inter-quantile range ``q_hi − q_lo``."""

MIN_SHARE = 0.01
"""A question shape rarer than this on the fit split fails the ``question_form`` check."""

WORD_SLACK = 0.25
"""Word counts get a wider tolerance: the larger of the margin rule and this fraction of ``q_hi`` (a fit split of
10–12-word questions accepts 7–15 words, not 9.8–12.2)."""

WH_WORDS = frozenset({"who", "whom", "whose", "what", "which", "where", "when", "why", "how"})
AUX_WORDS = frozenset(
    {"is", "was", "are", "were", "do", "does", "did", "can", "could", "will", "would", "should", "has", "have", "had"}
)
IMPERATIVE_WORDS = frozenset({"name", "give", "list", "tell", "identify", "fill", "complete", "state", "find"})
LEADS = ("wh", "aux", "imperative", "other")
"""The lead-word classes of a question's shape."""

_WORD = re.compile(r"\w+(?:['’.-]\w+)*")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|«[^»]*»")
_OPTIONS = re.compile(r"\S\s+or\s+\S", re.IGNORECASE)


@dataclass(frozen=True)
class QuestionForm:
    """A question's form: its ``shape`` (``"<lead>|options"`` or ``"<lead>|open"``) and length in ``words``."""

    lead: str
    options: bool
    words: int

    @property
    def shape(self) -> str:
        return f"{self.lead}|{'options' if self.options else 'open'}"


def word_count(text: str) -> int:
    """Words (runs of letters / digits, with inner apostrophes, dots and hyphens) in ``text``."""
    return len(_WORD.findall(text or ""))


def question_form(question: str) -> QuestionForm:
    """The form of ``question`` (text only, deterministic; see the module docstring).

    The lead word is the first word, lower-cased (a leading ``"or"`` / ``"and"`` is not skipped). Options are an
    ``X or Y`` in the question's head — the text before its first ``?`` (the whole text without one), quoted spans
    removed — so a clue or a quoted sentence that happens to contain "or" does not count."""
    words = _WORD.findall(question)
    first = words[0].lower() if words else ""
    if first in WH_WORDS:
        lead = "wh"
    elif first in AUX_WORDS:
        lead = "aux"
    elif first in IMPERATIVE_WORDS:
        lead = "imperative"
    else:
        lead = "other"
    head = _QUOTED.sub(" ", question).split("?", 1)[0]
    head = head.split(":", 1)[0] if "?" not in question else head
    return QuestionForm(lead, bool(_OPTIONS.search(head)), len(words))


@dataclass(frozen=True)
class OODResult:
    """``ood``: any check failed; ``checks``: the failed checks' names (``feature:<name>``, ``question_form``,
    ``question_length``, ``answer_length``), in that order."""

    ood: bool
    checks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"flag": ood, "checks": [...]}`` (what a trace step records)."""
        return {"flag": self.ood, "checks": list(self.checks)}

    @classmethod
    def of(cls, checks: Sequence[str]) -> OODResult:
        return cls(bool(checks), list(checks))


def _bounds(values: np.ndarray, quantiles: tuple[float, float]) -> dict[str, float]:
    low, high = float(values.min()), float(values.max())
    lo, hi = (min(max(float(v), low), high) for v in np.quantile(values, quantiles))  # no float drift past the ends
    return {"q_lo": lo, "q_hi": hi, "min": low, "max": high}


def _inside(value: float, record: Mapping[str, float], margin: float) -> bool:
    slack = margin * (record["q_hi"] - record["q_lo"])
    return record["q_lo"] - slack <= value <= record["q_hi"] + slack


def _word_slack(record: Mapping[str, float], margin: float) -> float:
    return max(margin * (record["q_hi"] - record["q_lo"]), WORD_SLACK * record["q_hi"])


def _impute(value: Any, record: Mapping[str, float]) -> float:
    """As :func:`~workbench.calibration.calibrator_set.impute_value` with this feature's median and finite range."""
    value = math.nan if value is None else float(value)
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return record["median"]
    return record["max"] if value > 0 else record["min"]


@dataclass
class OODProfile:
    """The fit split's description (see the module docstring).

    ``features``: name → ``{median, min, max, q_lo, q_hi}`` of the imputed raw values; ``shapes``: question shape →
    its count on the fit split; ``question_words`` / ``answer_words``: ``{min, max, q_lo, q_hi}`` of the question and
    greedy-answer lengths in words (``answer_words`` None: no answers were given); ``rows``: fit-split questions.
    """

    features: dict[str, dict[str, float]]
    shapes: dict[str, int]
    question_words: dict[str, float]
    answer_words: dict[str, float] | None = None
    rows: int = 0
    quantiles: tuple[float, float] = QUANTILES
    margin: float = MARGIN
    min_share: float = MIN_SHARE

    kind: ClassVar[str] = "ood_profile"
    version: ClassVar[int] = 1

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(
        cls,
        questions: Sequence[str],
        features: Mapping[str, Sequence[float]] | None = None,
        answers: Sequence[str] | None = None,
        *,
        quantiles: tuple[float, float] = QUANTILES,
        margin: float = MARGIN,
        min_share: float = MIN_SHARE,
    ) -> OODProfile:
        """The profile of a fit split: its ``questions``, raw oriented ``features`` (name → one value per question;
        NaN / ±inf allowed, imputed as the calibrator set imputes) and greedy ``answers`` (None: no answer check).
        DataError on no questions, a feature of another length or with no finite value, or bad settings."""
        questions = [str(q) for q in questions]
        n = len(questions)
        if n == 0:
            raise DataError("an OOD profile needs at least one question", "ood profile")
        _check_settings(quantiles, margin, min_share, "ood profile")
        records: dict[str, dict[str, float]] = {}
        for name, column in (features or {}).items():
            values = np.asarray([math.nan if v is None else float(v) for v in column], dtype=float)
            if values.size != n:
                raise DataError(f"feature {name!r} has {values.size} values for {n} questions", "ood profile")
            finite = values[np.isfinite(values)]
            if finite.size == 0:
                raise DataError(f"feature {name!r} has no finite value on the fit split", "ood profile")
            record = {"median": float(np.median(finite)), "min": float(finite.min()), "max": float(finite.max())}
            imputed = np.asarray([_impute(v, record) for v in values])
            records[str(name)] = {"median": record["median"], **_bounds(imputed, quantiles)}
        forms = [question_form(q) for q in questions]
        shapes: dict[str, int] = {}
        for form in forms:
            shapes[form.shape] = shapes.get(form.shape, 0) + 1
        answer_words = None
        if answers is not None:
            if len(answers) != n:
                raise DataError(f"{len(answers)} answers for {n} questions", "ood profile")
            answer_words = _bounds(np.asarray([word_count(str(a)) for a in answers], dtype=float), quantiles)
        return cls(
            features=records,
            shapes=dict(sorted(shapes.items())),
            question_words=_bounds(np.asarray([f.words for f in forms], dtype=float), quantiles),
            answer_words=answer_words,
            rows=n,
            quantiles=(float(quantiles[0]), float(quantiles[1])),
            margin=float(margin),
            min_share=float(min_share),
        )

    # ------------------------------------------------------------------ checking
    def check_question(self, question: str) -> list[str]:
        """The failed question checks (``question_form``, ``question_length``) of ``question``."""
        form = question_form(str(question))
        out = []
        if self.shapes.get(form.shape, 0) < self.min_share * max(self.rows, 1):
            out.append("question_form")
        record, slack = self.question_words, _word_slack(self.question_words, self.margin)
        if not record["q_lo"] - slack <= form.words <= record["q_hi"] + slack:
            out.append("question_length")
        return out

    def check_features(self, raw: Mapping[str, Any] | None) -> list[str]:
        """``feature:<name>`` for each profiled feature of ``raw`` whose (imputed) value is out of range; a feature
        ``raw`` lacks, or one the profile does not know, is not checked."""
        if not raw:
            return []
        out = []
        for name, record in self.features.items():
            if name in raw and not _inside(_impute(raw[name], record), record, self.margin):
                out.append(f"feature:{name}")
        return out

    def check_answer(self, answer: str | None) -> list[str]:
        """``answer_length`` when ``answer`` is longer than the fit split's greedy answers allow (None: unchecked)."""
        if answer is None or self.answer_words is None:
            return []
        if word_count(str(answer)) > self.answer_words["q_hi"] + _word_slack(self.answer_words, self.margin):
            return ["answer_length"]
        return []

    def check(
        self, question: str, raw_features: Mapping[str, Any] | None = None, answer: str | None = None
    ) -> OODResult:
        """Every check that applies: the features when ``raw_features`` are given, the answer when ``answer`` is."""
        return OODResult.of(
            [*self.check_features(raw_features), *self.check_question(question), *self.check_answer(answer)]
        )

    def describe(self) -> str:
        """One line: what the profile holds (the ``calibrate`` stage's summary)."""
        shapes = ", ".join(f"{s} {c}" for s, c in sorted(self.shapes.items(), key=lambda kv: -kv[1]))
        answers = "" if self.answer_words is None else f", greedy answers ≤ {self.answer_words['q_hi']:g} words"
        return (
            f"{len(self.features)} feature ranges (q {self.quantiles[0]:g}–{self.quantiles[1]:g}, margin "
            f"{self.margin:g}), question shapes [{shapes}], {self.question_words['min']:g}–"
            f"{self.question_words['max']:g} words{answers}, from {self.rows} questions"
        )

    # ------------------------------------------------------------------ the learned-artifact protocol
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: kind, version, the settings and the stored description."""
        return {
            "kind": self.kind,
            "version": self.version,
            "rows": self.rows,
            "quantiles": list(self.quantiles),
            "margin": self.margin,
            "min_share": self.min_share,
            "features": {name: dict(record) for name, record in self.features.items()},
            "shapes": dict(self.shapes),
            "question_words": dict(self.question_words),
            "answer_words": None if self.answer_words is None else dict(self.answer_words),
        }

    @classmethod
    def from_dict(cls, d: Any) -> OODProfile:
        """Rebuild from :meth:`to_dict` output; DataError on anything malformed."""
        where = "ood profile"
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError(f"not an OOD profile (kind != {cls.kind!r})", where)
        if d.get("version") != cls.version:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {cls.version})", where)
        keys = {"kind", "version", "rows", "quantiles", "margin", "min_share", "features", "shapes"}
        keys |= {"question_words", "answer_words"}
        extra, missing = sorted(set(d) - keys), sorted(keys - set(d))
        if extra or missing:
            raise DataError(f"unknown key(s) {extra}" if extra else f"missing key(s) {missing}", where)
        rows = d["rows"]
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise DataError(f"rows must be an integer >= 1, got {rows!r}", where)
        quantiles = d["quantiles"]
        if not (isinstance(quantiles, list) and len(quantiles) == 2 and all(_number(q) for q in quantiles)):
            raise DataError("quantiles must be [low, high], two numbers", where)
        _check_settings((quantiles[0], quantiles[1]), d["margin"], d["min_share"], where)
        features = d["features"]
        if not isinstance(features, dict):
            raise DataError("features must be a mapping", where)
        for name, record in features.items():
            _check_record(record, ("median", "min", "max", "q_lo", "q_hi"), f"features.{name}", where)
        shapes = d["shapes"]
        if not isinstance(shapes, dict):
            raise DataError("shapes must be a mapping", where)
        for shape, count in shapes.items():
            lead, _, kind = str(shape).partition("|")
            if lead not in LEADS or kind not in ("options", "open"):
                raise DataError(f"unknown question shape {shape!r}", where)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise DataError(f"the count of shape {shape!r} must be an integer >= 0", where)
        _check_record(d["question_words"], ("min", "max", "q_lo", "q_hi"), "question_words", where)
        if d["answer_words"] is not None:
            _check_record(d["answer_words"], ("min", "max", "q_lo", "q_hi"), "answer_words", where)
        return cls(
            features={str(k): {f: float(v) for f, v in r.items()} for k, r in features.items()},
            shapes={str(k): int(v) for k, v in shapes.items()},
            question_words={k: float(v) for k, v in d["question_words"].items()},
            answer_words=None if d["answer_words"] is None else {k: float(v) for k, v in d["answer_words"].items()},
            rows=rows,
            quantiles=(float(quantiles[0]), float(quantiles[1])),
            margin=float(d["margin"]),
            min_share=float(d["min_share"]),
        )


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _check_settings(quantiles: Sequence[Any], margin: Any, min_share: Any, where: str) -> None:
    lo, hi = quantiles
    if not (_number(lo) and _number(hi) and 0.0 <= lo < hi <= 1.0):
        raise DataError(f"quantiles must satisfy 0 <= low < high <= 1, got {list(quantiles)}", where)
    if not (_number(margin) and margin >= 0):
        raise DataError(f"margin must be a number >= 0, got {margin!r}", where)
    if not (_number(min_share) and 0.0 <= min_share <= 1.0):
        raise DataError(f"min_share must be in [0, 1], got {min_share!r}", where)


def _check_record(record: Any, keys: tuple[str, ...], name: str, where: str) -> None:
    if not isinstance(record, dict) or set(record) != set(keys):
        raise DataError(f"{name} must be a mapping with exactly {list(keys)}", where)
    if not all(_number(record[k]) for k in keys):
        raise DataError(f"{name} must hold finite numbers", where)
    if not record["min"] <= record["q_lo"] <= record["q_hi"] <= record["max"]:
        raise DataError(f"{name} must satisfy min <= q_lo <= q_hi <= max", where)
