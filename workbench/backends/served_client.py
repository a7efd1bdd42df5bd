"""The HTTP side of a served generator: the official ``openai`` client, bounded concurrency, one-line errors.

:class:`ServedClient` sends legacy completions and chat completions to an OpenAI-compatible server
(docs/served-models.md) with the ``openai`` package, which retries connection errors, 408 / 409 / 429 and 5xx
answers with exponential backoff (``retries`` times) and enforces ``timeout_s``. Requests run on a thread pool of
``max_concurrency`` workers, so an engine with continuous batching (vLLM, SGLang, TGI, ``workbench serve-model``)
sees that many requests in flight. The API key is read from the environment variable *named* by ``api_key_env`` when
the client is built and is kept only inside the ``openai`` client object: it is never logged or written.

Every failure that survives the retries is a :class:`ServedModelError`: one line naming the URL and what failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import WorkbenchError


class ServedModelError(WorkbenchError):
    """A served model cannot be reached or answered wrongly (after the client's retries)."""


@dataclass(frozen=True)
class ServedSettings:
    """How to reach a served model: ``base_url`` (ending in ``/v1``), the served ``model`` name, the *name* of the
    environment variable holding the API key (None: no key; the ``openai`` client then sends a placeholder),
    ``timeout_s`` per request, ``retries`` (with exponential backoff, by the ``openai`` client) and
    ``max_concurrency`` requests in flight."""

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    max_concurrency: int = 16

    def validate(self, where: str = "generator") -> None:
        """One-line :class:`ServedModelError` for settings that cannot work (checked before any request)."""
        if not self.base_url.startswith(("http://", "https://")):
            raise ServedModelError(f"base_url must start with http:// or https://, got {self.base_url!r}", where)
        if not self.model:
            raise ServedModelError("the served model name (generator.model) is empty", where)
        if self.timeout_s <= 0 or self.retries < 0 or self.max_concurrency < 1:
            raise ServedModelError("timeout_s must be > 0, retries >= 0 and max_concurrency >= 1", where)
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ServedModelError(
                f"the API key variable {self.api_key_env} is not set (export it, or set generator.api_key_env: null)",
                where,
            )


def _detail(exc: Exception) -> str:
    """What went wrong, in one short phrase, from an ``openai`` exception (never the request, never the key)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"unreachable ({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''})".rstrip(": )")
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = ""
        if isinstance(body, dict):
            inner = body.get("error", body)
            message = str(inner.get("message", "") if isinstance(inner, dict) else inner)
        message = message or str(exc.message)
        return f"HTTP {exc.status_code}: {message}"
    if isinstance(exc, openai.APIResponseValidationError | ValueError | KeyError | TypeError | IndexError):
        return f"malformed answer ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"


class ServedClient:
    """The ``openai`` client for one served model, with a thread pool of ``settings.max_concurrency`` workers."""

    def __init__(self, settings: ServedSettings) -> None:
        import openai

        settings.validate()
        self.settings = settings
        key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=key or "unused",
            timeout=settings.timeout_s,
            max_retries=settings.retries,
        )
        self._pool = ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="served")

    def __repr__(self) -> str:  # never the key
        return f"ServedClient({self.settings.base_url!r}, model={self.settings.model!r})"

    def fail(self, what: str, exc: Exception | None = None) -> ServedModelError:
        """A :class:`ServedModelError` naming the URL, the model and ``what`` failed (with the exception's detail)."""
        detail = f": {_detail(exc)}" if exc is not None else ""
        return ServedModelError(f"{what}{detail}", f"{self.settings.base_url} (model {self.settings.model})")

    # ------------------------------------------------------------------ requests
    def models(self) -> list[str]:
        """The served model names (``GET /models``)."""
        try:
            return [m.id for m in self._client.models.list().data]
        except Exception as exc:
            raise self.fail("listing the models failed", exc) from None

    def completion(self, prompt: str | list[int], *, retry: bool = True, **params: Any) -> dict[str, Any]:
        """One legacy completion (``POST /completions``) as a plain dict; engine extensions go in ``extra_body``.
        ``retry=False`` sends it once (the probe: a server refusing an extension must not be asked again)."""
        extra = params.pop("extra_body", None) or {}
        client = self._client if retry else self._client.with_options(max_retries=0)
        try:
            response = client.completions.create(
                model=self.settings.model, prompt=prompt, extra_body=extra or None, **params
            )
            return response.to_dict()
        except Exception as exc:
            raise self.fail("a completion request failed", exc) from None

    def chat(self, messages: list[dict[str, str]], **params: Any) -> dict[str, Any]:
        """One chat completion (``POST /chat/completions``) as a plain dict."""
        extra = params.pop("extra_body", None) or {}
        try:
            response = self._client.chat.completions.create(
                model=self.settings.model, messages=messages, extra_body=extra or None, **params
            )
            return response.to_dict()
        except Exception as exc:
            raise self.fail("a chat completion request failed", exc) from None

    def map(self, call: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[call(item) for item in items]`` with up to ``max_concurrency`` calls in flight; the first error raises
        (after the others finished or failed), so no answer is half-used."""
        if len(items) <= 1:
            return [call(item) for item in items]
        futures = [self._pool.submit(call, item) for item in items]
        results, first_error = [], None
        for future in futures:
            try:
                results.append(future.result())
            except Exception as exc:  # keep the first; wait for the rest so no request outlives the call
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return results

    def close(self) -> None:
        """Stop the worker threads and the HTTP connections."""
        self._pool.shutdown(wait=True)
        self._client.close()
