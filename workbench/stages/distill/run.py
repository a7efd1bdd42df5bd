"""Stage ``distill``: a LoRA student trained on the teacher traces, then scored against its base on held-out rows.

Reads the ``distill_data`` stage's trace dataset (``traces/``: splits ``train`` and ``heldout``, one row per
controller decision; :mod:`workbench.distill.traces`). Trains the ``distill.base_model`` with a LoRA adapter on the
``train`` rows of ``distill.sources`` (:func:`workbench.distill.train.train_student`: PyTorch Lightning, the
recipe's strategy / devices / precision, checkpoints in the run's scratch directory so an interrupted stage resumes
from the newest one), writes the adapter, merges it over the base once (:func:`workbench.backends.lora.
resolve_adapter_model`, the loader every consumer uses) and scores base and student the same way on the
``heldout`` rows.

**Held-out scoring.** Both models are read exactly as InSemRAG reads its controller: each row's rendered ``input``
is fed through :class:`~workbench.methods.controller.PromptedLMController` (a stand-in generator returns the row's
prompt where the controller renders its own), so the scores are its next-token log-probs and the replies go
through its parsers and fallbacks. Per decision:

* single-token decisions (refine, completeness, coverage: p(Yes) ≥ 0.5 → ``Yes``; channel_weights: the most
  probable intent letter) — accuracy and F1 against the teacher's rows and against the gold rows (F1 of ``Yes``;
  macro-F1 over the letters), and for yes / no teacher rows the Spearman correlation of p(Yes) with the teacher's;
  coverage is read through the relevance scorer (the controller scores both with the same next-token read);
* generative decisions (enrich, compress, elements, follow_up) — the parse-failure rate (the controller fell back)
  and the token F1 of the greedy reply to the teacher's; replies are decoded in batches of ``eval_batch_size``
  with the decoding settings the controller asks for (compress: the word budget in the prompt / 0.75 tokens);
* per decision: seconds and tokens (prompt + generated) per controller decision.

The base model's figures are the prompted controller before training, so the report shows what training changed.

**Outputs**: ``adapter.json`` + ``adapter.safetensors`` and beside them the same adapter for peft
(``adapter_config.json`` + ``adapter_model.safetensors``, base named portably) and its model card ``README.md``
(:mod:`workbench.backends.lora`, :mod:`workbench.backends.peft_dir`),
``merged/`` (with ``distill.merge``), ``summary.json`` (rows and tokens trained per decision, the loss curve, the
training settings and seconds, the resume point) and ``heldout.json`` (the held-out figures above, base and student).

In a multi-process run (``devices`` × ``num_nodes`` > 1) every rank trains; only global rank 0 writes and scores,
the other ranks leave the process when training ends.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from workbench.backends.factory import build_generator
from workbench.backends.lora import resolve_adapter_model, resolve_model, save_lora_adapter
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, DataError
from workbench.distill.traces import load_traces
from workbench.distill.train import section_settings, train_in_stage
from workbench.methods.controller import CHANNELS, INTENTS, PromptedLMController
from workbench.metrics.qa import token_f1
from workbench.metrics.rejection import spearman
from workbench.stages.context import StageContext

SOURCES = ("teacher", "gold")
YES_NO = ("refine", "completeness", "coverage")
GENERATIVE = ("enrich", "compress", "elements", "follow_up")
LETTERS = ("A", "B", "C")
_BUDGET = re.compile(r"at most (\d+) words")


# ------------------------------------------------------------------------------------------------------ settings
def validate_section(section: Any) -> None:
    """The load-time checks of a ``distill`` section (no torch import): LoRA and training values, the sources, and
    that a DeepSpeed strategy has its package installed. ConfigError naming the ``distill.*`` key."""

    section_settings(section, "distill", 0)
    sources = list(section.sources)
    if not sources or len(set(sources)) != len(sources) or set(sources) - set(SOURCES):
        raise ConfigError(f"give one or both of {', '.join(SOURCES)}, each once, got {sources}", "distill.sources")
    if str(section.strategy).startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            f"{section.strategy} needs the deepspeed package, which is not installed (pip install deepspeed; "
            "or use strategy auto / ddp)",
            "distill.strategy",
        )


LAUNCHER_VARIABLES = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "LSB_JOBID")
"""Environment variables of the launchers Lightning reads (torchrun / torch.distributed, SLURM, Open MPI, LSF)."""


def check_launch(processes: int, environ: Mapping[str, str] | None = None) -> None:
    """ConfigError naming ``distill.devices`` when a multi-process run (``processes`` > 1) was not started by a
    launcher (torchrun, srun, mpirun): Lightning would then start the other processes itself by re-running the
    command line, i.e. the whole ``workbench run`` in each, without the launcher variables that tell the runner a
    process is a rank above 0 (:func:`workbench.stages.runner.run_other_rank`), so each would try to run the whole
    recipe."""

    env = os.environ if environ is None else environ
    if processes > 1 and not any(name in env for name in LAUNCHER_VARIABLES):
        raise ConfigError(
            f"{processes} training processes (devices x num_nodes) need a launcher: start the run with torchrun "
            "or srun, one process per device (docs/distillation.md, 'Distillation on several GPUs')",
            "distill.devices",
        )


# ------------------------------------------------------------------------------------------------------ stage
def run(ctx: StageContext) -> dict[str, Any]:
    """Train, write the adapter, score base and student on the held-out rows (module doc)."""

    section = ctx.config.distill
    validate_section(section)
    lora, settings = section_settings(section, "distill", ctx.config.seed)
    check_launch(settings.devices * settings.num_nodes)
    traces_dir = ctx.inputs["distill_data"] / "traces"
    traces = load_traces(traces_dir)
    sources = list(section.sources)
    rows = [row for row in traces["train"] if row["source"] in sources]
    if not rows:
        raise DataError(
            f"no training rows from source(s) {', '.join(sources)} in the 'train' split: nothing to distil "
            "(check distill.sources and the distill_data stage's output)",
            str(traces_dir),
        )
    base = resolve_model(section.base_model)
    ctx.log.info("distill: %d training rows (%s) on %s", len(rows), ", ".join(sources), section.base_model)
    result = train_in_stage(ctx, base.path, rows, lora, settings)
    if not result.is_global_zero:
        raise SystemExit(0)  # the other ranks of a multi-process run: rank 0 writes and scores
    decisions = sorted(result.rows.rows)
    save_lora_adapter(
        result.model,
        ctx.out_dir,
        base_model=section.base_model,
        base_fingerprint=base.fingerprint,
        settings={**lora.to_dict(), **result.adapter_training(), "sources": list(sources)},
        decisions=decisions,
        state=result.state,
        base=base,
    )
    train_summary = _train_summary(section, base, result, len(traces["train"]))
    del result
    gc.collect()

    student = resolve_adapter_model(ctx.out_dir / "adapter.json")
    if section.merge:
        shutil.copytree(student.path, ctx.out_dir / "merged")
    heldout = _select_heldout(traces["heldout"], section.eval_limit, settings.seed)
    device = "cuda" if train_summary["accelerator"] == "gpu" else "cpu"
    evaluation: dict[str, Any] = {"rows": {d: _source_counts(r) for d, r in heldout.items()}}
    for name, model in (("base", base), ("student", student)):
        ctx.log.info("distill: scoring the %s model on %d held-out rows", name, sum(map(len, heldout.values())))
        evaluation[name] = _score_model(ctx, model, heldout, device, section.eval_batch_size)
    evaluation["student_fingerprint"] = student.fingerprint
    atomic_write_json(ctx.out_dir / "summary.json", train_summary)
    atomic_write_json(ctx.out_dir / "heldout.json", evaluation)
    return _flat_summary(train_summary, evaluation)


def _train_summary(section: Any, base: Any, result: Any, train_rows: int) -> dict[str, Any]:
    """``summary.json``: what was trained, how, and how the loss went."""
    return {
        "base_model": section.base_model,
        "base_fingerprint": base.fingerprint,
        "sources": list(section.sources),
        "rows_available": train_rows,
        "rows_trained": sum(result.rows.rows.values()),
        "rows_by_decision": dict(sorted(result.rows.rows.items())),
        "target_tokens_by_decision": dict(sorted(result.rows.target_tokens.items())),
        "tokens": result.rows.tokens,
        "truncated_rows": result.rows.truncated,
        **result.record(section),
    }


def _flat_summary(train: Mapping[str, Any], evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The stage marker's flat summary (also logged to the tracker)."""
    out: dict[str, Any] = {
        "rows_trained": train["rows_trained"],
        "steps": train["steps"],
        "loss_first_epoch": train["epoch_losses"][0] if train["epoch_losses"] else None,
        "loss_last_epoch": train["epoch_losses"][-1] if train["epoch_losses"] else None,
        "train_seconds": train["seconds"],
        "resumed_from_step": train["resumed_from_step"],
        "strategy": train["training"]["strategy"],
    }
    for name in ("base", "student"):
        agreement = [
            v["teacher"]["accuracy"]
            for v in evaluation[name].values()
            if v["kind"] == "single_token" and v["teacher"].get("accuracy") is not None
        ]
        failures = [v["parse_failure_rate"] for v in evaluation[name].values() if v["kind"] == "generative"]
        out[f"{name}_teacher_accuracy"] = round(float(np.mean(agreement)), 4) if agreement else None
        out[f"{name}_parse_failure_rate"] = round(float(np.mean(failures)), 4) if failures else None
    return out


# ------------------------------------------------------------------------------------------------------ held-out
def _select_heldout(split: Any, limit: int | None, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Held-out rows per decision: at most ``limit`` per (decision, source), a seeded sample in dataset order."""
    by: dict[tuple[str, str], list[int]] = {}
    for i, (decision, source) in enumerate(zip(split["decision"], split["source"], strict=True)):
        by.setdefault((decision, source), []).append(i)
    rng = np.random.default_rng(seed)
    chosen: dict[str, list[int]] = {}
    for (decision, _), indices in sorted(by.items()):
        picked = indices if limit is None or len(indices) <= limit else sorted(rng.choice(indices, limit, False))
        chosen.setdefault(decision, []).extend(int(i) for i in picked)
    return {d: [split[i] for i in sorted(idx)] for d, idx in chosen.items()}


def _source_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {source: sum(r["source"] == source for r in rows) for source in SOURCES}


class _ReplayGenerator:
    """Stands in for the controller's generator so :class:`PromptedLMController` runs on given rendered prompts.

    ``render_chat`` returns the next queued prompt (the controller renders one message per prompt, in order), so
    the controller's own scoring, decoding settings, parsers and fallbacks apply to the rows' exact inputs. With
    ``replies`` set, ``generate`` answers from it (replies decoded beforehand in batches) instead of the model, and
    ``requests`` records what each ``generate`` call asked for."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.queue: list[str] = []
        self.replies: dict[tuple[str, str], Any] | None = None
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def load(self, prompts: Sequence[str]) -> None:
        """Queue the prompts the next controller call renders."""
        self.queue = list(prompts)

    def render_chat(self, messages: Any, system: str | None = None) -> str:
        """The next queued prompt (the controller's own rendering is replaced by the row's)."""
        if not self.queue:
            raise RuntimeError("the controller rendered more prompts than were queued")
        return self.queue.pop(0)

    def generate(self, prompts: Sequence[str], **kwargs: Any) -> list[Any]:
        """Recorded and answered from ``replies`` when set; else the model's ``generate``."""

        prompts = list(prompts)
        key = json.dumps(kwargs, sort_keys=True, default=list)
        self.requests.extend((p, kwargs) for p in prompts)
        if self.replies is None:
            return [SimpleNamespace(text="", finish_reason="stop") for _ in prompts]
        return [self.replies[(p, key)] for p in prompts]

    def next_token_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> np.ndarray:
        """The model's next-token log-probs."""
        return self.generator.next_token_logprobs(prompts, options)


def _score_model(
    ctx: StageContext, model: Any, heldout: Mapping[str, list[dict[str, Any]]], device: str, batch_size: int
) -> dict[str, dict[str, Any]]:
    """Per decision, the held-out figures of ``model`` read as the controller (module doc)."""

    generator = build_generator(
        model, device=device, batch_size=batch_size, cache=False, counter=ctx.counter, seed=ctx.config.seed
    )
    shim = _ReplayGenerator(generator)
    controller = PromptedLMController(shim, score_mode="logprobs")
    out: dict[str, dict[str, Any]] = {}
    for decision, rows in heldout.items():
        before = ctx.counter.snapshot()
        started = time.perf_counter()
        if decision in YES_NO or decision == "channel_weights":
            predictions, scores, failed = _single_token(controller, shim, decision, rows)
            figures = _single_token_figures(decision, rows, predictions, scores)
            replies = predictions
        else:
            replies, failed = _generative(controller, shim, generator, decision, rows, batch_size)
            figures = _generative_figures(rows, replies)
        seconds = time.perf_counter() - started
        spent = ctx.counter.since(before)
        n = max(len(rows), 1)
        out[decision] = {
            "kind": "single_token" if decision in YES_NO or decision == "channel_weights" else "generative",
            **figures,
            "parse_failures": int(sum(failed)),
            "parse_failure_rate": float(np.mean(failed)) if failed else 0.0,
            "seconds_per_decision": seconds / n,
            "prompt_tokens_per_decision": spent.prefill_tokens / n,
            "generated_tokens_per_decision": spent.decoded_tokens / n,
            "tokens_per_decision": (spent.prefill_tokens + spent.decoded_tokens) / n,
            "examples": [
                {"target": r["target"], "reply": str(reply)[:300], "source": r["source"]}
                for r, reply in list(zip(rows, replies, strict=True))[:3]
            ],
        }
    del generator, shim, controller
    gc.collect()
    return out


def _single_token(
    controller: Any, shim: _ReplayGenerator, decision: str, rows: Sequence[Mapping[str, Any]]
) -> tuple[list[str | None], list[float], list[bool]]:
    """(predicted answer or None, score, unreadable) per row: p(Yes) for yes / no decisions (one batched call of
    the controller's scorer), the intent distribution for channel_weights (one controller call per row, as the
    controller makes them)."""

    if decision == "channel_weights":
        predictions, scores, failed = [], [], []
        for row in rows:
            shim.load([row["input"]])
            result = controller.channel_weights("", CHANNELS)
            if result.fallback or not result.intents:
                predictions.append(None)
                scores.append(math.nan)
                failed.append(True)
                continue
            best = max(INTENTS, key=lambda i: result.intents[i])
            predictions.append(LETTERS[INTENTS.index(best)])
            scores.append(float(result.intents[best]))
            failed.append(False)
        return predictions, scores, failed
    shim.load([row["input"] for row in rows])
    # coverage is scored by the same next-token read as relevance; refine gives one verdict per prompt
    method = controller.completeness if decision == "completeness" else controller.refine
    results = method("", [""] * len(rows))
    if shim.queue:
        raise RuntimeError(f"{decision}: the controller did not render every queued prompt")
    predictions, scores, failed = [], [], []
    for result in results:
        if result.fallback:
            predictions.append(None)
            scores.append(math.nan)
            failed.append(True)
        else:
            predictions.append("Yes" if result.score >= 0.5 else "No")
            scores.append(float(result.score))
            failed.append(False)
    return predictions, scores, failed


def _compress_budget(prompt: str) -> int:
    """The token budget the controller gave a compress prompt (its word budget / 0.75; 64 when absent)."""
    match = _BUDGET.search(prompt)
    return max(1, math.ceil(int(match.group(1)) / 0.75)) if match else 64


def _call_decision(controller: Any, decision: str, prompt: str) -> Any:
    """One controller call of a generative ``decision`` (its own decoding settings and parser)."""
    if decision == "enrich":
        return controller.enrich("")
    if decision == "elements":
        return controller.elements("")
    if decision == "follow_up":
        return controller.follow_up("", "", [])
    return controller.compress("", None, "", None, _compress_budget(prompt))


def _generative(
    controller: Any,
    shim: _ReplayGenerator,
    generator: Any,
    decision: str,
    rows: Sequence[Mapping[str, Any]],
    batch_size: int,
) -> tuple[list[str], list[bool]]:
    """(raw reply, parse failed) per row: a dry pass learns what the controller asks the model for each row, the
    replies are decoded in batches, and a second pass runs the controller's parser on them."""
    shim.replies, shim.requests = None, []
    for row in rows:  # dry: record each row's prompt and decoding settings
        shim.load([row["input"]])
        _call_decision(controller, decision, row["input"])
    groups: dict[str, list[str]] = {}
    settings: dict[str, dict[str, Any]] = {}
    for prompt, kwargs in shim.requests:
        key = json.dumps(kwargs, sort_keys=True, default=list)
        groups.setdefault(key, []).append(prompt)
        settings[key] = kwargs
    replies: dict[tuple[str, str], Any] = {}
    for key, prompts in groups.items():
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            for prompt, gen in zip(chunk, generator.generate(chunk, **settings[key]), strict=True):
                replies[(prompt, key)] = gen
    shim.replies = replies
    texts, failed = [], []
    for row in rows:
        shim.load([row["input"]])
        result = _call_decision(controller, decision, row["input"])
        texts.append(str(result.raw))
        failed.append(bool(result.fallback))
    shim.replies = None
    return texts, failed


def _f1(predictions: Sequence[str | None], targets: Sequence[str], positive: str | None) -> float | None:
    """F1 of the ``positive`` class, or macro-F1 over the target classes when ``positive`` is None."""
    classes = [positive] if positive is not None else sorted(set(targets))
    values = []
    for cls in classes:
        tp = sum(p == cls and t == cls for p, t in zip(predictions, targets, strict=True))
        fp = sum(p == cls and t != cls for p, t in zip(predictions, targets, strict=True))
        fn = sum(p != cls and t == cls for p, t in zip(predictions, targets, strict=True))
        values.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(values)) if values else None


def _single_token_figures(
    decision: str, rows: Sequence[Mapping[str, Any]], predictions: Sequence[str | None], scores: Sequence[float]
) -> dict[str, Any]:
    """Accuracy / F1 against the teacher rows and the gold rows (and the p(Yes) rank correlation with the teacher)."""

    out: dict[str, Any] = {}
    positive = None if decision == "channel_weights" else "Yes"
    for source in SOURCES:
        idx = [i for i, r in enumerate(rows) if r["source"] == source]
        preds = [predictions[i] for i in idx]
        targets = [str(rows[i]["target"]) for i in idx]
        figures: dict[str, Any] = {"n": len(idx)}
        if idx:
            figures["accuracy"] = float(np.mean([p == t for p, t in zip(preds, targets, strict=True)]))
            figures["f1"] = _f1(preds, targets, positive)
            if source == "teacher" and positive is not None:
                pairs = [(scores[i], float(rows[i]["score"])) for i in idx]
                pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
                rho = spearman([a for a, _ in pairs], [b for _, b in pairs]) if len(pairs) >= 2 else math.nan
                figures["spearman"] = None if math.isnan(rho) else float(rho)
        else:
            figures.update(accuracy=None, f1=None)
        out[source] = figures
    return out


def _generative_figures(rows: Sequence[Mapping[str, Any]], replies: Sequence[str]) -> dict[str, Any]:
    """Token F1 of the replies to the teacher's (and gold) targets."""

    out: dict[str, Any] = {}
    for source in SOURCES:
        values = [
            token_f1(reply, [str(r["target"])]) for r, reply in zip(rows, replies, strict=True) if r["source"] == source
        ]
        out[source] = {"n": len(values), "token_f1": float(np.mean(values)) if values else None}
    return out
