"""The ``workbench`` command: ls, cp, validate, config, stages, run, evaluate, merge, export, decide, bundles, infer,
serve, serve-model, serve-retriever, doctor.

Heavy libraries are imported inside the commands, so ``workbench --help`` stays fast. User errors
(:class:`WorkbenchError`, including what torch or transformers raised while a model was built) print one line and
exit with status 2; set ``WORKBENCH_TRACEBACK=1`` to see the traceback behind that line as well.
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from workbench.core.errors import EXIT_USER_ERROR, STORAGE_ERRNOS, WorkbenchError, one_line, os_error_words

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


def _echo_table(rows: list[list[str]], header: list[str], *, unbounded: bool = False) -> None:
    """``rows`` under ``header`` as a table fitted to the terminal (cells wrap); ``unbounded``: never wrapped or cut,
    one line per row however wide (the terminal folds long lines). Cells are printed literally (no rich markup)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(*header, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console(width=100_000 if unbounded else None).print(table)


def _echo_records(rows: list[list[str]], header: list[str]) -> None:
    """Each row as a block of ``key: value`` lines (a blank line between rows): readable at any terminal width,
    nothing truncated, values printed literally."""
    width = max(len(h) for h in header)
    blocks = ["\n".join(f"{h.rjust(width)}: {value}" for h, value in zip(header, row, strict=True)) for row in rows]
    typer.echo("\n\n".join(blocks))


def _silence_third_party(verbose: bool) -> None:
    """Hide the libraries' warnings and log lines (DeepSpeed's accelerator notice, FutureWarning and
    DeprecationWarning lines, transformers / torch / peft notices) unless ``verbose``; the workbench's own errors and
    notes still print."""
    if verbose:
        return
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=_THIRD_PARTY_MODULES)
    for name in ("DeepSpeed", "deepspeed", "accelerate", "torch", "transformers", "peft", "huggingface_hub", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


_THIRD_PARTY_MODULES = r"(torch|transformers|peft|accelerate|deepspeed|huggingface_hub|onnxruntime|faiss|bm25s)(\.|$)"

VerboseOption = Annotated[
    bool, typer.Option("--verbose", help="Show the libraries' warnings (DeepSpeed, FutureWarning, ...) too.")
]


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
    """Check a recipe: YAML syntax, unknown keys, types, required values, stage names and order; then open the data
    files it names (the corpus, and the first rows of the dataset through its field mapping: docs/data.md)."""
    from workbench.recipe import load_recipe

    loaded = load_recipe(recipe, overrides or [])
    checked: list[str] = []
    if "build_data" in loaded.config.stages:
        from workbench.stages.build_data import check_data_files

        checked = check_data_files(loaded.config)
    typer.echo(f"ok: {loaded.source} (recipe '{loaded.config.name}', stages: {', '.join(loaded.config.stages)})")
    for line in checked:
        typer.echo(f"  {line}")


@app.command("index")
def index_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path (retrieval.backend: pgvector | milvus).")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    adopt: Annotated[
        bool, typer.Option("--adopt", help="Write nothing: check the existing index against the corpus and use it.")
    ] = False,
) -> None:
    """Push the recipe's corpus (chunked as its data section says, embedded by its embedder) into its retrieval
    engine: batched, resumable and idempotent by passage id, a verified count at the end (docs/retrieval.md)."""
    from workbench.recipe import load_recipe
    from workbench.stages.index_engine import run_index

    loaded = load_recipe(recipe, overrides or [])
    typer.echo(run_index(loaded.config, adopt=adopt).line())


@app.command("config")
def config_command(
    stage: Annotated[str | None, typer.Argument(help="A stage (see `workbench stages`): print only its keys.")] = None,
) -> None:
    """Print every recipe key with its type, default and meaning (a commented template), or one stage's keys."""
    from workbench.recipe import recipe_template, stage_template

    typer.echo(recipe_template() if stage is None else stage_template(stage))


@app.command("stages")
def stages_command() -> None:
    """List the stages recipes can use, with their inputs."""
    from workbench.stages.registry import STAGES

    rows = [[s.name, ", ".join(s.inputs) or "-", s.summary] for s in STAGES.values()]
    _echo_table(rows, ["stage", "reads", "what it does"])


def _recipe_with_stage(recipe: str, overrides: list[str] | None, stage: str, **options: Any) -> Any:
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


@app.command("run")
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
        [s.name, "cached", "-"] if s.cached else [s.name, f"{s.seconds:.1f}", _peak_mb(s.summary)]
        for s in result.stages
    ]
    _echo_table(rows, ["stage", "seconds", "peak RSS (MB)"])
    typer.echo(
        f"run '{loaded.config.name}' done in {result.seconds:.1f} s "
        f"({len(result.stages) - cached} stage(s) run, {cached} cached) → {result.run_dir}"
    )
    _echo_findings(result.findings)


def _echo_findings(lines: list[str]) -> None:
    """The run's findings (what it found and ships, its report's path) after the verb's own table: the last thing
    a run prints, on a terminal or in a log file."""
    if lines:
        typer.echo("findings:\n" + "\n".join(f"  {line}" for line in lines))


def _peak_mb(summary: dict) -> str:
    """A stage's peak resident memory as the run table prints it ("-" when the stage did not record one)."""
    peak = summary.get("peak_rss_mb")
    return "-" if peak is None else f"{peak:.0f}"


@app.command("evaluate")
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

    loaded = _recipe_with_stage(
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
    _echo_table(rows, ["method", "EM", "F1", "contains", "retrieval", "LM calls/q", "tokens/q", "p50 s"])
    typer.echo(f"traces: {result.run_dir / 'stages' / 'evaluate' / 'traces'}")
    _echo_findings(result.findings)


@app.command("study")
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

    loaded = _recipe_with_stage(
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
    _echo_table(rows, ["method", "chosen", f"{objective} val / test", "defaults val / test", "trials"])
    typer.echo(f"storage: {summary['storage']} → parameters in {result.run_dir / 'stages' / 'study' / 'params'}")
    _echo_findings(result.findings)


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


@app.command("export")
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


@app.command("decide")
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


@app.command("bundles")
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
            e.metrics.get("fitted_on", "-"),
            e.metrics.get("held_out", "-"),
            e.status,
            str(e.path),
        ]
        for e in entries
    ]
    # the shipped decision (workbench.bundle.shipped): τ, who set it, its held-out figures at that τ; the splits
    header = ["bundle", "version", "created", "methods", "τ", "τ set by", "routed contains", "retrieval"]
    header += ["fitted on", "held out", "status", "path"]
    if wide:
        _echo_table(rows, header, unbounded=True)
    else:
        _echo_records(rows, header)


BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="Answer with the bundle's model served at this OpenAI-compatible URL (…/v1) instead of loading it; "
        "its probe answers must match the bundle's (docs/served-models.md).",
    ),
]
ServedModelOption = Annotated[
    str | None, typer.Option("--served-model", help="The model's name at --base-url (default: the bundle's).")
]
ApiKeyEnvOption = Annotated[
    str | None, typer.Option("--api-key-env", help="NAME of the environment variable holding --base-url's key.")
]
OnOodOption = Annotated[
    str | None,
    typer.Option(
        "--on-ood",
        help="What an out-of-distribution flag does: flag (default: only report it), retrieve (D²-RAG retrieves), "
        "refuse (no answer); see docs/ood.md.",
    ),
]


def _runtime_overrides(
    values: list[str] | None, classifier: str | None, device: str | None, **served: str | None
) -> dict:
    """``--set key=value`` overrides (YAML values, dotted keys for methods) as a RuntimeOptions mapping; ``served``
    holds ``base_url`` / ``served_model`` / ``api_key_env`` / ``on_ood`` from their options (None: not given)."""
    from workbench.core.config import parse_override

    overrides: dict = {}
    for text in values or []:
        path, value = parse_override(text)
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise WorkbenchError(f"cannot set '{'.'.join(path)}'", "command line")
        node[path[-1]] = value
    if classifier:
        overrides["classifier"] = classifier
    if device:
        overrides["device"] = device
    overrides.update({key: value for key, value in served.items() if value is not None})
    return overrides


RUNTIME_FLAGS = {
    "classifier": "--classifier",
    "device": "--device",
    "base_url": "--base-url",
    "served_model": "--served-model",
    "api_key_env": "--api-key-env",
    "on_ood": "--on-ood",
}
"""The runtime overrides ``infer`` and ``serve`` take as flags of their own (the others come from ``--set``)."""


def _load_runtime(
    bundle: Path, values: list[str] | None, classifier: str | None, device: str | None, **served: str | None
) -> Any:
    """``load_bundle`` with the command line's runtime overrides (:func:`_runtime_overrides`); a refused override is
    named as the user typed it — ``--set methods.d2rag.tau``, ``--device`` — not as the runtime's ``overrides.*`` key
    (nor the recipe key ``evaluate.options.*`` a method option has in a recipe)."""
    from workbench.core.errors import ConfigError
    from workbench.runtime import load_bundle

    try:
        return load_bundle(bundle, _runtime_overrides(values, classifier, device, **served))
    except ConfigError as exc:
        flags = {key for key, value in {"classifier": classifier, "device": device, **served}.items() if value}
        typed = _typed_option(exc, flags)
        if typed is None:
            raise
        raise ConfigError(exc.what, typed) from None


def _typed_option(exc: WorkbenchError, flags: set[str]) -> str | None:
    """The command-line option behind an error at ``overrides[.<key>]`` (``flags``: the runtime keys given by their
    own flag, :data:`RUNTIME_FLAGS`; every other key came from ``--set``); None for an error elsewhere."""
    import re

    where = str(exc.where or "")
    if where != "overrides" and not where.startswith("overrides."):
        return None
    key = where.removeprefix("overrides").lstrip(".")
    if not key:  # the options' type check names the key in its message: "'batch_size' expects int, got 'x'"
        named = re.search(r"'([A-Za-z_][\w.]*)'", exc.what)
        key = named.group(1) if named else ""
    if key.split(".")[0] in flags:
        return RUNTIME_FLAGS[key.split(".")[0]]
    return f"--set {key}" if key else "--set"


@app.command("infer")
def infer_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="A bundle directory or its .tar.gz.")],
    questions: Annotated[list[str] | None, typer.Argument(help="Question(s) to answer.")] = None,
    method: Annotated[str | None, typer.Option("--method", help="Method (default: d2rag when present).")] = None,
    input_file: Annotated[
        Path | None,
        typer.Option("--input", help="JSONL file of {id, question} (a regular file; other fields are ignored)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="JSONL file of answers (a regular file); an existing one is resumed, one run at a time."
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            help="Questions answered together (default: 1 with --input, so a kill loses at most the question in "
            "flight; the bundle's batch size for questions given on the command line).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each answer as JSON with its trace.")] = False,
    traces: Annotated[bool, typer.Option("--traces", help="Write full traces into --output.")] = False,
    classifier: Annotated[str | None, typer.Option("--classifier", help="numpy (default) or onnx.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N or auto.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Runtime override key=value (see docs/bundles.md).")
    ] = None,
    base_url: BaseUrlOption = None,
    served_model: ServedModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    on_ood: OnOodOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Answer questions with a bundle: given on the command line, or a JSONL file (--input / --output, resumable)."""
    _silence_third_party(verbose)
    from workbench.runtime.batch_file import answer_file, json_line

    if bool(questions) == bool(input_file):
        raise WorkbenchError("give question(s) or --input FILE (with --output FILE), not both or neither", "infer")
    if input_file is not None and output is None:
        raise WorkbenchError("--input needs --output (the answers file, resumed if it exists)", "infer")
    if batch_size is not None and batch_size < 1:
        raise WorkbenchError("--batch-size must be >= 1", "infer")
    served = {"base_url": base_url, "served_model": served_model, "api_key_env": api_key_env, "on_ood": on_ood}
    runtime = _load_runtime(bundle, overrides, classifier, device, **served)  # loads no model
    if input_file is not None:
        # every refusal (method, input, rows already written) comes before a model is loaded, and none is loaded
        # when nothing is left to answer
        done = answer_file(runtime, input_file, output, method=method, batch_size=batch_size or 1, traces=traces)
        typer.echo(
            f"{done.answered} answered, {done.skipped} already in {done.output} (of {done.total}) "
            f"with {runtime.name} {runtime.version} ({done.method})"
        )
        return
    if not as_json and (method or ("d2rag" if "d2rag" in runtime.methods else None)) == "d2rag":
        decision = runtime.info().get("decision")  # the manifest's record, as the card and `bundles` show it
        if decision:
            typer.echo(f"{runtime.name} {runtime.version}: {decision['summary']}")
    for answer in runtime.answer_many(list(questions or []), method, batch_size=batch_size):
        if as_json:
            typer.echo(json_line(answer.to_dict()))  # one line even when the answer holds U+2028 / U+2029
            continue
        decision = f" P(correct) {answer.p_correct:.3f} vs τ {answer.tau:.3f}," if answer.p_correct is not None else ""
        used = ", ".join(p["title"] or p["id"] for p in answer.passages[:3]) or "none"
        typer.echo(f"Q: {answer.question}\nA: {answer.text}")
        typer.echo(
            f"   [{answer.method}]{decision} retrieved: {'yes' if answer.retrieved else 'no'} ({used}), "
            f"{answer.lm_calls:g} LM calls, {answer.tokens:.0f} tokens, {answer.latency_s:.2f} s"
        )
        if answer.ood is not None and answer.ood["flag"]:
            typer.echo(f"   out of distribution: {', '.join(answer.ood['checks'])} ({answer.ood['action']})")


@app.command("serve")
def serve_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="A bundle directory or its .tar.gz.")],
    host: Annotated[str, typer.Option("--host", help="Interface to bind (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most questions in one POST /answer.")] = 32,
    max_body: Annotated[int, typer.Option("--max-body", help="Largest request body in bytes (413 beyond).")] = 65536,
    max_question_chars: Annotated[
        int, typer.Option("--max-question-chars", help="Longest question in characters (422 beyond).")
    ] = 2000,
    max_question_tokens: Annotated[
        int, typer.Option("--max-question-tokens", help="Longest question in the generator's tokens (422 beyond).")
    ] = 256,
    max_queue: Annotated[
        int, typer.Option("--max-queue", help="Most questions waiting over all requests (503 + Retry-After beyond).")
    ] = 128,
    max_batch_questions: Annotated[
        int | None,
        typer.Option(
            "--max-batch-questions",
            help="Most questions answered in one batch across requests (default: the runtime's batch size).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds from a request's arrival to its answer (504 beyond).")
    ] = 120.0,
    classifier: Annotated[str | None, typer.Option("--classifier", help="numpy (default) or onnx.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N or auto.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Runtime override key=value (see docs/bundles.md).")
    ] = None,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--lazy",
            help="Warm up once bound: load every method's models and answer one question with each; GET /ready says "
            "200 when done (GET /health answers from the start). --lazy: ready at once, each method loads on its "
            "first question.",
        ),
    ] = True,
    base_url: BaseUrlOption = None,
    served_model: ServedModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    on_ood: OnOodOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Serve a bundle as a JSON HTTP API (FastAPI + uvicorn): GET /health, GET /ready, GET /methods, POST /answer,
    /docs, /redoc.

    Requests are queued (bounded by --max-queue) and those waiting for the same method are answered together, up to
    --max-batch-questions questions per batch; see docs/bundles.md for the status codes.
    """
    _silence_third_party(verbose)
    try:
        from workbench.serve import ServeLimits, run_server
    except ImportError as exc:
        raise WorkbenchError(f"serve needs fastapi and uvicorn: pip install workbench ({exc})", "serve") from None
    served = {"base_url": base_url, "served_model": served_model, "api_key_env": api_key_env, "on_ood": on_ood}
    runtime = _load_runtime(bundle, overrides, classifier, device, **served)
    # The runtime answers in forward batches of its batch size: a larger cross-request batch only delays the first
    # answers of it, a smaller one leaves batch rows empty.
    batch_size = runtime.options.batch_size or int(runtime.manifest["answering"].get("batch_size", 8))
    limits = ServeLimits(  # checked before the models load: a bad flag fails at once
        max_batch=max_batch,
        max_body_bytes=max_body,
        max_question_chars=max_question_chars,
        max_question_tokens=max_question_tokens,
        max_queue=max_queue,
        max_batch_questions=max_batch_questions if max_batch_questions is not None else batch_size,
        timeout_s=timeout,
    )
    run_server(runtime, host=host, port=port, limits=limits, warm=warm)


@app.command("serve-model")
def serve_model_command(
    model: Annotated[
        str, typer.Option("--model", help="An embedded generator name (smollm2) or a local HF model directory.")
    ],
    host: Annotated[str, typer.Option("--host", help="Interface to bind (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0: a free one).")] = 8000,
    served_name: Annotated[
        str | None, typer.Option("--served-name", help="The model name clients send (default: --model as given).")
    ] = None,
    max_logprobs: Annotated[
        int, typer.Option("--max-logprobs", help="Most top log-probabilities per position (400 beyond).")
    ] = 20,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Prompts per forward batch of the generator.")] = 8,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")] = "float32",
    max_context: Annotated[
        int | None, typer.Option("--max-context", help="Context window (default: the model's).")
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Starts the stream of fresh seeds drawn for requests that give none.")
    ] = 0,
    cache: Annotated[
        bool, typer.Option("--cache/--no-cache", help="Use the generation cache (off: every request is computed).")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds from a request's arrival to its answer (504 beyond).")
    ] = 600.0,
    max_sequences: Annotated[int, typer.Option("--max-sequences", help="Most prompts × n per request.")] = 256,
    max_request_tokens: Annotated[
        int, typer.Option("--max-request-tokens", help="Most prompts × n × max_tokens per request.")
    ] = 16384,
    max_echo_tokens: Annotated[
        int, typer.Option("--max-echo-tokens", help="Most prompt tokens one request echoes with logprobs.")
    ] = 16384,
    embedder: Annotated[
        str,
        typer.Option(
            "--embedder",
            help="Embedder served on POST /v1/embeddings: an embedded name (minilm), a local sentence-transformers"
            " directory, or 'none'.",
        ),
    ] = "minilm",
    embedder_name: Annotated[
        str | None,
        typer.Option("--embedder-name", help="The embedder's name clients send (default: --embedder as given)."),
    ] = None,
    max_embed_inputs: Annotated[
        int, typer.Option("--max-embed-inputs", help="Most texts per POST /v1/embeddings request.")
    ] = 2048,
) -> None:
    """Serve a generator (and an embedder) through the OpenAI protocol (FastAPI + uvicorn): GET /v1/models,
    POST /v1/completions, POST /v1/chat/completions, POST /v1/embeddings, GET /health.

    The reference server of docs/served-models.md: its answers are the in-process generator's (same text, log-probs
    and seeded samples) and the in-process embedder's vectors. Concurrent requests with equal decoding parameters are
    answered by one generate call.
    """
    try:
        from workbench.serve.openai_server import ModelServeLimits, load_embedder, load_generator, run_model_server
    except ImportError as exc:
        raise WorkbenchError(
            f"serve-model needs fastapi and uvicorn: pip install workbench ({exc})", "serve-model"
        ) from None
    try:
        limits = ModelServeLimits(
            max_logprobs=max_logprobs,
            max_batch_prompts=max(64, batch_size),
            timeout_s=timeout,
            max_sequences=max_sequences,
            max_request_tokens=max_request_tokens,
            max_echo_tokens=max_echo_tokens,
            max_embed_inputs=max_embed_inputs,
        )
    except ValueError as exc:
        raise WorkbenchError(str(exc), "serve-model") from None
    name = served_name or model
    if embedder != "none" and (embedder_name or embedder) == name:
        raise WorkbenchError(
            f"the generator and the embedder are both named {name!r}: pass --embedder-name", "serve-model"
        )
    generator = load_generator(
        model, device=device, dtype=dtype, batch_size=batch_size, max_context=max_context, seed=seed, cache=cache
    )
    served_embedder = None if embedder == "none" else load_embedder(embedder, device=device)
    run_model_server(
        generator,
        served_name=name,
        host=host,
        port=port,
        limits=limits,
        embedder=served_embedder,
        embedder_name=(embedder_name or embedder) if served_embedder is not None else None,
    )


@app.command("serve-retriever")
def serve_retriever_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path: its retrieval section and corpus.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0: a free one).")] = 8000,
    max_queries: Annotated[int, typer.Option("--max-queries", help="Most queries per request (422 beyond).")] = 256,
    max_topk: Annotated[int, typer.Option("--max-topk", help="Most hits per query (422 beyond).")] = 100,
    default_topk: Annotated[
        int, typer.Option("--default-topk", help="Hits per query when a request's topk is null or 0.")
    ] = 3,
    max_query_chars: Annotated[
        int, typer.Option("--max-query-chars", help="Longest query in characters (422 beyond).")
    ] = 2000,
    max_body: Annotated[int, typer.Option("--max-body", help="Largest request body in bytes (413 beyond).")] = 1 << 20,
    max_concurrency: Annotated[
        int,
        typer.Option(
            "--max-concurrency",
            help="Requests searched at once (an engine already runs one request's queries concurrently, "
            "retrieval.connection.max_concurrency at a time); more only for a retriever safe on several threads.",
        ),
    ] = 1,
    max_waiting: Annotated[
        int, typer.Option("--max-waiting", help="Most requests waiting for a search (503 beyond).")
    ] = 256,
    verbose: VerboseOption = False,
) -> None:
    """Serve the recipe's retriever (any retrieval.backend, over the recipe's corpus) on the POST /retrieve shape of
    FlashRAG / Search-R1 retriever servers: POST /retrieve, GET /health (docs/retrieval.md)."""
    _silence_third_party(verbose)
    try:
        from workbench.serve.retriever_app import RetrieverServeLimits, run_retriever_server
    except ImportError as exc:
        raise WorkbenchError(
            f"serve-retriever needs fastapi and uvicorn: pip install workbench ({exc})", "serve-retriever"
        ) from None
    from workbench.recipe import load_recipe
    from workbench.stages.retriever_service import recipe_retriever

    config = load_recipe(recipe, overrides or []).config
    try:
        limits = RetrieverServeLimits(  # checked before the index is built: a bad flag fails at once
            max_queries=max_queries,
            max_topk=max_topk,
            default_topk=default_topk,
            max_query_chars=max_query_chars,
            max_body_bytes=max_body,
            max_concurrency=max_concurrency,
            max_waiting=max_waiting,
        )
    except ValueError as exc:
        raise WorkbenchError(str(exc), "serve-retriever") from None
    run_retriever_server(recipe_retriever(config), host=host, port=port, limits=limits)


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


def missing_training_dependency(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` when it is a missing module of the ``train`` extra
    (:data:`workbench.stages.needs.TRAINING_MODULES`), else None. Recipes are refused before their first stage
    (:func:`workbench.stages.needs.check_stage_needs`); this catches what any other command imports."""
    from workbench.stages.needs import TRAINING_MODULES

    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    dist = TRAINING_MODULES.get(exc.name.split(".")[0])
    if dist is None:
        return None
    return f"this command needs the training dependencies ({dist} is not installed): pip install 'workbench[train]'"


def main() -> None:
    """Console entry point: run the CLI, turning user errors into one line and exit status 2 (a missing module of
    the ``train`` extra too: the core install runs ``infer`` and ``serve``, the rest needs ``workbench[train]``; and a
    write the machine refused, :data:`~workbench.core.errors.STORAGE_ERRNOS`: a full disk, a read-only file system)."""
    _quiet_third_party_progress()
    try:
        app()
    except ModuleNotFoundError as exc:
        message = missing_training_dependency(exc)
        if message is None:
            raise
        if os.environ.get("WORKBENCH_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        print(f"error: {message}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except WorkbenchError as exc:
        if os.environ.get("WORKBENCH_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        # the machine refused a write no workbench layer turned into its own error (a log file, a lock, a library's
        # output): one line naming the file when the error carries it
        if os.environ.get("WORKBENCH_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        place = f"{one_line(os.fsdecode(exc.filename))}: " if isinstance(exc.filename, str | bytes) else ""
        print(f"error: {place}{os_error_words(exc)}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:
        print("interrupted: finished stages are kept; run the same command again to resume", file=sys.stderr)
        sys.exit(130)
