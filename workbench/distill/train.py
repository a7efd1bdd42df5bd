"""Training the student controller with PyTorch Lightning: the Trainer built from the recipe, checkpoints, resume.

:func:`train_student` loads the base model with a fresh LoRA adapter (:mod:`workbench.distill.student`), tokenises
the trace rows and fits it with a Lightning ``Trainer`` built from :class:`TrainSettings`:

* **strategy** — ``auto`` (one device; DDP when ``devices`` > 1), ``ddp``, ``deepspeed_stage_2`` or
  ``deepspeed_stage_3`` (Lightning's ``DeepSpeedStrategy``, ZeRO stage 2 / 3, frozen parameters left out of its
  checkpoints). Lightning refuses DeepSpeed on anything but CUDA GPUs, while DeepSpeed itself runs on CPU (its CPU
  accelerator, a gloo process group and, with more than one process, a shared-memory collective it compiles once with
  the machine's C++ compiler); on CPU the strategy is therefore a subclass that skips that one check, numbers the CPU
  devices by local rank and, in a one-process run, tells DeepSpeed not to build that collective (nothing to reduce
  across processes; building it took 57 s on a 2-core machine).
  :func:`check_strategy` refuses what the installed packages or the machine cannot run, with a one-line ConfigError
  naming ``distill.strategy`` (or ``distill.accelerator`` / ``distill.devices`` / ``distill.precision``), before any
  model is loaded.
* **checkpoints** — :class:`ResumableCheckpoint` saves the trainer state (LoRA weights, optimizer, loop progress,
  the loss curve) into ``checkpoint_dir`` after every epoch and every ``checkpoint_every`` optimizer steps. Each is
  written under a temporary name and renamed into place, so a run killed at any moment (kill -9 included) leaves
  only complete checkpoints; the newest two are kept. A later call with the same ``checkpoint_dir`` resumes from the
  newest one instead of starting over (the ``distill`` and ``tune_reader`` stages pass their scratch directory,
  which the runner keeps across an interrupted run and deletes when the stage completes: :func:`train_in_stage`).
* **seeding** — ``lightning.seed_everything(seed)`` before the adapter is initialised, and a row order that depends
  only on (seed, epoch) (:class:`~workbench.distill.student.EpochShuffle`), so a resumed run sees the same batches.
* **progress and tracking** — a rich progress bar on a terminal (hidden under ``--quiet``), rate-limited
  log lines of the optimizer steps elsewhere (:func:`step_lines_class`); the loss of every optimizer step goes
  to the run's tracker (wandb, offline unless ``WANDB_MODE`` says otherwise) as ``distill/loss``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from workbench.backends.lora import lora_state_dict
from workbench.core.errors import ConfigError, DataError
from workbench.core.logs import ProgressLines, is_quiet, is_terminal, quiet_lightning
from workbench.distill.student import (
    EpochShuffle,
    LoaderProgress,
    LoraSettings,
    RowStats,
    collate,
    encode_rows,
    load_student,
    loss_recorder_class,
    resumable_loader_class,
    student_module_class,
    use_gradient_checkpointing,
)

log = logging.getLogger(__name__)

STRATEGIES: tuple[str, ...] = ("auto", "ddp", "deepspeed_stage_2", "deepspeed_stage_3")
ACCELERATORS: tuple[str, ...] = ("auto", "cpu", "gpu")
PRECISIONS: tuple[str, ...] = ("32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true")
CHECKPOINT_PATTERN = re.compile(r"^step-(\d{8})\.ckpt$")
KEEP_CHECKPOINTS = 2


@dataclass(frozen=True)
class TrainSettings:
    """How the student is trained (the ``distill`` recipe section's training keys; module doc for the strategies).

    ``learning_rate`` (AdamW, constant), ``weight_decay``, ``epochs``, ``batch_size`` (rows per device and step),
    ``grad_accum`` (batches per optimizer step), ``precision`` (Lightning's: ``32-true`` on CPU; ``bf16-mixed`` on
    recent GPUs), ``accelerator`` (``auto``: a GPU when torch sees one), ``devices`` (per node), ``num_nodes``,
    ``strategy``, ``max_length`` (tokens per training sequence), ``seed``, ``checkpoint_every`` (optimizer steps
    between checkpoints; 0: only at epoch ends), ``gradient_clip`` (norm; 0: none), ``gradient_checkpointing``
    (recompute each layer's activations in the backward pass instead of keeping them all:
    :func:`~workbench.distill.student.use_gradient_checkpointing`)."""

    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    epochs: int = 2
    batch_size: int = 8
    grad_accum: int = 1
    precision: str = "32-true"
    accelerator: str = "auto"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    max_length: int = 1024
    seed: int = 0
    gradient_checkpointing: bool = True
    checkpoint_every: int = 50
    gradient_clip: float = 1.0
    section: str = field(default="distill", compare=False)
    """The recipe section the settings come from: error messages name ``<section>.<key>``."""

    def __post_init__(self) -> None:
        checks = (
            ("learning_rate", self.learning_rate > 0, "must be > 0"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("epochs", self.epochs >= 1, "must be >= 1"),
            ("batch_size", self.batch_size >= 1, "must be >= 1"),
            ("grad_accum", self.grad_accum >= 1, "must be >= 1"),
            ("devices", self.devices >= 1, "must be >= 1"),
            ("num_nodes", self.num_nodes >= 1, "must be >= 1"),
            ("max_length", self.max_length >= 2, "must be >= 2"),
            ("checkpoint_every", self.checkpoint_every >= 0, "must be >= 0 (0: at epoch ends only)"),
            ("gradient_clip", self.gradient_clip >= 0, "must be >= 0 (0: no clipping)"),
            ("strategy", self.strategy in STRATEGIES, f"must be one of {', '.join(STRATEGIES)}"),
            ("accelerator", self.accelerator in ACCELERATORS, f"must be one of {', '.join(ACCELERATORS)}"),
            ("precision", self.precision in PRECISIONS, f"must be one of {', '.join(PRECISIONS)}"),
        )
        for key, ok, what in checks:
            if not ok:
                raise ConfigError(f"{what}, got {getattr(self, key)!r}", f"{self.section}.{key}")


def section_settings(section: Any, name: str, seed: int) -> tuple[LoraSettings, TrainSettings]:
    """The LoRA and training settings of the recipe section ``name`` (``distill``, ``tune_reader``): its ``lora_r``,
    ``lora_alpha``, ``lora_dropout`` and ``target_modules``, and every :class:`TrainSettings` key the section has
    (the others keep their defaults); the section's ``seed``, or ``seed`` when that is null. ConfigError naming
    ``<name>.<key>`` on a bad value."""
    lora = LoraSettings(
        r=section.lora_r,
        alpha=section.lora_alpha,
        dropout=float(section.lora_dropout),
        target_modules=tuple(section.target_modules),
        section=name,
    )
    keys = [f.name for f in fields(TrainSettings) if f.name not in ("seed", "section") and hasattr(section, f.name)]
    values: dict[str, Any] = {key: getattr(section, key) for key in keys}
    if "learning_rate" in values:
        values["learning_rate"] = float(values["learning_rate"])
    own_seed = getattr(section, "seed", None)
    train = TrainSettings(**values, seed=seed if own_seed is None else own_seed, section=name)
    return lora, train


# ------------------------------------------------------------------------------------------------------ checks
def resolve_accelerator(settings: TrainSettings) -> str:
    """``cpu`` or ``gpu``: ``auto`` is a GPU when torch sees CUDA. ConfigError when ``gpu`` is asked without CUDA,
    or ``devices`` exceeds the GPUs of this node."""
    import torch

    cuda = torch.cuda.is_available()
    accelerator = settings.accelerator if settings.accelerator != "auto" else ("gpu" if cuda else "cpu")
    if accelerator == "gpu":
        if not cuda:
            raise ConfigError(
                "'gpu' but torch sees no CUDA GPU on this machine (use cpu or auto)", f"{settings.section}.accelerator"
            )
        count = torch.cuda.device_count()
        if settings.devices > count:
            raise ConfigError(
                f"{settings.devices} GPU(s) per node asked, this node has {count}", f"{settings.section}.devices"
            )
    return accelerator


def check_strategy(settings: TrainSettings, accelerator: str) -> None:
    """Refuse, before anything is loaded, a strategy / precision the installed packages or this machine cannot run
    (one-line ConfigError naming the key). DeepSpeed needs the ``deepspeed`` package (importable) and, on CPU with
    more than one process, a C++ compiler and ninja for the communication op it compiles once; fp16 needs a GPU."""
    if accelerator == "cpu" and settings.precision.startswith("16-"):
        raise ConfigError(
            f"{settings.precision!r} (fp16) needs a GPU; on CPU use 32-true or bf16-mixed",
            f"{settings.section}.precision",
        )
    if not settings.strategy.startswith("deepspeed"):
        return
    where = f"{settings.section}.strategy"
    if importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            f"{settings.strategy} needs the deepspeed package, which is not installed "
            "(pip install deepspeed; or use strategy auto / ddp)",
            where,
        )
    try:
        with _quiet_deepspeed():
            import deepspeed  # noqa: F401
    except Exception as exc:  # deepspeed's import probes the machine (CUDA toolkit, accelerators) and can fail
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{settings.strategy}: deepspeed cannot be imported here ({first})", where) from None
    if accelerator == "cpu" and settings.devices * settings.num_nodes > 1:
        compiler = os.environ.get("CXX", "c++")
        if shutil.which(compiler) is None:
            raise ConfigError(
                f"{settings.strategy} on CPU: DeepSpeed compiles its shared-memory communication op on first use "
                f"and needs a C++ compiler, but {compiler!r} is not on PATH (install g++ or set CXX; or use "
                "strategy auto / ddp)",
                where,
            )
        if shutil.which("ninja") is None and importlib.util.find_spec("ninja") is None:
            raise ConfigError(
                f"{settings.strategy} on CPU: DeepSpeed builds its communication op with ninja, which is not "
                "installed (pip install ninja; or use strategy auto / ddp)",
                where,
            )


@contextlib.contextmanager
def _quiet_deepspeed() -> Iterator[None]:
    """Hide DeepSpeed's import-time warnings ("Setting accelerator to CPU ...") from the console."""
    logger = logging.getLogger("DeepSpeed")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@functools.cache
def _cpu_deepspeed_class() -> type:
    """Lightning's DeepSpeedStrategy, allowed on CPU (module doc): the CUDA-only check of ``setup_environment`` is
    skipped, everything else is Lightning's."""
    from lightning.pytorch.strategies import DeepSpeedStrategy

    class CPUDeepSpeedStrategy(DeepSpeedStrategy):
        """DeepSpeed ZeRO on CPU processes (DeepSpeed's CPU accelerator and a gloo process group)."""

        def setup_environment(self) -> None:
            if self.num_nodes * self.num_processes == 1:
                _skip_shared_memory_collective()
            # DeepSpeedStrategy.setup_environment only adds "is the accelerator CUDA?" before DDP's setup
            super(DeepSpeedStrategy, self).setup_environment()

    return CPUDeepSpeedStrategy


def _skip_shared_memory_collective() -> None:
    """Tell DeepSpeed that its shared-memory collective (``deepspeed_shm_comm``, a C++ op its communication backend
    JIT-compiles when it starts on CPU) cannot be built here, so a one-process run neither compiles it nor needs a
    compiler: it only speeds up reductions across processes. DeepSpeed reads the flag from the
    ``deepspeed.ops.__compatible_ops__`` dict, which it keeps for such edits."""
    import deepspeed.ops
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False


def build_strategy(settings: TrainSettings, accelerator: str) -> Any:
    """The Lightning strategy (a name, or a DeepSpeed strategy object) for ``settings.strategy``."""
    if not settings.strategy.startswith("deepspeed"):
        return settings.strategy
    import torch

    stage = int(settings.strategy.rsplit("_", 1)[1])
    options = {"stage": stage, "exclude_frozen_parameters": True}
    if accelerator == "cpu":
        # Lightning's CPU devices carry no index, but DeepSpeed's device check wants device i for local rank i
        devices = [torch.device("cpu", i) for i in range(settings.devices)]
        return _cpu_deepspeed_class()(parallel_devices=devices, **options)
    from lightning.pytorch.strategies import DeepSpeedStrategy

    return DeepSpeedStrategy(**options)


# ------------------------------------------------------------------------------------------------------ checkpoints
def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory`` (``step-NNNNNNNN.ckpt``: a file, or a DeepSpeed directory),
    or None. Checkpoints appear under that name only once fully written (:class:`ResumableCheckpoint`)."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name)))
    return found[-1][1] if found else None


@functools.cache
def resumable_checkpoint_class() -> type:
    """The :class:`ResumableCheckpoint` callback class (lightning imported on first use)."""
    import lightning

    class ResumableCheckpoint(lightning.Callback):
        """Saves the full trainer state to ``directory/step-NNNNNNNN.ckpt`` after every epoch and every
        ``every_n_steps`` optimizer steps (0: epochs only): written under a temporary name, then renamed, so only
        complete checkpoints carry the final name; older ones beyond the newest ``keep`` are deleted."""

        def __init__(self, directory: Path, every_n_steps: int, keep: int = KEEP_CHECKPOINTS) -> None:
            self.directory = Path(directory)
            self.every_n_steps = every_n_steps
            self.keep = keep
            self.saved: list[int] = []
            self._last = -1

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._last = trainer.global_step  # a resumed run does not re-save the step it resumed from

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = trainer.global_step
            if self.every_n_steps and step > 0 and step % self.every_n_steps == 0 and step != self._last:
                self.save(trainer)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.save(trainer)  # also when a step checkpoint was just written: this one records the epoch as done

        def save(self, trainer: Any) -> None:
            """Write the checkpoint of the current step (collective: every rank calls it)."""
            step = int(trainer.global_step)
            final = self.directory / f"step-{step:08d}.ckpt"
            temporary = self.directory / f".tmp-step-{step:08d}.ckpt"
            if trainer.is_global_zero:
                self.directory.mkdir(parents=True, exist_ok=True)
                _remove(temporary)
            trainer.strategy.barrier("distill.checkpoint.prepare")
            trainer.save_checkpoint(str(temporary))  # ends with a barrier: every rank has written its part
            if trainer.is_global_zero:
                if final.is_dir():  # a DeepSpeed checkpoint is a directory: rename cannot replace a full one
                    _remove(final)
                os.replace(temporary, final)
                self._prune()
            trainer.strategy.barrier("distill.checkpoint.done")
            self._last = step
            self.saved.append(step)

        def _prune(self) -> None:
            found = sorted(
                (int(m.group(1)), p) for p in self.directory.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name))
            )
            for _, path in found[: -self.keep]:
                _remove(path)

    return ResumableCheckpoint


def step_lines_class() -> type:
    """A Lightning callback that reports optimizer steps as :class:`~workbench.core.logs.ProgressLines` (n of N, the
    rate, the ETA and the step's loss; rank 0 only): the trainer's progress where output is not a terminal."""
    import lightning

    class StepLines(lightning.pytorch.Callback):
        def __init__(self) -> None:
            self.lines: ProgressLines | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if trainer.is_global_zero:
                total = int(trainer.estimated_stepping_batches)
                self.lines = ProgressLines("train (optimizer steps)", total, completed=int(trainer.global_step))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.lines is not None:
                loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
                note = f"loss {float(loss):.3f}" if loss is not None else None
                self.lines.update(int(trainer.global_step), note)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.lines is not None:
                self.lines.close()
                self.lines = None

    return StepLines


def _remove(path: Path) -> None:
    """Delete a file or a directory tree if it exists."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# ------------------------------------------------------------------------------------------------------ training
@dataclass
class TrainResult:
    """What :func:`train_student` returns.

    ``model``: the trained peft model (on CPU; for ZeRO-3 a fresh copy carrying the gathered weights);
    ``tokenizer``; ``state``: the LoRA weights (peft names → float32 arrays); ``loss_curve``: one point per
    optimizer step (``step``, ``epoch``, ``loss``; a resumed run includes the steps before the interruption);
    ``rows``: the encoded rows' statistics; ``steps``: optimizer steps in all; ``steps_this_run``; ``resumed_from``:
    the step of the checkpoint this run started from (None: from scratch); ``checkpoint``: that checkpoint's path;
    ``seconds``: wall time of this call; ``accelerator`` / ``strategy`` / ``world_size``; ``is_global_zero``: False
    on the other ranks of a multi-process run (they should write nothing)."""

    model: Any
    tokenizer: Any
    state: dict[str, Any]
    loss_curve: list[dict[str, float]]
    rows: RowStats
    steps: int
    steps_this_run: int
    resumed_from: int | None
    checkpoint: str | None
    seconds: float
    accelerator: str
    strategy: str
    world_size: int
    is_global_zero: bool
    settings: dict[str, Any] = field(default_factory=dict)

    def adapter_training(self) -> dict[str, Any]:
        """The training settings an adapter records (under ``training``; :func:`~workbench.backends.lora.
        save_lora_adapter`): learning rate, epochs, batch size, accumulation, precision, strategy, length, seed."""
        keep = ("learning_rate", "epochs", "batch_size", "grad_accum", "precision", "strategy", "max_length", "seed")
        return {k: self.settings[k] for k in keep}

    def record(self, section: Any) -> dict[str, Any]:
        """The training record a stage's ``summary.json`` keeps: the LoRA settings of the recipe ``section`` and the
        trainable parameter count, the training settings, accelerator, world size, steps, the resume point, the loss
        curve, the mean loss per epoch (per-step losses swing with each batch's mix of rows: compare epochs) and
        the seconds."""
        curve = self.loss_curve
        return {
            "lora": {
                "r": section.lora_r,
                "alpha": section.lora_alpha,
                "dropout": section.lora_dropout,
                "target_modules": list(section.target_modules),
                "trainable_parameters": int(sum(v.size for v in self.state.values())),
            },
            "training": {k: v for k, v in self.settings.items() if k != "section"},
            "accelerator": self.accelerator,
            "world_size": self.world_size,
            "steps": self.steps,
            "steps_this_run": self.steps_this_run,
            "resumed_from_step": self.resumed_from,
            "loss_curve": curve,
            "epoch_losses": [
                float(sum(p["loss"] for p in curve if p["epoch"] == epoch) / sum(p["epoch"] == epoch for p in curve))
                for epoch in sorted({p["epoch"] for p in curve})
            ],
            "seconds": round(self.seconds, 3),
        }


def train_student(
    model_dir: str | Path,
    rows: Sequence[Mapping[str, Any]],
    *,
    lora: LoraSettings,
    settings: TrainSettings,
    checkpoint_dir: str | Path,
    tracker: Any = None,
    callbacks: Sequence[Any] = (),
    progress: bool | None = None,
) -> TrainResult:
    """Train a LoRA student on trace ``rows`` (mappings with ``input``, ``target``, ``single_token``,
    ``decision``), starting from the causal LM at ``model_dir``; resume from the newest checkpoint in
    ``checkpoint_dir`` when there is one (module doc).

    Errors, all before training starts: DataError when ``rows`` is empty; ConfigError for a strategy, accelerator,
    device count or precision this machine cannot run (:func:`check_strategy`) or a target module absent from the
    model; AssetError when the model cannot be loaded. ``tracker`` receives the loss per optimizer step;
    ``callbacks`` are extra Lightning callbacks; ``progress`` shows the progress bar (default: unless ``--quiet``).
    """
    import lightning
    import torch

    if not rows:
        raise DataError("no training rows: nothing to train on", settings.section)
    started = time.perf_counter()
    accelerator = resolve_accelerator(settings)
    check_strategy(settings, accelerator)
    lightning.seed_everything(settings.seed, workers=True, verbose=False)
    model, tokenizer = load_student(str(model_dir), lora)
    if settings.gradient_checkpointing:
        use_gradient_checkpointing(model)
    encoded = encode_rows(tokenizer, rows, settings.max_length)
    stats = RowStats.of(encoded)
    pad_id = int(tokenizer.pad_token_id)
    position = LoaderProgress()
    loader = resumable_loader_class()(
        encoded,
        batch_size=settings.batch_size,
        sampler=EpochShuffle(len(encoded), settings.seed),
        collate_fn=functools.partial(collate, pad_id=pad_id),
        progress=position,
    )
    module = student_module_class()(model, settings.learning_rate, settings.weight_decay, position)
    recorder = loss_recorder_class()(tracker, prefix=settings.section)
    checkpointer = resumable_checkpoint_class()(Path(checkpoint_dir), settings.checkpoint_every)
    show = (not is_quiet()) if progress is None else progress
    bar = []
    if show and is_terminal():
        from lightning.pytorch.callbacks import RichProgressBar

        bar = [RichProgressBar(leave=True)]
    elif progress is not False:  # a log file or a pipe: rate-limited lines (to the run log only, under --quiet)
        bar = [step_lines_class()()]
        show = False  # Lightning's own bar would fall back to tqdm
    with quiet_lightning():
        try:
            trainer = lightning.Trainer(
                accelerator=accelerator,
                devices=settings.devices,
                num_nodes=settings.num_nodes,
                strategy=build_strategy(settings, accelerator),
                precision=settings.precision,
                max_epochs=settings.epochs,
                accumulate_grad_batches=settings.grad_accum,
                gradient_clip_val=settings.gradient_clip or None,
                callbacks=[recorder, checkpointer, *bar, *callbacks],
                logger=False,
                enable_checkpointing=False,  # ResumableCheckpoint does it (atomic names, resume)
                use_distributed_sampler=False,  # EpochShuffle deals the rows to the ranks itself (resumable)
                enable_progress_bar=show,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                log_every_n_steps=1,
                default_root_dir=str(checkpoint_dir),
            )
        except Exception as exc:  # Lightning's MisconfigurationException / ValueError on an impossible combination
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"Lightning cannot run this setting: {first}", f"{settings.section}.strategy") from None
        resume = latest_checkpoint(checkpoint_dir)
        resumed_from = int(CHECKPOINT_PATTERN.match(resume.name).group(1)) if resume is not None else None
        if resume is not None:
            log.info("%s: resuming from %s (step %d)", settings.section, resume, resumed_from)
        trainer.fit(module, train_dataloaders=loader, ckpt_path=str(resume) if resume else None, weights_only=True)
    state = _gather_state(module.model)
    model_out = module.model
    if settings.strategy == "deepspeed_stage_3":  # the trained module's parameters stay partitioned: use a copy
        from peft import set_peft_model_state_dict

        model_out, _ = load_student(str(model_dir), lora)
        set_peft_model_state_dict(model_out, {k: torch.from_numpy(v) for k, v in state.items()})
    model_out = model_out.cpu().eval()
    return TrainResult(
        model=model_out,
        tokenizer=tokenizer,
        state=state,
        loss_curve=list(recorder.curve),
        rows=stats,
        steps=int(trainer.global_step),
        steps_this_run=int(trainer.global_step) - (resumed_from or 0),
        resumed_from=resumed_from,
        checkpoint=str(resume) if resume else None,
        seconds=time.perf_counter() - started,
        accelerator=accelerator,
        strategy=settings.strategy,
        world_size=int(trainer.world_size),
        is_global_zero=bool(trainer.is_global_zero),
        settings=asdict(settings),
    )


def train_in_stage(
    ctx: Any, model_dir: str | Path, rows: Sequence[Mapping[str, Any]], lora: LoraSettings, settings: TrainSettings
) -> TrainResult:
    """:func:`train_student` as a recipe stage (``distill``, ``tune_reader``) runs it: checkpoints in the stage's
    scratch directory (``ctx.scratch_dir / "checkpoints"``: the runner keeps it across an interrupted run, so the
    next run resumes, and deletes it when the stage completes) and the loss to the stage's tracker."""
    return train_student(
        model_dir,
        rows,
        lora=lora,
        settings=settings,
        checkpoint_dir=ctx.scratch_dir / "checkpoints",
        tracker=ctx.tracker,
    )


def _gather_state(model: Any) -> dict[str, Any]:
    """The LoRA weights of the trained model (gathered across ranks under ZeRO-3)."""

    return lora_state_dict(model)
