"""``workbench score``: features (and, with a bundle, P(correct) and each method's decision) for existing records,
through the same stats graph as ``collect`` with the records' answers as its given answer source.

For the records of one file (:func:`~workbench.scoring.records.read_records`, all checked before anything is
written), the shard ``i/N`` (the rows whose position mod N == i) is scored in chunks of ``batch`` rows:

1. the answers (and given samples) are teacher-forced into Generations (:mod:`workbench.scoring.given`);
2. rows are grouped by the stats they can feed, and each group runs
   :func:`~workbench.uncertainty.calculators.compute_stats` with ``answers=`` (and ``samples=`` when given: else the
   samples are generated) and the records' ``contexts`` for DENSE;
3. the features are computed from those stats (:func:`~workbench.uncertainty.features.compute_features`); a NaN
   feature gets a reason (:func:`nan_reasons`); with a bundle, :mod:`workbench.scoring.decisions` adds
   P(correct) and the decisions.

Output (``out``, a directory): ``chunks/chunk-<first position>.jsonl`` — one checkpoint per finished chunk (a re-run
with the same input and settings skips them: resumable; another input or settings is refused), ``scores.jsonl`` —
the rows in position order, each :data:`ROW_FIELDS`, and ``score.json`` — how they were made and the NaN counts. The
row schema is :data:`SCHEMA_VERSION` (docs/score.md). Shards write separate directories; :func:`merge_scores` joins
them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_directory, atomic_write_json, atomic_write_text
from workbench.core.errors import ConfigError, DataError
from workbench.core.hashing import path_sha256
from workbench.core.logs import track
from workbench.core.shards import parse_shard
from workbench.scoring.given import NO_ATTENTION, NO_HIDDEN, SAMPLE_TOKEN_STATS, force_texts
from workbench.scoring.records import ScoreRecord
from workbench.uncertainty.calculators import (
    ANSWER_SYSTEM,
    DENSE_STATS,
    UNAVAILABLE_STATS,
    StatSettings,
    compute_stats,
)
from workbench.uncertainty.features import compute_features, get_features, required_stats

SCHEMA_VERSION = 1
"""The version of the rows' schema (``score.json``'s ``schema_version``); ``recalibrate`` reads it."""

ROW_FIELDS = ("id", "position", "question", "answer", "features", "reasons", "p_correct", "decisions")
"""The fields of a ``scores.jsonl`` row: the record's ``id`` / ``position`` / ``question`` / ``answer``,
``features`` (name → oriented value, null for NaN), ``reasons`` (name → why that feature is NaN), and with a bundle
``p_correct`` (null without a decision policy) and ``decisions`` (method → decision; see
:mod:`workbench.scoring.decisions`)."""

UNDEFINED = "undefined for this record (e.g. an empty answer, or too few distinct samples)"
"""The reason of a NaN that no missing stat explains: the feature's formula has no value here."""


@dataclass(frozen=True)
class ScoreSettings:
    """How to score: the ``features`` (registry names), the ``stats`` settings (answer prompt budget, samples,
    temperature: a bundle's collection settings when scoring for it), ``batch`` rows per checkpointed chunk and the
    ``shard`` ``"i/N"``."""

    features: tuple[str, ...]
    stats: StatSettings
    batch: int = 8
    shard: str = "0/1"

    def check(self) -> tuple[int, int]:
        """One-line ConfigError for an empty or unknown feature list, a batch < 1 or a bad shard; ``(i, N)``."""
        if not self.features:
            raise ConfigError("name at least one feature", "--features")
        get_features(self.features)
        if self.batch < 1:
            raise ConfigError("must be >= 1", "--batch")
        return parse_shard(self.shard, "--shard")


@dataclass
class Scorer:
    """The tools a chunk is scored with: the ``generator`` (in process or served), the NLI ``judge`` and the
    ``embedder`` (None when no selected feature needs them), the bundle's ``lars_scorer``, a ``decide`` function
    (``(features, stats, record) -> {p_correct, decisions}``, :func:`workbench.scoring.decisions.bundle_decider`;
    None: no bundle) and the ``decision_stats`` its methods' own rules read."""

    generator: Any
    judge: Any = None
    embedder: Any = None
    lars_scorer: Any = None
    decide: Any = None
    decision_stats: frozenset[str] = frozenset()


def settings_for(records: Sequence[ScoreRecord], settings: ScoreSettings) -> ScoreSettings:
    """``settings`` with ``stats.samples`` set to the records' sample count when they give samples."""
    given = records[0].samples
    if given is None:
        return settings
    return replace(settings, stats=replace(settings.stats, samples=len(given)))


def score_chunk(records: Sequence[ScoreRecord], settings: ScoreSettings, scorer: Scorer) -> list[dict[str, Any]]:
    """The output rows (:data:`ROW_FIELDS`) of one chunk of records."""
    generator = scorer.generator
    stats_settings = settings.stats
    needed = (required_stats(settings.features) | scorer.decision_stats) - UNAVAILABLE_STATS
    if "lars" in settings.features:
        needed |= {"greedy_logprobs"}
    prompts = [
        generator.build_prompt(
            r.question, None, max_new_tokens=stats_settings.max_new_tokens, system=ANSWER_SYSTEM
        ).text
        for r in records
    ]
    answers = force_texts(generator, prompts, [r.answer for r in records], score=True)
    given_samples = records[0].samples is not None
    samples = []
    if given_samples and needed & {"sample_texts", "sample_logprobs", "sample_hidden", "nli_probs", "sts_samples"}:
        n = stats_settings.samples
        flat = force_texts(
            generator,
            [p for p in prompts for _ in range(n)],
            [s for r in records for s in r.samples or ()],
            score=bool(needed & SAMPLE_TOKEN_STATS),
        )
        samples = [flat[i * n : (i + 1) * n] for i in range(len(records))]
    missing: list[dict[str, str]] = []
    in_process = _has(generator, "attentions")
    for i, record in enumerate(records):
        row = dict(answers[i].missing)
        if samples:
            for forced in samples[i]:
                if forced.missing:
                    row.setdefault("sample_logprobs", next(iter(forced.missing.values())))
            row["sample_hidden"] = NO_HIDDEN
        if not in_process:
            row.setdefault("attention_logdiag", NO_ATTENTION)
        if record.contexts is None:
            row.update(dict.fromkeys(DENSE_STATS, "needs the record's 'contexts' (the ranked retrieved passages)"))
        missing.append({stat: why for stat, why in row.items() if stat in needed})
    groups: dict[frozenset[str], list[int]] = {}
    for i, row in enumerate(missing):
        groups.setdefault(frozenset(row), []).append(i)
    stats: list[dict[str, Any]] = [{} for _ in records]
    for absent, rows in groups.items():
        wanted = needed - absent
        out = compute_stats(
            [{"question": records[i].question} for i in rows],
            wanted,
            generator=generator,
            judge=scorer.judge,
            embedder=scorer.embedder,
            settings=stats_settings,
            contexts=[list(records[i].contexts or ()) for i in rows] if wanted & DENSE_STATS else None,
            answers=[answers[i].generation for i in rows],
            samples=[[f.generation for f in samples[i]] for i in rows] if samples else None,
        )
        for i, row in zip(rows, out, strict=True):
            stats[i] = row
    result = []
    for record, st, absent in zip(records, stats, missing, strict=True):
        if "lars" in settings.features and scorer.lars_scorer is not None and "greedy_logprobs" in st:
            st["lars_score"] = float(scorer.lars_scorer.predict(st["greedy_logprobs"]))
        elif "lars" in settings.features:
            absent.setdefault("lars_score", "lars needs the fitted scorer of a bundle that decides with it (--bundle)")
        values = compute_features(st, settings.features, on_missing="nan")
        row: dict[str, Any] = {
            "id": record.id,
            "position": record.position,
            "question": record.question,
            "answer": record.answer.text,
            "features": {name: _json_number(v) for name, v in values.items()},
            "reasons": nan_reasons(values, absent),
        }
        if scorer.decide is not None:
            row.update(scorer.decide(values, st, record))
        result.append(row)
    return result


def nan_reasons(values: dict[str, float], missing: dict[str, str]) -> dict[str, str]:
    """Why each NaN feature of ``values`` is NaN: the reason of the first stat it needs that ``missing`` names, else
    :data:`UNDEFINED`."""
    out = {}
    for feature in get_features([n for n, v in values.items() if isinstance(v, float) and math.isnan(v)]):
        out[feature.name] = next((missing[s] for s in feature.stats if s in missing), UNDEFINED)
    return out


def _json_number(value: float) -> float | None:
    """NaN as null (its reason says why); infinities stay (JSON ``Infinity`` / ``-Infinity``, as Python writes)."""
    return None if isinstance(value, float) and math.isnan(value) else float(value)


def _has(generator: Any, capability: str) -> bool:
    capabilities = getattr(generator, "capabilities", None)
    return capabilities is None or capabilities.has(capability)


def run_fingerprint(input_path: Path, settings: ScoreSettings, generator_ref: str, bundle: str | None) -> dict:
    """What a checkpoint must agree with to be resumed: the input's sha256, the settings, the model and bundle."""
    return {
        "schema_version": SCHEMA_VERSION,
        "input": str(Path(input_path).resolve()),
        "input_sha256": path_sha256(input_path),
        "features": list(settings.features),
        "stats": settings.stats.to_dict(),
        "batch": settings.batch,
        "shard": settings.shard,
        "generator": generator_ref,
        "bundle": bundle,
    }


def score_file(
    records: Sequence[ScoreRecord], out: Path, settings: ScoreSettings, scorer: Scorer, fingerprint: dict
) -> dict[str, Any]:
    """Score ``records`` (checked already) into the directory ``out`` (see the module docstring); return the
    summary written to ``score.json``. A chunk already checkpointed under the same ``fingerprint`` is skipped."""
    index, count = settings.check()
    settings = settings_for(records, settings)
    out = Path(out)
    chunks_dir = out / "chunks"
    run_file = chunks_dir / "run.json"
    if run_file.exists():
        if json.loads(run_file.read_text()) != fingerprint:
            raise DataError("holds the checkpoints of another input or other settings: use a new --out", str(out))
    else:
        chunks_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_file, fingerprint)
    positions = [r.position for r in records if r.position % count == index]
    by_position = {r.position: r for r in records}
    chunks = [positions[k : k + settings.batch] for k in range(0, len(positions), settings.batch)]
    for chunk in track(chunks, "score", total=len(chunks)):
        path = chunks_dir / f"chunk-{chunk[0]:07d}.jsonl"
        if path.exists():
            continue
        rows = score_chunk([by_position[p] for p in chunk], settings, scorer)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    rows = [
        json.loads(line) for path in sorted(chunks_dir.glob("chunk-*.jsonl")) for line in path.read_text().splitlines()
    ]
    rows = sorted((r for r in rows if r["position"] % count == index), key=lambda r: r["position"])
    if [r["position"] for r in rows] != positions:
        raise DataError("checkpointed chunks do not cover the records exactly once", str(chunks_dir))
    return write_scores(out, rows, {**fingerprint, "stats": settings.stats.to_dict()})


def write_scores(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Write ``scores.jsonl`` (rows in position order) and ``score.json`` (``meta``, rows, NaN counts and reasons per
    feature) atomically; return the summary."""
    features = list(meta["features"])
    summary = {
        **meta,
        "rows": len(rows),
        "nan_count": {f: sum(1 for r in rows if r["features"].get(f) is None) for f in features},
        "nan_reasons": {f: sorted({r["reasons"][f] for r in rows if f in r["reasons"]}) for f in features},
    }
    atomic_write_text(out / "scores.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    atomic_write_json(out / "score.json", summary)
    return summary


def merge_scores(dirs: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Join the ``scores.jsonl`` of shard directories into ``out`` (which must not exist), in position order; the
    shards must share input, features and settings, and no position may appear twice (DataError naming the shard)."""
    out = Path(out)
    if out.exists():
        raise DataError("output directory exists already", str(out))
    if not dirs:
        raise DataError("no shard directories given", "merge")
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] | None = None
    for folder in map(Path, dirs):
        try:
            summary = json.loads((folder / "score.json").read_text())
            lines = (folder / "scores.jsonl").read_text().splitlines()
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            raise DataError("not a finished score output (no score.json / scores.jsonl)", str(folder)) from None
        same = {k: v for k, v in summary.items() if k not in ("shard", "rows", "nan_count", "nan_reasons")}
        if meta is not None and same != meta:
            raise DataError("this shard scored another input or with other settings", str(folder))
        meta = same
        rows.extend(json.loads(line) for line in lines if line.strip())
    rows.sort(key=lambda r: r["position"])
    positions = [r["position"] for r in rows]
    if len(set(positions)) != len(positions):
        raise DataError("a record appears in two shards", "merge")
    with atomic_directory(out) as tmp:
        return write_scores(Path(tmp), rows, {**(meta or {}), "shard": "merged", "merged_from": [str(d) for d in dirs]})
