"""Export a finished run as a versioned bundle: ``<root>/<name>/<X.Y.Z>/`` and ``<root>/<name>/<name>-X.Y.Z.tar.gz``.

:func:`export_run` reads a run directory (its resolved ``config.yaml``, its ``manifest.json`` and the outputs of the
stages that manifest lists as current) and writes what the runtime needs, nothing else: the learned artifacts through
the learned-artifact protocol (the very bytes the stages wrote), the classifier's ONNX graph, the model card and its
plots, and ``manifest.json`` (field by field in docs/bundles.md). The bundle is built in a temporary directory,
verified exactly as a loader would verify it, and swapped in with one rename.

**Versions.** ``version="auto"`` reuses the latest version of the name when the content is unchanged (the content
digest covers every file but the card, and every manifest field the runtime reads, not the provenance — creation
time, exporting workbench, resolved recipe; content is compared without the version, which the digest seals in
``identity``), and otherwise takes the next patch version (``1.0.0`` for a new name). An explicit version
that exists with other content is refused unless ``force``. Re-exporting the same run gives byte-identical files,
the same hashes, the same manifest and the same archive.

**Export = evaluate.** Each method's options and the decision's τ come from the functions the evaluate stage runs with
(:func:`~workbench.bundle.learned.evaluated_options`, :func:`~workbench.bundle.learned.evaluated_learned`): the
recipe's ``evaluate.options``, the run's study, then the ``evaluate.params`` files — so a bundle runs what its metrics
block reports; and their digest must be the one evaluate recorded for what it ran (:func:`_check_evaluated`).

**What ships, and on what it was fitted.** The manifest's ``provenance`` (:func:`_provenance`,
:mod:`workbench.bundle.provenance`) records who set each shipped part and parameter and the questions it was fitted
on, and the questions each held-out figure was measured on; when a study, a parameters file or ``workbench decide``
(a :class:`~workbench.bundle.decided.DecidedPoint`) moved τ, the routing table gets the row of the shipped decision at
that τ (:func:`_shipped_row`), which every reader shows (:mod:`workbench.bundle.shipped`).

**Refused** (one line, before anything is written): a gold-using method (its spec says ``gold``), a feature that
requires the gold answer, a method without the run's stages that make its learned parts (its spec's
``requires_stages``), parameters tuned with the gold-using oracle utility (a study or parameters file that does not
record a gold-free one: the method's hooks say), parameters other than those evaluate ran, and held-out figures
measured on questions a shipped part was fitted on. A method deciding with the learned policy but without a fitted
utility predictor is exported with the gold-free default (no utility: every retrieved context decoded neutrally), and
the manifest says so.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench import __version__
from workbench.assets import (
    EMBEDDED_ADAPTERS,
    EMBEDDED_EMBEDDERS,
    EMBEDDED_GENERATORS,
    model_weights,
    package_version,
    resolve_embedder,
    weights_digest,
)
from workbench.backends.cost import CostCounter
from workbench.backends.factory import build_generator
from workbench.backends.lora import copy_adapter, resolve_model
from workbench.backends.retrieval_engines import ENGINES
from workbench.backends.served_probe import fingerprint_probe
from workbench.bundle.archive import write_archive
from workbench.bundle.card import model_card
from workbench.bundle.external import external_record
from workbench.bundle.integrity import file_digest, file_table, gold_methods, read_manifest, verify_bundle_dir
from workbench.bundle.learned import (
    Setter,
    evaluated_config,
    evaluated_learned,
    parameters_digests,
    read_params,
    recorded_tau,
    tau_setter,
)
from workbench.bundle.manifest import seal, unversioned_digest
from workbench.bundle.provenance import (
    RunQuestions,
    check_held_out,
    check_reader_articles,
    reader_training_record,
    records,
    run_fitted,
    run_held_out,
)
from workbench.bundle.schema import FORMAT, MANIFEST, SCHEMA_VERSION, bundle_versions, check_name, parse_semver
from workbench.bundle.shipped import classify_pick_name
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.choice import choice_notes
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.core.artifact_io import read_artifact
from workbench.core.atomic import atomic_directory, atomic_write_text
from workbench.core.config import to_plain
from workbench.core.errors import ConfigError, DataError
from workbench.core.hashing import stable_hash
from workbench.core.paths import PROJECT_ROOT
from workbench.data.article_splits import training_data_leak
from workbench.data.corpus import corpus_fingerprint
from workbench.methods.learned import save_learned
from workbench.methods.registry import METHOD_TABLE, METHODS, method_spec, uses_decision_policy
from workbench.monitoring.reference import REFERENCE_FILE, build_reference
from workbench.plots import grouped_bars
from workbench.recipe import load_recipe
from workbench.stages.classify.router import cost_model
from workbench.stages.classify.run import routing_table
from workbench.stages.context import Resources
from workbench.uncertainty.features import get_features
from workbench.uncertainty.stat_costs import load_stat_costs

PROVENANCE = ("created", "workbench", "recipe")
"""Kept from the first export of the same content, so an unchanged re-export is byte-identical."""


@dataclass
class ExportResult:
    """Where the bundle went: ``path`` (the version directory), ``archive`` (None when not written), the manifest,
    and ``unchanged`` (True when the same content already had this version: nothing but identical bytes written)."""

    name: str
    version: str
    path: Path
    archive: Path | None
    manifest: dict[str, Any]
    unchanged: bool


def finished_run(run_dir: str | Path) -> _Run:
    """A finished run directory (its ``config``, ``stage(name)``, ``json(stage, file)``); DataError when it is not
    one."""
    return _Run(Path(run_dir))


class _Run:
    """A finished run directory: its config, and the outputs of the stages its manifest lists as current."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        if not (run_dir / "config.yaml").is_file():
            raise DataError("not a run directory (no config.yaml): run a recipe first", str(run_dir))
        self.config = load_recipe(str(run_dir / "config.yaml")).config
        try:
            self.manifest = json.loads((run_dir / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError):
            raise DataError("the run has no readable manifest.json: run its recipe first", str(run_dir)) from None
        self.stages: dict[str, Path] = {}
        for name, record in self.manifest.get("stages", {}).items():
            out = run_dir / "stages" / name
            try:
                marker = json.loads((out / "_stage.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if marker.get("key") == record.get("key"):  # only outputs the last run made or reused
                self.stages[name] = out

    def stage(self, name: str) -> Path | None:
        """The output directory of stage ``name``, or None when the run did not make it."""
        return self.stages.get(name)

    def json(self, stage: str, file: str) -> Any:
        """A JSON output of a stage (None when the stage or the file is absent)."""
        out = self.stage(stage)
        if out is None or not (out / file).is_file():
            return None
        return json.loads((out / file).read_text())


def _git_commit() -> str | None:
    if not (PROJECT_ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _model_record(kind: str, ref: str) -> dict[str, Any]:
    """Name, source, package and weights digest of a generator / embedder reference."""

    resolved = resolve_model(ref) if kind == "generator" else resolve_embedder(ref)
    embedded = EMBEDDED_GENERATORS if kind == "generator" else EMBEDDED_EMBEDDERS
    weights = model_weights(resolved)
    record: dict[str, Any] = {"ref": ref, "source": resolved.source, "weights_sha256": weights["weights_sha256"]}
    if ref in embedded:
        record["package"] = embedded[ref][1]
        record["package_version"] = package_version(embedded[ref][1])
    elif kind == "generator" and ref in EMBEDDED_ADAPTERS:  # a base shipped by its package + our adapter
        record["package"] = "workbench"
        record["package_version"] = package_version("workbench")
    elif resolved.source in ("local", "adapter"):  # an adapter: its adapter.json, not the merged copy in the cache
        record["path"] = str(Path(resolved.path if resolved.source == "local" else ref).resolve())
    else:  # a hub id: the revision of the locally cached snapshot its weights were hashed from (None: not cached)
        record["hub_id"] = ref
        record["revision"] = weights["revision"]
    return record


def _embedder_record(run: _Run) -> dict[str, Any]:
    """``models.embedder``: the in-process embedder's weights digest, or — served — the server's URL, the served
    name, the NAME of its key variable and the probe vectors the run recorded (never the key)."""
    section = run.config.embedder
    if section.backend != "openai":
        return _model_record("embedder", section.model)
    served = run.manifest.get("served_embedder") or {}
    return {
        "ref": section.model,
        "source": "served",
        "served": {
            "base_url": str(section.base_url),
            "model": section.model,
            "api_key_env": section.api_key_env,
            "dim": served.get("dim"),
            "probe": served.get("probe"),
        },
    }


def _generator_record(run: _Run) -> dict[str, Any]:
    """``models.generator``: the model (weights digest) and how it ran, plus its probe answers
    (:func:`workbench.backends.served_probe.fingerprint_probe`), by which a served copy of it is recognised at load.
    A served run's generator has no weights here: its served name, tokenizer, capabilities and the probe the run
    recorded stand in for them."""
    section = run.config.generator
    common = {
        "dtype": section.dtype,
        "max_context": section.max_context,
        "prompt_format": section.prompt_format,
        "allow_approximate_features": run.config.export.allow_approximate_features,
    }
    if section.backend == "openai":
        served = run.manifest.get("served_generator") or {}
        if not served.get("probe"):
            raise DataError("the run used a served generator but recorded no probe: rerun it", str(run.dir))
        return {
            "ref": section.model,
            "source": "served",
            **common,
            "probe": served["probe"],
            "served": {
                "model": section.model,
                "tokenizer": section.tokenizer,
                "capabilities": served.get("capabilities"),
                "approximate_features": served.get("approximate_features") or {},
            },
        }

    generator = build_generator(
        resolve_model(section.model),
        dtype=section.dtype,
        max_context=section.max_context,
        prompt_format=section.prompt_format,
        cache=False,
        seed=run.config.seed,
    )
    probe = fingerprint_probe(generator, section.model).to_dict()
    return {**_model_record("generator", section.model), **common, "probe": probe}


def _method_options(run: _Run, methods: list[str]) -> dict[str, dict[str, Any]]:
    """Each method's settings as the evaluate stage runs it (:func:`workbench.bundle.learned.evaluated_config`: the
    recipe's ``evaluate.options``, the run's study, then the ``evaluate.params`` files), so the bundle runs what the
    metrics block reports."""

    # the run's config.yaml configured each method when it loaded; a study's or params file's values again here
    return {name: evaluated_config(run.config, name, run.stage("study")).given for name in methods}


def _method_record(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A method's manifest entry: its options, and (for a method a third-party package provides) that package, so a
    runtime without it says what to install."""

    package = method_spec(name, "export.methods").package
    return {"options": options, "requires_gold": False, **({"package": package} if package != "workbench" else {})}


def _decides(methods: list[str]) -> bool:
    """Whether any of ``methods`` decides with the run's fitted decision policy (the bundle then ships it)."""

    return any(uses_decision_policy(m) for m in methods)


def _check_tuned_gold_free(run: _Run, methods: list[str]) -> None:
    """Each exported method's tuned parameters (the run's study, the ``evaluate.params`` files) were tuned as its
    bundle runs it, gold-free: ConfigError for a study whose preparation record (its spec's ``hooks.prepared_key``:
    the utility it was tuned with) does not say ``requires_gold: false``, and for a parameters file the method's
    ``hooks.check_params`` refuses."""

    hint = "tuned with the gold-using oracle utility (or not recorded how), and the bundle runs the gold-free one"
    best = run.json("study", "best_params.json") or {}
    for method in methods:
        spec = METHOD_TABLE[method]
        if spec.hooks.study_prepare is None or not isinstance(best, dict):
            continue
        keys = [f"{method}_{param}" for param in spec.learned_params]
        studied = method in best.get("methods", {}) or any(key in best for key in keys)
        record = best.get(f"{method}_{spec.hooks.prepared_key}")
        if studied and not (isinstance(record, dict) and record.get("requires_gold") is False):
            raise ConfigError(f"the run's study of {method} was {hint}: rerun the study with fit_utility", "export")
    for path in run.config.evaluate.params:
        params = read_params(Path(path))
        spec = METHOD_TABLE.get(params["method"])
        if params["method"] in methods and spec is not None and spec.hooks.check_params is not None:
            try:
                spec.hooks.check_params(run.config, str(path), params, True)
            except ConfigError as exc:
                raise ConfigError(exc.what, "export") from None


def _choose_methods(run: _Run, requested: list[str] | None, notes: list[str]) -> list[str]:
    def ready(method: str) -> bool:  # the run made the learned parts the method cannot run without
        return all(run.stage(stage) is not None for stage in METHOD_TABLE[method].requires_stages)

    if requested is not None:
        unknown = [m for m in requested if m not in METHODS]
        if unknown or not requested:
            raise ConfigError(f"unknown or no method(s) {unknown} (known: {', '.join(METHODS)})", "export.methods")
        gold = [m for m in requested if m in gold_methods()]
        if gold:
            raise ConfigError(f"{gold} read the gold answer: a bundle never holds them", "export.methods")
        for method in requested:
            if not ready(method):
                stages = " and ".join(METHOD_TABLE[method].requires_stages)
                raise ConfigError(f"{method} needs the run's {stages} stages", "export.methods")
        return list(dict.fromkeys(requested))
    evaluated = [m for m in run.config.evaluate.methods if m in METHOD_TABLE]
    methods = [m for m in evaluated if m not in gold_methods()]
    for method in evaluated:  # a gold variant's gold-free twin ships in its place
        twin = METHOD_TABLE[method].gold_free_twin
        if twin is not None and twin not in methods:
            methods.append(twin)
    for method in [m for m in methods if not ready(m)]:
        methods.remove(method)
        stages = " / ".join(METHOD_TABLE[method].requires_stages)
        notes.append(f"{method} left out: the run has no {stages} outputs")
    if not methods:
        raise ConfigError("no gold-free method to export (evaluate.methods)", "export.methods")
    return methods


def _metrics(run: _Run) -> dict[str, Any]:
    """Held-out figures from the run: routing on the evaluation split, features' AUROC, utility quality, methods."""
    out: dict[str, Any] = {}
    selection = run.json("classify", "selection.json")
    routing = run.json("classify", "routing.json")
    if selection and routing:
        chosen = classify_pick_name(selection)
        keep = {"No-RAG", "Always-RAG", "Oracle", chosen}
        out["routing"] = {
            "split": routing["split"],
            "chosen": chosen,
            "rows": [
                {k: row[k] for k in ("router", "retrieval_rate", "em", "f1", "contains", "lm_calls", "tokens")}
                for row in routing["rows"]
                if row["router"] in keep
            ],
        }
    calibration = run.json("calibrate", "metrics.json")
    if calibration and selection:
        split = selection.get("eval_split")
        out["feature_auroc"] = {
            f: m.get(split, {}).get("after", {}).get("auroc") for f, m in sorted(calibration.items()) if split in m
        }
    utility = run.json("fit_utility", "summary.json")
    if utility and "oof" in utility:
        oof = utility["oof"]
        keys = ("n", "r2", "spearman", "class_agreement", "majority_agreement", "macro_f1", "majority_macro_f1")
        out["utility"] = {k: oof.get(k) for k in (*keys, "predicted") if k in oof}
        if "model" in utility:
            out["utility"]["model"] = utility["model"]
    evaluate = run.json("evaluate", "summary.json")
    if evaluate:
        keys = ("n", "em", "f1", "contains", "retrieval_rate", "lm_calls", "tokens", "latency_p50")
        order = evaluate.get("order") or list(evaluate["methods"])  # the recipe's order (JSON keys are sorted)
        out["evaluate"] = {
            "split": evaluate.get("split"),
            "order": order,
            "methods": {m: {k: evaluate["methods"][m].get(k) for k in keys} for m in order},
        }
    return out


def _drop_evaluated(metrics: dict[str, Any], method: str) -> None:
    """Leave ``method`` out of ``metrics.evaluate`` (its end-to-end figures were measured with other parameters)."""
    evaluate = metrics.get("evaluate")
    if evaluate:
        evaluate["methods"].pop(method, None)
        evaluate["order"] = [m for m in evaluate["order"] if m != method]


def _corpus_record(run: _Run) -> dict[str, Any]:
    data = run.config.data
    record: dict[str, Any] = {
        "source": data.corpus,
        "chunking": data.chunking,
        "chunk_size": data.chunk_size,
        "chunk_overlap": data.chunk_overlap,
    }
    if data.corpus != "wiki":
        path = Path(data.corpus)
        record["source"] = str(path.resolve())
        record["source_sha256"] = file_digest(path) if path.is_file() else None
        if data.corpus_fields:  # the file's columns for doc_id / title / text / topic, so the runtime reads it alike
            record["fields"] = dict(data.corpus_fields)
    built = run.stage("build_data")
    if built is not None and (built / "corpus").is_dir():
        import datasets

        corpus = datasets.load_from_disk(str(built / "corpus"))
        record["passages"] = len(corpus)
        record["fingerprint"] = corpus_fingerprint(corpus)
    return record


def _stats_record(run: _Run) -> dict[str, Any] | None:
    meta = run.json("collect", "metadata.json")
    if meta is None:
        return None
    return {
        "settings": meta["settings"],
        "prompts": meta.get("prompts"),
        "prompt_groups": meta.get("prompt_groups"),
        "nli_judge": meta.get("nli_judge"),
        "attention_logdiag_scope": meta.get("attention_logdiag_scope"),
        "generator": meta.get("generator"),
    }


def _write_learned(
    run: _Run, methods: list[str], learned: Any, tmp: Path, notes: list[str], decided: Any = None
) -> dict[str, Any]:
    """Write learned/* for the methods that decide with the fitted policy (when exported, with ``learned``:
    :func:`evaluated_learned`'s parts, or a ``decided`` point's); returns the manifest's ``decision`` and ``utility``
    blocks."""

    blocks: dict[str, Any] = {}
    adapter = run.stage("distill")
    if adapter is not None and (adapter / "adapter.json").is_file():  # with its peft files: a peft adapter directory
        copy_adapter(adapter, tmp / "learned")
        payload, _ = read_artifact(tmp / "learned" / "adapter.json")
        blocks["controller_adapter"] = {"file": "learned/adapter.json", "kind": payload["kind"]}
    if not _decides(methods):
        return blocks
    features = list(learned.features)
    calibrator_set = CalibratorSet(tuple(features), learned.calibrators, learned.medians, learned.ranges)
    save_learned(calibrator_set, tmp / "learned/calibrators.json")
    deciders = "/".join(m for m in methods if uses_decision_policy(m))
    notes += choice_notes(calibrator_set.choices(), f"{deciders} calibrators")  # what was chosen; any ranking lost
    save_learned(learned.classifier, tmp / "learned" / "classifier.json")
    selection = run.json("classify", "selection.json")
    router = selection.get("router")  # the router the search picked (its features only), else the full classifier
    source = run.stage("classify")
    if decided is not None:  # workbench decide's router (classify's, or the search's pick refitted)
        router, source = decided.router, decided.router_dir
    onnx = router["files"]["onnx"] if router else f"{selection['chosen']}.onnx"
    # the decision graph: raw features in, the calibrators inside, then classify's graph (docs/bundles.md)
    export_decision_onnx(calibrator_set, source / onnx, tmp / "learned" / "classifier.onnx", learned.tau)
    blocks["decision"] = {
        "features": features,
        "classifier": router["spec"]["kind"] if router else selection["chosen"],
        "tau": learned.tau,
        "rule": learned.tau_rule or run.config.classify.threshold_rule,
        "always_retrieve": learned.tau > 1.0,
        "calibrator": router["spec"]["calibrator"] if router else run.config.calibrate.kind,
        "label": run.config.calibrate.label,
        "files": {
            "calibrators": "learned/calibrators.json",
            "classifier": "learned/classifier.json",
            "classifier_onnx": "learned/classifier.onnx",
        },
    }
    if learned.lars_scorer is not None and "lars" in features:  # a router without lars ships no LARS scorer
        save_learned(learned.lars_scorer, tmp / "learned" / "lars.json")
        blocks["decision"]["files"]["lars"] = "learned/lars.json"
    _write_ood(learned, tmp, blocks["decision"])
    blocks["monitoring"] = _write_reference(run, learned, tmp)
    if learned.utility is not None:
        save_learned(learned.utility, tmp / "learned" / "utility.json")
        blocks["utility"] = {
            "kind": "learned",
            "file": "learned/utility.json",
            "label": run.config.fit_utility.label,
            "model": learned.utility.kind,
        }
    else:
        blocks["utility"] = {
            "kind": "none",
            "meaning": "no utility predictor was fitted: every retrieved context is decoded neutrally (plain greedy "
            "with the context); the gold-using oracle utility is never shipped",
        }
        notes.append(f"{deciders}: no fit_utility stage, so the bundle decodes retrieved contexts neutrally")
    return blocks


def _write_ood(learned: Any, tmp: Path, decision: dict[str, Any]) -> None:
    """``learned/ood.json``, named by ``decision.files.ood``, when the run's calibrate stage fitted an OOD profile
    (docs/ood.md); nothing for a run made before it."""

    if learned.ood is not None:
        save_learned(learned.ood, tmp / "learned" / "ood.json")
        decision["files"]["ood"] = "learned/ood.json"


def _write_reference(run: _Run, learned: Any, tmp: Path) -> dict[str, Any] | None:
    """``monitoring/reference.json`` (:mod:`workbench.monitoring.reference`): the reference distributions of the
    decision's raw features, its P(correct) and its retrieval decision on the calibrate stage's fit split's rows, and
    the OOD flag's on every fit question its profile holds, each checked leave-one-out (``ood_reference.json``; a
    calibrate output made before it: the flag on the same rows, ``ood_checks.json``), with ``export.drift``'s
    settings; returns the manifest's ``monitoring`` block (None: the run has no calibrated rows to describe)."""

    calibrated = run.json("calibrate", "calibrated.json")
    summary = run.json("calibrate", "summary.json") or {}
    split = summary.get("fit_split")
    if not calibrated or split not in calibrated or not calibrated[split]["id"]:
        return None
    rows = calibrated[split]
    features = list(learned.features)
    if any(f not in rows["raw"] for f in features):
        return None
    raw = np.column_stack([np.asarray(rows["raw"][f], dtype=float) for f in features])
    p_correct = learned.policy().p_correct(raw)
    flags = None
    whole = run.json("calibrate", "ood_reference.json") or {}
    checks = (run.json("calibrate", "ood_checks.json") or {}).get(split)
    if learned.ood is not None and whole.get("split") == split and whole.get("questions"):
        n, flagged = whole["questions"], whole.get("flagged")
        if not (isinstance(n, int) and isinstance(flagged, int) and 0 <= flagged <= n):
            raise DataError(
                f"'flagged' must be a count in [0, questions], got {flagged!r} of {n!r}", "ood_reference.json"
            )
        flags = np.repeat([1.0, 0.0], [flagged, n - flagged])
    elif learned.ood is not None and checks and checks["id"] == rows["id"]:  # the flag on the same rows
        flags = np.asarray([bool(c) for c in checks["checks"]], dtype=float)
    reference = build_reference(
        split,
        {f: raw[:, j] for j, f in enumerate(features)},
        p_correct,
        (p_correct < learned.tau).astype(float),
        flags,
        run.config.export.drift,
    )
    path = tmp / REFERENCE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(reference.to_dict(), indent=1, sort_keys=True) + "\n")
    return {"file": REFERENCE_FILE, "split": split, "rows": reference.rows}


def _check_evaluated(run: _Run, methods: list[str], options: dict[str, dict[str, Any]], learned: Any) -> dict[str, str]:
    """Export = evaluate, checked: each shipped method's decision parameters (its options; the decision's τ) hash to the
    digest the evaluate stage recorded for what it ran (``summary.json``'s ``parameters_sha256``; recomputed from its
    ``options`` and τ for a run made before the digest). ConfigError naming the method, what would ship and
    what evaluate ran (the values that differ, and both digests) otherwise — an ``evaluate.params`` file edited after
    the run. Returns ``{method: digest}`` of the methods evaluate ran (the manifest's ``provenance.evaluated``)."""

    summary = run.json("evaluate", "summary.json")
    if not summary:
        return {}
    tau = learned.tau if learned is not None else None
    shipped = parameters_digests({m: options[m] for m in methods}, tau)
    ran = summary.get("options") or {}
    their_tau = recorded_tau(summary)  # the τ evaluate ran at, under its method's key
    recorded = summary.get("parameters_sha256") or parameters_digests(ran, their_tau)
    for method in methods:
        if method in recorded and recorded[method] != shipped[method]:
            differs = _differences(options[method], ran.get(method), tau, their_tau, method)
            raise ConfigError(
                f"{method}: the bundle would ship {differs[0]} but evaluate ran {differs[1]} (parameters sha256 "
                f"{shipped[method][:12]} vs evaluate's {recorded[method][:12]}): they changed after evaluate ran (an "
                "evaluate.params file edited?); re-run the recipe so evaluate runs what ships",
                "export",
            )
    return {m: shipped[m] for m in methods if m in recorded}


def _differences(
    mine: dict[str, Any], theirs: dict[str, Any] | None, tau: float | None, their_tau: float | None, method: str
) -> tuple[str, str]:
    """``(what ships, what evaluate ran)``: the options (and the decision's τ) that differ, in words."""

    if theirs is None:
        return "other parameters", "the recorded ones"
    keys = sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))
    shipped = [f"{k} = {mine.get(k)}" for k in keys]
    ran = [f"{k} = {theirs.get(k)}" for k in keys]
    if uses_decision_policy(method) and tau != their_tau:
        shipped.append(f"τ = {tau}")
        ran.append(f"τ = {their_tau}")
    return ", ".join(shipped) or "other parameters", ", ".join(ran) or "the recorded ones"


def _shipped_row(run: _Run, metrics: dict[str, Any], learned: Any, setter: Any, decided: Any = None) -> None:
    """Make ``metrics.routing.chosen`` the row of the decision the bundle ships. When classify set τ it is classify's
    pick as routed; when a study, a parameters file or ``workbench decide`` moved τ, the pick's P(correct) on the
    evaluation split (a ``decided`` point's own, for a router it refitted) is routed again at the shipped τ
    (classify's own routing table, :func:`workbench.stages.classify.run.routing_table`, with its cost model) and added
    as its own row; ``classify_pick`` keeps classify's row, ``shipped_by`` who set τ."""

    routing = metrics.get("routing")
    if not routing or learned is None:
        return
    routing["classify_pick"] = routing["chosen"]
    routing["shipped_by"] = setter.stage
    if setter.stage == "classify":
        return
    pick, tau = routing["chosen"], float(learned.tau)
    predictions = run.json("classify", "predictions.json")
    calibrated = run.json("calibrate", "calibrated.json")
    columns = calibrated[routing["split"]]["columns"]
    cols = {k: np.asarray(v, dtype=float) for k, v in columns.items()}
    collect = run.stage("collect")
    costs = load_stat_costs(collect) if collect is not None else None
    model = cost_model(costs, routing["split"], columns, run.config.classify) if costs is not None else None
    label = f"{pick} at τ = {tau:.3f} ({setter.stage})" if decided is None else decided.label
    p_eval = predictions[pick] if decided is None else decided.p_eval
    retrieve = {label: np.asarray(p_eval, dtype=float) < tau}
    row = routing_table(cols, retrieve, model, {label: list(learned.features) if tau <= 1.0 else None})[-1]
    keep = ("router", "retrieval_rate", "em", "f1", "contains", "lm_calls", "tokens")
    routing["rows"].append({k: row[k] for k in keep})
    routing["chosen"] = label


def _provenance(
    run: _Run,
    methods: list[str],
    learned: Any,
    metrics: dict[str, Any],
    evaluated: dict[str, str],
    decided: Any = None,
) -> dict[str, Any]:
    """The manifest's ``provenance`` block (:mod:`workbench.bundle.provenance`): what each shipped part and parameter
    was fitted on and who set it (a ``decided`` point's τ and refitted router: ``decide``), what each held-out
    figure was measured on, the evaluated parameters' digests. Refuses (ConfigError) a bundle whose held-out figures
    share questions with anything it ships. Adds the shipped decision's row to ``metrics.routing`` first
    (:func:`_shipped_row`)."""

    if learned is not None:
        setter = tau_setter(run.config, run.stage("study"), learned) if decided is None else Setter("decide")
        _shipped_row(run, metrics, learned, setter, decided)
    questions = RunQuestions(run.stage)
    fitted = run_fitted(run, methods, learned, questions)
    if decided is not None and "decision.tau" in fitted:
        fitted.update(decided.fitted())
    held_out = run_held_out(run, metrics, questions)
    check_held_out(fitted, held_out)

    def leak() -> str | None:  # the reader's training articles this run's data puts outside train
        data, record = run.config.data, reader_training_record(run.config.generator.model)
        if record is None:
            return None
        fractions, topics = data.fractions, data.ood_topics
        return training_data_leak(
            record, dataset=data.dataset, seed=run.config.seed, fractions=fractions, ood_topics=topics
        )

    check_reader_articles(fitted, held_out, leak)
    return {
        "fitted": records(fitted, "set_by"),
        "held_out": records(held_out, "measured_by"),
        "evaluated": evaluated,
    }


def _existing_digest(path: Path) -> tuple[str | None, dict[str, Any] | None]:
    try:
        manifest = read_manifest(path)
    except DataError:
        return None, None
    return unversioned_digest(manifest, manifest["files"]), manifest


def export_run(
    run_dir: str | Path,
    *,
    name: str | None = None,
    version: str = "auto",
    root: str | Path = "artifacts/bundles",
    methods: list[str] | None = None,
    archive: bool = True,
    force: bool = False,
    decided: Any = None,
) -> ExportResult:
    """Export the run at ``run_dir`` (see the module docstring); returns where the bundle went.

    ``name`` defaults to the recipe's name; ``methods`` to ``evaluate.methods`` without the gold-using ones.
    ``decided``: a :class:`~workbench.bundle.decided.DecidedPoint` (``workbench decide``) shipped in place of
    the decision as evaluate ran it (whose other parameters are still checked against evaluate's).
    ConfigError / DataError (one line, nothing written) on a bad name or version, a missing or unfinished run, a
    gold-using method, or an explicit version that exists with other content (unless ``force``).
    """

    run = _Run(Path(run_dir))
    name = check_name(name or run.config.name, "export.name")
    if version != "auto":
        parse_semver(version, "export.version")
    engine = _external_retriever(run)  # reaches the engine (one line, exit 2, when it cannot) before any byte
    notes: list[str] = []
    methods = _choose_methods(run, methods, notes)
    _check_tuned_gold_free(run, methods)
    config = run.config
    # the τ evaluate ran with (study, evaluate.params); every check below comes before a byte is written
    learned = evaluated_learned(config, run.stage) if _decides(methods) else None
    options = _method_options(run, methods)
    evaluated = _check_evaluated(run, methods, options, learned)
    metrics = _metrics(run)
    if decided is not None and learned is not None:  # τ moved after evaluate ran: its figures are not at it
        learned = decided.apply(learned)
        for method in [m for m in METHOD_TABLE if uses_decision_policy(m)]:  # all ran at the τ evaluate ran
            evaluated.pop(method, None)
            _drop_evaluated(metrics, method)
        metrics["decide"] = decided.record
        notes.append(decided.note)
    provenance = _provenance(run, methods, learned, metrics, evaluated, decided)
    bundle_root = Path(root) / name
    new_name = not bundle_root.exists()
    bundle_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.export.", dir=bundle_root))
    (staging / "learned").mkdir()
    try:
        blocks = _write_learned(run, methods, learned, staging, notes, decided)
        features = blocks.get("decision", {}).get("features", [])
        specs = [f.describe() for f in get_features(features)]
        gold = [s["name"] for s in specs if s["requires_gold"]]
        if gold:
            raise ConfigError(f"feature(s) {gold} require the gold answer: a bundle never holds them", "export")
        build = run.json("build_data", "_stage.json") or {}
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "name": name,
            "version": "",
            "created": "",
            "workbench": {"version": __version__, "git_commit": _git_commit()},
            "recipe": {"name": config.name, "hash": stable_hash(to_plain(config)), "resolved": to_plain(config)},
            "seed": config.seed,
            "data": {
                "dataset": config.data.dataset,
                "qa_fingerprint": build.get("summary", {}).get("qa_fingerprint"),
                "splits": {
                    k[2:]: v for k, v in build.get("summary", {}).items() if k.startswith("n_") and k != "n_passages"
                },
            },
            "corpus": _corpus_record(run),
            "models": {
                "generator": _generator_record(run),
                "embedder": _embedder_record(run),
                "nli": {"kind": config.nli.kind, "batch_size": config.nli.batch_size},
            },
            "answering": {
                "retriever": config.retrieval.backend,
                "k": config.retrieval.k,
                "passage_chars": config.evaluate.passage_chars,
                "max_new_tokens": config.evaluate.max_new_tokens,
                "batch_size": config.generator.batch_size,
            },
            "features": specs,
            "stats": _stats_record(run) if _decides(methods) else None,
            "decision": blocks.get("decision"),
            "utility": blocks.get("utility"),
            "controller_adapter": blocks.get("controller_adapter"),
            **({"monitoring": blocks["monitoring"]} if blocks.get("monitoring") else {}),
            "methods": {m: _method_record(m, options[m]) for m in methods},
            "metrics": metrics,
            "provenance": provenance,
            "notes": notes,
        }
        if engine is not None:
            manifest["external_retriever"] = engine
        if config.nli.kind in ("cross_encoder", "hf"):
            manifest["models"]["nli"]["model"] = config.nli.model
            manifest["models"]["nli"]["weights_sha256"] = weights_digest(config.nli.model)
        _write_plots(manifest, staging)
        files = file_table(staging, [p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()])
        digest = unversioned_digest(manifest, files)
        version, created, unchanged = _pick_version(bundle_root, version, digest, force)
        manifest.update({"version": version, "created": created})
        seal(manifest, files)  # identity (name and version) and content_sha256, which covers it
        if unchanged:  # keep the first export's provenance, so the manifest (and the archive) stay byte-identical
            previous = read_manifest(bundle_root / version)
            manifest.update({key: previous[key] for key in PROVENANCE if key in previous})

        atomic_write_text(staging / "README.md", model_card(manifest))
        manifest["files"] = file_table(
            staging, [p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()]
        )
        atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        verify_bundle_dir(staging)  # what every loader will check, before anything is published
        target = bundle_root / version
        with atomic_directory(target) as tmp:
            for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                destination = tmp / path.relative_to(staging)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if new_name and not any(bundle_root.iterdir()):  # a failed first export leaves no empty name behind
            bundle_root.rmdir()
    archive_path = None
    if archive:
        archive_path = write_archive(target, bundle_root / f"{name}-{version}.tar.gz", f"{name}-{version}")
    return ExportResult(name, version, target, archive_path, manifest, unchanged)


def _external_retriever(run: _Run) -> dict[str, Any] | None:
    """The manifest's ``external_retriever`` block of a run on the user's engine (None for an in-process backend):
    the engine reached with the recipe's connection and the run's embedder, its index fingerprinted
    (:func:`workbench.bundle.external.external_record`); a one-line EngineError when it cannot be reached."""

    config = run.config
    if not ENGINES[config.retrieval.backend].external:
        return None

    resources = Resources(config, CostCounter())
    retriever = resources.retriever(None)  # no corpus: the probes' passages come from the engine
    try:
        return external_record(
            config.retrieval.backend, retriever.connection, retriever, config.export.on_retriever_failure
        )
    finally:
        retriever.close()


def _pick_version(bundle_root: Path, version: str, digest: str, force: bool) -> tuple[str, str, bool]:
    """``(version, created, unchanged)`` by the rule in the module docstring."""
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    existing = bundle_versions(bundle_root)
    if version == "auto":
        if not existing:
            return "1.0.0", now, False
        (major, minor, patch), latest = existing[-1]
        old_digest, old = _existing_digest(latest)
        if old_digest == digest and old is not None:
            return latest.name, str(old.get("created", now)), True
        return f"{major}.{minor}.{patch + 1}", now, False
    path = bundle_root / version
    if path.exists():
        old_digest, old = _existing_digest(path)
        if old_digest == digest and old is not None:
            return version, str(old.get("created", now)), True
        if not force:
            raise ConfigError(
                f"bundle {bundle_root.name} {version} exists with other content: choose a new version (or 'auto'), "
                "or pass --force to replace it",
                str(path),
            )
    return version, now, False


def _write_plots(manifest: dict[str, Any], staging: Path) -> None:
    """The model card's figures: routed quality per router, and the methods side by side (when the run has them)."""

    metrics = manifest["metrics"]
    routing = metrics.get("routing")
    if routing:
        rows = routing["rows"]
        grouped_bars(
            staging / "plots" / "routing.png",
            [r["router"] for r in rows],
            {"containment": [r["contains"] for r in rows], "retrieval rate": [r["retrieval_rate"] for r in rows]},
            title=f"Retrieval decision on the {routing['split']} split",
            ylabel="share of questions",
        )
    evaluate = metrics.get("evaluate")
    if evaluate and evaluate.get("methods"):
        names = list(evaluate.get("order") or evaluate["methods"])
        grouped_bars(
            staging / "plots" / "methods.png",
            names,
            {
                "containment": [evaluate["methods"][m]["contains"] for m in names],
                "retrieval rate": [evaluate["methods"][m]["retrieval_rate"] for m in names],
            },
            title=f"Methods end to end ({evaluate['split']} split)",
            ylabel="share of questions",
            rotate=30,
        )
