"""Peak resident memory of this process over a span of work (a stage), for the run's stage table.

On Linux the kernel keeps the peak resident set size of a process (``VmHWM`` in ``/proc/self/status``) and lets the
process reset it to the current size (writing ``5`` to ``/proc/self/clear_refs``), so each stage gets its own
peak: :class:`PeakMemory` resets it when the span starts and reads it when the span ends. Where that reset is not
available (other systems, a restricted ``/proc``) the figure is the process's peak since it started
(``resource.getrusage``), and :attr:`PeakMemory.per_span` says so. Memory of child processes (a served model, a
benchmark's subprocess) is not included: each is its own process. The reset is the kernel's one counter, so after
it ``getrusage`` and tools that read it (``/usr/bin/time -v``) report the peak since the last stage began, not since
the process started: the run's manifest records the largest stage peak instead (``peak_rss_mb``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_FIELD = re.compile(r"^(VmHWM|VmRSS):\s+(\d+)\s+kB", re.MULTILINE)


def _status_kib() -> dict[str, int]:
    """``VmHWM`` and ``VmRSS`` of this process in KiB (empty where ``/proc`` has no status file)."""
    try:
        text = _STATUS.read_text()
    except OSError:
        return {}
    return {name: int(value) for name, value in _FIELD.findall(text)}


def lifetime_peak_bytes() -> int:
    """This process's peak resident set size since it started (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def current_rss_bytes() -> int | None:
    """This process's resident set size now, in bytes (None where ``/proc`` does not say)."""
    kib = _status_kib().get("VmRSS")
    return None if kib is None else kib * 1024


class PeakMemory:
    """The peak resident memory of this process between :meth:`start` and :meth:`peak_bytes`.

    ``per_span`` is True when the kernel's peak could be reset at :meth:`start` (the figure is this span's own
    peak), False when it is the process's peak since it started (an upper bound of the span's)."""

    def __init__(self) -> None:
        self.per_span = "VmHWM" in _status_kib()  # reading without a reset: the peak since the last reset (or start)

    def start(self) -> None:
        """Begin a span: reset the kernel's peak to the current resident size where the system allows it."""
        try:
            _CLEAR_REFS.write_text("5")
        except OSError:
            self.per_span = False
            return
        self.per_span = "VmHWM" in _status_kib()

    def peak_bytes(self) -> int:
        """The peak resident set size of the span so far, in bytes (see ``per_span``)."""
        if self.per_span:
            kib = _status_kib().get("VmHWM")
            if kib is not None:
                return kib * 1024
        return lifetime_peak_bytes()


def megabytes(size: int) -> float:
    """``size`` bytes in MB (10^6 bytes), rounded to one decimal: the unit the stage tables print."""
    return round(size / 1e6, 1)
