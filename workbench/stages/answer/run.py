"""Stage ``answer``: answer a split closed-book and with retrieval, and score each answer against the gold aliases.

Outputs: ``answers/`` (an HF dataset, one row per question and mode: prediction, EM, token F1, containment,
prompt / answer tokens, retrieved passage ids, whether the gold passage was retrieved), ``summary.json`` (means per
mode and per question template) and ``examples.json`` (the first questions with every mode's answer, for reports).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from workbench.backends.passage_table import passages_of
from workbench.backends.prompts import ANSWER_SYSTEM, format_passages
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.core.logs import track
from workbench.metrics.qa import score_answer
from workbench.stages.context import StageContext


def _load_split(ctx: StageContext):
    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.answer
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split '{section.split}' not in the dataset (has: {', '.join(qa)})", "answer.split")
    return select_rows(qa[section.split], section.limit, section.per_template)


def select_rows(split: Any, limit: int | None, per_template: int | None) -> Any:
    """The first ``limit`` rows of ``split`` (a Dataset; None: all), then of those the first ``per_template`` of
    each question template (None: no cap)."""
    if limit is not None:
        split = split.select(range(min(limit, len(split))))
    if per_template is not None:
        seen: dict[str, int] = {}
        keep = []
        for i, metadata in enumerate(split["metadata"]):
            template = template_of({"metadata": metadata})
            seen[template] = seen.get(template, 0) + 1
            if seen[template] <= per_template:
                keep.append(i)
        split = split.select(keep)
    return split


def _metadata_field(row: dict[str, Any], key: str, default: str = "unknown") -> str:
    try:
        return str(json.loads(row.get("metadata") or "{}").get(key, default))
    except json.JSONDecodeError:
        return default


def template_of(row: dict[str, Any]) -> str:
    """The question template named in a QA row's metadata (``unknown`` when absent)."""
    return _metadata_field(row, "template")


def mode_contexts(
    ctx: StageContext, mode: str, rows: list[dict[str, Any]], corpus: Any
) -> tuple[list[str | None], list[list[str]]]:
    """``(contexts, retrieved ids)`` of ``rows`` in one answer mode: ``closed_book`` none; ``rag`` the run's
    retriever's top ``retrieval.k`` passages of ``corpus``; ``gold`` each question's own gold passages. Passages are
    cut to ``answer.passage_chars`` characters."""
    chars = ctx.config.answer.passage_chars
    contexts: list[str | None] = [None] * len(rows)
    retrieved: list[list[str]] = [[] for _ in rows]
    if mode == "rag":
        retriever = ctx.resources.retriever(corpus)
        results = retriever.search([r["question"] for r in rows], k=ctx.config.retrieval.k)
        passages = passages_of(retriever, corpus)  # after the search: an external engine may have added passages
        titles = passages["title"]
        texts = passages["text"]
        for i, result in enumerate(results):
            retrieved[i] = list(result.ids)
            idx = [int(j) for j in result.indices]
            contexts[i] = format_passages([titles[j] for j in idx], [texts[j] for j in idx], chars)
    elif mode == "gold":  # the passages the question was made from: what retrieval at best could give
        for i, row in enumerate(rows):
            golds = row["gold_passages"]
            retrieved[i] = [p["doc_id"] for p in golds]
            contexts[i] = format_passages([p["title"] for p in golds], [p["text"] for p in golds], chars)
    return contexts, retrieved


def answer_prompts(generator: Any, rows: list[dict[str, Any]], contexts: list[str | None], max_new_tokens: int):
    """The answer prompts of ``rows`` (with their ``contexts``, None: closed-book), as the answer stage renders them:
    the generator's format and the workbench's answer instruction."""
    return [
        generator.build_prompt(row["question"], context, max_new_tokens=max_new_tokens, system=ANSWER_SYSTEM)
        for row, context in zip(rows, contexts, strict=True)
    ]


def answer_mode(ctx, mode, rows, corpus, generator) -> list[dict[str, Any]]:
    """Answer ``rows`` in one mode (``closed_book``, ``rag`` or ``gold``) with ``generator``, greedily, and score
    each answer; return one record per question (the fields of the ``answers/`` dataset)."""
    section = ctx.config.answer
    contexts, retrieved = mode_contexts(ctx, mode, rows, corpus)
    prompts = answer_prompts(generator, rows, contexts, section.max_new_tokens)
    records: list[dict[str, Any]] = []
    batch = ctx.config.generator.batch_size
    starts = range(0, len(rows), batch)
    for start in track(starts, f"answer ({mode})", total=len(starts)):
        began = time.perf_counter()
        chunk = prompts[start : start + batch]
        outputs = generator.generate(
            [p.text for p in chunk], max_new_tokens=section.max_new_tokens, temperature=0.0, stop=("\n",)
        )
        seconds = (time.perf_counter() - began) / len(chunk)
        for offset, (prompt, output) in enumerate(zip(chunk, outputs, strict=True)):
            row = rows[start + offset]
            prediction = output.text.strip()
            gold_docs = {p["doc_id"] for p in row["gold_passages"]}
            hit_docs = {pid.split("#", 1)[0] for pid in retrieved[start + offset]}
            records.append(
                {
                    "id": row["id"],
                    "mode": mode,
                    "question": row["question"],
                    "answers": list(row["answers"]),
                    "template": template_of(row),
                    "difficulty": _metadata_field(row, "difficulty", ""),
                    "gold_option": int(row.get("answer_index", -1)),
                    "prediction": prediction,
                    **score_answer(prediction, row["answers"], row.get("options") or []),
                    "prompt_tokens": prompt.n_tokens,
                    "new_tokens": len(output.token_ids),
                    "truncated": prompt.truncated,
                    "retrieved_ids": retrieved[start + offset],
                    "gold_retrieved": float(bool(gold_docs & hit_docs))
                    if mode != "closed_book" and gold_docs
                    else -1.0,
                    "seconds": seconds,
                }
            )
    return records


def _share(flags: list[bool]) -> float | None:
    return float(np.mean(flags)) if flags else None


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Means per mode (quality, tokens, time, retrieval recall) and containment / EM per mode and template."""
    modes: dict[str, Any] = {}
    by_template: dict[str, dict[str, Any]] = {}
    for mode in dict.fromkeys(r["mode"] for r in records):
        rows = [r for r in records if r["mode"] == mode]
        recall = [r["gold_retrieved"] for r in rows if r["gold_retrieved"] >= 0]
        modes[mode] = {
            "n": len(rows),
            **{k: float(np.mean([r[k] for r in rows])) for k in ("em", "f1", "contains")},
            "prompt_tokens": float(np.mean([r["prompt_tokens"] for r in rows])),
            "new_tokens": float(np.mean([r["new_tokens"] for r in rows])),
            "seconds_per_question": float(np.mean([r["seconds"] for r in rows])),
            "truncated": int(sum(r["truncated"] for r in rows)),
            "recall_at_k": float(np.mean(recall)) if recall else None,
        }
        by_template[mode] = {}
        for template in sorted({r["template"] for r in rows}):
            sub = [r for r in rows if r["template"] == template]
            by_template[mode][template] = {
                "n": len(sub),
                "em": float(np.mean([r["em"] for r in sub])),
                "contains": float(np.mean([r["contains"] for r in sub])),
                "format_ok": float(np.mean([r.get("format_ok", 1.0) for r in sub])),
                # where the gold option sits (either-or / multiple choice): a biased model shows up against it
                "gold_first": _share([r.get("gold_option", -1) == 0 for r in sub if r.get("gold_option", -1) >= 0]),
                "by_difficulty": {
                    d: float(np.mean([r["contains"] for r in sub if r.get("difficulty") == d]))
                    for d in sorted({r.get("difficulty", "") for r in sub} - {""})
                },
            }
    return {"modes": modes, "by_template": by_template}


def run(ctx: StageContext) -> dict[str, Any]:
    """Answer the configured split in every mode; save answers, summary and examples; return headline scores."""
    import datasets
    import torch

    section = ctx.config.answer
    rows = list(_load_split(ctx))
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    generator = ctx.resources.generator()
    records: list[dict[str, Any]] = []
    for mode in section.modes:
        records.extend(answer_mode(ctx, mode, rows, corpus, generator))
    datasets.Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "answers"))

    summary = summarise(records)
    summary.update(
        split=section.split,
        n_questions=len(rows),
        n_passages=len(corpus),
        generator=ctx.config.generator.model,
        generator_source=generator.resolved.source,
        retriever=ctx.config.retrieval.backend,
        k=ctx.config.retrieval.k,
        max_new_tokens=section.max_new_tokens,
        threads=torch.get_num_threads(),
    )
    atomic_write_json(ctx.out_dir / "summary.json", summary)
    examples = []
    for row in rows[:10]:
        example = {"question": row["question"], "gold": row["answers"][0]}
        for r in records:
            if r["id"] == row["id"]:
                example[f"pred_{r['mode']}"] = r["prediction"]
        examples.append(example)
    atomic_write_json(ctx.out_dir / "examples.json", examples)
    out: dict[str, Any] = {"n_questions": len(rows)}
    for mode, row in summary["modes"].items():
        out.update({f"{mode}_{k}": round(row[k], 4) for k in ("em", "f1", "contains")})
    return out
