"""Train the workbench's MiniLM NLI cross-encoder, and measure any NLI judge on labelled pairs.

:func:`train_cross_encoder` puts a new 3-way classification head on a sentence encoder (the embedded
all-MiniLM-L6-v2 by default) and fine-tunes the whole model with a plain torch loop (AdamW, linear warm-up and
decay). The result is written atomically as a directory :class:`~workbench.backends.nli.CrossEncoderNLI` loads:
``model.safetensors``, ``config.json`` (labels contradiction / neutral / entailment), the tokenizer files and
``workbench_nli.json`` (training settings and validation metrics). The defaults (2,400 training pairs, 1 epoch,
128 tokens) train in a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from workbench.assets import resolve_embedder
from workbench.backends.nli import CROSS_ENCODER_MARKER, NLI_LABELS, CrossEncoderNLI, NLIJudge, with_question
from workbench.core.atomic import atomic_directory, atomic_write_json
from workbench.core.errors import ConfigError, DataError
from workbench.core.logs import progress as show_progress

log = logging.getLogger(__name__)


class LabelledPair(Protocol):
    """What training and evaluation read from a pair (``NLIPair`` and ``AnswerPair`` both qualify)."""

    @property
    def premise(self) -> str: ...

    @property
    def hypothesis(self) -> str: ...

    @property
    def label(self) -> int: ...


def _question(pair: Any) -> str:
    return str(getattr(pair, "question", "") or "")


def evaluate_judge(judge: NLIJudge, pairs: Sequence[LabelledPair]) -> dict[str, Any]:
    """Accuracy of ``judge`` on labelled ``pairs`` (argmax of its probabilities), per-class recall (for the labels
    present), the 3×3 confusion matrix (rows = gold, columns = predicted, label order contradiction / neutral /
    entailment), and throughput ``pairs_per_s`` (unique pairs computed per second of judging)."""
    if not pairs:
        raise DataError("no pairs to evaluate", "evaluate_judge")
    gold = np.array([int(p.label) for p in pairs])
    if ((gold < 0) | (gold > 2)).any():
        raise DataError("labels must be 0, 1 or 2", "evaluate_judge")
    before = judge.counter.nli_pairs
    start = time.perf_counter()
    probs = judge.entail([p.premise for p in pairs], [p.hypothesis for p in pairs], [_question(p) for p in pairs])
    elapsed = max(time.perf_counter() - start, 1e-9)
    predicted = probs.argmax(axis=1)
    confusion = np.zeros((3, 3), dtype=int)
    np.add.at(confusion, (gold, predicted), 1)
    recall = {NLI_LABELS[c]: float(confusion[c, c] / confusion[c].sum()) for c in range(3) if confusion[c].sum()}
    return {
        "accuracy": float((predicted == gold).mean()),
        "recall": recall,
        "confusion": confusion.tolist(),
        "n": len(pairs),
        "pairs_per_s": float((judge.counter.nli_pairs - before) / elapsed),
        "seconds": float(elapsed),
    }


def _batches(order: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(order), size):
        yield list(order[start : start + size])


def _subsample(pairs: Sequence[LabelledPair], limit: int | None, seed: int) -> list[LabelledPair]:
    pairs = list(pairs)
    if limit is None or len(pairs) <= limit:
        return pairs
    return random.Random(seed).sample(pairs, limit)


def _check_settings(epochs: int, batch_size: int, lr: float, max_length: int) -> None:
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("max_length", max_length)):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}", "train_cross_encoder")
    if not lr > 0:
        raise ConfigError(f"lr must be > 0, got {lr}", "train_cross_encoder")


def _load_base(base_model: str) -> tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForSequenceClassification.from_pretrained(
        base_model,
        num_labels=3,
        id2label=dict(enumerate(NLI_LABELS)),
        label2id={name: i for i, name in enumerate(NLI_LABELS)},
    )
    return tokenizer, model


def _train_loop(
    model: Any, tokenizer: Any, pairs: list[LabelledPair], settings: dict[str, Any], progress: bool
) -> dict[str, float]:
    """Fine-tune ``model`` in place; returns the mean loss of the last epoch and the pairs per second."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    batch_size, epochs = settings["batch_size"], settings["epochs"]
    steps = epochs * ((len(pairs) + batch_size - 1) // batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"])
    scheduler = get_linear_schedule_with_warmup(optimizer, int(settings["warmup_ratio"] * steps), steps)
    rng = random.Random(settings["seed"])
    model.train()
    start, last_losses = time.perf_counter(), []
    with show_progress("train NLI cross-encoder (steps)", steps, shown=progress) as bar:
        for _ in range(epochs):
            order = list(range(len(pairs)))
            rng.shuffle(order)
            last_losses = []
            for idx in _batches(order, batch_size):
                batch = tokenizer(
                    [_with_q(pairs[i], pairs[i].premise) for i in idx],
                    [_with_q(pairs[i], pairs[i].hypothesis) for i in idx],
                    padding=True,
                    truncation="longest_first",
                    max_length=settings["max_length"],
                    return_tensors="pt",
                )
                labels = torch.tensor([int(pairs[i].label) for i in idx])
                loss = model(**batch, labels=labels).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                last_losses.append(float(loss.detach()))
                bar.advance(1, note=f"loss {np.mean(last_losses[-20:]):.3f}")
    model.eval()
    seconds = time.perf_counter() - start
    return {"final_loss": float(np.mean(last_losses)), "seconds": seconds, "pairs_per_s": epochs * len(pairs) / seconds}


def _with_q(pair: LabelledPair, text: str) -> str:
    return with_question(_question(pair), text)


def train_cross_encoder(
    train_pairs: Sequence[LabelledPair],
    val_pairs: Sequence[LabelledPair],
    *,
    out_dir: str | Path,
    base_model: str | None = None,
    epochs: int = 1,
    batch_size: int = 16,
    lr: float = 1e-4,
    max_length: int = 128,
    seed: int = 0,
    max_train_pairs: int | None = 2400,
    max_val_pairs: int | None = 600,
    weight_decay: float = 0.01,
    warmup_ratio: float = 0.1,
    threads: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Fine-tune a 3-label cross-encoder on ``train_pairs`` and save it to ``out_dir`` (atomically).

    ``base_model`` defaults to the embedded MiniLM (``resolve_embedder("minilm").path``); it gets a new, randomly
    initialised head. At most ``max_train_pairs`` / ``max_val_pairs`` pairs are used (seeded subsample; None = all).
    ``threads`` sets torch's thread count for the call. Returns the metrics also written to ``workbench_nli.json``:
    ``val_accuracy``, ``val_recall`` (per class), ``val_pairs_per_s``, ``train_seconds``, ``train_pairs_per_s``,
    ``final_loss``, the sizes and settings.
    """
    import torch

    _check_settings(epochs, batch_size, lr, max_length)
    train = _subsample(train_pairs, max_train_pairs, seed)
    val = _subsample(val_pairs, max_val_pairs, seed + 1)
    if not train or not val:
        raise DataError("need at least one training and one validation pair", "train_cross_encoder")
    if base_model is None:
        base_model = resolve_embedder("minilm").path
    settings = {
        "base_model": str(base_model),
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "max_length": max_length,
        "seed": seed,
        "weight_decay": weight_decay,
        "warmup_ratio": warmup_ratio,
        "train_pairs": len(train),
        "val_pairs": len(val),
        "labels": list(NLI_LABELS),
    }
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        tokenizer, model = _load_base(str(base_model))
        trained = _train_loop(model, tokenizer, train, settings, progress)
        with atomic_directory(out_dir) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            atomic_write_json(tmp / CROSS_ENCODER_MARKER, {"settings": settings})
            judge = CrossEncoderNLI(tmp, batch_size=32, max_length=max_length)
            evaluation = evaluate_judge(judge, val)
            metrics = {
                **settings,
                "val_accuracy": evaluation["accuracy"],
                "val_recall": evaluation["recall"],
                "val_confusion": evaluation["confusion"],
                "val_pairs_per_s": evaluation["pairs_per_s"],
                "train_seconds": trained["seconds"],
                "train_pairs_per_s": trained["pairs_per_s"],
                "final_loss": trained["final_loss"],
                "threads": torch.get_num_threads(),
            }
            atomic_write_json(tmp / CROSS_ENCODER_MARKER, {"settings": settings, "metrics": metrics})
    finally:
        torch.set_num_threads(old_threads)
    log.info(
        "NLI cross-encoder: val accuracy %.3f, trained in %.0f s", metrics["val_accuracy"], metrics["train_seconds"]
    )
    return {**metrics, "out_dir": str(out_dir)}
