"""A model-free runtime for the serve tests, and a helper that serves an app on a free localhost port.

:class:`FakeRuntime` has the Runtime interface (name, version, methods, method_options, info, answer_many returning
real RuntimeAnswer objects, count_tokens) and no model. Special questions make it fail or stall, so one server covers
many cases:

* ``raise data error`` / ``raise bug`` raise a DataError / RuntimeError;
* ``slow`` sleeps ``slow_seconds`` (0.5 s unless set; and sets ``slow_started``);
* ``block`` waits until ``release`` is set (and sets ``block_started``), at most 10 s;
* ``steps`` runs 200 steps of ``step_seconds`` (0.02 s unless set; sets ``steps_started``), calling
  :func:`~workbench.core.interrupt.check_interrupt` before each as the generator does before each model forward, and
  counts them in ``steps_done`` — so a server can interrupt it.

``warm`` (the serve app's warm-up) takes ``warm_seconds`` (0 unless set), checking for interruption every 10 ms, then
raises ``warm_error`` when set; ``warm_calls`` records each call's ``answer`` flag.

Every answer carries an ``ood`` block (docs/ood.md): flagged (``question_form``, ``reported``) for a question that
starts with ``ood``, clear otherwise.

Its tokenizer imitates a byte-level BPE: one token per 4 ASCII characters, one per UTF-8 byte of anything else (an
emoji is 4 tokens), so an emoji question is short in characters and long in tokens, as with the real generator.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from workbench.core.errors import DataError
from workbench.core.interrupt import check_interrupt
from workbench.runtime.runtime import RuntimeAnswer
from workbench.serve.uvicorn_run import make_server

STEPS = 200


class FakeRuntime:
    """The Runtime interface with deterministic answers; ``calls`` records each answer_many call's questions and
    method, in order (see the module docstring for the special questions)."""

    name = "fake-bundle"
    version = "1.2.3"
    methods = ("dtr", "d2rag")  # d2rag is the default although it is not first

    def __init__(
        self,
        slow_seconds: float = 0.5,
        step_seconds: float = 0.02,
        warm_seconds: float = 0.0,
        warm_error: Exception | None = None,
    ) -> None:
        self.slow_seconds = slow_seconds
        self.warm_seconds = warm_seconds
        self.warm_error = warm_error
        self.warm_calls: list[bool] = []
        self.step_seconds = step_seconds
        self.steps_done = 0
        self.steps_started = threading.Event()
        self.method_options = {"dtr": {"k": 3}, "d2rag": {"k": 5, "tau": 0.4}}
        self.calls: list[tuple[list[str], str | None]] = []
        self.slow_started = threading.Event()
        self.block_started = threading.Event()
        self.release = threading.Event()
        self._lock = threading.RLock()

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "methods": dict(self.method_options),
            "decision": {"features": ["entropy", "length"], "classifier": "logreg", "tau": 0.4, "rule": "p < tau"},
        }

    def warm(self, methods: Sequence[str] | None = None, *, answer: bool = False) -> FakeRuntime:
        self.warm_calls.append(answer)
        until = time.monotonic() + self.warm_seconds
        while time.monotonic() < until:
            check_interrupt()
            time.sleep(0.01)
        if self.warm_error is not None:
            raise self.warm_error
        return self

    def retriever_status(self) -> None:
        return None  # an in-process retriever: /health reports none

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        out = []
        for text in texts:
            ascii_chars = sum(1 for ch in text if ord(ch) < 128)
            other_bytes = sum(len(ch.encode("utf-8")) for ch in text if ord(ch) >= 128)
            out.append(math.ceil(ascii_chars / 4) + other_bytes)
        return out

    def questions_seen(self) -> list[str]:
        """Every question that reached answer_many, in order."""
        return [q for questions, _ in self.calls for q in questions]

    def answer_many(self, questions: list[str], method: str | None = None, batch_size: int | None = None) -> list:
        with self._lock:
            self.calls.append((list(questions), method))
            for q in questions:
                if q == "raise data error":
                    raise DataError("question 0 cannot be answered by this fake", "questions")
                if q == "raise bug":
                    raise RuntimeError("the fake model exploded")
                if q == "slow":
                    self.slow_started.set()
                    time.sleep(self.slow_seconds)
                if q == "block":
                    self.block_started.set()
                    self.release.wait(10)
                if q == "steps":
                    self.steps_started.set()
                    for _ in range(STEPS):
                        check_interrupt()
                        time.sleep(self.step_seconds)
                        self.steps_done += 1
            return [self._answer(q, method or "d2rag") for q in questions]

    @staticmethod
    def _answer(question: str, method: str) -> RuntimeAnswer:
        decides = method == "d2rag"
        return RuntimeAnswer(
            question=question,
            method=method,
            text=f"answer to {question}",
            retrieved=not decides,
            decoding="greedy",
            passages=[] if decides else [{"id": "doc1#0", "title": "Doc one"}],
            p_correct=0.75 if decides else None,
            tau=0.4 if decides else None,
            features={"entropy": float("nan"), "length": float(len(question))} if decides else None,
            lm_calls=1,
            tokens=len(question) + 4,
            latency_s=0.001,
            trace={"steps": [{"name": "generate", "detail": {}}], "question": question},
            ood=_ood(question),
        )


def _ood(question: str) -> dict[str, Any]:
    flagged = question.startswith("ood")
    return {"flag": flagged, "checks": ["question_form"] if flagged else [], "action": "reported" if flagged else None}


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread on a free localhost port, as ``run_server`` does (its scheduler closed
    as soon as shutdown begins); yield its base URL; shut it down after."""
    server = make_server(app, host="127.0.0.1", port=0, log_level="warning", on_shutdown=app.state.scheduler.close)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive(), "uvicorn did not shut down"
