"""Readiness of ``workbench serve``: the runtime warmed on a thread of its own while the server already answers
``GET /health``.

Kubernetes (and any load balancer that probes) tells two questions apart: *liveness* — is the process up and
answering at all (``GET /health``, from the moment the socket is bound) — and *readiness* — may it be sent traffic,
i.e. will a request be answered at the speed of the next ones (``GET /ready``). A server is ready once its
:class:`WarmUp` has run: every method's models loaded and one warm-up answer given with each
(:meth:`workbench.runtime.Runtime.warm` with ``answer=True``), so the first caller pays no one-time cost.

The warm-up runs under :func:`~workbench.core.interrupt.interruptible`: :meth:`WarmUp.close` (shutdown) stops it
before the model's next forward. When it fails, ``on_failure`` is called with the exception (``run_server`` stops the
server and re-raises it: a bundle whose models cannot load never looks alive for long).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from workbench.core.errors import WorkbenchError
from workbench.core.interrupt import Interrupted, interruptible

logger = logging.getLogger("workbench.serve")


class WarmUp:
    """Runs ``warm()`` once on a daemon thread (:meth:`start`) and says whether it is done (:meth:`status`).

    ``warm`` None: nothing to warm (``serve --lazy``), ready at once. ``on_failure(exc)`` is called from the warm-up
    thread when ``warm()`` raises; it may be set after construction (``run_server`` sets it once the server exists).
    Thread-safe."""

    def __init__(
        self, warm: Callable[[], Any] | None, on_failure: Callable[[BaseException], None] | None = None
    ) -> None:
        self._warm = warm
        self.on_failure = on_failure
        self._lock = threading.Lock()
        self._closed = False
        self._began: float | None = None
        self._seconds: float | None = 0.0 if warm is None else None
        self.failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start warming (once; later calls do nothing)."""
        with self._lock:
            if self._warm is None or self._thread is not None or self._closed:
                return
            self._began = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="workbench-serve-warm-up", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop a running warm-up at its next :func:`~workbench.core.interrupt.check_interrupt` (shutdown)."""
        with self._lock:
            self._closed = True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the warm-up thread to end (at most ``timeout`` seconds)."""
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def ready(self) -> bool:
        """Whether the warm-up finished without failing (always True without anything to warm)."""
        with self._lock:
            return self._seconds is not None

    def status(self) -> dict[str, Any]:
        """``{"ready", "state": "ready" | "warming" | "failed" | "stopped" | "not started", "seconds"}``: ``seconds``
        is how long the warm-up took once ready, how long it has run so far otherwise (0 when not started)."""
        with self._lock:
            if self._seconds is not None:
                return {"ready": True, "state": "ready", "seconds": self._seconds}
            elapsed = time.monotonic() - self._began if self._began is not None else 0.0
            if self.failure is not None:
                state = "failed"
            elif self._began is None:
                state = "not started"
            elif self._closed:
                state = "stopped"
            else:
                state = "warming"
            return {"ready": False, "state": state, "seconds": elapsed}

    def _run(self) -> None:
        assert self._warm is not None and self._began is not None
        try:
            with interruptible(lambda: self._closed):
                self._warm()
        except Interrupted:
            logger.info("the warm-up was stopped (shutdown)")
            return
        except Exception as exc:  # reported to on_failure: the server must not look alive and stay unready
            with self._lock:
                self.failure = exc
            # a user error (a model that cannot load) is its one line; a bug keeps its traceback
            logger.error("the warm-up failed: %s", exc, exc_info=not isinstance(exc, WorkbenchError))
            if self.on_failure is not None:
                self.on_failure(exc)
            return
        seconds = time.monotonic() - self._began
        with self._lock:
            self._seconds = seconds
        logger.info("warm: every method loaded and answered once in %.1f s; GET /ready now says ready", seconds)
