"""Bundle archives: a deterministic ``.tar.gz`` writer and an extractor that refuses anything unsafe.

:func:`write_archive` packs a bundle directory under one top folder with sorted entries, zero timestamps, owner 0 and
fixed permissions (and no gzip timestamp or file name), so the same files always give the same archive bytes.

:func:`extract_archive` never calls ``tarfile.extractall``. Before a byte is written it checks the archive's size on
disk, then every member: only regular files and directories; no absolute path, no ``..``, no link of any kind, no
device; one top folder; at most :data:`~workbench.bundle.schema.MAX_ARCHIVE_MEMBERS` members and a total unpacked
size under the limit. Then it copies each file's bytes into a fresh directory, which replaces the target in one
rename. The extracted directory still goes through :func:`~workbench.bundle.integrity.verify_bundle_dir`.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from workbench.bundle.integrity import safe_relative
from workbench.bundle.schema import MAX_ARCHIVE_BYTES, MAX_ARCHIVE_MEMBERS
from workbench.core.atomic import atomic_directory, atomic_write_bytes
from workbench.core.errors import DataError


def write_archive(source: str | Path, target: str | Path, top: str) -> Path:
    """Pack the files below ``source`` into ``target`` (``.tar.gz``) under the folder ``top``; atomic, deterministic."""
    source = Path(source)
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        folders = sorted({p.parent for p in source.rglob("*") if p.is_file()} - {source})
        for entry in [source, *folders]:
            name = top if entry == source else f"{top}/{entry.relative_to(source).as_posix()}"
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{top}/{path.relative_to(source).as_posix()}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return atomic_write_bytes(target, buffer.getvalue())


def check_archive_size(archive: Path, max_bytes: int) -> int:
    """The archive's size in bytes; DataError when it is missing or larger than ``max_bytes``."""
    try:
        size = archive.stat().st_size
    except OSError:
        raise DataError("archive not found", str(archive)) from None
    if size > max_bytes:
        raise DataError(f"archive is {size} bytes, over the limit of {max_bytes}", str(archive))
    return size


def extract_archive(archive: str | Path, target: str | Path, *, max_bytes: int = MAX_ARCHIVE_BYTES) -> Path:
    """Safely unpack a bundle archive into ``target`` (see the module docstring); returns the bundle folder inside.

    DataError naming the archive (and the member) for: a file over ``max_bytes``, an unreadable or non-gzip tar,
    an unsafe or non-regular member, several top folders, too many members, or an unpacked size over ``max_bytes``.
    """
    archive = Path(archive)
    where = str(archive)
    check_archive_size(archive, max_bytes)
    try:
        tar = tarfile.open(archive, mode="r:gz")  # noqa: SIM115 (closed by the `with tar` below)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"not a readable .tar.gz ({exc})", where) from None
    with tar:
        members = _checked_members(tar, where, max_bytes)
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise DataError(f"expected one top folder, found {sorted(tops)}", where)
        target = Path(target)
        with atomic_directory(target) as tmp:
            for member in members:
                relative = member.name.split("/", 1)[1] if "/" in member.name else ""
                if not relative:
                    continue
                destination = tmp / relative
                if member.isdir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                try:
                    handle = tar.extractfile(member)
                    data = handle.read() if handle is not None else b""
                except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
                    raise DataError(f"corrupt archive at {member.name!r} ({exc})", where) from None
                if len(data) != member.size:
                    raise DataError(f"member {member.name!r} is truncated", where)
                destination.write_bytes(data)
    return target


def _checked_members(tar: tarfile.TarFile, where: str, max_bytes: int) -> list[tarfile.TarInfo]:
    """Every member, checked (type, path, count, total size) before anything is extracted."""
    members: list[tarfile.TarInfo] = []
    total = 0
    try:
        for member in tar:
            members.append(member)
            if len(members) > MAX_ARCHIVE_MEMBERS:
                raise DataError(f"more than {MAX_ARCHIVE_MEMBERS} members", where)
            if member.issym() or member.islnk():
                raise DataError(f"member {member.name!r} is a link: not allowed", where)
            if not (member.isfile() or member.isdir()):
                raise DataError(f"member {member.name!r} is not a regular file or directory", where)
            safe_relative(member.name.rstrip("/") if member.isdir() else member.name, f"{where}: {member.name}")
            total += member.size
            if total > max_bytes:
                raise DataError(f"unpacks to more than {max_bytes} bytes", where)
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise DataError(f"corrupt archive ({exc})", where) from None
    return members
