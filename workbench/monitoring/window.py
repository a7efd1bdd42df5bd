"""The rolling window ``serve`` keeps: the last ``settings.window`` values of every monitored series, and the drift
summary of ``GET /drift`` (and ``/metrics``'s drift gauges) computed from it on request.

Thread-safe: the answering worker adds answers, the routes read summaries. With an answer log, each answer's record
(:func:`~workbench.monitoring.answer_log.log_record`) is appended as one line and flushed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from workbench.core.errors import StorageError
from workbench.monitoring.answer_log import log_record, record_values
from workbench.monitoring.drift import window_drift
from workbench.monitoring.reference import DriftReference
from workbench.monitoring.settings import DriftSettings

logger = logging.getLogger("workbench.serve")

NO_REFERENCE = "no reference: the bundle carries no reference distributions (exported before schema 1.6); re-export"
"""What monitoring says for a bundle without ``monitoring/reference.json``."""


class RollingMonitor:
    """Rolling windows of a served bundle's answers against its ``reference`` (None: no drift statistics, the
    windows' means only), named ``bundle`` ``version``; ``log``: an open text file the answer records are appended to
    (None: no log)."""

    def __init__(self, reference: DriftReference | None, bundle: str, version: str, log: IO[str] | None = None) -> None:
        self.reference = reference
        self.settings = reference.settings if reference is not None else DriftSettings()
        self.bundle, self.version = bundle, version
        self._log = log
        self._lock = threading.Lock()
        self._windows: dict[str, deque[float]] = {}
        self.answers = 0
        self.log_error: str | None = None

    @classmethod
    def open(
        cls, reference: DriftReference | None, bundle: str, version: str, log_path: str | Path | None = None
    ) -> RollingMonitor:
        """A monitor whose answer log (when ``log_path`` is given) is opened for appending now (a path that cannot be
        opened fails here, before serving)."""

        log = None
        if log_path is not None:
            try:
                log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - held open while serving; close() closes it
            except OSError as exc:
                raise StorageError(
                    f"cannot open the answer log for appending ({type(exc).__name__})", str(log_path)
                ) from None
        return cls(reference, bundle, version, log)

    def add(self, answers: Sequence[Any], when: float | None = None) -> None:
        """Take ``answers`` (RuntimeAnswer-like objects) into the windows (and the log)."""
        now = time.time() if when is None else when
        records = [log_record(a, self.bundle, self.version, now) for a in answers]
        self.add_records(records)

    def add_records(self, records: Sequence[dict[str, Any]]) -> None:
        """Take answer-log records into the windows (and the log)."""
        with self._lock:
            for record in records:
                self.answers += 1
                for name, value in record_values(record).items():
                    window = self._windows.get(name)
                    if window is None:
                        window = self._windows[name] = deque(maxlen=self.settings.window)
                    window.append(value)
            if self._log is not None:
                self._write_log(records)

    def _write_log(self, records: Sequence[dict[str, Any]]) -> None:
        """Append ``records`` to the log; a failed write (a full disk) stops the log, with one logged error, and
        never fails the answers (they are already computed and counted)."""
        try:
            self._log.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))  # type: ignore[union-attr]
            self._log.flush()  # type: ignore[union-attr]
        except OSError as exc:
            self.log_error = f"the answer log stopped: {type(exc).__name__} {exc.strerror or ''}".strip()
            logger.error("%s; answers are still served and monitored", self.log_error)
            with contextlib.suppress(OSError):
                self._log.close()  # type: ignore[union-attr]
            self._log = None

    def window(self) -> dict[str, list[float]]:
        """A copy of every series' current window."""
        with self._lock:
            return {name: list(values) for name, values in self._windows.items()}

    def window_mean(self, name: str) -> float | None:
        """The mean of series ``name``'s finite values in the window (None when it has none)."""
        values = [v for v in self.window().get(name, []) if math.isfinite(v)]
        return sum(values) / len(values) if values else None

    def summary(self) -> dict[str, Any]:
        """``GET /drift``'s body: the bundle, the settings, whether any series alarms, and per series its
        statistic (PSI), threshold, status, alarm, window count and KS (``reference: false`` and a note without
        a reference)."""
        window = self.window()
        base: dict[str, Any] = {
            "bundle": self.bundle,
            "version": self.version,
            "answers": self.answers,
            "window": self.settings.window,
            "settings": asdict(self.settings),
            "means": {name: self.window_mean(name) for name in ("p_correct", "retrieval", "ood")},
            "answer_log_error": self.log_error,
        }
        if self.reference is None:
            return {**base, "reference": False, "note": NO_REFERENCE, "alarm": False, "series": {}}
        drift = window_drift(self.reference, window)
        series = {name: {"statistic": "psi", **d.to_dict()} for name, d in drift.items()}
        return {
            **base,
            "reference": True,
            "reference_split": self.reference.split,
            "reference_rows": self.reference.rows,
            "alarm": any(d.alarm for d in drift.values()),
            "series": series,
        }

    def close(self) -> None:
        """Close the answer log (if any)."""
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None
