"""``workbench serve-model``'s ``POST /v1/embeddings``: the request body, its checks and the answer
(docs/served-models.md).

Contract (as the other routes, :mod:`workbench.serve.openai_schema`):

* **types** are checked by pydantic (strict): a wrong type or a body that is not strict JSON is 422; unknown fields
  (``user``, engine extensions) are ignored;
* **values**: another ``model`` than the served embedder's is 404 ``model_not_found``; ``input`` a text or a
  non-empty list of texts, at most ``max_inputs`` of them (400); token-id inputs (400: send text, this server
  tokenises with the embedder's own tokenizer); a text holding a lone surrogate (400); ``encoding_format`` other than
  ``float`` / ``base64`` (400); ``dimensions`` other than the model's (400: the vectors are not truncated).
* **the answer**: ``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}], "model",
  "usage"}`` — the in-process embedder's L2-normalised rows, as JSON numbers or base64 of little-endian float32.

Imports pydantic and numpy only.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from workbench.serve.field_checks import has_lone_surrogate, shown_int
from workbench.serve.openai_schema import ApiError, check_model

ENCODING_FORMATS = ("float", "base64")
"""The ``encoding_format`` values the route answers."""


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings`` (OpenAI): ``model``, ``input`` (a text or texts; token ids are refused by value),
    ``encoding_format`` and ``dimensions``. Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: str | None = None
    dimensions: int | None = None


@dataclass(frozen=True)
class EmbeddingWork:
    """A checked embeddings request: its texts in order and how the vectors are written."""

    texts: list[str]
    encoding_format: str


def embedding_work(body: EmbeddingRequest, served: str, dim: int, max_inputs: int) -> EmbeddingWork:
    """The texts of ``body`` for the embedder served as ``served`` (``dim`` dimensions), or a 404 / 400
    :class:`~workbench.serve.openai_schema.ApiError` naming the field (see the module docstring)."""
    check_model(body.model, served)
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts:
        raise ApiError(400, "input must not be empty", "input")
    if not all(isinstance(t, str) for t in texts):
        raise ApiError(400, "input must be text (a string or a list of strings): token ids are not taken", "input")
    if len(texts) > max_inputs:
        raise ApiError(400, f"at most {max_inputs} inputs per request (--max-embed-inputs), got {len(texts)}", "input")
    for i, text in enumerate(texts):
        if has_lone_surrogate(text):  # type: ignore[arg-type]
            raise ApiError(400, f"input {i} must be Unicode text: a lone surrogate (U+D800..U+DFFF) is not", "input")
    encoding = body.encoding_format or "float"
    if encoding not in ENCODING_FORMATS:
        raise ApiError(400, f"encoding_format must be one of {', '.join(ENCODING_FORMATS)}", "encoding_format")
    if body.dimensions is not None and body.dimensions != dim:
        raise ApiError(
            400,
            f"dimensions must be this model's {dim} (vectors are not shortened), got {shown_int(body.dimensions)}",
            "dimensions",
        )
    return EmbeddingWork([str(t) for t in texts], encoding)


def embedding_answer(vectors: np.ndarray, work: EmbeddingWork, served: str, tokens: int) -> dict[str, Any]:
    """The OpenAI answer for ``vectors`` (one row per text of ``work``, in order); ``tokens`` the input tokens."""

    def written(row: np.ndarray) -> Any:
        if work.encoding_format == "base64":
            return base64.b64encode(np.ascontiguousarray(row, dtype="<f4").tobytes()).decode("ascii")
        return [float(x) for x in row]

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": written(row)} for i, row in enumerate(vectors)],
        "model": served,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def count_tokens(embedder: Any, texts: list[str]) -> int:
    """Input tokens of ``texts`` by the embedder's own tokenizer (truncated as it truncates); 0 without one."""
    model = getattr(embedder, "_model", None)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return 0
    limit = getattr(model, "max_seq_length", None)
    ids = tokenizer(texts, truncation=limit is not None, max_length=limit)["input_ids"]
    return sum(len(row) for row in ids)
