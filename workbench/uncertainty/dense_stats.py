"""DENSE stats: greedy answers under single-edit rephrased contexts and their NLI matrix (DENSE spec §4.2–4.5).

For a question q with retrieved chunks C₀ = [c₁..c_k] (DENSE Alg. 1, defects fixed as the spec's §4.1 says):

1. every chunk is rephrased **alone** by the same LM (eq. 3): c′ᵢ = f(p_r(cᵢ)) — one batched generate call over
   every distinct chunk of the batch (a chunk shared by two questions is rephrased once);
2. the k single-edit contexts Cᵢ = C₀ with position i replaced by c′ᵢ (eq. 4), plus C₀ itself at index 0;
3. one greedy answer per context, r₀..r_k (one batched generate call over all questions' k + 1 contexts);
4. the NLI probabilities between the distinct answers of each question (one ``judge.entail`` call for the batch).

The result per question is ``dense_answers`` (k + 1 strings, index 0 = original context) and ``dense_nli_probs``
((k+1, k+1, 3), contradiction / neutral / entailment; equal strings get (0, 0, 1) without a call), which
:class:`~workbench.uncertainty.features.dense.Dense` turns into the degree-based semantic entropy (eq. 6).

Choices (spec §4.2 [R]): the rephraser decodes greedily by default (``rephrase_temperature = 0``: fully
deterministic; the authors' code samples at T = 0.5); typical preambles ("Here is the rewritten text:") and wrapping
quotes are removed; an empty rephrasing falls back to the original chunk and is counted in ``dense_fallbacks``. The
NLI judge is the run's judge (the paper prompts the generator itself; ``nli.kind = llm`` does that).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.backends.prompts import number_chunks
from workbench.core.errors import ConfigError

REPHRASE_PROMPT = (
    "Write the passage below again in different words. Keep every name, date, number and fact; add nothing new. "
    "Reply with the new passage only.\nPassage: {chunk}"
)
_PREAMBLE = re.compile(
    r"^\s*(?:sure[,!.]?\s*)?(?:here\s+is|here's|here\s+are)\b[^:\n]{0,60}:\s*", flags=re.IGNORECASE | re.DOTALL
)
_QUOTES = "\"'“”‘’"


@dataclass(frozen=True)
class DenseSettings:
    """How DENSE's contexts and answers are produced.

    ``rephrase_temperature`` 0 = greedy rephrasing (deterministic), > 0 samples (seeded by ``seed``);
    ``rephrase_max_new_tokens`` caps each rephrasing; ``answer_max_new_tokens`` and ``stop`` apply to the k + 1
    greedy answers. The answering system prompt is passed to :func:`dense_stats` (the stats graph passes its own,
    so r₀ is the run's RAG answer).
    """

    rephrase_temperature: float = 0.0
    rephrase_max_new_tokens: int = 96
    answer_max_new_tokens: int = 16
    stop: tuple[str, ...] = ("\n",)
    seed: int | None = None

    def validate(self) -> None:
        """Raise :class:`ConfigError` on out-of-range settings."""
        if self.rephrase_temperature < 0:
            raise ConfigError("rephrase_temperature must be >= 0", "DenseSettings")
        if self.rephrase_max_new_tokens < 1 or self.answer_max_new_tokens < 1:
            raise ConfigError("token caps must be >= 1", "DenseSettings")


def clean_rephrasing(text: str, original: str) -> tuple[str, bool]:
    """``(rephrased chunk, fell_back)``: preamble and wrapping quotes removed; empty → ``(original, True)``."""
    cleaned = _PREAMBLE.sub("", text.strip(), count=1).strip()
    if len(cleaned) >= 2 and cleaned[0] in _QUOTES and cleaned[-1] in _QUOTES:
        cleaned = cleaned[1:-1].strip()
    if not cleaned:
        return original, True
    return cleaned, False


def single_edit_contexts(chunks: Sequence[str], rephrased: Sequence[str]) -> list[list[str]]:
    """[C₀, C₁..C_k]: C₀ = ``chunks``; Cᵢ = C₀ with position i replaced by ``rephrased[i - 1]`` (DENSE eq. 4)."""
    if len(chunks) != len(rephrased):
        raise ValueError(f"{len(chunks)} chunks but {len(rephrased)} rephrasings")
    contexts = [list(chunks)]
    for i, new in enumerate(rephrased):
        edited = list(chunks)
        edited[i] = new
        contexts.append(edited)
    return contexts


def dense_stats(
    questions: Sequence[str],
    chunk_lists: Sequence[Sequence[str]],
    *,
    generator: Any,
    judge: Any,
    system: str,
    settings: DenseSettings | None = None,
) -> list[dict[str, Any]]:
    """DENSE's stats for each question and its ranked chunks (three batched calls, see the module docstring).

    Returns one dict per question: ``dense_answers``, ``dense_nli_probs``, ``dense_rephrased`` (the k rephrased
    chunks) and ``dense_fallbacks`` (rephrasings that came back empty). A question with no chunks gets empty
    ``dense_answers`` (the DENSE feature is then NaN): without retrieved context there is nothing to rephrase.
    """
    settings = settings or DenseSettings()
    settings.validate()
    if len(questions) != len(chunk_lists):
        raise ValueError(f"{len(questions)} questions but {len(chunk_lists)} chunk lists")
    distinct = list(dict.fromkeys(c for chunks in chunk_lists for c in chunks))
    rephrased_of: dict[str, tuple[str, bool]] = {}
    if distinct:
        chats = [generator.render_chat(REPHRASE_PROMPT.format(chunk=c)) for c in distinct]
        outputs = generator.generate(
            chats,
            temperature=settings.rephrase_temperature,
            max_new_tokens=settings.rephrase_max_new_tokens,
            stop=("\n\n",),
            seed=settings.seed,
        )
        rephrased_of = {c: clean_rephrasing(o.text, c) for c, o in zip(distinct, outputs, strict=True)}

    prompts: list[str] = []
    spans: list[tuple[int, int]] = []
    for question, chunks in zip(questions, chunk_lists, strict=True):
        start = len(prompts)
        if chunks:
            for context in single_edit_contexts(chunks, [rephrased_of[c][0] for c in chunks]):
                built = generator.build_prompt(
                    question, number_chunks(context), max_new_tokens=settings.answer_max_new_tokens, system=system
                )
                prompts.append(built.text)
        spans.append((start, len(prompts) - start))
    answers: list[str] = []
    if prompts:
        greedy = generator.generate(
            prompts, temperature=0.0, max_new_tokens=settings.answer_max_new_tokens, stop=settings.stop
        )
        answers = [g.text.strip() for g in greedy]

    out: list[dict[str, Any]] = []
    premises: list[str] = []
    hypotheses: list[str] = []
    asked: list[str] = []
    plans: list[tuple[list[str], list[str], int]] = []
    for question, chunks, (start, size) in zip(questions, chunk_lists, spans, strict=True):
        these = answers[start : start + size]
        distinct_answers = list(dict.fromkeys(these))
        plans.append((these, distinct_answers, len(premises)))
        for a in distinct_answers:
            for b in distinct_answers:
                if a != b:
                    premises.append(a)
                    hypotheses.append(b)
                    asked.append(question)
        out.append(
            {
                "dense_rephrased": [rephrased_of[c][0] for c in chunks],
                "dense_fallbacks": sum(1 for c in chunks if rephrased_of[c][1]),
            }
        )
    probs = np.asarray(judge.entail(premises, hypotheses, asked), dtype=np.float64) if premises else np.zeros((0, 3))
    for row, (these, distinct_answers, offset) in zip(out, plans, strict=True):
        row["dense_answers"] = these
        row["dense_nli_probs"] = _expand(these, distinct_answers, probs, offset)
    return out


def _expand(answers: list[str], distinct: list[str], probs: np.ndarray, offset: int) -> np.ndarray:
    """The (k+1, k+1, 3) matrix over ``answers`` from the distinct-pair probabilities (equal strings: (0, 0, 1))."""
    pair: dict[tuple[str, str], np.ndarray] = {}
    k = offset
    for a in distinct:
        for b in distinct:
            if a != b:
                pair[(a, b)] = probs[k]
                k += 1
    n = len(answers)
    matrix = np.zeros((n, n, 3), dtype=np.float64)
    for i, a in enumerate(answers):
        for j, b in enumerate(answers):
            matrix[i, j] = (0.0, 0.0, 1.0) if a == b else pair[(a, b)]
    return matrix
