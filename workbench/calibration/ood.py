"""An out-of-distribution detector: is a question like the questions a bundle's calibrators were fitted on?

The calibrators and the classifier of a bundle were fitted on one split of one kind of question (the quickstart: the
either-or wiki-qa templates, "Was X born in France or Italy?", on eleven of the twelve topics). Their P(correct)
means something only for questions like those; asked about another topic or in another form, a bundle answers with
the same confidence and nothing says it is out of its depth. An :class:`OODProfile`, fitted by the ``calibrate``
stage on the questions of the same fit split (``ood.json`` + ``ood.safetensors`` next to ``calibrators.json``,
``learned/ood.*`` in a bundle), checks a new question three ways, from its text alone (no generator, no gold):

* **embedding** (``question_embedding``) — the question's *novelty*: the mean cosine distance from its embedding to
  the embeddings of its ``neighbours`` nearest fit-split questions (:data:`NEIGHBOURS`: 10), after centring every
  embedding on the fit split's mean embedding (which removes the direction all the fit questions share — their
  template — so the distance reads what differs: the topic) and re-normalising. It fails when the novelty exceeds the
  calibrated ``threshold``. The embedder must be the one the profile was fitted with (its fingerprint is stored).
* **form** (``question_form``) — the question's *shape* (:func:`question_form`: the lead word's class — ``wh``,
  ``aux``, ``imperative``, ``other`` — and whether it names options, ``A or B`` before its first ``?``, outside
  quotes) made up less than :data:`MIN_SHARE` (1 %) of the fit split's questions.
* **length** (``question_length``) — its length in words lies outside the fit split's ``[q_lo − w, q_hi + w]``
  (quantiles :data:`QUANTILES`, ``w = max(margin × (q_hi − q_lo), WORD_SLACK × q_hi)``).

**Calibration.** The threshold is set on questions the profile was *not* fitted on, so that the whole flag (any check
failing) fires on at most ``target_fpr`` of in-distribution questions (:func:`calibrated_threshold`): the questions of
another in-distribution split (the ``calibrate`` stage's ``calibrate.ood_split``, default ``val``), or, without one,
the fit split's own questions cross-fitted (each scored against the others: leave one out). With ``n`` such questions,
each given the score ``c = +inf`` when the form or length check fails and its novelty otherwise, the threshold is the
``⌈(n + 1)(1 − target_fpr)⌉``-th smallest ``c``: a new in-distribution question, exchangeable with them, is then
flagged with probability at most ``target_fpr`` (the split-conformal bound). When the form and length checks alone
flag more than that, the threshold is infinite (``null`` in the JSON): the embedding check never fires and the
recorded in-sample rate says by how much the target is missed.

:meth:`OODProfile.check_questions` returns one :class:`OODResult` per question (``ood`` and the failed checks).
A flag says the question is unlike the fit split *in the named respect*, so the bundle's calibrated probabilities
were never measured on such questions. It does not say the answer is wrong, and no flag does not make it right.

Profiles of version 1 (per-feature ranges and an answer-length check, never calibrated to a false-positive rate)
are refused by :meth:`OODProfile.from_dict` with :data:`UNCALIBRATED_VERSION` named, so a reader can tell them apart
(the runtime answers without a flag and says so in a note).

Numpy and the standard library only: the runtime reads it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from workbench.core.errors import DataError

QUANTILES = (0.005, 0.995)
"""The fit-split quantiles of the question length stored in ``question_words``."""

MARGIN = 0.1
"""The tolerance beyond the stored length quantiles, as a fraction of the inter-quantile range ``q_hi − q_lo``."""

MIN_SHARE = 0.01
"""A question shape rarer than this on the fit split fails the ``question_form`` check."""

WORD_SLACK = 0.25
"""Word counts get a wider tolerance: the larger of the margin rule and this fraction of ``q_hi`` (a fit split of
10–12-word questions accepts 7–15 words, not 9.8–12.2)."""

NEIGHBOURS = 10
"""Fit-split questions whose mean cosine distance is a question's novelty."""

BLOCK = 1024
"""Questions scored at once (a ``BLOCK`` × fit-questions distance block: 8 MB for 1,000 fit questions)."""

TARGET_FPR = 0.05
"""The default share of in-distribution questions the calibrated flag may fire on."""

UNCALIBRATED_VERSION = 1
"""The version of the profiles written before the calibrated detector (feature ranges; no false-positive target)."""

CHECKS = ("question_embedding", "question_form", "question_length")
"""The checks a profile runs, in the order an :class:`OODResult` names them."""

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

Embed = Callable[[Sequence[str]], np.ndarray]
"""A batch embedder: questions → an ``(n, dim)`` array (an :class:`~workbench.backends.embedder.Embedder`'s
``encode``)."""


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
    """``ood``: any check failed; ``checks``: the failed checks' names (of :data:`CHECKS`, in that order)."""

    ood: bool
    checks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"flag": ood, "checks": [...]}`` (what a trace step records)."""
        return {"flag": self.ood, "checks": list(self.checks)}

    @classmethod
    def of(cls, checks: Sequence[str]) -> OODResult:
        return cls(bool(checks), list(checks))


@dataclass
class EmbeddingCheck:
    """The ``question_embedding`` check: ``center`` (the fit split's mean embedding, ``(dim,)``), ``reference`` (the
    fit questions' embeddings centred on it and re-normalised, ``(rows, dim)``, float32), ``neighbours`` (k),
    ``embedder`` (the fingerprint of the embedder that made them) and ``threshold`` (a novelty above it fails; None:
    infinite, the check never fails)."""

    center: np.ndarray
    reference: np.ndarray
    neighbours: int
    embedder: str
    threshold: float | None = None

    @classmethod
    def fit(cls, embeddings: np.ndarray, neighbours: int, embedder: str) -> EmbeddingCheck:
        """The check's reference from the fit questions' ``embeddings`` (threshold unset); DataError on a bad shape,
        a non-finite value, or fewer questions than ``neighbours`` + 1."""
        matrix = _matrix(embeddings, "fit-split embeddings")
        if not 1 <= neighbours < matrix.shape[0]:
            raise DataError(
                f"neighbours must be between 1 and the fit questions − 1 ({matrix.shape[0] - 1}), got {neighbours}",
                "ood profile",
            )
        center = matrix.mean(axis=0).astype(np.float32)  # stored as float32: centre with exactly what is stored
        return cls(center, _centred(matrix, center), int(neighbours), str(embedder))

    def novelty(
        self, embeddings: np.ndarray, *, leave_one_out: bool = False, own: Sequence[int] | None = None
    ) -> np.ndarray:
        """Each row's mean cosine distance to its ``neighbours`` nearest reference rows (both centred), computed
        :data:`BLOCK` rows at a time. With ``leave_one_out`` the rows *are* the reference, in order, and each is
        scored against the others; ``own`` generalises it: per row, the reference row it is (−1: none), left out of
        that row's neighbours. DataError on a mismatched ``own`` or a reference row out of range."""
        rows = _centred(_matrix(embeddings, "question embeddings", self.reference.shape[1]), self.center)
        if leave_one_out and rows.shape[0] != self.reference.shape[0]:
            raise DataError("leave-one-out scores the reference itself", "ood profile")
        skip = np.arange(rows.shape[0]) if leave_one_out else _own_rows(own, rows.shape[0], self.reference.shape[0])
        reference = self.reference.astype(np.float64)
        out = np.zeros(rows.shape[0])
        for start in range(0, rows.shape[0], BLOCK):
            block = 1.0 - rows[start : start + BLOCK].astype(np.float64) @ reference.T
            mine = None if skip is None else skip[start : start + BLOCK]
            out[start : start + BLOCK] = nearest_mean(block, self.neighbours, skip=mine)
        return out

    def fails(self, novelty: float) -> bool:
        """Whether a question of this ``novelty`` fails the check."""
        return self.threshold is not None and novelty > self.threshold


def nearest_mean(distance: np.ndarray, neighbours: int, *, skip: np.ndarray | None = None) -> np.ndarray:
    """Each row's mean over its ``neighbours`` smallest entries of the ``(rows, reference)`` ``distance`` matrix (the
    k-NN novelty); ``skip`` (one reference column per row, −1 for none) leaves out a row's own entry when the row is
    a reference row (leave one out)."""
    distance = np.array(distance, dtype=np.float64)
    if skip is not None:
        skip = np.asarray(skip, dtype=np.int64)
        mine = skip >= 0
        distance[np.arange(distance.shape[0])[mine], skip[mine]] = np.inf
    if distance.shape[0] == 0:
        return np.zeros(0)
    return np.partition(distance, neighbours - 1, axis=1)[:, :neighbours].mean(axis=1)


def _own_rows(own: Sequence[int] | None, rows: int, reference: int) -> np.ndarray | None:
    """``own`` checked as one reference row index (or −1) per scored row; None stays None."""
    if own is None:
        return None
    index = np.asarray(own, dtype=np.int64).reshape(-1)
    if index.size != rows or (index.size and (index.min() < -1 or index.max() >= reference)):
        raise DataError(
            f"'own' must give each of the {rows} rows a reference row in [0, {reference}) or -1", "ood profile"
        )
    return index


def _matrix(values: Any, what: str, dim: int | None = None) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim != 2 or (dim is not None and matrix.shape[1] != dim) or matrix.shape[1] == 0:
        wanted = f"(n, {dim})" if dim is not None else "(n, dim)"
        raise DataError(f"{what} must be a {wanted} matrix, got shape {matrix.shape}", "ood profile")
    if not np.isfinite(matrix).all():
        raise DataError(f"{what} hold a non-finite value", "ood profile")
    return matrix


def _centred(matrix: np.ndarray, center: np.ndarray) -> np.ndarray:
    shifted = matrix - np.asarray(center, dtype=np.float64)
    norms = np.linalg.norm(shifted, axis=1, keepdims=True)
    return (shifted / np.maximum(norms, 1e-12)).astype(np.float32)


def min_questions(target_fpr: float) -> int:
    """The fewest questions that can set a threshold for ``target_fpr`` by the split-conformal rank
    (``⌈(n + 1)(1 − target_fpr)⌉ ≤ n``): 19 for 5 %."""
    return math.ceil((1.0 - target_fpr) / target_fpr - 1e-9)


def calibrated_threshold(novelty: np.ndarray, rule_flags: np.ndarray, target_fpr: float) -> float | None:
    """The novelty threshold that makes the whole flag fire on at most ``target_fpr`` of in-distribution questions
    like these (the split-conformal rule of the module docstring): the ``⌈(n + 1)(1 − target_fpr)⌉``-th smallest of
    ``novelty`` with the questions a rule check flags (``rule_flags``) set to +inf. None (infinite) when the rule
    checks alone flag too many; DataError when there are too few questions to reach the target."""
    scores = np.where(np.asarray(rule_flags, dtype=bool), np.inf, np.asarray(novelty, dtype=float))
    n = scores.size
    rank = math.ceil((n + 1) * (1.0 - target_fpr) - 1e-9)
    if rank > n:
        raise DataError(
            f"{n} in-distribution questions cannot set a threshold for a {100 * target_fpr:g} % false-positive rate "
            f"(at least {min_questions(target_fpr)} are needed)",
            "ood profile",
        )
    value = float(np.sort(scores)[rank - 1])
    return value if math.isfinite(value) else None


def _bounds(values: np.ndarray, quantiles: tuple[float, float]) -> dict[str, float]:
    low, high = float(values.min()), float(values.max())
    lo, hi = (min(max(float(v), low), high) for v in np.quantile(values, quantiles))  # no float drift past the ends
    return {"q_lo": lo, "q_hi": hi, "min": low, "max": high}


def _word_slack(record: Mapping[str, float], margin: float) -> float:
    return max(margin * (record["q_hi"] - record["q_lo"]), WORD_SLACK * record["q_hi"])


@dataclass
class OODProfile:
    """The fit split's description and the calibrated flag (see the module docstring).

    ``shapes``: question shape → its count on the fit split; ``question_words``: ``{min, max, q_lo, q_hi}`` of the
    fit questions' lengths in words; ``rows``: fit-split questions; ``embedding``: the embedding check (None: not
    run); ``calibration``: how the threshold was set — ``target_fpr``, ``split`` (the in-distribution split whose
    questions set it; None: the fit split cross-fitted), ``questions`` (how many) and the in-sample ``flag_rate`` /
    ``rule_rate`` (the whole flag's, and the form and length checks' alone, on those questions).
    """

    shapes: dict[str, int]
    question_words: dict[str, float]
    rows: int
    embedding: EmbeddingCheck | None = None
    calibration: dict[str, Any] = field(default_factory=dict)
    quantiles: tuple[float, float] = QUANTILES
    margin: float = MARGIN
    min_share: float = MIN_SHARE

    kind: ClassVar[str] = "ood_profile"
    version: ClassVar[int] = 2

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(
        cls,
        questions: Sequence[str],
        embeddings: np.ndarray | None = None,
        *,
        embedder: str = "",
        neighbours: int = NEIGHBOURS,
        target_fpr: float = TARGET_FPR,
        held_out: Sequence[str] | None = None,
        held_out_embeddings: np.ndarray | None = None,
        split: str | None = None,
        quantiles: tuple[float, float] = QUANTILES,
        margin: float = MARGIN,
        min_share: float = MIN_SHARE,
    ) -> OODProfile:
        """The calibrated profile of a fit split: its ``questions`` and their ``embeddings`` (None: no embedding
        check) by the embedder of fingerprint ``embedder``; the threshold set for ``target_fpr`` on the ``held_out``
        in-distribution questions (with their ``held_out_embeddings``; the split's name in ``split``), or, when
        ``held_out`` is None, on the fit questions cross-fitted. DataError on no questions, mismatched lengths, bad
        settings or too few questions for the target."""
        questions = [str(q) for q in questions]
        n = len(questions)
        if n == 0:
            raise DataError("an OOD profile needs at least one question", "ood profile")
        _check_settings(quantiles, margin, min_share, target_fpr, "ood profile")
        forms = [question_form(q) for q in questions]
        shapes: dict[str, int] = {}
        for form in forms:
            shapes[form.shape] = shapes.get(form.shape, 0) + 1
        profile = cls(
            shapes=dict(sorted(shapes.items())),
            question_words=_bounds(np.asarray([f.words for f in forms], dtype=float), quantiles),
            rows=n,
            quantiles=(float(quantiles[0]), float(quantiles[1])),
            margin=float(margin),
            min_share=float(min_share),
        )
        if embeddings is not None:
            if len(embeddings) != n:
                raise DataError(f"{len(embeddings)} embeddings for {n} questions", "ood profile")
            profile.embedding = EmbeddingCheck.fit(embeddings, neighbours, embedder)
        if held_out is None:  # cross-fit: each fit question against the others
            scored, vectors, leave_one_out = questions, embeddings, True
        else:
            scored, vectors, leave_one_out = [str(q) for q in held_out], held_out_embeddings, False
            if not scored:
                raise DataError("no held-out questions to set the threshold on", "ood profile")
            if profile.embedding is not None and (vectors is None or len(vectors) != len(scored)):
                raise DataError("the held-out questions need one embedding each", "ood profile")
        rules = np.asarray([bool(profile.check_rules(q)) for q in scored], dtype=bool)
        novelty = np.zeros(len(scored))
        if profile.embedding is not None:
            novelty = profile.embedding.novelty(vectors, leave_one_out=leave_one_out)
            profile.embedding.threshold = calibrated_threshold(novelty, rules, target_fpr)
        flagged = rules | np.asarray([profile.embedding is not None and profile.embedding.fails(v) for v in novelty])
        profile.calibration = {
            "target_fpr": float(target_fpr),
            "split": None if held_out is None else split,
            "questions": len(scored),
            "flag_rate": float(flagged.mean()) if len(scored) else 0.0,
            "rule_rate": float(rules.mean()) if len(scored) else 0.0,
        }
        return profile

    # ------------------------------------------------------------------ checking
    def check_rules(self, question: str) -> list[str]:
        """The failed form and length checks (``question_form``, ``question_length``) of ``question``."""
        form = question_form(str(question))
        out = []
        if self.shapes.get(form.shape, 0) < self.min_share * max(self.rows, 1):
            out.append("question_form")
        record, slack = self.question_words, _word_slack(self.question_words, self.margin)
        if not record["q_lo"] - slack <= form.words <= record["q_hi"] + slack:
            out.append("question_length")
        return out

    def check_questions(
        self, questions: Sequence[str], embed: Embed | None = None, *, own: Sequence[int] | None = None
    ) -> list[OODResult]:
        """One result per question: the embedding check (when the profile has one and ``embed`` is given — see
        :meth:`embedder_for`), then the form and length checks. ``own`` names, per question, the fit question it is
        (its index among the questions the profile was fitted on; −1: none): the embedding check then leaves that
        reference row out, so a fit question is judged as a new in-distribution one would be (a question is its own
        nearest neighbour, at distance 0, which would pull its novelty down by a k-th)."""
        questions = [str(q) for q in questions]
        failed = [[] for _ in questions]  # type: list[list[str]]
        if self.embedding is not None and embed is not None and questions:
            for names, value in zip(failed, self.embedding.novelty(embed(questions), own=own), strict=True):
                if self.embedding.fails(float(value)):
                    names.append("question_embedding")
        return [OODResult.of([*names, *self.check_rules(q)]) for names, q in zip(failed, questions, strict=True)]

    def embedder_for(self, embedder: Any) -> Embed | None:
        """``embedder.encode`` when ``embedder`` is the one the profile's embedding check was fitted with (same
        ``fingerprint``), else None: novelty from another embedder's vectors would be meaningless."""
        if self.embedding is None or embedder is None:
            return None
        return embedder.encode if getattr(embedder, "fingerprint", None) == self.embedding.embedder else None

    def note(self, checks: Sequence[str]) -> str:
        """The note a flagged answer carries: which checks failed, what that means and how often the flag fires on
        in-distribution questions."""
        calibrated = self.embedding is not None and self.embedding.threshold is not None
        rate = self.calibration.get("target_fpr" if calibrated else "flag_rate")  # the rule checks alone: in-sample
        rate = "" if rate is None else f"; the flag fires on about {100 * rate:.3g} % of in-distribution questions"
        return (
            f"out of distribution for this bundle ({', '.join(checks)}): its calibrated probabilities were never "
            f"measured on questions like this one — treat P(correct) as unmeasured, not as low{rate}"
        )

    def describe(self) -> str:
        """One line: what the profile holds (the ``calibrate`` stage's summary)."""
        shapes = ", ".join(f"{s} {c}" for s, c in sorted(self.shapes.items(), key=lambda kv: -kv[1]))
        calibration = self.calibration
        where = calibration.get("split") or "the fit split cross-fitted"
        if self.embedding is None:
            novelty = "no embedding check"
        else:
            threshold = "never" if self.embedding.threshold is None else f"> {self.embedding.threshold:.4f}"
            novelty = f"embedding novelty (k = {self.embedding.neighbours}) {threshold}"
        return (
            f"{novelty}, set for {100 * calibration.get('target_fpr', math.nan):g} % false positives on "
            f"{calibration.get('questions', 0)} questions of {where} (in-sample "
            f"{100 * calibration.get('flag_rate', math.nan):.1f} %); question shapes [{shapes}], "
            f"{self.question_words['min']:g}–{self.question_words['max']:g} words; from {self.rows} questions"
        )

    # ------------------------------------------------------------------ the learned-artifact protocol
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: kind, version, the settings, the description and the calibration (the embedding check's
        vectors are in :meth:`tensors`)."""
        embedding = None
        if self.embedding is not None:
            embedding = {
                "neighbours": self.embedding.neighbours,
                "embedder": self.embedding.embedder,
                "threshold": self.embedding.threshold,
                "dim": int(self.embedding.reference.shape[1]),
            }
        return {
            "kind": self.kind,
            "version": self.version,
            "rows": self.rows,
            "quantiles": list(self.quantiles),
            "margin": self.margin,
            "min_share": self.min_share,
            "shapes": dict(self.shapes),
            "question_words": dict(self.question_words),
            "embedding": embedding,
            "calibration": dict(self.calibration),
        }

    def tensors(self) -> dict[str, np.ndarray] | None:
        """The embedding check's ``center`` and ``reference`` (float32), or None without one."""
        if self.embedding is None:
            return None
        return {
            "center": np.asarray(self.embedding.center, dtype=np.float32),
            "reference": np.asarray(self.embedding.reference, dtype=np.float32),
        }

    @classmethod
    def from_dict(cls, d: Any, tensors: Mapping[str, Any] | None = None) -> OODProfile:
        """Rebuild from :meth:`to_dict` output and :meth:`tensors`; DataError on anything malformed (a version-1
        profile included: it was never calibrated, see the module docstring)."""
        where = "ood profile"
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError(f"not an OOD profile (kind != {cls.kind!r})", where)
        if d.get("version") == UNCALIBRATED_VERSION:
            raise DataError("an uncalibrated OOD profile of version 1: re-run calibrate and re-export", where)
        if d.get("version") != cls.version:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {cls.version})", where)
        keys = {"kind", "version", "rows", "quantiles", "margin", "min_share", "shapes", "question_words"}
        keys |= {"embedding", "calibration"}
        extra, missing = sorted(set(d) - keys), sorted(keys - set(d))
        if extra or missing:
            raise DataError(f"unknown key(s) {extra}" if extra else f"missing key(s) {missing}", where)
        rows = d["rows"]
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise DataError(f"rows must be an integer >= 1, got {rows!r}", where)
        quantiles = d["quantiles"]
        if not (isinstance(quantiles, list) and len(quantiles) == 2 and all(_number(q) for q in quantiles)):
            raise DataError("quantiles must be [low, high], two numbers", where)
        calibration = _calibration(d["calibration"], where)
        _check_settings((quantiles[0], quantiles[1]), d["margin"], d["min_share"], calibration["target_fpr"], where)
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
        return cls(
            shapes={str(k): int(v) for k, v in shapes.items()},
            question_words={k: float(v) for k, v in d["question_words"].items()},
            rows=rows,
            embedding=_embedding(d["embedding"], tensors or {}, rows, where),
            calibration=calibration,
            quantiles=(float(quantiles[0]), float(quantiles[1])),
            margin=float(d["margin"]),
            min_share=float(d["min_share"]),
        )


def _calibration(record: Any, where: str) -> dict[str, Any]:
    keys = {"target_fpr", "split", "questions", "flag_rate", "rule_rate"}
    if not isinstance(record, dict) or set(record) != keys:
        raise DataError(f"calibration must be a mapping with exactly {sorted(keys)}", where)
    if record["split"] is not None and not isinstance(record["split"], str):
        raise DataError("calibration.split must be a split name or null", where)
    count = record["questions"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DataError("calibration.questions must be an integer >= 1", where)
    for name in ("target_fpr", "flag_rate", "rule_rate"):
        if not (_number(record[name]) and 0.0 <= record[name] <= 1.0):
            raise DataError(f"calibration.{name} must be a number in [0, 1]", where)
    return dict(record)


def _embedding(record: Any, tensors: Mapping[str, Any], rows: int, where: str) -> EmbeddingCheck | None:
    if record is None:
        if tensors:
            raise DataError("tensors without an embedding check", where)
        return None
    if not isinstance(record, dict) or set(record) != {"neighbours", "embedder", "threshold", "dim"}:
        raise DataError("embedding must be a mapping with exactly [dim, embedder, neighbours, threshold]", where)
    neighbours, dim, threshold = record["neighbours"], record["dim"], record["threshold"]
    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or not 1 <= neighbours < rows:
        raise DataError(f"embedding.neighbours must be an integer in [1, rows), got {neighbours!r}", where)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise DataError(f"embedding.dim must be an integer >= 1, got {dim!r}", where)
    if threshold is not None and not _number(threshold):
        raise DataError("embedding.threshold must be a finite number or null", where)
    if not isinstance(record["embedder"], str):
        raise DataError("embedding.embedder must be a fingerprint string", where)
    if set(tensors) != {"center", "reference"}:
        raise DataError("the embedding check needs exactly the tensors center and reference", where)
    center, reference = np.asarray(tensors["center"]), np.asarray(tensors["reference"])
    if center.shape != (dim,) or reference.shape != (rows, dim):
        raise DataError(f"embedding tensors must be center ({dim},) and reference ({rows}, {dim})", where)
    if center.dtype != np.float32 or reference.dtype != np.float32:
        raise DataError("embedding tensors must be float32", where)
    if not (np.isfinite(center).all() and np.isfinite(reference).all()):
        raise DataError("embedding tensors hold a non-finite value", where)
    return EmbeddingCheck(center, reference, neighbours, record["embedder"], None if threshold is None else threshold)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _check_settings(quantiles: Sequence[Any], margin: Any, min_share: Any, target_fpr: Any, where: str) -> None:
    lo, hi = quantiles
    if not (_number(lo) and _number(hi) and 0.0 <= lo < hi <= 1.0):
        raise DataError(f"quantiles must satisfy 0 <= low < high <= 1, got {list(quantiles)}", where)
    if not (_number(margin) and margin >= 0):
        raise DataError(f"margin must be a number >= 0, got {margin!r}", where)
    if not (_number(min_share) and 0.0 <= min_share <= 1.0):
        raise DataError(f"min_share must be in [0, 1], got {min_share!r}", where)
    if not (_number(target_fpr) and 0.0 < target_fpr < 1.0):
        raise DataError(f"target_fpr must be in (0, 1), got {target_fpr!r}", where)


def _check_record(record: Any, keys: tuple[str, ...], name: str, where: str) -> None:
    if not isinstance(record, dict) or set(record) != set(keys):
        raise DataError(f"{name} must be a mapping with exactly {list(keys)}", where)
    if not all(_number(record[k]) for k in keys):
        raise DataError(f"{name} must hold finite numbers", where)
    if not record["min"] <= record["q_lo"] <= record["q_hi"] <= record["max"]:
        raise DataError(f"{name} must satisfy min <= q_lo <= q_hi <= max", where)
