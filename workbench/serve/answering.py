"""Answering a request: count its tokens against the limit, refuse work that cannot finish in time, queue it on the
app's scheduler and wait for its answers or the right refusal; shared by ``POST /answer`` and the chat route."""

# No ``from __future__ import annotations``: FastAPI and pydantic read the annotations as objects.

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from fastapi import Request
from fastapi.responses import Response

from workbench.core.errors import WorkbenchError
from workbench.serve.answer_schema import OODTally
from workbench.serve.http_errors import ErrorFn
from workbench.serve.limits import ServeLimits
from workbench.serve.readiness import WarmUp
from workbench.serve.scheduler import BatchScheduler, DeadlineExpired, Job, QueueFull, SchedulerClosed
from workbench.serve.waiting import CLIENT_CLOSED, ClientGone, NotInTime, job_answers

logger = logging.getLogger("workbench.serve")


class ServableRuntime(Protocol):
    """What the API needs of a runtime (:class:`~workbench.runtime.Runtime` has it; tests use fakes)."""

    name: str
    version: str
    methods: tuple[str, ...]
    method_options: dict[str, dict[str, Any]]

    def info(self) -> dict[str, Any]:
        """JSON-ready description with a ``decision`` block."""
        ...

    def answer_many(
        self, questions: Sequence[str], method: str | None = None, batch_size: int | None = None
    ) -> list[Any]:
        """Answers (objects with ``to_dict()`` and an ``ood`` attribute: a dict or None), one per question, in
        order."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's length in the generator's tokens; safe to call while an answer runs."""
        ...

    def warm(self, methods: Sequence[str] | None = None, *, answer: bool = False) -> Any:
        """Load every method's models now and, with ``answer``, answer one warm-up question with each."""
        ...


@dataclass(frozen=True)
class ServeContext:
    """What the routes of one app share: the ``runtime`` and its ``methods`` (``default_method`` answers when a
    request names none), the ``limits``, the ``scheduler`` that batches the answering, the ``warm_up``, the ``ood``
    tally and when the app was made (``started``, a Unix time)."""

    runtime: ServableRuntime
    limits: ServeLimits
    methods: tuple[str, ...]
    default_method: str
    scheduler: BatchScheduler
    warm_up: WarmUp
    ood: OODTally
    started: float

    async def wait_for(self, job: Job, request: Request, deadline: float, error: ErrorFn) -> Response | list[Any]:
        """The job's answers, or the right refusal (made by ``error``): 504 past the deadline, nothing (499) when the
        client left (either way the job is cancelled, a running batch interrupted when it was the last waiting)."""
        try:
            return await job_answers(self.scheduler, job, request, deadline)
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED)
        except NotInTime:
            return error(504, f"not answered within the {self.limits.timeout_s:g} s deadline")
        except DeadlineExpired:
            return error(504, f"not answered within the {self.limits.timeout_s:g} s deadline (dropped while queued)")
        except SchedulerClosed as exc:
            return error(503, str(exc))
        except WorkbenchError as exc:
            from workbench.backends.retrieval_engines import EngineError

            # the bundle's engine failed (on_failure: error): the service is unavailable, the request was fine
            return error(503 if isinstance(exc, EngineError) else 422, str(exc))
        except Exception:
            path = request.url.path
            logger.exception("POST %s failed (%d question(s), method %s)", path, len(job.questions), job.method)
            return error(500, "internal server error while answering; see the server log")

    async def answered(
        self,
        questions: list[str],
        labels: list[str],
        method: str,
        request: Request,
        deadline: float,
        error: ErrorFn,
        on_ood: str | None = None,
    ) -> Response | list[Any]:
        """Answers to valid ``questions`` (``labels`` name them in errors) once their tokens are counted against the
        limit and the scheduler has answered them; else the refusal made by ``error`` (422, 503, 504, 500)."""
        try:
            # in a thread: with --lazy the first call loads the generator's tokenizer (and the models)
            counts = await anyio.to_thread.run_sync(self.runtime.count_tokens, questions)
        except Exception:
            logger.exception("counting the tokens of %d question(s) failed", len(questions))
            return error(500, "internal server error while counting tokens; see the server log")
        too_long = token_detail(labels, counts, self.limits.max_question_tokens)
        if too_long:
            return error(422, too_long)
        key = method if on_ood is None else (method, on_ood)
        too_much = work_detail(
            len(questions), method, self.scheduler.fastest_seconds_per_question(key), self.limits.timeout_s
        )
        if too_much:
            return error(422, too_much)
        try:
            job = self.scheduler.submit(questions, key, deadline)  # type: ignore[arg-type]
        except QueueFull as exc:
            return error(503, str(exc), {"Retry-After": str(exc.retry_after_s)})
        except SchedulerClosed as exc:
            return error(503, str(exc))
        return await self.wait_for(job, request, deadline, error)


def answer_record(answer: Any, traces: bool) -> dict[str, Any]:
    """One answer as ``POST /answer`` sends it (and the chat route's ``workbench`` field): ``to_dict()``, without
    ``trace`` unless ``traces``."""
    record = answer.to_dict()
    if not traces:
        record.pop("trace", None)
    return record


def json_safe(value: Any) -> Any:
    """Non-finite floats → null, numpy scalars/arrays → Python values (JSON has no NaN; Starlette refuses it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str | int):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return json_safe(tolist())
    return str(value)


def token_detail(labels: Sequence[str], counts: Sequence[int], limit: int) -> str | None:
    """One line naming the questions over ``limit`` tokens, or None when all fit."""
    over = [f"{label}: {count} tokens" for label, count in zip(labels, counts, strict=True) if count > limit]
    if not over:
        return None
    more = f" (and {len(over) - 3} more)" if len(over) > 3 else ""
    return f"{'; '.join(over[:3])}{more}, over the {limit}-token limit per question (the generator's tokenizer)"


def work_detail(questions: int, method: str, fastest_s: float | None, timeout_s: float) -> str | None:
    """One line refusing ``questions`` for ``method`` when even at the fastest rate the server has answered it
    (``fastest_s`` seconds per question; None: never yet) they would take longer than ``timeout_s``; None when they
    may fit. A single question is always tried (the deadline interrupts it)."""
    if fastest_s is None or questions <= 1 or questions * fastest_s <= timeout_s:
        return None
    fits = max(1, math.floor(timeout_s / fastest_s))
    return (
        f"{questions} questions for {method} need at least {questions * fastest_s:.0f} s at the fastest rate this "
        f"server has answered it ({fastest_s:.2g} s per question), over the {timeout_s:g} s deadline: send at most "
        f"{fits} per request"
    )
