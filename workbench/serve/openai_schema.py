"""``workbench serve-model``'s requests: the pydantic bodies of ``POST /v1/completions`` and ``POST
/v1/chat/completions``, their range checks, and the units of work they become (docs/served-models.md).

Contract:

* **types** are checked by pydantic (strict: no ``"5"`` for 5, no ``true`` for 1): a wrong type or a body that is not
  JSON is 422. **Unknown fields are ignored** (as vLLM ignores them), so a client can send any engine's extensions.
* **values** are checked here, after the ``model`` name (another name → 404 ``model_not_found``): every value out of
  range is an :class:`ApiError` 400 naming its ``param`` — ``max_tokens`` < 0 (0 only with ``echo``), ``n`` outside
  1..``max_n``, ``temperature`` < 0, ``top_p`` outside (0, 1], ``top_k`` outside -1..2³¹-1, ``seed`` outside the
  signed 64-bit range, ``logprobs`` / ``top_logprobs`` outside 0..``max_logprobs``, ``top_logprobs`` without
  ``logprobs: true``, an empty stop string, an empty prompt, a token id outside 0..2³¹-1, text (a prompt, a stop
  string, a message) holding a lone surrogate, a chat role other than system / user / assistant. A huge integer is
  never quoted back (:func:`~workbench.serve.field_checks.shown_int`). ``stream: true`` is taken, with
  ``stream_options.include_usage`` (:mod:`workbench.serve.openai_stream`).
* **work per request** — prompts × ``n`` sequences at most ``max_sequences`` (400 naming ``n``), and those sequences
  × ``max_tokens`` tokens to generate at most ``max_request_tokens`` (400 naming ``max_tokens``); the engine bounds
  the prompt tokens a request echoes with log-probs (:mod:`workbench.serve.openai_engine`).
* **work** — each prompt of a request becomes one :class:`Work`; works whose :class:`Sampling` (max_tokens,
  temperature, top_p, top_k, stop, seed, n — greedy ignores top_p, top_k and seed) is equal share one engine call.
  A request without ``seed`` has ``Sampling.seed`` None: the engine draws it a fresh seed, so its samples differ
  from every other request's (a request with a seed is reproducible).

Imports pydantic (and Starlette, with :mod:`workbench.serve.openai_stream`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from workbench.serve.field_checks import has_lone_surrogate, shown_int
from workbench.serve.openai_stream import StreamOptions

ROLES = ("system", "user", "assistant")
"""The chat roles the server renders with the model's chat template."""
MAX_TOP_K = 2**31 - 1
"""Largest ``top_k`` (and token id) a request may give."""
SEED_RANGE = (-(2**63), 2**63 - 1)
"""The seeds a request may give: signed 64-bit integers, as OpenAI and vLLM take."""


class ApiError(Exception):
    """A refused request: HTTP ``status``, a one-line ``message``, the request ``param`` at fault and an OpenAI
    ``code`` (or None), and extra response ``headers`` (``Retry-After``)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


class _RequestFields(BaseModel):
    """The fields both routes take: the model, the sampling and the engine extensions (vLLM's ``top_k`` and
    ``return_tokens_as_token_ids``). Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    return_tokens_as_token_ids: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None


class CompletionRequest(_RequestFields):
    """``POST /v1/completions`` (OpenAI legacy completions plus vLLM's ``top_k`` and ``return_tokens_as_token_ids``).
    Unknown fields are ignored."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    echo: bool | None = None


class ChatMessage(BaseModel):
    """One chat message: ``role`` and ``content`` (a string, or a list of ``{"type": "text", "text"}`` parts)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_RequestFields):
    """``POST /v1/chat/completions`` (plus vLLM's ``top_k`` and ``return_tokens_as_token_ids``). Unknown fields are
    ignored."""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


@dataclass(frozen=True)
class Sampling:
    """How one request decodes: works with equal samplings are answered by one engine call (:meth:`key`). ``seed``
    None: the request gave none (the engine draws a fresh one)."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop: tuple[str, ...]
    seed: int | None
    n: int

    @property
    def greedy(self) -> bool:
        """Whether this is greedy decoding (temperature 0)."""
        return self.temperature == 0.0

    def normalised(self) -> Sampling:
        """Greedy decoding ignores top_p, top_k and the seed: reset them, so greedy requests share calls."""
        return replace(self, top_p=1.0, top_k=0, seed=0) if self.greedy else self

    def key(self) -> str:
        """The batching key: equal for samplings one engine call can answer together."""
        return json.dumps(
            [self.max_tokens, self.temperature, self.top_p, self.top_k, list(self.stop), self.seed, self.n]
        )


@dataclass(frozen=True)
class Work:
    """One prompt of one request. ``kind`` is ``completion`` or ``chat``; ``prompt`` is text, token ids or (chat) the
    message list; ``logprobs`` is how many alternatives per position (None: no log-probs at all); ``echo`` puts the
    prompt first; ``as_ids`` writes tokens as ``token_id:<id>``; ``request`` tells the works of one request apart
    from those of others in one engine call; ``stream``: the answer is sent as server-sent events (the engine then
    marks where each token's text begins)."""

    kind: str
    prompt: str | tuple[int, ...] | tuple[tuple[str, str], ...]
    sampling: Sampling
    logprobs: int | None = None
    echo: bool = False
    as_ids: bool = False
    request: int = 0
    stream: bool = False


@dataclass(frozen=True)
class Limits:
    """What one request may ask: ``max_logprobs`` alternatives per position, ``max_n`` samples per prompt,
    ``max_prompts`` prompts, ``max_sequences`` prompts × n, ``max_request_tokens`` sequences × max_tokens;
    ``default_max_tokens`` when a request gives none."""

    max_logprobs: int = 20
    max_n: int = 64
    max_prompts: int = 256
    max_sequences: int = 256
    max_request_tokens: int = 16384
    default_max_tokens: int = 16


def check_model(model: str, served: str) -> None:
    """404 ``model_not_found`` unless ``model`` is the served name."""
    if model != served:
        raise ApiError(
            404, f"the model {model!r} does not exist: this server serves {served!r}", "model", "model_not_found"
        )


def _sampling(body: CompletionRequest | ChatRequest, max_tokens: int, limits: Limits) -> Sampling:
    """The request's :class:`Sampling`, every value range-checked (400 naming the field)."""
    temperature = 1.0 if body.temperature is None else float(body.temperature)
    top_p = 1.0 if body.top_p is None else float(body.top_p)
    top_k = 0 if body.top_k is None else int(body.top_k)
    n = 1 if body.n is None else int(body.n)
    stop = () if body.stop is None else (body.stop,) if isinstance(body.stop, str) else tuple(body.stop)
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ApiError(400, f"temperature must be a number >= 0, got {temperature}", "temperature")
    if not 0.0 < top_p <= 1.0:
        raise ApiError(400, f"top_p must be in (0, 1], got {top_p}", "top_p")
    if not -1 <= top_k <= MAX_TOP_K:
        raise ApiError(
            400, f"top_k must be -1 or 0 (off) or a count up to {MAX_TOP_K}, got {shown_int(top_k)}", "top_k"
        )
    if not 1 <= n <= limits.max_n:
        raise ApiError(400, f"n must be between 1 and {limits.max_n}, got {shown_int(n)}", "n")
    if any(not s for s in stop):
        raise ApiError(400, "stop strings must not be empty", "stop")
    if any(has_lone_surrogate(s) for s in stop):
        raise ApiError(400, _SURROGATE_MESSAGE.format(field="stop strings"), "stop")
    if body.seed is not None and not SEED_RANGE[0] <= body.seed <= SEED_RANGE[1]:
        raise ApiError(400, f"seed must be a signed 64-bit integer, got {shown_int(body.seed)}", "seed")
    return Sampling(max_tokens, temperature, top_p, max(top_k, 0), stop, body.seed, n).normalised()


_SURROGATE_MESSAGE = "{field} must be Unicode text: a lone surrogate (U+D800..U+DFFF) is not"


def _check_work(sequences: int, sampling: Sampling, limits: Limits) -> None:
    """400 when ``sequences`` (prompts × n) or the tokens they may generate are over the request limits."""
    if sequences > limits.max_sequences:
        raise ApiError(
            400,
            f"{sequences // sampling.n} prompt(s) × n={sampling.n} = {sequences} sequences, over this server's "
            f"{limits.max_sequences} per request (--max-sequences): send fewer prompts or a smaller n",
            "n",
        )
    if sequences * sampling.max_tokens > limits.max_request_tokens:
        raise ApiError(
            400,
            f"{sequences} sequence(s) × max_tokens={sampling.max_tokens} = {sequences * sampling.max_tokens} tokens to "
            f"generate, over this server's {limits.max_request_tokens} per request (--max-request-tokens)",
            "max_tokens",
        )


def _max_tokens(value: int, param: str, limits: Limits, *, echo: bool | None = None) -> int:
    """A request's ``max_tokens`` (or ``max_completion_tokens``): 400 outside 1..max_request_tokens (0 too with
    ``echo``; ``echo`` None: a route without echo)."""
    least = 0 if echo else 1
    if not least <= value <= limits.max_request_tokens:
        hint = " (0 only with echo)" if echo is False else ""
        raise ApiError(
            400,
            f"{param} must be between {least}{hint} and this server's {limits.max_request_tokens} "
            f"(--max-request-tokens), got {shown_int(value)}",
            param,
        )
    return value


def _logprob_count(value: int | None, param: str, limits: Limits) -> int | None:
    if value is not None and not 0 <= value <= limits.max_logprobs:
        raise ApiError(
            400,
            f"{param} must be between 0 and {limits.max_logprobs} (this server's --max-logprobs), "
            f"got {shown_int(value)}",
            param,
        )
    return value


def completion_works(body: CompletionRequest, served: str, limits: Limits, request: int = 0) -> list[Work]:
    """The works of a legacy completion request, one per prompt (in order), each marked ``request``; 404 / 400
    :class:`ApiError` if refused."""
    check_model(body.model, served)
    echo = bool(body.echo)
    max_tokens = limits.default_max_tokens if body.max_tokens is None else body.max_tokens
    sampling = _sampling(body, _max_tokens(max_tokens, "max_tokens", limits, echo=echo), limits)
    logprobs = _logprob_count(body.logprobs, "logprobs", limits)
    prompt = body.prompt
    prompts: list[str | tuple[int, ...]]
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [tuple(prompt)]  # type: ignore[arg-type]
    else:
        prompts = [p if isinstance(p, str) else tuple(p) for p in prompt]  # type: ignore[union-attr]
    if not prompts:
        raise ApiError(400, "prompt must not be empty", "prompt")
    if len(prompts) > limits.max_prompts:
        raise ApiError(400, f"at most {limits.max_prompts} prompts per request, got {len(prompts)}", "prompt")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ApiError(400, f"prompt {i} is empty", "prompt")
        if isinstance(p, str) and has_lone_surrogate(p):
            raise ApiError(400, _SURROGATE_MESSAGE.format(field=f"prompt {i}"), "prompt")
        if isinstance(p, tuple) and not all(0 <= t <= MAX_TOP_K for t in p):
            raise ApiError(400, f"prompt {i}: token ids must be between 0 and {MAX_TOP_K}", "prompt")
    _check_work(len(prompts) * sampling.n, sampling, limits)
    as_ids = bool(body.return_tokens_as_token_ids)
    stream = bool(body.stream)
    return [Work("completion", p, sampling, logprobs, echo, as_ids, request, stream) for p in prompts]


def chat_work(body: ChatRequest, served: str, limits: Limits, request: int = 0) -> Work:
    """The work of a chat request (its messages, rendered later with the model's chat template), marked ``request``;
    404 / 400 :class:`ApiError` if refused."""
    check_model(body.model, served)
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    max_tokens = limits.default_max_tokens if max_tokens is None else max_tokens
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    sampling = _sampling(body, _max_tokens(max_tokens, param, limits), limits)
    _check_work(sampling.n, sampling, limits)
    top = _logprob_count(body.top_logprobs, "top_logprobs", limits)
    if top and not body.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
    if not body.messages:
        raise ApiError(400, "messages must not be empty", "messages")
    messages = []
    for i, message in enumerate(body.messages):
        if message.role not in ROLES:
            raise ApiError(
                400, f"messages[{i}].role must be one of {', '.join(ROLES)}, got {message.role!r}", "messages"
            )
        content = _content(message.content, f"messages[{i}].content")
        if has_lone_surrogate(content):
            raise ApiError(400, _SURROGATE_MESSAGE.format(field=f"messages[{i}].content"), "messages")
        messages.append((message.role, content))
    logprobs = (top or 0) if body.logprobs else None
    as_ids = bool(body.return_tokens_as_token_ids)
    return Work("chat", tuple(messages), sampling, logprobs, False, as_ids, request, bool(body.stream))


def _content(content: str | list[dict[str, Any]] | None, where: str) -> str:
    """A message's text: the string, or its text parts joined with newlines (400 for any other part)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError(400, f'{where}[{j}]: only {{"type": "text", "text": "..."}} parts are supported', where)
        texts.append(part["text"])
    return "\n".join(texts)
