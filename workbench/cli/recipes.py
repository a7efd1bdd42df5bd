"""Verbs on recipes: ``ls``, ``cp``, ``validate``, ``config``, ``stages``, ``run`` and ``merge`` (collect shards)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from workbench.cli.output import echo_findings, echo_table, peak_mb
from workbench.core.errors import WorkbenchError


def ls_command() -> None:
    """List the built-in recipes, one line each."""
    from workbench.core.config import load_yaml_file
    from workbench.recipe import builtin_recipes

    rows = []
    for name, path in builtin_recipes().items():
        data = load_yaml_file(path).data or {}
        stages = " → ".join(data.get("stages", []))
        rows.append([name, str(data.get("description", "")), stages])
    echo_table(rows, ["recipe", "description", "stages"])


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


def validate_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides to check too.")] = None,
) -> None:
    """Check a recipe: YAML syntax, unknown keys, types, required values, stage names and order; then open the data
    files it names (the corpus, and the first rows of the dataset through its field mapping: docs/data.md)."""
    from workbench.recipe import load_recipe

    loaded = load_recipe(recipe, overrides or [])
    checked: list[str] = []
    if "build_data" in loaded.config.stages:
        from workbench.stages.build_data.run import check_data_files

        checked = check_data_files(loaded.config)
    typer.echo(f"ok: {loaded.source} (recipe '{loaded.config.name}', stages: {', '.join(loaded.config.stages)})")
    for line in checked:
        typer.echo(f"  {line}")


def config_command(
    stage: Annotated[str | None, typer.Argument(help="A stage (see `workbench stages`): print only its keys.")] = None,
) -> None:
    """Print every recipe key with its type, default and meaning (a commented template), or one stage's keys."""
    from workbench.recipe import recipe_template, stage_template

    typer.echo(recipe_template() if stage is None else stage_template(stage))


def stages_command() -> None:
    """List the stages recipes can use, with their inputs."""
    from workbench.stages.registry import STAGES

    rows = [[s.name, ", ".join(s.inputs) or "-", s.summary] for s in STAGES.values()]
    echo_table(rows, ["stage", "reads", "what it does"])


def recipe_with_stage(recipe: str, overrides: list[str] | None, stage: str, **options: Any) -> Any:
    """Load ``recipe`` with ``overrides`` plus ``<stage>.<key>=<value>`` for every option that is not None (values
    written as JSON, which YAML reads as is); a one-line error when the recipe has no ``stage``."""
    import json

    from workbench.recipe import load_recipe

    extra = list(overrides or [])
    extra += [f"{stage}.{key}={json.dumps(value)}" for key, value in options.items() if value is not None]
    loaded = load_recipe(recipe, extra)
    if stage not in loaded.config.stages:
        raise WorkbenchError(f"the recipe has no {stage} stage", loaded.source)
    return loaded


AdoptRunDirOption = Annotated[
    bool,
    typer.Option(
        "--adopt-run-dir",
        help="Use a non-empty run_dir that no run made, unless it holds a name a run writes (config.yaml, "
        "stages, ...); /, the home directory and a git checkout's root are refused always.",
    ),
]
"""The flag of every verb that runs a recipe (run, evaluate, study): the run directory check is run_recipe's."""


def run_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides, e.g. answer.limit=20.")] = None,
    force: Annotated[list[str] | None, typer.Option("--force", help="Recompute this stage even if cached.")] = None,
    adopt_run_dir: AdoptRunDirOption = False,
) -> None:
    """Run a recipe; finished stages are reused from the run directory's cache (a new, empty or earlier run's)."""
    from workbench.recipe import load_recipe
    from workbench.stages.needs import check_stage_needs
    from workbench.stages.runner import run_recipe

    loaded = load_recipe(recipe, overrides or [])
    check_stage_needs(loaded.config.stages)  # the light install: refused before the first stage, not minutes in
    result = run_recipe(loaded, force=force or [], adopt_run_dir=adopt_run_dir)
    cached = sum(s.cached for s in result.stages)
    rows = [
        [s.name, "cached", "-"] if s.cached else [s.name, f"{s.seconds:.1f}", peak_mb(s.summary)] for s in result.stages
    ]
    echo_table(rows, ["stage", "seconds", "peak RSS (MB)"])
    typer.echo(
        f"run '{loaded.config.name}' done in {result.seconds:.1f} s "
        f"({len(result.stages) - cached} stage(s) run, {cached} cached) → {result.run_dir}"
    )
    echo_findings(result.findings)


def merge_command(
    out: Annotated[Path, typer.Argument(help="New directory for the merged collection (must not exist).")],
    shards: Annotated[list[Path], typer.Argument(help="The shards' collect outputs: <run_dir>/stages/collect.")],
) -> None:
    """Merge `collect` shards (collect.shard=i/N runs) into one collection; LARS is fitted here if selected."""
    from workbench.stages.collect.run import merge_shards

    summary = merge_shards(list(shards), out)
    rows = ", ".join(f"{split}: {info['rows']}" for split, info in summary["splits"].items())
    typer.echo(f"merged {len(shards)} shard(s) → {out} ({rows} rows)")
