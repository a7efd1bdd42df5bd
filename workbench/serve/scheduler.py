"""The request scheduler of ``workbench serve``: a bounded queue and one worker thread that batches across requests.

Each ``POST /answer`` becomes a :class:`Job` (its questions, its method, its deadline and a future). One worker thread
takes the job at the head of the queue together with every job queued behind it for the same method, up to
``max_batch_questions`` questions, and answers them with one ``answer(questions, method)`` call — the runtime batches
the forward passes, so eight clients asking at once cost about one batch, not eight answers. The answers are split
back to their jobs in order.

Guarantees:

* **bounded** — at most ``max_queue`` questions wait (the running batch is not counted); :meth:`BatchScheduler.submit`
  raises :class:`QueueFull` beyond, with an estimate of when room frees up.
* **nothing abandoned is computed** — :meth:`BatchScheduler.cancel` (the client left, or its deadline passed) removes
  a waiting job at once, and the worker skips any job whose deadline passed before its batch started. A job already
  in a running batch is marked abandoned; once every job of the batch is (or the scheduler is closed), the batch is
  interrupted at the answering function's next :func:`~workbench.core.interrupt.check_interrupt` — the generator
  checks before every model forward, so within one decoding step — and its jobs fail with :class:`Abandoned`.
* **one request's failure stays its own** — when a batch with several jobs raises, each job is answered again alone,
  so a question the runtime refuses fails only the request that sent it.
* **FIFO per method, fair between clients** — the head job is always in the next batch; jobs of another method wait
  at most one batch. Behind the head, a batch takes each client's first waiting job before anyone's second (round
  robin over :attr:`Job.client`, FIFO within a client), so a flood of requests from one client does not hold
  another client's request back for more than one batch when it fits.
* **a token budget** — with ``max_batch_tokens``, a batch takes jobs while their :attr:`Job.tokens` (the caller's
  measure of their work, e.g. the tokens they may generate) add up to at most it; a single job over it still runs,
  alone.
* **batches stay full under a closed loop** — when a batch's clients get their answers they ask again a few
  milliseconds later, one by one; a worker that started on the first of them would alternate a batch of 1 with a
  batch of 7. So when the last batch served several requests and the queue holds fewer, the worker waits for them a
  little — until as many requests are queued as the last batch served, or the batch is full, or ``max_gather_s``
  (at most a tenth of the last batch's answering time) has passed. A lone client (last batch: one request) never
  waits.

**Joining a running batch** (``joining=True``): the answering function is then called with a :class:`RunningBatch`
instead of a question list. Between its steps it may take more queued jobs of its method (:meth:`RunningBatch.more`,
in the same fair order and within the same bounds, counting the jobs still running) and it hands each job its
answers as soon as they are ready (:meth:`RunningBatch.deliver`) — and, to a job with a :attr:`Job.progress`, its
answers so far after every step (:meth:`RunningBatch.report`: streaming): continuous batching, where requests enter
a running batch and leave it when done. The guarantees above hold for every job it took; when it raises, each job it
did not answer is answered again alone (without joining).

The scheduler knows nothing of HTTP: the app maps :class:`QueueFull`, :class:`DeadlineExpired` and
:class:`SchedulerClosed` to status codes. It also keeps, per batching key, the fastest rate it has answered at
(:meth:`BatchScheduler.fastest_seconds_per_question`), which the app uses to refuse requests that could not be
answered within their deadline.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from workbench.core.interrupt import Interrupted, interruptible

logger = logging.getLogger("workbench.serve")

AnswerFn = Callable[[list[str], str], Sequence[Any]]

# Weight of the newest batch in the running estimate of seconds per question (Retry-After); light smoothing, so one
# slow batch does not dominate and a changed load shows within a few batches.
_EMA_WEIGHT = 0.3
# The gathering wait is at most this share of the last batch's answering time: it costs at most ~10% latency.
_GATHER_SHARE = 0.1


class QueueFull(Exception):
    """The queue cannot take ``wanted`` more questions (``queued`` wait, ``limit`` at most); retry after
    ``retry_after_s`` seconds (an estimate, >= 1)."""

    def __init__(self, wanted: int, queued: int, limit: int, retry_after_s: int) -> None:
        self.wanted, self.queued, self.limit, self.retry_after_s = wanted, queued, limit, retry_after_s
        super().__init__(
            f"the server is busy: {queued} question(s) are queued (limit {limit}), this request adds {wanted}; "
            f"retry in {retry_after_s} s"
        )


class DeadlineExpired(Exception):
    """A job's deadline passed before its batch started: it was dropped unanswered."""


class SchedulerClosed(Exception):
    """The scheduler was closed (the server is shutting down): the job was not answered."""


class Abandoned(Exception):
    """Every job of the running batch was abandoned (clients gone, deadlines passed): the batch was interrupted."""


@dataclass(eq=False)
class Job:
    """One request's work: ``questions`` for ``method``, to start before ``deadline`` (a ``time.monotonic()``
    instant). ``future`` resolves to the answers (one per question, in order) or to the exception that stopped them;
    ``abandoned`` is set when nobody waits for them any more while they run (:meth:`BatchScheduler.cancel`).
    ``client`` names who sent it (batches take clients in turn); ``tokens`` is its share of ``max_batch_tokens``.
    ``progress`` (None: none) receives a joining answering function's partial answers before the whole
    (:meth:`RunningBatch.report`); it is called on the worker thread and must not block."""

    questions: list[str]
    method: str
    deadline: float
    future: Future[list[Any]] = field(default_factory=Future)
    abandoned: bool = False
    client: str = ""
    tokens: int = 0
    progress: Callable[[int, Any], None] | None = None


class BatchScheduler:
    """A bounded queue of :class:`Job` and one worker thread that answers them in batches (see the module docstring).

    ``answer(questions, method)`` must return one answer per question, in order; it is only ever called from the
    worker thread, one call at a time. ``max_queue`` bounds the questions waiting; ``max_batch_questions`` bounds the
    questions of one call, except that a single job larger than it is still answered whole (in one call);
    ``max_gather_s`` bounds the wait for a batch's clients to come back (0: never wait); ``max_batch_tokens`` (None:
    no bound) bounds the :attr:`Job.tokens` of one call, except that a single job over it is still answered whole.
    With ``joining``, ``answer`` takes a :class:`RunningBatch` (see the module docstring). The worker starts with the
    first :meth:`submit` and stops at :meth:`close`.
    """

    def __init__(
        self,
        answer: AnswerFn,
        *,
        max_queue: int,
        max_batch_questions: int,
        max_gather_s: float = 0.05,
        max_batch_tokens: int | None = None,
        joining: bool = False,
    ) -> None:
        bounds = [("max_queue", max_queue), ("max_batch_questions", max_batch_questions)]
        if max_batch_tokens is not None:
            bounds.append(("max_batch_tokens", max_batch_tokens))
        for name, value in bounds:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not max_gather_s >= 0:
            raise ValueError(f"max_gather_s must be >= 0 seconds, got {max_gather_s!r}")
        self._answer = answer
        self.max_queue = max_queue
        self.max_batch_questions = max_batch_questions
        self.max_gather_s = max_gather_s
        self.max_batch_tokens = max_batch_tokens
        self.joining = joining
        self._last_batch = (0, 0.0)  # requests served and seconds taken by the last batch
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._queued_questions = 0
        self._running_questions = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._seconds_per_question: float | None = None
        self._fastest: dict[Any, float] = {}  # per batching key: the fewest seconds per question of any batch
        self._first_seen: set[Any] = set()  # batching keys whose first batch (maybe loading models) has run
        self._counts = {"batches": 0, "answered": 0, "dropped": 0, "interrupted": 0}

    # ------------------------------------------------------------------ the request side (event loop)
    def submit(
        self,
        questions: Sequence[str],
        method: str,
        deadline: float,
        *,
        client: str = "",
        tokens: int = 0,
        progress: Callable[[int, Any], None] | None = None,
    ) -> Job:
        """Queue ``questions`` for ``method`` from ``client``, ``tokens`` its share of ``max_batch_tokens``; the
        returned job's future carries the answers, ``progress`` (:attr:`Job.progress`) its partial answers.

        Raises :class:`QueueFull` when they do not fit under ``max_queue`` and :class:`SchedulerClosed` after
        :meth:`close`. Never blocks on the model.
        """
        job = Job(list(questions), method, deadline, client=client, tokens=tokens, progress=progress)
        with self._cond:
            if self._closed:
                raise SchedulerClosed("the server is shutting down")
            wanted = len(job.questions)
            if self._queued_questions + wanted > self.max_queue:
                raise QueueFull(wanted, self._queued_questions, self.max_queue, self._retry_after_locked())
            self._queue.append(job)
            self._queued_questions += wanted
            self._start_locked()
            self._cond.notify()
        return job

    def cancel(self, job: Job) -> bool:
        """Drop ``job`` if its batch has not started (it is then never computed) and return True; False when it is
        already running or done. A running job is marked abandoned: its batch is interrupted once all its jobs are
        (see the module docstring), else its answer is simply not used."""
        with self._cond:
            if not job.future.cancel():
                if not job.future.done():
                    job.abandoned = True
                return False
            try:
                self._queue.remove(job)
            except ValueError:
                return True  # already taken off the queue and skipped by the worker
            self._queued_questions -= len(job.questions)
            self._counts["dropped"] += 1
            return True

    def stats(self) -> dict[str, int]:
        """``{"queued": questions waiting, "queued_requests", "running": questions in the running batch, "limit":
        max_queue, "batches": answering calls made, "answered": questions answered, "dropped": requests dropped
        unanswered (client gone or deadline passed before their batch), "interrupted": batches stopped while running
        (every client gone, or the server shutting down)}``."""
        with self._cond:
            return {
                "queued": self._queued_questions,
                "queued_requests": len(self._queue),
                "running": self._running_questions,
                "limit": self.max_queue,
                **self._counts,
            }

    def fastest_seconds_per_question(self, method: Any) -> float | None:
        """The fewest seconds per question of any batch answered for ``method`` (a batching key) since start, its
        first batch left out (it may have loaded the models: ``serve --lazy``); None before a second batch. A lower
        bound on what a request for it will take."""
        with self._cond:
            return self._fastest.get(method)

    def close(self) -> None:
        """Stop taking jobs: every waiting job fails with :class:`SchedulerClosed`, and a running batch is interrupted
        at its next :func:`~workbench.core.interrupt.check_interrupt` (its jobs fail with :class:`SchedulerClosed`;
        the worker is a daemon thread, so a batch that never checks does not hold the process open)."""
        with self._cond:
            self._closed = True
            waiting = list(self._queue)
            self._queue.clear()
            self._queued_questions = 0
            self._cond.notify_all()
        for job in waiting:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(SchedulerClosed("the server is shutting down"))

    # ------------------------------------------------------------------ the worker
    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="workbench-serve-answers", daemon=True)
            self._thread.start()

    def _retry_after_locked(self) -> int:
        # Room frees up when the worker takes its next batch off the queue: about one batch's answering time.
        per_question = self._seconds_per_question or 1.0
        batch = min(max(self._queued_questions, 1), self.max_batch_questions)
        return max(1, math.ceil(per_question * batch))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                self._gather_locked()
                if self._closed:
                    return
                if not self._queue:
                    continue  # every waiting job was cancelled while the worker gathered
                method, jobs = self._take_locked()
                self._running_questions = sum(len(j.questions) for j in jobs)
            try:
                if jobs:
                    self._answer_batch(method, jobs)
            except Exception as exc:
                # A bug here must not kill the only worker (every later request would wait for its deadline).
                logger.exception("the answering worker failed on a batch of %d request(s)", len(jobs))
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
            finally:
                with self._cond:
                    self._running_questions = 0

    def _gather_locked(self) -> None:
        """Wait (lock released) for the last batch's clients to come back; see the module docstring."""
        requests, seconds = self._last_batch
        window = min(self.max_gather_s, _GATHER_SHARE * seconds)
        if requests <= 1 or window <= 0:
            return
        until = time.monotonic() + window
        while (
            not self._closed
            and len(self._queue) < requests
            and self._queued_questions < self.max_batch_questions
            and (left := until - time.monotonic()) > 0
        ):
            self._cond.wait(left)

    def _take_locked(self, method: str | None = None, running: Sequence[Job] = ()) -> tuple[str, list[Job]]:
        """Remove the next batch from the queue: the jobs of ``method`` (None: the head job's) in :meth:`_fair_order`
        while they fit, with the ``running`` jobs, under ``max_batch_questions`` and ``max_batch_tokens`` (the first
        job fits whatever its size when nothing runs). Jobs cancelled or past their deadline are removed and skipped
        (never computed)."""
        method = self._queue[0].method if method is None else method
        now = time.monotonic()
        taken: list[Job] = []
        total = sum(len(j.questions) for j in running)
        tokens = sum(j.tokens for j in running)
        budget = math.inf if self.max_batch_tokens is None else self.max_batch_tokens
        for job in self._fair_order(method):
            size = len(job.questions)
            if (taken or running) and (total + size > self.max_batch_questions or tokens + job.tokens > budget):
                break  # in fair order: a later, smaller job does not overtake this one
            self._queue.remove(job)
            self._queued_questions -= size
            if not job.future.set_running_or_notify_cancel():
                self._counts["dropped"] += 1
                continue
            if now >= job.deadline:
                self._counts["dropped"] += 1
                job.future.set_exception(DeadlineExpired("the request's deadline passed while it was queued"))
                continue
            taken.append(job)
            total += size
            tokens += job.tokens
        return method, taken

    def _fair_order(self, method: str) -> list[Job]:
        """The queued jobs of ``method``, clients in turn: every client's first job (in queue order), then every
        client's second, and so on — the head job first, each client's jobs in their own order."""
        turns: dict[str, int] = {}
        ranked = []
        for position, job in enumerate(self._queue):
            if job.method == method:
                turn = turns.get(job.client, 0)
                turns[job.client] = turn + 1
                ranked.append((turn, position, job))
        return [job for _, _, job in sorted(ranked, key=lambda r: (r[0], r[1]))]

    def _answer_batch(self, method: str, jobs: list[Job], *, join: bool = True) -> None:
        if self.joining:
            self._answer_joining(method, jobs, join=join)
            return
        questions = [q for job in jobs for q in job.questions]
        began = time.monotonic()
        try:
            # stop at the next check once nobody waits for any of these answers (a plain read of flags the event
            # loop sets: a stale read only delays the stop by one check)
            with interruptible(lambda: self._closed or all(job.abandoned for job in jobs)):
                answers = list(self._answer(questions, method))
            if len(answers) != len(questions):
                raise RuntimeError(f"the runtime returned {len(answers)} answers for {len(questions)} questions")
        except Interrupted:
            closed = self._closed
            with self._cond:
                self._counts["interrupted"] += 1
            logger.info(
                "a batch of %d request(s) was interrupted (%s)", len(jobs), "shutdown" if closed else "abandoned"
            )
            for job in jobs:
                if closed:
                    job.future.set_exception(SchedulerClosed("the server is shutting down"))
                else:
                    job.future.set_exception(Abandoned("every client of the batch left or passed its deadline"))
            return
        except Exception as exc:
            if len(jobs) == 1:
                jobs[0].future.set_exception(exc)
                return
            # Find whose questions failed: answer each job alone, so the others still get their answers.
            logger.info("a batch of %d requests failed (%s); answering them one by one", len(jobs), exc)
            for job in jobs:
                if time.monotonic() >= job.deadline:
                    job.future.set_exception(DeadlineExpired("the request's deadline passed while it was queued"))
                else:
                    self._answer_batch(method, [job])
            return
        self._record_batch(method, len(jobs), len(questions), time.monotonic() - began)
        logger.debug("answered %d question(s) of %d request(s)", len(questions), len(jobs))
        start = 0
        for job in jobs:
            end = start + len(job.questions)
            job.future.set_result(answers[start:end])
            start = end

    def _record_batch(self, method: str, requests: int, questions: int, elapsed: float) -> None:
        """Count an answered batch and update the rate estimates (Retry-After, the fastest rate, the gathering)."""
        with self._cond:
            per_question = elapsed / max(questions, 1)
            previous = self._seconds_per_question
            self._seconds_per_question = (
                per_question if previous is None else (1 - _EMA_WEIGHT) * previous + _EMA_WEIGHT * per_question
            )
            self._counts["batches"] += 1
            self._counts["answered"] += questions
            self._last_batch = (requests, elapsed)
            if method in self._first_seen:
                self._fastest[method] = min(per_question, self._fastest.get(method, math.inf))
            self._first_seen.add(method)

    def _answer_joining(self, method: str, jobs: list[Job], *, join: bool) -> None:
        """Run a joining answering function on ``jobs`` (and what joins them; see the module docstring)."""
        batch = RunningBatch(self, method, jobs, join=join)
        began = time.monotonic()
        try:
            with interruptible(lambda: self._closed or all(j.abandoned for j in batch.jobs if not j.future.done())):
                self._answer(batch, method)  # type: ignore[arg-type]
        except Interrupted:
            closed = self._closed
            with self._cond:
                self._counts["interrupted"] += 1
            for job in batch.jobs:
                if not job.future.done():
                    job.future.set_exception(
                        SchedulerClosed("the server is shutting down")
                        if closed
                        else Abandoned("every client of the batch left or passed its deadline")
                    )
            return
        except Exception as exc:
            left = [job for job in batch.jobs if not job.future.done()]
            if len(batch.jobs) == 1 or not join:
                for job in left:
                    job.future.set_exception(exc)
                return
            logger.info("a joined batch failed (%s); answering its %d open request(s) one by one", exc, len(left))
            for job in left:
                if time.monotonic() >= job.deadline:
                    job.future.set_exception(DeadlineExpired("the request's deadline passed while it was queued"))
                else:
                    self._answer_batch(method, [job], join=False)
            return
        finally:
            with self._cond:
                self._running_questions = 0
        for job in batch.jobs:
            if not job.future.done():
                job.future.set_exception(RuntimeError("the answering function left a request unanswered"))
        questions = sum(len(job.questions) for job in batch.jobs)
        self._record_batch(method, len(batch.jobs), questions, time.monotonic() - began)


class RunningBatch:
    """The jobs a joining answering function runs (see the module docstring): ``jobs`` (those it started with, then
    those it took), ``method``. Made by the scheduler's worker; used from the worker thread only."""

    def __init__(self, scheduler: BatchScheduler, method: str, jobs: list[Job], *, join: bool = True) -> None:
        self._scheduler, self.method, self.jobs, self._join = scheduler, method, list(jobs), join

    def more(self) -> list[Job]:
        """Take the queued jobs of this batch's method that fit beside the jobs still running (fair order, the
        scheduler's bounds); they are running from now on. Empty when none wait, none fit, joining is off, or the
        job at the head of the queue is of another method (it goes next: the batch then drains)."""
        if not self._join:
            return []
        scheduler = self._scheduler
        with scheduler._cond:
            if scheduler._closed or not scheduler._queue or scheduler._queue[0].method != self.method:
                return []
            running = [job for job in self.jobs if not job.future.done()]
            _, taken = scheduler._take_locked(self.method, running)
            scheduler._running_questions = sum(len(j.questions) for j in running + taken)
        self.jobs.extend(taken)
        return taken

    def report(self, job: Job, index: int, partial: Any) -> None:
        """``job``'s question ``index`` answered so far (``partial``), handed to its :attr:`Job.progress` while the
        job is still running; a job without one, or already resolved, gets nothing."""
        if job.progress is not None and not job.future.done():
            job.progress(index, partial)

    def deliver(self, job: Job, answers: Sequence[Any]) -> None:
        """``job``'s answers (one per question, in order): its future resolves now, whatever else still runs."""
        if len(answers) != len(job.questions):
            raise RuntimeError(f"{len(answers)} answers for {len(job.questions)} questions")
        if not job.future.done():
            job.future.set_result(list(answers))
