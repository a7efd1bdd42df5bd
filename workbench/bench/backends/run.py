"""Stage ``bench_backends``: speed and quality of the backends, compared by ratios measured in one run.

1. Generator — greedy tokens/s, and N samples per prompt with one shared prefill versus N re-encodings of the
   prompt (same seeds, so the same tokens), for a short closed-book prompt and a long RAG prompt (5 passages).
2. NLI — accuracy and pairs/s of every judge on held-out NLI pairs and on short-answer pairs.
3. Retrieval — queries/s and recall@k of the gold passage for BM25, dense and hybrid over a corpus sample.

Timings use no generation cache; the three generation ways run once untimed, then ``bench.repeats`` rounds in rotated
order, each the median of its runs (:func:`workbench.bench.harness.measure`). Output: ``bench.json``.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.cost import CostCounter
from workbench.backends.factory import build_generator
from workbench.backends.lora import resolve_model
from workbench.backends.passage_table import passages_of
from workbench.backends.prompts import ANSWER_SYSTEM, format_passages
from workbench.backends.retrievers import BM25Retriever, DenseRetriever, HybridRetriever
from workbench.bench.backends.report import write_backends_report
from workbench.bench.harness import measure, thread_counts, timed
from workbench.bench.report import write_bench_report
from workbench.core.atomic import atomic_write_json
from workbench.data.corpus import corpus_sample
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import eval_sets, evaluate_judges


def _measure_prompts(generator, prompts: list[str], section) -> dict[str, Any]:
    """Greedy, shared-prefill sampling and re-encoded sampling over ``prompts``: times, tokens/s and ratios."""

    def run(**kwargs: Any) -> CostCounter:  # one run's cost: the same in every run (seeded, no cache)
        generator.counter = CostCounter()
        generator.generate(prompts, max_new_tokens=section.max_new_tokens, stop=None, **kwargs)
        return generator.counter

    sampling = {"n": section.samples, "temperature": section.temperature}
    ways = {
        "greedy": lambda: run(temperature=0.0),
        "shared": lambda: run(share_prefill=True, **sampling),
        "naive": lambda: run(share_prefill=False, **sampling),
    }
    measured = measure(ways, section.repeats)
    greedy_s, shared_s, naive_s = (measured.median(way) for way in ways)
    greedy_cost, shared_cost, naive_cost = (measured.values(way)[-1] for way in ways)
    return {
        "prompts": len(prompts),
        "prompt_tokens_mean": shared_cost.prefill_tokens / len(prompts),
        "greedy_tokens_per_s": greedy_cost.decoded_tokens / greedy_s,
        "greedy_seconds": greedy_s,
        "shared_seconds": shared_s,
        "naive_seconds": naive_s,
        "shared_tokens_per_s": shared_cost.decoded_tokens / shared_s,
        "naive_tokens_per_s": naive_cost.decoded_tokens / naive_s,
        "shared_prefill_tokens": shared_cost.prefill_tokens,
        "naive_prefill_tokens": naive_cost.prefill_tokens,
        "speedup": measured.ratio("naive", "shared"),
        "prefill_ratio": naive_cost.prefill_tokens / max(shared_cost.prefill_tokens, 1),
    }


def _bench_generator(ctx: StageContext, rows: list[dict], corpus) -> dict[str, Any]:
    section, gen_cfg = ctx.config.bench, ctx.config.generator
    generator = build_generator(  # no generation cache: the timings measure generation
        resolve_model(gen_cfg.model),
        device=gen_cfg.device,
        dtype=gen_cfg.dtype,
        batch_size=gen_cfg.batch_size,
        cache=False,
        seed=ctx.config.seed,
        device_key="generator.device",
        prompt_format=gen_cfg.prompt_format,
    )

    retriever = ctx.resources.retriever(corpus)
    hits = retriever.search([r["question"] for r in rows], k=5)
    passages = passages_of(retriever, corpus)  # after the search: an external engine may have added passages
    titles, texts = passages["title"], passages["text"]
    styles = {
        "closed-book": [None] * len(rows),
        "RAG (5 passages)": [
            format_passages([titles[int(i)] for i in h.indices], [texts[int(i)] for i in h.indices], 400) for h in hits
        ],
    }
    out: dict[str, Any] = {}
    for style, contexts in styles.items():
        prompts = [
            generator.build_prompt(r["question"], c, max_new_tokens=section.max_new_tokens, system=ANSWER_SYSTEM).text
            for r, c in zip(rows, contexts, strict=True)
        ]
        out[style] = _measure_prompts(generator, prompts, section)
        ctx.log.info("generator %s: shared prefill %.2fx faster than re-encoding", style, out[style]["speedup"])
    return out


def _bench_nli(ctx: StageContext) -> dict[str, Any]:
    from workbench.data.nli_pairs import build_nli_pairs

    section = ctx.config.bench
    _, val = build_nli_pairs(seed=ctx.config.seed)
    sets = eval_sets(val, section.nli_pairs, section.nli_pairs, ctx.config.seed)
    models = {"cross_encoder": ctx.config.nli.model, "hf": ctx.config.nli.model}
    return evaluate_judges(list(section.nli_judges), ctx.resources, sets, models)


def _bench_retrieval(ctx: StageContext, rows: list[dict], corpus) -> dict[str, Any]:
    section = ctx.config.bench
    sample = corpus_sample(corpus, rows, section.corpus_size, ctx.config.seed)
    queries = [r["question"] for r in rows]
    gold = [{p["doc_id"] for p in r["gold_passages"]} for r in rows]
    embedder = ctx.resources.embedder()
    builders = {
        "bm25": lambda: BM25Retriever(sample, cache=False),
        "dense": lambda: DenseRetriever(sample, embedder),
        "hybrid": lambda: HybridRetriever(
            {"bm25": BM25Retriever(sample, cache=False), "dense": DenseRetriever(sample, embedder)}
        ),
    }
    out: dict[str, Any] = {"passages": len(sample), "queries": len(queries)}
    k_max = max(section.ks)
    for name, build in builders.items():
        built = timed(build)  # one build and one batched search each: the index is built once in a real run
        retriever, build_s = built.value, built.seconds
        searched = timed(lambda retriever=retriever: retriever.search(queries, k=k_max))
        results, search_s = searched.value, searched.seconds
        recall = {
            f"recall@{k}": sum(
                bool(g & {i.split("#", 1)[0] for i in res.ids[:k]}) for res, g in zip(results, gold, strict=True)
            )
            / len(queries)
            for k in section.ks
        }
        out[name] = {"build_seconds": build_s, "queries_per_s": len(queries) / search_s, **recall}
    return out


def run(ctx: StageContext) -> dict[str, Any]:
    """Run the three benchmarks; save ``bench.json``; return the headline ratios."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.bench
    test = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")["test"]
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    rows = [r for r in test if r["gold_passages"]]
    result = {
        "threads": (threads := thread_counts())["torch"],
        "thread_counts": threads,
        "generator": ctx.config.generator.model,
        "settings": {
            k: getattr(section, k) for k in ("questions", "samples", "max_new_tokens", "temperature", "repeats")
        },
        "generation": _bench_generator(ctx, rows[: section.questions], corpus),
        "nli": _bench_nli(ctx),
        "retrieval": _bench_retrieval(ctx, rows[: section.retrieval_questions], corpus),
    }
    atomic_write_json(ctx.out_dir / "bench.json", result)
    summary = {f"speedup_{k.split()[0].lower()}": round(v["speedup"], 3) for k, v in result["generation"].items()}
    summary.update(
        {
            f"{k}_recall@5": round(v.get("recall@5", 0.0), 3)
            for k, v in result["retrieval"].items()
            if isinstance(v, dict)
        }
    )
    return summary


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``speedup.png`` to the report directory from ``bench_backends``' ``bench.json``
    (:func:`workbench.bench.backends.report.write_backends_report`)."""

    return write_bench_report(
        ctx,
        "bench_backends",
        lambda bench, tmp: write_backends_report(bench, tmp, name=ctx.config.name, rerun=ctx.rerun),
    )[0]
