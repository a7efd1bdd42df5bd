"""The ``recalibrate`` verb: refit a bundle's calibrators (and, if asked, τ and the router) on labelled feedback and
write the refit as a new bundle version when it is better on a held-out part of the feedback (docs/monitoring.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer


def recalibrate_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="The bundle version directory to recalibrate.")],
    feedback: Annotated[
        Path,
        typer.Option(
            "--feedback",
            help="Labelled feedback: rows of id, question, answer, label (0/1), label_retrieved?, features? (JSONL…).",
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
    refit: Annotated[
        list[str] | None,
        typer.Option(
            "--refit",
            help="Also refit: tau, router (repeatable or a comma list; the calibrators are refitted always).",
        ),
    ] = None,
    tau_rule: Annotated[
        str | None,
        typer.Option("--tau-rule", help="Re-choose tau by this rule (max_f1, target_rate, max_routed_score)."),
    ] = None,
    target_rate: Annotated[
        float | None, typer.Option("--target-rate", help="The target_rate rule's rate (default: the bundle's).")
    ] = None,
    archive: Annotated[
        bool, typer.Option("--archive/--no-archive", help="Also write <name>-<version>.tar.gz beside it.")
    ] = True,
) -> None:
    """Refit the bundle's calibrators (and, with --refit, tau and the router) on the feedback's fit part; compare with
    the bundle on the held-out part (AUROC, ECE, retrieval rate and routed quality, BCa intervals); write a new bundle
    version beside the parent when it is better."""
    from workbench.recalibration.compare import recalibrate
    from workbench.recalibration.feedback import read_feedback
    from workbench.recalibration.reference import profile_embed
    from workbench.recalibration.version import bundle_decision, write_version

    manifest, calibrators, decision = bundle_decision(bundle)
    if target_rate is not None:
        decision = dataclasses.replace(decision, target_rate=target_rate)
    rows = read_feedback(feedback, calibrators.features, scores)
    result = recalibrate(
        calibrators,
        rows,
        holdout=holdout,
        seed=seed,
        force=force,
        where=str(feedback),
        decision=decision,
        refit=("calibrators", *(refit or [])),
        tau_rule=tau_rule,
    )
    embed = profile_embed(bundle, manifest)  # the OOD flag's embedding check, for the new monitoring reference
    path = write_version(
        bundle,
        result,
        feedback,
        holdout=holdout,
        seed=seed,
        forced=not result.better,
        out=out,
        archive=archive,
        embed=embed,
    )
    mean = result.metrics["mean_ece"]
    typer.echo(
        f"{manifest['name']} {manifest['version']}: {', '.join(result.refitted)} refitted on {result.fit_rows} "
        f"feedback rows, compared on {result.holdout_rows} held out"
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
    )
    routing = result.metrics.get("routing")
    if routing is not None:
        tau = routing["tau"]
        typer.echo(f"tau {tau['before']:.4f} → {tau['after']:.4f} (rule {tau['rule'] or '-'})")
        for label, key in (("retrieval rate", "retrieval_rate"), (routing["metric"].replace("_", " "), "quality")):
            row = routing[key]
            ci = row["change_ci"]
            typer.echo(
                f"{label} {_fmt(row['before'])} → {_fmt(row['after'])} (change {_fmt(row['change'])}, "
                f"[{_fmt(ci['low'])}, {_fmt(ci['high'])}])"
            )
    if not result.better:
        typer.echo("not better, written with --force")
    typer.echo(f"wrote {path}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
