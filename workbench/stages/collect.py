"""Stage ``collect``: uncertainty features and closed-book correctness labels, one row per question.

For each split in ``collect.splits`` (first ``collect.limit`` questions, then the shard ``collect.shard = "i/N"``:
the questions whose position mod N == i) the stage runs the stats graph
(:func:`workbench.uncertainty.calculators.compute_stats`) in chunks of ``collect.batch_questions`` questions and
writes:

* ``<split>/`` — an HF dataset, one row per question: ``position`` (index in the limited split), ``id``,
  ``question``, ``answers`` (gold aliases), ``greedy_answer``, ``sample_answers``, one float column per feature
  (oriented: higher = more certain; NaN where undefined), the labels ``correct_em`` / ``correct_contains`` /
  ``correct_f1`` (closed-book correctness of the greedy answer against the gold aliases — they need the gold answer,
  see ``labels.json``) and cost counters (``lm_calls``, ``prefill_tokens``, ``decoded_tokens``, ``scored_tokens``,
  ``nli_pairs``, ``seconds``: the chunk's totals divided evenly over its questions);
* ``summary.json`` — rows per split, each feature's AUROC for ``correct_contains`` and NaN counts;
* ``labels.json`` / ``features.json`` / ``metadata.json`` — label docs, feature descriptions, stat settings.

**Resumable**: each finished chunk is written as ``<scratch_dir>/<split>/chunk-<first position>.jsonl``; a re-run
(same stage key) skips the chunks already there, then assembles the dataset from all chunk files.

**Shardable**: run N workers with ``collect.shard=0/N`` … ``collect.shard=N-1/N`` (separate run directories or run
names), then merge their stage outputs with :func:`merge_shards` ``(["run0/stages/collect", ...], "merged")``: rows
are concatenated per split and ordered by ``position``; a position present twice is an error.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_write_json, atomic_write_text
from workbench.core.errors import ConfigError, DataError
from workbench.stages.context import StageContext

LABELS: dict[str, dict[str, Any]] = {
    "correct_em": {"requires_gold": True, "doc": "greedy answer equals a gold alias after normalisation (0/1)"},
    "correct_contains": {"requires_gold": True, "doc": "a gold alias occurs in the greedy answer as words (0/1)"},
    "correct_f1": {"requires_gold": True, "doc": "best token F1 of the greedy answer against the gold aliases"},
}
"""The correctness labels: training targets only, never runtime features (they need the gold answer)."""

COST_COLUMNS = ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "seconds")


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` → ``(i, N)`` with 0 <= i < N; anything else raises :class:`ConfigError`."""
    try:
        index, count = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ConfigError(f"shard must look like 'i/N', got {text!r}", "collect.shard") from None
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard {text!r} needs 0 <= i < N", "collect.shard")
    return index, count


def check_features(names: list[str]) -> None:
    """Refuse unknown features and features whose stats the stats graph cannot produce (one-line ConfigError)."""
    from workbench.uncertainty.calculators import unavailable_features
    from workbench.uncertainty.features import get_features

    if not names:
        raise ConfigError("name at least one feature", "collect.features")
    get_features(names)  # unknown names → ConfigError
    blocked = unavailable_features(names)
    if blocked:
        detail = ", ".join(f"{f} (needs {', '.join(s)})" for f, s in blocked.items())
        raise ConfigError(f"collect cannot produce these features: {detail}", "collect.features")


def _settings(section: Any) -> Any:
    from workbench.uncertainty.calculators import StatSettings

    return StatSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        paraphrases=section.paraphrases,
    )


def _chunk_path(scratch: Path, split: str, first: int) -> Path:
    return scratch / split / f"chunk-{first:07d}.jsonl"


def _collect_chunk(ctx: StageContext, rows: list[dict], positions: list[int], judge: Any, embedder: Any) -> list[dict]:
    """Stats → features → one record per question, with labels and the chunk's costs shared evenly."""
    from workbench.metrics.qa import score_answer
    from workbench.uncertainty.calculators import compute_stats
    from workbench.uncertainty.features import compute_features, required_stats

    section = ctx.config.collect
    generator = ctx.resources.generator()
    before = ctx.counter.snapshot()
    began = time.perf_counter()
    stats = compute_stats(
        rows,
        required_stats(section.features) | {"greedy_text"},  # the labels score the greedy answer
        generator=generator,
        judge=judge,
        embedder=embedder,
        settings=_settings(section),
    )
    seconds = time.perf_counter() - began
    cost = ctx.counter.since(before)
    share = 1.0 / len(rows)
    records = []
    for position, row, st in zip(positions, rows, stats, strict=True):
        greedy = str(st.get("greedy_text", ""))
        scores = score_answer(greedy, list(row["answers"]))
        records.append(
            {
                "position": position,
                "id": str(row["id"]),
                "question": str(row["question"]),
                "answers": [str(a) for a in row["answers"]],
                "greedy_answer": greedy,
                "sample_answers": [str(s) for s in st.get("sample_texts", [])],
                **compute_features(st, section.features, on_missing="nan"),
                "correct_em": scores["em"],
                "correct_contains": scores["contains"],
                "correct_f1": scores["f1"],
                **{name: getattr(cost, name) * share for name in COST_COLUMNS if name != "seconds"},
                "seconds": seconds * share,
            }
        )
    return records


def _read_chunks(folder: Path) -> list[dict]:
    records: list[dict] = []
    for path in sorted(folder.glob("chunk-*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return records


def collect_split(ctx: StageContext, split: str, rows: list[dict], judge: Any, embedder: Any) -> list[dict]:
    """Collect one split chunk by chunk, skipping checkpointed chunks; return all records ordered by position."""
    from workbench.core.logs import track

    section = ctx.config.collect
    index, count = parse_shard(section.shard)
    positions = [p for p in range(len(rows)) if p % count == index]
    size = section.batch_questions
    chunks = [positions[k : k + size] for k in range(0, len(positions), size)]
    for chunk in track(chunks, f"collect ({split})", total=len(chunks)):
        path = _chunk_path(ctx.scratch_dir, split, chunk[0])
        if path.exists():
            continue
        records = _collect_chunk(ctx, [rows[p] for p in chunk], chunk, judge, embedder)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    records = _read_chunks(ctx.scratch_dir / split)
    wanted = set(positions)
    records = sorted((r for r in records if r["position"] in wanted), key=lambda r: r["position"])
    if [r["position"] for r in records] != positions:
        raise DataError("checkpointed chunks do not cover the split exactly once", str(ctx.scratch_dir / split))
    return records


def summarise_split(records: list[dict], features: list[str]) -> dict[str, Any]:
    """Rows, label means, each feature's AUROC for ``correct_contains`` and its NaN count."""
    from workbench.metrics.ranking import auroc

    labels = [r["correct_contains"] for r in records]
    out: dict[str, Any] = {
        "rows": len(records),
        **{f"mean_{name}": (sum(r[name] for r in records) / len(records) if records else None) for name in LABELS},
        "auroc_correct_contains": {},
        "nan_count": {},
    }
    for name in features:
        values = [r[name] for r in records]
        value = auroc(values, labels)
        out["auroc_correct_contains"][name] = None if math.isnan(value) else round(value, 4)
        out["nan_count"][name] = sum(1 for v in values if isinstance(v, float) and math.isnan(v))
    return out


def _write_outputs(out_dir: Path, by_split: dict[str, list[dict]], features: list[str], meta: dict) -> dict:
    """Save one dataset per split plus summary / labels / features / metadata JSON; return the summary."""
    import datasets

    from workbench.uncertainty.features import get_features

    summary: dict[str, Any] = {"features": features, "splits": {}}
    for split, records in by_split.items():
        if records:
            datasets.Dataset.from_list(records).save_to_disk(str(out_dir / split))
        summary["splits"][split] = summarise_split(records, features)
    atomic_write_json(out_dir / "summary.json", summary)
    atomic_write_json(out_dir / "labels.json", LABELS)
    atomic_write_json(out_dir / "features.json", [f.describe() for f in get_features(features)])
    atomic_write_json(out_dir / "metadata.json", meta)
    return summary


def run(ctx: StageContext) -> dict[str, Any]:
    """Collect every configured split; write datasets and JSON docs; return rows and AUROCs per split."""
    from dataclasses import asdict

    from workbench.data.wikiqa import load_saved_dataset_dict
    from workbench.stages.nli_eval import build_judge
    from workbench.uncertainty.calculators import ATTENTION_SCOPE
    from workbench.uncertainty.features import required_stats

    section = ctx.config.collect
    check_features(section.features)
    parse_shard(section.shard)
    if section.batch_questions < 1:
        raise ConfigError("batch_questions must be >= 1", "collect.batch_questions")
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    missing = [s for s in section.splits if s not in qa]
    if missing:
        raise ConfigError(f"split(s) {missing} not in the dataset (has: {', '.join(qa)})", "collect.splits")
    needed = required_stats(section.features)
    judge = build_judge(ctx.config.nli.kind, ctx.resources, ctx.config.nli.model) if needed & _JUDGED else None
    embedder = ctx.resources.embedder() if needed & {"token_relevance", "sts_samples"} else None
    by_split: dict[str, list[dict]] = {}
    for split in section.splits:
        rows = qa[split]
        if section.limit is not None:
            rows = rows.select(range(min(section.limit, len(rows))))
        by_split[split] = collect_split(ctx, split, list(rows), judge, embedder)
    meta = {
        "settings": asdict(_settings(section)),
        "shard": section.shard,
        "stats": sorted(needed),
        "attention_logdiag_scope": ATTENTION_SCOPE,
        "nli_judge": ctx.config.nli.kind,
        "generator": ctx.config.generator.model,
    }
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
    raises :class:`DataError`. The shards must have collected the same features (``summary.json``).
    """
    import datasets

    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise DataError("no shard directories given", "merge_shards")
    features: list[str] | None = None
    meta: dict[str, Any] = {}
    by_split: dict[str, list[dict]] = {}
    for folder in dirs:
        try:
            summary = json.loads((folder / "summary.json").read_text())
            meta = json.loads((folder / "metadata.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            raise DataError("not a collect output (no summary.json / metadata.json)", str(folder)) from None
        if features is not None and summary["features"] != features:
            raise DataError("shards collected different features", str(folder))
        features = summary["features"]
        for split in summary["splits"]:
            if (folder / split).exists():
                by_split.setdefault(split, []).extend(datasets.load_from_disk(str(folder / split)).to_list())
            else:
                by_split.setdefault(split, [])
    for split, records in by_split.items():
        records.sort(key=lambda r: r["position"])
        positions = [r["position"] for r in records]
        if len(set(positions)) != len(positions):
            raise DataError(f"split {split!r} has a question in two shards", "merge_shards")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "shard": "merged", "merged_from": [str(d) for d in dirs]}
    return _write_outputs(out, by_split, list(features or []), meta)
