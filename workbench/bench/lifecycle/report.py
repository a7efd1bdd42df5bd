"""The lifecycle report: ``report.md`` with the streams, the drift alarms, the recalibration and its before / after,
and two plots — the drift over time (PSI per series after each request, the shift marked) and the reliability of
P(correct) and of each calibrated feature on the held-out feedback, before and after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.plots.drift import drift_over_time
from workbench.plots.reliability import reliability_grid

DRIFT_PLOT = "drift.png"
RELIABILITY_PLOT = "reliability.png"


def _f(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ci(row: dict[str, Any], which: str) -> str:
    interval = row.get(f"{which}_ci") or {}
    return f"{_f(row.get(which))} [{_f(interval.get('low'))}, {_f(interval.get('high'))}]"


def _streams(bench: dict[str, Any]) -> list[str]:
    lines = [
        "## Streams",
        "",
        "| stream | questions | closed-book accuracy | with retrieval | mean P(correct) | retrieval rate at τ "
        "| OOD flagged |",
        "|---|---|---|---|---|---|---|",
    ]
    order = ["traffic", *bench["settings"]["shifts"]]  # bench.json's keys come back sorted
    for name in order:
        row = bench["streams"][name]
        label = "traffic (test split)" if name == "traffic" else f"shift: {name}"
        lines.append(
            f"| {label} | {row['n']} | {_f(row['accuracy'])} | {_f(row.get('accuracy_retrieved'))} | "
            f"{_f(row['mean_p_correct'])} | {_f(row['retrieval_rate'])} | {_f(row.get('ood_rate'))} |"
        )
    return [*lines, ""]


def _drift(bench: dict[str, Any], out: Path) -> list[str]:
    monitoring = bench["monitoring"]
    lines = ["## Drift", ""]
    if monitoring.get("reference") is None:
        return [*lines, "The bundle carries no reference distributions (exported before schema 1.6): not measured.", ""]
    ref, settings = monitoring["reference"], monitoring["settings"]
    ind = monitoring["in_distribution"]
    flag = ref.get("ood_questions")
    flag_part = (
        f"; the OOD flag's series: {flag} questions of it, each checked against the others"
        if flag and flag != ref["rows"]
        else ""
    )
    lines += [
        f"Every request joins serve's rolling window ({settings['window']} answers; a series may alarm from "
        f"{settings['min_count']} on, above PSI {settings['psi_alarm']:g} and the sampling bound at α "
        f"{settings['alpha']:g}) and is checked against the bundle's reference ({ref['rows']} rows of its "
        f"{ref['split']} split{flag_part}).",
        "",
        f"**In distribution** ({ind['requests']} traffic requests): {ind['alarms']} of {ind['judged']} judged requests "
        "alarmed (on this traffic any alarm is a false one).",
        "",
        "| stream | shifted requests | requests until the alarm | first series to alarm | alarming before the shift |",
        "|---|---|---|---|---|",
    ]
    shifts = bench["settings"]["shifts"]
    for name in shifts:
        row = monitoring["shifts"][name]
        fired = sorted((n, s) for s, n in row["series"].items() if n is not None)
        first = ", ".join(s for n, s in fired if n == fired[0][0]) if fired else "none"
        fired_at = row["any"] if row["any"] is not None else "no alarm"
        before = ", ".join(row["alarming_before"]) or "none"
        lines.append(f"| {name} | {row['shifted']} | {fired_at} | {first} | {before} |")
    lines += ["", "Per series (shifted requests until it alarms; – never):", ""]
    names = sorted({s for row in monitoring["shifts"].values() for s in row["series"]})
    lines += [f"| series | in-distribution alarms | {' | '.join(shifts)} |", "|---|---|" + "---|" * len(shifts)]
    for series in names:
        ind_row = ind["series"].get(series, {"alarms": 0, "judged": 0})
        cells = [str(monitoring["shifts"][s]["series"].get(series) or "–") for s in shifts]
        lines.append(f"| {series} | {ind_row['alarms']} / {ind_row['judged']} | {' | '.join(cells)} |")
    for name in shifts:
        row = monitoring["shifts"][name]
        if row["ratio"]:
            path = out / f"drift-{name}.png"
            title = f"Drift: {row['start']} traffic requests, then shift '{name}' (from request {row['start'] + 1})"
            drift_over_time(
                path,
                row["ratio"],
                1.0,
                xlabel="request",
                title=title,
                ylabel="PSI / the threshold it alarms above",
                alarm_label="alarm (PSI over its threshold)",
            )
            lines += ["", f"![drift on shift {name}]({path.name})"]
    return [*lines, ""]


def _recalibration(bench: dict[str, Any], out: Path) -> list[str]:
    result = bench["recalibration"]
    shift = bench["settings"]["feedback_shift"]
    lines = ["## Recalibration", ""]
    if "refused" in result:
        return [
            *lines,
            f"`recalibrate` refused the feedback of shift {shift} ({result['rows']} rows, {result['correct']} "
            f"correct): {result['refused']}",
            "",
        ]
    lines += [
        f"Feedback: the {result['fit_rows'] + result['holdout_rows']} labelled answers of shift {shift}; "
        f"{result['fit_rows']} refit the calibrators, {result['holdout_rows']} are held out. Version "
        f"{result['parent']} → {result['version']}"
        + ("" if result["better"] else " (not better: written because lifecycle.force)")
        + f"; intervals: {result['metrics']['intervals']}.",
        "",
        "| on the held-out feedback | AUROC before | AUROC after | ECE before | ECE after |",
        "|---|---|---|---|---|",
    ]
    p = result["p_correct"]
    lines.append(
        f"| **P(correct)** (the bundle's decision) | {_ci(p['auroc'], 'before')} | {_ci(p['auroc'], 'after')} | "
        f"{_ci(p['ece'], 'before')} | {_ci(p['ece'], 'after')} |"
    )
    for name, row in result["metrics"]["features"].items():
        lines.append(
            f"| {name} | {_ci(row['auroc'], 'before')} | {_ci(row['auroc'], 'after')} | "
            f"{_ci(row['ece'], 'before')} | {_ci(row['ece'], 'after')} |"
        )
    mean = result["metrics"]["mean_ece"]
    change = mean["change_ci"]
    routed = result["routed"]
    lines += [
        "",
        f"Mean ECE over the features {_f(mean['before'])} → {_f(mean['after'])} (change {mean['change']:+.3f}, "
        f"[{_f(change['low'])}, {_f(change['high'])}]).",
        "",
        f"Refitted: {', '.join(result.get('refitted') or ['calibrators'])}. The decision on the held-out feedback "
        "(retrieve when P(correct) < τ; routed quality: the closed-book answer's label where it does not retrieve, "
        "the answer with retrieval's where it does):",
        "",
        "| decision | τ | retrieval rate | routed quality |",
        "|---|---|---|---|",
        *(
            f"| {who} | {routed['tau'][key]:.3f} | {_ci(routed['retrieval_rate'], key)} | "
            f"{_ci(routed['quality'], key)} |"
            for who, key in (
                (f"{result['parent']} (parent)", "before"),
                (f"{result['version']} (recalibrated)", "after"),
            )
        ),
        "",
        f"Change in routed quality {routed['quality']['change']:+.3f} "
        f"[{_f(routed['quality']['change_ci']['low'])}, {_f(routed['quality']['change_ci']['high'])}]; closed-book "
        f"{_f(routed['closed_book'])}, always retrieving {_f(routed['always_retrieve'])}.",
    ]
    rel = result["reliability"]
    panels = {"P(correct)": (*rel["p_correct"], rel["labels"])}
    panels.update({name: (*pair, rel["labels"]) for name, pair in rel["features"].items()})
    reliability_grid(out / RELIABILITY_PLOT, panels, title=f"Held-out feedback of shift {shift}: before / after")
    return [*lines, "", f"![reliability before / after]({RELIABILITY_PLOT})", ""]


def write_lifecycle_report(bench: dict[str, Any], out: Path, *, name: str) -> Path:
    """Write ``report.md`` and the plots into ``out`` from the lifecycle stage's ``bench.json``."""
    b, sizes = bench["bundle"], bench["settings"]
    lines = [
        f"# {name}: a bundle's life after export",
        "",
        f"Bundle {b['name']} {b['version']} (`{b['path']}`), exported from `{bench['run']}`; it decides on "
        f"{', '.join(b['features'])} with τ {b['tau']:.3f}. Its traffic is the run's test split answered closed-book; "
        "each shift is answered closed-book (the feedback shift with retrieval too), and every answer is labelled by "
        "gold containment (simulated user feedback).",
        "",
        f"Made by `workbench run {name}` after `workbench run quickstart`; sizes: {sizes['in_distribution']} traffic "
        f"questions, {sizes['shift_limit']} of the feedback shift ({sizes['feedback_shift']}), up to "
        f"{sizes.get('drift_limit', '–')} of every other shift; held-out feedback share {sizes['holdout']}.",
        "",
        *_streams(bench),
        *_drift(bench, out),
        *_recalibration(bench, out),
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
