"""Stage ``collect``: uncertainty features, correctness and retrieval-utility labels, one row per question.

For each split in ``collect.splits`` (first ``collect.limit`` questions, then the shard ``collect.shard = "i/N"``:
the questions whose position mod N == i) the stage works in chunks of ``collect.batch_questions`` questions:

1. **features** — retrieve the top ``retrieval.k`` passages when anything needs them, then run the stats graph
   (:func:`workbench.uncertainty.calculators.compute_stats`; DENSE's rephrased contexts included when ``dense`` is
   selected) and compute the selected features (oriented: higher = more certain; NaN where undefined);
2. **labels** (training targets only: they need the gold answer, see ``labels.json``) — closed-book correctness of
   the greedy answer (``correct_em`` / ``correct_contains`` / ``correct_f1``); with ``rag``, the greedy answer with
   the passages and its scores (``rag_*``); with ``seper``, SePer-H / SePer-S with and without the passages and
   ΔSePer (:mod:`workbench.uncertainty.seper`); with ``llm_judge``, the generator's verdict ``correct_llm``.

It writes:

* ``<split>/`` — an HF dataset, one row per question: ``position`` (index in the limited split), ``id``,
  ``question``, ``answers`` (gold aliases), ``greedy_answer``, ``greedy_logprobs``, ``sample_answers``, one float
  column per feature, the labels, per-question prompt sizes (``closed_prompt_tokens`` / ``closed_new_tokens`` and,
  with ``rag``, ``rag_prompt_tokens`` / ``rag_new_tokens``, ``retrieved_ids`` and the wall seconds of the rag
  label's retrieval call ``rag_retriever_seconds`` and of its answer with the passages ``rag_answer_seconds``) and
  the cost of the features (``lm_calls``, ``prefill_tokens``, ``decoded_tokens``, ``scored_tokens``, ``nli_pairs``,
  ``retrieval_calls``, ``seconds``: the chunk's totals divided evenly over its questions; ``cached_lm_calls`` /
  ``cached_prefill_tokens`` / ``cached_decoded_tokens``: what the generations the cache served would have cost),
  ``label_seconds`` (the labels' wall time, the rag retrieval and answer included) and ``stat_cost`` (JSON: the
  chunk's cost per stats-graph component, divided evenly over its questions,
  :class:`~workbench.uncertainty.stat_costs.StatCostMeter`);
* ``stat_costs.json`` — what each stats-graph component costs per question (cold cache), per split, and what the rag
  label's retrieval and answer cost, so a router is priced for the components its features need
  (:func:`~workbench.uncertainty.stat_costs.stat_costs_document`; left out when some row lacks ``stat_cost``);
* ``summary.json`` — rows per split, label means, each feature's AUROC for ``correct_contains`` and NaN counts;
* ``labels.json`` / ``features.json`` / ``metadata.json`` — label docs, feature descriptions, settings (with a served
  generator, ``served``: each collected feature it does not give exactly as in-process and why —
  ``approximate_features``, :func:`~workbench.methods.backend_needs.served_departures` — and the rows of each split
  holding NaN for it, ``nan_rows``);
* ``lars_scorer.json`` when ``lars`` is selected: the scorer fitted on ``lars_fit_split`` (the rows of that split
  hold cross-fitted scores, :mod:`workbench.uncertainty.lars_fit`).

**Resumable**: each finished chunk is written as ``<scratch_dir>/<split>/chunk-<first position>.jsonl``; a re-run
(same stage key) skips the chunks already there, then assembles the dataset from all chunk files (the per-component
costs travel in the records' ``stat_cost``, so a resumed or merged run writes the same ``stat_costs.json``).

**Shardable**: run N workers with ``collect.shard=0/N`` … ``collect.shard=N-1/N`` (separate run directories), then
``workbench merge OUT run0/stages/collect run1/stages/collect ...`` (:func:`merge_shards`): rows are concatenated per
split and ordered by ``position``; a position present twice is an error. LARS is fitted at the merge, since a shard
holds only part of the fit split; ``stat_costs.json`` is rebuilt there from every shard's rows.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.passage_table import passages_of
from workbench.backends.prompts import number_chunks, passage_line
from workbench.core import shards
from workbench.core.atomic import atomic_directory, atomic_write_json, atomic_write_text
from workbench.core.errors import ConfigError, DataError
from workbench.core.logs import track
from workbench.methods.learned import save_learned
from workbench.metrics.llm_judge import LLMCorrectnessJudge
from workbench.metrics.qa import score_answer
from workbench.metrics.ranking import auroc
from workbench.stages.backend_needs import approximations
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import build_judge
from workbench.uncertainty.calculators import (
    ANSWER_SYSTEM,
    ATTENTION_SCOPE,
    UNAVAILABLE_STATS,
    StatSettings,
    compute_stats,
    prompt_group_fingerprints,
    prompts_fingerprint,
    unavailable_features,
)
from workbench.uncertainty.dense_stats import DenseSettings
from workbench.uncertainty.features import compute_features, get_features, required_stats
from workbench.uncertainty.lars_fit import cross_fit_lars
from workbench.uncertainty.seper import SeperSettings, delta_seper
from workbench.uncertainty.stat_costs import STAT_COSTS_FILE, StatCostMeter, stat_costs_document

_GOLD = {"requires_gold": True}
LABELS: dict[str, dict[str, Any]] = {
    "correct_em": {**_GOLD, "doc": "greedy closed-book answer equals a gold alias after normalisation (0/1)"},
    "correct_contains": {**_GOLD, "doc": "a gold alias occurs in the greedy closed-book answer as words (0/1)"},
    "correct_f1": {**_GOLD, "doc": "best token F1 of the greedy closed-book answer against the gold aliases"},
    "rag_em": {**_GOLD, "doc": "greedy answer with the retrieved passages equals a gold alias (0/1)", "needs": "rag"},
    "rag_contains": {**_GOLD, "doc": "a gold alias occurs in the answer with passages (0/1)", "needs": "rag"},
    "rag_f1": {**_GOLD, "doc": "best token F1 of the answer with passages", "needs": "rag"},
    "seper_h": {**_GOLD, "doc": "SePer-H with the passages (hard clusters)", "needs": "seper"},
    "seper_s": {**_GOLD, "doc": "SePer-S with the passages (soft kernel)", "needs": "seper"},
    "seper_h_closed": {**_GOLD, "doc": "SePer-H closed-book", "needs": "seper"},
    "seper_s_closed": {**_GOLD, "doc": "SePer-S closed-book", "needs": "seper"},
    "delta_seper_h": {**_GOLD, "doc": "ΔSePer-H = seper_h − seper_h_closed: utility of the passages", "needs": "seper"},
    "delta_seper_s": {**_GOLD, "doc": "ΔSePer-S = seper_s − seper_s_closed: utility of the passages", "needs": "seper"},
    "correct_llm": {**_GOLD, "doc": "the generator judges the closed-book answer correct (0/1)", "needs": "llm_judge"},
}
"""Every label column: training / evaluation targets only, never runtime features (they need the gold answer)."""

COST_COLUMNS = ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "retrieval_calls")
COST_COLUMNS += ("cached_lm_calls", "cached_prefill_tokens", "cached_decoded_tokens", "seconds")
RAG_COST_COLUMNS = ("rag_retriever_seconds", "rag_answer_seconds", "rag_prompt_tokens", "rag_new_tokens")
"""The rag label's per-question cost columns (the retrieval call and the answer with the passages)."""
RAG_COST_NAMES = {"rag_retriever_seconds": "retriever_seconds"}
"""Their names in ``stat_costs.json``'s ``retrieval`` block, where they differ."""


def labels_for(options: list[str]) -> dict[str, dict[str, Any]]:
    """The label columns produced with the ``collect.labels`` options ``options``."""
    return {name: info for name, info in LABELS.items() if info.get("needs") in (None, *options)}


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` → ``(i, N)`` with 0 <= i < N; anything else raises :class:`ConfigError` at ``collect.shard``."""
    return shards.parse_shard(text, "collect.shard")


def check_features(names: list[str]) -> None:
    """Refuse an empty list, unknown features and features whose stats nothing can produce (one-line ConfigError)."""

    if not names:
        raise ConfigError("name at least one feature", "collect.features")
    get_features(names)  # unknown names → ConfigError
    blocked = {f: s for f, s in unavailable_features(names).items() if f != "lars"}  # collect fits LARS itself
    if blocked:
        detail = ", ".join(f"{f} (needs {', '.join(s)})" for f, s in blocked.items())
        raise ConfigError(f"collect cannot produce these features: {detail}", "collect.features")


def check_section(section: Any) -> None:
    """The load check of a ``collect`` section (feature names, the shard, counts >= 1, lars's fit split among the
    collected splits); a one-line ConfigError naming the key."""
    check_features(section.features)
    parse_shard(section.shard)
    for key in ("batch_questions", "seper_samples", "lars_folds", "passage_chars", "dense_rephrase_tokens"):
        if getattr(section, key) < 1:
            raise ConfigError(f"{key} must be >= 1", f"collect.{key}")
    if "lars" in section.features and section.lars_fit_split not in section.splits:
        raise ConfigError(
            f"lars is fitted on {section.lars_fit_split!r}, which is not among the collected splits",
            "collect.lars_fit_split",
        )


def stat_settings(section: Any) -> Any:
    """The :class:`~workbench.uncertainty.calculators.StatSettings` a ``collect`` section asks for (samples,
    temperature, answer length, paraphrases); bench_served collects with the same."""

    return StatSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        paraphrases=section.paraphrases,
    )


def _chunk_path(scratch: Path, split: str, first: int) -> Path:
    return scratch / split / f"chunk-{first:07d}.jsonl"


class _Passages:
    """The corpus and its retriever: top-k passage texts (and ids) per question, as prompt-ready chunks."""

    def __init__(self, ctx: StageContext, corpus: Any) -> None:
        self.retriever = ctx.resources.retriever(corpus)
        # read at each search: an external engine may add passages the corpus lacks
        self.passages = passages_of(self.retriever, corpus)
        self.k = ctx.config.retrieval.k
        self.max_chars = ctx.config.collect.passage_chars

    def top_k(self, questions: list[str]) -> tuple[list[list[str]], list[list[str]]]:
        """``(chunks per question, passage ids per question)`` — one batched retrieval call."""
        results = self.retriever.search(questions, k=self.k)
        titles, texts = self.passages["title"], self.passages["text"]
        chunks = [[passage_line(titles[int(j)], texts[int(j)], self.max_chars) for j in r.indices] for r in results]
        return chunks, [list(r.ids) for r in results]


def _collect_chunk(ctx: StageContext, rows: list[dict], positions: list[int], tools: dict[str, Any]) -> list[dict]:
    """Features (timed and costed), then labels, for one chunk of questions; one record per question."""

    section = ctx.config.collect
    generator = ctx.resources.generator()
    questions = [str(r["question"]) for r in rows]
    golds = [[str(a) for a in r["answers"]] for r in rows]
    options = [[str(o) for o in r.get("options") or []] for r in rows]  # either-or / multiple choice
    needed = (required_stats(section.features) - UNAVAILABLE_STATS) | {"greedy_text", "greedy_logprobs", "greedy_eos"}
    want_dense = "dense" in section.features
    want_passages = want_dense or bool({"rag", "seper"} & set(section.labels))

    # ---- features: what a runtime pays to decide (retrieval only when DENSE needs it)
    before, began = ctx.counter.snapshot(), time.perf_counter()
    meter = StatCostMeter(ctx.counter, generator, tools["judge"], tools["embedder"])
    chunks, ids = [[] for _ in rows], [[] for _ in rows]
    retriever_seconds = 0.0
    if want_dense:  # DENSE's chunks: the retrieval is part of its component (and the rag label reuses it)
        mark = meter.mark()
        chunks, ids = tools["passages"].top_k(questions)
        retriever_seconds = time.perf_counter() - mark.began
        meter.charge(mark, "dense")
    stats = compute_stats(
        rows,
        needed,
        generator=generator,
        judge=tools["judge"],
        embedder=tools["embedder"],
        settings=stat_settings(section),
        contexts=chunks if want_dense else None,
        dense_settings=DenseSettings(
            rephrase_max_new_tokens=section.dense_rephrase_tokens, answer_max_new_tokens=section.max_new_tokens
        ),
        cost_meter=meter,
    )
    features = [compute_features(st, section.features, on_missing="nan") for st in stats]
    seconds, cost = time.perf_counter() - began, ctx.counter.since(before)

    # ---- labels (gold-dependent)
    began = time.perf_counter()
    if want_passages and not want_dense:
        retrieval_began = time.perf_counter()
        chunks, ids = tools["passages"].top_k(questions)
        retriever_seconds = time.perf_counter() - retrieval_began
    greedy = [str(st.get("greedy_text", "")) for st in stats]
    extra: list[dict[str, Any]] = [{} for _ in rows]
    closed_tokens = [
        generator.build_prompt(q, None, max_new_tokens=section.max_new_tokens, system=ANSWER_SYSTEM).n_tokens
        for q in questions
    ]
    contexts = [number_chunks(c) if c else None for c in chunks]
    if "rag" in section.labels:
        built = [
            generator.build_prompt(q, c, max_new_tokens=section.max_new_tokens, system=ANSWER_SYSTEM)
            for q, c in zip(questions, contexts, strict=True)
        ]
        answer_began = time.perf_counter()
        answers = generator.generate(
            [b.text for b in built], temperature=0.0, max_new_tokens=section.max_new_tokens, stop=("\n",)
        )
        answer_seconds = (time.perf_counter() - answer_began) / len(rows)
        for row, b, a, gold, opts, pid in zip(extra, built, answers, golds, options, ids, strict=True):
            scores = score_answer(a.text.strip(), gold, opts)
            row.update(
                rag_answer=a.text.strip(),
                rag_em=scores["em"],
                rag_contains=scores["contains"],
                rag_f1=scores["f1"],
                rag_prompt_tokens=b.n_tokens,
                rag_new_tokens=len(a.token_ids),
                retrieved_ids=pid,
                rag_retriever_seconds=retriever_seconds / len(rows),
                rag_answer_seconds=answer_seconds,
            )
    if "seper" in section.labels:
        settings = SeperSettings(
            samples=section.seper_samples,
            temperature=section.seper_temperature,
            max_new_tokens=section.max_new_tokens,
            seed=ctx.config.seed,
        )
        examples = [{"question": q, "answers": g} for q, g in zip(questions, golds, strict=True)]
        values = delta_seper(examples, contexts, generator=generator, judge=tools["judge"], settings=settings)
        for row, value in zip(extra, values, strict=True):
            row.update({k: float(v) for k, v in value.items() if k in LABELS})
    if "llm_judge" in section.labels:
        verdicts = tools["llm_judge"].judge(questions, greedy, golds)
        for row, p in zip(extra, verdicts, strict=True):
            row["correct_llm"] = float(p >= 0.5)
    label_seconds = time.perf_counter() - began

    share = 1.0 / len(rows)
    stat_cost = json.dumps(meter.per_question(len(rows)))
    records = []
    for position, row, st, feats, more, answer, gold, opts, n_prompt in zip(
        positions, rows, stats, features, extra, greedy, golds, options, closed_tokens, strict=True
    ):
        scores = score_answer(answer, gold, opts)
        logprobs = [float(v) for v in st.get("greedy_logprobs", [])]
        records.append(
            {
                "position": position,
                "id": str(row["id"]),
                "question": str(row["question"]),
                "answers": gold,
                "greedy_answer": answer,
                "greedy_logprobs": logprobs,
                "sample_answers": [str(s) for s in st.get("sample_texts", [])],
                **feats,
                "correct_em": scores["em"],
                "correct_contains": scores["contains"],
                "correct_f1": scores["f1"],
                "closed_prompt_tokens": n_prompt,
                "closed_new_tokens": len(logprobs) - int(bool(st.get("greedy_eos", False))),
                **more,
                **{name: getattr(cost, name) * share for name in COST_COLUMNS if name != "seconds"},
                "seconds": seconds * share,
                "label_seconds": label_seconds * share,
                "stat_cost": stat_cost,
            }
        )
    return records


def _read_chunks(folder: Path) -> list[dict]:
    records: list[dict] = []
    for path in sorted(folder.glob("chunk-*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return records


def collect_split(ctx: StageContext, split: str, rows: list[dict], tools: dict[str, Any]) -> list[dict]:
    """Collect one split chunk by chunk, skipping checkpointed chunks; return all records ordered by position."""

    section = ctx.config.collect
    index, count = parse_shard(section.shard)
    positions = [p for p in range(len(rows)) if p % count == index]
    size = section.batch_questions
    chunks = [positions[k : k + size] for k in range(0, len(positions), size)]
    for chunk in track(chunks, f"collect ({split})", total=len(chunks)):
        path = _chunk_path(ctx.scratch_dir, split, chunk[0])
        if path.exists():
            continue
        records = _collect_chunk(ctx, [rows[p] for p in chunk], chunk, tools)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    records = _read_chunks(ctx.scratch_dir / split)
    wanted = set(positions)
    records = sorted((r for r in records if r["position"] in wanted), key=lambda r: r["position"])
    if [r["position"] for r in records] != positions:
        raise DataError("checkpointed chunks do not cover the split exactly once", str(ctx.scratch_dir / split))
    return records


def fit_lars_column(by_split: dict[str, list[dict]], fit_split: str, folds: int, seed: int) -> Any:
    """Fill the ``lars`` column of every split (cross-fitted on ``fit_split``); return the scorer fitted on all of
    ``fit_split`` (a :class:`~workbench.uncertainty.features.probability.LarsLikeScorer`)."""

    if fit_split not in by_split:
        raise DataError(f"lars is fitted on split {fit_split!r}, which was not collected", "collect.lars_fit_split")
    fit = by_split[fit_split]
    others = {name: [r["greedy_logprobs"] for r in rows] for name, rows in by_split.items() if name != fit_split}
    oof, scores, scorer = cross_fit_lars(
        [r["greedy_logprobs"] for r in fit], [r["correct_contains"] for r in fit], others, n_folds=folds, seed=seed
    )
    for record, value in zip(fit, oof, strict=True):
        record["lars"] = float(value)
    for name, values in scores.items():
        for record, value in zip(by_split[name], values, strict=True):
            record["lars"] = float(value)
    return scorer


def summarise_split(records: list[dict], features: list[str], labels: list[str]) -> dict[str, Any]:
    """Rows, label means, each feature's AUROC for ``correct_contains`` and its NaN count."""

    target = [r["correct_contains"] for r in records]
    out: dict[str, Any] = {
        "rows": len(records),
        **{f"mean_{name}": (float(np.mean([r[name] for r in records])) if records else None) for name in labels},
        "auroc_correct_contains": {},
        "nan_count": {},
    }
    for name in features:
        values = [r[name] for r in records]
        value = auroc(values, target)
        out["auroc_correct_contains"][name] = None if math.isnan(value) else round(value, 4)
        out["nan_count"][name] = sum(1 for v in values if isinstance(v, float) and math.isnan(v))
    return out


def _write_outputs(out_dir: Path, by_split: dict[str, list[dict]], features: list[str], meta: dict) -> dict:
    """Fit LARS when selected (not in a partial shard), then save one dataset per split plus the JSON docs."""
    import datasets

    if "lars" in features and meta.get("shard", "0/1") in ("0/1", "merged"):
        save_learned(
            fit_lars_column(by_split, meta["lars_fit_split"], meta["lars_folds"], meta["seed"]),
            out_dir / "lars_scorer.json",
        )
    if "served" in meta:
        meta["served"]["nan_rows"] = _nan_rows(by_split, meta["served"]["approximate_features"])
    labels = labels_for(meta["labels"])
    summary: dict[str, Any] = {"features": features, "labels": sorted(labels), "splits": {}}
    for split, records in by_split.items():
        if records:
            datasets.Dataset.from_list(records).save_to_disk(str(out_dir / split))
        summary["splits"][split] = summarise_split(records, features, list(labels))
    atomic_write_json(out_dir / "summary.json", summary)
    atomic_write_json(out_dir / "labels.json", labels)
    atomic_write_json(out_dir / "features.json", [f.describe() for f in get_features(features)])
    atomic_write_json(out_dir / "metadata.json", meta)
    costs = _stat_costs(by_split, features)
    if costs is not None:
        atomic_write_json(out_dir / STAT_COSTS_FILE, costs)
    return summary


def _nan_rows(by_split: dict[str, list[dict]], features: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per feature a served generator does not give exactly: the rows of each split that hold NaN for it."""
    return {
        name: {
            split: sum(1 for r in records if isinstance(r.get(name), float) and math.isnan(r[name]))
            for split, records in by_split.items()
        }
        for name in sorted(features)
    }


def _stat_costs(by_split: dict[str, list[dict]], features: list[str]) -> dict[str, Any] | None:
    """``stat_costs.json`` from the records' ``stat_cost`` shares and rag timings; None when a record lacks its
    share (rows collected before the stage measured it)."""

    if any("stat_cost" not in r for records in by_split.values() for r in records):
        return None
    shares = {split: [json.loads(r["stat_cost"]) for r in records] for split, records in by_split.items()}
    retrieval: dict[str, dict[str, float]] = {}
    for split, records in by_split.items():
        if records and all(all(c in r for c in RAG_COST_COLUMNS) for r in records):
            means = {c: float(np.mean([r[c] for r in records])) for c in RAG_COST_COLUMNS}
            retrieval[split] = {RAG_COST_NAMES.get(c, c): v for c, v in means.items()}
    return stat_costs_document(features, shares, retrieval)


def build_tools(ctx: StageContext) -> dict[str, Any]:
    """What :func:`_collect_chunk` needs beside the generator for ``ctx.config.collect``'s features and labels: the
    NLI ``judge``, the ``embedder``, the ``passages`` (the build_data corpus and the run's retriever) and the
    ``llm_judge`` (each None when nothing needs it)."""
    import datasets

    section = ctx.config.collect
    needed = required_stats(section.features)
    judged = bool(needed & _JUDGED) or "dense" in section.features or "seper" in section.labels
    tools: dict[str, Any] = {
        "judge": build_judge(ctx.config.nli.kind, ctx.resources, ctx.config.nli.model) if judged else None,
        "embedder": ctx.resources.embedder() if needed & {"token_relevance", "sts_samples"} else None,
        "passages": None,
        "llm_judge": None,
    }
    if "dense" in section.features or {"rag", "seper"} & set(section.labels):
        corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
        tools["passages"] = _Passages(ctx, corpus)
    if "llm_judge" in section.labels:
        tools["llm_judge"] = LLMCorrectnessJudge(ctx.resources.generator())
    return tools


def run(ctx: StageContext) -> dict[str, Any]:
    """Collect every configured split; write datasets and JSON docs; return rows and accuracy per split."""
    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.collect
    check_section(section)
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    missing = [s for s in section.splits if s not in qa]
    if missing:
        raise ConfigError(f"split(s) {missing} not in the dataset (has: {', '.join(qa)})", "collect.splits")
    needed = required_stats(section.features)
    tools = build_tools(ctx)
    by_split: dict[str, list[dict]] = {}
    for split in section.splits:
        rows = qa[split]
        if section.limit is not None:
            rows = rows.select(range(min(section.limit, len(rows))))
        by_split[split] = collect_split(ctx, split, list(rows), tools)
    meta = {
        "settings": stat_settings(section).to_dict(),
        "prompts": prompts_fingerprint(),
        "prompt_groups": prompt_group_fingerprints(needed),
        "shard": section.shard,
        "seed": ctx.config.seed,
        "labels": list(section.labels),
        "lars_fit_split": section.lars_fit_split,
        "lars_folds": section.lars_folds,
        "retrieval": {"retriever": ctx.config.retrieval.backend, "k": ctx.config.retrieval.k},
        "stats": sorted(needed),
        "attention_logdiag_scope": ATTENTION_SCOPE,
        "nli_judge": ctx.config.nli.kind,
        "generator": ctx.config.generator.model,
    }
    generator = ctx.resources.generator()
    if getattr(generator, "served", False):
        meta["served"] = {"approximate_features": approximations(ctx.config, generator.capabilities)}
    summary = _write_outputs(ctx.out_dir, by_split, list(section.features), meta)
    out: dict[str, Any] = {}
    for split, info in summary["splits"].items():
        out[f"{split}_rows"] = info["rows"]
        out[f"{split}_accuracy"] = info["mean_correct_contains"]
    return out


_JUDGED = {"nli_texts", "nli_index_greedy", "nli_index_samples", "nli_probs", "paraphrase_answers"}
_JUDGED |= {"paraphrase_nli_probs"}


def merge_shards(dirs: list[str | Path], out: str | Path) -> dict[str, Any]:
    """Merge the outputs of ``collect`` shards (each a stage output directory) into ``out``; return the summary.

    Every split found in any shard is concatenated and ordered by ``position``; a position present in two shards
    raises :class:`DataError`. The shards must have collected the same features and labels. ``out`` must not
    exist yet; it is written atomically (nothing is left behind on an error). LARS is fitted here when selected.
    """
    import datasets

    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise DataError("no shard directories given", "merge_shards")
    out = Path(out)
    if out.exists():
        raise DataError("output directory exists already", str(out))
    features: list[str] | None = None
    labels: list[str] | None = None
    meta: dict[str, Any] = {}
    departures: dict[str, str] | None = None  # the served shards' features not given exactly, over every shard
    by_split: dict[str, list[dict]] = {}
    for folder in dirs:
        try:
            summary = json.loads((folder / "summary.json").read_text())
            meta = json.loads((folder / "metadata.json").read_text())
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            raise DataError("not a collect output (no summary.json / metadata.json)", str(folder)) from None
        if features is not None and (summary["features"] != features or summary.get("labels") != labels):
            raise DataError("shards collected different features or labels", str(folder))
        features, labels = summary["features"], summary.get("labels")
        if "served" in meta:
            departures = {**(departures or {}), **meta["served"]["approximate_features"]}
        for split in summary["splits"]:
            rows = by_split.setdefault(split, [])
            if (folder / split).exists():
                rows.extend(datasets.load_from_disk(str(folder / split)).to_list())
    for split, records in by_split.items():
        records.sort(key=lambda r: r["position"])
        positions = [r["position"] for r in records]
        if len(set(positions)) != len(positions):
            raise DataError(f"split {split!r} has a question in two shards", "merge_shards")
    meta = {**meta, "shard": "merged", "merged_from": [str(d) for d in dirs]}
    meta.pop("served", None)
    if departures is not None:
        meta["served"] = {"approximate_features": departures}
    with atomic_directory(out) as tmp:
        return _write_outputs(Path(tmp), by_split, list(features or []), meta)
