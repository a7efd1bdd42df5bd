"""``workbench serve-model``'s engine side: answer a batch of :class:`~workbench.serve.openai_schema.Work` items with
the in-process :class:`~workbench.backends.generator.Generator`, and write the answers in the OpenAI shape.

:meth:`ModelEngine.answer` is the :class:`~workbench.serve.scheduler.BatchScheduler`'s answering function: every work
of one call has the same :class:`~workbench.serve.openai_schema.Sampling`, so all their prompts go to **one**
``Generator.generate`` call (``n`` samples per prompt, the prefill shared, the k most likely tokens recorded for the
largest ``logprobs`` asked; unseeded works: one call per round of distinct prompts, see **Seeds**), and the prompts
of all works with ``echo`` and log-probs to one ``Generator.prompt_logprobs`` call. An echoing work that asks one
greedy token and one choice (``max_tokens`` 1, temperature 0, ``n`` 1: a log-likelihood read) takes its token from
that same forward (``Generator.prompt_logprobs_and_step``) and is not generated again. Everything that touches the
tokenizer runs here, on the scheduler's one worker thread. A work refused on its own (a prompt over the context
window, a token id outside the vocabulary) gets its :class:`~workbench.serve.openai_schema.ApiError` as its result;
the others are answered. A request whose prompts echoed with log-probs hold more than ``max_echo_tokens`` tokens in
all is refused (400 naming ``echo``) before any model call: each echoed token costs a teacher-forced position, its
top-k and its text offset.

**Seeds.** A request without ``seed`` (``Sampling.seed`` None) gets fresh randomness: each engine call draws a new
seed from the engine's stream (a ``numpy`` generator started at the server's ``--seed``: a restarted server draws the
same sequence), and two such works with the same prompt never share a call (the generator would give both the same
samples): an unseeded request never shares its seed with another of the same prompt.

The numbers are the in-process generator's: text, token ids, raw (T=1) log-probs and top-k of the same prompt,
parameters and seed (sample ``j`` of a prompt is in-process sample ``j``). A sequence that ended with EOS lists that
EOS token last (its text is the tokenizer's token string; it adds nothing to ``text``; its log-prob is
``Generation.eos_logprob``). The legacy route's ``top_logprobs`` at a position holds the k most likely tokens and,
as OpenAI and vLLM write it, the token chosen there (sampled, or the echoed prompt token) when it is not among them:
k + 1 entries then (k = 0: the chosen token alone); the chat route's ``top_logprobs`` are the k most likely, as
OpenAI's chat API writes them (the chosen token's log-prob is its ``logprob``). A stop-string finish lists
``Generation.token_ids``, the shortest prefix covering the text. ``text_offset`` is each token's character offset
into the returned text (with ``echo``: into prompt + text): the length of the decoding of the tokens before it,
capped at the text's length. Log-probs that JSON cannot carry are written -9999.0 (-inf) or null (NaN).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.echo_cache import EchoCache
from workbench.backends.prompts import encode
from workbench.core.interrupt import check_interrupt
from workbench.serve.continuous import decode_joining
from workbench.serve.openai_schema import ApiError, Work
from workbench.serve.openai_stream import settled

NEG_INF_LOGPROB = -9999.0
"""The log-prob written for -inf (vLLM's convention: JSON has no infinity)."""
FINISH = {"eos": "stop", "stop": "stop", "length": "length"}
"""Generation finish reasons → OpenAI ``finish_reason``."""


@dataclass
class Prepared:
    """A work ready for the engine: the prompt as ``generate`` takes it, its token ids, the echoed text."""

    work: Work
    gen_prompt: str | list[int]
    ids: list[int]
    echo_text: str
    gens: list[Any] = field(default_factory=list)
    own: Any = None  # PromptLogprobs with echo and log-probs
    echo_offsets: list[int] | None = None  # the echoed tokens' text offsets, computed once for the n choices


@dataclass
class Answered:
    """One work's answer: ``choices`` (its ``n`` choices without ``index``), ``prompt_tokens`` and
    ``completion_tokens`` (generated tokens over the choices, each EOS included). For a streamed work, ``pieces``
    holds per choice the character offsets where its text's pieces begin (one per listed token, the echoed prompt
    first; with log-probs, aligned with the choice's log-prob entries); None otherwise. ``open`` (a streamed work's
    answer so far, :meth:`ModelEngine.progress`): per choice, whether it is still being decoded (its choice then holds
    its settled pieces only, ``finish_reason`` None); None for a finished answer."""

    choices: list[dict[str, Any]]
    prompt_tokens: int
    completion_tokens: int
    pieces: list[list[int]] | None = None
    open: list[bool] | None = None


def _logprob(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return float(value) if math.isfinite(value) else NEG_INF_LOGPROB


def _one_greedy_step(sampling: Any) -> bool:
    """Whether a work echoing with log-probs is answered by its echo pass alone: one greedy token, one choice (the
    teacher-forced forward over the prompt already holds the next token's distribution; lm-eval's log-likelihood
    requests and the served backend's teacher-forced reads ask exactly this)."""
    return sampling.max_tokens == 1 and sampling.temperature == 0 and sampling.n == 1


_SEED_BOUND = 2**63
"""Fresh seeds are drawn from [0, 2**63)."""


class ModelEngine:
    """Answers works with ``generator`` (a :class:`~workbench.backends.generator.Generator`); see the module
    docstring. ``seed`` starts the stream of fresh seeds for requests that give none; ``max_echo_tokens`` bounds the
    prompt tokens one request echoes with log-probs; ``echo_cache_tokens`` (0: none) bounds the echoed prompts whose KV
    caches are kept across requests (:mod:`workbench.backends.echo_cache`). Only one thread may call :meth:`answer` at a
    time (the scheduler's worker)."""

    def __init__(
        self,
        generator: Any,
        *,
        seed: int = 0,
        max_echo_tokens: int = 16384,
        max_top_logprobs: int = 20,
        echo_cache_tokens: int = 0,
    ) -> None:
        self.generator = generator
        # echoed prompts' KV kept across requests (backends.echo_cache): an option read teacher-forced after its
        # prompt's echo encodes only the option
        takes = "echo_cache" in inspect.signature(getattr(generator, "prompt_logprobs", lambda: None)).parameters
        self.echo_cache = EchoCache(echo_cache_tokens) if echo_cache_tokens and takes else None
        self.tokenizer = generator.tokenizer
        self.max_echo_tokens = max_echo_tokens
        self.max_top_logprobs = max_top_logprobs
        self._seeds = np.random.default_rng(seed)
        self._texts: list[str] | None = None

    # ------------------------------------------------------------------ answering
    def answer(self, works: Sequence[Work], key: str = "") -> list[Answered | ApiError]:
        """One result per work, in order (see the module docstring); ``key`` is the batching key (unused here: the
        works' samplings are equal)."""
        del key
        prepared = self._admitted(works)
        ready = [p for p in prepared if isinstance(p, Prepared)]
        if not ready:
            return list(prepared)  # type: ignore[arg-type]
        sampling = ready[0].work.sampling
        generating = [p for p in ready if sampling.max_tokens > 0 and not p.gens]  # not answered by the echo pass
        for seed, call in self._calls(generating):
            flat = self.generator.generate(
                [p.gen_prompt for p in call],
                max_new_tokens=sampling.max_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                n=sampling.n,
                stop=sampling.stop,
                seed=seed,
                top_logprobs=max(p.work.logprobs or 0 for p in call),
            )
            for i, p in enumerate(call):
                p.gens = flat[i * sampling.n : (i + 1) * sampling.n]
        return [self._answered(p) if isinstance(p, Prepared) else p for p in prepared]

    def answer_joining(self, batch: Any, key: str = "") -> None:
        """Answer a :class:`~workbench.serve.scheduler.RunningBatch` of works of one sampling by continuous batching
        (:func:`~workbench.serve.continuous.decode_joining`): queued requests join between decoding steps, each is
        delivered when its sequences end. Every row records the ``max_top_logprobs`` most likely tokens (a request
        lists its own k of them), so requests asking for different k share the batch."""
        del key
        decode_joining(self, batch, self._admitted)

    def _admitted(self, works: Sequence[Work]) -> list[Prepared | ApiError]:
        """``works`` prepared (or refused), their echoed prompts read (one teacher-forced call for those of them
        echoing with log-probs)."""
        prepared: list[Prepared | ApiError] = []
        for work in works:
            try:
                prepared.append(self._prepare(work))
            except ApiError as exc:
                prepared.append(exc)
        prepared = self._within_echo_budget(prepared)
        echoing = [p for p in prepared if isinstance(p, Prepared) and p.work.echo and p.work.logprobs is not None]
        if not echoing:
            return prepared
        k = max(p.work.logprobs or 0 for p in echoing)
        stepping = [p for p in echoing if _one_greedy_step(p.work.sampling)]
        if stepping and hasattr(self.generator, "prompt_logprobs_and_step"):
            owns, gens = self.generator.prompt_logprobs_and_step(
                [p.gen_prompt for p in stepping],
                top_logprobs=k,
                stop=stepping[0].work.sampling.stop,
                **self._echo_cache_arg(),
            )
            for p, own, gen in zip(stepping, owns, gens, strict=True):
                p.own, p.gens = own, [gen]
        rest = [p for p in echoing if p.own is None]
        owns = self.generator.prompt_logprobs([p.ids for p in rest], top_logprobs=k, **self._echo_cache_arg())
        for p, own in zip(rest, owns, strict=True):
            p.own = own
        return prepared

    def _echo_cache_arg(self) -> dict[str, Any]:
        """``{"echo_cache": ...}`` where the engine keeps one (an in-process generator), else nothing."""
        return {} if self.echo_cache is None else {"echo_cache": self.echo_cache}

    def seed_for(self, sampling: Any) -> int:
        """A work's sampling seed: the request's, or a fresh one from the engine's stream."""
        return int(self._seeds.integers(_SEED_BOUND)) if sampling.seed is None else int(sampling.seed)

    def finished(self, p: Prepared, gens: list[Any]) -> Answered:
        """The answer of a work whose generations (its ``n`` samples, in order; none for echo only) are ``gens``."""
        p.gens = gens
        return self._answered(p)

    def progress(self, p: Prepared, gens: list[Any], decoding: list[bool]) -> Answered:
        """A streamed work's answer so far: ``gens`` its ``n`` generations as decoded up to now (a choice still
        ``decoding`` reads as cut at its length), each open choice cut to the pieces that are settled
        (:func:`~workbench.serve.openai_stream.settled`: they are then the first pieces of its finished answer)."""
        answer = self.finished(p, gens)
        stops = p.work.sampling.stop or ()
        hold = max((len(stop) for stop in stops), default=1) - 1
        for choice, starts, still in zip(answer.choices, answer.pieces or [], decoding, strict=True):
            if still:
                _cut_choice(choice, starts, hold)
        answer.open = list(decoding)
        return answer

    def _calls(self, generating: list[Prepared]) -> list[tuple[int, list[Prepared]]]:
        """``(seed, works)`` of each generate call: one call with the request seed; without one (``seed`` None), one
        call per round of distinct prompts (the r-th work of each prompt in round r), each with a fresh seed."""
        if not generating:
            return []
        seed = generating[0].work.sampling.seed
        if seed is not None:
            return [(seed, generating)]
        rounds: list[list[Prepared]] = []
        seen: dict[tuple[int, ...], int] = {}
        for p in generating:
            key = tuple(p.ids)
            turn = seen.get(key, 0)
            seen[key] = turn + 1
            if turn == len(rounds):
                rounds.append([])
            rounds[turn].append(p)
        return [(int(self._seeds.integers(_SEED_BOUND)), call) for call in rounds]

    def _within_echo_budget(self, prepared: list[Prepared | ApiError]) -> list[Prepared | ApiError]:
        """``prepared`` with every work of a request that echoes more than ``max_echo_tokens`` prompt tokens with
        log-probs replaced by a 400 :class:`ApiError` naming ``echo``."""
        echoed: dict[int, int] = {}
        for p in prepared:
            if isinstance(p, Prepared) and p.work.echo and p.work.logprobs is not None:
                echoed[p.work.request] = echoed.get(p.work.request, 0) + len(p.ids)
        over = {request: total for request, total in echoed.items() if total > self.max_echo_tokens}
        if not over:
            return prepared
        out: list[Prepared | ApiError] = []
        for p in prepared:
            request = p.work.request if isinstance(p, Prepared) else None
            if request in over:
                message = (
                    f"echo with logprobs lists {over[request]} prompt tokens, over this server's "
                    f"{self.max_echo_tokens} per request (--max-echo-tokens): send fewer or shorter prompts"
                )
                out.append(ApiError(400, message, "echo"))
            else:
                out.append(p)
        return out

    def _prepare(self, work: Work) -> Prepared:
        """Render / encode a work's prompt and check it fits the context window (400 otherwise)."""
        prompt = work.prompt
        if work.kind == "chat":
            messages = [{"role": role, "content": content} for role, content in prompt]  # type: ignore[misc]
            text = self.generator.render_chat(messages)
            gen_prompt: str | list[int] = text
            ids, echo_text = encode(self.tokenizer, text), text
        elif isinstance(prompt, str):
            gen_prompt, ids, echo_text = prompt, encode(self.tokenizer, prompt), prompt
        else:
            ids = [int(i) for i in prompt]  # type: ignore[union-attr]
            try:
                self.generator.decode_prompt(ids)
            except ValueError as exc:
                raise ApiError(400, str(exc), "prompt") from None
            gen_prompt, echo_text = ids, self._decode(ids, special=True)
        if not ids:
            raise ApiError(
                400, "the prompt encodes to no tokens", "prompt" if work.kind == "completion" else "messages"
            )
        limit = self.generator.max_context
        if len(ids) + work.sampling.max_tokens > limit:
            raise ApiError(
                400,
                f"this model's maximum context length is {limit} tokens; the prompt has {len(ids)} and max_tokens asks "
                f"for {work.sampling.max_tokens} more",
                "prompt" if work.kind == "completion" else "messages",
            )
        return Prepared(work, gen_prompt, ids, echo_text)

    def _answered(self, p: Prepared) -> Answered:
        work = p.work
        gens = p.gens or [None] * work.sampling.n
        choices = [self._chat_choice(p, g) if work.kind == "chat" else self._completion_choice(p, g) for g in gens]
        completion = sum(len(g.token_ids) + (g.finish_reason == "eos") for g in p.gens)
        pieces = [self._pieces(p, g, c) for g, c in zip(gens, choices, strict=True)] if work.stream else None
        return Answered(choices, len(p.ids), int(completion), pieces)

    def _pieces(self, p: Prepared, gen: Any, choice: dict[str, Any]) -> list[int]:
        """Where a streamed choice's pieces begin: each listed token's text offset (with log-probs, exactly the
        offsets of the choice's log-prob entries, so piece i carries entry i); without log-probs the echoed prompt
        is one piece."""
        work = p.work
        if work.logprobs is not None:
            if work.kind == "completion":
                return list(choice["logprobs"]["text_offset"])
            return [offset for *_, offset in self._steps(gen, work.logprobs)]
        prefix = len(p.echo_text) if work.kind == "completion" and work.echo else 0
        answer = [] if gen is None else self._offsets([int(i) for i in gen.token_ids], gen.text, special=False)
        return ([0] if prefix else []) + [prefix + offset for offset in answer]

    # ------------------------------------------------------------------ the OpenAI shapes
    def _completion_choice(self, p: Prepared, gen: Any) -> dict[str, Any]:
        work = p.work
        text = gen.text if gen is not None else ""
        prefix = p.echo_text if work.echo else ""
        choice: dict[str, Any] = {
            "text": prefix + text,
            "finish_reason": FINISH.get(gen.finish_reason, "stop") if gen is not None else "length",
            "logprobs": None,
        }
        if work.logprobs is None:
            return choice
        k = work.logprobs
        block: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        if work.echo:
            if p.echo_offsets is None:
                p.echo_offsets = self._offsets(p.ids, p.echo_text, special=True)
            offsets = p.echo_offsets
            for t, token in enumerate(p.ids):
                block["tokens"].append(self._name(token, work.as_ids))
                block["text_offset"].append(offsets[t])
                if t == 0:
                    block["token_logprobs"].append(None)
                    block["top_logprobs"].append(None)
                else:
                    lp = float(p.own.logprobs[t - 1])
                    block["token_logprobs"].append(_logprob(lp))
                    block["top_logprobs"].append(
                        self._top_dict(p.own.top_ids[t - 1], p.own.top_logprobs[t - 1], k, work, token, lp)
                    )
        if gen is not None:
            for token, lp, top, offset in self._steps(gen, k):
                block["tokens"].append(self._name(token, work.as_ids))
                block["token_logprobs"].append(_logprob(lp))
                block["top_logprobs"].append(self._top_dict(*top, k, work, token, lp))
                block["text_offset"].append(len(prefix) + offset)
        choice["logprobs"] = block
        return choice

    def _chat_choice(self, p: Prepared, gen: Any) -> dict[str, Any]:
        work = p.work
        choice: dict[str, Any] = {
            "message": {"role": "assistant", "content": gen.text},
            "finish_reason": FINISH.get(gen.finish_reason, "stop"),
            "logprobs": None,
        }
        if work.logprobs is None:
            return choice
        content = []
        for token, lp, (ids, lps), _ in self._steps(gen, work.logprobs):
            name = self._name(token, work.as_ids)
            tops = [
                {"token": (alt := self._name(int(i), work.as_ids)), "logprob": _logprob(float(v)), "bytes": _bytes(alt)}
                for i, v in zip(ids[: work.logprobs], lps[: work.logprobs], strict=True)
            ]
            content.append({"token": name, "logprob": _logprob(lp), "bytes": _bytes(name), "top_logprobs": tops})
        choice["logprobs"] = {"content": content}
        return choice

    def _steps(self, gen: Any, k: int) -> list[tuple[int, float, tuple[np.ndarray, np.ndarray], int]]:
        """Per listed token of a generation: ``(id, raw log-prob, (top ids, top log-probs), text offset)`` — the
        answer tokens, then the EOS token when the answer ended with EOS."""
        ids = [int(i) for i in gen.token_ids]
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        offsets = self._offsets(ids, gen.text, special=False)
        steps = []
        for t, token in enumerate(ids):
            top = (gen.top_ids[t], gen.top_logprobs[t]) if k and gen.top_ids is not None else empty
            steps.append((token, float(gen.logprobs[t]), top, offsets[t]))
        if gen.finish_reason == "eos":
            eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
            top = (gen.eos_top_ids, gen.eos_top_logprobs) if k and gen.eos_top_ids is not None else empty
            lp = gen.eos_logprob if gen.eos_logprob is not None else float("nan")
            steps.append((int(eos), float(lp), top, len(gen.text)))
        return steps

    # ------------------------------------------------------------------ tokens as text
    def _token_texts(self) -> list[str]:
        """Every token id's own text (special tokens as their strings), decoded once."""
        if self._texts is None:
            vocab = self.generator.vocab_size
            self._texts = self.tokenizer.batch_decode(
                [[i] for i in range(vocab)], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        return self._texts

    def _name(self, token: int, as_ids: bool) -> str:
        """A token as the response writes it: its text, or ``token_id:<id>``."""
        return f"token_id:{token}" if as_ids else self._token_texts()[token]

    def _top_dict(
        self, ids: np.ndarray, lps: np.ndarray, k: int, work: Work, chosen: int, chosen_lp: float
    ) -> dict[str, float | None]:
        """The ``k`` most likely tokens as ``{token: logprob}``, then the ``chosen`` token (log-prob ``chosen_lp``)
        when it is not among them (a token text shared by several ids keeps the most likely one's log-prob)."""
        out: dict[str, float | None] = {}
        for i, v in zip(ids[:k], lps[:k], strict=True):
            out.setdefault(self._name(int(i), work.as_ids), _logprob(float(v)))
        out.setdefault(self._name(int(chosen), work.as_ids), _logprob(chosen_lp))
        return out

    def _decode(self, ids: Sequence[int], *, special: bool) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=not special, clean_up_tokenization_spaces=False)

    def _offsets(self, ids: list[int], text: str, *, special: bool) -> list[int]:
        """Each token's character offset into ``text``: the length of the decoding of the tokens before it, capped at
        ``len(text)`` and never decreasing (:func:`prefix_lengths`)."""
        offsets, last = [], 0
        for length in prefix_lengths(lambda part: self._decode(part, special=special), ids):
            last = max(last, min(length, len(text)))
            offsets.append(last)
        return offsets


OFFSET_WINDOW = 8
"""Tokens of context :func:`prefix_lengths` decodes before each token (a character spans at most 4 byte tokens)."""
OFFSET_CHECK_EVERY = 64
"""How often :func:`prefix_lengths` checks its running length against the decoding of the whole prefix."""


def prefix_lengths(decode: Callable[[list[int]], str], ids: list[int]) -> list[int]:
    """``[len(decode(ids[:t])) for t in range(len(ids))]`` in linear time.

    Decoding every prefix costs a quadratic number of token decodings (a 4,300-token echo: 10 s with SmolLM2's
    tokenizer, per choice). A token's own increment, ``len(decode(ids[s:t])) - len(decode(ids[s:t - 1]))``, depends
    only on the few tokens before it for the tokenizers' decoders (byte-level BPE, byte fallback, SentencePiece's
    metaspace, WordPiece): a window of :data:`OFFSET_WINDOW` tokens (from the start while there are fewer) gives it,
    and the lengths are their running sum. Every :data:`OFFSET_CHECK_EVERY` tokens and at the end the sum is checked
    against the decoding of the whole prefix; a decoder that is not local fails a check, and the prefixes are then
    decoded one by one. Checks for an interruption (:mod:`workbench.core.interrupt`) every few tokens."""
    lengths = [0] * len(ids)
    total = 0
    for t in range(1, len(ids)):
        if t % 16 == 0:
            check_interrupt()  # long answers and echoes: stop here too for a client that left
        start = max(0, t - 1 - OFFSET_WINDOW)
        total += len(decode(ids[start:t])) - len(decode(ids[start : t - 1]))
        lengths[t] = total
        if (t % OFFSET_CHECK_EVERY == 0 or t == len(ids) - 1) and len(decode(ids[:t])) != total:
            return _exact_prefix_lengths(decode, ids)
    return lengths


def _exact_prefix_lengths(decode: Callable[[list[int]], str], ids: list[int]) -> list[int]:
    out = []
    for t in range(len(ids)):
        check_interrupt()
        out.append(len(decode(ids[:t])))
    return out


def _cut_choice(choice: dict[str, Any], starts: list[int], hold: int) -> None:
    """Cut an open choice (and its ``starts``, in place) to its settled pieces; it has no ``finish_reason`` yet."""
    message = choice.get("message")
    text = message["content"] if message is not None else choice["text"]
    count = settled(text, starts, hold)
    end = starts[count] if count < len(starts) else len(text)
    del starts[count:]
    choice["finish_reason"] = None
    if message is not None:
        message["content"] = text[:end]
        if choice["logprobs"] is not None:
            del choice["logprobs"]["content"][count:]
    else:
        choice["text"] = text[:end]
        for values in (choice["logprobs"] or {}).values():
            del values[count:]


def _bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))
