"""Short-answer matching against gold answers with aliases: normalised exact match, token F1, containment.

Normalisation follows the SQuAD convention: lower-case, drop punctuation and the articles a / an / the, collapse
white space. Every score takes the best over the gold aliases.

Questions with ``options`` (either-or, multiple choice) are scored by the option the prediction names
(:func:`resolve_choice`): right when that is the gold option, wrong when it is another one or none.
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


_LETTER = re.compile(r"^\W*(?:answer\s*(?:is)?\s*:?\s*)?\(?([A-Z])\s*(?:[).:]|$)", re.IGNORECASE)


def resolve_choice(prediction: str, options: Sequence[str]) -> int:
    """The index of the option ``prediction`` names, or -1 when it names none or several.

    An option is named by its text (whole words after normalisation, as :func:`containment`; an option whose text
    lies inside a longer named option does not count twice) or, when the reply opens with a single letter
    ("B", "(b)", "B) Paris", "Answer: B"), by that letter (A = the first option).
    """
    named = [i for i, option in enumerate(options) if containment(prediction, [option])]
    named = [
        i
        for i in named
        if not any(j != i and normalize_answer(options[i]) in normalize_answer(options[j]) for j in named)
    ]
    if len(named) == 1:
        return named[0]
    if not named and (match := _LETTER.match(prediction.strip())):
        index = ord(match.group(1).upper()) - ord("A")
        if 0 <= index < len(options):
            return index
    return -1


def score_answer(prediction: str, golds: Sequence[str], options: Sequence[str] = ()) -> dict[str, float]:
    """All three scores at once: ``{"em": ..., "f1": ..., "contains": ...}``.

    With ``options`` (whose gold is ``golds[0]``), each score is 1.0 when :func:`resolve_choice` picks the gold
    option and 0.0 otherwise, and ``"format_ok"`` says whether the prediction named exactly one option (without
    options: whether it is non-empty after normalisation).
    """
    if options:
        choice = resolve_choice(prediction, options)
        right = float(choice >= 0 and normalize_answer(options[choice]) in {normalize_answer(g) for g in golds})
        return {"em": right, "f1": right, "contains": right, "format_ok": float(choice >= 0)}
    return {
        "em": exact_match(prediction, golds),
        "f1": token_f1(prediction, golds),
        "contains": containment(prediction, golds),
        "format_ok": float(bool(normalize_answer(prediction))),
    }
