"""The ``monitor`` verb: drift of a served bundle's answer log against the bundle's reference (docs/monitoring.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def monitor_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="A bundle directory or its .tar.gz.")],
    log: Annotated[
        Path, typer.Option("--input", help="An answer log (JSONL; `workbench serve --answer-log` writes one).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Where drift.json and drift.png go.")] = Path("reports/monitor"),
    window: Annotated[
        int | None, typer.Option("--window", help="Answers per window (default: the bundle's drift.window).")
    ] = None,
    fail_on_alarm: Annotated[
        bool, typer.Option("--fail-on-alarm", help="Exit with status 1 when any window alarms.")
    ] = False,
) -> None:
    """Drift of an answer log against the bundle's reference distributions, window by window: PSI and KS per
    feature, P(correct), retrieval and OOD rate; a JSON report and a plot of drift over time."""
    from workbench.monitoring.offline import monitor_log

    report, written = monitor_log(bundle, log, out, window)
    typer.echo(
        f"{report['records']} answers of {report['bundle']} {report['version']} in {len(report['windows'])} "
        f"window(s) of {report['window']}, against its {report['reference_split']} split"
    )
    for name, row in report["summary"].items():
        peak = "-" if row["max_psi"] is None else f"{row['max_psi']:.3f}"
        first = "" if row["first_alarm_window"] is None else f" (first: window {row['first_alarm_window']})"
        typer.echo(f"  {name}: max PSI {peak}, {row['alarm_windows']} alarming window(s){first}")
    typer.echo("ALARM: drift over the bundle's thresholds" if report["alarm"] else "no alarm")
    for path in written:
        typer.echo(f"wrote {path}")
    if fail_on_alarm and report["alarm"]:
        raise typer.Exit(1)
