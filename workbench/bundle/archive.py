"""Bundle archives: a deterministic ``.tar.gz`` writer and a streaming extractor that refuses anything unsafe.

:func:`write_archive` packs a bundle directory under one top folder with sorted entries, zero timestamps, owner 0 and
fixed permissions (and no gzip timestamp or file name), so the same files always give the same archive bytes.

:func:`scan_archive` and :func:`extract_archive` never call ``tarfile.extractall`` and never hold an unbounded amount
of anything:

* the archive's size on disk is checked before a byte is read;
* the gzip stream is decompressed in bounded steps by :class:`_BoundedGunzip`, which counts every decompressed byte
  — tar headers, GNU long names and pax records included — and refuses the archive as soon as the total passes the
  unpacked cap or the ratio of decompressed to compressed bytes passes the ratio cap (a gzip bomb is refused after a
  few MB, not after it has filled the disk);
* a tar header that announces a long name or pax record over :data:`MAX_HEADER_BYTES` is refused before its data is
  read, and so is a sparse member — GNU's old sparse headers and the pax sparse formats 0.0, 0.1 and 1.0 — before
  tarfile reads its map: its holes would unpack to bytes nobody counted (a bundle we write never has one), and a
  header that does not parse is refused rather than taken as the end of the archive (:class:`_BoundedTarInfo`);
* after the last member only zero blocks may follow, up to the end of the gzip stream, and nothing but NUL padding
  after that: trailing data is refused, not ignored;
* **first pass** (:func:`scan_archive`): every member is checked — only regular files and directories, a safe
  relative name under one top folder, no duplicate name, no name that is both a file and a folder, at most
  :data:`~workbench.bundle.schema.MAX_ARCHIVE_MEMBERS`, their sizes together within the unpacked cap — and the
  manifest is read and checked (:func:`~workbench.bundle.integrity.parse_manifest`); the members must be exactly the
  files it lists, each of its recorded size. Nothing is written during this pass;
* **second pass** (:func:`extract_archive`): each file is streamed into a fresh directory while its sha256 is
  computed and compared with the manifest's; the directory replaces the target in one rename, and a refused
  extraction leaves nothing behind. A failure to write says so — no space left on the device, a read-only file
  system, permission denied — naming the directory, never "corrupt archive".

The extracted directory still goes through :func:`~workbench.bundle.integrity.verify_bundle_dir` when it is loaded.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.bundle.integrity import parse_manifest, safe_relative
from workbench.bundle.schema import MANIFEST, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_MEMBERS, MAX_MANIFEST_BYTES
from workbench.core.atomic import atomic_directory, atomic_write_bytes
from workbench.core.errors import DataError

MAX_UNPACKED_BYTES = 256 << 20
"""Default cap on what an archive may decompress to, headers included (the quickstart bundle is about 7 MB)."""

MAX_COMPRESSION_RATIO = 100.0
"""Default cap on decompressed / compressed bytes (bundles compress 1.5–5×: PNG, ONNX and safetensors barely)."""

RATIO_FLOOR_BYTES = 4 << 20
"""The ratio cap applies once this much has been decompressed (tiny archives of JSON compress well and are harmless)."""

MAX_HEADER_BYTES = 64 << 10
"""Largest GNU long-name / long-link or pax header record accepted (a bundle's longest path is a few dozen bytes)."""

_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ArchiveLimits:
    """What an archive may cost: ``max_bytes`` on disk, ``max_unpacked`` decompressed (headers included), and a
    decompressed / compressed ``max_ratio``."""

    max_bytes: int = MAX_ARCHIVE_BYTES
    max_unpacked: int = MAX_UNPACKED_BYTES
    max_ratio: float = MAX_COMPRESSION_RATIO


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


class _Refused(Exception):
    """A limit was passed inside tarfile's reading; carries the one-line reason out through tarfile."""


class _BoundedGunzip:
    """A read-only gzip stream over a file that counts what it decompresses and stops at the limits.

    ``read(n)`` returns at most ``n`` decompressed bytes, produced in steps of at most 1 MiB, and raises
    :class:`_Refused` as soon as the total passes ``limits.max_unpacked``, or, past :data:`RATIO_FLOOR_BYTES`,
    the decompressed / compressed ratio passes ``limits.max_ratio``. Concatenated gzip members are read in turn."""

    def __init__(self, handle: Any, limits: ArchiveLimits) -> None:
        self.handle = handle
        self.limits = limits
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.compressed = 0
        self.total = 0
        self.pending = b""
        self.finished = False

    def _read(self) -> bytes:
        """The next compressed block of the file (b"" at its end)."""
        try:
            data = self.handle.read(64 << 10)
        except OSError as exc:
            raise _Refused(f"cannot read the archive ({describe_os_error(exc)})") from None
        self.compressed += len(data)
        return data

    def _next_member(self) -> bytes | None:
        """At the end of a gzip member: the compressed bytes of the next one, or None at the end of the stream — the end
        of the file, possibly after NUL padding; anything else after the stream is refused."""
        rest = self.inflater.unused_data
        while len(rest) < 2 and (block := self._read()):
            rest += block
        if not rest:
            return None
        if rest.startswith(_GZIP_MAGIC):
            return rest
        while not rest.strip(b"\0"):  # NUL padding, as some writers add: it must run to the end of the file
            rest = self._read()
            if not rest:
                return None
        raise _Refused("data after the end of the gzip stream: not allowed")

    def _more(self, want: int) -> bytes:
        """Up to ``want`` more decompressed bytes (b"" at the end of the stream)."""
        while True:
            if self.inflater.eof:  # checked first: after the end, zlib leaves the rest in unconsumed_tail too
                following = self._next_member()
                if following is None:
                    self.finished = True
                    return b""
                data = following
                self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next gzip member
            elif self.inflater.unconsumed_tail:
                data = self.inflater.unconsumed_tail
            else:
                data = self._read()
                if not data:
                    raise _Refused("the gzip stream ends early (truncated archive)")
            out = self.inflater.decompress(data, min(want, _CHUNK))
            if out:
                self._count(len(out))
                return out

    def _count(self, size: int) -> None:
        self.total += size
        if self.total > self.limits.max_unpacked:
            raise _Refused(f"unpacks to more than {self.limits.max_unpacked} bytes")
        if self.total > RATIO_FLOOR_BYTES and self.total > self.limits.max_ratio * max(self.compressed, 1):
            raise _Refused(
                f"decompresses more than {self.limits.max_ratio:g}× its compressed size (a compression bomb?)"
            )

    def read(self, size: int = -1) -> bytes:
        """At most ``size`` decompressed bytes (``-1``: to the end, still bounded by the limits)."""
        want = size if size is not None and size >= 0 else self.limits.max_unpacked + 1
        parts = [self.pending[:want]]
        got = len(parts[0])
        self.pending = self.pending[want:]
        while got < want and not self.finished:
            chunk = self._more(want - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile's member header, refusing what a bundle archive never holds before tarfile acts on it (its private
    ``_proc_*`` hooks are where it does; stable since Python 2.6 — :func:`_check_member` checks ``issparse()`` too):

    * a long-name / long-link or pax record over :data:`MAX_HEADER_BYTES`, before the record is read into memory;
    * a sparse member (GNU's old ``S`` headers, pax sparse 0.0, 0.1 and 1.0), before its map is read: tarfile would
      unpack its holes as zeros that no cap counts (and reads a 1.0 map of any length);
    * a header that does not parse, which tarfile would otherwise take for the end of the archive."""

    _EXTENDED = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE, b"X")

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        try:
            return super().fromtarfile(tar)
        except tarfile.InvalidHeaderError:
            raise _Refused("a tar header that does not parse (corrupt archive)") from None

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        if self.type in self._EXTENDED and self.size > MAX_HEADER_BYTES:
            raise _Refused(f"a tar header record of {self.size} bytes (limit {MAX_HEADER_BYTES})")
        return super()._proc_member(tar)  # type: ignore[misc]

    def _proc_sparse(self, tar: tarfile.TarFile) -> tarfile.TarInfo:  # GNU's old sparse member (type S)
        raise _Refused(SPARSE_REFUSAL)

    def _proc_gnusparse_00(self, *args: Any) -> None:  # pax sparse 0.0
        raise _Refused(SPARSE_REFUSAL)

    def _proc_gnusparse_01(self, *args: Any) -> None:  # pax sparse 0.1
        raise _Refused(SPARSE_REFUSAL)

    def _proc_gnusparse_10(self, *args: Any) -> None:  # pax sparse 1.0
        raise _Refused(SPARSE_REFUSAL)


SPARSE_REFUSAL = "a sparse member (its holes would unpack to bytes no limit counts): not allowed in a bundle"


@dataclass
class ArchiveScan:
    """What the first pass found: the top folder, the file members (name below the top → size), the manifest's
    bytes and parsed manifest."""

    top: str
    files: dict[str, int]
    manifest_bytes: bytes
    manifest: dict[str, Any]
    folders: set[str] = field(default_factory=set)


_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, ValueError)
"""What a malformed archive makes tarfile or zlib raise (reading the file itself fails as :class:`_Refused`)."""

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    getattr(errno, "EDQUOT", -1): "disk quota exceeded",
}


def describe_os_error(exc: OSError) -> str:
    """What an OSError means, in words (its errno's name when it has none here)."""
    if exc.errno in _REASONS:
        return _REASONS[exc.errno]
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def _corrupt(exc: BaseException, what: str = "corrupt archive") -> str:
    """The one-line refusal of an archive tarfile or zlib cannot read: their own message, except for a ValueError's,
    which may quote the archive's bytes."""
    detail = "" if isinstance(exc, ValueError) else f": {exc}"
    return f"{what} ({type(exc).__name__}{detail})"


def _open_archive(archive: Path) -> Any:
    try:
        return open(archive, "rb")
    except OSError as exc:
        raise DataError(f"cannot read the archive ({describe_os_error(exc)})", str(archive)) from None


def _open_stream(archive: Path, handle: Any, limits: ArchiveLimits) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=_BoundedGunzip(handle, limits), mode="r|", tarinfo=_BoundedTarInfo)
    except _Refused:
        raise
    except _READ_ERRORS as exc:
        raise DataError(_corrupt(exc, "not a readable .tar.gz"), str(archive)) from None


def _check_end(tar: tarfile.TarFile) -> None:
    """After the last member: the rest of the tar stream must be zero blocks (the end-of-archive marker and its
    padding) up to the end of the gzip stream, which the gunzip checks is the end of the file."""
    while block := tar.fileobj.read(_CHUNK):  # type: ignore[union-attr]
        if block.strip(b"\0"):
            raise _Refused("data after the end of the tar archive: not allowed")


def _relative(member: tarfile.TarInfo, where: str) -> tuple[str, str]:
    """``(top folder, path below it)`` of a checked member name."""
    name = member.name.rstrip("/") if member.isdir() else member.name
    safe_relative(name, f"{where}: member {member.name[:200]!r}")
    top, _, rest = name.partition("/")
    return top, rest


def scan_archive(archive: str | Path, limits: ArchiveLimits = ArchiveLimits()) -> ArchiveScan:
    """First pass over a bundle archive (see the module docstring); nothing is written. DataError (one line naming the
    archive, and the member when one is at fault) on anything refused."""
    archive = Path(archive)
    where = str(archive)
    check_archive_size(archive, limits.max_bytes)
    files: dict[str, int] = {}
    folders: set[str] = set()
    tops: set[str] = set()
    seen: set[str] = set()
    manifest_bytes: bytes | None = None
    count = total = 0
    handle = _open_archive(archive)
    try:
        with handle, _open_stream(archive, handle, limits) as tar:
            for member in tar:
                count += 1
                if count > MAX_ARCHIVE_MEMBERS:
                    raise DataError(f"more than {MAX_ARCHIVE_MEMBERS} members", where)
                if member.issparse():
                    raise DataError(f"member {member.name[:200]!r} is {SPARSE_REFUSAL[2:]}", where)
                if member.issym() or member.islnk():
                    raise DataError(f"member {member.name[:200]!r} is a link: not allowed", where)
                if not (member.isfile() or member.isdir()):
                    raise DataError(f"member {member.name[:200]!r} is not a regular file or directory", where)
                top, rest = _relative(member, where)
                tops.add(top)
                if len(tops) > 1:
                    raise DataError(f"expected one top folder, found {sorted(tops)[:3]}", where)
                if rest in seen:
                    raise DataError(f"member {member.name[:200]!r} appears twice", where)
                seen.add(rest)
                if member.isdir():
                    if rest in files:
                        raise DataError(f"member {member.name[:200]!r} is both a file and a folder", where)
                    if rest:
                        folders.add(rest)
                    continue
                if not rest:
                    raise DataError(f"member {member.name[:200]!r} is a file in place of the top folder", where)
                if rest in folders:
                    raise DataError(f"member {member.name[:200]!r} is both a file and a folder", where)
                parents = rest.split("/")[:-1]
                above = ["/".join(parents[: i + 1]) for i in range(len(parents))]
                if any(p in files for p in above):
                    raise DataError(f"member {member.name[:200]!r} lies below a file of the same name", where)
                folders.update(above)
                files[rest] = member.size
                total += member.size
                if total > limits.max_unpacked:
                    raise DataError(f"the members' sizes add up to more than {limits.max_unpacked} bytes", where)
                if rest == MANIFEST:
                    if member.size > MAX_MANIFEST_BYTES:
                        raise DataError(f"manifest.json is {member.size} bytes (limit {MAX_MANIFEST_BYTES})", where)
                    reader = tar.extractfile(member)
                    manifest_bytes = reader.read() if reader is not None else b""
            _check_end(tar)
    except _Refused as exc:
        raise DataError(str(exc), where) from None
    except _READ_ERRORS as exc:
        raise DataError(_corrupt(exc), where) from None
    if manifest_bytes is None:
        raise DataError("the archive holds no manifest.json in its top folder", where)
    manifest = parse_manifest(manifest_bytes, f"{where}: {MANIFEST}")
    _check_against_manifest(files, manifest, where)
    return ArchiveScan(next(iter(tops)), files, manifest_bytes, manifest, folders)


def _check_against_manifest(files: dict[str, int], manifest: dict[str, Any], where: str) -> None:
    """The archive's files must be exactly the manifest's, each of its recorded size."""
    listed = manifest["files"]
    present = {name: size for name, size in files.items() if name != MANIFEST}
    extra = sorted(set(present) - set(listed))
    if extra:
        raise DataError(f"file(s) not listed in the manifest: {', '.join(extra[:5])}", where)
    missing = sorted(set(listed) - set(present))
    if missing:
        raise DataError(f"file(s) listed in the manifest but missing: {', '.join(missing[:5])}", where)
    for name, size in sorted(present.items()):
        if size != listed[name]["size"]:
            raise DataError(f"member {name!r} is {size} bytes, the manifest says {listed[name]['size']}", where)


def extract_archive(
    archive: str | Path, target: str | Path, *, limits: ArchiveLimits = ArchiveLimits(), scan: ArchiveScan | None = None
) -> Path:
    """Safely unpack a bundle archive into ``target`` (see the module docstring; ``scan`` is the first pass when the
    caller already made it); returns ``target``. DataError naming the archive (and the member) on anything refused,
    or naming ``target``'s folder when it cannot be written (no space, read-only, permission denied), with nothing
    left at ``target`` (an existing ``target`` is replaced only by a complete, verified extraction)."""
    archive = Path(archive)
    where = str(archive)
    scan = scan or scan_archive(archive, limits)
    listed = scan.manifest["files"]
    target = Path(target)
    handle = _open_archive(archive)
    try:
        with handle, _open_stream(archive, handle, limits) as tar, atomic_directory(target) as tmp:
            for folder in sorted(scan.folders):
                (tmp / folder).mkdir(parents=True, exist_ok=True)
            for member in tar:
                _, rest = _relative(member, where)
                if not member.isfile():
                    continue
                if scan.files.get(rest) != member.size or member.issparse():  # the archive changed since the scan
                    raise DataError(f"member {member.name[:200]!r} differs from the first pass", where)
                _write_member(tar, member, tmp / rest, listed.get(rest), where)
            _check_end(tar)
    except _Refused as exc:
        raise DataError(str(exc), where) from None
    except _READ_ERRORS as exc:
        raise DataError(_corrupt(exc), where) from None
    except OSError as exc:  # reading the archive fails as _Refused: this is writing the extraction
        raise DataError(f"cannot unpack the bundle here: {describe_os_error(exc)}", str(target.parent)) from None
    return target


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, destination: Path, record: Any, where: str) -> None:
    """Stream one file member to ``destination``, checking its size and (when listed) its sha256 as it goes."""
    reader = tar.extractfile(member)
    digest = hashlib.sha256()
    written = 0
    with open(destination, "xb") as out:
        while reader is not None and (block := reader.read(_CHUNK)):
            digest.update(block)
            written += len(block)
            out.write(block)
    if written != member.size:
        raise DataError(f"member {member.name[:200]!r} is truncated", where)
    if record is not None and digest.hexdigest() != record["sha256"]:
        raise DataError(f"member {member.name[:200]!r}: sha256 differs from the manifest's (altered)", where)
