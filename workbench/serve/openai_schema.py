"""``workbench serve-model``'s requests: the pydantic bodies of ``POST /v1/completions`` and ``POST
/v1/chat/completions``, their range checks, and the units of work they become (docs/served-models.md).

Contract:

* **types** are checked by pydantic (strict: no ``"5"`` for 5, no ``true`` for 1): a wrong type or a body that is not
  JSON is 422. **Unknown fields are ignored** (as vLLM ignores them), so a client can send any engine's extensions.
* **values** are checked here, after the ``model`` name (another name → 404 ``model_not_found``): every value out of
  range is an :class:`ApiError` 400 naming its ``param`` — ``max_tokens`` < 0 (0 only with ``echo``), ``n`` outside
  1..``max_n``, ``temperature`` < 0, ``top_p`` outside (0, 1], ``top_k`` < -1, ``logprobs`` / ``top_logprobs``
  outside 0..``max_logprobs``, ``top_logprobs`` without ``logprobs: true``, an empty stop string, an empty prompt,
  ``stream: true`` (answers are sent whole), a chat role other than system / user / assistant.
* **work** — each prompt of a request becomes one :class:`Work`; works whose :class:`Sampling` (max_tokens,
  temperature, top_p, top_k, stop, seed, n — greedy ignores top_p, top_k and seed) is equal share one engine call.
  A request without ``seed`` uses the server's default seed (the in-process generator's), so its samples repeat.

Imports pydantic only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict

ROLES = ("system", "user", "assistant")
"""The chat roles the server renders with the model's chat template."""


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
    """How one request decodes: works with equal samplings are answered by one engine call (:meth:`key`)."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop: tuple[str, ...]
    seed: int
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
    prompt first; ``as_ids`` writes tokens as ``token_id:<id>``."""

    kind: str
    prompt: str | tuple[int, ...] | tuple[tuple[str, str], ...]
    sampling: Sampling
    logprobs: int | None = None
    echo: bool = False
    as_ids: bool = False


@dataclass(frozen=True)
class Limits:
    """What one request may ask: ``max_logprobs`` alternatives per position, ``max_n`` samples per prompt,
    ``max_prompts`` prompts; ``default_max_tokens`` when a request gives none; ``default_seed`` when it gives none."""

    max_logprobs: int = 20
    max_n: int = 64
    max_prompts: int = 256
    default_max_tokens: int = 16
    default_seed: int = 0


def check_model(model: str, served: str) -> None:
    """404 ``model_not_found`` unless ``model`` is the served name."""
    if model != served:
        raise ApiError(
            404, f"the model {model!r} does not exist: this server serves {served!r}", "model", "model_not_found"
        )


def _sampling(body: CompletionRequest | ChatRequest, max_tokens: int, limits: Limits) -> Sampling:
    """The request's :class:`Sampling`, every value range-checked (400 naming the field)."""
    if body.stream:
        raise ApiError(400, "streaming is not supported: answers are sent whole (stream false)", "stream")
    temperature = 1.0 if body.temperature is None else float(body.temperature)
    top_p = 1.0 if body.top_p is None else float(body.top_p)
    top_k = 0 if body.top_k is None else int(body.top_k)
    n = 1 if body.n is None else int(body.n)
    stop = () if body.stop is None else (body.stop,) if isinstance(body.stop, str) else tuple(body.stop)
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ApiError(400, f"temperature must be a number >= 0, got {temperature}", "temperature")
    if not 0.0 < top_p <= 1.0:
        raise ApiError(400, f"top_p must be in (0, 1], got {top_p}", "top_p")
    if top_k < -1:
        raise ApiError(400, f"top_k must be -1 or 0 (off) or a positive count, got {top_k}", "top_k")
    if not 1 <= n <= limits.max_n:
        raise ApiError(400, f"n must be between 1 and {limits.max_n}, got {n}", "n")
    if any(not s for s in stop):
        raise ApiError(400, "stop strings must not be empty", "stop")
    seed = limits.default_seed if body.seed is None else int(body.seed)
    return Sampling(max_tokens, temperature, top_p, max(top_k, 0), stop, seed, n).normalised()


def _logprob_count(value: int | None, param: str, limits: Limits) -> int | None:
    if value is not None and not 0 <= value <= limits.max_logprobs:
        raise ApiError(
            400,
            f"{param} must be between 0 and {limits.max_logprobs} (this server's --max-logprobs), got {value}",
            param,
        )
    return value


def completion_works(body: CompletionRequest, served: str, limits: Limits) -> list[Work]:
    """The works of a legacy completion request, one per prompt (in order); 404 / 400 :class:`ApiError` if refused."""
    check_model(body.model, served)
    echo = bool(body.echo)
    max_tokens = limits.default_max_tokens if body.max_tokens is None else body.max_tokens
    if max_tokens < 0 or (max_tokens == 0 and not echo):
        raise ApiError(400, f"max_tokens must be >= 1 (0 only with echo), got {max_tokens}", "max_tokens")
    sampling = _sampling(body, max_tokens, limits)
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
    as_ids = bool(body.return_tokens_as_token_ids)
    return [Work("completion", p, sampling, logprobs, echo, as_ids) for p in prompts]


def chat_work(body: ChatRequest, served: str, limits: Limits) -> Work:
    """The work of a chat request (its messages, rendered later with the model's chat template); 404 / 400
    :class:`ApiError` if refused."""
    check_model(body.model, served)
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    max_tokens = limits.default_max_tokens if max_tokens is None else max_tokens
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    if max_tokens < 1:
        raise ApiError(400, f"{param} must be >= 1, got {max_tokens}", param)
    sampling = _sampling(body, max_tokens, limits)
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
        messages.append((message.role, _content(message.content, f"messages[{i}].content")))
    logprobs = (top or 0) if body.logprobs else None
    return Work("chat", tuple(messages), sampling, logprobs, False, bool(body.return_tokens_as_token_ids))


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
