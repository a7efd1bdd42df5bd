"""Stage ``bench_lifecycle``: a shipped bundle's life after export, on a finished run (default: the quickstart's).

1. **Traffic** — the run's first ``in_distribution`` test questions answered closed-book by the bundle (the answer
   stage's own answers, from the generation cache), scored by ``workbench score``'s functions with the bundle
   (features, P(correct), decisions; :func:`~workbench.scoring.bundle.bundle_scorer`).
2. **Shifts** — each of ``shifts`` (:mod:`~workbench.bench.lifecycle.streams`): the feedback shift's
   ``shift_limit`` questions answered closed-book and with retrieval, every other shift's ``drift_limit`` questions
   closed-book only (they are streamed for drift); closed-book answers scored the same way, answers labelled by gold
   containment.
3. **Drift** — the traffic alone, then the traffic followed by each shift, through serve's rolling window against the
   bundle's reference (:mod:`~workbench.bench.lifecycle.drift`): false alarms, requests until the alarm fires.
4. **Recalibration** — the ``feedback_shift`` stream's labelled answers as feedback to ``recalibrate`` and
   ``write_version`` (the new version goes under this stage's directory, ``bundles/``, never beside the shipped
   one); before / after on its held-out part (:mod:`~workbench.bench.lifecycle.feedback`).

Writes ``bench.json`` (and the scored streams, the feedback file and the new version) in the stage directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.bench.lifecycle import drift, streams
from workbench.bench.lifecycle.feedback import feedback_rows, recalibrate_on, write_feedback
from workbench.bench.lifecycle.report import write_lifecycle_report
from workbench.bench.report import write_bench_report
from workbench.bundle.export import export_run
from workbench.bundle.files import BundleFiles
from workbench.core.atomic import atomic_write_json, atomic_write_text
from workbench.core.errors import ConfigError, DataError
from workbench.data.dataset_store import load_saved_dataset_dict
from workbench.methods.registry import uses_decision_policy
from workbench.monitoring.reference import read_reference
from workbench.recipe import load_recipe
from workbench.runtime import load_bundle
from workbench.scoring.bundle import bundle_scorer
from workbench.scoring.records import read_records
from workbench.scoring.run import run_fingerprint, score_file
from workbench.stages.context import StageContext


def score_answers(runtime: Any, bundle: Path, rows: list[dict[str, Any]], answers: list[str], out: Path) -> list[dict]:
    """``workbench score --bundle`` on the records (id, question, answer) of ``rows`` and ``answers``, written to
    ``out/records.jsonl``; the rows of ``out/score/scores.jsonl`` (resumed when checkpointed)."""
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    lines = [
        {"id": str(r["id"]), "question": str(r["question"]), "answer": a} for r, a in zip(rows, answers, strict=True)
    ]
    atomic_write_text(records_path, "".join(json.dumps(line) + "\n" for line in lines))
    # the decision policy's methods only: the others' record decisions (InSemRAG's controllers) cost an LM call each
    scorer, settings, ref = bundle_scorer(runtime, methods=[m for m in runtime.methods if uses_decision_policy(m)])
    records = read_records(records_path)
    score_file(records, out / "score", settings, scorer, run_fingerprint(records_path, settings, ref, str(bundle)))
    return [json.loads(line) for line in (out / "score" / "scores.jsonl").read_text().splitlines()]


def _bundle(section: Any, run_dir: Path, export_dir: str) -> Path:
    if section.bundle:
        return Path(section.bundle)
    return export_run(run_dir, root=export_dir).path


def run(ctx: StageContext) -> dict[str, Any]:
    """Follow the bundle through traffic, shifts, drift and recalibration (module docstring); write ``bench.json``."""
    section = ctx.config.lifecycle
    run_dir = Path(section.run)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "stages/build_data/qa").is_dir():
        raise ConfigError(f"{run_dir} is not a finished run: run `workbench run quickstart` first", "lifecycle.run")
    bundle = _bundle(section, run_dir, ctx.config.export.dir)
    overrides = dict(section.runtime)
    runtime = load_bundle(bundle, overrides)
    if runtime.policy is None:
        raise DataError("the bundle has no decision policy: nothing to score, monitor or recalibrate", str(bundle))
    reference = read_reference(BundleFiles(runtime.root, runtime.manifest), runtime.manifest, str(bundle))
    run_config = load_recipe(str(run_dir / "config.yaml")).config
    qa = load_saved_dataset_dict(run_dir / "stages/build_data/qa")
    features, tau = list(runtime.policy.features), float(runtime.policy.tau)

    ctx.log.info(
        "traffic: %d test questions, closed-book, scored with %s %s",
        section.in_distribution,
        runtime.name,
        runtime.version,
    )
    traffic_rows = streams.first_rows(qa["test"], section.in_distribution)
    traffic_answers, traffic_ood = streams.answer(runtime, traffic_rows, streams.CLOSED_BOOK)
    traffic = score_answers(runtime, bundle, traffic_rows, traffic_answers, ctx.out_dir / "traffic")
    traffic_labels = streams.labels(traffic_rows, traffic_answers)
    shifts: dict[str, Any] = {}
    for shift in section.shifts:
        feedback = shift == section.feedback_shift
        rows = streams.shift_rows(qa, shift, section.shift_limit if feedback else section.drift_limit, run_config)
        ctx.log.info(
            "shift %s: %d questions, closed-book%s", shift, len(rows), " and with retrieval" if feedback else ""
        )
        closed, ood = streams.answer(runtime, rows, streams.CLOSED_BOOK)
        scored = score_answers(runtime, bundle, rows, closed, ctx.out_dir / f"shift-{shift}")
        shifts[shift] = {"rows": scored, "labels": streams.labels(rows, closed), "ood": ood, "labels_retrieved": None}
        if feedback:  # the feedback carries the answer with retrieval's label too: routed quality is measured with it
            retrieved, _ = streams.answer(runtime, rows, streams.RETRIEVED)
            shifts[shift]["labels_retrieved"] = streams.labels(rows, retrieved)

    monitoring: dict[str, Any] = {"reference": None}
    if reference is not None:
        ref = drift.with_window(reference, section.window, section.min_count)
        base = drift.log_records(traffic, features, tau, traffic_ood)
        steps = drift.stream(ref, base)
        monitoring = {
            "reference": {
                "split": ref.split,
                "rows": ref.rows,
                "series": list(ref.series),
                "ood_questions": ref.series["ood"].n if "ood" in ref.series else None,
            },
            "settings": {k: getattr(ref.settings, k) for k in ("window", "min_count", "psi_alarm", "alpha", "bins")},
            "in_distribution": drift.false_alarms(steps),
            "in_distribution_ratio": drift.alarm_ratio_trace(steps),
            "shifts": {},
        }
        for shift, data in shifts.items():
            shifted = drift.stream(ref, [*base, *drift.log_records(data["rows"], features, tau, data["ood"])])
            monitoring["shifts"][shift] = {
                **drift.requests_to_alarm(shifted, len(base)),
                "ratio": drift.alarm_ratio_trace(shifted),
                "start": len(base),
            }

    chosen = shifts[section.feedback_shift]
    feedback = write_feedback(
        ctx.out_dir / "feedback.jsonl", feedback_rows(chosen["rows"], chosen["labels"], chosen["labels_retrieved"])
    )
    ctx.log.info("recalibrate on %d labelled answers of shift %s", len(chosen["labels"]), section.feedback_shift)
    recalibration = recalibrate_on(
        bundle,
        feedback,
        chosen["labels_retrieved"],
        ctx.out_dir / "bundles",
        holdout=section.holdout,
        seed=ctx.config.seed,
        force=section.force,
        overrides=overrides,
        refit=section.refit,
        tau_rule=section.tau_rule,
    )
    bench = {
        "bundle": {
            "name": runtime.name,
            "version": runtime.version,
            "path": str(bundle),
            "features": features,
            "tau": tau,
        },
        "run": str(run_dir),
        "settings": {
            "in_distribution": section.in_distribution,
            "shifts": list(section.shifts),
            "shift_limit": section.shift_limit,
            "drift_limit": section.drift_limit,
            "feedback_shift": section.feedback_shift,
            "holdout": section.holdout,
        },
        "streams": {
            "traffic": _stream_summary(traffic, traffic_labels, tau, traffic_ood),
            **{
                name: {
                    **_stream_summary(d["rows"], d["labels"], tau, d["ood"]),
                    "accuracy_retrieved": _mean(d["labels_retrieved"] or []),
                }
                for name, d in shifts.items()
            },
        },
        "monitoring": monitoring,
        "recalibration": recalibration,
    }
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    alarms = monitoring.get("shifts", {})
    return {
        "traffic_accuracy": bench["streams"]["traffic"]["accuracy"],
        "false_alarms": (monitoring.get("in_distribution") or {}).get("alarms"),
        **{f"requests_to_alarm_{name}": row["any"] for name, row in alarms.items()},
        "recalibrated": recalibration.get("version"),
    }


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _stream_summary(
    rows: list[dict[str, Any]], labels: list[int], tau: float, ood: list[bool | None]
) -> dict[str, Any]:
    """Size, closed-book accuracy, mean P(correct), retrieval rate at τ and OOD-flag rate of one scored stream."""
    p = [r["p_correct"] for r in rows if r["p_correct"] is not None]
    return {
        "n": len(rows),
        "accuracy": _mean(labels),
        "mean_p_correct": sum(p) / len(p) if p else None,
        "retrieval_rate": _mean([int(v < tau) for v in p]),
        "ood_rate": _mean([int(f) for f in ood if f is not None]),
    }


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and its plots to the report directory (:func:`write_lifecycle_report`)."""
    return write_bench_report(
        ctx, "bench_lifecycle", lambda bench, tmp: write_lifecycle_report(bench, tmp, name=ctx.config.name)
    )[0]
