"""What a caller may change when loading a bundle (``load_bundle(path, overrides={...})``), validated like a recipe.

Every key is optional; an unknown key or a wrong type is a one-line ConfigError naming it. Two groups:

* **Deployment** settings that do not change a decision: ``device``, ``dtype``, ``batch_size``, ``classifier``
  (``numpy`` or ``onnx``: the same numbers), ``generation_cache``, where archives are unpacked and how large they may
  be.
* **Departures from the bundle**, each refused unless asked for on purpose, and then written into every trace:
  ``generator`` / ``embedder`` (another model; its weights must match the manifest's digest unless
  ``allow_model_mismatch``), ``corpus`` (another passage file), an external retriever's index that differs from the
  bundle's fingerprint (``allow_retriever_mismatch``; ``retriever_uri`` reaches the engine at another address),
  ``methods`` (per-method option overrides, checked like ``evaluate.options``).

``on_ood`` says what an out-of-distribution flag does (docs/ood.md): ``flag`` reports it in every answer's ``ood``,
``retrieve`` also makes D²-RAG retrieve for a flagged question, ``refuse`` returns no answer for it (text ``""``,
``ood.action`` ``"refused"``, a note saying why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workbench.bundle.archive import MAX_COMPRESSION_RATIO, MAX_UNPACKED_BYTES
from workbench.bundle.schema import MAX_ARCHIVE_BYTES
from workbench.core.config import LocatedYAML, build_dataclass, doc
from workbench.core.errors import ConfigError


@dataclass
class RuntimeOptions:
    """Overrides accepted by :func:`workbench.runtime.load_bundle` (see the module docstring)."""

    device: str = doc("torch device for every model: cpu, cuda, cuda:N or auto", "cpu")
    dtype: Literal["float32", "bfloat16", "float16"] | None = doc("generator dtype (null: the bundle's)", None)
    batch_size: int | None = doc("prompts per forward batch (null: the bundle's)", None)
    classifier: Literal["numpy", "onnx"] = doc("run the decision classifier in numpy or with ONNX Runtime", "numpy")
    on_ood: Literal["flag", "retrieve", "refuse"] = doc(
        "what an out-of-distribution flag does: flag (only report it), retrieve (D²-RAG retrieves), refuse (no answer)",
        "flag",
    )
    generation_cache: bool = doc("reuse generations from the on-disk generation cache", False)
    generator: str | None = doc("another generator (embedded name, path or hub id); see allow_model_mismatch", None)
    embedder: str | None = doc("another embedder; see allow_model_mismatch", None)
    base_url: str | None = doc(
        "answer with a model served at this OpenAI-compatible URL (ending in /v1) instead of loading it; its probe"
        " answers must match the bundle's (see allow_model_mismatch). Needed for a bundle made on a served model",
        None,
    )
    served_model: str | None = doc("the served model's name at base_url (null: the bundle's generator name)", None)
    api_key_env: str | None = doc("the NAME of the environment variable holding base_url's API key", None)
    tokenizer: str | None = doc(
        "the served model's tokenizer (null: the bundle's generator reference, or the server's chat template)", None
    )
    allow_model_mismatch: bool = doc(
        "accept models whose weights differ from the manifest's sha256 (every trace then says so)", False
    )
    corpus: str | None = doc(
        "a .jsonl/.json/.parquet passage file (doc_id, title, text, or the columns the bundle's corpus.fields names)"
        " instead of the bundle's",
        None,
    )
    allow_corpus_mismatch: bool = doc("accept a corpus whose fingerprint differs from the manifest's", False)
    retriever_uri: str | None = doc(
        "a bundle on an external retriever: another address of its engine (e.g. as seen from this host; the"
        " credential still comes from the bundle's credentials_env); the index there must match the bundle's"
        " fingerprint (see allow_retriever_mismatch)",
        None,
    )
    allow_retriever_mismatch: bool = doc(
        "accept an external retriever whose index differs from the bundle's fingerprint (every trace then says so)",
        False,
    )
    methods: dict[str, dict] = doc("per-method option overrides, e.g. {dtr: {tau: 1.2}}", {})
    max_archive_bytes: int = doc("largest archive accepted, in bytes on disk", MAX_ARCHIVE_BYTES)
    max_unpacked_bytes: int = doc("most bytes an archive may decompress to, tar headers included", MAX_UNPACKED_BYTES)
    max_compression_ratio: float = doc(
        "most decompressed bytes per compressed byte (checked past 4 MiB: refuses compression bombs early)",
        MAX_COMPRESSION_RATIO,
    )
    extract_dir: str | None = doc("where archives are unpacked (null: the workbench cache)", None)


def runtime_options(overrides: dict[str, Any] | RuntimeOptions | None) -> RuntimeOptions:
    """Validated :class:`RuntimeOptions` from a mapping (or the options themselves); ConfigError on bad keys."""
    if isinstance(overrides, RuntimeOptions):
        return overrides
    if overrides is None:
        return RuntimeOptions()
    if not isinstance(overrides, dict):
        raise ConfigError(f"overrides must be a mapping, got {type(overrides).__name__}", "overrides")
    options = build_dataclass(RuntimeOptions, overrides, LocatedYAML(overrides, {}, "overrides"))
    if options.batch_size is not None and options.batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {options.batch_size}", "overrides.batch_size")
    for name in ("max_archive_bytes", "max_unpacked_bytes", "max_compression_ratio"):
        if not getattr(options, name) >= 1:
            raise ConfigError(f"{name} must be >= 1", f"overrides.{name}")
    return options
