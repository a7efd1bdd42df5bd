"""DENSE-RAG's pure decisions (spec §4.7–4.8, §5, §7.3): the chunk classes from the answers' entailment verdicts
(eqs. 8–10), the refill and top-up of a context, Alg. 3's best-context update and stop test, SELECT_ANSWER, and the
self-evaluation reply's parse. No model call: every function takes verdicts, vectors or texts and returns a
decision, so each is tested by hand."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from workbench.methods.dense_rag.settings import NECESSITY_RULES
from workbench.metrics.qa import normalize_answer
from workbench.uncertainty.graph_math import ENTAILMENT

__all__ = [
    "CERTAIN",
    "NECESSARY",
    "UNNECESSARY",
    "classify_chunks",
    "entailment_verdicts",
    "is_better",
    "is_certain",
    "is_unchanged",
    "parse_self_evaluation",
    "refill",
    "select_answer",
    "should_stop",
    "top_up",
    "uncertain_positions",
]

CERTAIN, NECESSARY, UNNECESSARY = "certain", "necessary", "unnecessary"
_YES_NO = re.compile(r"\b(yes|no)\b", flags=re.IGNORECASE)


def entailment_verdicts(probs: np.ndarray) -> np.ndarray:
    """Directional verdicts ``E[i, j] = NLI(r_i ⇒ r_j)`` (argmax = entailment) from (n, n, 3) probs; E_ii = True."""
    arr = np.asarray(probs, dtype=float)
    verdicts = arr.argmax(axis=-1) == ENTAILMENT if arr.size else np.zeros(arr.shape[:2], dtype=bool)
    np.fill_diagonal(verdicts, True)
    return verdicts


def is_unchanged(forward: bool, backward: bool, rule: str = "code_oneway") -> bool:
    """Whether masking a chunk left r₀ unchanged (→ the chunk is *unnecessary*), spec §7.3 UNCHANGED.

    ``forward`` = NLI(r₀ ⇒ ar), ``backward`` = NLI(ar ⇒ r₀). ``code_oneway``: backward; ``alg3_bidirectional``: both;
    ``eq10_both_zero``: either (necessary only when neither direction holds, eq. 10).
    """
    if rule == "code_oneway":
        return bool(backward)
    if rule == "alg3_bidirectional":
        return bool(forward and backward)
    if rule == "eq10_both_zero":
        return bool(forward or backward)
    raise ValueError(f"unknown necessity rule {rule!r}; use one of {', '.join(NECESSITY_RULES)}")


def uncertain_positions(verdicts: np.ndarray) -> list[int]:
    """Chunk positions (0-based) whose rephrasing broke mutual entailment with r₀ (eq. 8: w_{i,0} < 1)."""
    e = np.asarray(verdicts, dtype=bool)
    return [i - 1 for i in range(1, len(e)) if not (e[i, 0] and e[0, i])]


def classify_chunks(
    verdicts: np.ndarray, ablation: Mapping[int, tuple[bool, bool]], rule: str = "code_oneway"
) -> list[str]:
    """One class per context chunk (spec §4.7, eqs. 8–10): ``certain`` / ``necessary`` / ``unnecessary``.

    ``verdicts`` is the (m+1, m+1) directional entailment matrix over R (index 0 = r₀, index i = chunk i − 1
    rephrased). A chunk is certain when r_i and r₀ entail each other; otherwise ``ablation[position]`` =
    (NLI(r₀ ⇒ ar), NLI(ar ⇒ r₀)) for the answer without the chunk decides by :func:`is_unchanged` (unchanged →
    unnecessary, else necessary). ``KeyError`` when an uncertain chunk has no ablation verdicts.
    """
    e = np.asarray(verdicts, dtype=bool)
    uncertain = set(uncertain_positions(e))
    classes: list[str] = []
    for position in range(len(e) - 1):
        if position not in uncertain:
            classes.append(CERTAIN)
            continue
        if position not in ablation:
            raise KeyError(f"uncertain chunk {position} has no ablation verdicts")
        forward, backward = ablation[position]
        classes.append(UNNECESSARY if is_unchanged(forward, backward, rule) else NECESSARY)
    return classes


def refill(anchors: Sequence[int], vectors: np.ndarray, candidates: Sequence[int], kept: int, k: int) -> list[int]:
    """Pool indices to add: for each anchor (context order) the candidate with the highest cosine to it (spec §7.3).

    ``vectors`` are the pool's L2-normalised rows; ``candidates`` the unvisited pool indices in rank order (ties go
    to the better-ranked one); a candidate is picked once. ``kept`` is the context size after pruning: after the
    first pick, picking stops once ``kept + picked`` reaches ``k`` (so the context holds at most k + 1 chunks, [R]).
    """
    vectors = np.asarray(vectors, dtype=float)
    added: list[int] = []
    for anchor in anchors:
        if added and kept + len(added) >= k:
            break
        free = [c for c in candidates if c not in added]
        if not free:
            break
        similarity = vectors[free] @ vectors[anchor]
        added.append(free[int(np.argmax(similarity))])
    return added


def top_up(context: Sequence[int], order: Sequence[int], visited: set[int] | frozenset[int], k: int) -> list[int]:
    """``context`` filled up to ``k`` with unvisited indices taken in ``order`` (pool rank order) [C]."""
    out = list(context)
    for index in order:
        if len(out) >= k:
            break
        if index not in visited and index not in out:
            out.append(index)
    return out


def is_better(dse: float, flag: int, dse_min: float, flag_best: int) -> bool:
    """Alg 3's best-context update with ``≤`` (A22): lower-or-equal DSE, unless that would trade a sufficient best
    (``flag_best = 1``) for an insufficient context."""
    return dse <= dse_min and (flag_best == 0 or flag == 1)


def should_stop(dse_min: float, flag: int, theta: float = 0.2, rule: str = "and") -> bool:
    """Refinement success test: ``and`` = DSE_min < θ and the context judged sufficient (Alg 3, default);
    ``or`` = either one (the prose of §5.2). Without self-evaluation pass ``flag = 1`` (DSE alone decides)."""
    low = dse_min < theta
    if rule == "and":
        return bool(low and flag == 1)
    if rule == "or":
        return bool(low or flag == 1)
    raise ValueError(f"unknown stop rule {rule!r}; use 'and' or 'or'")


def is_certain(dse: float, theta: float) -> bool:
    """DENSE's triage (spec §4.7, Alg. 1): the model understands its context iff DSE ≤ θ; an uncertain one (DSE > θ,
    or NaN: no answer) goes on to semantic chunking and refinement."""
    return bool(dse <= theta)


def select_answer(answers: Sequence[str]) -> str:
    """SELECT_ANSWER (spec §4.8): the unique most frequent normalised answer of R, else r₀ on a tie.

    Returns the first response (in R order) with the winning normalised form, as generated (stripped); ``""`` for
    an empty R.
    """
    if not answers:
        return ""
    normal = [normalize_answer(a) for a in answers]
    counts = Counter(normal).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return answers[0].strip()
    winner = counts[0][0]
    return answers[normal.index(winner)].strip()


def parse_self_evaluation(reply: str) -> int | None:
    """1 for "yes", 0 for "no" (the first of the two whole words in the reply), None when neither occurs."""
    match = _YES_NO.search(reply or "")
    if match is None:
        return None
    return 1 if match.group(1).lower() == "yes" else 0
