"""Verbs that run a recipe's methods or studies and print their table: ``evaluate`` and ``study``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.output import echo_findings, echo_table
from workbench.cli.recipes import AdoptRunDirOption, recipe_with_stage


def evaluate_command(
    recipe: Annotated[str, typer.Argument(help="Recipe with an evaluate stage (name or YAML path).")] = "evaluate",
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    methods: Annotated[
        str | None, typer.Option("--methods", help="Comma-separated methods, e.g. dtr,standard_rag.")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="Split to answer.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Questions per method.")] = None,
    params: Annotated[
        list[str] | None,
        typer.Option("--params", help="A study's params/<method>.json to lay over the recipe's options (repeatable)."),
    ] = None,
    adopt_run_dir: AdoptRunDirOption = False,
) -> None:
    """Run methods end to end over a split (the recipe's stages, then evaluate); print the comparison table."""
    import json

    from workbench.stages.needs import check_stage_needs
    from workbench.stages.runner import run_recipe

    loaded = recipe_with_stage(
        recipe,
        overrides,
        "evaluate",
        methods=methods.split(",") if methods else None,
        split=split,
        limit=limit,
        params=[str(Path(p).resolve()) for p in params] if params else None,
    )
    check_stage_needs(loaded.config.stages)
    result = run_recipe(loaded, adopt_run_dir=adopt_run_dir)
    summary = json.loads((result.run_dir / "stages" / "evaluate" / "summary.json").read_text())
    rows = [
        [
            name,
            f"{row['em']:.3f}",
            f"{row['f1']:.3f}",
            f"{row['contains']:.3f}",
            f"{row['retrieval_rate']:.2f}",
            f"{row['lm_calls']:.1f}",
            f"{row['tokens']:.0f}",
            f"{row['latency_p50']:.2f}",
        ]
        for name, row in summary["methods"].items()
    ]
    echo_table(rows, ["method", "EM", "F1", "contains", "retrieval", "LM calls/q", "tokens/q", "p50 s"])
    typer.echo(f"traces: {result.run_dir / 'stages' / 'evaluate' / 'traces'}")
    echo_findings(result.findings)


def study_command(
    recipe: Annotated[str, typer.Argument(help="Recipe with a study stage (name or YAML path).")] = "study",
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    storage: Annotated[
        str | None,
        typer.Option("--storage", help="Optuna storage URL (journal:PATH, sqlite:///..., postgresql://...)."),
    ] = None,
    study_name: Annotated[
        str | None, typer.Option("--study-name", help="Study name prefix to create or join (one study per method).")
    ] = None,
    n_trials: Annotated[int | None, typer.Option("--n-trials", help="Complete trials per method.")] = None,
    methods: Annotated[str | None, typer.Option("--methods", help="Comma-separated methods to tune.")] = None,
    adopt_run_dir: AdoptRunDirOption = False,
) -> None:
    """Run a recipe's hyperparameter studies; with --storage / --study-name, join a study other workers share."""
    import json

    from workbench.stages.needs import check_stage_needs
    from workbench.stages.runner import run_recipe

    loaded = recipe_with_stage(
        recipe,
        overrides,
        "study",
        storage=storage,
        study_name=study_name,
        n_trials=n_trials,
        methods=methods.split(",") if methods else None,
    )
    check_stage_needs(loaded.config.stages)
    # a worker always works on the study, even after a finished run
    result = run_recipe(loaded, force=["study"], adopt_run_dir=adopt_run_dir)
    summary = json.loads((result.run_dir / "stages" / "study" / "summary.json").read_text())
    objective = summary["objective"]
    rows = []
    for name, row in summary["methods"].items():
        best, defaults = row["scores"]["best"], row["scores"]["defaults"]
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row["params"].items())
        rows.append(
            [
                name,
                params,
                f"{best['val'][objective]:.3f} / {best['test'][objective]:.3f}",
                f"{defaults['val'][objective]:.3f} / {defaults['test'][objective]:.3f}",
                str(len(row["trials"])),
            ]
        )
    echo_table(rows, ["method", "chosen", f"{objective} val / test", "defaults val / test", "trials"])
    typer.echo(f"storage: {summary['storage']} → parameters in {result.run_dir / 'stages' / 'study' / 'params'}")
    echo_findings(result.findings)
