"""When the machine refuses a write — a read-only file system, a full disk, a file where a directory should be — a run
ends with one line naming the place and the reason (exit 2), never a traceback, and nothing is left half-written.

Tests may run as root, where ``chmod`` stops nothing. So the read-only cases run twice: on a simulated read-only mount
(``os.mkdir`` / ``os.open`` answer as the kernel does on one: EEXIST for what exists, else EROFS), which runs
everywhere, and on a real read-only tmpfs mounted in a private mount namespace (``unshare``), where the machine allows
it. A full disk is simulated at the atomic-write layer (``fsync`` raising ENOSPC once a file reaches 1 MB).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.core.test_run_dir_safety import REPO, recipe, stages  # noqa: F401 (stages: a fixture)
from workbench.core.atomic import atomic_directory, atomic_write_bytes, atomic_write_json
from workbench.core.errors import StorageError
from workbench.core.run_dirs import RUN_MARKER
from workbench.stages import registry
from workbench.stages.registry import StageSpec

THIS = "tests.unit.core.test_storage_refusals"
FULL_AT = 1_000_000
"""The simulated disk is full once a file reaches this many bytes."""


# ------------------------------------------------------------------------------------------------ simulations
def _under(path: object, root: str) -> bool:
    try:
        name = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
    except TypeError:  # a file descriptor
        return False
    return name == root or name.startswith(root + os.sep)


@pytest.fixture
def read_only(monkeypatch):
    """``read_only(root)``: from now on ``root`` answers like a read-only mount to the calls a run creates files and
    directories with (``os.mkdir``, ``os.open`` for writing); reading is untouched."""
    real_mkdir, real_open = os.mkdir, os.open
    roots: list[str] = []

    def refuse(path: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))  # type: ignore[arg-type]

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if any(_under(path, root) for root in roots):
            if os.path.lexists(path):  # the kernel answers EEXIST before EROFS
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(path))
            refuse(path)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    def open_(path, flags, mode=0o777, *, dir_fd=None):
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        if writes and any(_under(path, root) for root in roots):
            refuse(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)
    return lambda root: roots.append(os.path.abspath(root))


@pytest.fixture
def full_disk(monkeypatch):
    """``fsync`` of a file of :data:`FULL_AT` bytes or more raises ENOSPC, as a full disk answers a delayed write."""
    real_fsync = os.fsync

    def fsync(fd):
        if os.fstat(fd).st_size >= FULL_AT:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def fill(ctx):
    """A stage writing a 2 MB output file through the atomic-write layer."""
    atomic_write_json(ctx.out_dir / "big.json", {"rows": "x" * (2 * FULL_AT)})
    return {}


def spill(ctx):
    """A stage whose own writer (not the atomic layer: a library's, say) meets a full disk inside its output."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(ctx.out_dir / "part-0.arrow"))


def spill_nameless(ctx):
    """A library's write meeting a full disk, with no file name in its error."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def cli(monkeypatch, capsys, *args: str) -> tuple[int, list[str]]:
    """``workbench -q *args`` in this process (the fake stages are registered here); exit code and stderr lines."""
    from workbench import cli as cli_module

    monkeypatch.setattr(sys, "argv", ["workbench", "-q", *args])
    monkeypatch.delenv("WORKBENCH_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli_module.main()
    return int(exit_.value.code or 0), capsys.readouterr().err.strip().splitlines()


def one_line_error(code: int, lines: list[str], *parts: str) -> None:
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert all(part in lines[0] for part in parts), lines
    assert "Traceback" not in lines[0]


def produce_only(tmp_path: Path, run: Path) -> list[str]:
    """The command-line arguments running the fake ``produce`` stage alone into ``run``."""
    recipe(tmp_path, run)  # writes tmp_path/r.yaml
    return [str(tmp_path / "r.yaml"), "stages=[produce]"]


def files_below(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# ------------------------------------------------------------------------------------------- the atomic layer
def test_an_atomic_write_on_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, full_disk):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(StorageError) as info:
        atomic_write_bytes(target, b"x" * FULL_AT)
    assert str(info.value) == f"{target}: cannot write it: no space left on device (ENOSPC)"
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)  # OSError handlers still see it
    assert target.read_text() == "old" and files_below(tmp_path) == {"out.json"}  # no temporary left


def test_an_atomic_directory_on_a_read_only_parent_names_it(tmp_path, read_only):
    read_only(tmp_path)
    with pytest.raises(StorageError) as info, atomic_directory(tmp_path / "out"):
        pass
    assert str(info.value) == f"{tmp_path / 'out'}: cannot create it: read-only file system (EROFS)"


def test_a_refused_write_inside_an_atomic_directory_is_named_in_the_final_one(tmp_path, full_disk):
    target = tmp_path / "out"
    with pytest.raises(StorageError) as info, atomic_directory(target) as tmp:
        atomic_write_bytes(tmp / "sub" / "big.bin", b"x" * FULL_AT)
    assert str(info.value) == f"{target}: cannot write sub/big.bin: no space left on device (ENOSPC)"
    assert files_below(tmp_path) == set()  # the temporary directory is gone
    with pytest.raises(FileNotFoundError), atomic_directory(target) as tmp:
        (tmp / "missing").read_text()  # not a refused write: passes through as it is


# ---------------------------------------------------------------------------------- a read-only run directory
@pytest.mark.parametrize("variant", ["the directory", "its parent", "stages/"])
def test_a_read_only_run_directory_is_one_line(tmp_path, stages, read_only, monkeypatch, capsys, variant):  # noqa: F811
    run = tmp_path / "mount" / "run"
    expected = {
        "the directory": f"run_dir {run}: cannot write its run marker {RUN_MARKER}: read-only file system (EROFS)",
        "its parent": f"run_dir {run}: cannot create it: read-only file system (EROFS)",
        "stages/": f"{run / 'stages' / 'produce'}: cannot create it: read-only file system (EROFS)",
    }[variant]
    if variant == "the directory":
        run.mkdir(parents=True)
        read_only(run)
    elif variant == "its parent":
        (tmp_path / "mount").mkdir()
        read_only(tmp_path / "mount")
    else:
        code, lines = cli(monkeypatch, capsys, "run", *produce_only(tmp_path, run))
        assert code == 0, lines
        shutil.rmtree(run / "stages" / "produce")
        read_only(run / "stages")
    before = files_below(tmp_path / "mount")
    code, lines = cli(monkeypatch, capsys, "run", *produce_only(tmp_path, run))
    one_line_error(code, lines, expected)
    after = files_below(tmp_path / "mount")
    assert after - before <= {"run/config.yaml", "run/logs/run.log"}  # a config and a log line at most, no stage


def test_a_run_directory_below_a_file_is_one_line(tmp_path, stages, monkeypatch, capsys):  # noqa: F811
    (tmp_path / "file").write_text("x")
    code, lines = cli(monkeypatch, capsys, "run", *produce_only(tmp_path, tmp_path / "file" / "run"))
    one_line_error(code, lines, f"run_dir {tmp_path / 'file' / 'run'}: cannot create it: not a directory (ENOTDIR)")


# ---------------------------------------------------------------------------------------------- a full disk
@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        (f"{THIS}:fill", "cannot write big.json"),
        (f"{THIS}:spill", "cannot write part-0.arrow"),
    ],
)
def test_a_full_disk_during_a_stage_is_one_line_and_keeps_the_last_output(
    tmp_path,
    stages,  # noqa: F811
    full_disk,
    monkeypatch,
    capsys,
    stage,
    expected,
):
    run = tmp_path / "run"
    args = produce_only(tmp_path, run)
    assert cli(monkeypatch, capsys, "run", *args)[0] == 0
    kept = (run / "stages" / "produce" / "value.txt").read_text()
    monkeypatch.setitem(registry.STAGES, "produce", StageSpec("produce", "p", stage, sections=("answer",)))
    code, lines = cli(monkeypatch, capsys, "run", *args, "--force", "produce")
    one_line_error(code, lines, f"{run / 'stages' / 'produce'}: {expected}: no space left on device (ENOSPC)")
    assert (run / "stages" / "produce" / "value.txt").read_text() == kept  # the earlier output, whole
    assert sorted(os.listdir(run / "stages")) == ["produce"]  # no temporary directory left


def test_a_full_disk_without_a_file_name_is_still_one_line(tmp_path, stages, monkeypatch, capsys):  # noqa: F811
    spec = StageSpec("produce", "p", f"{THIS}:spill_nameless")
    monkeypatch.setitem(registry.STAGES, "produce", spec)
    code, lines = cli(monkeypatch, capsys, "run", *produce_only(tmp_path, tmp_path / "run"))
    one_line_error(code, lines)
    assert lines == ["error: no space left on device (ENOSPC)"]


# ------------------------------------------------------------------------------------ a real read-only mount
MOUNTED = """
set -e
mount -t tmpfs -o ro tmpfs "$1/ro-empty"
mount -t tmpfs -o ro tmpfs "$1/ro-parent"
mount -t tmpfs -o ro tmpfs "$1/earlier/stages"
exec "$2" "$1/driver.py" "$1"
"""

DRIVER = """
import contextlib, io, json, sys
from workbench import cli
root = sys.argv[1]
for run_dir in (f"{root}/ro-empty", f"{root}/ro-parent/run", f"{root}/earlier"):
    sys.argv = ["workbench", "-q", "run", f"{root}/local.yaml", f"run_dir={run_dir}", "--force", "build_data"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli.main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code
    print(json.dumps([code, err.getvalue()]))
"""


def _namespace_command() -> list[str] | None:
    """The ``unshare`` command that gives this user a private mount namespace allowing a tmpfs mount, or None."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return None
    for command in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = subprocess.run([*command, "mount", "-t", "tmpfs", "-o", "ro", "tmpfs", "/mnt"], capture_output=True)
        if probe.returncode == 0:
            return command
    return None


def test_a_real_read_only_mount_in_all_three_places_is_one_line(tmp_path):
    command = _namespace_command()
    if command is None:
        pytest.skip("no private mount namespace here (unshare / mount not permitted): the simulated mount covers it")
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "q0", "question": "Who?", "answers": ["Me"]}) + "\n")
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"doc_id": "d", "title": "D", "text": "Me."}) + "\n")
    (tmp_path / "local.yaml").write_text(
        "name: local\nstages: [build_data]\ntracker: none\n"
        f"data: {{dataset: {tmp_path}/qa.jsonl, corpus: {tmp_path}/corpus.jsonl, fractions: [0, 0, 0, 1]}}\n"
    )
    for name in ("ro-empty", "ro-parent", "earlier/stages"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "earlier" / RUN_MARKER).write_text(json.dumps({"format": "workbench-run", "version": 1}))
    (tmp_path / "mounted.sh").write_text(textwrap.dedent(MOUNTED))
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    env = {**os.environ, "PYTHONPATH": str(REPO), "WORKBENCH_TRACEBACK": ""}
    out = subprocess.run(
        [*command, "sh", str(tmp_path / "mounted.sh"), str(tmp_path), sys.executable],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.strip().splitlines()]
    expected = [
        f"run_dir {tmp_path}/ro-empty: cannot write its run marker {RUN_MARKER}: read-only file system (EROFS)",
        f"run_dir {tmp_path}/ro-parent/run: cannot create it: read-only file system (EROFS)",
        f"{tmp_path}/earlier/stages/build_data: cannot create it: read-only file system (EROFS)",
    ]
    for (code, err), line in zip(results, expected, strict=True):
        assert code == 2 and err == f"error: {line}\n", err
