"""Sentence embeddings from a server speaking the OpenAI ``/v1/embeddings`` protocol (layer 3).

:class:`ServedEmbedder` is the in-process :class:`~workbench.backends.embedder.Embedder`'s twin for ``embedder.backend:
openai``: the same interface (``encode`` → L2-normalised float32 rows in input order, ``dim``, ``fingerprint``,
``counter``), the same on-disk cache, so dense retrieval, the ``answer_equivalence`` judge, the OOD check, TokenSAR /
SentSAR and InSemRAG run on it unchanged. Any server of the protocol works: vLLM, TEI, Infinity, llama.cpp,
``workbench serve-model`` (docs/served-models.md).

The HTTP side is the served generator's :class:`~workbench.backends.served_client.ServedClient` (whole-request
timeout, size cap, retries with backoff, ``max_concurrency`` requests in flight, the API key read from the variable
*named* in the recipe). Texts are sent ``batch_size`` a request (``POST /embeddings {model, input, encoding_format}``),
several requests at once, and every answer is checked by :func:`read_embeddings` before a number of it is used: one
finite vector per input, every vector of the dimension the probe found, each ``index`` once. A bad answer is retried
like a dropped connection, then fails in one line naming the URL, the model and what was wrong.

At construction the server embeds :data:`PROBE_TEXTS` (one request): that gives the dimension, proves the server
reachable, and makes the :class:`EmbeddingProbe` a bundle records to recognise the model later
(:func:`compare_embedding_probes`). The fingerprint is the served name and the dimension, so the cache and an OOD
profile carry over across restarts and ports; a server that swaps the model under the same name is caught because
the fresh probe vectors must match those the cache already holds for the probe texts.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.embedder import CachedEmbedder, EmbeddingCache, l2_normalize, text_key
from workbench.backends.served_answers import InvalidAnswer
from workbench.backends.served_client import MIN_ANSWER_BYTES, ServedClient, ServedSettings
from workbench.core.errors import DataError
from workbench.core.hashing import stable_hash
from workbench.core.paths import cache_dir

PROBE_TEXTS: tuple[str, ...] = (
    "Paris is the capital and largest city of France.",
    "Photosynthesis turns light into chemical energy in plants.",
)
"""Fixed texts whose vectors identify a served embedding model (the probe)."""
PROBE_TOLERANCE = 1e-3
"""Least cosine distance between two probes' vectors that marks another model (float noise is far below it)."""
BYTES_PER_NUMBER = 32
"""Bytes one vector component may take in a JSON answer (``-0.012345678901234567,`` with room to spare)."""
ENCODING_FORMATS = ("float", "base64")
"""How vectors may be asked for: JSON numbers, or base64 of little-endian float32 (a third of the bytes)."""
_SERVED_VERSION = 1  # bump when the way served vectors are read or normalised changes


@dataclass(frozen=True)
class EmbeddingProbe:
    """The served model's unit vectors of :data:`PROBE_TEXTS` (rounded to 6 decimals): how a bundle recognises it."""

    model: str
    texts: list[str]
    vectors: list[list[float]]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a run manifest and a bundle manifest hold."""
        return {"model": self.model, "texts": list(self.texts), "vectors": [list(v) for v in self.vectors]}


def compare_embedding_probes(expected: dict[str, Any], seen: dict[str, Any]) -> str | None:
    """None when ``seen`` is the model of ``expected`` (same probe texts, same dimension, every probe vector within
    :data:`PROBE_TOLERANCE` cosine distance), else one phrase saying what differs."""
    if list(expected.get("texts") or []) != list(seen.get("texts") or []):
        return "the probe texts differ (made by another workbench version)"
    want, got = np.asarray(expected.get("vectors"), dtype=np.float64), np.asarray(seen.get("vectors"), np.float64)
    if want.ndim != 2 or want.shape != got.shape:
        return f"dimension {got.shape[-1] if got.ndim == 2 else '?'}, the bundle's embedder has {want.shape[-1]}"
    distance = float(np.max(1.0 - np.sum(l2_normalize(want) * l2_normalize(got), axis=1)))
    if not distance <= PROBE_TOLERANCE:
        return f"its probe vectors differ (cosine distance {distance:.3g} > {PROBE_TOLERANCE:g})"
    return None


def _vector(value: Any, encoding_format: str, where: str) -> np.ndarray:
    """One answer vector as float64: a list of finite numbers, or (base64) float32 bytes."""
    if isinstance(value, str) and encoding_format == "base64":
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            raise InvalidAnswer(f"{where} is not base64") from None
        if not raw or len(raw) % 4:
            raise InvalidAnswer(f"{where} is not a whole number of float32 values")
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    elif isinstance(value, list) and value:
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            raise InvalidAnswer(f"{where} holds a value that is not a number")
        vector = np.asarray(value, dtype=np.float64)
    else:
        raise InvalidAnswer(f"{where} is not a non-empty list of numbers")
    if not np.all(np.isfinite(vector)):
        raise InvalidAnswer(f"{where} holds a value that is not finite")
    return vector


def read_embeddings(answer: Any, count: int, dim: int | None, encoding_format: str = "float") -> np.ndarray:
    """The ``(count, dim)`` float32 matrix of an embeddings answer, rows in input order (by each item's ``index``;
    items without one are taken in order, but then none may have one). :class:`InvalidAnswer` (one line, never
    quoting the server's values) for anything else: not an object, ``data`` not a list of ``count`` objects, an
    index missing, repeated or out of range, a vector not finite or of another dimension than ``dim`` (None: the
    first vector's)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        raise InvalidAnswer("the answer is not an object with a 'data' list")
    data = answer["data"]
    if len(data) != count:
        raise InvalidAnswer(f"'data' holds {len(data)} embeddings for {count} inputs")
    if not all(isinstance(item, dict) for item in data):
        raise InvalidAnswer("an item of 'data' is not an object")
    indexed = ["index" in item for item in data]
    if any(indexed) and not all(indexed):
        raise InvalidAnswer("some items of 'data' have an 'index', others not")
    order = [item["index"] for item in data] if all(indexed) else list(range(count))
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in order) or sorted(order) != list(range(count)):
        raise InvalidAnswer(f"the 'index' fields are not 0..{count - 1} once each")
    rows: list[np.ndarray | None] = [None] * count
    for item, position in zip(data, order, strict=True):
        rows[position] = _vector(item.get("embedding"), encoding_format, f"data[{position}].embedding")
    width = dim if dim is not None else rows[0].shape[0]  # type: ignore[union-attr]
    for i, row in enumerate(rows):
        if row.shape[0] != width:  # type: ignore[union-attr]
            raise InvalidAnswer(f"data[{i}].embedding has {row.shape[0]} dimensions, not {width}")  # type: ignore[union-attr]
    return np.stack(rows).astype(np.float32)  # type: ignore[arg-type]


class ServedEmbedder(CachedEmbedder):
    """Sentence embeddings from an OpenAI-compatible ``/v1/embeddings`` server (see the module docstring).

    ``settings`` say how to reach it (``section="embedder"``); ``batch_size`` texts go in one request, up to
    ``settings.max_concurrency`` requests in flight; ``encoding_format`` is ``float`` or ``base64``. ``encode``
    returns an ``(n, dim)`` float32 array of L2-normalised rows in input order, as :class:`Embedder` does; cache and
    counter as there. A server that cannot be reached, does not serve the model or answers wrongly (after the
    retries) is a one-line :class:`~workbench.backends.served_client.ServedModelError`; a cache holding another
    model's vectors under this name is a one-line :class:`~workbench.core.errors.DataError`.
    """

    served = True

    def __init__(
        self,
        settings: ServedSettings,
        *,
        batch_size: int = 64,
        cache: bool = True,
        counter: CostCounter | None = None,
        encoding_format: str = "float",
    ) -> None:
        if batch_size < 1:
            raise DataError(f"batch_size must be >= 1, got {batch_size}", f"{settings.section}.batch_size")
        if encoding_format not in ENCODING_FORMATS:
            raise DataError(f"must be one of {', '.join(ENCODING_FORMATS)}", f"{settings.section}.encoding_format")
        self.settings = settings
        self.batch_size = batch_size
        self.encoding_format = encoding_format
        self.counter = counter if counter is not None else CostCounter()
        self.client = ServedClient(settings)
        self._dim = 0  # unknown until the probe answers
        probe = self._request(list(PROBE_TEXTS))
        self._dim = int(probe.shape[1])
        self._fingerprint = stable_hash(["served-embedder", settings.model, self._dim, _SERVED_VERSION])
        self.probe_record = EmbeddingProbe(settings.model, list(PROBE_TEXTS), np.round(probe, 6).tolist())
        self._cache = None
        if cache:
            self._cache = EmbeddingCache(cache_dir("embeddings") / f"{self._fingerprint}.sqlite", self._dim)
            self._check_cache(probe)

    def __repr__(self) -> str:  # never the key
        return f"ServedEmbedder({self.settings.base_url!r}, model={self.settings.model!r}, dim={self._dim})"

    def _check_cache(self, probe: np.ndarray) -> None:
        """Refuse a cache whose vectors of the probe texts are another model's; store the probe's otherwise."""
        assert self._cache is not None
        keys = [text_key(t) for t in PROBE_TEXTS]
        cached = self._cache.get_many(keys)
        if cached:
            held = [cached.get(key, row) for key, row in zip(keys, probe, strict=True)]
            differs = compare_embedding_probes(
                {"texts": list(PROBE_TEXTS), "vectors": np.asarray(held).tolist()},
                {"texts": list(PROBE_TEXTS), "vectors": probe.tolist()},
            )
            if differs:
                raise DataError(
                    f"the model served as {self.settings.model!r} is not the one whose vectors are cached under that"
                    f" name ({differs}): delete the cache file or serve it under another name",
                    str(self._cache.path),
                )
        self._cache.put_many(dict(zip(keys, probe, strict=True)))

    def _request(self, texts: list[str]) -> np.ndarray:
        """One ``POST /embeddings`` of ``texts``: their L2-normalised float32 rows in order (checked, retried)."""
        width = self._dim or None
        numbers = len(texts) * (width or 8192)  # before the probe: room for any model's dimension
        cap = max(MIN_ANSWER_BYTES, 2 * BYTES_PER_NUMBER * numbers)
        body = {"model": self.settings.model, "input": texts, "encoding_format": self.encoding_format}

        def read(answer: Any) -> np.ndarray:
            if isinstance(answer, dict) and answer.get("model") not in (None, self.settings.model):
                raise InvalidAnswer(f"the answer is another model's, not {self.settings.model!r}'s")
            return read_embeddings(answer, len(texts), width, self.encoding_format)

        what = f"an embeddings request ({len(texts)} text(s)) failed"
        return l2_normalize(self.client.request("POST", "embeddings", body, what=what, read=read, cap=cap))

    def _encode_uncached(self, texts: list[str]) -> np.ndarray:
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(self.client.map(self._request, batches), axis=0)

    def close(self) -> None:
        """Close the HTTP client (its threads and connections)."""
        self.client.close()
