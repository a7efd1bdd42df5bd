"""Stage ``seper_eval``: rank retrievers by the retrieval utility they deliver, mean ΔSePer on a labelled split.

For the first ``seper_eval.limit`` questions of ``seper_eval.split``, every retriever in ``seper_eval.retrievers``
(``bm25``, ``dense``, ``hybrid``, and ``dtr`` — DTR's dual-path retrieval with adaptive selection over the ``dense``
row's index, as the paper's DTR searches a dense index, forced to retrieve; and two controls, ``gold`` — the question's
gold passages — and ``random`` — irrelevant passages of other documents)
gives a context of ``seper_eval.k`` passages from a corpus of ``seper_eval.corpus_size`` passages (every chunk of the
questions' gold documents plus random others — a full dense index of the 10,033 passages takes tens of minutes on
two CPU cores; null searches the whole corpus). ΔSePer (SePer spec §3.8) = the model's belief in the gold answer with
that context minus without it, by both estimators (SePer-H: hard clusters; SePer-S: soft kernel;
:mod:`workbench.uncertainty.seper`). All contexts of all retrievers go through ONE sampling call and ONE NLI call,
and the closed-book term is computed once per question and shared. Gold-dependent: an evaluation of retrievers,
never a runtime signal.

Outputs: ``per_question/`` (an HF dataset: question, retriever, passage ids, gold passage retrieved, SePer terms)
and ``summary.json`` (per retriever: mean ΔSePer-S / -H with a 90% BCa bootstrap interval, mean SePer with context,
recall of the gold passage; the ranking by mean ΔSePer-S; ``intervals``: how the intervals were made). The run's
main report renders it (:func:`workbench.stages.seper_eval.report.seper_section`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.backends.retrievers import BM25Retriever, DenseRetriever, HybridRetriever
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.core.logs import track
from workbench.data.corpus import corpus_sample
from workbench.methods.common import context_block
from workbench.methods.dtr import DTR, DTRSettings
from workbench.metrics.bootstrap import N_RESAMPLES, describe, mean_interval
from workbench.stages.context import StageContext
from workbench.stages.evaluate.run import build_tools
from workbench.uncertainty.seper import SeperSettings, delta_seper

RETRIEVERS = ("bm25", "dense", "hybrid", "dtr", "gold", "random")
"""Context sources: four retrievers, and two controls — ``gold`` (the question's own gold passages: the most a
context can help) and ``random`` (``k`` passages drawn at random from other documents: irrelevant, so ΔSePer should
be near 0)."""
CONTROLS = ("gold", "random")
QUESTIONS_PER_CHUNK = 2  # questions per ΔSePer call (each with every retriever's context): one progress step


def bootstrap_mean_interval(values: list[float], *, draws: int = N_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """A 90% BCa interval of the mean of ``values`` over ``draws`` bootstrap resamples
    (:func:`workbench.metrics.bootstrap.mean_interval`; NaN for fewer than two values)."""
    return mean_interval(values, n_resamples=draws, seed=seed).as_tuple()


def _contexts(ctx: StageContext, kind: str, rows: list[dict], corpus: Any, tools: Any, k: int) -> list[list[Any]]:
    """Top-k passages per question from retriever ``kind`` (DTR: its selected passages, retrieval forced)."""

    if kind in CONTROLS:
        return _control_contexts(kind, rows, tools, k, ctx.config.seed)
    questions = [str(r["question"]) for r in rows]
    counter = ctx.counter
    if tools.on_engine:  # the user's engine: its lexical and dense channels stand for the in-process indexes
        bm25 = tools.bm25_retriever()

        def dense() -> Any:
            return tools.dense_retriever()

    else:
        bm25 = ctx.resources.get("seper_eval:bm25", lambda: BM25Retriever(corpus, counter=counter))

        def dense() -> Any:
            return ctx.resources.get(
                "seper_eval:dense", lambda: DenseRetriever(corpus, ctx.resources.embedder(), counter=counter)
            )

    if kind == "dtr":
        # both paths search the ``dense`` row's own index (the paper's dense retrieval): the two rows differ only
        # by DTR's pseudo-context path and its adaptive selection; τ = 0 retrieves for every question (u >= 0)
        settings = DTRSettings(tau=0.0, k=k, n_per_path=max(k, 5))
        method = DTR(tools, settings=settings, retriever=dense())
        answers = method.answer_many(rows)
        out = []
        for answer in answers:
            step = answer.trace.find("select")
            ids = step.detail.get("kept_ids", []) if step is not None else []
            index = {cid: i for i, cid in enumerate(tools.column("chunk_id"))} if ids else {}
            out.append([tools.passage(index[cid]) for cid in ids])
        return out
    if kind == "bm25":
        retriever = bm25
    else:
        retriever = dense() if kind == "dense" else HybridRetriever({"bm25": bm25, "dense": dense()}, counter=counter)
    results = retriever.search(questions, k=k)
    return [[tools.passage(int(i), float(s)) for i, s in zip(r.indices, r.scores, strict=True)] for r in results]


def _control_contexts(kind: str, rows: list[dict], tools: Any, k: int, seed: int) -> list[list[Any]]:
    """``gold``: every corpus chunk of the question's gold documents (at most ``k``, in corpus order); ``random``:
    ``k`` chunks of other documents, seeded per question."""
    doc_ids = tools.column("doc_id")
    out = []
    for position, row in enumerate(rows):
        gold = {p["doc_id"] for p in row["gold_passages"]}
        if kind == "gold":
            chosen = [i for i, d in enumerate(doc_ids) if d in gold][:k]
        else:
            others = [i for i, d in enumerate(doc_ids) if d not in gold]
            rng = np.random.default_rng([seed, position])
            chosen = sorted(rng.choice(len(others), size=min(k, len(others)), replace=False).tolist())
            chosen = [others[i] for i in chosen]
        out.append([tools.passage(i) for i in chosen])
    return out


def run(ctx: StageContext) -> dict[str, Any]:
    """Retrieve with every retriever, compute ΔSePer for every (question, context), rank the retrievers."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.seper_eval
    unknown = [r for r in section.retrievers if r not in RETRIEVERS]
    if unknown or not section.retrievers:
        raise ConfigError(f"unknown or no retriever(s) {unknown} (known: {', '.join(RETRIEVERS)})", "seper_eval")
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split {section.split!r} not in the dataset", "seper_eval.split")
    rows = list(qa[section.split].select(range(min(section.limit, len(qa[section.split])))))
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    if section.corpus_size is not None:
        corpus = corpus_sample(corpus, rows, section.corpus_size, ctx.config.seed)
    tools = build_tools(ctx, corpus)
    tools.passage_chars = section.passage_chars
    passages = {kind: _contexts(ctx, kind, rows, corpus, tools, section.k) for kind in section.retrievers}
    examples, contexts, keys = [], [], []
    for i, row in enumerate(rows):  # question-major: one question's contexts share a chunk and its closed-book SePer
        for kind, per_question in passages.items():
            chosen = per_question[i]
            examples.append({"question": str(row["question"]), "answers": [str(a) for a in row["answers"]]})
            contexts.append(context_block(chosen, section.passage_chars))
            keys.append((kind, row, chosen))
    settings = SeperSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        seed=ctx.config.seed,
    )
    size = len(passages) * QUESTIONS_PER_CHUNK
    chunks = [range(start, min(start + size, len(examples))) for start in range(0, len(examples), size)]
    values = []
    for chunk in track(chunks, "ΔSePer (questions × retrievers)", total=len(chunks)):
        values += delta_seper(
            [examples[j] for j in chunk],
            [contexts[j] for j in chunk],
            generator=tools.generator,
            judge=tools.judge,
            settings=settings,
        )
    records = []
    for (kind, row, chosen), value in zip(keys, values, strict=True):
        gold_docs = {p["doc_id"] for p in row["gold_passages"]}
        records.append(
            {
                "id": str(row["id"]),
                "question": str(row["question"]),
                "retriever": kind,
                "passage_ids": [p.chunk_id for p in chosen],
                "gold_retrieved": float(bool(gold_docs & {p.doc_id for p in chosen})) if gold_docs else float("nan"),
                **{k: float(v) for k, v in value.items()},
            }
        )
    datasets.Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "per_question"))
    summary: dict[str, Any] = {
        "split": section.split,
        "questions": len(rows),
        "k": section.k,
        "passages": len(corpus),
        "retrievers": {},
        "intervals": describe(),
    }
    for kind in section.retrievers:
        mine = [r for r in records if r["retriever"] == kind]
        entry: dict[str, Any] = {}
        for key in ("delta_seper_s", "delta_seper_h"):
            vals = [r[key] for r in mine]
            low, high = bootstrap_mean_interval(vals, seed=ctx.config.seed)
            entry[key] = {"mean": float(np.mean(vals)), "low": low, "high": high}
        entry["seper_s"] = float(np.mean([r["seper_s"] for r in mine]))
        entry["seper_s_closed"] = float(np.mean([r["seper_s_closed"] for r in mine]))
        recall = [r["gold_retrieved"] for r in mine if not np.isnan(r["gold_retrieved"])]
        entry["gold_recall"] = float(np.mean(recall)) if recall else None
        summary["retrievers"][kind] = entry
    ranking = sorted(section.retrievers, key=lambda k: -summary["retrievers"][k]["delta_seper_s"]["mean"])
    summary["ranking"] = ranking
    atomic_write_json(ctx.out_dir / "summary.json", summary)
    return {
        "best": ranking[0],
        **{f"{k}_delta_seper_s": round(summary["retrievers"][k]["delta_seper_s"]["mean"], 4) for k in ranking},
    }
