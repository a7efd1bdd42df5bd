"""Stage ``distill_data``: the training data of a distilled InSemRAG controller (issue 14 item 2, spec §16).

For the first ``distill_data.limit`` questions of ``distill_data.split`` (a training split) and, for the
``heldout`` split of the dataset, the first ``heldout_limit`` of ``heldout_split``:

* source ``teacher`` — InSemRAG answers each question with its controller a
  :class:`~workbench.distill.traces.RecordingController`: the prompted controller (same prompts, same parsing) over
  the teacher model (``distill_data.teacher``; null = the run's ``generator.model``), recording every decision's
  exact rendered input and the target read from the teacher's reply (Yes / No from p(Yes) ≥ 0.5 for refine,
  completeness and coverage; the most probable intent letter for the channel weights; the parsed reply otherwise).
  Replies the controller could not use (its fallbacks) are skipped and counted per decision, never trained on;
* source ``gold`` — :class:`~workbench.distill.gold.GoldLabeler`: refine, completeness, coverage and channel-weight
  labels derived from the question's gold passages and answers with InSemRAG's own view and fused retrieval, their
  inputs rendered by the controller's prompt code with the teacher's chat template (the run's generator's when the
  teacher is not a source).

InSemRAG runs with ``distill_data.insemrag`` (the keys of ``evaluate.options.insemrag``, checked by the same code;
the controller stays the prompted teacher) and the evaluate section's ``passage_chars`` and ``max_new_tokens``, so
the traces show the passages the evaluated method shows. Rows repeating a (decision, source, input) are dropped.

Outputs: ``traces/`` — the dataset (:mod:`workbench.distill.traces`: splits ``train`` / ``heldout``, columns
decision, source, question_id, input, target, single_token, score); ``summary.json`` — rows per split × decision ×
source, the single-token label balance, skipped (unusable) teacher replies and the replies recorded per decision,
the teacher (spec, resolved reference, fingerprint, score mode) and its cost per decision (controller calls, model
prompts, LM calls, prompt and generated tokens, seconds — cached generations counted as if run), the gold labeler's
counts, the InSemRAG settings and the seconds taken.

Errors: a teacher that cannot be loaded → :class:`AssetError` at ``distill_data.teacher``; a split with no rows →
:class:`DataError` (nothing is written).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from workbench.core.atomic import atomic_write_json
from workbench.core.errors import AssetError, ConfigError, DataError, WorkbenchError
from workbench.core.logs import track
from workbench.methods.base import Tools
from workbench.methods.registry import CONTROLLER_TOKENS, check_options
from workbench.stages.context import StageContext

__all__ = ["insemrag_parts", "load_teacher", "run", "validate_section"]

SOURCE_NAMES = ("teacher", "gold")


def insemrag_parts(options: Any) -> tuple[Any, dict[str, Any]]:
    """``(InSemRAGSettings, the prompted controller's options)`` from ``distill_data.insemrag``: checked by the
    method registry's own option checks (errors at ``distill_data.insemrag``); ``controller`` may only be
    ``prompted`` (the teacher is one) and the teacher's model is ``distill_data.teacher``, not ``controller_model``."""
    from workbench.methods.insemrag import InSemRAGSettings

    where = "distill_data.insemrag"
    if not isinstance(options, dict):
        raise ConfigError(f"must be a mapping of InSemRAG setting: value, got {options!r}", where)
    try:
        check_options(["insemrag"], {"insemrag": dict(options)})
    except ConfigError as exc:
        raise ConfigError(exc.what, where) from None
    rest = dict(options)
    controller = rest.pop("controller", "prompted")
    if controller != "prompted":
        raise ConfigError(
            f"the teacher is the prompted controller: controller must be prompted, got {controller!r}",
            f"{where}.controller",
        )
    if rest.pop("controller_model", None) is not None:
        raise ConfigError("the teacher's model is set by distill_data.teacher", f"{where}.controller_model")
    controller_options: dict[str, Any] = {key: rest.pop(key) for key in CONTROLLER_TOKENS if key in rest}
    try:
        settings = InSemRAGSettings(**rest).validate()
    except ConfigError as exc:
        raise ConfigError(exc.what, where) from None
    keep = getattr(settings, "keep_threshold", None)
    if keep is not None:  # InSemRAG requires its LM controller to filter at its own keep_threshold
        controller_options["keep_threshold"] = keep
    return settings, controller_options


def validate_section(section: Any) -> None:
    """Check ``distill_data``: at least one source, none twice; two different splits; a teacher reference that is
    null or a non-empty string; valid InSemRAG options (:func:`insemrag_parts`). Raises a one-line ConfigError."""
    sources = list(section.sources)
    if not sources or len(set(sources)) != len(sources) or not set(sources) <= set(SOURCE_NAMES):
        raise ConfigError(
            f"give one or both of {', '.join(SOURCE_NAMES)}, once each, got {sources}", "distill_data.sources"
        )
    if section.split == section.heldout_split:
        raise ConfigError(
            f"the held-out traces must come from another split than the training ones ({section.split!r})",
            "distill_data.heldout_split",
        )
    if section.teacher is not None and not str(section.teacher).strip():
        raise ConfigError("give a model reference or null (the run's generator)", "distill_data.teacher")
    insemrag_parts(section.insemrag)


def load_teacher(ctx: StageContext) -> Any:
    """The teacher generator: the run's generator when ``distill_data.teacher`` is null or names the same weights as
    ``generator.model``, else a second generator built like the controller's
    (:meth:`~workbench.stages.context.Resources.controller_generator`: the generator section's device, dtype, batch
    size and cache; cached in the run's resources). Anything that fails is one :class:`AssetError` at
    ``distill_data.teacher``."""
    spec = ctx.config.distill_data.teacher
    if spec is None:
        return ctx.resources.generator()
    try:
        return ctx.resources.controller_generator(spec)
    except WorkbenchError as exc:
        detail = f"{exc.where}: {exc.what}" if exc.where else exc.what
        raise AssetError(f"cannot load the teacher {spec!r} ({detail})", "distill_data.teacher") from None


def _questions(qa: Any, split: str, limit: int | None) -> list[dict[str, Any]]:
    rows = qa[split]
    return list(rows.select(range(min(limit, len(rows))))) if limit is not None else list(rows)


def _teacher_info(ctx: StageContext, teacher: Any, recorder: Any) -> dict[str, Any] | None:
    if teacher is None:
        return None
    resolved = getattr(teacher, "resolved", None)
    return {
        "spec": ctx.config.distill_data.teacher or ctx.config.generator.model,
        "ref": getattr(resolved, "ref", None),
        "fingerprint": getattr(resolved, "fingerprint", None),
        "generator_fingerprint": getattr(teacher, "fingerprint", None),
        "source": getattr(resolved, "source", None),
        "score_mode": recorder.score_mode,
        "is_answering_model": teacher is ctx.resources.generator(),
    }


def _split_summary(rows: list[Any]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, dict[str, int]]]]:
    """Rows per decision × source, and the targets' counts of the single-token decisions per decision × source."""
    from workbench.distill.traces import DECISIONS

    counts: dict[str, dict[str, int]] = {}
    labels: dict[str, dict[str, dict[str, int]]] = {}
    for decision in DECISIONS:
        mine = [r for r in rows if r.decision == decision]
        counts[decision] = {source: sum(r.source == source for r in mine) for source in SOURCE_NAMES}
        if mine and mine[0].single_token:
            labels[decision] = {
                source: dict(sorted(Counter(r.target for r in mine if r.source == source).items()))
                for source in SOURCE_NAMES
            }
    return counts, labels


def run(ctx: StageContext) -> dict[str, Any]:
    """Record the teacher's decisions and build the gold labels over both splits; write ``traces/`` and
    ``summary.json`` (module doc)."""
    import datasets

    from workbench.backends.retrieval_engines import ENGINES
    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.distill.gold import GoldLabeler
    from workbench.distill.traces import DECISIONS, RecordingController, deduplicate, save_traces
    from workbench.methods.controller import HeuristicController
    from workbench.methods.insemrag import InSemRAG

    started = time.perf_counter()
    section = ctx.config.distill_data
    validate_section(section)  # load_recipe checked it too; a config built in code may not be
    settings, controller_options = insemrag_parts(section.insemrag)
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    for key in ("split", "heldout_split"):
        split = getattr(section, key)
        if split not in qa:
            raise ConfigError(f"split {split!r} not in the dataset (has: {', '.join(qa)})", f"distill_data.{key}")
    teacher = load_teacher(ctx) if "teacher" in section.sources else None  # fail before any work
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    evaluate = ctx.config.evaluate
    # InSemRAG builds its own view and retrievers in this process (it needs no judge); over the user's engine it
    # searches the engine's channels, reached through the run's retriever
    external = ENGINES[ctx.config.retrieval.backend].external
    tools = Tools(
        generator=ctx.resources.generator(),
        retriever=ctx.resources.retriever(corpus) if external else None,
        corpus=corpus,
        counter=ctx.counter,
        embedder=ctx.resources.embedder(),
        passage_chars=evaluate.passage_chars,
        max_new_tokens=evaluate.max_new_tokens,
    )
    recorder = RecordingController(teacher, **controller_options) if teacher is not None else None
    method = InSemRAG(tools, recorder if recorder is not None else HeuristicController(), settings)
    labeler = None
    if "gold" in section.sources:
        renderer = teacher if teacher is not None else tools.generator
        labeler = GoldLabeler(method, renderer, controller_options=controller_options, seed=section.seed)

    splits: dict[str, list[Any]] = {}
    summary_splits: dict[str, Any] = {}
    for name, source_split, limit in (
        ("train", section.split, section.limit),
        ("heldout", section.heldout_split, section.heldout_limit),
    ):
        questions = _questions(qa, source_split, limit)
        gold_rows: list[Any] = []
        for example in track(questions, f"distill_data: {name} traces ({source_split})", total=len(questions)):
            qid = str(example["id"])
            if recorder is not None:
                with recorder.question(qid):
                    method.answer(dict(example))  # InSemRAG reads the question only
            if labeler is not None:
                extra = recorder.listed_elements.get(qid, []) if recorder is not None else []
                gold_rows += labeler.label(example, qid, extra)
        records = recorder.drain() if recorder is not None else []
        teacher_rows = [r.row("teacher") for r in records if r.usable]
        rows = deduplicate([*teacher_rows, *gold_rows])
        if not rows:
            raise DataError(
                f"no trace rows for the {name!r} split ({len(questions)} questions of {source_split!r}, sources "
                f"{', '.join(section.sources)}): raise the limit or add a source",
                "distill_data",
            )
        splits[name] = rows
        counts, labels = _split_summary(rows)
        made = Counter(r.decision for r in records)
        skipped = Counter(r.decision for r in records if not r.usable)
        summary_splits[name] = {
            "from": source_split,
            "questions": len(questions),
            "rows": len(rows),
            "duplicates_dropped": len(teacher_rows) + len(gold_rows) - len(rows),
            "by_decision": counts,
            "labels": labels,
            "teacher_replies": {d: made.get(d, 0) for d in DECISIONS},
            "skipped": {d: skipped.get(d, 0) for d in DECISIONS},
        }
        ctx.log.info(
            "%s: %d rows from %d questions (%d unusable teacher replies skipped)",
            name,
            len(rows),
            len(questions),
            sum(skipped.values()),
        )
    fingerprint = save_traces(splits, ctx.out_dir / "traces")
    n_questions = sum(s["questions"] for s in summary_splits.values())
    costs = recorder.costs if recorder is not None else {}
    seconds = time.perf_counter() - started
    atomic_write_json(
        ctx.out_dir / "summary.json",
        {
            "sources": list(section.sources),
            "splits": summary_splits,
            "teacher": _teacher_info(ctx, teacher, recorder),
            "teacher_cost": costs,
            "teacher_cost_per_question": {
                d: {k: v / n_questions for k, v in c.items()} for d, c in costs.items() if n_questions
            },
            "gold": dict(sorted(labeler.stats.items())) if labeler is not None else None,
            "insemrag": settings.to_dict(),
            "controller_options": controller_options,
            "passage_chars": evaluate.passage_chars,
            "seed": section.seed,
            "fingerprint": fingerprint,
            "seconds": seconds,
        },
    )
    return {
        "rows_train": len(splits["train"]),
        "rows_heldout": len(splits["heldout"]),
        "skipped": sum(sum(s["skipped"].values()) for s in summary_splits.values()),
        "questions": n_questions,
    }
