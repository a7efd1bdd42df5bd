"""Stages ``bench_features`` and ``report_bench_features``: the cost of collecting the 18 D²-RAG features, and the
attention recorder's peak memory.

The same questions, generator and NLI judge, measured several ways (no generation or embedding cache anywhere, so
nothing is reused by accident; costs from one :class:`~workbench.backends.cost.CostCounter`):

* **workbench** — one :func:`~workbench.uncertainty.calculators.compute_stats` call for all features: every stat
  computed once per question, batched over questions, one NLI matrix shared by every graph feature;
* **workbench core** — the same without the features that prompt the model themselves
  (:data:`~workbench.bench.features.report.SELF_PROMPTING`);
* **per-feature library** — the way a per-feature library (TruthTorchLM-style) works: one question and one feature
  at a time, each feature generating its own greedy answer, samples and NLI matrix, and N samples re-encoding the
  prompt N times (what HF ``generate(num_return_sequences=N)`` does);
* **per feature, workbench engine** — one ``compute_stats`` call per feature, batched over questions with shared
  prefill: isolates what sharing stats across features saves;
* **bare generation** — the engine's greedy answer and N samples only (the floor any sampling-based method pays);
* **naive bare generation** — the same answers from plain transformers ``model.generate`` one question at a time
  (:func:`naive_generate`): what the peer libraries pay for them.

Fair timing (:func:`measure_ways`): every way runs once untimed first (warm-up of every code path it uses: sampling
with hidden states, attention, NLI, embedding, HF ``generate``); the bare, naive and workbench ways are then timed
``bench_features.repeats`` times in rotated order, each feature alone ``per_feature_repeats`` times with the two
per-feature ways alternating; medians are reported with their min–max spread.

The workbench way is metered (:class:`~workbench.uncertainty.stat_costs.StatCostMeter`): ``workbench_components``
holds, per stats-graph component, the median of its wall seconds and counts over the timed runs — where the time of
the 18 features goes beyond the bare generation (:func:`median_components`).

Token-forwards = prefill + decoded + teacher-forced (scored) tokens. Targets (issue 15,
:data:`~workbench.bench.features.report.TARGETS`): per-feature library / workbench ≥ 5x in token-forwards, NLI pairs
and wall time; workbench / bare ≤ 2.0x, workbench core / bare ≤ 1.15x, workbench / naive bare ≤ 1.0x (wall time).
``lars`` is costed as the greedy answer with its log-probs (its fitted scorer is a dot product; collect fits it on
labelled data).

A second part, ``attention_memory`` (``bench_features.parts``; :mod:`workbench.bench.features.attention_memory`),
measures the peak memory of a prefill under the attention recorder, before and after it read only the rows the
feature reads, each way in a fresh process, on a random model of the shape ``bench_features.attention_memory``
gives (Llama-3.2-1B's by default). ``report_bench_features`` writes the report
(:mod:`workbench.bench.features.report`): the sections of the parts measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from workbench.backends.cost import CostCounter
from workbench.backends.factory import build_embedder, build_generator
from workbench.backends.lora import resolve_model
from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.backends.prompts import encode
from workbench.bench.features.attention_memory import measure_attention_memory
from workbench.bench.features.report import SELF_PROMPTING, write_feature_cost_report
from workbench.bench.features.settings import validate_section
from workbench.bench.harness import Measured, measure, thread_counts
from workbench.bench.report import write_bench_report
from workbench.core.atomic import atomic_write_json
from workbench.core.logs import track
from workbench.core.memory import megabytes
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import build_judge
from workbench.uncertainty.calculators import ANSWER_SYSTEM, UNAVAILABLE_STATS, StatSettings, compute_stats
from workbench.uncertainty.features import required_stats
from workbench.uncertainty.stat_costs import StatCostMeter


def _forwards(cost: Any) -> int:
    """The token positions the model actually computed: prompt, decoded and scored tokens, less the prompt prefixes
    the engine encoded once for several rows (``prefix_reused_tokens``)."""
    return int(cost.prefill_tokens + cost.decoded_tokens + cost.scored_tokens - cost.prefix_reused_tokens)


def _costing(counter: Any, fn: Callable[[], Any]) -> Callable[[], dict[str, float]]:
    """``fn`` as a way of the harness: it returns what one call cost (``counter``'s counts, the harness its time)."""

    def way() -> dict[str, float]:
        before = counter.snapshot()
        fn()
        return _costs(counter.since(before))

    return way


def _costs(cost: Any) -> dict[str, float]:
    return {
        "token_forwards": _forwards(cost),
        "prefix_reused_tokens": cost.prefix_reused_tokens,
        "lm_calls": cost.lm_calls,
        "nli_pairs": cost.nli_pairs,
        "embed_texts": cost.embed_texts,
    }


def _median_costs(measured: Measured, way: str) -> dict[str, Any]:
    """The median of each cost over the timed runs of one way, with the wall-time spread.

    Counts (token-forwards, calls, pairs) are the same in every run (seeded sampling, no cache), so their median is
    that value; ``seconds`` is the median wall time, ``seconds_min`` / ``seconds_max`` its spread and
    ``seconds_runs`` every run's time, in the order measured.
    """
    costs = measured.values(way)
    times, timing = measured.seconds(way), measured.spread(way)
    out: dict[str, Any] = {"seconds": timing.median}
    out.update({key: statistics.median(cost[key] for cost in costs) for key in costs[0]})
    out.update(seconds_min=timing.low, seconds_max=timing.high, seconds_runs=times)
    return out


def measure_ways(counter: Any, ways: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, Any]]:
    """Warm up every way once (untimed: every code path the ways use, hidden states, NLI, embedding...), then time
    ``repeats`` rounds of all of them in rotated order (:func:`workbench.bench.harness.measure`); the median of each
    cost. Returns :func:`_median_costs` per way. Raises ``ValueError`` for ``repeats`` < 1.
    """
    measured = measure({name: _costing(counter, fn) for name, fn in ways.items()}, repeats)
    return {name: _median_costs(measured, name) for name in ways}


def naive_generate(
    generator: Any,
    prompts: list[str],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    stop: tuple[str, ...],
    seed: int = 0,
) -> None:
    """The greedy answer + N samples the naive way, as peer libraries get them: plain transformers ``generate``.

    One question at a time: ``model.generate`` greedy, then ``model.generate(do_sample=True,
    num_return_sequences=samples)`` at ``temperature`` (top-k and top-p off, as in the engine), both with the same
    ``max_new_tokens`` and ``stop`` strings as the engine. Transformers encodes the prompt once per returned
    sequence and keeps finished sequences in the batch until the last one ends, and so does the count:
    ``prefill_tokens`` += prompt tokens × (1 + N), ``decoded_tokens`` += the positions the loop computed;
    ``lm_calls`` / ``lm_batches`` += 2 per question (the generator's counter). The global torch RNG is seeded per
    question from ``seed``, so repeated runs draw the same samples.
    """
    import torch

    model, tokenizer, counter = generator.model, generator.tokenizer, generator.counter
    device = next(model.parameters()).device
    common: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
    if stop:
        common.update(stop_strings=list(stop), tokenizer=tokenizer)
    with torch.inference_mode():
        for i, prompt in enumerate(prompts):
            ids = torch.tensor([encode(tokenizer, prompt)], dtype=torch.long, device=device)
            mask = torch.ones_like(ids)
            width = ids.shape[1]
            greedy = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, **common)
            torch.manual_seed(seed + i)
            sampled = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                num_return_sequences=samples,
                **common,
            )
            counter.lm_calls += 2
            counter.lm_batches += 2
            counter.prefill_tokens += width * (1 + samples)
            counter.decoded_tokens += (greedy.shape[1] - width) + samples * (sampled.shape[1] - width)


def stats_for(features: list[str]) -> set[str]:
    """The stats the stats graph computes for ``features`` (``lars``, whose fitted scorer the graph cannot produce,
    costed as the greedy answer's log-probs it reads)."""

    stats = required_stats(features)
    if stats & UNAVAILABLE_STATS:  # lars: its scorer reads the greedy answer's log-probs
        stats = (stats - UNAVAILABLE_STATS) | {"greedy_logprobs"}
    return stats


def collect_stats(
    rows: list[dict],
    features: list[str],
    *,
    generator: Any,
    judge: Any,
    embedder: Any,
    settings: Any,
    cost_meter: Any = None,
) -> list[dict[str, Any]]:
    """Every stat ``features`` need for ``rows`` by one :func:`~workbench.uncertainty.calculators.compute_stats` call
    (each stat once per question, batched over questions, one NLI matrix shared): the *workbench* way this stage
    times, and what ``bench_gpu`` times per batch size and through ``serve-model``. ``generator`` is any generator
    (in-process or served); ``settings`` a :class:`~workbench.uncertainty.calculators.StatSettings`; ``cost_meter``
    (optional) a :class:`~workbench.uncertainty.stat_costs.StatCostMeter` that receives each step's cost."""

    return compute_stats(
        rows,
        stats_for(features),
        generator=generator,
        judge=judge,
        embedder=embedder,
        settings=settings,
        cost_meter=cost_meter,
    )


def median_components(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per stats-graph component (:data:`~workbench.uncertainty.stat_costs.COMPONENTS`; bench.json sorts the keys, the
    report puts them back in the graph's order), the
    median of each of its :meth:`~workbench.uncertainty.stat_costs.StatCostMeter.totals` fields over ``runs`` (one
    meter's totals per timed run); a component missing from a run counts 0 there. ``{}`` for no run."""
    names = list(dict.fromkeys(name for run in runs for name in run))
    out: dict[str, dict[str, float]] = {}
    for name in names:
        fields = list(dict.fromkeys(key for run in runs for key in run.get(name, {})))
        out[name] = {key: statistics.median(run.get(name, {}).get(key, 0.0) for run in runs) for key in fields}
    return out


def uncached_scorers(ctx: StageContext, counter: Any, *, device: str | None = None) -> tuple[Any, Any]:
    """``(embedder, judge)`` of the recipe (``embedder``, ``nli`` sections) with no embedding cache and their costs
    counted in ``counter``, so every measured way pays for what it embeds and judges. ``device`` replaces
    ``embedder.device`` (the ``answer_equivalence`` judge runs where its embedder does); a model judge runs on
    ``nli.device``."""

    embedder = build_embedder(
        ctx.config.embedder.model,
        batch_size=ctx.config.embedder.batch_size,
        cache=False,
        counter=counter,
        device=device or ctx.config.embedder.device,
        device_key="embedder.device",
    )
    if ctx.config.nli.kind == "answer_equivalence":
        return embedder, AnswerEquivalenceJudge(embedder, counter=counter)
    judge = build_judge(ctx.config.nli.kind, ctx.resources, ctx.config.nli.model)
    judge.counter = counter
    return embedder, judge


class _ReencodingGenerator:
    """A generator proxy whose N samples re-encode the prompt N times (no shared prefill), as HF generate does, and
    whose attention diagonals come from a pass of their own (as the libraries read them), not from the decode."""

    records_answer_attention = False

    def __init__(self, generator: Any) -> None:
        self._generator = generator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    def generate(self, prompts: Any, **kwargs: Any) -> Any:
        return self._generator.generate(prompts, share_prefill=False, **kwargs)


def run(ctx: StageContext) -> dict[str, Any]:
    """Measure the parts ``bench_features.parts`` names — ``cost`` (:func:`measure_cost`) and ``attention_memory``
    (:func:`~workbench.bench.features.attention_memory.measure_attention_memory`) — and write ``bench.json``."""

    section = ctx.config.bench_features
    validate_section(section)
    threads = thread_counts()
    bench: dict[str, Any] = {"threads": threads["torch"], "thread_counts": threads, "parts": list(section.parts)}
    summary: dict[str, Any] = {}
    if "cost" in section.parts:
        cost, summary = measure_cost(ctx)
        bench.update(cost)
    if "attention_memory" in section.parts:
        memory = bench["attention_memory"] = measure_attention_memory(section.attention_memory, threads["torch"])
        summary.update(memory_summary(memory))
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    return summary


def memory_summary(memory: dict[str, Any]) -> dict[str, Any]:
    """The stage summary's figures of the attention-memory part, at its longest context: each way's rise over the
    RSS before the forward (MB; None where not run) and the ``before`` way's analytic extra memory."""

    longest = max(memory["contexts"], key=lambda row: row["context"])
    out: dict[str, Any] = {"memory_context": longest["context"]}
    for way, result in longest["ways"].items():
        rise = result["peak_bytes"] - result["base_bytes"] if "peak_bytes" in result else None
        out[f"memory_{way}_rise_mb"] = None if rise is None else megabytes(rise)
    out["memory_before_analytic_mb"] = megabytes(longest["before_analytic_bytes"])
    return out


def measure_cost(ctx: StageContext) -> tuple[dict[str, Any], dict[str, Any]]:
    """Measure the cost ways on ``bench_features.questions`` questions; return their record (``bench.json``'s cost
    part) and the stage summary's ratios."""
    import torch

    from workbench.data.dataset_store import load_saved_dataset_dict

    section, gen_cfg = ctx.config.bench_features, ctx.config.generator
    features = list(section.features)
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    rows = list(qa[section.split].select(range(min(section.questions, len(qa[section.split])))))
    counter = CostCounter()
    generator = build_generator(  # no generation cache: every way pays for what it generates
        resolve_model(gen_cfg.model),
        device=gen_cfg.device,
        dtype=gen_cfg.dtype,
        max_context=gen_cfg.max_context,
        batch_size=gen_cfg.batch_size,
        batch_rows=gen_cfg.batch_rows,
        cache=False,
        counter=counter,
        seed=ctx.config.seed,
        device_key="generator.device",
        prompt_format=gen_cfg.prompt_format,
    )
    embedder, judge = uncached_scorers(ctx, counter)  # no embedding cache: every way pays for what it embeds
    settings = StatSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        paraphrases=section.paraphrases,
    )

    def stats(names: list[str], batch: list[dict] | None = None, engine: Any = generator, meter: Any = None) -> None:
        collect_stats(
            rows if batch is None else batch,
            names,
            generator=engine,
            judge=judge,
            embedder=embedder,
            settings=settings,
            cost_meter=meter,
        )

    component_runs: list[dict[str, dict[str, float]]] = []  # the workbench way's cost per component, run by run

    def workbench() -> None:  # all the features, metered: where its time goes, component by component
        meter = StatCostMeter(counter, generator, judge, embedder)
        stats(features, meter=meter)
        component_runs.append(meter.totals())

    def library(name: str) -> None:
        for row in rows:
            stats([name], [row], _ReencodingGenerator(generator))

    def per_feature(name: str) -> None:
        stats([name])

    prompts = [  # the answering prompts compute_stats builds, for the two bare generations
        generator.build_prompt(r["question"], None, max_new_tokens=section.max_new_tokens, system=ANSWER_SYSTEM).text
        for r in rows
    ]

    def bare() -> None:
        common = {"max_new_tokens": section.max_new_tokens, "stop": settings.stop}
        generator.generate(prompts, temperature=0.0, **common)
        generator.generate(prompts, temperature=section.temperature, n=section.samples, **common)

    def naive() -> None:
        naive_generate(
            generator,
            prompts,
            samples=section.samples,
            temperature=section.temperature,
            max_new_tokens=section.max_new_tokens,
            stop=settings.stop,
            seed=ctx.config.seed,
        )

    core = [f for f in features if f not in SELF_PROMPTING]
    ways: dict[str, Callable[[], Any]] = {"bare": bare, "naive": naive, "workbench": workbench}
    if core and len(core) < len(features):
        ways["workbench_core"] = lambda: stats(core)
    results: dict[str, Any] = measure_ways(counter, ways, section.repeats)
    results["workbench_components"] = median_components(component_runs[1:])  # the first run is the warm-up
    keys = ("seconds", "token_forwards", "lm_calls", "nli_pairs", "embed_texts")
    per_way: dict[str, dict[str, Any]] = {"library": {}, "per_feature": {}}
    for i, name in enumerate(track(features, "bench (one feature at a time)", total=len(features))):
        # the two per-feature ways alternate which goes first, round by round and feature by feature; the warm-up of
        # the ways above ran every code path they use
        pair = {
            "library": _costing(counter, lambda name=name: library(name)),
            "per_feature": _costing(counter, lambda name=name: per_feature(name)),
        }
        ordered = dict(pair.items() if i % 2 == 0 else list(pair.items())[::-1])
        measured = measure(ordered, section.per_feature_repeats, warm=False)
        for way in pair:
            per_way[way][name] = _median_costs(measured, way)
    for way, per_name in per_way.items():
        results[way] = per_name
        results[f"{way}_total"] = {k: sum(v[k] for v in results[way].values()) for k in keys}
    work = results["workbench"]
    results["ratios"] = {
        f"{way}_over_workbench": {k: results[f"{way}_total"][k] / work[k] if work[k] else None for k in keys}
        for way in ("library", "per_feature")
    }
    for way, floor in (("workbench", "bare"), ("workbench", "naive"), ("workbench_core", "bare")):
        if way in results:
            results["ratios"][f"{way}_over_{floor}"] = {
                k: _ratio(results[way][k], results[floor][k]) for k in ("seconds", "token_forwards")
            }
    bench = {
        "generator": gen_cfg.model,
        "nli_judge": ctx.config.nli.kind,
        "threads": torch.get_num_threads(),
        "questions": len(rows),
        "features": features,
        "settings": {
            "samples": section.samples,
            "temperature": section.temperature,
            "max_new_tokens": section.max_new_tokens,
            "paraphrases": section.paraphrases,
            "split": section.split,
            "repeats": section.repeats,
            "per_feature_repeats": section.per_feature_repeats,
        },
        "core_features": core if "workbench_core" in results else None,
        **results,
    }
    ratios = results["ratios"]["library_over_workbench"]
    return bench, {
        "forwards_ratio": _rounded(ratios["token_forwards"]),
        "nli_ratio": _rounded(ratios["nli_pairs"]),  # None when no selected feature uses the NLI judge
        "time_ratio": _rounded(ratios["seconds"]),
        "over_bare_seconds": _rounded(results["ratios"]["workbench_over_bare"]["seconds"]),
        "over_naive_seconds": _rounded(results["ratios"]["workbench_over_naive"]["seconds"]),
    }


def _ratio(value: float, floor: float) -> float | None:
    return value / floor if floor else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``per_feature.png`` to the report directory
    (:func:`workbench.bench.features.report.write_feature_cost_report`)."""
    return write_bench_report(
        ctx,
        "bench_features",
        lambda bench, tmp: write_feature_cost_report(bench, tmp, name=ctx.config.name, command=ctx.rerun),
    )[0]
