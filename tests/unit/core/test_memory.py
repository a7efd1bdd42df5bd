"""Per-span peak resident memory (workbench.core.memory): its own peak where Linux allows, else the lifetime peak."""

from __future__ import annotations

import os
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
import gc, sys, tempfile, weakref
from pathlib import Path

library = Path(tempfile.mkdtemp()) / "library_with_extras.py"
library.write_text(  # an optional dependency guarded the way Optuna's modules guard theirs
    "from optuna._imports import try_import\\n"
    "with try_import() as _imports:\\n"
    "    import a_dependency_that_is_not_installed\\n"
)
sys.path.insert(0, str(library.parent))

class Model:
    pass

def stage():  # a stage whose first import of the library happens with a model in its locals
    model = Model()
    import library_with_extras  # noqa: F401
    import optuna  # noqa: F401  (its own guarded extras, where missing, are kept the same way)
    return weakref.ref(model)

ref = stage()
gc.collect()
kept = ref() is not None
from workbench.core.memory import return_freed_memory, release_kept_import_errors
return_freed_memory()
gc.collect()
error = sys.modules["library_with_extras"]._imports._deferred[0]
print(int(kept), int(ref() is not None), int(error.__traceback__ is None), release_kept_import_errors())
"""


def test_an_import_error_optuna_keeps_no_longer_keeps_the_importing_stage_alive():
    import subprocess

    pytest.importorskip("optuna")
    out = subprocess.run([sys.executable, "-c", _KEPT_IMPORT_ERROR], capture_output=True, text=True, check=True)
    kept_before, alive_after, cleared, again = (int(v) for v in out.stdout.split())
    assert kept_before == 1  # the kept error's traceback held the stage's frame, and its model
    assert alive_after == 0 and cleared == 1
    assert again == 0  # the modules already searched are not searched again


_USER_ERRORS = """
import io, json, pdb, sys, types
from optuna._imports import try_import
from workbench.core.memory import return_freed_memory
from workbench.runtime import load_bundle

def failing(depth):
    secret = f"local at depth {depth}"
    if depth == 0:
        raise ValueError("a bug in the user's code")
    failing(depth - 1)

user = types.ModuleType("user_code")  # the user's own module keeps its last error, and an object like Optuna's
sys.modules["user_code"] = user
try:
    failing(2)
except ValueError as exc:
    user.last_error = exc
class Keeper:
    pass
user.keeper = Keeper()
try:
    import a_module_the_user_misspelt  # noqa: F401
except ImportError as exc:
    user.keeper._deferred = (exc, "the user's own")
try:
    failing(1)
except ValueError as exc:  # what the interpreter keeps for pdb.pm() after an uncaught error at the prompt
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    if hasattr(sys, "last_exc"):
        sys.last_exc = exc

with try_import() as guard:  # an optional dependency guarded the way Optuna guards its own: released
    import a_dependency_that_is_not_installed  # noqa: F401

bundle, lm, encoder, corpus = sys.argv[1:5]
load_bundle(bundle, {"generator": lm, "embedder": encoder, "corpus": corpus, "allow_model_mismatch": True})
return_freed_memory()  # what loading a controller beside the reader calls, and the runner between stages

def frames(traceback):
    out = []
    while traceback is not None:
        out.append(traceback.tb_frame.f_locals.get("secret"))
        traceback = traceback.tb_next
    return out

printed = io.StringIO()  # pdb.post_mortem's session on the kept error: the innermost frame, then one up
debugger = pdb.Pdb(stdin=io.StringIO("p secret\\nup\\np secret\\nq\\n"), stdout=printed)
debugger.reset()
debugger.interaction(None, user.last_error.__traceback__)
print(json.dumps({
    "released": guard._deferred[0].__traceback__ is None,
    "kept": frames(user.last_error.__traceback__),
    "last": frames(sys.last_traceback),
    "keeper": user.keeper._deferred[0].__traceback__ is not None,
    "pdb": printed.getvalue(),
}))
"""


def test_a_users_kept_exceptions_keep_their_frames_for_pdb_after_load_bundle(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    """pdb.post_mortem / pdb.pm() after load_bundle and the release of Optuna's kept import errors (Optuna imported,
    so the search runs): the user's errors (a module global, sys.last_traceback, an object shaped like Optuna's
    keeper) keep their frames and locals."""
    import json
    import subprocess
    from pathlib import Path

    from tests.bundle_run import write_corpus

    pytest.importorskip("optuna")
    root = Path(__file__).resolve().parents[3]
    bundle = root / "tests" / "fixtures" / "bundles" / "tiny" / "1.0.0"
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=20)
    args = [str(bundle), str(tiny_lm_long_dir), str(tiny_encoder_dir), str(corpus)]
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _USER_ERRORS, *args], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["released"]  # Optuna's kept error was released in the same process
    assert seen["kept"] == [None, "local at depth 2", "local at depth 1", "local at depth 0"]
    assert seen["last"] == [None, "local at depth 1", "local at depth 0"]
    assert seen["keeper"]
    assert "'local at depth 0'" in seen["pdb"] and "'local at depth 1'" in seen["pdb"]


def test_the_released_errors_are_optunas_kept_ones_only(monkeypatch):
    optuna_imports = pytest.importorskip("optuna._imports")
    import types

    monkeypatch.setattr(memory, "_SCANNED_MODULES", set())
    library, user = types.ModuleType("guarded_library"), types.ModuleType("user_module")
    with optuna_imports.try_import() as library._imports:
        import a_dependency_that_is_not_installed  # noqa: F401
    try:
        raise ImportError("the user's own, kept at module level")
    except ImportError as exc:
        user.error = exc
    monkeypatch.setitem(sys.modules, "guarded_library", library)
    monkeypatch.setitem(sys.modules, "user_module", user)
    assert memory.release_kept_import_errors() >= 1
    assert library._imports._deferred[0].__traceback__ is None
    assert user.error.__traceback__ is not None


_PROBE = """
import ctypes, json, sys
from workbench.core import memory

libc = ctypes.CDLL("libc.so.6")
if not hasattr(libc, "mallinfo2"):
    print(json.dumps(None))
    raise SystemExit
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS.split()]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def mapped(size):  # whether glibc serves a block of `size` bytes by mmap now (with the heap's free top trimmed)
    libc.malloc_trim(0)
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    answer = libc.mallinfo2().hblks > before
    libc.free(block)
    return answer

sizes = (2_000_000, 20_000_000)
if sys.argv[1] != "dynamic":
    memory.map_large_allocations(int(sys.argv[1]))  # the host's own fixed threshold
seen = {"before": [mapped(s) for s in sizes]}
with memory.large_allocations_mapped():
    seen["during"] = [mapped(s) for s in sizes]
seen["after"] = [mapped(s) for s in sizes]
seen["recorded"] = memory.mmap_threshold()
print(json.dumps(seen))
"""


@linux_only
@pytest.mark.parametrize("host", ["4194304", "dynamic"])
def test_the_threshold_a_span_sets_is_undone_when_it_ends(host):
    """glibc itself, probed by mallinfo2: a 2 MB block is mapped during the span (1 MiB threshold) and, after it, as
    before it under a host's fixed 4 MiB threshold; glibc's dynamic threshold ends at its 32 MiB ceiling."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, "-c", _PROBE, host], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    if seen is None:
        pytest.skip("no mallinfo2 in this C library")
    assert seen["during"] == [True, True]
    if host == "dynamic":
        assert seen["before"][0]  # glibc's dynamic threshold starts at 128 KiB
        assert seen["after"] == [False, False] and seen["recorded"] == memory.DYNAMIC_THRESHOLD_CEILING
    else:
        assert seen["before"] == seen["after"] == [False, True] and seen["recorded"] == int(host)


def test_spans_restore_what_they_found_in_order_even_overlapping_and_on_error(monkeypatch):
    set_to: list[int] = []
    monkeypatch.setattr(memory, "_mallopt_threshold", lambda value: set_to.append(value) or True)
    monkeypatch.setattr(memory, "_open_spans", [])
    monkeypatch.setattr(memory, "_threshold", None)  # glibc's dynamic threshold
    with memory.large_allocations_mapped() as applied:
        assert applied and memory.mmap_threshold() == memory.MMAP_THRESHOLD
    assert set_to == [memory.MMAP_THRESHOLD, memory.DYNAMIC_THRESHOLD_CEILING]
    monkeypatch.setattr(memory, "_threshold", 4 << 20)  # a host's fixed threshold
    set_to.clear()
    with pytest.raises(RuntimeError, match="boom"), memory.large_allocations_mapped():
        raise RuntimeError("boom")
    assert set_to == [memory.MMAP_THRESHOLD, 4 << 20] and memory.mmap_threshold() == 4 << 20
    set_to.clear()
    outer, inner = memory.large_allocations_mapped(1 << 20), memory.large_allocations_mapped(2 << 20)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the inner span, still open, keeps its threshold
    assert memory.mmap_threshold() == 2 << 20
    inner.__exit__(None, None, None)
    assert set_to == [1 << 20, 2 << 20, 2 << 20, 4 << 20] and memory.mmap_threshold() == 4 << 20


def test_the_threshold_the_environment_fixed_is_the_one_a_span_restores(monkeypatch):
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert memory._threshold_from_environment() is None  # glibc's dynamic threshold
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536")
    assert memory._threshold_from_environment() == 65536
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.top_pad=0")  # any of these turns the adjustment off
    assert memory._threshold_from_environment() == 128 * 1024
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "262144")
    assert memory._threshold_from_environment() == 262144


def test_a_run_leaves_older_objects_out_of_its_collections_and_thaws_them_after():
    """Inside the block the objects alive when it opened are frozen (a collection then scans only newer ones); a
    cycle made inside is still collected; nested blocks freeze once and the last one out thaws; on error too."""
    import gc
    import weakref

    from workbench.core.memory import older_objects_frozen

    class Node:
        pass

    # Frozen objects are still freed by reference counting (another thread of the test process may drop some at
    # any time), so the frozen count can only be bounded from above; the objects made inside the block, kept alive,
    # are what a second freeze would add and what must stay in the collector's generations.
    assert gc.get_freeze_count() == 0
    with older_objects_frozen() as froze:
        assert froze and gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        made_inside = [Node() for _ in range(2000)]
        cycle = Node()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None  # made inside the block: collected as before
        with older_objects_frozen() as inner:
            assert inner and gc.get_freeze_count() <= frozen  # nested: no second freeze
        assert 0 < gc.get_freeze_count() <= frozen  # the outer block still holds them
        tracked = {id(obj) for obj in gc.get_objects()}  # the generations the collector scans, frozen ones not
        assert all(id(node) in tracked for node in made_inside)
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), older_objects_frozen():
        raise RuntimeError("a stage failed")
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_is_left_alone():
    import gc

    from workbench.core.memory import older_objects_frozen

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with older_objects_frozen() as froze:
            assert not froze
        assert 0 < gc.get_freeze_count() <= frozen  # not thawed by the block (refcounting may free some)
    finally:
        gc.unfreeze()
