"""Natural-language-inference judges behind one interface (layer 3).

``judge.entail(premises, hypotheses, question=None)`` returns an ``(n, 3)`` float array of probabilities in the
order :data:`NLI_LABELS` = (contradiction, neutral, entailment). Identical (question, premise, hypothesis) triples
are computed once per call, and ``counter.nli_pairs`` counts the unique triples actually computed.

Backends (pick one with :func:`make_nli_judge`):

``"hf"``                  :class:`HFSequenceClassificationNLI` — any HF sequence-classification NLI checkpoint by
                          local path or, for users with a hub, an explicit id (e.g. a DeBERTa-MNLI; opt-in only,
                          never a default). Output columns are mapped through the model's ``id2label``.
``"cross_encoder"``       :class:`CrossEncoderNLI` — the workbench's own MiniLM cross-encoder trained by
                          :mod:`workbench.backends.nli_train` (3 labels, safetensors + config).
``"answer_equivalence"``  :class:`AnswerEquivalenceJudge` — rules for short answers (normalised exact match,
                          containment, token F1, embedding cosine).

An LLM-as-judge backend can be added with :func:`register_nli_judge` (it needs the generator, a higher layer's
concern): subclass :class:`NLIJudge`, implement ``_predict``, register a factory under a new kind.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.device import resolve_device
from workbench.backends.embedder import TextEncoder
from workbench.core.errors import AssetError, ConfigError, DataError
from workbench.core.hashing import stable_hash, tree_fingerprint
from workbench.data.nli_labels import CONTRADICTION, ENTAILMENT, NEUTRAL, NLI_LABELS
from workbench.metrics.qa import containment, exact_match, normalize_answer, token_f1

log = logging.getLogger(__name__)

QuestionArg = str | Sequence[str] | None


def with_question(question: str, text: str) -> str:
    """The text a question-aware NLI model sees: ``"Question: <q>\\n<text>"`` (just ``text`` for an empty q)."""
    return f"Question: {question}\n{text}" if question else text


class NLIJudge(ABC):
    """Base class of every NLI backend: validation, de-duplication, counting and label order live here.

    Subclasses implement ``_predict(premises, hypotheses, questions)`` for unique triples and return an ``(m, 3)``
    array of probabilities in :data:`NLI_LABELS` order.
    """

    kind: str = "base"

    def __init__(self, *, counter: CostCounter | None = None) -> None:
        self.counter = counter if counter is not None else CostCounter()

    @property
    def fingerprint(self) -> str:
        """Identifies this judge's outputs (for cache keys); subclasses fold in weights and thresholds."""
        return stable_hash([self.kind])

    def entail(self, premises: Sequence[str], hypotheses: Sequence[str], question: QuestionArg = None) -> np.ndarray:
        """Probabilities ``(n, 3)`` (contradiction, neutral, entailment) that each premise entails its hypothesis.

        ``question`` is one string for every pair or one per pair; it is prepended to both sides by text models.
        """
        premises, hypotheses = list(premises), list(hypotheses)
        if len(premises) != len(hypotheses):
            raise DataError(f"{len(premises)} premises but {len(hypotheses)} hypotheses", f"{self.kind} NLI")
        questions = _expand_questions(question, len(premises), self.kind)
        out = np.zeros((len(premises), 3), dtype=np.float32)
        if not premises:
            return out
        triples = list(zip(questions, premises, hypotheses, strict=True))
        unique = list(dict.fromkeys(triples))
        with self.counter.timed(f"nli:{self.kind}"):
            probs = np.asarray(self._predict([t[1] for t in unique], [t[2] for t in unique], [t[0] for t in unique]))
        if probs.shape != (len(unique), 3):
            raise DataError(f"backend returned shape {probs.shape}, expected ({len(unique)}, 3)", f"{self.kind} NLI")
        self.counter.nli_pairs += len(unique)
        row = {triple: i for i, triple in enumerate(unique)}
        out[:] = probs[[row[t] for t in triples]]
        return out

    def labels(self, premises: Sequence[str], hypotheses: Sequence[str], question: QuestionArg = None) -> np.ndarray:
        """Argmax label index per pair (0 contradiction, 1 neutral, 2 entailment)."""
        return self.entail(premises, hypotheses, question).argmax(axis=1)

    @abstractmethod
    def _predict(self, premises: list[str], hypotheses: list[str], questions: list[str]) -> np.ndarray:
        """Probabilities for unique triples (questions are ``""`` when none was given)."""


def _expand_questions(question: QuestionArg, n: int, kind: str) -> list[str]:
    if question is None:
        return [""] * n
    if isinstance(question, str):
        return [question] * n
    questions = ["" if q is None else str(q) for q in question]
    if len(questions) != n:
        raise DataError(f"{len(questions)} questions for {n} pairs", f"{kind} NLI")
    return questions


# ----------------------------------------------------------------------------------------- HF classifiers


def label_permutation(id2label: dict[int, str] | None, label_order: Sequence[str] | None = None) -> list[int]:
    """For each of :data:`NLI_LABELS`, the model output column holding it.

    ``label_order`` (the model's labels by output index, e.g. ``("entailment", "neutral", "contradiction")``) wins
    over ``id2label``; names are matched case-insensitively by prefix (``contra…``, ``neutral``, ``entail…``).
    Raises :class:`AssetError` when the labels are generic (``LABEL_0``) or incomplete.
    """
    names = list(label_order) if label_order is not None else [id2label[i] for i in sorted(id2label or {})]
    canonical = [_canonical_label(str(name)) for name in names]
    if len(names) != 3 or sorted(c for c in canonical if c) != sorted(NLI_LABELS):
        raise AssetError(
            f"cannot map labels {names} to {list(NLI_LABELS)}; pass label_order=[...] in the model's output order",
            "NLI labels",
        )
    return [canonical.index(label) for label in NLI_LABELS]


def _canonical_label(name: str) -> str | None:
    name = name.strip().lower()
    for label, prefix in (("contradiction", "contra"), ("neutral", "neutral"), ("entailment", "entail")):
        if name.startswith(prefix):
            return label
    return None


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


class HFSequenceClassificationNLI(NLIJudge):
    """Any HF ``AutoModelForSequenceClassification`` NLI checkpoint, by local path or explicit hub id.

    Pairs are encoded as (premise, hypothesis), truncating the premise first to ``max_length`` tokens, in batches of
    ``batch_size`` sorted by length; softmax over the logits is re-ordered to :data:`NLI_LABELS` via ``id2label``
    or ``label_order``. ``device`` is resolved by :func:`~workbench.backends.device.resolve_device` (``auto``
    picks a GPU when torch sees one; an unusable device is a one-line ConfigError).
    """

    kind = "hf"

    def __init__(
        self,
        model_path: str | Path,
        label_order: Sequence[str] | None = None,
        *,
        batch_size: int = 16,
        max_length: int = 256,
        device: str = "cpu",
        counter: CostCounter | None = None,
    ) -> None:
        super().__init__(counter=counter)
        self.model_path = str(model_path)
        self.batch_size, self.max_length, self.device = batch_size, max_length, resolve_device(device)
        self._tokenizer, self._model = self._load()
        id2label = {int(k): v for k, v in (self._model.config.id2label or {}).items()}
        self.columns = label_permutation(id2label, label_order)
        self._fingerprint = stable_hash([self.kind, self._weights_fingerprint(), self.columns, max_length])

    def _load(self) -> tuple[Any, Any]:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            model = AutoModelForSequenceClassification.from_pretrained(self.model_path)
        except (OSError, ValueError) as exc:
            raise AssetError(f"cannot load NLI model: {str(exc).splitlines()[0]}", self.model_path) from exc
        model.to(self.device).eval()
        return tokenizer, model

    def _weights_fingerprint(self) -> str:
        path = Path(self.model_path)
        return tree_fingerprint(path) if path.is_dir() else stable_hash(["hub", self.model_path])

    @property
    def fingerprint(self) -> str:
        """Hash of the weights (a local directory's contents), label mapping and max length."""
        return self._fingerprint

    def _predict(self, premises: list[str], hypotheses: list[str], questions: list[str]) -> np.ndarray:
        import torch

        firsts = [with_question(q, p) for q, p in zip(questions, premises, strict=True)]
        seconds = [with_question(q, h) for q, h in zip(questions, hypotheses, strict=True)]
        order = np.argsort([-(len(a) + len(b)) for a, b in zip(firsts, seconds, strict=True)], kind="stable")
        probs = np.zeros((len(firsts), 3), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self._tokenizer(
                    [firsts[i] for i in idx],
                    [seconds[i] for i in idx],
                    padding=True,
                    truncation="longest_first",
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                logits = self._model(**batch).logits.float().cpu().numpy()
                probs[idx] = _softmax(logits)[:, self.columns]
        return probs


CROSS_ENCODER_MARKER = "workbench_nli.json"


class CrossEncoderNLI(HFSequenceClassificationNLI):
    """The workbench's own MiniLM NLI cross-encoder, as saved by
    :func:`workbench.backends.nli_train.train_cross_encoder`: a directory with ``model.safetensors``, a
    ``config.json`` naming the three NLI labels, the tokenizer and ``workbench_nli.json``."""

    kind = "cross_encoder"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        batch_size: int = 16,
        max_length: int | None = None,
        device: str = "cpu",
        counter: CostCounter | None = None,
    ) -> None:
        path = Path(model_dir)
        if not (path / CROSS_ENCODER_MARKER).is_file() or not (path / "model.safetensors").is_file():
            raise AssetError(
                f"not a workbench NLI cross-encoder (needs model.safetensors and {CROSS_ENCODER_MARKER}); "
                "train one with workbench.backends.nli_train.train_cross_encoder",
                str(path),
            )
        self.info = _read_marker(path)
        if max_length is None:
            max_length = int(self.info.get("settings", {}).get("max_length", 256))
        super().__init__(path, batch_size=batch_size, max_length=max_length, device=device, counter=counter)


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        info = json.loads((path / CROSS_ENCODER_MARKER).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AssetError(f"unreadable {CROSS_ENCODER_MARKER}: {exc}", str(path)) from exc
    return info if isinstance(info, dict) else {}


# ----------------------------------------------------------------------------------------- short answers


class AnswerEquivalenceJudge(NLIJudge):
    """Rule-based equivalence of short answers (premise = answer A, hypothesis = answer B; the question is ignored).

    Mapping to probabilities (one-hot, blended with ``smoothing``: ``p = (1 - ε)·onehot + ε/3``):

    - **entailment** if any rule fires: normalised exact match; either normalised answer contained in the other as
      whole words (``use_containment``); token F1 ``>= f1_entail``; embedding cosine ``>= cosine_entail`` (only with
      an ``embedder``);
    - **neutral** otherwise, if token F1 ``>= f1_neutral`` or cosine ``>= cosine_neutral`` (a middling overlap),
      or if either answer normalises to the empty string (nothing to compare);
    - **contradiction** otherwise (short answers that share nothing name different things).
    """

    kind = "answer_equivalence"

    def __init__(
        self,
        embedder: TextEncoder | None = None,
        *,
        f1_entail: float = 0.8,
        f1_neutral: float = 0.4,
        cosine_entail: float = 0.9,
        cosine_neutral: float = 0.75,
        use_containment: bool = True,
        smoothing: float = 0.0,
        counter: CostCounter | None = None,
    ) -> None:
        super().__init__(counter=counter)
        if not (0.0 <= f1_neutral <= f1_entail <= 1.0) or not (-1.0 <= cosine_neutral <= cosine_entail <= 1.0):
            raise ConfigError("thresholds must satisfy neutral <= entail within range", "AnswerEquivalenceJudge")
        if not 0.0 <= smoothing < 1.0:
            raise ConfigError(f"smoothing must be in [0, 1), got {smoothing}", "AnswerEquivalenceJudge")
        self.embedder = embedder
        self.thresholds = {
            "f1_entail": f1_entail,
            "f1_neutral": f1_neutral,
            "cosine_entail": cosine_entail,
            "cosine_neutral": cosine_neutral,
        }
        self.use_containment, self.smoothing = use_containment, smoothing

    @property
    def fingerprint(self) -> str:
        """Hash of the thresholds, rules and the embedder's fingerprint."""
        emb = self.embedder.fingerprint if self.embedder is not None else None
        return stable_hash([self.kind, self.thresholds, self.use_containment, self.smoothing, emb])

    def scores(self, answers_a: Sequence[str], answers_b: Sequence[str]) -> dict[str, np.ndarray]:
        """The raw rule scores per pair: ``em``, ``contains`` (either direction), ``f1``, ``cosine`` (NaN without
        an embedder)."""
        em = np.array([exact_match(a, [b]) for a, b in zip(answers_a, answers_b, strict=True)])
        contains = np.array(
            [max(containment(a, [b]), containment(b, [a])) for a, b in zip(answers_a, answers_b, strict=True)]
        )
        f1 = np.array([token_f1(a, [b]) for a, b in zip(answers_a, answers_b, strict=True)])
        return {"em": em, "contains": contains, "f1": f1, "cosine": self._cosines(answers_a, answers_b)}

    def _cosines(self, answers_a: Sequence[str], answers_b: Sequence[str]) -> np.ndarray:
        if self.embedder is None or not answers_a:
            return np.full(len(answers_a), np.nan)
        texts = list(dict.fromkeys([*answers_a, *answers_b]))
        vectors = self.embedder.encode(texts)
        row = {t: i for i, t in enumerate(texts)}
        a = vectors[[row[t] for t in answers_a]]
        b = vectors[[row[t] for t in answers_b]]
        return np.sum(a * b, axis=1)

    def _predict(self, premises: list[str], hypotheses: list[str], questions: list[str]) -> np.ndarray:
        s = self.scores(premises, hypotheses)
        t = self.thresholds
        cosine = np.nan_to_num(s["cosine"], nan=-np.inf)
        contains = s["contains"] > 0 if self.use_containment else np.zeros(len(premises), dtype=bool)
        entail = (s["em"] > 0) | contains | (s["f1"] >= t["f1_entail"]) | (cosine >= t["cosine_entail"])
        empty = np.array(
            [not normalize_answer(a) or not normalize_answer(b) for a, b in zip(premises, hypotheses, strict=True)]
        )
        middling = (s["f1"] >= t["f1_neutral"]) | (cosine >= t["cosine_neutral"]) | empty
        label = np.where(entail & ~empty, ENTAILMENT, np.where(middling, NEUTRAL, CONTRADICTION))
        onehot = np.eye(3, dtype=np.float32)[label]
        return (1.0 - self.smoothing) * onehot + self.smoothing / 3.0


# ----------------------------------------------------------------------------------------- registry

_REGISTRY: dict[str, Callable[..., NLIJudge]] = {}


def register_nli_judge(kind: str) -> Callable[[Callable[..., NLIJudge]], Callable[..., NLIJudge]]:
    """Decorator registering a factory (a class or function returning an :class:`NLIJudge`) under ``kind``."""

    def decorate(factory: Callable[..., NLIJudge]) -> Callable[..., NLIJudge]:
        if kind in _REGISTRY and _REGISTRY[kind] is not factory:
            raise ConfigError(f"NLI judge kind '{kind}' is already registered", "register_nli_judge")
        _REGISTRY[kind] = factory
        return factory

    return decorate


def nli_judge_kinds() -> list[str]:
    """The registered judge kinds, sorted."""
    return sorted(_REGISTRY)


def make_nli_judge(kind: str, **kwargs: Any) -> NLIJudge:
    """Build the judge registered under ``kind`` with ``kwargs`` (e.g. ``make_nli_judge("hf", model_path=...)``)."""
    if kind not in _REGISTRY:
        raise ConfigError(f"unknown NLI judge '{kind}' (choose from {', '.join(nli_judge_kinds())})", "nli.kind")
    try:
        return _REGISTRY[kind](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad arguments for NLI judge '{kind}': {exc}", "nli") from exc


register_nli_judge("hf")(HFSequenceClassificationNLI)
register_nli_judge("cross_encoder")(CrossEncoderNLI)
register_nli_judge("answer_equivalence")(AnswerEquivalenceJudge)
