"""The ``workbench`` command: ls, cp, validate, config, stages, run, evaluate, merge, doctor.

Heavy libraries are imported inside the commands, so ``workbench --help`` stays fast. User errors
(:class:`WorkbenchError`) print one line and exit with status 2.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from workbench.core.errors import EXIT_USER_ERROR, WorkbenchError

app = typer.Typer(
    name="workbench",
    help="Calibrate, tune, distil and ship uncertainty-aware adaptive-RAG decision logic.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Hide progress bars and info messages.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    from workbench.core.logs import set_quiet

    set_quiet(quiet)
    if version:
        from workbench import __version__

        typer.echo(f"workbench {__version__}")
        raise typer.Exit(0)


def _echo_table(rows: list[list[str]], header: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*header, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@app.command("ls")
def ls_command() -> None:
    """List the built-in recipes, one line each."""
    from workbench.core.config import load_yaml_file
    from workbench.recipe import builtin_recipes

    rows = []
    for name, path in builtin_recipes().items():
        data = load_yaml_file(path).data or {}
        stages = " → ".join(data.get("stages", []))
        rows.append([name, str(data.get("description", "")), stages])
    _echo_table(rows, ["recipe", "description", "stages"])


@app.command("cp")
def cp_command(
    name: Annotated[str, typer.Argument(help="Built-in recipe name (see `workbench ls`).")],
    dest: Annotated[Path, typer.Argument(help="Destination file or directory.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Copy a built-in recipe to DEST to customise it."""
    from workbench.recipe import find_recipe

    source = find_recipe(name)
    target = dest / source.name if dest.is_dir() else dest
    if target.exists() and not force:
        raise WorkbenchError("file exists (use --force to overwrite)", str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    typer.echo(f"copied {source.name} → {target}")


@app.command("validate")
def validate_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides to check too.")] = None,
) -> None:
    """Check a recipe: YAML syntax, unknown keys, types, required values, stage names and order."""
    from workbench.recipe import load_recipe

    loaded = load_recipe(recipe, overrides or [])
    typer.echo(f"ok: {loaded.source} (recipe '{loaded.config.name}', stages: {', '.join(loaded.config.stages)})")


@app.command("config")
def config_command() -> None:
    """Print every recipe key with its type, default and meaning (a commented template)."""
    from workbench.recipe import recipe_template

    typer.echo(recipe_template())


@app.command("stages")
def stages_command() -> None:
    """List the stages recipes can use, with their inputs."""
    from workbench.stages.registry import STAGES

    rows = [[s.name, ", ".join(s.inputs) or "-", s.summary] for s in STAGES.values()]
    _echo_table(rows, ["stage", "reads", "what it does"])


@app.command("run")
def run_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides, e.g. answer.limit=20.")] = None,
    force: Annotated[list[str] | None, typer.Option("--force", help="Recompute this stage even if cached.")] = None,
) -> None:
    """Run a recipe; finished stages are reused from the run directory's cache."""
    from workbench.recipe import load_recipe
    from workbench.stages.runner import run_recipe

    loaded = load_recipe(recipe, overrides or [])
    result = run_recipe(loaded, force=force or [])
    cached = sum(s.cached for s in result.stages)
    typer.echo(
        f"run '{loaded.config.name}' done in {result.seconds:.1f} s "
        f"({len(result.stages) - cached} stage(s) run, {cached} cached) → {result.run_dir}"
    )


@app.command("evaluate")
def evaluate_command(
    recipe: Annotated[str, typer.Argument(help="Recipe with an evaluate stage (name or YAML path).")] = "evaluate",
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    methods: Annotated[
        str | None, typer.Option("--methods", help="Comma-separated methods, e.g. dtr,standard_rag.")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="Split to answer.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Questions per method.")] = None,
) -> None:
    """Run methods end to end over a split (the recipe's stages, then evaluate); print the comparison table."""
    import json

    from workbench.recipe import load_recipe
    from workbench.stages.runner import run_recipe

    extra = list(overrides or [])
    if methods:
        extra.append(f"evaluate.methods=[{methods}]")
    if split:
        extra.append(f"evaluate.split={split}")
    if limit is not None:
        extra.append(f"evaluate.limit={limit}")
    loaded = load_recipe(recipe, extra)
    if "evaluate" not in loaded.config.stages:
        raise WorkbenchError("the recipe has no evaluate stage", loaded.source)
    result = run_recipe(loaded)
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
    _echo_table(rows, ["method", "EM", "F1", "contains", "retrieval", "LM calls/q", "tokens/q", "p50 s"])
    typer.echo(f"traces: {result.run_dir / 'stages' / 'evaluate' / 'traces'}")


@app.command("merge")
def merge_command(
    out: Annotated[Path, typer.Argument(help="New directory for the merged collection (must not exist).")],
    shards: Annotated[list[Path], typer.Argument(help="The shards' collect outputs: <run_dir>/stages/collect.")],
) -> None:
    """Merge `collect` shards (collect.shard=i/N runs) into one collection; LARS is fitted here if selected."""
    from workbench.stages.collect import merge_shards

    summary = merge_shards(list(shards), out)
    rows = ", ".join(f"{split}: {info['rows']}" for split, info in summary["splits"].items())
    typer.echo(f"merged {len(shards)} shard(s) → {out} ({rows} rows)")


@app.command("doctor")
def doctor_command() -> None:
    """Print what is resolved (assets, versions, threads, devices, caches) and what is missing."""
    from workbench.doctor import run_doctor

    raise typer.Exit(run_doctor())


def _quiet_third_party_progress() -> None:
    """The workbench draws its own progress bars; silence the libraries' per-file ones (before they are imported)."""
    import os

    for var in (
        "HF_DATASETS_DISABLE_PROGRESS_BARS",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS",
    ):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    """Console entry point: run the CLI, turning user errors into one line and exit status 2."""
    _quiet_third_party_progress()
    try:
        app()
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:
        print("interrupted: finished stages are kept; run the same command again to resume", file=sys.stderr)
        sys.exit(130)
