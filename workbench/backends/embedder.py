"""Sentence embeddings with an on-disk cache (layer 3).

:class:`Embedder` encodes with a sentence-transformers model directory (the embedded all-MiniLM-L6-v2 by default,
resolved through :func:`workbench.assets.resolve_embedder`; a hub id only when the user names one). Every vector it
returns is float32 and L2-normalised, so inner product equals cosine similarity.

A directory whose module chain is the common Transformer → Pooling (mean, CLS or max) [→ Normalize] is encoded by
:class:`PooledEncoder` — transformers' ``AutoModel`` plus the pooling written out here — so the sentence-transformers
package (15 s to import, and it pulls in scikit-learn) is never imported, in training or in the runtime. Any other
chain (a Dense layer, a custom module) is loaded with sentence-transformers itself.

The cache is one SQLite file per model fingerprint under ``cache_dir("embeddings")``: rows map the sha256 of a
text to its raw float32 bytes (no pickle). SQLite's locking (WAL journal, busy timeout) makes it safe for several
processes to read and write the same file; only texts missing from it are encoded.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from workbench.assets import resolve_embedder
from workbench.backends.cost import CostCounter
from workbench.backends.device import resolve_device
from workbench.core.errors import AssetError, DataError
from workbench.core.hashing import stable_hash, tree_fingerprint
from workbench.core.paths import cache_dir

# Bump when the way vectors are produced changes (pooling, normalisation), so old cache rows are not reused.
# 2: the Transformer → Pooling chain is encoded by PooledEncoder instead of sentence-transformers.
_EMBEDDING_VERSION = 2
_POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens")
_SQL_CHUNK = 500  # SQLite's default limit on bound parameters is far above this.


@runtime_checkable
class TextEncoder(Protocol):
    """What retrievers and judges need from an embedder: ``encode`` to normalised float32 rows, ``dim``, and a
    ``fingerprint`` that changes whenever the vectors would."""

    @property
    def dim(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def text_key(text: str) -> str:
    """Cache key of one text: the hex sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class EmbeddingCache:
    """A SQLite store of float32 vectors keyed by text sha256, for one model fingerprint and dimension.

    Safe for concurrent processes: writes are short transactions (``INSERT OR IGNORE``), readers use WAL.
    """

    def __init__(self, path: str | Path, dim: int) -> None:
        self.path = Path(path)
        self.dim = dim
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn, conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60.0)

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among ``keys`` (missing keys are simply absent from the result)."""
        found: dict[str, np.ndarray] = {}
        with closing(self._connect()) as conn:
            for start in range(0, len(keys), _SQL_CHUNK):
                chunk = list(keys[start : start + _SQL_CHUNK])
                marks = ",".join("?" * len(chunk))
                for key, blob in conn.execute(f"SELECT key, vec FROM vectors WHERE key IN ({marks})", chunk):
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if vec.shape[0] == self.dim:
                        found[key] = vec
        return found

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        """Store vectors (first writer wins; rows are never overwritten)."""
        rows = [(key, np.ascontiguousarray(vec, dtype=np.float32).tobytes()) for key, vec in items.items()]
        with closing(self._connect()) as conn, conn:
            conn.executemany("INSERT OR IGNORE INTO vectors (key, vec) VALUES (?, ?)", rows)

    def __len__(self) -> int:
        with closing(self._connect()) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])


def _batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def pooled_chain(path: str | Path) -> dict[str, Any] | None:
    """``{"pooling": mode, "normalize": bool, "max_seq_length": int | None, "do_lower_case": bool}`` when the
    sentence-transformers directory ``path`` is Transformer → Pooling (one of mean / cls / max) [→ Normalize]; None
    for any other layout (then sentence-transformers loads it)."""

    root = Path(path)
    try:
        modules = json.loads((root / "modules.json").read_text())
        config = json.loads((root / "sentence_bert_config.json").read_text())
    except (OSError, ValueError):
        return None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or modules[0].get("path"):
        return None
    try:
        pooling = json.loads((root / modules[1]["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    on = [mode for mode in _POOLING_MODES if pooling.get(mode)]
    others = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v and k not in _POOLING_MODES]
    if len(on) != 1 or others or pooling.get("include_prompt") is False:
        return None
    return {
        "pooling": on[0].removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens"),
        "normalize": kinds[-1] == "Normalize",
        "max_seq_length": config.get("max_seq_length"),
        "do_lower_case": bool(config.get("do_lower_case", False)),
    }


class PooledEncoder:
    """Transformer → Pooling (mean / cls / max) [→ Normalize], with transformers only (see the module docstring).

    Texts are tokenised with padding and truncation to ``max_seq_length``; mean pooling averages the token vectors
    under the attention mask, ``cls`` takes the first, ``max`` the masked maximum — sentence-transformers' Pooling.
    """

    def __init__(self, path: str, chain: dict[str, Any], device: str, max_seq_length: int | None) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        self.device = device
        self.pooling = chain["pooling"]
        self.normalize = chain["normalize"]
        self.do_lower_case = chain["do_lower_case"]
        limits = [max_seq_length or chain["max_seq_length"], getattr(self.model.config, "max_position_embeddings", 0)]
        self.max_seq_length = min(int(v) for v in limits if v)
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: list[str]) -> np.ndarray:
        """``(n, dim)`` float32 sentence vectors (one forward pass for the batch)."""
        import torch

        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        batch = self.tokenizer(
            texts, padding=True, truncation="longest_first", max_length=self.max_seq_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            tokens = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
            if self.pooling == "cls":
                pooled = tokens[:, 0]
            elif self.pooling == "max":
                pooled = tokens.masked_fill(mask == 0, -1e9).max(dim=1).values
            else:
                pooled = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().cpu().numpy()


class CachedEmbedder:
    """What every embedder shares: ``encode`` through the on-disk cache, ``dim`` and ``fingerprint``.

    A subclass sets ``counter``, ``_dim``, ``_fingerprint`` and ``_cache`` (an :class:`EmbeddingCache` or None) and
    implements ``_encode_uncached(texts) -> (n, dim)`` L2-normalised float32 rows; ``encode`` looks every text up by
    (fingerprint, sha256) and sends only the misses, each distinct text once.
    """

    counter: CostCounter
    _dim: int
    _fingerprint: str
    _cache: EmbeddingCache | None

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return self._dim

    @property
    def fingerprint(self) -> str:
        """Identifies the vectors this embedder produces (weights or served model, sequence length, version)."""
        return self._fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(n, dim)`` float32 array of unit-norm rows (cached; only misses are encoded)."""
        where = f"{type(self).__name__}.encode"
        if isinstance(texts, str):
            raise DataError("encode() takes a list of strings, not one string", where)
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise DataError("encode() takes a list of strings", where)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        keys = [text_key(t) for t in texts]
        found = self._cache.get_many(sorted(set(keys))) if self._cache is not None else {}
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in found))
        self.counter.cache_hits += sum(1 for k in keys if k in found)
        self.counter.cache_misses += sum(1 for k in keys if k not in found)
        if missing:
            with self.counter.timed("embed"):
                fresh = self._encode_uncached(missing)
            self.counter.embed_texts += len(missing)
            new = {text_key(t): row for t, row in zip(missing, fresh, strict=True)}
            if self._cache is not None:
                self._cache.put_many(new)
            found.update(new)
        for i, key in enumerate(keys):
            out[i] = found[key]
        return out

    def _encode_uncached(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


class Embedder(CachedEmbedder):
    """Sentence embeddings from a sentence-transformers model directory, cached on disk.

    ``model`` is an embedded name (``"minilm"``), a local directory or an explicit hub id (never implied).
    ``encode(texts)`` returns an ``(n, dim)`` float32 array of L2-normalised rows in input order; an empty input
    gives shape ``(0, dim)``. With ``cache=True`` vectors are looked up by (model fingerprint, text sha256) and only
    the misses are encoded; ``counter.cache_hits`` / ``cache_misses`` count per text, ``counter.embed_texts``
    counts texts actually encoded. The model loads on construction, not at import; ``backend`` says which encoder
    runs it (``"pooled"``: :class:`PooledEncoder`; ``"sentence-transformers"``: the package, for other layouts).
    ``device`` is resolved by :func:`~workbench.backends.device.resolve_device` (``auto`` picks a GPU when torch
    sees one; an unusable device is a one-line ConfigError).
    """

    def __init__(
        self,
        model: str | Path = "minilm",
        *,
        batch_size: int = 64,
        cache: bool = True,
        counter: CostCounter | None = None,
        device: str = "cpu",
        max_seq_length: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise DataError(f"batch_size must be >= 1, got {batch_size}", "Embedder")

        self.resolved = resolve_embedder(str(model))
        self.batch_size = batch_size
        self.counter = counter if counter is not None else CostCounter()
        self._model = self._load(self.resolved.path, resolve_device(device), max_seq_length)
        self._dim = self._model_dim()
        self._fingerprint = self._compute_fingerprint(max_seq_length)
        self._cache = (
            EmbeddingCache(cache_dir("embeddings") / f"{self._fingerprint}.sqlite", self._dim) if cache else None
        )

    def _load(self, path: str, device: str, max_seq_length: int | None) -> Any:
        chain = pooled_chain(path) if Path(path).is_dir() else None
        try:
            if chain is not None:
                self.backend = "pooled"
                return PooledEncoder(path, chain, device, max_seq_length)
            from sentence_transformers import SentenceTransformer

            self.backend = "sentence-transformers"
            model = SentenceTransformer(path, device=device)
        except (OSError, ValueError) as exc:
            raise AssetError(f"cannot load a sentence-transformers model: {exc}".splitlines()[0], path) from exc
        if max_seq_length is not None:
            model.max_seq_length = max_seq_length
        model.eval()
        return model

    def _model_dim(self) -> int:
        if isinstance(self._model, PooledEncoder):
            return self._model.dim
        getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:  # some models only reveal it by encoding
            dim = int(self._model.encode(["x"], convert_to_numpy=True).shape[1])
        return int(dim)

    def _compute_fingerprint(self, max_seq_length: int | None) -> str:
        base = self.resolved.fingerprint
        if self.resolved.source == "local":  # a local directory can be overwritten in place: hash its contents
            base = tree_fingerprint(self.resolved.path)
        seq = max_seq_length if max_seq_length is not None else getattr(self._model, "max_seq_length", None)
        return stable_hash(["embedder", base, seq, self._dim, self.backend, _EMBEDDING_VERSION])

    def _encode_uncached(self, texts: list[str]) -> np.ndarray:
        import torch

        rows = []
        with torch.inference_mode():
            for batch in _batches(texts, self.batch_size):
                if isinstance(self._model, PooledEncoder):
                    rows.append(self._model.encode(list(batch)))
                    continue
                rows.append(
                    self._model.encode(
                        list(batch), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
                    )
                )
        return l2_normalize(np.concatenate(rows, axis=0))
