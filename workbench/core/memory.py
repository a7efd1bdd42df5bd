"""Peak resident memory of this process over a span of work (a stage), for the run's stage table.

On Linux the kernel keeps the peak resident set size of a process (``VmHWM`` in ``/proc/self/status``) and lets the
process reset it to the current size (writing ``5`` to ``/proc/self/clear_refs``), so each stage gets its own
peak: :class:`PeakMemory` resets it when the span starts and reads it when the span ends. Where that reset is not
available (other systems, a restricted ``/proc``) the figure is the process's peak since it started
(``resource.getrusage``), and :attr:`PeakMemory.per_span` says so. Memory of child processes (a served model, a
benchmark's subprocess) is not included: each is its own process. The reset is the kernel's one counter, so after
it ``getrusage`` and tools that read it (``/usr/bin/time -v``) report the peak since the last stage began, not since
the process started: each reset first records the peak it clears, so :func:`process_peak_bytes` is the whole
process's, and the run's manifest records it (``peak_rss_mb``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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


_PEAK_BEFORE_RESETS = 0  # the largest kernel peak this process read before a PeakMemory reset it


def process_peak_bytes() -> int:
    """This process's peak resident set size since it started, in bytes, even after :class:`PeakMemory` reset the
    kernel's counter (each reset first records the peak it clears); :func:`lifetime_peak_bytes` where ``/proc``
    does not say."""
    kib = _status_kib().get("VmHWM")
    if kib is None:
        return lifetime_peak_bytes()
    return max(_PEAK_BEFORE_RESETS, kib * 1024)


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
        """Begin a span: reset the kernel's peak to the current resident size where the system allows it (the peak
        it held is kept for :func:`process_peak_bytes` first)."""
        global _PEAK_BEFORE_RESETS
        _PEAK_BEFORE_RESETS = max(_PEAK_BEFORE_RESETS, _status_kib().get("VmHWM", 0) * 1024)
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


def return_freed_memory() -> int:
    """Collect garbage and hand the C heap's free memory back to the system; return how many bytes the resident
    set shrank by (0 where ``/proc`` does not say).

    Why: tensors freed by torch on the CPU go back to glibc's heap, which keeps them mapped. After a training loop
    or a model is dropped the process can stay gigabytes above what it uses (measured: 1.9 GB resident after the
    quickstart's distill stage, 0.67 GB after ``malloc_trim``), and the next stage's peak sits on top of that.
    ``malloc_trim(0)`` releases the free pages; it exists on glibc only, and elsewhere only the collection runs.
    Before collecting, :func:`release_kept_import_errors` lets go of the frames (and the models in their locals)
    that import errors kept by libraries would hold.
    """
    import contextlib
    import ctypes
    import gc

    before = current_rss_bytes()
    release_kept_import_errors()  # frames a library's kept import error holds would keep their locals alive
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # musl and other C libraries have no malloc_trim
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    after = current_rss_bytes()
    return max(0, before - after) if before is not None and after is not None else 0


_SCANNED_MODULES: set[str] = set()


def release_kept_import_errors() -> int:
    """Drop the tracebacks of the import errors that imported modules keep at module level; return how many.

    Why: libraries that defer an optional dependency's ImportError keep the exception for later (Optuna's
    ``try_import`` holds one per missing extra: redis, plotly, ...). Its traceback holds the frames the import ran in,
    and each frame its caller, up through the stack that first imported the library — a stage function's frame
    included, whose locals hold the stage's models. Measured on a fresh quickstart: the study stage's first Optuna
    import kept its Tools (the reader generator's 540 MB of weights, the embedder, the retriever) alive after the
    runner dropped them, through distill, evaluate and export. The exceptions stay (a library re-raises them with
    their message); only their tracebacks go. Looked for in the globals of every module loaded since the last call
    (such errors are kept while a module is imported; ~0.2 s for the ~4,500 modules of a training run, then only
    the new ones) and, one level down, in the attributes and tuples of the objects there (where ``try_import``
    keeps it)."""
    import warnings

    count = 0

    def clear(value: Any) -> None:
        nonlocal count
        seen: set[int] = set()
        while isinstance(value, BaseException) and id(value) not in seen:
            seen.add(id(value))
            if value.__traceback__ is not None:
                value.__traceback__ = None
                count += 1
            value = value.__context__ or value.__cause__

    fresh = [(name, module) for name, module in list(sys.modules.items()) if name not in _SCANNED_MODULES]
    with warnings.catch_warnings():  # reading a deprecated alias warns (torch.distributed.reduce_op)
        warnings.simplefilter("ignore")
        for name, module in fresh:
            _SCANNED_MODULES.add(name)
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for value in list(namespace.values()):
                if isinstance(value, BaseException):
                    clear(value)
                    continue
                if isinstance(value, type | ModuleType) or callable(value):
                    continue  # classes, functions and modules hold no kept error of this kind (modules are scanned)
                try:
                    attributes = list(vars(value).values())
                except Exception:  # no __dict__, or a proxy whose attribute access fails: nothing kept there
                    continue
                for attribute in attributes:
                    for item in attribute if isinstance(attribute, tuple) else (attribute,):
                        clear(item)
    return count


MMAP_THRESHOLD = 1 << 20
"""Allocations of at least this many bytes get pages of their own from the system (``mmap``), returned whole when
freed (:func:`map_large_allocations`)."""

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


def map_large_allocations(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc serve every allocation of at least ``threshold`` bytes by ``mmap`` from now on; True where set.

    Why: glibc raises its mmap threshold each time a large block is freed (up to 32 MB), after which tensors of a few
    MB come from the heap, where blocks of changing sizes (a training step's activations, a decode step's logits)
    fragment it and the process keeps growing. Measured on the quickstart's distill stage (2 threads): peak resident
    memory 2.7 GB by default, 1.55 GB with a fixed 1 MB threshold. Each such allocation then costs a system call and
    fresh zeroed pages: on a training step about 1-3 %; on sampling-heavy decoding more, since every step's logits
    (rows × vocabulary floats) are a fresh block — SmolLM2, 8 prompts greedy + 5 samples each, 16 tokens, 2 threads,
    6 timed runs in separate processes: system CPU time 10.9 s vs 4 s over ~105 s of user time (3x the minor page
    faults), wall time ~5-10 % longer; the bench-features collection (8 questions, 2 threads, one process): the
    bare greedy + 5 samples 6.2 s vs 5.3 s, the 15 features 7.4 s vs 6.0 s. The runner sets it for the whole of a
    run that holds a training stage (``StageSpec.trains``) and not at all for others: set only from the training
    stage on, the quickstart's later stages peaked higher (fresh clone at 1da7f3a: fit_utility 2.39 GB vs 1.91,
    distill 2.89 vs 2.46, evaluate 3.22 vs 2.93 — over the 3 GB goal), since its decoding stages grow the heap too.
    Not available off glibc (returns False, nothing changes)."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False
