"""The stage registry: what each stage is called, what it reads, which config sections its output depends on."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import ConfigError


@dataclass(frozen=True)
class StageSpec:
    """One recipe step.

    ``entry`` is ``"module:function"``, imported only when the stage runs; the function takes a
    :class:`workbench.stages.context.StageContext` and returns a flat dict of summary values. The cache key of the
    stage's output is the hash of ``name``, ``version``, the recipe seed, the config ``sections`` listed, the
    fingerprints of the assets in ``uses``, the contents of the local files those sections name
    (:mod:`workbench.stages.content_keys`), and the keys of the ``inputs`` stages. ``optional_inputs`` are read
    when the recipe runs them before this stage (a report covers whatever the run produced). ``cacheable=False``
    stages (cheap, with outputs outside the run directory) always run. ``multi_process`` stages take part in a
    multi-process launch (torchrun / srun, one process per device): ranks other than 0 run only them, writing
    nothing (:func:`workbench.stages.runner.run_recipe`); the stage itself lets only rank 0 write.

    ``resources`` are the kinds of the run's shared resources the stage uses
    (:class:`~workbench.stages.context.Resources`: ``generator``, ``controller_generator``, ``embedder``,
    ``retriever``, or a stage's own ``get`` name); before the stage runs the runner drops every other one and returns
    its memory, so memory a stage does not need is not held through it (a dropped resource is rebuilt by the next
    stage that uses it). Unrelated to ``uses`` (the assets the cache key fingerprints). ``trains``: the stage runs a
    training loop; a run holding such a stage has glibc map large allocations from its start on
    (:func:`workbench.core.memory.map_large_allocations`: a steady heap through training and the stages around it,
    a cost for sampling-heavy decoding, which runs without a training stage do not pay).

    What a stage owns of the recipe: ``settings`` is ``"module:Class"``, the dataclass of its section (keys, types,
    defaults, one-line meanings), which the recipe holds under ``section`` (the stage's name unless given; a stage
    that reads only shared or other stages' sections owns none). ``check`` is ``"module:function"``, the stage's own
    load check, ``check(config)`` run by :func:`workbench.recipe.load_recipe` when the stage is in the recipe (a
    one-line ConfigError naming a dotted key). ``splits`` are the dotted keys naming the split(s) the stage reads
    from build_data (checked at load to exist and hold questions). All are imported only when used, and a settings
    module imports no stage code at import time (:mod:`workbench.stages.settings`), so loading or printing a recipe
    stays light. Settings two stages must keep equal are declared in :data:`workbench.stages.agreements.AGREEMENTS`.
    """

    name: str
    summary: str
    entry: str
    version: int = 1
    resources: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    cacheable: bool = True
    multi_process: bool = False
    trains: bool = False
    settings: str | None = None
    section: str | None = None
    check: str | None = None
    splits: tuple[str, ...] = ()

    @property
    def section_key(self) -> str | None:
        """The recipe key of the section this stage owns (None when it owns none)."""
        return (self.section or self.name) if self.settings else None

    def settings_class(self) -> type | None:
        """Import and return the dataclass of the section this stage owns (None when it owns none)."""
        return _resolve(self.settings) if self.settings else None

    def load_check(self) -> Callable[[Any], None] | None:
        """Import and return the stage's own load check (None when it has none)."""
        return _resolve(self.check) if self.check else None

    def inputs_in(self, stages: list[str]) -> tuple[str, ...]:
        """The stages this one reads in a recipe running ``stages``: its inputs, then its optional inputs that run."""
        return (*self.inputs, *(name for name in self.optional_inputs if name in stages))

    def load(self) -> Callable[[Any], dict[str, Any]]:
        """Import and return the stage function."""
        return _resolve(self.entry)


def _resolve(reference: str) -> Any:
    """The object a ``"module:name"`` reference names (imported now)."""
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (
        StageSpec(
            "build_data",
            "build the QA splits and the passage corpus as HF datasets on disk",
            "workbench.stages.build_data:run",
            sections=("data",),
            uses=("data",),
        ),
        StageSpec(
            "answer",
            "answer a split closed-book, with retrieval and with its gold passages; score the answers; count tokens",
            "workbench.stages.answer:run",
            resources=("generator", "embedder", "retriever"),
            sections=("generator", "embedder", "retrieval", "answer"),
            inputs=("build_data",),
            version=2,  # 2: either-or questions scored by the option named; format_ok; the gold mode
            uses=("generator",),
            settings="workbench.stages.settings.answer:AnswerSection",
            splits=("answer.split",),
        ),
        StageSpec(
            "report",
            "write the Markdown + PNG report of the run to the report directory",
            "workbench.stages.report:run",
            sections=("report",),
            optional_inputs=(
                "answer",
                "collect",
                "calibrate",
                "classify",
                "fit_utility",
                "distill_data",
                "distill",
                "tune_reader",
                "study",
                "evaluate",
                "seper_eval",
                "bench_decoding",
                "transfer",
                "export",
            ),
            cacheable=False,
            check="workbench.stages.settings.report:check",
        ),
        StageSpec(
            "train_nli",
            "train the MiniLM NLI cross-encoder on pairs built from the Wikipedia corpus",
            "workbench.stages.train_nli:run",
            trains=True,
            resources=("generator", "embedder"),
            sections=("train_nli",),
            uses=("embedder",),
            settings="workbench.stages.settings.train_nli:TrainNLISection",
        ),
        StageSpec(
            "eval_nli",
            "measure every NLI judge on held-out NLI pairs and short-answer pairs",
            "workbench.stages.train_nli:evaluate",
            resources=("generator", "embedder"),
            sections=("train_nli", "nli", "generator", "embedder"),
            inputs=("train_nli",),
            uses=("generator", "embedder"),
        ),
        StageSpec(
            "report_nli",
            "write the NLI judges report (accuracy table, training record, plot)",
            "workbench.stages.report_nli:run",
            sections=("report",),
            inputs=("eval_nli",),
            cacheable=False,
        ),
        StageSpec(
            "bench_backends",
            "measure generator (shared prefill vs re-encoding), NLI and retrieval speed and quality",
            "workbench.stages.bench_backends:run",
            resources=("generator", "embedder", "retriever"),
            sections=("bench", "generator", "embedder", "nli", "retrieval"),
            inputs=("build_data",),
            uses=("generator", "embedder"),
            settings="workbench.stages.settings.bench_backends:BenchSection",
            section="bench",
            check="workbench.stages.settings.bench_backends:check",
        ),
        StageSpec(
            "report_bench",
            "write the backends benchmark report",
            "workbench.stages.report_bench:run",
            sections=("report",),
            inputs=("bench_backends",),
            cacheable=False,
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
            "bench_features",
            "measure the cost of the 18 features: shared stats graph vs one feature at a time vs bare generation",
            "workbench.stages.bench_features:run",
            resources=("generator", "embedder"),
            sections=("bench_features", "generator", "embedder", "nli"),
            inputs=("build_data",),
            version=2,
            uses=("generator", "embedder"),
            settings="workbench.stages.settings.bench_features:BenchFeaturesSection",
            check="workbench.stages.settings.bench_features:check",
            splits=("bench_features.split",),
        ),
        StageSpec(
            "report_bench_features",
            "write the feature-cost benchmark report",
            "workbench.stages.bench_features:report",
            sections=("report",),
            inputs=("bench_features",),
            cacheable=False,
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
            "distill_data",
            "record InSemRAG's controller decisions from a prompted teacher plus gold-derived labels (trace dataset)",
            "workbench.stages.distill_data:run",
            resources=("generator", "controller_generator", "embedder", "retriever"),
            # evaluate: its passage_chars / max_new_tokens shape the passages the controller is shown
            sections=("distill_data", "generator", "embedder", "evaluate"),
            inputs=("build_data",),
            uses=("generator", "embedder"),
            settings="workbench.stages.settings.distill_data:DistillDataSection",
            check="workbench.stages.settings.distill_data:check",
            splits=("distill_data.split", "distill_data.heldout_split"),
        ),
        StageSpec(
            "distill",
            "train a LoRA student controller on the distill_data traces (Lightning; resumable); score it vs its base",
            "workbench.stages.distill:run",
            trains=True,
            sections=("distill",),
            inputs=("distill_data",),
            version=2,  # 2: gradient checkpointing (distill.gradient_checkpointing) and the target-only output layer
            multi_process=True,  # every rank of a torchrun / srun launch trains; rank 0 writes
            settings="workbench.stages.settings.distill:DistillSection",
            check="workbench.stages.settings.distill:check",
        ),
        StageSpec(
            "tune_reader",
            "train a LoRA reader adapter: the answering model on training questions closed-book, with retrieval and "
            "with gold passages (Lightning; resumable); score it vs its base",
            "workbench.stages.tune_reader:run",
            trains=True,
            resources=("generator", "controller_generator", "embedder", "retriever"),
            sections=("tune_reader", "generator", "retrieval", "answer"),
            inputs=("build_data",),
            version=3,  # 3: gradient checkpointing, target-only output layer; 2: adapter.json records training_data
            uses=("generator",),
            settings="workbench.stages.settings.tune_reader:TuneReaderSection",
            check="workbench.stages.settings.tune_reader:check",
        ),
        StageSpec(
            "bench_decoding",
            "measure contrastive decoding (one batched forward per step) vs greedy vs two sequential decoders",
            "workbench.stages.bench_decoding:run",
            resources=("generator", "embedder", "retriever"),
            sections=("bench_decoding", "generator", "embedder", "retrieval"),
            inputs=("build_data",),
            uses=("generator", "embedder"),
            settings="workbench.stages.settings.bench_decoding:BenchDecodingSection",
            check="workbench.stages.settings.bench_decoding:check",
            splits=("bench_decoding.split",),
        ),
        StageSpec(
            "report_bench_decoding",
            "write the contrastive-decoding benchmark report",
            "workbench.stages.bench_decoding:report",
            sections=("report",),
            inputs=("bench_decoding",),
            cacheable=False,
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
        StageSpec(
            "bench_served",
            "collect the same features in-process and through OpenAI-compatible servers: agreement and questions/s",
            "workbench.stages.bench_served:run",
            resources=("generator", "embedder"),
            sections=("bench_served", "collect", "generator", "nli", "embedder"),
            inputs=("build_data",),
            uses=("generator", "embedder"),
            cacheable=False,
            settings="workbench.stages.settings.bench_served:BenchServedSection",
        ),
        StageSpec(
            "report_bench_served",
            "write the served-models benchmark report",
            "workbench.stages.bench_served:report",
            sections=("report",),
            inputs=("bench_served",),
            cacheable=False,
        ),
        StageSpec(
            "bench_retrievers",
            "measure the retrieval backends over one corpus: indexing docs/s, query latency at each concurrency, "
            "memory, disk, top-k agreement with bm25s; a dense scale tier of synthetic vectors",
            "workbench.stages.bench_retrievers:run",
            sections=("bench_retrievers", "data"),
            inputs=("build_data",),
            cacheable=False,
            settings="workbench.stages.settings.bench_retrievers:BenchRetrieversSection",
            check="workbench.stages.settings.bench_retrievers:check",
        ),
        StageSpec(
            "report_bench_retrievers",
            "write the retrieval-backends benchmark report",
            "workbench.stages.bench_retrievers:report",
            sections=("report",),
            inputs=("bench_retrievers",),
            cacheable=False,
        ),
        StageSpec(
            "bench_runtime",
            "measure a bundle: cold start, decision-path latency, parity with its run, serve under load",
            "workbench.stages.bench_runtime:run",
            sections=("bench_runtime", "export"),
            cacheable=False,
            settings="workbench.stages.settings.bench_runtime:BenchRuntimeSection",
            check="workbench.stages.settings.bench_runtime:check",
        ),
        StageSpec(
            "report_bench_runtime",
            "write the runtime benchmark report",
            "workbench.stages.bench_runtime:report",
            sections=("report",),
            inputs=("bench_runtime",),
            cacheable=False,
        ),
        StageSpec(
            "transfer",
            "measure the calibrators and the shipped decision in distribution vs on another template family",
            "workbench.stages.transfer:run",
            resources=("generator", "embedder", "retriever"),
            # collect, generator, nli, embedder, retrieval: the shifted questions are collected as collect does
            sections=(
                "transfer",
                "data",
                "collect",
                "calibrate",
                "classify",
                "generator",
                "nli",
                "embedder",
                "retrieval",
            ),
            inputs=("build_data", "collect", "calibrate", "classify"),
            optional_inputs=("study",),
            uses=("generator", "embedder"),
            settings="workbench.stages.settings.transfer:TransferSection",
            check="workbench.stages.settings.transfer:check",
            splits=("transfer.split",),
        ),
        StageSpec(
            "bench_gpu",
            "measure collection, serve-model and contrastive-decoding throughput and peak memory on a CUDA GPU "
            "(random-weight SmolLM2 / 1B shapes); skips without CUDA",
            "workbench.stages.bench_gpu:run",
            resources=("generator", "embedder", "retriever"),
            # generator: the tokenizer and the pairs' prompts; embedder, nli: the collection's judge; retrieval: pairs
            sections=("bench_gpu", "generator", "embedder", "nli", "retrieval"),
            inputs=("build_data",),
            uses=("generator", "embedder"),
            settings="workbench.stages.settings.bench_gpu:BenchGpuSection",
            check="workbench.stages.settings.bench_gpu:check",
            splits=("bench_gpu.split",),
        ),
        StageSpec(
            "report_bench_gpu",
            "write the GPU benchmark report (or say that it skipped, and where)",
            "workbench.stages.bench_gpu:report",
            sections=("report",),
            inputs=("bench_gpu",),
            cacheable=False,
        ),
    )
}


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
