"""Stage ``evaluate``: run any subset of the methods over a split; save every trace; compare them.

For each method in ``evaluate.methods`` (built by :func:`workbench.methods.registry.build_method` with the options in
``evaluate.options[<method>]``; all of them before any question is answered, so a bad option fails early) the stage
answers the first ``evaluate.limit`` questions of ``evaluate.split`` and scores each answer (EM, token F1,
containment against the gold aliases) with :func:`workbench.methods.evaluation.evaluate_built`, the code the
hyperparameter study evaluates its trials with. The generation cache is off while the methods answer
(``evaluate.reuse_generations: false``, the default): a method whose answers earlier stages already generated would
otherwise show zero LM calls and near-zero latency. With it on, the work the cache saved is reported apart
(``cached_lm_calls``, ``cached_tokens``) and ``lm_calls_uncached`` / ``tokens_uncached`` are the cold-cache costs.
Outputs:

* ``traces/`` — an HF dataset, one row per (method, question) (:func:`~workbench.methods.evaluation.trace_record`):
  the answer, its scores, whether retrieval reached the prompt, the decoding mode, fallbacks, the summed cost (LM
  calls, prefill / decoded / scored tokens, NLI pairs, retrieval calls, the cached LM calls and prefill / decoded
  tokens, seconds), ``tokens``, ``cached_tokens``, ``lm_calls_uncached``, ``tokens_uncached`` and the full trace as
  JSON (``trace``: every step with its cost and decisions);
* ``summary.json`` — per method (:func:`~workbench.methods.evaluation.summary_metrics`): mean EM / F1 / containment,
  retrieval rate, LM calls, tokens, prompt (prefill) and generated (decoded) tokens, NLI pairs, cached LM calls and
  tokens and the uncached totals per question, retrieval calls (RC) per question, latency p50 / p95, fallbacks, and
  with ``no_rag`` among the methods ``decision_accuracy`` (:func:`~workbench.methods.evaluation.decision_accuracies`:
  the retrieve decision against "no_rag's closed-book answer is wrong"), with ``intervals``: a 90% BCa interval of
  each of EM / F1 / containment / decision accuracy (:func:`~workbench.stages.evaluate.intervals.quality_intervals`;
  ``bootstrap`` says how many resamples); and ``options`` (each method's options
  as it ran: :func:`evaluated_options`) and the decision policy's τ (:func:`evaluated_learned`; under each key of
  :func:`~workbench.methods.registry.learned_keys` for ``tau``, ``<method>_tau`` of D²-RAG) — the export
  builds the bundle with the same two functions, and ``bench_runtime`` checks the bundle against these records —
  and ``parameters_sha256`` (:func:`~workbench.bundle.learned.parameters_digests`: per method, a digest of those
  options and τ), which the export recomputes for what it ships and refuses to ship anything else.

``lm_calls`` counts prompts run through the model (:class:`~workbench.backends.cost.CostCounter`), not forward
batches, so a method's LM calls per question do not depend on ``batch_questions`` or ``generator.batch_size``.

A method with learned parts (its spec's ``requires``) reads them from the run's ``calibrate`` and ``classify``
outputs (calibrators, the chosen classifier, its τ) and, when the run has ``fit_utility``, the learned utility
predictor; D²-RAG without it uses the oracle utility (ΔSePer, gold-dependent), and the summary says so (the method's
``evaluation_note``).

InSemRAG's controller may run on a model of its own (``controller_model``): a second generator from
:meth:`~workbench.stages.context.Resources.controller_generator`, counted in the same cost counter and, like the
answering generator, without the generation cache while the methods answer. ``controller: distilled`` (the default of
``insemrag_distilled``) without a ``controller_model`` reads the run's ``distill`` output (``adapter.json``), so
``insemrag`` and ``insemrag_distilled`` side by side compare the prompted controller with the distilled one. The
summary's notes say which controller each InSemRAG variant ran and on which model.
"""

from __future__ import annotations

import math
from typing import Any

from workbench.bundle.learned import (  # what the run learned, read below the stages (the export reads the same)
    config_params_tau,
    evaluated_config,
    evaluated_learned,
    load_learned,
    parameters_digests,
)
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.core.formatting import counted
from workbench.methods.base import Tools
from workbench.methods.evaluation import decision_accuracies, evaluate_built, summarise
from workbench.methods.registry import build_method, learned_keys
from workbench.metrics.bootstrap import LEVEL, N_RESAMPLES
from workbench.stages.context import StageContext
from workbench.stages.evaluate.intervals import quality_intervals


def run_learned(ctx: StageContext, *, with_study: bool = True) -> Any:
    """:func:`load_learned` from the stage outputs the run has (a study's D²-RAG τ only ``with_study``)."""
    inputs = ctx.inputs
    return load_learned(
        inputs.get("calibrate"),
        inputs.get("classify"),
        inputs.get("fit_utility"),
        inputs.get("collect"),
        inputs.get("study") if with_study else None,
    )


def method_config(ctx: StageContext, name: str) -> Any:
    """Method ``name``'s typed config in this run (:func:`evaluated_config`: the recipe's options, the run's study and
    the ``evaluate.params`` files laid over them), configured once."""
    return evaluated_config(ctx.config, name, ctx.inputs.get("study"))


def params_tau(ctx: StageContext) -> float | None:
    """D²-RAG's τ from the last ``evaluate.params`` file that gives one (None: none does)."""
    return config_params_tau(ctx.config)


def build_tools(
    ctx: StageContext, corpus: Any, *, passage_chars: int | None = None, max_new_tokens: int | None = None
) -> Any:
    """The run's Tools: generator, retriever over ``corpus``, NLI judge, embedder, shared counter.

    ``passage_chars`` / ``max_new_tokens`` default to the evaluate section's (the methods' prompts and answers).
    """

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


def run(ctx: StageContext) -> dict[str, Any]:
    """Answer the split with every selected method; write the traces dataset and the summary."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.evaluate
    section.method_configs()  # configured when the recipe loaded (the same instances); a config built in code: now
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split {section.split!r} not in the dataset (has: {', '.join(qa)})", "evaluate.split")
    rows = qa[section.split]
    rows = list(rows.select(range(min(section.limit, len(rows))))) if section.limit is not None else list(rows)
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    tools = build_tools(ctx, corpus)
    learned = evaluated_learned(ctx.config, ctx.inputs.get)
    # each method's typed config: the recipe's, configured again only where the study or a params file set a value
    configs = {name: method_config(ctx, name) for name in section.methods}
    options = {name: config.given for name, config in configs.items()}
    methods = {}  # all built first: a bad option fails before any question is answered
    for name in section.methods:
        methods[name] = build_method(
            name,
            tools,
            configs[name],
            learned,
            utility_fallback="oracle",
            controller_generator=ctx.resources.controller_generator,
            distilled_adapter=ctx.inputs.get("distill"),
        )
    generators = _generators(tools, methods)
    saved_caches = [g.cache for g in generators]
    if not section.reuse_generations:  # each method pays for its own generations: comparable cost and latency
        for generator in generators:
            generator.cache = None
    try:
        results = _answer_all(ctx, methods, rows)
    finally:
        for generator, cache in zip(generators, saved_caches, strict=True):
            generator.cache = cache
    records = [record for result in results for record in result.records]
    datasets.Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "traces"))
    summary = summarise(records)  # the same as each result's summary, keyed in the recipe's order
    for name, value in (decision_accuracies(records) or {}).items():  # only when no_rag answered: it gives the label
        summary[name]["decision_accuracy"] = value
    for name, intervals in quality_intervals(records, seed=ctx.config.seed).items():
        summary[name]["intervals"] = intervals
    notes = _notes(methods)
    atomic_write_json(
        ctx.out_dir / "summary.json",
        {
            "split": section.split,
            "questions": len(rows),
            "methods": summary,
            "order": list(summary),  # the recipe's order (the JSON keys are sorted)
            "notes": notes,
            "bootstrap": {"draws": N_RESAMPLES, "level": LEVEL},  # of each method's "intervals"
            "reuse_generations": section.reuse_generations,
            "options": options,  # what each method ran with (study and evaluate.params laid over the recipe's)
            **{key: learned.tau if learned is not None else None for key in learned_keys("tau")},
            # the digest of each method's decision parameters: the export refuses to ship others
            "parameters_sha256": parameters_digests(options, learned.tau if learned is not None else None),
        },
    )
    return {f"{m}_contains": round(v["contains"], 4) for m, v in summary.items() if not math.isnan(v["contains"])} | {
        "questions": len(rows)
    }


def _answer_all(ctx: StageContext, methods: dict[str, Any], rows: list[dict[str, Any]]) -> list[Any]:
    """Every method answers ``rows`` in batches (a progress bar each): one
    :class:`~workbench.methods.evaluation.MethodEvaluation` per method, in ``methods``' order."""

    results = []
    for name, method in methods.items():
        result = evaluate_built(name, method, rows, batch_questions=ctx.config.evaluate.batch_questions)
        ctx.log.info("%s: %s in %.1f s", name, counted(len(rows), "question"), result.seconds)
        results.append(result)
    return results


def _generators(tools: Any, methods: dict[str, Any]) -> list[Any]:
    """Every distinct generator the methods call: the answering one, then each controller's own (InSemRAG)."""
    found = [tools.generator]
    for method in methods.values():
        generator = getattr(getattr(method, "controller", None), "generator", None)
        if generator is not None and all(generator is not g for g in found):
            found.append(generator)
    return found


def _notes(methods: dict[str, Any]) -> dict[str, str]:
    """The summary's notes: which controller each InSemRAG variant ran with, and what a method says of its own run
    (its ``evaluation_note``: D²-RAG's gold-using utility, when it decoded with one)."""
    notes: dict[str, str] = {}
    for name, method in methods.items():
        info = getattr(method, "controller_info", None)
        if info is not None:
            where = "no model" if info["model"] is None else f"model {info['model']}"
            notes[name] = f"{info['name']} controller, {'the answering model' if info['answering_model'] else where}"
    for name, method in methods.items():
        note = getattr(method, "evaluation_note", None)
        if isinstance(note, str):
            notes[name] = note
    return notes
