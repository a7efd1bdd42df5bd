"""Per-span peak resident memory (workbench.core.memory): its own peak where Linux allows, else the lifetime peak."""

from __future__ import annotations

import sys

import pytest

from workbench.core import memory
from workbench.core.memory import PeakMemory, current_rss_bytes, lifetime_peak_bytes, megabytes

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")


_SPAN = """
from workbench.core.memory import PeakMemory, current_rss_bytes
meter = PeakMemory()
meter.start()
base = current_rss_bytes()
block = bytearray(200_000_000)  # touched pages: resident
block[::4096] = b"x" * len(block[::4096])
during = meter.peak_bytes()
del block
meter.start()
print(int(meter.per_span), base, during, meter.peak_bytes())
"""


@linux_only
def test_a_span_sees_its_own_allocation_and_the_next_span_starts_from_the_current_size():
    import subprocess

    # a fresh process: in a long-lived test worker the span's reset once left the peak where it was (full suite run)
    out = subprocess.run([sys.executable, "-c", _SPAN], capture_output=True, text=True, check=True).stdout
    per_span, base, during, after = (int(v) for v in out.split())
    if not per_span:
        pytest.skip("this kernel does not let the process reset its peak")
    assert during >= base + 150_000_000
    assert after < during - 150_000_000  # the freed block is not counted again


def test_without_a_reset_the_figure_is_the_lifetime_peak(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "_CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    meter = PeakMemory()
    meter.start()
    assert meter.per_span is False
    assert meter.peak_bytes() == lifetime_peak_bytes() > 0


def test_megabytes_are_decimal():
    assert megabytes(1_234_567_890) == 1234.6


@linux_only
def test_the_process_peak_survives_a_span_reset_and_freed_memory_goes_back():
    meter = PeakMemory()
    block = bytearray(300_000_000)
    block[::4096] = b"x" * len(block[::4096])
    during = current_rss_bytes()
    del block
    meter.start()  # resets the kernel's counter below the block
    if not meter.per_span:
        pytest.skip("this kernel does not let the process reset its peak")
    assert meter.peak_bytes() < during - 200_000_000
    assert memory.process_peak_bytes() >= during - 10_000_000  # recorded before the reset (counters lag a little)
    assert memory.return_freed_memory() >= 0


_AFTER_MAPPING = """
from workbench.core import memory
assert memory.map_large_allocations()
big = bytearray(16_000_000)  # freeing an mmapped block would raise glibc's own threshold to its size
del big
before = memory.current_rss_bytes()
block = bytearray(6_000_000)  # below that raised threshold, above ours: pages of its own
block[::4096] = b"x" * len(block[::4096])
grown = memory.current_rss_bytes() - before
del block
print(grown, memory.current_rss_bytes() - before)
"""


@linux_only
def test_after_map_large_allocations_a_freed_large_block_leaves_the_process():
    import subprocess

    # a fresh process: a long-lived test worker's heap may already hold free pages the block would reuse
    out = subprocess.run([sys.executable, "-c", _AFTER_MAPPING], capture_output=True, text=True, check=True).stdout
    grown, left = (int(v) for v in out.split())
    assert grown >= 5_000_000
    assert left < 2_000_000  # unmapped when freed, not kept in the heap


_KEPT_IMPORT_ERROR = """
import gc, sys, types, weakref

class Deferred:  # the shape of Optuna's try_import(): the ImportError kept on an object at module level
    def __init__(self):
        self._deferred = None
    def __enter__(self):
        return self
    def __exit__(self, kind, value, tb):
        if isinstance(value, ImportError):
            self._deferred = (value, "missing extra")
            return True

def import_library():  # what an optional-dependency guard does while its module is imported
    library = types.ModuleType("library_with_extras")
    library._imports = Deferred()
    with library._imports:
        import a_dependency_that_is_not_installed  # noqa: F401
    library.bare = ImportError("kept as is")
    try:
        raise ImportError("another")
    except ImportError as exc:
        library.bare = exc
    sys.modules["library_with_extras"] = library

class Model:
    pass

def stage():  # a stage whose first import of the library happens with a model in its locals
    model = Model()
    import_library()
    return weakref.ref(model)

ref = stage()
gc.collect()
kept = ref() is not None
from workbench.core.memory import return_freed_memory, release_kept_import_errors
return_freed_memory()
gc.collect()
library = sys.modules["library_with_extras"]
print(int(kept), int(ref() is not None), int(library._imports._deferred[0].__traceback__ is None),
      int(library.bare.__traceback__ is None), release_kept_import_errors())
"""


def test_an_import_error_a_library_keeps_no_longer_keeps_the_importing_stage_alive():
    import subprocess

    out = subprocess.run([sys.executable, "-c", _KEPT_IMPORT_ERROR], capture_output=True, text=True, check=True)
    kept_before, alive_after, deferred_cleared, bare_cleared, again = (int(v) for v in out.stdout.split())
    assert kept_before == 1  # the kept error's traceback held the stage's frame, and its model
    assert alive_after == 0 and deferred_cleared == 1 and bare_cleared == 1
    assert again == 0  # the modules already scanned are not scanned again
