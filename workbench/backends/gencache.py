"""A persistent, multi-process-safe cache of generations (SQLite in WAL mode; no pickle).

One row per generated sample. The key is the sha256 of the canonical JSON of (format version, generator
fingerprint, rendered prompt, decoding request — parameters, seed, stop strings, hidden layer, attentions, context
limit — and sample index); see :meth:`GenerationCache.make_key`. The value is a self-describing blob::

    b"WBGEN1\\n" | uint32 little-endian header length | JSON header | raw array bytes

The JSON header holds the scalar fields and, per array, its dtype (from a fixed whitelist), shape, offset and size;
decoding uses ``np.frombuffer`` only, so loading never runs code. Every array field of :class:`Generation` is stored
(the top-k arrays of ``top_logprobs`` generations included; None is kept as null); a blob written before a field
existed decodes with that field's default. ``Generation.decode_steps`` (what the sample cost the call that made it)
is not stored: a cached generation cost no decoding.

Several processes may read and write the same file: WAL journal, a busy timeout, ``INSERT OR IGNORE`` (a sample is
deterministic, so the first writer wins), and a fresh connection after ``fork``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import struct
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.generation_types import Generation
from workbench.core.hashing import canonical_json
from workbench.core.paths import cache_dir

MAGIC = b"WBGEN1\n"
KEY_VERSION = 1
_DTYPES = {"float16", "float32", "float64", "int32", "int64", "bool"}
_TRANSIENT_FIELDS = {"decode_steps"}
"""Fields of one call's generation that a cached copy must not carry (what the sample cost the loop that made it)."""
_ARRAY_FIELDS = {f.name for f in fields(Generation)} - {
    *_TRANSIENT_FIELDS,
    "prompt",
    "text",
    "finish_reason",
    "sample_index",
    "prompt_tokens",
    "eos_logprob",
    "eos_entropy",
    "eos_token_id",
}


def default_cache_path() -> Path:
    """``cache_dir("generations") / "generations.sqlite"``."""
    return cache_dir("generations") / "generations.sqlite"


def encode_generation(gen: Generation) -> bytes:
    """Serialise a :class:`Generation` to the blob format described in the module docstring."""
    header: dict[str, Any] = {"scalars": {}, "arrays": {}}
    chunks: list[bytes] = []
    offset = 0
    for f in fields(Generation):
        if f.name in _TRANSIENT_FIELDS:
            continue
        value = getattr(gen, f.name)
        if f.name not in _ARRAY_FIELDS:
            header["scalars"][f.name] = value
            continue
        if value is None:
            header["arrays"][f.name] = None
            continue
        array = np.ascontiguousarray(value)
        if array.dtype.name not in _DTYPES:
            raise TypeError(f"cannot cache array field '{f.name}' of dtype {array.dtype}")
        data = array.tobytes()
        header["arrays"][f.name] = {"dtype": array.dtype.name, "shape": list(array.shape), "offset": offset}
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return MAGIC + struct.pack("<I", len(head)) + head + b"".join(chunks)


def decode_generation(blob: bytes) -> Generation:
    """Rebuild a :class:`Generation` from :func:`encode_generation`'s blob (``ValueError`` if malformed)."""
    if not blob.startswith(MAGIC):
        raise ValueError("not a cached generation (bad magic)")
    start = len(MAGIC) + 4
    (size,) = struct.unpack("<I", blob[len(MAGIC) : start])
    header = json.loads(blob[start : start + size].decode("utf-8"))
    body = memoryview(blob)[start + size :]
    values: dict[str, Any] = dict(header["scalars"])
    for name, spec in header["arrays"].items():
        if spec is None:
            values[name] = None
            continue
        if spec["dtype"] not in _DTYPES:
            raise ValueError(f"cached array '{name}' has a disallowed dtype {spec['dtype']}")
        dtype = np.dtype(spec["dtype"])
        count = int(np.prod(spec["shape"], dtype=np.int64))
        array = np.frombuffer(body, dtype=dtype, count=count, offset=spec["offset"])
        values[name] = array.reshape(spec["shape"]).copy()
    return Generation(**values)


class GenerationCache:
    """SQLite-backed store of :class:`Generation` samples, shared safely by threads and processes.

    ``path`` defaults to :func:`default_cache_path`; ``timeout`` (seconds) is how long a writer waits for a lock.
    :meth:`stats` reports this instance's hits, misses and writes and the number of stored entries.
    """

    def __init__(self, path: str | Path | None = None, *, timeout: float = 60.0) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self._local = threading.local()
        self._connect()

    @staticmethod
    def make_key(fingerprint: str, prompt: str, request: dict[str, Any], sample_index: int) -> str:
        """Hex sha256 identifying one sample: model fingerprint, rendered prompt, request dict, sample index."""
        payload = canonical_json([KEY_VERSION, fingerprint, prompt, request, int(sample_index)])
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection (re-opened after a fork), with WAL and the busy timeout set."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE IF NOT EXISTS generations (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def get_many(self, keys: list[str]) -> dict[str, Generation]:
        """The cached generations among ``keys`` (missing keys are absent from the result); counts hits/misses."""
        conn = self._connect()
        found: dict[str, Generation] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):  # stay under SQLite's bound-parameter limit
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, value in conn.execute(f"SELECT key, value FROM generations WHERE key IN ({marks})", chunk):
                found[key] = decode_generation(bytes(value))
        self.hits += len(found)
        self.misses += len(unique) - len(found)
        return found

    def get(self, key: str) -> Generation | None:
        """One cached generation, or None."""
        return self.get_many([key]).get(key)

    def put_many(self, items: dict[str, Generation]) -> None:
        """Store generations in one transaction; an existing key is kept (generations are deterministic)."""
        if not items:
            return
        rows = [(key, encode_generation(gen)) for key, gen in items.items()]
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR IGNORE INTO generations (key, value) VALUES (?, ?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.writes += len(rows)

    def put(self, key: str, gen: Generation) -> None:
        """Store one generation."""
        self.put_many({key: gen})

    def __len__(self) -> int:
        """Number of stored generations."""
        return int(self._connect().execute("SELECT COUNT(*) FROM generations").fetchone()[0])

    def stats(self) -> dict[str, int]:
        """``{"hits", "misses", "writes"}`` of this instance and ``"entries"`` in the file."""
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes, "entries": len(self)}

    def close(self) -> None:
        """Close this thread's connection (the cache reconnects on next use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __enter__(self) -> GenerationCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
