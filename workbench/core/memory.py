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

**What a run changes in its host process, and when it is undone.** A library must not change the process it runs in
behind its back; the workbench's runs (``run_recipe``, ``load_bundle``) are often called from a user's own process.

* glibc's mmap threshold: a run with a training stage maps allocations of 1 MiB and more for its whole length
  (:func:`large_allocations_mapped`, entered by the runner) and puts the previous behaviour back when the run ends,
  on error too: a fixed threshold exactly; glibc's dynamic one as its 32 MiB ceiling, since no call turns the
  adjustment back on (see there). A run that trains nothing leaves it alone.
* Kept import errors: the tracebacks of the import errors Optuna keeps are dropped between stages and when a
  generator shares weights (:func:`release_kept_import_errors`); no other exception is touched. Not undone (the
  errors keep their messages; their tracebacks only pinned the stage's frames).
* Free heap memory is handed back to the system between stages (``malloc_trim``, :func:`return_freed_memory`):
  nothing to undo.
* The garbage collector: the objects alive when a run starts are left out of its collections while it runs
  (``gc.freeze``, :func:`older_objects_frozen`), so the full collection after each stage scans what the run made,
  not the imported libraries (0.1–0.3 s a collection otherwise); they go back to the oldest generation when the
  run ends, on error too. A process that froze objects itself (``gc.get_freeze_count()`` > 0) is left alone.
* The kernel's peak-RSS counter (``VmHWM``) is reset at each stage (:class:`PeakMemory`): ``getrusage`` and
  ``/usr/bin/time -v`` then report the peak since the last stage began; :func:`process_peak_bytes` keeps the whole
  process's. Not undone (the kernel cannot set it back).
* The attention recorder changes only the last attention module of the model that asked, for the threads that
  asked, while it records (:mod:`workbench.backends.attention_diag`); shared weights move apart on ``.to()``
  (:mod:`workbench.backends.shared_weights`).

What the runner still changes for good (``workbench/stages/runner.py``): the seeds of Python's ``random``, numpy's
global generator and torch (``seed``) and ``PYTHONHASHSEED`` in ``os.environ`` (for the run's child processes);
with ``threads`` > 0, ``torch.set_num_threads`` and ``OMP_NUM_THREADS`` (only when unset); the ``workbench`` logger's
handlers (replaced per run, ``propagate`` off). None of these is restored when the run ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
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


_FREEZE_LOCK = threading.Lock()
_FREEZE_DEPTH = 0
"""Runs inside :func:`older_objects_frozen` now (nested or in other threads): the outermost freezes, the last out
unfreezes."""


@contextmanager
def older_objects_frozen() -> Iterator[bool]:
    """Leave the objects alive when the block opens out of the cyclic garbage collector's passes until it closes
    (``gc.freeze`` / ``gc.unfreeze``); yields whether it froze them.

    Why: :func:`return_freed_memory` runs a full collection after every stage, and in a process that imported the
    training stack (about 320,000 tracked objects) one took 0.1–0.3 s on a 2-core machine, nearly all of it spent
    re-scanning modules, classes and functions that live as long as the process. Objects made inside the block are
    collected as before; frozen ones are still freed by reference counting — only a reference cycle among them
    waits until the block closes. Nested blocks (or blocks in other threads) freeze once and unfreeze when the last
    one closes; when the process had frozen objects itself, nothing is done (``gc.unfreeze`` would thaw them too)."""
    global _FREEZE_DEPTH
    with _FREEZE_LOCK:
        froze = _FREEZE_DEPTH > 0 or gc.get_freeze_count() == 0
        if froze:
            if _FREEZE_DEPTH == 0:
                gc.freeze()
            _FREEZE_DEPTH += 1
    try:
        yield froze
    finally:
        if froze:
            with _FREEZE_LOCK:
                _FREEZE_DEPTH -= 1
                if _FREEZE_DEPTH == 0:
                    gc.unfreeze()


def return_freed_memory() -> int:
    """Collect garbage and hand the C heap's free memory back to the system; return how many bytes the resident
    set shrank by (0 where ``/proc`` does not say).

    Why: tensors freed by torch on the CPU go back to glibc's heap, which keeps them mapped. After a training loop
    or a model is dropped the process can stay gigabytes above what it uses (measured: 1.9 GB resident after the
    quickstart's distill stage, 0.67 GB after ``malloc_trim``), and the next stage's peak sits on top of that.
    ``malloc_trim(0)`` releases the free pages; it exists on glibc only, and elsewhere only the collection runs.
    Before collecting, :func:`release_kept_import_errors` lets go of the frames (and the models in their locals)
    that the import errors Optuna keeps would hold.
    """

    before = current_rss_bytes()
    release_kept_import_errors()  # frames Optuna's kept import errors hold would keep their locals alive
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # musl and other C libraries have no malloc_trim
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    after = current_rss_bytes()
    return max(0, before - after) if before is not None and after is not None else 0


KEPT_IMPORT_ERRORS: tuple[tuple[str, str, str], ...] = (
    ("optuna._imports", "_DeferredImportExceptionContextManager", "_deferred"),
)
"""``(module, class, attribute)`` of the objects known to keep a deferred import error with its traceback: Optuna's
``try_import()`` context managers, module globals of every Optuna module that guards an optional dependency, keep
``(error, message)`` in ``_deferred``. Found by scanning every module's globals, and one level of their objects'
attributes, in a process that imported the training stack (optuna, lightning, transformers, peft, scikit-learn,
datasets, sentence-transformers, onnx, onnxruntime, wandb; 5,683 modules): these were the only kept exceptions
holding a traceback."""

_SCANNED_MODULES: set[str] = set()


def release_kept_import_errors() -> int:
    """Drop the tracebacks of the import errors that Optuna's ``try_import`` keeps (:data:`KEPT_IMPORT_ERRORS`);
    return how many. No other exception is touched: the user's own (a module global, ``sys.last_exc`` after an
    error at the prompt) keep their tracebacks and frames for ``pdb.pm()`` / ``pdb.post_mortem``.

    Why: a kept error's traceback holds the frames the import ran in, and each frame its caller, up through the
    stack that first imported the library — a stage function's frame included, whose locals hold the stage's
    models. Measured on a fresh quickstart: the study stage's first Optuna import kept its Tools (the reader
    generator's 540 MB of weights, the embedder, the retriever) alive after the runner dropped them, through
    distill, evaluate and export. The errors stay (Optuna re-raises them with their message when the extra is
    used); only their tracebacks go. Nothing is looked at until Optuna's ``_imports`` module is loaded; then the
    globals of every module loaded since the last call are searched for its context managers (a module still being
    imported is searched on a later call)."""
    keepers = []
    for module_name, class_name, attribute in KEPT_IMPORT_ERRORS:
        keeper = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(keeper, type):
            keepers.append((keeper, attribute))
    if not keepers:
        return 0

    count = 0
    with warnings.catch_warnings():  # a deprecated alias warns when its class is read (torch.distributed.reduce_op)
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            if name in _SCANNED_MODULES:
                continue
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                continue  # its try_import may not have run yet
            _SCANNED_MODULES.add(name)
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for value in list(namespace.values()):
                for keeper, attribute in keepers:
                    if isinstance(value, keeper):
                        kept = getattr(value, attribute, None)
                        error = kept[0] if isinstance(kept, tuple) and kept else None
                        if isinstance(error, BaseException) and error.__traceback__ is not None:
                            error.__traceback__ = None
                            count += 1
    return count


MMAP_THRESHOLD = 1 << 20
"""Allocations of at least this many bytes get pages of their own from the system (``mmap``), returned whole when
freed (:func:`map_large_allocations`)."""

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number

DYNAMIC_THRESHOLD_CEILING = 4 * 1024 * 1024 * 8 if sys.maxsize > 2**32 else 512 * 1024
"""The highest value glibc's dynamic mmap threshold rises to (its ``DEFAULT_MMAP_THRESHOLD_MAX``: 32 MiB on 64-bit
systems, 512 KiB on 32-bit ones): what :func:`large_allocations_mapped` sets when it ends where glibc's threshold
was dynamic."""

_GLIBC_INITIAL_THRESHOLD = 128 * 1024  # glibc's threshold before anything raises or sets it
_FIXING_ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_FIXING_TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.top_pad", "glibc.malloc.mmap_max")


def _threshold_from_environment() -> int | None:
    """The fixed mmap threshold glibc took from the environment at start-up, or None where it kept its dynamic one.

    ``MALLOC_MMAP_THRESHOLD_`` or the tunable ``glibc.malloc.mmap_threshold`` fix it at their value; the trim
    threshold, top pad or mmap count set the same ways fix it at glibc's initial 128 KiB (any of them turns the
    adjustment off)."""

    tunables = dict(
        item.split("=", 1) for item in os.environ.get("GLIBC_TUNABLES", "").split(":") if item.count("=") == 1
    )
    for value in (os.environ.get("MALLOC_MMAP_THRESHOLD_"), tunables.get("glibc.malloc.mmap_threshold")):
        try:
            return int(value, 0)
        except (TypeError, ValueError):  # unset, or not a number (glibc ignores it too)
            continue
    if any(os.environ.get(name) for name in _FIXING_ENVIRONMENT) or any(name in tunables for name in _FIXING_TUNABLES):
        return _GLIBC_INITIAL_THRESHOLD
    return None


_THRESHOLD_LOCK = threading.Lock()
_threshold: int | None = _threshold_from_environment()  # see mmap_threshold()
_before_spans: int | None = None  # what the first open span of large_allocations_mapped found
_open_spans: list[int] = []  # the thresholds of the open spans, oldest first


def mmap_threshold() -> int | None:
    """The mmap threshold glibc uses in this process as far as this module knows: the fixed value last set (through
    this module — :data:`DYNAMIC_THRESHOLD_CEILING` after a span that began under the dynamic threshold — or by the
    environment at start-up), or None while glibc's own dynamic threshold is in force."""
    return _threshold


def _mallopt_threshold(value: int) -> bool:
    """``mallopt(M_MMAP_THRESHOLD, value)``; True where glibc took it (False off glibc: nothing changes)."""

    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, int(value)))
    except (OSError, AttributeError):
        return False


def map_large_allocations(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc serve every allocation of at least ``threshold`` bytes by ``mmap`` from now on; True where set
    (recorded for :func:`mmap_threshold`). For a span of work, use :func:`large_allocations_mapped`, which puts the
    previous behaviour back.

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
    global _threshold
    with _THRESHOLD_LOCK:
        applied = _mallopt_threshold(threshold)
        if applied:
            _threshold = int(threshold)
        return applied


@contextmanager
def large_allocations_mapped(threshold: int = MMAP_THRESHOLD) -> Iterator[bool]:
    """Map allocations of at least ``threshold`` bytes for the span of the context (:func:`map_large_allocations`;
    yields whether it took), then put glibc's previous behaviour back, on error too.

    glibc's ``mallopt`` cannot read the threshold, so the previous one is this module's record
    (:func:`mmap_threshold`): a fixed value — one the environment gave glibc at start-up, or one set through this
    module (the test session's) — is set again exactly. Where it was glibc's dynamic threshold (the default), no
    call turns the adjustment back on (``mallopt`` fixes whatever it sets): the span ends at the value the dynamic
    threshold rises to, :data:`DYNAMIC_THRESHOLD_CEILING` (32 MiB), where a long-running process's threshold settles
    once it has freed blocks of that size — blocks below it come from the heap again, larger ones are mapped, as
    before the span; what is lost is only the rise from a lower value. Spans may overlap (runs in two threads): the
    threshold of the latest open span holds until it ends, and the previous behaviour comes back when the last
    ends."""
    global _before_spans, _threshold
    with _THRESHOLD_LOCK:
        previous = _threshold
        applied = _mallopt_threshold(threshold)
        if applied:
            if not _open_spans:
                _before_spans = previous
            _open_spans.append(int(threshold))
            _threshold = int(threshold)
    try:
        yield applied
    finally:
        if applied:
            with _THRESHOLD_LOCK:
                _open_spans.remove(int(threshold))
                if _open_spans:
                    _threshold = _open_spans[-1]
                    _mallopt_threshold(_threshold)
                else:
                    _threshold = DYNAMIC_THRESHOLD_CEILING if _before_spans is None else _before_spans
                    _mallopt_threshold(_threshold)
