"""The *given answer source* of the stats graph: existing answers turned into the
:class:`~workbench.backends.generation_types.Generation` objects the graph reads
(:func:`~workbench.uncertainty.calculators.compute_stats`'s ``answers=`` / ``samples=``), without generating them.

Each answer is teacher-forced after the same answer prompt the graph builds (``generator.score``: in-process, or a
served model's ``echo``), which gives its token ids, raw log-probs and entropies exactly as a greedy decode of those
tokens records them; the EOS token is scored and kept apart when the record says the answer ended with it. A record's
own ``logprobs`` are used as they are; entropies are then taken from the teacher-forced pass when it covers the same
number of tokens. What cannot be had for a row (no echo and no given log-probs, a tokenisation that differs from the
given log-probs, a served model's missing attention weights, given samples' hidden states) is returned as
``{stat: reason}``: the scorer leaves those stats out for that row, so the features reading them are NaN with the
reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.generation_types import Generation
from workbench.scoring.records import GivenText

ANSWER_TOKEN_STATS = frozenset(
    {"greedy_logprobs", "greedy_eos", "greedy_entropies", "token_importance", "token_relevance", "attention_logdiag"}
)
"""The stats read from the answer's tokens (all others read its text)."""

TOKEN_ALIGNED_STATS = frozenset({"token_importance", "token_relevance", "attention_logdiag"})
"""The stats that pair each answer token with its log-prob: they need the tokens the log-probs were given for."""

SAMPLE_TOKEN_STATS = frozenset({"sample_logprobs"})
"""The stats read from the samples' tokens."""

NO_HIDDEN = "needs the samples' hidden states: given samples have none (let score generate them)"
NO_ATTENTION = "needs the model's attention weights: only the in-process generator gives them"


@dataclass
class Forced:
    """One given text as a :class:`Generation` (``generation``) and the stats it cannot feed, with why (``missing``)."""

    generation: Generation
    missing: dict[str, str] = field(default_factory=dict)


def can_teacher_force(generator: Any) -> str | None:
    """None when ``generator`` can teacher-force an answer (in process, or a server with ``echo``), else the one-line
    reason why not."""
    capabilities = getattr(generator, "capabilities", None)
    if capabilities is None:
        return None
    if not capabilities.has("echo"):
        return "the served model gives no prompt log-probabilities (echo): the answer cannot be teacher-forced"
    if not capabilities.has("token_prompts"):
        return "the server takes no token-id prompts: echo cannot be read at the answer's tokens"
    if getattr(generator, "tokenizer", None) is None:
        return "no local tokenizer for the served model (--tokenizer): echo cannot be read at the answer's tokens"
    return None


def force_texts(generator: Any, prompts: Sequence[str], given: Sequence[GivenText], *, score: bool) -> list[Forced]:
    """Each ``given[i]`` after ``prompts[i]`` as a :class:`Forced`. ``score``: teacher-force them — in process over
    token ids (the record's ``token_ids``, else the tokenizer's split of its text, plus EOS when it ended with one:
    ``generator.prompt_logprobs``, one batched forward), on a served model with ``echo`` over the same ids sent as
    a token-id prompt (``generator.score``); without ``score`` only the given log-probs and the tokenizer's ids are
    used."""
    reason = can_teacher_force(generator) if score else "not teacher-forced"
    ids = [_token_ids(generator, g) for g in given]
    scored: list[Any] = [None] * len(given)
    if score and reason is None and hasattr(generator, "prompt_logprobs"):
        eos = generator.tokenizer.eos_token_id
        budget = generator.max_context
        heads = [
            generator.encode_prompt(p, max(budget - len(t) - int(g.eos), 1))
            for p, t, g in zip(prompts, ids, given, strict=True)
        ]
        seqs = [[*h, *t, *([eos] if g.eos else [])] for h, t, g in zip(heads, ids, given, strict=True)]
        for i, (head, read) in enumerate(zip(heads, generator.prompt_logprobs(seqs), strict=True)):
            scored[i] = (read.logprobs[len(head) - 1 :], read.entropies[len(head) - 1 :])
    elif score and reason is None:  # a served model: echo over the record's token ids, else the tokenizer's split
        for eos in (False, True):
            rows = [i for i, g in enumerate(given) if g.eos == eos]
            out = (
                generator.score(
                    [prompts[i] for i in rows],
                    [given[i].text for i in rows],
                    add_eos=eos,
                    continuation_ids=[given[i].token_ids for i in rows],
                )
                if rows
                else []
            )
            for i, read in zip(rows, out, strict=True):
                ids[i] = [int(t) for t in read.token_ids[: len(read.token_ids) - int(eos)]]
                scored[i] = (read.logprobs, read.entropies)
    return [
        _forced(prompt, g, np.asarray(t, dtype=np.int64), s, reason)
        for prompt, g, t, s in zip(prompts, given, ids, scored, strict=True)
    ]


def _token_ids(generator: Any, given: GivenText) -> list[int]:
    """The answer's token ids: the record's, else the tokenizer's split of its text (no special tokens)."""
    if given.token_ids is not None:
        return list(given.token_ids)
    return [int(t) for t in generator.tokenizer(given.text, add_special_tokens=False)["input_ids"]]


def _forced(prompt: str, given: GivenText, ids: np.ndarray, scored: Any, reason: str | None) -> Forced:
    """One :class:`Forced` from the teacher-forced ``(log-probs, entropies)`` (None: not scored, ``reason`` says
    why) of the answer tokens ``ids`` (EOS last in ``scored`` when the answer ended with it)."""
    lp = ent = None
    if scored is not None:
        lp, ent = np.asarray(scored[0], np.float32), np.asarray(scored[1], np.float32)
    missing: dict[str, str] = {}
    if given.logprobs is not None:
        values = np.asarray(given.logprobs, dtype=np.float32)
        if lp is None or len(lp) != len(values):
            ent = np.full(len(values), np.nan, dtype=np.float32)
            missing["greedy_entropies"] = (
                f"the given log-probs cover {len(values)} tokens, teacher-forcing {len(lp)}"
                if lp is not None
                else f"no entropies with given log-probs: {reason}"
            )
        if len(values) - int(given.eos) != len(ids):
            why = f"the given log-probs cover {len(values) - int(given.eos)} tokens, the tokenizer's split {len(ids)}"
            missing.update(dict.fromkeys(TOKEN_ALIGNED_STATS, why))
        lp = values
    elif lp is None:
        missing.update(dict.fromkeys(ANSWER_TOKEN_STATS, f"no token log-probs: {reason} and the record gives none"))
        lp = ent = np.zeros(len(ids), dtype=np.float32)
        if given.eos:
            lp = ent = np.zeros(len(ids) + 1, dtype=np.float32)
    assert ent is not None
    body = len(lp) - int(given.eos)
    generation = Generation(
        prompt=prompt,
        text=given.text,
        token_ids=ids,
        logprobs=lp[:body],
        logprobs_processed=np.zeros(body, dtype=np.float32),
        entropies=ent[:body],
        finish_reason="eos" if given.eos else "stop",
        eos_logprob=float(lp[-1]) if given.eos else None,
        eos_entropy=float(ent[-1]) if given.eos else None,
    )
    return Forced(generation, missing)
