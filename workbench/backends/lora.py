"""LoRA adapters (a distilled controller, a tuned reader): the artifact on disk, and loading it as a plain causal-LM
directory.

**The artifact** (written by the ``distill`` stage — copied into bundles by the export — and by the ``tune_reader``
stage, with format ``answer-reader-v1`` and decisions = the answer modes it trained on):

* ``adapter.json`` + ``adapter.safetensors`` — one learned artifact (:mod:`workbench.core.artifact_io`), payload
  ``{"kind": "lora_adapter", "version": 1, "format": "insemrag-controller-v1", "base_model": <the model reference
  as the recipe gave it>, "base_fingerprint": <its ResolvedModel.fingerprint>, "r", "alpha", "dropout",
  "target_modules": [...], "decisions": [...], "training": {...}}``, and for a reader adapter written by
  ``tune_reader`` ``"training_data"``: the data configuration and the articles it was trained on
  (:func:`workbench.data.article_splits.training_data_record`; a recipe that would put them outside ``train`` is
  refused at load, :func:`workbench.stages.tune_reader.check_reader_adapter`); tensors: the LoRA weights, named as
  peft's ``get_peft_model_state_dict`` names them (``...q_proj.lora_A.weight``), float32.
* ``adapter_config.json`` + ``adapter_model.safetensors`` + ``README.md`` in the same directory — the same weights
  as a standard peft adapter directory, its base named portably (never a path of this machine) and a model card
  (:mod:`workbench.backends.peft_dir`), so ``PeftModel.from_pretrained(base, <directory>)`` opens it. The workbench
  never reads them. (Adapters written before them had a ``peft_adapter/`` sub-directory saved by peft, whose base
  was a cache path.)

**Loading** (:func:`resolve_adapter_model`): only the JSON and the safetensors file are read (sha256-checked, no
pickle, no code). The base is resolved with :func:`resolve_model` and must still have the
fingerprint it had when the adapter was trained; the LoRA weights are applied with peft and merged
(``merge_and_unload``), and the merged model is saved once under the workbench cache (``adapters/merged-<key>``,
key = the adapter's identity (:func:`adapter_identity`) + the base fingerprint; written atomically under a file
lock), so every later load is a plain ``from_pretrained`` of that directory. The returned
:class:`~workbench.assets.ResolvedModel` has its own fingerprint (base + adapter), so generation caches never mix the
student with its base.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.assets import ADAPTER_SOURCE_FILE as MERGED_SOURCE_FILE
from workbench.assets import EMBEDDED_ADAPTERS, ResolvedModel, adapter_reference, model_weights, resolve_generator
from workbench.backends.peft_dir import (
    PEFT_FILES,
    base_reference,
    lora_config,  # peft's LoraConfig of a payload (lives with the peft files)
    write_peft_files,
)
from workbench.core.artifact_io import read_artifact, write_artifact
from workbench.core.atomic import atomic_directory
from workbench.core.errors import AssetError, DataError
from workbench.core.hashing import stable_hash
from workbench.core.paths import cache_dir

if TYPE_CHECKING:
    from workbench.assets import ResolvedModel

log = logging.getLogger(__name__)

ADAPTER_KIND = "lora_adapter"
ADAPTER_VERSION = 1
ADAPTER_FORMAT = "insemrag-controller-v1"
READER_FORMAT = "answer-reader-v1"
"""The format of a reader adapter (the ``tune_reader`` stage): the answering model tuned to answer from passages."""
ADAPTER_FORMATS = (ADAPTER_FORMAT, READER_FORMAT)
ADAPTER_FILE = "adapter.json"
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")
"""The LoRA settings every adapter records (peft's ``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``)."""
_MERGE_VERSION = 2  # 2: the merged directory records its source digests
_REQUIRED = ("base_model", "base_fingerprint", *LORA_KEYS, "decisions", "format")


def lora_state_dict(peft_model: Any) -> dict[str, Any]:
    """The LoRA weights of ``peft_model`` as ``{peft name: float32 numpy array}`` (peft's
    ``get_peft_model_state_dict`` names). Parameters partitioned by DeepSpeed ZeRO-3 are gathered first."""
    import torch
    from peft import get_peft_model_state_dict

    partitioned = [p for p in peft_model.parameters() if hasattr(p, "ds_id")]
    if partitioned:  # ZeRO-3 keeps each rank's shard only: gather the full tensors while reading them
        import deepspeed

        with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
            state = get_peft_model_state_dict(peft_model)
            return {k: v.detach().to(torch.float32).cpu().numpy().copy() for k, v in state.items()}
    state = get_peft_model_state_dict(peft_model)
    return {k: v.detach().to(torch.float32).cpu().numpy().copy() for k, v in state.items()}


def save_lora_adapter(
    peft_model: Any,
    out_dir: str | Path,
    *,
    base_model: str,
    base_fingerprint: str,
    settings: Mapping[str, Any],
    decisions: Sequence[str],
    state: Mapping[str, Any] | None = None,
    adapter_format: str = ADAPTER_FORMAT,
    training_data: Mapping[str, Any] | None = None,
    base: ResolvedModel | None = None,
) -> list[Path]:
    """Write ``peft_model``'s LoRA adapter to ``out_dir``: ``adapter.json`` + ``adapter.safetensors`` (module doc)
    and next to them the peft files (:func:`workbench.backends.peft_dir.write_peft_files`). Returns the written
    paths (``adapter.json`` last).

    ``base_model``: the base model reference as the recipe gave it; ``base_fingerprint``: its
    ``ResolvedModel.fingerprint``; ``settings``: ``r``, ``alpha``, ``dropout``, ``target_modules`` (required) and
    any training settings (stored under ``training``); ``decisions``: the controller decisions the student learnt.
    ``state`` (optional): the model's LoRA weights already read (:func:`lora_state_dict`), else they are read from
    it. ``adapter_format``: one of :data:`ADAPTER_FORMATS`. ``training_data`` (optional): the record of the data it
    was trained on, stored under ``training_data`` (module doc). ``base`` (optional): ``base_model`` already resolved
    (else it is resolved here), to name it portably in ``adapter_config.json``. ValueError when a LoRA setting is
    missing, the format is unknown or the model holds no LoRA weights.
    """

    if adapter_format not in ADAPTER_FORMATS:
        raise ValueError(f"unknown adapter format {adapter_format!r} (one of {ADAPTER_FORMATS})")
    missing = [k for k in LORA_KEYS if k not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")
    tensors = dict(state) if state is not None else lora_state_dict(peft_model)
    if not tensors:
        raise ValueError("the model holds no LoRA weights (is it a peft model with a LoRA adapter?)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "kind": ADAPTER_KIND,
        "version": ADAPTER_VERSION,
        "format": adapter_format,
        "base_model": str(base_model),
        "base_fingerprint": str(base_fingerprint),
        "r": int(settings["r"]),
        "alpha": float(settings["alpha"]),
        "dropout": float(settings["dropout"]),
        "target_modules": [str(m) for m in settings["target_modules"]],
        "decisions": [str(d) for d in decisions],
        "training": {str(k): v for k, v in sorted(settings.items()) if k not in LORA_KEYS},
    }
    if training_data is not None:
        payload["training_data"] = dict(training_data)
    base = base if base is not None else resolve_model(str(base_model))
    peft_files = write_peft_files(out_dir, payload, tensors, base_reference(str(base_model), base))
    return [*peft_files, *write_artifact(out_dir / ADAPTER_FILE, payload, tensors)]


def copy_adapter(source: str | Path, target_dir: str | Path) -> list[Path]:
    """Copy the adapter at ``source`` (an ``adapter.json`` or its directory) into ``target_dir`` (the export's
    ``learned/``): ``adapter.json`` + ``adapter.safetensors`` re-written from the checked artifact, and the peft files
    (:data:`workbench.backends.peft_dir.PEFT_FILES`) copied byte for byte — or, for an adapter written before them,
    written (its base resolved here to name it; when the base cannot be resolved or the payload lacks a LoRA key, a
    warning and no peft files). Returns the written paths (``adapter.json`` last)."""

    file = adapter_path(source)
    payload, tensors = read_artifact(file)
    target_dir = Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    if all((file.parent / name).is_file() for name in PEFT_FILES):
        written = [Path(shutil.copyfile(file.parent / name, target_dir / name)) for name in PEFT_FILES]
    elif all(key in payload for key in _REQUIRED):
        try:
            base_ref = str(payload["base_model"])
            written = write_peft_files(target_dir, payload, tensors, base_reference(base_ref, resolve_model(base_ref)))
        except AssetError as exc:
            log.warning("the adapter %s is copied without its peft files: %s", file, exc)
            written = []
    else:
        log.warning(
            "the adapter %s lacks %s: copied without peft files", file, [k for k in _REQUIRED if k not in payload]
        )
        written = []
    return [*written, *write_artifact(target_dir / ADAPTER_FILE, payload, tensors)]


def adapter_path(path: str | Path) -> Path:
    """The ``adapter.json`` of ``path`` (the file itself, or a directory holding one); AssetError when absent."""
    path = Path(path).expanduser()
    candidate = path / ADAPTER_FILE if path.is_dir() else path
    if not candidate.is_file():
        raise AssetError(
            f"no LoRA adapter here (expected {ADAPTER_FILE} from the distill or tune_reader stage)", str(path)
        )
    return candidate


def read_adapter(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(payload, tensors)`` of an adapter (module doc), checked: DataError when the file is tampered with (sha256
    mismatch), is not a ``lora_adapter`` of this version and format, lacks a key, or holds no tensors."""

    file = adapter_path(path)
    where = str(file)
    payload, tensors = read_artifact(file)
    if payload.get("kind") != ADAPTER_KIND:
        raise DataError(f"not a LoRA adapter (kind {payload.get('kind')!r}, expected {ADAPTER_KIND!r})", where)
    if payload.get("version") != ADAPTER_VERSION:
        raise DataError(f"unsupported adapter version {payload.get('version')!r} (reads {ADAPTER_VERSION})", where)
    missing = [k for k in _REQUIRED if k not in payload]
    if missing:
        raise DataError(f"the adapter lacks {missing}", where)
    if payload["format"] not in ADAPTER_FORMATS:
        raise DataError(f"unknown adapter format {payload['format']!r} (reads {', '.join(ADAPTER_FORMATS)})", where)
    modules = payload["target_modules"]
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
        raise DataError("target_modules must be a non-empty list of module names", where)
    if not tensors:
        raise DataError("the adapter has no tensor file (adapter.safetensors)", where)
    return payload, tensors


def resolve_model(ref: str) -> ResolvedModel:
    """Resolve any generator reference: a LoRA adapter — an embedded adapter name
    (:data:`workbench.assets.EMBEDDED_ADAPTERS`, source ``embedded:<name>``), an ``adapter.json`` or a directory
    holding one (source ``adapter``) — to its merged model (:func:`resolve_adapter_model`), anything else with
    :func:`workbench.assets.resolve_generator`. What every consumer of ``generator.model`` calls."""

    adapter = adapter_reference(str(ref))
    if adapter is None:
        return resolve_generator(str(ref))
    merged = resolve_adapter_model(adapter)
    source = f"embedded:{ref}" if ref in EMBEDDED_ADAPTERS else "adapter"
    return ResolvedModel(str(ref), merged.path, merged.fingerprint, source)


def resolve_adapter_model(path: str | Path) -> ResolvedModel:
    """The merged base + LoRA model of the adapter at ``path`` (an ``adapter.json`` or its directory), as a
    :class:`~workbench.assets.ResolvedModel` whose ``path`` is a plain model directory in the workbench cache.

    AssetError: no adapter at ``path``, the base cannot be resolved, or the base's fingerprint differs from the one
    the adapter was trained on. DataError: the adapter is tampered with or malformed, or its tensor names / shapes do
    not match the LoRA layers peft builds on the base. The merged model is built once per (adapter, base) and reused.
    """
    from filelock import FileLock

    file = adapter_path(path)
    payload, tensors = read_adapter(file)
    base_ref = str(payload["base_model"])
    try:
        base = resolve_model(base_ref)  # a base may itself be an adapter (a reader tuned further)
    except AssetError as exc:
        raise AssetError(f"cannot resolve the adapter's base model {base_ref!r}: {exc}", str(file)) from None
    if base.fingerprint != payload["base_fingerprint"]:
        raise AssetError(
            f"the base model {base_ref!r} has fingerprint {base.fingerprint}, but the adapter was trained on "
            f"{payload['base_fingerprint']} (different weights): retrain the adapter or restore that base",
            str(file),
        )
    adapter_sha = adapter_identity(file)  # the JSON records the safetensors' sha256
    key = stable_hash([adapter_sha, base.fingerprint, _MERGE_VERSION])
    target = cache_dir("adapters") / f"merged-{key}"
    if not (target / "config.json").is_file():
        with FileLock(str(target) + ".lock"):
            if not (target / "config.json").is_file():  # another process may have merged it while we waited
                source = {"adapter_sha256": adapter_sha, "base_weights_sha256": _base_digest(base)}
                _merge(base.path, payload, tensors, target, str(file), source)
    return ResolvedModel(
        ref=str(file),
        path=str(target),
        fingerprint=stable_hash(["lora", base.fingerprint, adapter_sha]),
        source="adapter",
    )


def adapter_identity(file: Path) -> str:
    """The sha256 that identifies an adapter file (its merged copy's cache key and its fingerprint): of its JSON as
    the workbench writes it, without the ``training_data`` record — provenance, not weights — so adding the record to
    an adapter written before it existed (the embedded reader's) changes neither its fingerprint nor any cache. Call
    it on a file :func:`read_adapter` has checked."""
    document = {key: value for key, value in json.loads(file.read_bytes()).items() if key != "training_data"}
    text = json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _base_digest(base: ResolvedModel) -> str | None:
    """The weights digest of an adapter's base (:func:`workbench.assets.model_weights`)."""

    return model_weights(base)["weights_sha256"]


def _merge(
    base_path: str,
    payload: Mapping[str, Any],
    tensors: Mapping[str, Any],
    target: Path,
    where: str,
    source: Mapping[str, Any],
) -> None:
    """Apply ``tensors`` over the base at ``base_path`` with peft, merge, and save the result to ``target``
    (atomically), with :data:`MERGED_SOURCE_FILE` recording ``source`` (the adapter's and the base's digests).
    DataError when the tensors do not match the LoRA layers of the base."""
    import torch
    from peft import get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("merging the LoRA adapter %s into its base (once)", where)
    try:
        tokenizer = AutoTokenizer.from_pretrained(base_path)
        model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AssetError(f"cannot load the adapter's base model: {first}", base_path) from None
    try:
        peft_model = get_peft_model(model, lora_config(payload))
    except ValueError as exc:  # peft: target modules not found in the base
        raise DataError(f"the adapter's target_modules do not fit the base model ({exc})", where) from None
    expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(peft_model).items()}
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if expected != got:
        missing = sorted(set(expected) - set(got))
        unexpected = sorted(set(got) - set(expected))
        wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
        detail = "; ".join(
            f"{what}: {names[:3]}{' ...' if len(names) > 3 else ''}"
            for what, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
            if names
        )
        raise DataError(f"the adapter's tensors do not match the LoRA layers of its base model ({detail})", where)
    set_peft_model_state_dict(peft_model, {k: torch.from_numpy(v.copy()) for k, v in tensors.items()})
    merged = peft_model.merge_and_unload()
    with atomic_directory(target) as tmp:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (Path(tmp) / MERGED_SOURCE_FILE).write_text(json.dumps(dict(source), sort_keys=True), encoding="utf-8")
