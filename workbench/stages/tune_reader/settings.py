"""The 'tune_reader' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import AssetError, ConfigError, DataError
from workbench.core.settings import RecipeView

SECTION = "tune_reader"
log = logging.getLogger(__name__)
_WARNED: set[str] = set()


@dataclass
class TuneReaderSection:
    """The 'tune_reader' stage: a LoRA adapter that teaches the answering model to answer from passages, trained on a
    training split's questions in each answer mode (peft + PyTorch Lightning; docs in
    workbench/stages/tune_reader/run.py, docs/task.md). Prompts are rendered exactly as the answer stage renders them
    (``answer.passage_chars``, ``answer.max_new_tokens``, ``retrieval.k``)."""

    split: str = doc("split the training questions come from (never one you evaluate on)", "train")
    per_template: int | None = doc("first N questions of each question template (null: all)", 400)
    modes: list[Literal["closed_book", "rag", "gold"]] = doc(
        "answer modes each question is trained in (one training row per question and mode)",
        ["closed_book", "rag", "gold"],
    )
    lora_r: int = doc("LoRA rank r", 8)
    lora_alpha: int = doc("LoRA alpha (the adapter's update is scaled by alpha / r)", 16)
    lora_dropout: float = doc("dropout on the LoRA input, in [0, 1)", 0.0)
    target_modules: list[str] = doc("modules LoRA wraps; absent names are an error", ["q_proj", "v_proj"])
    learning_rate: float = doc("AdamW learning rate (constant)", 0.0005)
    epochs: int = doc("training epochs", 1)
    batch_size: int = doc("rows per batch and device", 8)
    grad_accum: int = doc("batches per optimizer step", 1)
    precision: Literal["32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true"] = doc(
        "Lightning precision: 32-true on CPU, bf16-mixed on recent GPUs (16-*: GPUs only)", "32-true"
    )
    accelerator: Literal["auto", "cpu", "gpu"] = doc("where to train (auto: a GPU when torch sees one)", "auto")
    max_length: int = doc("tokens per training sequence (longer prompts lose their start)", 768)
    gradient_checkpointing: bool = doc(
        "recompute each layer's activations in the backward pass instead of keeping them (about a third of the "
        "training memory for ~25 % more time per step)",
        True,
    )
    checkpoint_every: int = doc(
        "optimizer steps between checkpoints (0: at epoch ends only); an interrupted run resumes from the newest",
        25,
        minimum=0,
    )
    eval_split: str | None = doc(
        "split base and tuned model are scored on after training, in every mode (null: no scoring)", "val"
    )
    eval_per_template: int | None = doc("first N questions of each template of eval_split (null: all)", 40)
    seed: int | None = doc(
        "training seed: adapter initialisation and row order (null: the recipe's seed)", None, minimum=0
    )


def check(config: RecipeView) -> None:
    """tune_reader's load check: :func:`validate_section` on its section (never scoring
    on its own training split). Whether an answer-reader adapter as ``generator.model`` suits the data is checked for
    every recipe (:func:`check_reader_adapter`, a generator check of the recipe)."""
    validate_section(config.tune_reader)


def validate_section(section: Any) -> None:
    """Check ``tune_reader``: the base and tuned model are never scored on the split they are trained on (``eval_split``
    differs from ``split``). Raises a one-line ConfigError."""
    if section.eval_split is not None and section.eval_split == section.split:
        raise ConfigError(
            f"base and tuned model must be scored on another split than the training one ({section.split!r})",
            f"{SECTION}.eval_split",
        )


def _adapter_chain(ref: str) -> list[tuple[str, dict[str, Any]]]:
    """``(label, payload)`` of the adapter ``ref`` names and of each adapter it was tuned from (its ``base_model``,
    when that is an adapter too), read as plain JSON (no tensors); an unreadable one ends the chain (loading it
    reports why)."""
    from workbench.assets import EMBEDDED_ADAPTERS, adapter_reference

    chain: list[tuple[str, dict[str, Any]]] = []
    seen: set[Path] = set()
    while len(chain) < 16:
        try:
            file = adapter_reference(ref)
        except AssetError:
            break
        if file is None or file.resolve() in seen:
            break
        seen.add(file.resolve())
        try:
            payload = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            break
        if not isinstance(payload, dict):
            break
        chain.append((ref if ref in EMBEDDED_ADAPTERS else str(file), payload))
        ref = str(payload.get("base_model", ""))
    return chain


def check_reader_adapter(config: Any) -> None:
    """Refuse (one-line ConfigError) a recipe that builds data and answers with an answer-reader adapter (format
    ``answer-reader-v1``: ``generator.model`` or an adapter it was tuned from) when its data configuration puts any of
    the adapter's training articles outside ``train`` — their questions would be scored with their gold options
    learned (:func:`workbench.data.article_splits.training_data_leak`). The error names the first data key that
    differs from the adapter's record (``seed``, ``data.fractions``, ``data.ood_topics``; else ``generator.model``)
    and the ways out. An adapter without a record (written before it existed) is a logged warning, once per adapter:
    nothing can be checked, so re-run ``tune_reader`` to get one that records its data."""
    if "build_data" not in config.stages:
        return  # no questions are built: nothing to leak
    from workbench.backends.lora import READER_FORMAT
    from workbench.data.article_splits import RECORD_KEY, training_data_leak

    for label, payload in _adapter_chain(str(config.generator.model)):
        if payload.get("format") != READER_FORMAT:
            continue
        record = payload.get(RECORD_KEY)
        if record is None:
            if label not in _WARNED:
                _WARNED.add(label)
                log.warning(
                    "the reader adapter %s records no training data (written before tune_reader recorded it): the "
                    "workbench cannot check that this data configuration keeps its training articles out of calib / "
                    "val / test; re-run tune_reader with this data configuration to get one that records them",
                    label,
                )
            continue
        data = config.data
        try:
            if not isinstance(record, dict):
                raise DataError(f"its {RECORD_KEY} is not a JSON object", RECORD_KEY)
            reason = training_data_leak(
                record, dataset=data.dataset, seed=config.seed, fractions=data.fractions, ood_topics=data.ood_topics
            )
        except (DataError, AssetError) as exc:  # a malformed record, or no summaries to rebuild its split from
            raise ConfigError(f"reader adapter {label}: {exc.what}", "generator.model") from None
        except ValueError as exc:  # fractions the split refuses (the numbers check names them first)
            raise ConfigError(str(exc).splitlines()[0], "data.fractions") from None
        if reason is None:
            continue
        trained_on = f"seed {record.get('seed')}, fractions {record.get('fractions')}"
        if "ood_topics" in record:
            trained_on += f", ood_topics {record.get('ood_topics')}"
        differs = [
            key
            for key, mine, theirs in (
                ("seed", config.seed, record.get("seed")),
                ("data.fractions", [float(f) for f in data.fractions], record.get("fractions")),
                ("data.ood_topics", sorted(data.ood_topics), record.get("ood_topics", sorted(data.ood_topics))),
            )
            if mine != theirs
        ]
        raise ConfigError(
            f"the reader adapter {label} was trained on the {record.get('split')}"
            f" {'articles' if 'ood_topics' in record else 'questions'} of {record.get('dataset')}"
            f" with {trained_on}, and {reason}: use that data configuration, generator.model="
            f"{payload.get('base_model')} (no adapter), or a reader tuned on this one (workbench run tune-reader with"
            " these data settings, then generator.model=<its tune_reader stage directory>)",
            differs[0] if differs else "generator.model",
        )
