"""Stage ``tune_reader``: a LoRA reader adapter for the answering model, trained on a training split, scored against
its base on a held-out split.

Reads the ``build_data`` stage's QA splits and corpus. Takes the first ``tune_reader.per_template`` questions of each
template of ``tune_reader.split`` (``train``), renders each in every mode of ``tune_reader.modes`` exactly as the answer
stage does (:func:`workbench.stages.answer.run.mode_contexts` and :func:`~workbench.stages.answer.run.answer_prompts`:
the run's retriever and ``retrieval.k``, ``answer.passage_chars``, the generator's prompt format and the answer
instruction) and trains a LoRA adapter on ``generator.model`` to reply with the gold answer
(:mod:`workbench.distill.reader`; :func:`workbench.distill.train.train_student`: peft in a Lightning module, loss on the
answer tokens, checkpoints in the run's scratch directory so an interrupted stage resumes from the newest one).

The adapter (``adapter.json`` + ``adapter.safetensors``, format ``answer-reader-v1``; beside them the same adapter for
peft — ``adapter_config.json`` + ``adapter_model.safetensors``, base named portably — and a model card ``README.md``,
:mod:`workbench.backends.peft_dir`) loads anywhere a generator reference does: ``generator.model=<this stage's output
directory>``, or ``PeftModel.from_pretrained(base, <this stage's output directory>)``. The embedded
``smollm2-reader`` is this stage's adapter from ``recipes/tune-reader.yaml``, copied into the package
(``workbench/embedded/smollm2-reader/``; docs/task.md).

**Scoring.** With ``tune_reader.eval_split`` set, base and tuned model answer the first ``eval_per_template`` questions
of each template of that split in every mode, through the answer stage's own code
(:func:`~workbench.stages.answer.run.answer_mode`: greedy, scored by containment / the option named), so the report
shows what training changed per mode and template.

**Refused** (at load: :func:`workbench.stages.tune_reader.settings.check` and the recipe's reader check):
``eval_split`` equal to ``split`` (scoring on the training questions,
as ``distill_data`` refuses its held-out split equal to its training split); and, for any recipe that builds data,
an answer-reader adapter as ``generator.model`` (embedded ``smollm2-reader``, an ``adapter.json`` or its directory,
and an adapter it was tuned from) whose training articles this data configuration puts outside ``train``
(:func:`check_reader_adapter`).

**The training-data record.** Every adapter this stage writes records under ``training_data`` the data it was trained
on: dataset, split, seed, fractions, OOD topics, the summaries' sha256 and the sha256 of the split's sorted article
ids (:func:`workbench.data.article_splits.training_data_record`), which the load check above reads.

**Outputs**: the adapter, ``summary.json`` (rows and tokens per mode, the loss curve, the settings, seconds, the
resume point) and ``heldout.json`` (``{"split", "base": <answer summary>, "tuned": <answer summary>}``, each as
:func:`workbench.stages.answer.run.summarise` returns it).
"""

from __future__ import annotations

import gc
import json
from typing import Any

from workbench.backends.lora import READER_FORMAT, save_lora_adapter
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, DataError
from workbench.data.article_splits import WIKI_DATASET, split_articles, training_data_record
from workbench.stages.context import StageContext
from workbench.stages.tune_reader.settings import validate_section

SECTION = "tune_reader"


def training_data(config: Any, split: str) -> dict[str, Any]:
    """The training-data record of an adapter trained on ``split`` of ``config``'s data
    (:func:`workbench.data.article_splits.training_data_record`; the recipe's ``seed`` is the data seed)."""

    return training_data_record(
        dataset=config.data.dataset,
        split=split,
        seed=config.seed,
        fractions=config.data.fractions,
        ood_topics=config.data.ood_topics,
    )


def _split(qa: Any, name: str, key: str, per_template: int | None) -> list[dict[str, Any]]:
    from workbench.stages.answer.run import select_rows

    if name not in qa:
        raise ConfigError(f"split '{name}' not in the dataset (has: {', '.join(qa)})", f"{SECTION}.{key}")
    return list(select_rows(qa[name], None, per_template))


def run(ctx: StageContext) -> dict[str, Any]:
    """Render the training rows, train, write the adapter, score base and tuned model (module doc)."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.distill.reader import reader_rows
    from workbench.distill.train import section_settings, train_in_stage
    from workbench.stages.answer.run import answer_prompts, mode_contexts

    section = ctx.config.tune_reader
    validate_section(section)
    if not section.modes:
        raise ConfigError("name at least one answer mode (closed_book, rag, gold)", f"{SECTION}.modes")
    lora, settings = section_settings(section, SECTION, ctx.config.seed)
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    questions = _split(qa, section.split, "split", section.per_template)
    heldout = _split(qa, section.eval_split, "eval_split", section.eval_per_template) if section.eval_split else []
    if not questions:
        raise DataError(f"split '{section.split}' has no questions to train on", f"{SECTION}.split")
    record = _training_record(ctx, questions)
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    generator = ctx.resources.generator()
    max_new = ctx.config.answer.max_new_tokens
    prompts = {}
    for mode in section.modes:
        contexts, _ = mode_contexts(ctx, mode, questions, corpus)
        prompts[mode] = [p.text for p in answer_prompts(generator, questions, contexts, max_new)]
    rows = reader_rows(questions, prompts)
    base = generator.resolved
    ctx.log.info(
        "tune_reader: %d questions x %d modes = %d rows on %s", len(questions), len(prompts), len(rows), base.ref
    )
    result = train_in_stage(ctx, base.path, rows, lora, settings)
    save_lora_adapter(
        result.model,
        ctx.out_dir,
        base_model=str(ctx.config.generator.model),
        base_fingerprint=base.fingerprint,
        settings={**lora.to_dict(), **result.adapter_training(), "split": section.split},
        decisions=list(prompts),
        state=result.state,
        adapter_format=READER_FORMAT,
        training_data=record,
        base=base,
    )
    summary = _train_summary(ctx, result, questions)
    del result
    gc.collect()
    atomic_write_json(ctx.out_dir / "summary.json", summary)
    out = {
        "questions": len(questions),
        "rows_trained": summary["rows_trained"],
        "steps": summary["steps"],
        "loss_first_step": summary["loss_curve"][0]["loss"] if summary["loss_curve"] else None,
        "loss_last_epoch": summary["epoch_losses"][-1] if summary["epoch_losses"] else None,
        "train_seconds": summary["seconds"],
    }
    if heldout:
        evaluation = _score(ctx, heldout, corpus, generator, list(prompts))
        atomic_write_json(ctx.out_dir / "heldout.json", evaluation)
        for name in ("base", "tuned"):
            for mode, figures in evaluation[name]["modes"].items():
                out[f"{name}_{mode}_contains"] = round(figures["contains"], 4)
    return out


def _training_record(ctx: StageContext, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """The adapter's training-data record (:func:`training_data`); DataError when a wiki-qa training question comes
    from an article outside the recorded split (the built data and the record would disagree)."""

    config = ctx.config
    record = training_data(config, config.tune_reader.split)
    if record["dataset"] == WIKI_DATASET:
        members = split_articles(
            record["split"], seed=record["seed"], fractions=record["fractions"], ood_topics=record["ood_topics"]
        )
        for question in questions:
            doc_ids = json.loads(question.get("metadata") or "{}").get("doc_ids", [])
            if not set(doc_ids) <= members:
                raise DataError(
                    f"question {question.get('id')} comes from articles outside the {record['split']} split that the"
                    " data configuration gives (rebuild the data: build_data)",
                    f"{SECTION}.split",
                )
    return record


def _score(ctx: StageContext, questions: list[dict[str, Any]], corpus: Any, base: Any, modes: list[str]) -> dict:
    """Base and tuned model answer ``questions`` in every mode through the answer stage's code."""
    from workbench.stages.answer.run import answer_mode, summarise

    tuned = ctx.resources.controller_generator(str(ctx.out_dir / "adapter.json"))
    evaluation: dict[str, Any] = {"split": ctx.config.tune_reader.eval_split, "questions": len(questions)}
    for name, generator in (("base", base), ("tuned", tuned)):
        ctx.log.info("tune_reader: the %s model answers %d %s questions", name, len(questions), evaluation["split"])
        records = [r for mode in modes for r in answer_mode(ctx, mode, questions, corpus, generator)]
        evaluation[name] = summarise(records)
    evaluation["tuned_fingerprint"] = tuned.resolved.fingerprint
    return evaluation


def _train_summary(ctx: StageContext, result: Any, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``: what was trained, how, and how the loss went."""
    from workbench.stages.answer.run import template_of

    section = ctx.config.tune_reader
    templates: dict[str, int] = {}
    for question in questions:
        templates[template_of(question)] = templates.get(template_of(question), 0) + 1
    return {
        "base_model": str(ctx.config.generator.model),
        "base_fingerprint": ctx.resources.generator().resolved.fingerprint,
        "split": section.split,
        "questions": len(questions),
        "questions_by_template": dict(sorted(templates.items())),
        "rows_trained": sum(result.rows.rows.values()),
        "rows_by_mode": dict(result.rows.rows),
        "tokens": result.rows.tokens,
        "truncated_rows": result.rows.truncated,
        "retrieval": {"retriever": ctx.config.retrieval.backend, "k": ctx.config.retrieval.k},
        "passage_chars": ctx.config.answer.passage_chars,
        **result.record(section),
    }
