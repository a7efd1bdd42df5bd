"""Short-answer matching against gold answers with aliases: normalised exact match, token F1, containment.

Normalisation follows the SQuAD convention: lower-case, drop punctuation and the articles a / an / the, collapse
white space. Every score takes the best over the gold aliases.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—"}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, strip punctuation and articles, collapse white space."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best bag-of-tokens F1 between the normalised prediction and any gold answer (0.0 with no golds)."""
    pred = normalize_answer(prediction).split()
    return max((_f1(pred, normalize_answer(g).split()) for g in golds), default=0.0)


def containment(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when any non-empty normalised gold answer occurs in the normalised prediction as whole words."""
    pred = f" {normalize_answer(prediction)} "
    return float(any((g := normalize_answer(gold)) and f" {g} " in pred for gold in golds))


def score_answer(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    """All three scores at once: ``{"em": ..., "f1": ..., "contains": ...}``."""
    return {
        "em": exact_match(prediction, golds),
        "f1": token_f1(prediction, golds),
        "contains": containment(prediction, golds),
    }
