"""The peft side of a LoRA adapter directory: ``adapter_config.json`` + ``adapter_model.safetensors`` + a model card
(``README.md``), written next to the workbench's own ``adapter.json`` (:mod:`workbench.backends.lora`), so
``PeftModel.from_pretrained(base, <directory>)`` opens every adapter the workbench writes or ships.

**What is written** (:func:`write_peft_files`, from the adapter's payload and tensors alone — no model is loaded):

* ``adapter_config.json`` — peft's ``LoraConfig`` of the payload (:func:`lora_config`, the
  one the workbench merges with, so peft and the workbench build the same model) in peft's own JSON layout (sorted
  keys, indent 2; ``target_modules`` sorted, so the bytes are the same on every machine and every re-export), with
  ``inference_mode`` true and the base named portably (:func:`base_reference`): never a local or cache path.
* ``adapter_model.safetensors`` — the same tensors as ``adapter.safetensors`` (they are already named as peft's
  ``get_peft_model_state_dict`` names them), float32, metadata ``{"format": "pt"}``.
* ``README.md`` — the model card: what the adapter is (its format and decisions / answer modes), its base (reference,
  portable name, weights sha256, fingerprint) and how to check that sha256 (a digest over the weight files' digests,
  :func:`workbench.assets.weights_digest`, which ``sha256sum`` alone cannot give: the card lists each weight file's
  sha256 and the shell line that recomputes the whole), the LoRA settings, the training settings and data (a
  reader's ``training_data`` record: dataset, split, seed, fractions, articles' sha256), and how to open it with peft
  and with the workbench. It names no path of the machine that wrote it.

**The portable base name** (``base_model_name_or_path``): a hub id stays the hub id (``revision``: the cached
snapshot's commit when known); anything else is ``<kind>:<name>@sha256:<weights sha256>`` — ``workbench:<name>`` for
an embedded model or embedded adapter (``workbench:smollm2@sha256:...``), ``local:<directory name>`` for a local
model directory, ``adapter:<directory name>`` for a base that is itself an adapter (the digest of its merged model,
:func:`workbench.assets.weights_digest`). Peft reads the name only in ``AutoPeftModelForCausalLM``; load the base
yourself and pass it to ``PeftModel.from_pretrained`` (the model card shows how).

The workbench never reads these files: it reads ``adapter.json`` (sha256-checked, no code run).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.assets import (
    ADAPTER_SOURCE_FILE,
    EMBEDDED_ADAPTERS,
    EMBEDDED_GENERATORS,
    hub_snapshot,
    model_weights,
    weight_files,
)
from workbench.core.atomic import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:
    from workbench.assets import ResolvedModel

PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
MODEL_CARD_FILE = "README.md"
PEFT_FILES = (PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE, MODEL_CARD_FILE)
"""The files :func:`write_peft_files` writes next to ``adapter.json``."""

_WHAT = {
    "insemrag-controller-v1": (
        "InSemRAG controller (distilled LoRA adapter)",
        "a LoRA student of InSemRAG's controller, distilled by the workbench's `distill` stage from teacher traces "
        "(the `distill_data` stage): it makes the controller's decisions listed below with next-token reads and "
        "short generations",
    ),
    "answer-reader-v1": (
        "Answer reader (LoRA adapter)",
        "a LoRA reader for the answering model, trained by the workbench's `tune_reader` stage to reply with the "
        "short gold answer to questions rendered exactly as the answer stage renders them, in the answer modes "
        "listed below",
    ),
}


def base_reference(base_ref: str, base: ResolvedModel) -> dict[str, Any]:
    """How an adapter's base is named outside this machine (module doc): ``{"name", "revision", "kind", "ref",
    "weights_sha256", "check"}`` (``check``: what the sha256 was computed from, :func:`digest_inputs`). ``base_ref``:
    the reference the recipe gave; ``base``: it resolved (:func:`workbench.backends.lora.resolve_model`). ``name``
    never holds a local path."""

    weights = model_weights(base)
    digest = weights["weights_sha256"]
    check = digest_inputs(base) if digest else {}
    if base.source == "hub":
        return {
            "name": base_ref,
            "revision": weights["revision"],
            "kind": "hub",
            "ref": base_ref,
            "weights_sha256": digest,
            "check": check,
        }
    if base_ref in EMBEDDED_GENERATORS or base_ref in EMBEDDED_ADAPTERS:
        kind, label = "workbench", base_ref
    elif base.source == "adapter":
        ref_path = Path(base_ref).expanduser().resolve()
        kind, label = "adapter", (ref_path.parent.name if ref_path.suffix == ".json" else ref_path.name)
    else:
        kind, label = "local", Path(base_ref).expanduser().resolve().name or "model"
    name = f"{kind}:{label}" + (f"@sha256:{digest}" if digest else "")
    ref = base_ref if kind == "workbench" else label  # a local reference is a path of this machine: keep its name
    return {"name": name, "revision": None, "kind": kind, "ref": ref, "weights_sha256": digest, "check": check}


def digest_inputs(base: ResolvedModel) -> dict[str, Any]:
    """What the base's weights sha256 (:func:`workbench.assets.weights_digest`) is computed from, for the card:
    ``{"files": [[name, sha256], ...]}`` (its weight files, in order: :func:`workbench.assets.weight_files`), or for
    a merged adapter ``{"merged_from": <the text of its ADAPTER_SOURCE_FILE>}``; {} when its files are not here."""

    if base.source == "hub":
        snapshot = hub_snapshot(base.path)
        if snapshot is None:
            return {}
        root = Path(snapshot[1])
    else:
        root = Path(base.path)
    merged = root / ADAPTER_SOURCE_FILE
    if root.is_dir() and merged.is_file():
        return {"merged_from": merged.read_bytes().decode("utf-8")}
    files = weight_files(root)
    return {"files": [[name, digest] for name, digest in files]} if files else {}


def lora_config(payload: Mapping[str, Any]) -> Any:
    """The peft ``LoraConfig`` of an adapter payload (causal-LM task, no bias)."""
    from peft import LoraConfig

    return LoraConfig(
        r=int(payload["r"]),
        lora_alpha=float(payload["alpha"]),
        lora_dropout=float(payload["dropout"]),
        target_modules=list(payload["target_modules"]),
        bias="none",
        task_type="CAUSAL_LM",
    )


def peft_config_document(payload: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """The ``adapter_config.json`` document of an adapter payload whose base is ``base`` (:func:`base_reference`)."""
    config = lora_config(payload)
    config.base_model_name_or_path = str(base["name"])
    config.revision = base.get("revision")
    config.inference_mode = True
    document = config.to_dict()
    for key, value in document.items():
        if isinstance(value, (set, frozenset)):  # peft keeps target_modules as a set: sort it for stable bytes
            document[key] = sorted(value)
    return document


def write_peft_files(
    out_dir: str | Path, payload: Mapping[str, Any], tensors: Mapping[str, Any], base: Mapping[str, Any]
) -> list[Path]:
    """Write :data:`PEFT_FILES` for the adapter ``(payload, tensors)`` (read or about to be written as
    ``adapter.json``) into ``out_dir``, atomically, byte-identical for identical inputs; ``base``:
    :func:`base_reference` of its base. Returns the written paths."""
    import numpy as np
    from safetensors.numpy import save

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = peft_config_document(payload, base)
    text = json.dumps(document, indent=2, sort_keys=True, default=str)
    blob = save(
        {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sorted(tensors.items())}, metadata={"format": "pt"}
    )
    return [
        atomic_write_bytes(out_dir / PEFT_WEIGHTS_FILE, blob),
        atomic_write_text(out_dir / PEFT_CONFIG_FILE, text),
        atomic_write_text(out_dir / MODEL_CARD_FILE, model_card(payload, base)),
    ]


def read_base_reference(adapter_dir: str | Path) -> dict[str, Any] | None:
    """The base named in ``adapter_dir``'s ``adapter_config.json`` (``{"name", "revision"}``), or None when the
    directory has none (an adapter written before the peft files were)."""
    path = Path(adapter_dir) / PEFT_CONFIG_FILE
    if not path.is_file():
        return None
    document = json.loads(path.read_text(encoding="utf-8"))
    return {"name": document.get("base_model_name_or_path"), "revision": document.get("revision")}


def model_card(payload: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """The adapter's model card (Markdown with peft's YAML header; module doc)."""
    title, what = _WHAT.get(str(payload.get("format")), ("LoRA adapter", "a LoRA adapter written by the workbench"))
    reader = payload.get("format") == "answer-reader-v1"
    decisions = ", ".join(f"`{d}`" for d in payload.get("decisions", []))
    header = ["---", "library_name: peft"]
    if base.get("kind") == "hub":
        header.append(f"base_model: {base['name']}")
    header += ["tags:", "- lora", "- workbench", f"- {payload.get('format')}", "---", ""]
    lines = [
        *header,
        f"# {title}",
        "",
        f"This directory is {what}. It was written by the `workbench` package (uncertainty-aware adaptive RAG).",
        "",
        f"* **{'Answer modes' if reader else 'Decisions'}:** {decisions}",
        f"* **Format:** `{payload.get('format')}` (workbench `adapter.json`, version {payload.get('version')})",
        "",
        "## Base model",
        "",
        "| | |",
        "|---|---|",
        f"| reference in the recipe | `{base.get('ref')}` |",
        f"| `base_model_name_or_path` | `{base['name']}` |",
        f"| weights sha256 | `{base.get('weights_sha256')}` |",
        f"| workbench fingerprint | `{payload.get('base_fingerprint')}` |",
    ]
    if base.get("revision"):
        lines.append(f"| hub revision | `{base['revision']}` |")
    lines += ["", _base_note(base), "", *_digest_check(base)]
    lines += [
        "## LoRA",
        "",
        f"r = {payload.get('r')}, alpha = {payload.get('alpha')}, dropout = {payload.get('dropout')}, target modules "
        f"{', '.join(f'`{m}`' for m in payload.get('target_modules', []))}; no bias; task `CAUSAL_LM`.",
        "",
        "## Training",
        "",
    ]
    training = payload.get("training") or {}
    lines += [f"* `{key}`: `{json.dumps(value)}`" for key, value in sorted(training.items())] or ["* (not recorded)"]
    lines += ["", "### Training data", ""]
    lines += _data_lines(payload, reader)
    lines += ["", *_how_to_open(base), ""]
    lines += [
        "## Files",
        "",
        "| file | what |",
        "|---|---|",
        "| `adapter.json` + `adapter.safetensors` | the workbench's adapter: LoRA settings, base, training record; the "
        "JSON records the tensors' sha256. The workbench reads only these |",
        "| `adapter_config.json` + `adapter_model.safetensors` | the same adapter for peft (the same tensors) |",
        "| `README.md` | this card |",
        "",
    ]
    return "\n".join(lines)


def _base_note(base: Mapping[str, Any]) -> str:
    kind = base.get("kind")
    if kind == "hub":
        return (
            "The base is a Hugging Face Hub model: `AutoPeftModelForCausalLM.from_pretrained(<this directory>)` "
            "loads it and the adapter."
        )
    if kind == "workbench":
        return (
            f"The base is the workbench's embedded `{base.get('ref')}`, not a hub id: the workbench converts the "
            "quantised GGUF its package ships once into a plain model directory, whose weights differ from any hub "
            "checkpoint. Get that directory from the workbench (below); its weight files give the sha256 above "
            "(how: next section)."
        )
    if kind == "adapter":
        return (
            f"The base is itself a workbench adapter (`{base.get('ref')}`): load it merged (below); the sha256 is the "
            "digest the workbench gives that merged model."
        )
    return (
        f"The base was a local model directory named `{base.get('ref')}`; the sha256 is over its weight files "
        "(`workbench.assets.weights_digest`; how: next section)."
    )


def _digest_check(base: Mapping[str, Any]) -> list[str]:
    """The card's section saying how to check the base's sha256 by hand ([] when nothing was recorded)."""
    digest, check = base.get("weights_sha256"), base.get("check") or {}
    if not digest or not check:
        return []
    lines = ["## Checking the base's sha256", ""]
    if "merged_from" in check:
        text = str(check["merged_from"])
        lines += [
            "The base is a merged adapter: its sha256 is not over weight files (merged floats may differ in their "
            "last bits between machines) but over what it was merged from — the sha256 of the bytes "
            "`merged-adapter`, a NUL byte, then the merged model's `workbench_adapter_source.json`, which holds the "
            "base adapter's and its own base's digests:",
            "",
            "```json",
            text,
            "```",
        ]
        if "'" not in text and "\n" not in text:
            lines += [
                "",
                "This prints the sha256 above:",
                "",
                "```bash",
                f"printf 'merged-adapter\\0%s' '{text}' | sha256sum",
                "```",
            ]
        return [*lines, ""]
    files = [(str(name), str(sha)) for name, sha in check["files"]]
    ref, revision = base.get("ref"), base.get("revision")
    where = {
        "hub": f'the snapshot `huggingface_hub.snapshot_download("{ref}", revision="{revision}")` returns',
        "workbench": f'the directory `resolve_model("{ref}").path` returns: below',
    }.get(str(base.get("kind")), f"the `{ref}` directory")
    lines += [
        "The sha256 above is not the sha256 of one file, so `sha256sum` alone does not give it: it is the sha256 of "
        "one line per weight file, in this order — the file's path relative to the model directory, a NUL byte, the "
        "file's own sha256 in hex, a newline (`workbench.assets.weights_digest`). Each file's sha256, which "
        "`sha256sum <file>` prints:",
        "",
        "| file | sha256 |",
        "|---|---|",
        *(f"| `{name}` | `{sha}` |" for name, sha in files),
    ]
    if not any("'" in name for name, _ in files):
        names = " ".join(f"'{name}'" for name, _ in files)
        lines += [
            "",
            f"Run in the base's model directory ({where}), this prints the sha256 above:",
            "",
            "```bash",
            f'for f in {names}; do printf \'%s\\0%s\\n\' "$f" "$(sha256sum "$f" | cut -d\' \' -f1)"; done | sha256sum',
            "```",
        ]
    return [*lines, ""]


def _data_lines(payload: Mapping[str, Any], reader: bool) -> list[str]:
    record = payload.get("training_data")
    if isinstance(record, Mapping):
        topics = f", OOD topics {record.get('ood_topics')}" if "ood_topics" in record else ""
        lines = [
            f"The `{record.get('split')}` split of `{record.get('dataset')}` (seed {record.get('seed')}, fractions "
            f"{record.get('fractions')}{topics}).",
            "",
        ]
        lines += [f"* `{key}`: `{json.dumps(value)}`" for key, value in sorted(record.items())]
        lines.append(
            "\nThe workbench refuses to answer with this reader on a data configuration that puts these articles "
            "outside `train` (`workbench.stages.tune_reader.check_reader_adapter`)."
        )
        return lines
    if reader:
        split = (payload.get("training") or {}).get("split", "train")
        return [f"Questions of the `{split}` split (this adapter predates the workbench's training-data record)."]
    sources = (payload.get("training") or {}).get("sources")
    return [
        "The `train` split of the `distill_data` stage's controller traces"
        + (f", sources {', '.join(f'`{s}`' for s in sources)}" if sources else "")
        + " (its held-out split scores the student; see the run's `heldout.json`)."
    ]


def _how_to_open(base: Mapping[str, Any]) -> list[str]:
    kind, ref = base.get("kind"), base.get("ref")
    if kind == "hub":
        load_base = f'base = AutoModelForCausalLM.from_pretrained("{ref}", dtype=torch.float32)'
        if base.get("revision"):
            load_base = load_base[:-1] + f', revision="{base["revision"]}")'
        prelude: list[str] = []
    elif kind in ("workbench", "adapter"):
        where = f'"{ref}"' if kind == "workbench" else '"<the base adapter directory>"'
        prelude = [
            "from workbench.backends.lora import resolve_model",
            "",
            f"base_dir = resolve_model({where}).path  # the base as a plain model directory (converted / merged once)",
        ]
        load_base = "base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)"
    else:
        prelude = []
        load_base = f'base = AutoModelForCausalLM.from_pretrained("<the {ref} directory>", dtype=torch.float32)'
    return [
        "## How to open it",
        "",
        "With peft (the workbench's tests check these logits against the workbench's merged model, within 1e-4):",
        "",
        "```python",
        "import torch",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM",
        *prelude,
        "",
        load_base,
        'model = PeftModel.from_pretrained(base, "<this directory>")  # .merge_and_unload() for a plain model',
        "```",
        "",
        "With the workbench: any generator reference takes this directory or its `adapter.json` "
        "(`generator.model=<this directory>`, `distill.base_model`, InSemRAG's `controller_model`), and "
        '`workbench.backends.lora.resolve_model("<this directory>")` returns the merged model (built once in the '
        "workbench cache, after checking the base's fingerprint). In a bundle the runtime reads `adapter.json` "
        "itself; these files are listed and sha256-checked in the manifest like every other file.",
    ]
