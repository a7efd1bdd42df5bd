"""DRAGIN's two rules on plain arrays (Su et al., 2024, "Dynamic Retrieval Augmented Generation based on the
Information Needs of LLMs"): RIND, the real-time information need of each word of an answer (§3.1), and QFS, the
query formed from the words the triggering token attends to most (§3.2). No model here: the method
(:mod:`workbench.methods.dragin.method`) reads the entropies and the attention matrix and hands them in.

Words, not tokens: like the released code, a word's entropy is the mean over its tokens and its attention influence
the sum over its tokens; words are found in the text (:func:`word_spans`) and tied to the tokens whose character
spans overlap them (:func:`token_groups`), so a tokenizer's sub-word pieces and its leading-space conventions do not
matter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from workbench.methods.dragin.rule import decide

__all__ = [
    "STOPWORDS",
    "attention_influence",
    "first_trigger",
    "is_significant",
    "qfs_query",
    "rind_scores",
    "token_groups",
    "word_spans",
]

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves s t d ll m o re ve y
"""

STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())
"""English function words: semantic significance s = 0 (§3.1). Our own short list (the paper filters stopwords,
the released code keeps spaCy's nouns, verbs, adjectives, proper nouns and numbers); the runtime may not import
scikit-learn's list, and it needs no tagger model."""

_WORD = re.compile(r"\w+(?:['’-]\w+)*")


def word_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the words of ``text[start:end]`` (runs of letters and digits, with inner
    apostrophes and hyphens), in ``text``'s coordinates."""
    end = len(text) if end is None else end
    return [(m.start() + start, m.end() + start) for m in _WORD.finditer(text[start:end])]


def token_groups(token_spans: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]]) -> list[list[int]]:
    """For each word span, the indices of the tokens whose (non-empty) character span overlaps it, in order; a
    special token's empty span overlaps nothing."""
    return [
        [t for t, (a, b) in enumerate(token_spans) if a < b and a < w_end and w_start < b] for w_start, w_end in words
    ]


def is_significant(word: str) -> bool:
    """Semantic significance s (§3.1): False for a stopword (:data:`STOPWORDS`, case-insensitive) and for a word
    without a letter or digit, True otherwise."""
    return any(c.isalnum() for c in word) and word.lower() not in STOPWORDS


def attention_influence(attention: np.ndarray) -> np.ndarray:
    """a_max(i) = max_{j > i} A_{j,i} (§3.1): the largest attention any later token of the answer pays to token i.
    ``attention``: ``(n, n)`` post-softmax weights among the answer's tokens (rows: queries, columns: keys; the
    method averages the last layer's heads). The last token has no later token: 0."""
    attention = np.asarray(attention, dtype=np.float64)
    n = attention.shape[0]
    out = np.zeros(n)
    for i in range(n - 1):
        out[i] = attention[i + 1 :, i].max()
    return out


def rind_scores(
    entropies: Sequence[float], influence: Sequence[float], groups: Sequence[Sequence[int]], significant: Sequence[bool]
) -> np.ndarray:
    """RIND of each word (§3.1): S_RIND(t_i) = H_i · a_max(i) · s_i, with H_i the entropy of the word's tokens'
    next-token distributions (their mean, in nats), a_max(i) the sum of its tokens' :func:`attention_influence`
    and s_i its significance. As in the released code, the influences are rescaled to average 1 over the answer's
    words (``attns / sum(attns) * len``), so the threshold does not move with the answer's length; a word with no
    token, or an answer whose influences are all 0, scores 0."""
    entropies = np.asarray(entropies, dtype=np.float64)
    influence = np.asarray(influence, dtype=np.float64)
    h = np.array([entropies[g].mean() if len(g) else 0.0 for g in groups])
    a = np.array([influence[g].sum() if len(g) else 0.0 for g in groups])
    total = a.sum()
    share = a / total * len(groups) if total > 0 else np.zeros(len(groups))
    return h * share * np.asarray(significant, dtype=np.float64)


def first_trigger(scores: Sequence[float], threshold: float) -> int | None:
    """The index of the first word whose RIND exceeds ``threshold`` (:func:`~workbench.methods.dragin.rule.decide`):
    where the answer is cut and retrieval happens; None when no word does."""
    hits = np.flatnonzero(decide(np.asarray(scores, dtype=np.float64), threshold))
    return int(hits[0]) if hits.size else None


def qfs_query(weights: Sequence[float], groups: Sequence[Sequence[int]], words: Sequence[str], top_n: int) -> str:
    """QFS (§3.2): the query of the ``top_n`` significant words the triggering token attends to most, in their
    order in the text. ``weights``: the triggering token's attention on each earlier position; a word weighs the
    sum over its tokens. Ties go to the earlier word; an empty string when no significant word is attended."""
    weights = np.asarray(weights, dtype=np.float64)
    scored = [
        (float(weights[g].sum()), i)
        for i, (g, word) in enumerate(zip(groups, words, strict=True))
        if g and is_significant(word)
    ]
    kept = sorted(sorted(scored, key=lambda x: (-x[0], x[1]))[:top_n], key=lambda x: x[1])
    return " ".join(words[i] for _, i in kept)
