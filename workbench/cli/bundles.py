"""Verbs that make or list bundles: ``export``, ``decide`` (re-decide a run's τ, export it) and ``bundles``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.output import echo_records, echo_table


def export_command(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory, e.g. artifacts/runs/quickstart.")],
    name: Annotated[str | None, typer.Option("--name", help="Bundle name (default: the recipe's name).")] = None,
    version: Annotated[
        str, typer.Option("--version", help="X.Y.Z, or 'auto': same version if unchanged, else the next patch.")
    ] = "auto",
    out: Annotated[Path, typer.Option("--dir", help="Where bundles go.")] = Path("artifacts/bundles"),
    methods: Annotated[
        str | None, typer.Option("--methods", help="Comma-separated methods (default: the run's, gold-free).")
    ] = None,
    no_archive: Annotated[bool, typer.Option("--no-archive", help="Skip the .tar.gz.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing version with other content.")] = False,
) -> None:
    """Export a run's decision logic as a versioned bundle: <dir>/<name>/<version>/ plus a .tar.gz."""
    from workbench.bundle.export import export_run

    result = export_run(
        run_dir,
        name=name,
        version=version,
        root=out,
        methods=[m.strip() for m in methods.split(",") if m.strip()] if methods else None,
        archive=not no_archive,
        force=force,
    )
    state = "unchanged (identical files rewritten)" if result.unchanged else "written"
    typer.echo(f"bundle {result.name} {result.version} {state} → {result.path}")
    if result.archive is not None:
        typer.echo(f"archive: {result.archive}")
    for note in result.manifest.get("notes", []):
        typer.echo(f"note: {note}")


def decide_command(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory, e.g. artifacts/runs/quickstart.")],
    tau: Annotated[float | None, typer.Option("--tau", help="τ by hand: retrieve iff P(correct) < τ.")] = None,
    retrieval_rate: Annotated[
        float | None,
        typer.Option("--retrieval-rate", help="The largest τ retrieving for at most this share of the fit split."),
    ] = None,
    pick: Annotated[
        str | None, typer.Option("--pick", help="cheapest_within | best_quality | max_quality_under.")
    ] = None,
    epsilon: Annotated[
        float | None, typer.Option("--epsilon", help="cheapest_within's ε (default: the run's).")
    ] = None,
    max_retrieval_rate: Annotated[
        float | None, typer.Option("--max-retrieval-rate", help="max_quality_under: retrieval-rate budget.")
    ] = None,
    max_tokens: Annotated[
        float | None, typer.Option("--max-tokens", help="max_quality_under: LM tokens per question.")
    ] = None,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="max_quality_under: seconds per question.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Bundle name (default: the run's export name).")] = None,
    version: Annotated[str, typer.Option("--version", help="X.Y.Z, or 'auto': the next patch.")] = "auto",
    out: Annotated[Path | None, typer.Option("--dir", help="Where bundles go (default: the run's).")] = None,
    no_archive: Annotated[bool, typer.Option("--no-archive", help="Skip the .tar.gz.")] = False,
) -> None:
    """Re-decide D²-RAG's retrieval decision of a finished run from its stored scores (nothing is generated),
    measure it on the held-out split and export it as a new bundle version (docs/routing.md)."""
    from workbench.stages.decide import DecideRequest, decide_run, summary_lines

    request = DecideRequest(tau, retrieval_rate, pick, epsilon, max_retrieval_rate, max_tokens, max_seconds)
    result = decide_run(run_dir, request, name=name, version=version, root=out, archive=not no_archive)
    for line in summary_lines(result.record):
        typer.echo(line)
    bundle = result.export
    state = "unchanged (identical files rewritten)" if bundle.unchanged else "written"
    typer.echo(f"bundle {bundle.name} {bundle.version} {state} → {bundle.path}")


def bundles_command(
    root: Annotated[Path, typer.Option("--dir", help="Where bundles are.")] = Path("artifacts/bundles"),
    verify: Annotated[bool, typer.Option("--verify", help="Check every file's sha256 too.")] = False,
    prune: Annotated[
        bool, typer.Option("--prune", help="Empty the cache of unpacked .tar.gz bundles (re-made on the next load).")
    ] = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="One table row per bundle (needs a wide terminal; default: one block each).")
    ] = False,
) -> None:
    """List exported bundles: name, version, methods, key held-out figures (--wide: as a table).

    One block of ``key: value`` lines per bundle, so nothing is cut in an 80-column terminal."""
    from workbench.bundle.catalog import list_bundles
    from workbench.core.formatting import fmt

    if prune:
        from workbench.bundle.extract_cache import prune_extract_cache
        from workbench.core.paths import cache_dir

        base = cache_dir("bundles")
        done = prune_extract_cache(base, max_bytes=0, max_age_s=0)
        held = f"; {done.in_use} in use by a loaded bundle, kept" if done.in_use else ""
        typer.echo(f"removed {done.removed} unpacked archive(s), {done.freed_bytes / 1e6:.1f} MB, from {base}{held}")
        return
    entries = list_bundles(root, verify=verify)
    if not entries:
        typer.echo(f"no bundles under {root} (export one with `workbench export RUN_DIR`)")
        return

    rows = [
        [
            e.name,
            e.version,
            e.created[:10],
            ", ".join(e.methods),
            fmt(e.metrics.get("tau")),
            e.metrics.get("tau_set_by", "-"),
            fmt(e.metrics.get("routed_contains")),
            fmt(e.metrics.get("retrieval_rate")),
            e.metrics.get("measured_on", "-"),
            fmt(e.metrics.get("feedback_quality")),
            e.metrics.get("fitted_on", "-"),
            e.metrics.get("held_out", "-"),
            e.status,
            str(e.path),
        ]
        for e in entries
    ]
    # the shipped decision (workbench.bundle.shipped): τ, who set it, its held-out figures at that τ and where they were
    # measured (a recalibrated version's on its held-out feedback); the splits
    header = ["bundle", "version", "created", "methods", "τ", "τ set by", "routed contains", "retrieval"]
    header += ["measured on", "feedback quality"]
    header += ["fitted on", "held out", "status", "path"]
    if wide:
        echo_table(rows, header, unbounded=True)
    else:
        echo_records(rows, header)
