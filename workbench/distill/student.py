"""The student of controller distillation: a small causal LM with LoRA (peft), its training rows, its LightningModule.

A trace row (:mod:`workbench.distill.traces`) becomes one training sequence: the exact rendered prompt the controller
model saw (``input``, tokenised as the generator feeds prompts) followed by the reply to learn (``target``). The loss
is on the target tokens only. Scoring decisions (``single_token``) are trained on the first token of the answer and
nothing after it, because the controller reads them with one next-token forward over that first token; generative
targets end with the EOS token, so the student learns to stop (greedy decoding ends at EOS).

Sequences longer than ``max_length`` lose prompt tokens from the left (as the generator truncates prompts); a target
longer than the whole budget keeps its first ``max_length - 1`` tokens. Both are counted.

torch, transformers, peft and lightning are imported inside the functions that need them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.backends.factory import backend_errors
from workbench.backends.prompts import encode
from workbench.core.errors import ConfigError, DataError

DEFAULT_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The attention projections of Llama-style models (SmolLM2, Llama, Qwen, Mistral, Gemma)."""

IGNORE_INDEX = -100
"""Label of the positions the loss skips (prompt and padding)."""


@dataclass(frozen=True)
class LoraSettings:
    """The LoRA adapter: rank ``r``, scale ``alpha`` (peft's ``lora_alpha``), ``dropout`` on the adapter input, and
    the ``target_modules`` it wraps (module names, matched as peft does: the full name or its last dotted parts).
    Invalid values raise ConfigError naming the key (``distill.*`` unless ``section`` says otherwise)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    section: str = field(default="distill", compare=False)
    """The recipe section the settings come from: error messages name ``<section>.<key>``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(str(m) for m in self.target_modules))
        checks = (
            ("lora_r", self.r >= 1, f"must be >= 1, got {self.r}"),
            ("lora_alpha", self.alpha > 0, f"must be > 0, got {self.alpha}"),
            ("lora_dropout", 0.0 <= self.dropout < 1.0, f"must be in [0, 1), got {self.dropout}"),
            ("target_modules", bool(self.target_modules), "name at least one module (e.g. q_proj, v_proj)"),
        )
        for key, ok, what in checks:
            if not ok:
                raise ConfigError(what, f"{self.section}.{key}")

    def to_dict(self) -> dict[str, Any]:
        """The settings under the adapter artifact's names (``r``, ``alpha``, ``dropout``, ``target_modules``)."""
        return {"r": self.r, "alpha": self.alpha, "dropout": self.dropout, "target_modules": list(self.target_modules)}


# ------------------------------------------------------------------------------------------------------ rows
@dataclass(frozen=True)
class EncodedRow:
    """One training sequence: ``input_ids`` (prompt then target), ``labels`` (``IGNORE_INDEX`` on the prompt), the
    row's ``decision``, how many ``target_tokens`` it trains on, and whether it was ``truncated``."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    decision: str
    target_tokens: int
    truncated: bool


def encode_row(tokenizer: Any, prompt: str, target: str, *, single_token: bool, max_length: int) -> EncodedRow:
    """Tokenise one trace row (module doc). ``prompt`` is the rendered chat prompt; DataError when the target
    encodes to no token; ValueError when ``max_length < 2``."""

    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    prompt_ids = encode(tokenizer, prompt)
    target_ids = list(tokenizer(target, add_special_tokens=False)["input_ids"])
    if not target_ids or not prompt_ids:
        raise DataError(f"a row's {'target' if prompt_ids else 'input'} encodes to no token: {target[:40]!r}", "traces")
    if single_token:
        target_ids = target_ids[:1]  # the controller reads the first token of "Yes" / "No" / the letter
    else:
        target_ids.append(int(tokenizer.eos_token_id))
    truncated = False
    if len(target_ids) > max_length - 1:
        target_ids, truncated = target_ids[: max_length - 1], True
    keep = max_length - len(target_ids)
    if len(prompt_ids) > keep:
        prompt_ids, truncated = prompt_ids[-keep:], True
    return EncodedRow(
        input_ids=tuple(prompt_ids + target_ids),
        labels=tuple([IGNORE_INDEX] * len(prompt_ids) + target_ids),
        decision="",
        target_tokens=len(target_ids),
        truncated=truncated,
    )


def encode_rows(tokenizer: Any, rows: Iterable[Mapping[str, Any]], max_length: int) -> list[EncodedRow]:
    """:func:`encode_row` of every trace row (a mapping with ``input``, ``target``, ``single_token``,
    ``decision``); the decision is kept on each encoded row."""
    out = []
    for row in rows:
        encoded = encode_row(
            tokenizer,
            str(row["input"]),
            str(row["target"]),
            single_token=bool(row["single_token"]),
            max_length=max_length,
        )
        out.append(
            EncodedRow(
                encoded.input_ids, encoded.labels, str(row["decision"]), encoded.target_tokens, encoded.truncated
            )
        )
    return out


def collate(rows: Sequence[EncodedRow], pad_id: int) -> dict[str, Any]:
    """A right-padded batch: ``input_ids``, ``attention_mask`` and ``labels`` (padding is ``IGNORE_INDEX``), long
    tensors ``[batch, longest]``."""
    import torch

    width = max(len(r.input_ids) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        n = len(row.input_ids)
        input_ids[b, :n] = torch.tensor(row.input_ids, dtype=torch.long)
        labels[b, :n] = torch.tensor(row.labels, dtype=torch.long)
        mask[b, :n] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


@dataclass
class LoaderProgress:
    """Where training stands in the current epoch: ``epoch``, the ``batches`` this rank has trained on in it, and
    the ``world_size`` (ranks consuming batches side by side). The LightningModule updates it; the
    :func:`resumable_loader_class` loader saves it in checkpoints and skips what was consumed on resume."""

    epoch: int = 0
    batches: int = 0
    world_size: int = 1


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of ranks (0, 1 outside a distributed run)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochShuffle:
    """A sampler over ``size`` rows whose order depends only on (``seed``, epoch) — Lightning calls ``set_epoch``
    before each epoch — so a resumed run sees the order an uninterrupted run would.

    In a distributed run each rank takes every world-size-th row of the epoch's order (the order padded by wrapping
    around so every rank gets the same number, as ``DistributedSampler`` does); the trainer is built with
    ``use_distributed_sampler=False`` so Lightning keeps this sampler. ``skip_rows`` (set on resume) drops that
    many of this rank's rows from the start of the next pass only."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.epoch = 0
        self.skip_rows = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch``."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        _, world = _rank_and_world()
        return -(-self.size // world)

    def __iter__(self):
        import numpy as np

        rank, world = _rank_and_world()
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size).tolist()
        total = -(-self.size // world) * world
        while len(order) < total:
            order += order[: total - len(order)]
        skip, self.skip_rows = self.skip_rows, 0
        return iter(order[rank::world][skip:])


@functools.cache
def resumable_loader_class() -> type:
    """A ``torch.utils.data.DataLoader`` with Lightning's ``state_dict`` / ``load_state_dict`` (defined on first
    use). Its state is the :class:`LoaderProgress` at the checkpoint; loading it makes the next pass of the
    :class:`EpochShuffle` sampler skip the rows already trained on in that epoch, so a run resumed from a mid-epoch
    checkpoint continues with the batches it had not seen (with the same number of ranks and batch size, exactly
    the batches an uninterrupted run would have trained on)."""
    import torch

    class ResumableLoader(torch.utils.data.DataLoader):
        """A DataLoader whose position in the epoch is checkpointed (see :func:`resumable_loader_class`)."""

        def __init__(self, *args: Any, progress: LoaderProgress | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.progress = progress if progress is not None else LoaderProgress()

        def state_dict(self) -> dict[str, int]:
            return {"epoch": self.progress.epoch, "batches": self.progress.batches, "world": self.progress.world_size}

        def load_state_dict(self, state_dict: dict[str, int]) -> None:
            epoch, batches = int(state_dict.get("epoch", 0)), int(state_dict.get("batches", 0))
            self.progress.epoch, self.progress.batches = epoch, batches
            if 0 < batches < len(self) and isinstance(self.sampler, EpochShuffle):
                # a mid-epoch checkpoint: skip the rows this rank already trained on in that epoch
                self.sampler.skip_rows = batches * int(self.batch_size or 1)

    return ResumableLoader


# ------------------------------------------------------------------------------------------------------ model
def module_names(model: Any) -> list[str]:
    """The dotted names of every sub-module of ``model``."""
    return [name for name, _ in model.named_modules() if name]


def check_target_modules(model: Any, target_modules: Sequence[str], section: str = "distill") -> None:
    """ConfigError naming ``<section>.target_modules`` when a target matches no module of ``model`` (peft's rule: a
    module matches when its name is the target or ends with ``.<target>``). The message lists the model's linear
    layers, the usual targets."""
    import torch

    names = module_names(model)
    missing = [t for t in target_modules if not any(n == t or n.endswith(f".{t}") for n in names)]
    if missing:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ConfigError(
            f"{missing} not in the base model (its linear layers: {', '.join(linear) or 'none'})",
            f"{section}.target_modules",
        )


def load_student(model_dir: str, lora: LoraSettings) -> tuple[Any, Any]:
    """``(peft_model, tokenizer)``: the causal LM at ``model_dir`` (float32, train mode) with a fresh LoRA adapter
    (``lora``; torch's RNG initialises it, so seed first). AssetError when the model cannot be loaded, ConfigError
    when a target module is absent."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with backend_errors("student model", str(model_dir)):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ConfigError("the base model's tokenizer has no EOS token (generative targets end with it)", lora.section)
    check_target_modules(model, lora.target_modules, lora.section)
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    peft_model.train()
    return peft_model, tokenizer


@functools.cache
def student_module_class() -> type:
    """The LightningModule class (defined on first use, so lightning is imported only when training)."""
    import lightning
    import torch

    class StudentModule(lightning.LightningModule):
        """Trains a peft model with the causal-LM loss on the target tokens (labels) and AdamW over the LoRA
        parameters. Checkpoints hold the trainable parameters only (``strict_loading`` is off), so a checkpoint
        of a 135M-parameter student is a few MB. ``batch_losses`` collects each batch's loss for
        :class:`LossRecorder`."""

        def __init__(
            self,
            model: torch.nn.Module,
            learning_rate: float,
            weight_decay: float = 0.0,
            progress: LoaderProgress | None = None,
        ) -> None:
            super().__init__()
            self.model = model
            self.learning_rate = learning_rate
            self.weight_decay = weight_decay
            self.strict_loading = False
            self.batch_losses: list[float] = []
            self.progress = progress if progress is not None else LoaderProgress()

        def on_train_epoch_start(self) -> None:
            if self.progress.epoch != self.current_epoch:  # a new epoch (not the one a resumed run continues)
                self.progress.epoch, self.progress.batches = self.current_epoch, 0
            self.progress.world_size = self.trainer.world_size

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            loss = target_loss(self.model, batch)
            self.batch_losses.append(float(loss.detach()))
            self.progress.batches += 1
            self.log("loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch["input_ids"].shape[0])
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            trainable = [p for p in self.parameters() if p.requires_grad]
            return torch.optim.AdamW(trainable, lr=self.learning_rate, weight_decay=self.weight_decay)

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            state = checkpoint.get("state_dict")
            if state is not None:  # DeepSpeed saves the module itself (frozen parameters excluded)
                trainable = {name for name, p in self.named_parameters() if p.requires_grad}
                checkpoint["state_dict"] = {k: v for k, v in state.items() if k in trainable}

    return StudentModule


def use_gradient_checkpointing(model: Any) -> None:
    """Train ``model`` (a peft model over a transformers causal LM) with gradient checkpointing: each decoder layer's
    activations are recomputed in the backward pass instead of kept from the forward, so training memory no longer
    grows with the number of layers × rows × tokens (measured on SmolLM2-135M, 8 rows of 256 tokens, 2 threads: peak
    6.1 GB → 2.3 GB, each step ~25 % slower). Non-reentrant checkpointing, so a frozen base with LoRA layers needs
    no input-gradient hook; the loss and gradients are the same to float rounding (tested)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def target_loss(model: Any, batch: dict[str, Any]) -> Any:
    """The causal-LM loss of ``batch`` (``input_ids``, ``attention_mask``, ``labels`` with :data:`IGNORE_INDEX` on
    prompt and padding): the mean cross-entropy of each target token given the tokens before it — the loss
    transformers computes from ``labels`` (shifted by one, mean over the target tokens), to float rounding.

    The output layer runs only at the positions that predict a target token in some row of the batch
    (``logits_to_keep``): the full vocabulary's logits at every prompt position (rows × tokens × vocabulary floats,
    about 1.6 GB for 8 rows of 1,024 tokens over SmolLM2's 49k-token vocabulary, then as much again for their
    log-softmax and gradient) were the training step's memory peak, for targets of a few tokens."""
    import torch

    labels = batch["labels"]
    predicts_target = labels[:, 1:] != IGNORE_INDEX  # the logits at position t score the token at t + 1
    keep = predicts_target.any(dim=0).nonzero().squeeze(-1)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits_to_keep=keep)
    logits = out.logits.float()
    targets = labels[:, 1:][:, keep]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )


@functools.cache
def loss_recorder_class() -> type:
    """The :class:`LossRecorder` callback class (defined on first use: lightning is imported lazily)."""
    import lightning

    class LossRecorder(lightning.Callback):
        """Records the loss curve — one point per optimizer step: the mean loss of its batches (this rank's) — and
        forwards it to a tracker (``tracker.log``, global rank 0 only). The curve is part of the callback's state,
        so it is saved in checkpoints and a resumed run reports the whole curve."""

        def __init__(self, tracker: Any = None, prefix: str = "distill") -> None:
            self.tracker = tracker
            self.prefix = prefix
            self.curve: list[dict[str, float]] = []
            self._pending: list[float] = []
            self._last_step = -1

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._last_step = trainer.global_step

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._pending.extend(pl_module.batch_losses)
            pl_module.batch_losses.clear()
            if trainer.global_step == self._last_step or not self._pending:
                return  # still accumulating gradients
            self._last_step = trainer.global_step
            point = {
                "step": int(trainer.global_step),
                "epoch": int(trainer.current_epoch),
                "loss": float(sum(self._pending) / len(self._pending)),
            }
            self._pending = []
            self.curve.append(point)
            if self.tracker is not None and trainer.is_global_zero:
                self.tracker.log({f"{self.prefix}/{k}": v for k, v in point.items()})

        def state_dict(self) -> dict[str, Any]:
            return {"curve": [dict(p) for p in self.curve]}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.curve = [dict(p) for p in state_dict.get("curve", [])]

    return LossRecorder


@dataclass
class RowStats:
    """What the encoded rows hold: rows and target tokens per decision, all tokens, truncated rows."""

    rows: dict[str, int] = field(default_factory=dict)
    target_tokens: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    truncated: int = 0

    @classmethod
    def of(cls, encoded: Sequence[EncodedRow]) -> RowStats:
        """The statistics of ``encoded``."""
        stats = cls()
        for row in encoded:
            stats.rows[row.decision] = stats.rows.get(row.decision, 0) + 1
            stats.target_tokens[row.decision] = stats.target_tokens.get(row.decision, 0) + row.target_tokens
            stats.tokens += len(row.input_ids)
            stats.truncated += int(row.truncated)
        return stats
