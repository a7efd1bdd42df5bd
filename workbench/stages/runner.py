"""Run a recipe: stage by stage, each output cached by the hash of its inputs and config.

Layout of a run directory::

    <run_dir>/.workbench-run     the run marker: this directory is a run's (written first; see workbench.core.run_dirs)
    <run_dir>/config.yaml        the resolved recipe (plain YAML, every default filled in)
    <run_dir>/manifest.json      provenance: stage keys, file hashes, seconds, versions, seeds, fingerprints
    <run_dir>/logs/run.log       the run's log
    <run_dir>/stages/<stage>/    each stage's outputs, plus _stage.json (its cache key and summary)

A stage whose ``_stage.json`` holds the current key is skipped. A stage writes into a temporary directory that
replaces its output only when it finishes, so an interrupted run loses nothing and resumes at the stage it was in;
the temporary directories of a killed run are removed when the next run takes the lock.

A run never destroys what it did not make (:mod:`workbench.core.run_dirs`): a non-empty directory without the run
marker is refused (``adopt_run_dir`` adopts it when that overwrites nothing), as are the filesystem root, the home
directory and a git checkout's root; a report directory holding anything but a report is refused before any stage
runs. Inside a run directory the runner writes only its own files and replaces only ``stages/<stage>/``.

In a multi-process launch (torchrun / srun: one ``workbench run`` per device) of a recipe with a multi-process
stage (``distill``), rank 0 runs the recipe as above; every other rank takes no lock and writes nothing (no config,
manifest, log file or stage output): it checks that the stages before the first multi-process stage are cached,
runs only the multi-process stages (their outputs discarded: the stage lets rank 0 write) and returns.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.assets import WIKI_PACKAGE, package_version, resolve_embedder, wiki_summaries_path
from workbench.backends.cost import CostCounter
from workbench.backends.lora import resolve_model
from workbench.core.atomic import atomic_directory, atomic_write_json, atomic_write_text
from workbench.core.config import dump_yaml, to_plain
from workbench.core.errors import ConfigError, WorkbenchError
from workbench.core.hashing import file_sha256, stable_hash, tree_sha256
from workbench.core.launch import launch_rank
from workbench.core.logs import FILE_ONLY, setup_logging
from workbench.core.memory import (
    PeakMemory,
    large_allocations_mapped,
    megabytes,
    older_objects_frozen,
    process_peak_bytes,
    return_freed_memory,
)
from workbench.core.run_dirs import check_report_dir, check_run_dir, claim_run_dir, remove_stale_temporaries
from workbench.core.seeding import seed_everything
from workbench.core.tracking import NullTracker, make_tracker
from workbench.recipe import LoadedRecipe, RecipeConfig
from workbench.reports.findings import UNREADABLE, end_of_run_lines
from workbench.stages.content_keys import path_digests
from workbench.stages.context import Resources, StageContext
from workbench.stages.registry import STAGES, StageSpec
from workbench.uncertainty.features import plugin_versions

log = logging.getLogger("workbench.run")

STAGE_MARKER = "_stage.json"
TRACKED_PACKAGES = (
    "workbench",
    "torch",
    "transformers",
    "datasets",
    "sentence-transformers",
    "bm25s",
    "faiss-cpu",
    "scikit-learn",
    "numpy",
)


@dataclass
class StageResult:
    """What happened to one stage in a run."""

    name: str
    key: str
    cached: bool
    seconds: float
    summary: dict[str, Any]
    out_dir: Path


@dataclass
class RunResult:
    """The outcome of :func:`run_recipe`."""

    run_dir: Path
    stages: list[StageResult] = field(default_factory=list)
    seconds: float = 0.0
    findings: list[str] = field(default_factory=list)
    """What the run found and ships, and its report's path (:func:`workbench.reports.findings.end_of_run_lines`)."""

    def stage(self, name: str) -> StageResult:
        """The result of stage ``name``."""
        return next(s for s in self.stages if s.name == name)


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries that shape results (no imports)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for dist in TRACKED_PACKAGES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def asset_fingerprint(kind: str, config: RecipeConfig) -> str:
    """Fingerprint of an asset a stage uses (``generator``, ``embedder``, ``data``) for its cache key."""
    if kind == "generator" and config.generator.backend == "openai":
        # the served name and the tokenizer: a server swapping weights under one name is caught by the probe record
        return stable_hash(["served", config.generator.model, config.generator.tokenizer])
    if kind == "generator":
        return resolve_model(config.generator.model).fingerprint
    if kind == "embedder" and config.embedder.backend == "openai":
        # the served name: a server swapping models under one name is caught by the cached probe vectors
        return stable_hash(["served-embedder", config.embedder.model])
    if kind == "embedder":
        return resolve_embedder(config.embedder.model).fingerprint
    if kind == "data":
        dataset = config.data.dataset
        if dataset == "wiki-qa":
            path = wiki_summaries_path()
            return stable_hash([package_version(WIKI_PACKAGE[1]), path.stat().st_size])
        path = Path(dataset)
        return file_sha256(path)[:16] if path.is_file() else stable_hash(["hub", dataset])
    raise ValueError(f"unknown asset kind {kind!r}")


KEY_NEUTRAL_DEFAULTS: dict[tuple[str, str], Any] = {
    ("generator", "prompt_format"): "auto",
    ("generator", "backend"): "hf",
    ("generator", "tokenizer"): None,
    ("generator", "top_logprobs"): 20,
    ("embedder", "backend"): "hf",
    ("export", "allow_approximate_features"): False,
    ("export", "on_retriever_failure"): "error",
    ("data", "fields"): {},
    ("data", "split_column"): None,
    ("data", "split_names"): {},
    ("data", "corpus_fields"): {},
}
"""Settings added after stages were first cached, with the value that reproduces the earlier behaviour: at that value
the setting is left out of the stage key (so adding it does not invalidate every cached stage); any other value
enters the key as usual."""

KEY_IGNORED: frozenset[tuple[str, str]] = frozenset(
    {
        ("generator", "base_url"),
        ("generator", "api_key_env"),
        ("generator", "timeout_s"),
        ("generator", "retries"),
        ("generator", "max_concurrency"),
        ("embedder", "base_url"),
        ("embedder", "api_key_env"),
        ("embedder", "timeout_s"),
        ("embedder", "retries"),
        ("embedder", "max_concurrency"),
        ("embedder", "encoding_format"),
    }
)
"""Settings that say how a served model is reached, not what it answers: never in a stage key, so a collection
resumes against the same model restarted on another port, or split over several servers."""


def _keyed_section(name: str, values: Any) -> Any:
    """A section's plain values as they enter a stage key: without the :data:`KEY_NEUTRAL_DEFAULTS` at their value
    and the :data:`KEY_IGNORED` settings."""
    if not isinstance(values, dict):
        return values
    return {
        key: value
        for key, value in values.items()
        if (name, key) not in KEY_IGNORED
        and ((name, key) not in KEY_NEUTRAL_DEFAULTS or KEY_NEUTRAL_DEFAULTS[name, key] != value)
    }


def stage_key(spec: StageSpec, config: RecipeConfig, input_keys: dict[str, str]) -> str:
    """The cache key of a stage's output (see :class:`StageSpec`), with the contents of every local file or directory
    its settings name (:func:`workbench.stages.content_keys.path_digests`: the corpus, a dataset file, model and
    adapter directories, ``evaluate.params`` files), so editing one re-runs the stages that read it."""

    plain = to_plain(config)
    material = {
        "stage": spec.name,
        "version": spec.version,
        "seed": config.seed,
        "sections": {name: _keyed_section(name, plain[name]) for name in spec.sections},
        "assets": {kind: asset_fingerprint(kind, config) for kind in spec.uses},
        "inputs": {name: input_keys[name] for name in spec.inputs_in(config.stages)},
    }
    files = path_digests(spec.name, spec.sections, plain)
    if files:  # absent when no setting names a local path: the keys of such recipes are unchanged
        material["files"] = files
    plugins = _feature_plugins(spec.sections, plain)
    if plugins:  # absent when every feature is built in: the keys of such recipes are unchanged
        material["feature_plugins"] = plugins
    return stable_hash(material)


def _feature_plugins(sections: tuple[str, ...], plain: dict[str, Any]) -> dict[str, Any]:
    """The package and version of each plugin feature a keyed section's ``features`` names (docs/adding-a-feature.md):
    upgrading the plugin re-runs the stages that compute it."""
    names = [f for name in sections if isinstance(plain[name], dict) for f in plain[name].get("features") or []]
    return plugin_versions(names)


def _read_marker(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out_dir / STAGE_MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _apply_threads(threads: int) -> None:
    if threads > 0:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import torch

        torch.set_num_threads(threads)


def run_recipe(recipe: LoadedRecipe, *, force: list[str] | None = None, adopt_run_dir: bool = False) -> RunResult:
    """Run every stage of ``recipe`` in order, skipping stages whose cached output matches; return the results.

    ``force`` names stages to recompute even when cached. Before anything is written, the run directory is checked
    (:func:`~workbench.core.run_dirs.check_run_dir`: ``adopt_run_dir`` adopts a non-empty directory no run made)
    and so is the report directory when a stage writes it; a refusal is a one-line :class:`ConfigError`. Raises
    :class:`WorkbenchError` when another process holds the run directory. A rank other than 0 of a multi-process
    launch (:func:`~workbench.core.launch.launch_rank`) of a recipe with a ``multi_process`` stage runs
    :func:`run_other_rank` instead.
    """
    from filelock import FileLock, Timeout

    config = recipe.config
    rank = launch_rank()
    if rank > 0 and any(STAGES[name].multi_process for name in config.stages):
        with _large_allocations_mapped_if_training(config.stages), older_objects_frozen():
            return run_other_rank(recipe, rank, force=force, adopt_run_dir=adopt_run_dir)
    run_dir = config.resolved_run_dir
    check_run_dir(run_dir, adopt=adopt_run_dir, adopt_hint=_adopt_hint(recipe))
    if any(writes_report_dir(STAGES[name]) for name in config.stages):
        check_report_dir(config.resolved_report_dir, run_dir)
    claim_run_dir(run_dir, config.name)  # before the lock file: a directory holding a run's files holds its marker
    lock = FileLock(str(run_dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise WorkbenchError("another workbench process is using this run directory", str(run_dir)) from None
    try:
        with _large_allocations_mapped_if_training(config.stages), older_objects_frozen():
            return _run_locked(recipe, run_dir, set(force or ()))
    finally:
        lock.release()


def writes_report_dir(spec: StageSpec) -> bool:
    """Whether stage ``spec`` writes the report directory: the stages keyed on the ``report`` section do, replacing
    it as a whole."""
    return "report" in spec.sections


def _adopt_hint(recipe: LoadedRecipe) -> str:
    return f"{recipe.command} --adopt-run-dir"


def run_other_rank(
    recipe: LoadedRecipe, rank: int, *, force: list[str] | None = None, adopt_run_dir: bool = False
) -> RunResult:
    """A rank other than 0 of a multi-process launch: run only the recipe's ``multi_process`` stages, write nothing.

    Takes no lock (rank 0 holds it) and writes no config, manifest, log file or stage output; logs go to the
    console only and the tracker is off. Every cacheable stage before the first multi-process stage must already be
    cached under its current key: otherwise, or when ``force`` names one of them (rank 0 would rebuild it while
    this rank read the old one), a one-line ConfigError names what to run first, in one process. A multi-process
    stage cached under its current key (and not forced) is skipped, as rank 0 skips it; otherwise it runs with a
    throwaway output directory outside the run directory (its ``scratch_dir`` is the run's, shared with rank 0).
    Other stages are left to rank 0. Returns the stages this rank ran or found cached. The run directory is refused
    as rank 0 refuses it (:func:`~workbench.core.run_dirs.check_run_dir`), without creating or marking it.
    """
    config = recipe.config
    run_dir = config.resolved_run_dir
    check_run_dir(run_dir, adopt=adopt_run_dir, adopt_hint=_adopt_hint(recipe))
    forced = set(force or ())
    started = time.perf_counter()
    setup_logging(config.log_level)  # console only: rank 0 writes the run's log file
    seed_everything(config.seed)
    _apply_threads(config.threads)
    first = next(i for i, name in enumerate(config.stages) if STAGES[name].multi_process)
    first_run = f"{recipe.command} 'stages=[{','.join(config.stages[:first])}]'"
    log.info("rank %d: running only the multi-process stage(s) of %s; rank 0 writes", rank, config.name)
    resources = Resources(config, CostCounter())
    result = RunResult(run_dir)
    keys: dict[str, str] = {}
    for index, name in enumerate(config.stages):
        spec = STAGES[name]
        key = keys[name] = stage_key(spec, config, keys)
        out_dir = run_dir / "stages" / name
        marker = _read_marker(out_dir)
        cached = spec.cacheable and marker is not None and marker.get("key") == key
        if index < first:
            if not spec.cacheable:
                continue  # rank 0 runs it; its outputs lie outside the run directory and feed no stage
            if name in forced:
                raise ConfigError(
                    f"--force {name} in a multi-process launch would have rank 0 rebuild it while rank {rank} reads "
                    f"the old one: run {first_run} --force {name} in one process first",
                    f"rank {rank}",
                )
            if not cached:
                raise ConfigError(
                    f"stage {name} is not cached for this configuration and ranks other than 0 of a multi-process "
                    f"launch only run {config.stages[first]}: run {first_run} in one process first",
                    f"rank {rank}",
                )
            continue
        if not spec.multi_process:
            continue  # rank 0's alone
        if cached and name not in forced:
            log.info("stage %s: cached (key %s)", name, key)
            result.stages.append(StageResult(name, key, True, 0.0, marker.get("summary", {}), out_dir))
            continue
        log.info("stage %s: running on rank %d — %s", name, rank, spec.summary)
        stage_started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"workbench-rank{rank}-{name}-") as tmp:
            context = StageContext(
                config=config,
                spec=spec,
                out_dir=Path(tmp),
                run_dir=run_dir,
                inputs={n: run_dir / "stages" / n for n in spec.inputs_in(config.stages)},
                resources=resources,
                tracker=NullTracker(),
                counter=resources.counter,
                run_started=started,
                key=key,
            )
            summary = dict(spec.load()(context) or {})
        result.stages.append(StageResult(name, key, False, time.perf_counter() - stage_started, summary, out_dir))
    result.seconds = time.perf_counter() - started
    return result


def _large_allocations_mapped_if_training(stages: list[str]) -> AbstractContextManager[bool]:
    """A context that has glibc map large allocations for the whole run when one of ``stages`` trains
    (:attr:`StageSpec.trains`) and puts glibc's previous behaviour back when the run ends
    (:func:`~workbench.core.memory.large_allocations_mapped`): freed tensors then go back to the system, so the heap
    does not grow from stage to stage — the quickstart's 3 GB peak needs it from its first stage on, since its
    decoding stages grow the heap too (set only from the training stage on, later stages peaked 0.3-0.4 GB higher).
    A run without a training stage keeps glibc's own threshold: sampling-heavy decoding pays a system call and fresh
    pages per large block under it (the bench-features collection: bare generation 6.2 s vs 5.3 s, the 15 features
    7.4 s vs 6.0 s). Yields whether it was set."""
    if not any(STAGES[name].trains for name in stages):
        return nullcontext(False)
    return large_allocations_mapped()


def _run_locked(recipe: LoadedRecipe, run_dir: Path, force: set[str]) -> RunResult:
    config = recipe.config
    started = time.perf_counter()
    setup_logging(config.log_level, run_dir / "logs" / "run.log")
    for path in remove_stale_temporaries(run_dir, frozenset(STAGES)):
        log.info("removed %s, left by a run that was killed", path)
    atomic_write_text(run_dir / "config.yaml", f"# resolved from {recipe.source}\n" + dump_yaml(config))
    seed_everything(config.seed)
    _apply_threads(config.threads)
    log.info("run %s → %s", config.name, run_dir)

    counter = CostCounter()
    resources = Resources(config, counter)
    tracker = make_tracker(config.tracker, run_dir, config.name, to_plain(config))
    result = RunResult(run_dir)
    manifest: dict[str, Any] = {
        "recipe": config.name,
        "source": str(recipe.source),
        "config_hash": stable_hash(to_plain(config)),
        "seed": config.seed,
        "argv": sys.argv[1:],
        "versions": library_versions(),
        "stages": {},
    }
    keys: dict[str, str] = {}
    try:
        for name in config.stages:
            spec = STAGES[name]
            stage_result = _run_stage(
                spec, config, run_dir, keys, resources, tracker, name in force, started, recipe.command
            )
            keys[name] = stage_result.key
            result.stages.append(stage_result)
            manifest["stages"][name] = {
                "key": stage_result.key,
                "cached": stage_result.cached,
                "seconds": round(stage_result.seconds, 3),
                "summary": stage_result.summary,
                "files": tree_sha256(stage_result.out_dir),
            }
            served = resources.served_record()
            if served is not None:
                manifest["served_generator"] = served
            served_embedder = resources.served_embedder_record()
            if served_embedder is not None:
                manifest["served_embedder"] = served_embedder
            atomic_write_json(run_dir / "manifest.json", manifest)
            tracker.log({f"{name}/{k}": v for k, v in stage_result.summary.items()})
    finally:
        tracker.finish()
    result.seconds = time.perf_counter() - started
    manifest["seconds"] = round(result.seconds, 3)
    # the whole process's, across the stages' resets; never below a stage's own peak (the two are read from
    # different counters and may differ by a page or two)
    stage_peaks = [s.get("summary", {}).get("peak_rss_mb") for s in manifest.get("stages", {}).values()]
    manifest["peak_rss_mb"] = max([megabytes(process_peak_bytes())] + [p for p in stage_peaks if p is not None])
    manifest["cost"] = counter.as_dict()
    atomic_write_json(run_dir / "manifest.json", manifest)
    log.info("run %s finished in %.1f s", config.name, result.seconds)
    result.findings = _findings(recipe.config, result)
    for line in result.findings:  # the console gets them from the CLI, after its stage table
        log.info("finding: %s", line, extra=FILE_ONLY)
    return result


def _findings(config: RecipeConfig, result: RunResult) -> list[str]:
    """The run's findings and its report's path (the ``report`` a stage's summary names), or [] when they cannot be
    read: a finished run never fails for its summary."""

    report = next((str(s.summary["report"]) for s in result.stages if "report" in s.summary), None)
    try:
        return end_of_run_lines(config, result.run_dir, report)
    except UNREADABLE as exc:
        log.debug("no findings: %s", exc)
        return [f"Report: {report}"] if report else []


def _run_stage(
    spec: StageSpec,
    config: RecipeConfig,
    run_dir: Path,
    keys: dict[str, str],
    resources: Resources,
    tracker: Any,
    force: bool,
    run_started: float,
    command: str = "",
) -> StageResult:
    out_dir = run_dir / "stages" / spec.name
    key = stage_key(spec, config, keys)
    marker = _read_marker(out_dir)
    if spec.cacheable and not force and marker is not None and marker.get("key") == key:
        log.info("stage %s: cached (key %s)", spec.name, key)
        return StageResult(spec.name, key, True, 0.0, marker.get("summary", {}), out_dir)

    log.info("stage %s: running — %s", spec.name, spec.summary)
    func = spec.load()
    started = time.perf_counter()
    with atomic_directory(out_dir) as tmp:
        context = StageContext(
            config=config,
            spec=spec,
            out_dir=tmp,
            run_dir=run_dir,
            inputs={name: run_dir / "stages" / name for name in spec.inputs_in(config.stages)},
            resources=resources,
            tracker=tracker,
            counter=resources.counter,
            run_started=run_started,
            key=key,
            command=command,
        )
        before = resources.counter.snapshot()
        dropped = resources.hold(spec.name, spec.resources)  # memory this stage does not use is not held through it
        if dropped:
            log.debug("stage %s: released %s", spec.name, ", ".join(dropped))
        memory = PeakMemory()
        memory.start()
        try:
            summary = dict(func(context) or {})
        finally:
            undeclared = resources.finish()
        if undeclared:
            log.warning(
                "stage %s built %s without declaring it in its StageSpec.resources: it is dropped before the stage "
                "and rebuilt in it; declare it in its spec (the stage package's __init__.py, or "
                "workbench/stages/registry.py)",
                spec.name,
                ", ".join(sorted(undeclared)),
            )
        seconds = time.perf_counter() - started
        summary.setdefault("seconds", round(seconds, 3))
        # this process's peak resident memory during the stage (its own peak where the kernel can reset it)
        summary.setdefault("peak_rss_mb", megabytes(memory.peak_bytes()))
        atomic_write_json(
            tmp / STAGE_MARKER,
            {
                "key": key,
                "stage": spec.name,
                "version": spec.version,
                "summary": summary,
                "cost": resources.counter.since(before).as_dict(),
            },
        )
    shutil.rmtree(run_dir / "scratch" / f"{spec.name}-{key}", ignore_errors=True)
    return_freed_memory()  # what the stage freed (a training loop's heap) goes back before the next stage's peak
    log.info("stage %s: done in %.1f s (peak RSS %.0f MB)", spec.name, seconds, summary["peak_rss_mb"])
    return StageResult(spec.name, key, False, seconds, summary, out_dir)
