"""Stage ``evaluate``: run any subset of the methods over a split; save every trace; compare them.

For each method in ``evaluate.methods`` (built by :func:`workbench.methods.registry.build_method` with the options in
``evaluate.options[<method>]``) the stage answers the first ``evaluate.limit`` questions of ``evaluate.split`` and
scores each answer (EM, token F1, containment against the gold aliases). The generation cache is off while the
methods answer (``evaluate.reuse_generations: false``, the default): a method whose answers earlier stages already
generated would otherwise show zero LM calls and near-zero latency. Outputs:

* ``traces/`` — an HF dataset, one row per (method, question): the answer, its scores, whether retrieval reached the
  prompt, the decoding mode, fallbacks, the summed cost (LM calls, prefill / decoded / scored tokens, NLI pairs,
  retrieval calls, seconds) and the full trace as JSON (``trace``: every step with its cost and decisions);
* ``summary.json`` — per method: mean EM / F1 / containment, retrieval rate, LM calls and tokens per question,
  latency p50 / p95, fallbacks.

``lm_calls`` counts prompts run through the model (:class:`~workbench.backends.cost.CostCounter`), not forward
batches, so a method's LM calls per question do not depend on ``batch_questions`` or ``generator.batch_size``.

D²-RAG reads its learned parts from the run's ``calibrate`` and ``classify`` outputs (calibrators, the chosen
classifier, its τ) and, when the run has ``fit_utility``, the learned utility predictor; without it, the oracle
utility (ΔSePer, gold-dependent) is used and the summary says so. ``d2rag_oracle`` always uses the oracle, so the
two side by side compare the learned utility with the paper's.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.stages.context import StageContext


def load_learned(
    calibrate_dir: Path | None,
    classify_dir: Path | None,
    utility_dir: Path | None,
    collect_dir: Path | None = None,
) -> Any:
    """D²-RAG's learned parts from the stage outputs that exist (None when classify did not run), each read through
    the learned-artifact protocol (:func:`workbench.methods.learned.load_learned`).

    ``collect_dir`` supplies the LARS scorer the collection fitted (``lars_scorer.json``), which the ``lars`` feature
    needs at answer time, and the stats settings the features were collected with (``metadata.json``)."""
    from workbench.methods.learned import CLASSIFIER_KINDS, LearnedParts, load_learned

    if calibrate_dir is None or classify_dir is None:
        return None
    calibrators = load_learned(calibrate_dir / "calibrators.json", expect={"calibrator_set"})
    selection = json.loads((classify_dir / "selection.json").read_text())
    chosen = selection["chosen"]
    classifier = load_learned(classify_dir / f"{chosen}.json", expect=CLASSIFIER_KINDS)
    threshold = selection["thresholds"]["LR" if chosen == "logistic" else "MLP"]
    utility = None
    if utility_dir is not None:
        utility = load_learned(utility_dir / "utility.json", expect={"ridge_utility"})
    lars, stats = None, None
    if collect_dir is not None:
        if (collect_dir / "lars_scorer.json").is_file():
            lars = load_learned(collect_dir / "lars_scorer.json", expect={"lars"})
        stats = collected_stats(collect_dir)
    rule = str(threshold.get("rule", ""))
    return LearnedParts.assemble(
        calibrators, classifier, threshold["tau"], utility=utility, lars_scorer=lars, stats=stats, tau_rule=rule
    )


def collected_stats(collect_dir: Path) -> Any:
    """The :class:`~workbench.uncertainty.calculators.StatSettings` a ``collect`` output was made with."""
    from workbench.uncertainty.calculators import StatSettings

    meta = json.loads((collect_dir / "metadata.json").read_text())
    return StatSettings.from_dict(meta["settings"], f"{collect_dir / 'metadata.json'}: settings")


def build_tools(
    ctx: StageContext, corpus: Any, *, passage_chars: int | None = None, max_new_tokens: int | None = None
) -> Any:
    """The run's Tools: generator, retriever over ``corpus``, NLI judge, embedder, shared counter.

    ``passage_chars`` / ``max_new_tokens`` default to the evaluate section's (the methods' prompts and answers).
    """
    from workbench.methods.base import Tools

    config = ctx.config
    return Tools(
        generator=ctx.resources.generator(),
        retriever=ctx.resources.retriever(corpus),
        corpus=corpus,
        counter=ctx.counter,
        judge=ctx.resources.judge(),
        embedder=ctx.resources.embedder(),
        passage_chars=passage_chars or config.evaluate.passage_chars,
        max_new_tokens=max_new_tokens or config.evaluate.max_new_tokens,
    )


def trace_record(method: str, example: dict[str, Any], answer: Any) -> dict[str, Any]:
    """One row of the traces dataset (scores against the gold aliases, totals, the trace as JSON)."""
    from workbench.metrics.qa import score_answer

    scores = score_answer(answer.text, list(example["answers"]), list(example.get("options") or []))
    trace = answer.trace.to_dict()
    totals = trace["totals"]
    return {
        "method": method,
        "id": str(example["id"]),
        "question": str(example["question"]),
        "answers": [str(a) for a in example["answers"]],
        "prediction": answer.text,
        "em": scores["em"],
        "f1": scores["f1"],
        "contains": scores["contains"],
        "retrieved": bool(trace["retrieved"]),
        "decoding": trace["decoding"],
        "fallbacks": int(trace["fallbacks"]),
        **{k: float(v) for k, v in totals.items()},
        "tokens": float(totals["prefill_tokens"] + totals["decoded_tokens"] + totals["scored_tokens"]),
        "trace": json.dumps(trace),
    }


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-method means and latency percentiles."""
    out: dict[str, Any] = {}
    for method in dict.fromkeys(r["method"] for r in records):
        rows = [r for r in records if r["method"] == method]
        seconds = np.asarray([r["seconds"] for r in rows])
        out[method] = {
            "n": len(rows),
            **{k: float(np.mean([r[k] for r in rows])) for k in ("em", "f1", "contains")},
            "retrieval_rate": float(np.mean([r["retrieved"] for r in rows])),
            "lm_calls": float(np.mean([r["lm_calls"] for r in rows])),
            "tokens": float(np.mean([r["tokens"] for r in rows])),
            "nli_pairs": float(np.mean([r["nli_pairs"] for r in rows])),
            "latency_p50": float(np.percentile(seconds, 50)),
            "latency_p95": float(np.percentile(seconds, 95)),
            "fallbacks": int(sum(r["fallbacks"] for r in rows)),
        }
    return out


def run(ctx: StageContext) -> dict[str, Any]:
    """Answer the split with every selected method; write the traces dataset and the summary."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.methods.registry import build_method, check_options

    section = ctx.config.evaluate
    check_options(section.methods, section.options)  # load_recipe checked it too; a config built in code may not be
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split {section.split!r} not in the dataset (has: {', '.join(qa)})", "evaluate.split")
    rows = qa[section.split]
    rows = list(rows.select(range(min(section.limit, len(rows))))) if section.limit is not None else list(rows)
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    tools = build_tools(ctx, corpus)
    learned = load_learned(
        ctx.inputs.get("calibrate"),
        ctx.inputs.get("classify"),
        ctx.inputs.get("fit_utility"),
        ctx.inputs.get("collect"),
    )
    methods = {}  # all built first: a bad option fails before any question is answered
    for name in section.methods:
        options = {"k": ctx.config.retrieval.k} if name in ("standard_rag", "oracle") else {}
        options.update(section.options.get(name, {}) or {})
        methods[name] = build_method(name, tools, options, learned, utility_fallback="oracle")
    records: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    saved_cache = tools.generator.cache
    if not section.reuse_generations:  # each method pays for its own generations: comparable cost and latency
        tools.generator.cache = None
    try:
        _answer_all(ctx, methods, rows, learned, records, notes)
    finally:
        tools.generator.cache = saved_cache
    datasets.Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "traces"))
    summary = summarise(records)
    atomic_write_json(
        ctx.out_dir / "summary.json",
        {
            "split": section.split,
            "questions": len(rows),
            "methods": summary,
            "order": list(summary),  # the recipe's order (the JSON keys are sorted)
            "notes": notes,
            "reuse_generations": section.reuse_generations,
        },
    )
    return {f"{m}_contains": round(v["contains"], 4) for m, v in summary.items() if not math.isnan(v["contains"])} | {
        "questions": len(rows)
    }


def _answer_all(
    ctx: StageContext,
    methods: dict[str, Any],
    rows: list[dict[str, Any]],
    learned: Any,
    records: list[dict[str, Any]],
    notes: dict[str, str],
) -> None:
    """Every method answers ``rows`` in batches (a progress bar each); one trace record per answer."""
    from workbench.core.logs import track

    section = ctx.config.evaluate
    for name, method in methods.items():
        if name == "d2rag" and learned is not None and learned.utility is None:
            notes[name] = "oracle utility (ΔSePer with the gold answer): no fit_utility stage in this run"
        if name == "d2rag_oracle":
            notes[name] = "the paper's utility, ΔSePer computed with the gold answer (evaluation only)"
        began = time.perf_counter()
        batches = [rows[i : i + section.batch_questions] for i in range(0, len(rows), section.batch_questions)]
        for batch in track(batches, f"evaluate ({name})", total=len(batches)):
            for example, answer in zip(batch, method.answer_many(batch), strict=True):
                records.append(trace_record(name, example, answer))
        ctx.log.info("%s: %d questions in %.1f s", name, len(rows), time.perf_counter() - began)
