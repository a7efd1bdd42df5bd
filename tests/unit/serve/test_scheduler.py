"""The request scheduler alone (no HTTP): bound, Retry-After, cancelling, gathering, shutdown, a surviving worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from workbench.core.interrupt import check_interrupt
from workbench.serve.scheduler import Abandoned, BatchScheduler, DeadlineExpired, Job, QueueFull, SchedulerClosed


class Recorder:
    """An answer function that records each call and can be held with ``gate``."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, questions: Sequence[str], method: str) -> list[str]:
        self.calls.append(list(questions))
        self.started.set()
        self.gate.wait(10)
        return [f"{method}:{q}" for q in questions]


class Stepper(Recorder):
    """An answer function of 200 steps of 10 ms, each after :func:`check_interrupt` as the generator's forwards; its
    first call waits for ``gate``. ``steps`` counts the steps run."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def __call__(self, questions: Sequence[str], method: str) -> list[str]:
        answers = super().__call__(questions, method)
        self.gate.set()  # only the first call is held
        for _ in range(200):
            check_interrupt()
            time.sleep(0.01)
            self.steps += 1
        return answers


def _later(seconds: float = 60.0) -> float:
    return time.monotonic() + seconds


def _held(
    answer: Recorder, first: str, max_queue: int = 16, max_batch_questions: int = 8
) -> tuple[BatchScheduler, Job]:
    """A scheduler over ``answer`` whose worker is answering the job ``[first]``, held at ``answer.gate``; the
    scheduler and that job."""
    answer.gate.clear()
    scheduler = BatchScheduler(answer, max_queue=max_queue, max_batch_questions=max_batch_questions)
    job = scheduler.submit([first], "m", _later())
    assert answer.started.wait(5)
    return scheduler, job


def test_answers_are_split_back_per_job_in_order():
    answer = Recorder()
    scheduler, first = _held(answer, "hold")
    jobs = [scheduler.submit([f"q{i}a", f"q{i}b"], "m", _later()) for i in range(3)]
    answer.gate.set()
    assert first.future.result(5) == ["m:hold"]
    assert [job.future.result(5) for job in jobs] == [[f"m:q{i}a", f"m:q{i}b"] for i in range(3)]
    assert answer.calls == [["hold"], ["q0a", "q0b", "q1a", "q1b", "q2a", "q2b"]]
    assert scheduler.stats()["batches"] == 2 and scheduler.stats()["answered"] == 7
    scheduler.close()


def test_the_queue_is_bounded_in_questions_and_estimates_retry_after():
    answer = Recorder()
    scheduler, _ = _held(answer, "running", max_queue=4, max_batch_questions=4)  # taken by the worker: not counted
    scheduler.submit(["a", "b", "c"], "m", _later())
    scheduler._seconds_per_question = 2.5  # as measured by earlier batches
    with pytest.raises(QueueFull) as info:
        scheduler.submit(["d", "e"], "m", _later())
    assert (info.value.wanted, info.value.queued, info.value.limit) == (2, 3, 4)
    assert info.value.retry_after_s == 8  # one batch of the 3 queued questions at 2.5 s each, rounded up
    fits = scheduler.submit(["d"], "m", _later())
    answer.gate.set()
    assert fits.future.result(5) == ["m:d"]
    scheduler.close()


def test_cancelled_and_expired_jobs_are_never_computed():
    answer = Recorder()
    scheduler, running = _held(answer, "running")
    gone = scheduler.submit(["gone"], "m", _later())
    expired = scheduler.submit(["expired"], "m", time.monotonic() + 0.05)
    kept = scheduler.submit(["kept"], "m", _later())
    assert scheduler.cancel(gone) is True and scheduler.stats()["queued"] == 2
    assert scheduler.cancel(running) is False  # a running batch cannot be interrupted
    time.sleep(0.1)
    answer.gate.set()
    assert kept.future.result(5) == ["m:kept"] and running.future.result(5) == ["m:running"]
    with pytest.raises(DeadlineExpired):
        expired.future.result(5)
    assert answer.calls == [["running"], ["kept"]]
    assert scheduler.stats()["dropped"] == 2
    scheduler.close()


def test_a_flood_from_one_client_does_not_hold_another_back():
    answer = Recorder()
    scheduler, _ = _held(answer, "hold", max_queue=32, max_batch_questions=4)
    flood = [scheduler.submit([f"a{i}"], "m", _later(), client="A") for i in range(8)]
    other = scheduler.submit(["b0"], "m", _later(), client="B")
    answer.gate.set()
    assert other.future.result(5) == ["m:b0"] and [job.future.result(5) for job in flood]
    # the head job leads; B's only job goes before A's second: B is in the first batch behind the running one
    assert answer.calls == [["hold"], ["a0", "b0", "a1", "a2"], ["a3", "a4", "a5", "a6"], ["a7"]]
    scheduler.close()


def test_one_client_keeps_its_own_order_and_the_fifo_of_one_client_is_unchanged():
    answer = Recorder()
    scheduler, _ = _held(answer, "hold", max_batch_questions=3)
    jobs = [scheduler.submit([name], "m", _later(), client=client) for name, client in
            [("a0", "A"), ("a1", "A"), ("b0", "B"), ("b1", "B"), ("c0", "C")]]  # fmt: skip
    answer.gate.set()
    assert [job.future.result(5) for job in jobs]
    assert answer.calls == [["hold"], ["a0", "b0", "c0"], ["a1", "b1"]]
    scheduler.close()


def test_the_token_budget_bounds_a_batch_and_a_larger_job_still_runs_alone():
    answer = Recorder()
    answer.gate.clear()
    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=8, max_batch_tokens=10)
    running = scheduler.submit(["hold"], "m", _later(), tokens=1)
    assert answer.started.wait(5)
    jobs = [scheduler.submit([name], "m", _later(), tokens=tokens) for name, tokens in
            [("a", 4), ("b", 4), ("c", 4), ("big", 30), ("d", 2)]]  # fmt: skip
    answer.gate.set()
    assert running.future.result(5) and [job.future.result(5) for job in jobs]
    # a + b = 8 fit under 10, c would make 12; the job over the budget is answered alone, in its turn
    assert answer.calls == [["hold"], ["a", "b"], ["c"], ["big"], ["d"]]
    scheduler.close()


def test_a_joining_batch_takes_queued_jobs_within_the_bounds_and_each_leaves_when_answered():
    taken: list[list[list[str]]] = []
    gate, started = threading.Event(), threading.Event()

    def answer(batch, method):
        taken.append([job.questions for job in batch.jobs])
        started.set()
        gate.wait(5)
        if method == "m" and len(taken) == 1:
            taken.append([job.questions for job in batch.more()])  # b and c fit beside a (3 questions), d does not
            batch.deliver(batch.jobs[0], ["A"])  # a leaves: its client has its answer now
            assert first.future.done() and not batch.jobs[1].future.done()
            taken.append([job.questions for job in batch.more()])  # the head is e, another method's: it goes next
        for job in batch.jobs:
            if not job.future.done():
                batch.deliver(job, [f"{method}:{q}" for q in job.questions])

    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=3, joining=True)
    first = scheduler.submit(["a"], "m", _later())
    assert started.wait(5)
    rest = [scheduler.submit([name], method, _later()) for name, method in
            [("b", "m"), ("c", "m"), ("e", "n"), ("d", "m")]]  # fmt: skip
    gate.set()
    assert first.future.result(5) == ["A"]
    assert [job.future.result(5) for job in rest] == [["m:b"], ["m:c"], ["n:e"], ["m:d"]]
    assert taken == [[["a"]], [["b"], ["c"]], [], [["e"]], [["d"]]]
    assert scheduler.stats()["batches"] == 3 and scheduler.stats()["answered"] == 5
    scheduler.close()


def test_a_joining_batch_that_fails_answers_its_open_jobs_alone_and_keeps_the_answered():
    gate, started, alone = threading.Event(), threading.Event(), []

    def answer(batch, method):
        if batch.jobs[0].questions == ["one"]:
            started.set()
            gate.wait(5)
            assert [job.questions for job in batch.more()] == [["two"], ["bad"]]
            batch.deliver(batch.jobs[0], ["first"])
            raise RuntimeError("a decoding step failed")
        alone.append(batch.jobs[0].questions)
        assert batch.more() == []  # answered alone: nothing joins
        if batch.jobs[0].questions == ["bad"]:
            raise ValueError("refused")
        batch.deliver(batch.jobs[0], ["ok"])

    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=8, joining=True)
    one = scheduler.submit(["one"], "m", _later())
    assert started.wait(5)
    two, bad = scheduler.submit(["two"], "m", _later()), scheduler.submit(["bad"], "m", _later())
    gate.set()
    assert one.future.result(5) == ["first"] and two.future.result(5) == ["ok"]  # the delivered answer is kept
    with pytest.raises(ValueError):
        bad.future.result(5)
    assert alone == [["two"], ["bad"]]
    scheduler.close()


def test_a_lone_client_never_waits_for_others():
    answer = Recorder()
    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=8, max_gather_s=1.0)
    scheduler._last_batch = (1, 10.0)  # the last batch served one request: nobody else to wait for
    began = time.monotonic()
    assert scheduler.submit(["alone"], "m", _later()).future.result(5) == ["m:alone"]
    assert time.monotonic() - began < 0.3
    scheduler.close()


def test_the_worker_waits_briefly_for_the_last_batchs_clients_to_come_back():
    answer = Recorder()
    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=8, max_gather_s=0.5)
    scheduler._last_batch = (3, 10.0)  # three clients were served together; they ask again one by one
    jobs = []
    for name in ("a", "b", "c"):
        jobs.append(scheduler.submit([name], "m", _later()))
        time.sleep(0.05)
    assert [job.future.result(5) for job in jobs] == [["m:a"], ["m:b"], ["m:c"]]
    assert answer.calls == [["a", "b", "c"]]
    scheduler.close()


def test_cancelling_every_job_while_the_worker_gathers_does_not_kill_it():
    answer = Recorder()
    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=8, max_gather_s=0.3)
    scheduler._last_batch = (2, 10.0)
    lonely = scheduler.submit(["left"], "m", _later())
    time.sleep(0.05)  # the worker is gathering
    assert scheduler.cancel(lonely)
    time.sleep(0.4)  # past the gathering window, with an empty queue
    assert scheduler.submit(["next"], "m", _later()).future.result(5) == ["m:next"]
    assert answer.calls == [["next"]]
    scheduler.close()


def test_a_failing_or_broken_answer_fails_its_job_and_the_worker_serves_on():
    def broken(questions: Sequence[str], method: str) -> list[str]:
        if questions == ["short"]:
            return []  # one answer missing
        if questions == ["boom"]:
            raise ValueError("boom")
        return list(questions)

    scheduler = BatchScheduler(broken, max_queue=16, max_batch_questions=8)
    with pytest.raises(RuntimeError, match="0 answers for 1 questions"):
        scheduler.submit(["short"], "m", _later()).future.result(5)
    with pytest.raises(ValueError, match="boom"):
        scheduler.submit(["boom"], "m", _later()).future.result(5)
    assert scheduler.submit(["fine"], "m", _later()).future.result(5) == ["fine"]
    scheduler.close()


def test_close_fails_waiting_jobs_and_refuses_new_ones():
    answer = Recorder()
    scheduler, running = _held(answer, "running")
    waiting = scheduler.submit(["waiting"], "m", _later())
    scheduler.close()
    with pytest.raises(SchedulerClosed):
        waiting.future.result(5)
    with pytest.raises(SchedulerClosed):
        scheduler.submit(["late"], "m", _later())
    answer.gate.set()
    assert running.future.result(5) == ["m:running"]  # the running batch finishes
    assert answer.calls == [["running"]]


def _interrupted(scheduler: BatchScheduler, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while scheduler.stats()["interrupted"] == 0:
        assert time.monotonic() < deadline, "the running batch was never interrupted"
        time.sleep(0.01)


def test_a_running_batch_is_interrupted_once_every_job_of_it_is_abandoned():
    answer = Stepper()
    scheduler, holder = _held(answer, "hold")
    first, second = scheduler.submit(["a"], "m", _later()), scheduler.submit(["b"], "m", _later())
    answer.started.clear()
    answer.gate.set()  # the holder's steps run; then a and b go in one batch
    assert holder.future.result(10) == ["m:hold"]
    assert answer.started.wait(5) and answer.calls[-1] == ["a", "b"]
    assert scheduler.cancel(first) is False and first.abandoned  # running: marked, not dropped
    time.sleep(0.1)
    assert scheduler.stats()["interrupted"] == 0  # b still waits: the batch goes on
    assert scheduler.cancel(second) is False
    _interrupted(scheduler)
    for job in (first, second):
        with pytest.raises(Abandoned):
            job.future.result(5)
    assert answer.steps < 200 + 100  # the holder's 200 steps, and well under half of the batch's
    assert scheduler.submit(["next"], "m", _later()).future.result(10) == ["m:next"]  # the worker serves on
    scheduler.close()


def test_close_interrupts_the_running_batch():
    answer = Stepper()
    scheduler = BatchScheduler(answer, max_queue=16, max_batch_questions=8)
    running = scheduler.submit(["running"], "m", _later())
    assert answer.started.wait(5)
    scheduler.close()
    with pytest.raises(SchedulerClosed):
        running.future.result(2)  # its 2 s of steps were cut short
    assert scheduler.stats()["interrupted"] == 1 and answer.steps < 100


def test_the_fastest_rate_per_method_is_kept():
    def timed(questions: Sequence[str], method: str) -> list[str]:
        time.sleep(0.05 * (len(questions) if method == "slow" else 1))
        return list(questions)

    scheduler = BatchScheduler(timed, max_queue=16, max_batch_questions=8)
    scheduler.submit(["a"] * 6, "slow", _later()).future.result(5)  # a first batch may load models: left out
    assert scheduler.fastest_seconds_per_question("slow") is None
    scheduler.submit(["a"], "slow", _later()).future.result(5)
    scheduler.submit(["a", "b"], "slow", _later()).future.result(5)
    for _ in range(2):
        scheduler.submit(["a", "b", "c", "d"], "fast", _later()).future.result(5)
    slow, fast = scheduler.fastest_seconds_per_question("slow"), scheduler.fastest_seconds_per_question("fast")
    assert 0.05 <= slow < 0.5 and 0.0125 <= fast < slow  # one call of 50 ms for 4 questions
    scheduler.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_queue": 0},
        {"max_batch_questions": 0},
        {"max_queue": True},
        {"max_gather_s": -1.0},
        {"max_batch_tokens": 0},
        {"max_batch_tokens": 2.5},
    ],
)
def test_bad_settings_are_refused(kwargs):
    settings = {"max_queue": 4, "max_batch_questions": 4, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        BatchScheduler(Recorder(), **settings)
