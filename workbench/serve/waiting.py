"""Waiting for one request's answers on the scheduler, shared by ``serve`` and ``serve-model``.

:func:`job_answers` waits for a :class:`~workbench.serve.scheduler.Job` until it is answered, its deadline passes or
its client disconnects, whichever comes first; in the last two cases the job is cancelled on the scheduler (dropped
when still queued, marked abandoned — and interrupted with the rest of its batch — when running) and
:class:`NotInTime` or :class:`ClientGone` is raised. Each server maps these, and the job's own exception, to its
error shape. Needs the asyncio event loop (uvicorn's).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request

from workbench.serve.scheduler import Abandoned, BatchScheduler, Job

CLIENT_CLOSED = 499
"""The status the access log shows for a request whose client left before its answer (nginx's convention); the
response itself is never sent."""


class ClientGone(Exception):
    """The client disconnected before its answer."""


class NotInTime(Exception):
    """The request's deadline passed before its answer."""


async def client_gone(request: Request) -> None:
    """Return once the client has disconnected. The body was read already, so the next ASGI message can only be
    ``http.disconnect`` (uvicorn resumes reading the socket for it, so a closed connection is seen at once)."""
    while True:
        try:
            message = await request.receive()
        except Exception:  # a broken channel is a client we cannot answer either
            return
        if message["type"] == "http.disconnect":
            return


async def job_answers(scheduler: BatchScheduler, job: Job, request: Request, deadline: float) -> list[Any]:
    """The job's answers (or the exception its future holds), waiting at most until ``deadline`` (a
    ``time.monotonic()`` instant) and only while the client is connected: :class:`NotInTime` / :class:`ClientGone`
    otherwise, the job cancelled on ``scheduler``. Cancelling the waiting task cancels the job too."""
    answered = asyncio.wrap_future(job.future)
    gone = asyncio.ensure_future(client_gone(request))
    try:
        timeout = max(0.0, deadline - time.monotonic())
        done, _ = await asyncio.wait({answered, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not job.future.done():
            scheduler.cancel(job)  # dropped when queued; marked abandoned (and interrupted with its batch) when running
        # Detach the asyncio wrapper: cancel it while pending, else mark its exception as seen (asyncio would log an
        # exception it thinks nobody read).
        if not answered.done():
            answered.cancel()
        elif not answered.cancelled():
            answered.exception()
    # Judge by the job's own future: its asyncio wrapper learns of the result one loop turn later.
    if job.future.done() and not job.future.cancelled():
        try:
            return job.future.result()
        except Abandoned:
            pass  # interrupted since this very wait gave up (the worker can be that quick): as if not done
    raise ClientGone() if gone in done else NotInTime()
