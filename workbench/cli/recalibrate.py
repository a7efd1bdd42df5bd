"""The ``recalibrate`` verb: refit a bundle's calibrators on labelled feedback and write the refit as a new bundle
version when it is better on a held-out part of the feedback (docs/monitoring.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def recalibrate_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="The bundle version directory to recalibrate.")],
    feedback: Annotated[
        Path,
        typer.Option(
            "--feedback", help="Labelled feedback: rows of id, question, answer, label (0/1), features? (JSONL...)."
        ),
    ],
    scores: Annotated[
        Path | None,
        typer.Option("--scores", help="scores.jsonl of `workbench score`: the features of rows that carry none."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The name directory the new version goes into (default: the bundle's own)."),
    ] = None,
    holdout: Annotated[
        float, typer.Option("--holdout", help="Fraction of the feedback held out to compare the calibrators on.")
    ] = 0.3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the held-out split and the refit's folds.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Write the new version even when it is not better on the held-out part.")
    ] = False,
) -> None:
    """Refit the bundle's calibrators on the feedback's fit part; compare them with the bundle's on the held-out part
    (AUROC, ECE, BCa intervals); write a new bundle version beside the parent when the mean ECE is lower."""
    from workbench.recalibration.compare import recalibrate
    from workbench.recalibration.feedback import read_feedback
    from workbench.recalibration.version import bundle_calibrators, write_version

    manifest, calibrators = bundle_calibrators(bundle)
    rows = read_feedback(feedback, calibrators.features, scores)
    result = recalibrate(calibrators, rows, holdout=holdout, seed=seed, force=force, where=str(feedback))
    path = write_version(bundle, result, feedback, holdout=holdout, seed=seed, forced=not result.better, out=out)
    mean = result.metrics["mean_ece"]
    typer.echo(
        f"{manifest['name']} {manifest['version']}: calibrators refitted on {result.fit_rows} feedback rows, compared "
        f"on {result.holdout_rows} held out"
    )
    for name, row in result.metrics["features"].items():
        typer.echo(
            f"  {name}: AUROC {_fmt(row['auroc']['before'])} → {_fmt(row['auroc']['after'])}, "
            f"ECE {_fmt(row['ece']['before'])} → {_fmt(row['ece']['after'])}"
        )
    change = mean["change_ci"]
    typer.echo(
        f"mean ECE {mean['before']:.4f} → {mean['after']:.4f} (change {mean['change']:+.4f}, "
        f"{result.metrics['intervals']}: [{_fmt(change['low'])}, {_fmt(change['high'])}])"
        + ("" if result.better else " — not better, written with --force")
    )
    typer.echo(f"wrote {path}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
