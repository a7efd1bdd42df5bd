"""The 'train_nli' and 'eval_nli' stages' settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc


@dataclass
class TrainNLISection:
    """The 'train_nli' stage: build NLI pairs from the Wikipedia corpus, train the MiniLM cross-encoder, and
    measure every judge on held-out pairs and on short-answer pairs."""

    val_fraction: float = doc("share of articles held out for validation pairs", 0.2)
    max_train_pairs: int = doc("training pairs used (seeded subsample)", 2400)
    max_val_pairs: int = doc("validation pairs used when training", 600)
    epochs: int = doc("training epochs", 1)
    batch_size: int = doc("training batch size", 16)
    lr: float = doc("learning rate (AdamW, linear warm-up)", 1e-4)
    max_length: int = doc("maximum tokens per (premise, hypothesis) pair", 128)
    eval_pairs: int = doc("held-out NLI pairs every judge is measured on", 300)
    answer_pairs: int = doc(
        "generated short-answer pairs every judge is measured on (plus 18 built-in)", 200, minimum=0
    )
    judges: list[Literal["answer_equivalence", "cross_encoder", "llm", "hf"]] = doc(
        "judges to measure ('hf' needs nli.model to name a local NLI checkpoint)",
        ["answer_equivalence", "cross_encoder", "llm"],
    )
