"""P(True) and Verbalized Confidence from ONE forward pass over ONE prompt per question (two read positions).

The prompt (:data:`SELF_CHECK_PROMPT`) shows the question, the distinct sampled answers once each with their
counts, and the greedy answer as the proposed answer, and asks for a one-word verdict or a one-digit confidence.
The sequence fed to the model is the rendered chat followed by the forced reply opening
:data:`CONFIDENCE_REPLY_PREFIX` ("Confidence (0-9): "). One causal forward over it gives two next-token
distributions:

* at the last token of the rendered chat (the reply's first token): the verdict, read over the true / false option
  tokens → ``ptrue`` (:func:`ptrue_from_logprobs`);
* at the last token of the forced opening: the stated confidence, read over the digit tokens 0–9 →
  ``verbalized_confidence`` (:func:`verbalized_from_logprobs`, the expected digit / 9).

Causal attention makes the first read blind to the forced opening, and the forced opening holds no verdict, so
neither read is conditioned on the other's outcome. Batched across questions by ``generator.batch_size``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.backends.decoding_state import left_padded_batch
from workbench.backends.prompts import encode

SELF_CHECK_PROMPT = (
    "Question: {question}\n"
    "Answers that came to mind, with how often each came up:\n{ideas}\n"
    "Proposed answer: {answer}\n"
    "Is the proposed answer true or false? Reply with one word, true or false, or rate how sure you are that it is "
    "true with one digit from 0 (surely false) to 9 (surely true)."
)
"""The user message of the shared self-check prompt (see :func:`self_check_prompt`)."""

CONFIDENCE_REPLY_PREFIX = "Confidence (0-9): "
"""The forced reply opening after which the confidence digit is read."""

PTRUE_OPTIONS_TRUE: tuple[str, ...] = ("true", "True")
PTRUE_OPTIONS_FALSE: tuple[str, ...] = ("false", "False")
CONFIDENCE_OPTIONS: tuple[str, ...] = tuple(str(d) for d in range(10))
"""The digit options of the confidence read, in value order (option k states confidence k / 9)."""


def self_check_prompt(question: str, answer: str, samples: Sequence[str], ideas: int) -> str:
    """:data:`SELF_CHECK_PROMPT` for one question: the DISTINCT answers among the first ``ideas`` samples, one per
    line in first-seen order as "- answer (k of n)" (n = the samples listed, k = how many of them gave it), and the
    greedy ``answer`` as the proposed answer. Empty samples are left out; "- (none)" when nothing is left."""
    listed = [s for s in list(samples)[:ideas]]
    counts = Counter(s for s in listed if s)
    lines = [f"- {text} ({k} of {len(listed)})" for text, k in counts.items()]
    return SELF_CHECK_PROMPT.format(question=question, ideas="\n".join(lines) or "- (none)", answer=answer)


def ptrue_from_logprobs(logprobs: Any, n_true: int = len(PTRUE_OPTIONS_TRUE)) -> np.ndarray:
    """P(True) of each row of next-token log-probs ``(B, n_true + n_false)``: the "true" options first; NaN for a
    row with a NaN log-prob (an option a served model could not read: absent, never guessed).

    ptrue = P_true / (P_true + P_false) with P_true = Σ exp(log-probs of the first ``n_true`` columns) (the case
    variants "true" / "True" pooled) and P_false the same over the remaining columns; computed as
    σ(logsumexp(true) − logsumexp(false)). The mass on every other token is left out (a renormalised two-way
    choice, in [0, 1]).
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2 or not 0 < n_true < lp.shape[1]:
        raise ValueError(f"expected (B, options) log-probs with 0 < n_true < options, got {lp.shape}, {n_true}")
    with np.errstate(invalid="ignore"):  # a NaN read gives a NaN value, on purpose
        yes = np.logaddexp.reduce(lp[:, :n_true], axis=1)
        no = np.logaddexp.reduce(lp[:, n_true:], axis=1)
        return 1.0 / (1.0 + np.exp(no - yes))


def verbalized_from_logprobs(logprobs: Any) -> np.ndarray:
    """Stated confidence in [0, 1] of each row of digit log-probs ``(B, 10)`` (columns = digits 0..9).

    The digit distribution renormalised over the ten digits, p_k ∝ exp(logprobs[:, k]), and its expected value
    scaled to [0, 1]: Σ_k p_k · k / 9. The expected value (not the argmax) keeps the whole distribution, as P(True)
    does, and gives a continuous score: the argmax takes only ten values, whose ties blunt rankings and isotonic
    calibration. NaN for a row with a NaN log-prob (a digit a served model could not read).
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[1] != len(CONFIDENCE_OPTIONS):
        raise ValueError(f"expected (B, {len(CONFIDENCE_OPTIONS)}) digit log-probs, got {lp.shape}")
    with np.errstate(invalid="ignore"):  # a NaN read gives a NaN value, on purpose
        shifted = np.exp(lp - lp.max(axis=1, keepdims=True))
        probs = shifted / shifted.sum(axis=1, keepdims=True)
        return probs @ (np.arange(len(CONFIDENCE_OPTIONS)) / (len(CONFIDENCE_OPTIONS) - 1))


def _first_token_ids(tokenizer: Any, options: Sequence[str]) -> list[int]:
    """The first token id of each option (as the reply's next token); ValueError for one that encodes to none."""
    ids = []
    for option in options:
        encoded = tokenizer(option, add_special_tokens=False)["input_ids"]
        if not encoded:
            raise ValueError(f"option {option!r} encodes to no token")
        ids.append(int(encoded[0]))
    return ids


def two_position_read(
    generator: Any,
    chats: Sequence[str],
    suffix: str,
    first_options: Sequence[str],
    second_options: Sequence[str],
) -> tuple[np.ndarray, np.ndarray]:
    """Next-token log-probs (raw, T = 1) at two positions of ``chat + suffix``, from ONE forward per batch.

    ``first`` ``(B, len(first_options))``: the token after the last token of ``chats[b]`` (the reply's first
    token); ``second`` ``(B, len(second_options))``: the token after ``suffix``. Each option is read through its
    first token. The chat and the suffix are tokenised separately (the chat as the generator feeds prompts, the
    suffix without special tokens) so the first read sits exactly at the chat's end; a chat longer than
    ``max_context − len(suffix)`` tokens loses its leftmost tokens. Batches of ``generator.batch_size``,
    left-padded, read by :meth:`~workbench.backends.generator.Generator.tail_logits`: the chats of a batch that share
    a prefix (the chat template's system prompt and the prompt's opening) encode it once (prefix reuse; a generator
    without ``tail_logits`` runs one plain forward). Counts on ``generator.counter``: ``lm_calls`` (one per chat),
    ``lm_batches``, ``prefill_tokens`` (chat tokens; what reuse saved also in ``prefix_reused_tokens``) and
    ``scored_tokens`` (suffix tokens).
    """
    import torch

    if getattr(generator, "served", False):  # no model here: two next-token reads, exact or NaN
        return _served_two_position_read(generator, chats, suffix, first_options, second_options)
    tokenizer, model = generator.tokenizer, generator.model
    first_ids = _first_token_ids(tokenizer, first_options)
    second_ids = _first_token_ids(tokenizer, second_options)
    tail = list(tokenizer(suffix, add_special_tokens=False)["input_ids"])
    budget = max(int(generator.max_context) - len(tail), 1)
    seqs = []
    for chat in chats:
        ids = encode(tokenizer, chat)
        if len(ids) > budget:
            generator.counter.truncated_prompts += 1
            ids = ids[-budget:]
        seqs.append((ids, ids + tail))
    first = np.zeros((len(seqs), len(first_ids)), dtype=np.float64)
    second = np.zeros((len(seqs), len(second_ids)), dtype=np.float64)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = getattr(generator, "device", None) or next(model.parameters()).device
    step = max(int(generator.batch_size), 1)
    counter = generator.counter
    tail_logits = getattr(generator, "tail_logits", None)

    def forward(rows: list[list[int]]) -> Any:
        if tail_logits is not None:
            return tail_logits(rows, len(tail) + 1)
        input_ids, mask, positions = left_padded_batch(rows, pad)
        return model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            use_cache=False,
            logits_to_keep=len(tail) + 1,
        ).logits.float()

    with torch.inference_mode():
        for start in range(0, len(seqs), step):
            batch = seqs[start : start + step]
            with counter.timed("score"):
                logits = forward([seq for _, seq in batch])
            logprobs = torch.log_softmax(logits[:, [0, -1]], dim=-1).cpu().numpy()  # (B, 2, V)
            first[start : start + len(batch)] = logprobs[:, 0, first_ids]
            second[start : start + len(batch)] = logprobs[:, 1, second_ids]
            counter.lm_calls += len(batch)
            counter.lm_batches += 1
            counter.prefill_tokens += sum(len(ids) for ids, _ in batch)
            counter.scored_tokens += len(tail) * len(batch)
    return first, second


def _served_two_position_read(
    generator: Any, chats: Sequence[str], suffix: str, first_options: Sequence[str], second_options: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`two_position_read` on a served generator: the same token ids (chat, then chat + suffix), both positions
    read by :meth:`~workbench.backends.served.ServedGenerator.read_next_pair` (one echoed request of chat + suffix
    where the server echoes) — exact or NaN: an option in the server's top k is read there, the others
    teacher-forced with echo (chat + option), NaN without echo (then P(True) /
    verbalized confidence are NaN: absent, never a floor). A chat longer than ``max_context − len(suffix) − 2``
    tokens loses its leftmost tokens — two less than in-process: a teacher-forced read sends the option token and
    one generated token more (not every server takes ``max_tokens = 0``)."""
    if generator.tokenizer is None:
        generator.read_next([], [])  # raises the one-line "needs a local tokenizer" error
    tokenizer = generator.tokenizer
    tail = list(tokenizer(suffix, add_special_tokens=False)["input_ids"])
    budget = max(int(generator.max_context) - len(tail) - 2, 1)
    heads = [generator.encode_prompt(chat, budget) for chat in chats]
    first, second = generator.read_next_pair(
        heads, tail, _first_token_ids(tokenizer, first_options), _first_token_ids(tokenizer, second_options)
    )
    generator.counter.scored_tokens += len(tail) * len(heads)
    return np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)


def self_check_stats(
    generator: Any,
    questions: Sequence[str],
    greedy_texts: Sequence[str],
    sample_texts: Sequence[Sequence[str]],
    ideas: int,
) -> list[tuple[float, float]]:
    """``(ptrue, verbalized_confidence)`` of every question from one :func:`two_position_read` over the rendered
    :func:`self_check_prompt` + :data:`CONFIDENCE_REPLY_PREFIX`. Both values come from the same forward whichever
    of the two features is selected."""
    chats = [
        generator.render_chat(self_check_prompt(q, a, samples, ideas))
        for q, a, samples in zip(questions, greedy_texts, sample_texts, strict=True)
    ]
    verdict, digits = two_position_read(
        generator,
        chats,
        CONFIDENCE_REPLY_PREFIX,
        [*PTRUE_OPTIONS_TRUE, *PTRUE_OPTIONS_FALSE],
        CONFIDENCE_OPTIONS,
    )
    ptrue = ptrue_from_logprobs(verdict, len(PTRUE_OPTIONS_TRUE))
    verbalized = verbalized_from_logprobs(digits)
    return [(float(p), float(v)) for p, v in zip(ptrue, verbalized, strict=True)]
