"""The stage table: what each stage is called, what it reads, which config sections its output depends on.

One table for the recipe loader and the runner: the pipeline stages (:data:`PIPELINE`) and the benchmark stages
(:func:`workbench.bench.registry.benchmark_specs`). What a row holds: :class:`~workbench.stages.spec.StageSpec`."""

from __future__ import annotations

from workbench.bench.registry import benchmark_specs
from workbench.core.errors import ConfigError
from workbench.stages.spec import StageSpec, gather_specs

__all__ = ["PIPELINE", "STAGES", "STAGE_PACKAGES", "StageSpec", "validate_stage_list"]


STAGE_PACKAGES: tuple[str, ...] = (
    "answer",
    "report",
    "train_nli",
    "report_nli",
    "distill_data",
    "distill",
    "tune_reader",
    "transfer",
)
"""The pipeline stages that are packages (``workbench/stages/<name>/``: the spec in ``__init__.py``, ``settings.py``,
``run.py``), in the order ``workbench stages`` lists them after the rows below."""

_ROWS: tuple[StageSpec, ...] = (
    StageSpec(
        "build_data",
        "build the QA splits and the passage corpus as HF datasets on disk",
        "workbench.stages.build_data:run",
        sections=("data",),
        uses=("data",),
    ),
    StageSpec(
        "collect",
        "collect uncertainty features and closed-book correctness labels per question (resumable, shardable)",
        "workbench.stages.collect:run",
        resources=("generator", "embedder", "retriever"),
        sections=("collect", "generator", "nli", "embedder", "retrieval"),
        inputs=("build_data",),
        version=5,  # 5: stat_cost column + stat_costs.json, rag_retriever_seconds / rag_answer_seconds columns
        uses=("generator", "embedder"),
        settings="workbench.stages.settings.collect:CollectSection",
        check="workbench.stages.settings.collect:check",
        splits=("collect.splits",),
    ),
    StageSpec(
        "calibrate",
        "fit one calibrator per feature on the calibration split (out of fold there); ranking before / after",
        "workbench.stages.calibrate:run",
        # 7: each feature's calibrator chosen (auto, beta calibration) and the choice recorded; 6: the OOD flag
        # calibrated to a false-positive rate (question embeddings); 5: isotonic by scikit-learn, BCa intervals;
        # 4: the OOD profile; 3: ±inf imputed with the range
        version=7,
        resources=("embedder",),  # the OOD flag's question embeddings
        sections=("calibrate", "embedder"),
        inputs=("collect", "build_data"),  # build_data: the questions of the fit, threshold and measured splits
        uses=("embedder",),
        settings="workbench.stages.settings.calibrate:CalibrateSection",
        check="workbench.stages.settings.calibrate:check",
    ),
    StageSpec(
        "classify",
        "train LR / MLP retrieval-decision classifiers, choose τ, export ONNX, build the routing table",
        "workbench.stages.classify:run",
        version=5,  # 5: BCa intervals; 4: per-router costs from the collection's per-stat costs; the router search
        sections=("classify",),
        inputs=("calibrate", "collect"),
        settings="workbench.stages.settings.classify:ClassifySection",
        check="workbench.stages.settings.classify:check",
    ),
    StageSpec(
        "evaluate",
        "run the selected methods over a split; save every trace; compare quality, retrieval rate, cost, latency",
        "workbench.stages.evaluate:run",
        resources=("generator", "controller_generator", "embedder", "retriever"),
        sections=("evaluate", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        optional_inputs=("collect", "calibrate", "classify", "fit_utility", "study", "distill"),
        version=4,  # 2: DENSE-RAG / InSemRAG chunk by their papers, DTR searches densely, choice scoring;
        # 3: the generation cache's savings (cached_*, *_uncached) and prompt / generated tokens in the outputs;
        # 4: InSemRAG's controller options and keep_threshold; a refine round that drops every candidate keeps
        # the top k2
        uses=("generator", "embedder"),
        settings="workbench.stages.settings.evaluate:EvaluateSection",
        check="workbench.stages.settings.evaluate:check",
        splits=("evaluate.split",),
    ),
    StageSpec(
        "seper_eval",
        "rank retrievers (BM25, dense, hybrid, DTR dual path) by mean ΔSePer on a labelled split",
        "workbench.stages.seper_eval:run",
        resources=("generator", "embedder", "retriever", "seper_eval"),
        sections=("seper_eval", "generator", "embedder", "nli"),
        inputs=("build_data",),
        version=4,  # 2: DTR's dual path searches densely by default; 3: gold and random controls; 4: BCa intervals
        uses=("generator", "embedder"),
        settings="workbench.stages.settings.seper_eval:SeperEvalSection",
        splits=("seper_eval.split",),
    ),
    StageSpec(
        "fit_utility",
        "train D²-RAG's gold-free utility classifier on ΔSePer labels of (question, top-k context) pairs",
        "workbench.stages.fit_utility:run",
        resources=("generator", "embedder", "retriever"),
        version=4,  # 4: a three-class classifier by default, out-of-fold figures next to the majority baseline
        sections=("fit_utility", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        settings="workbench.stages.settings.fit_utility:FitUtilitySection",
        check="workbench.stages.settings.fit_utility:check",
        splits=("fit_utility.split",),
    ),
    StageSpec(
        "study",
        "tune the methods' thresholds and α with Optuna on val (thresholds replayed, generations cached)",
        "workbench.stages.study:run",
        resources=("generator", "embedder", "retriever"),
        version=2,  # 2: parameter importances by fANOVA (Optuna 5's default ranks a custom target's low values)
        sections=("study", "evaluate", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        optional_inputs=("collect", "calibrate", "classify", "fit_utility"),
        uses=("generator", "embedder"),
        settings="workbench.stages.settings.study:StudySection",
        check="workbench.stages.settings.study:check",
        splits=("study.split", "study.test_split"),
    ),
    StageSpec(
        "export",
        "export the run's decision logic as a versioned bundle (+ .tar.gz) for the runtime, infer and serve",
        "workbench.stages.export:run",
        sections=("export",),
        optional_inputs=("build_data", "collect", "calibrate", "classify", "fit_utility", "study", "evaluate"),
        cacheable=False,
        settings="workbench.stages.settings.export:ExportSection",
        check="workbench.stages.settings.export:check",
    ),
)
"""The stages not packaged yet, each naming its run code, settings and check as ``"module:name"``."""

PIPELINE: dict[str, StageSpec] = {
    **{spec.name: spec for spec in _ROWS},
    **gather_specs(tuple(f"workbench.stages.{name}" for name in STAGE_PACKAGES)),
}
"""The pipeline stages, in the order ``workbench stages`` lists them."""

STAGES: dict[str, StageSpec] = {**PIPELINE, **benchmark_specs()}
"""Every stage a recipe may name: the pipeline's, then the benchmarks' (:data:`workbench.bench.registry.BENCHMARKS`)."""


def validate_stage_list(stages: list[str], where: str) -> None:
    """Check that every stage exists, none repeats, and each stage's inputs run before it."""
    if not stages:
        raise ConfigError("'stages' is empty: name at least one stage", where)
    seen: set[str] = set()
    for name in stages:
        if name not in STAGES:
            raise ConfigError(f"unknown stage '{name}' (known: {', '.join(STAGES)})", where)
        if name in seen:
            raise ConfigError(f"stage '{name}' is listed twice", where)
        missing = [dep for dep in STAGES[name].inputs if dep not in seen]
        if missing:
            raise ConfigError(f"stage '{name}' needs {', '.join(missing)} to run before it", where)
        late = [dep for dep in STAGES[name].optional_inputs if dep in stages and dep not in seen]
        if late:
            raise ConfigError(f"stage '{name}' reads {', '.join(late)}: list it before '{name}'", where)
        seen.add(name)
