"""What a stage function receives: the config, where to write, its inputs, shared resources, tracking."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.backends.cost import CostCounter
from workbench.backends.factory import (
    build_embedder,
    build_generator,
    build_judge,
    build_retriever,
    build_served_embedder,
    build_served_generator,
)
from workbench.backends.lora import resolve_model
from workbench.core.memory import return_freed_memory
from workbench.core.settings import RecipeView
from workbench.methods.registry import resolve_controller_model, same_weights
from workbench.stages.backend_needs import approximations, check_capabilities
from workbench.stages.spec import StageSpec


def resource_kind(name: str) -> str:
    """The kind of the resource called ``name``: what precedes its first ``:`` or ``@`` (``retriever:bm25`` and
    ``controller_generator@<path>:<fingerprint>`` are a ``retriever`` and a ``controller_generator``)."""
    return re.split("[:@]", name, maxsplit=1)[0]


class UndeclaredResourceError(RuntimeError):
    """A stage built a shared resource its :attr:`StageSpec.resources` does not name (raised only when
    :attr:`Resources.strict`, as the test suite sets it; a run logs a warning instead)."""


class Resources:
    """Heavy objects shared by the stages of one run, built on first use (generator, embedder, corpus...).

    Each is kept only while the stages that run use it: before a stage runs, the runner calls :meth:`hold` with the
    kinds the stage declares (:attr:`StageSpec.resources`), which drops every other resource and returns the freed
    memory to the system, so a stage's peak memory is its own, not the sum of everything built before it. A dropped
    resource is rebuilt on its next use (a model load: ~1-2 s for SmolLM2). A stage that builds a kind it did not
    declare gets a warning (an :class:`UndeclaredResourceError` when ``strict``, as in the test suite)."""

    strict = False

    def __init__(self, config: RecipeView, counter: CostCounter) -> None:
        self.config = config
        self.counter = counter
        self._built: dict[str, Any] = {}
        self._stage: str | None = None  # the running stage, while one runs
        self._declared: frozenset[str] | None = None  # its declared kinds (None: no stage running / not tracked)
        self.undeclared: set[str] = set()  # kinds the running stage built without declaring them

    def get(self, name: str, factory) -> Any:
        """Return the resource ``name``, building it with ``factory()`` the first time."""
        if name not in self._built:
            self._check_declared(name)
            self._built[name] = factory()
        return self._built[name]

    def held(self) -> list[str]:
        """The names of the resources built and held now."""
        return list(self._built)

    def hold(self, stage: str, kinds: tuple[str, ...] | frozenset[str]) -> list[str]:
        """Begin ``stage``, which uses the resources of ``kinds``: drop every built resource of another kind (a
        ``controller_generator`` keeps the run's ``generator``, which it may be), except a served generator (a
        remote model holds no memory here, and re-probing its server costs time), and return the freed memory to
        the system (:func:`~workbench.core.memory.return_freed_memory`). Returns the names dropped."""

        keep = set(kinds) | ({"generator"} if "controller_generator" in kinds else set())
        dropped = [
            name
            for name, value in self._built.items()
            if resource_kind(name) not in keep and not getattr(value, "served", False)
        ]
        for name in dropped:
            del self._built[name]
        self._stage, self._declared, self.undeclared = stage, frozenset(keep), set()
        if dropped:
            return_freed_memory()
        return dropped

    def finish(self) -> set[str]:
        """End the running stage: stop tracking declarations; return the kinds it built without declaring them."""
        undeclared, self.undeclared = self.undeclared, set()
        self._stage = self._declared = None
        return undeclared

    def _check_declared(self, name: str) -> None:
        """Note (or, when ``strict``, refuse) a resource the running stage builds without declaring its kind."""
        kind = resource_kind(name)
        if self._declared is None or kind in self._declared:
            return
        if self.strict:
            raise UndeclaredResourceError(
                f"stage {self._stage} builds a {kind!r} resource ({name}) but its StageSpec.resources "
                f"{tuple(sorted(self._declared))} does not name it: declare it in its spec (the stage package's "
                "__init__.py, or its row in workbench/stages/registry.py)"
            )
        self.undeclared.add(kind)

    def generator(self):
        """The run's :class:`workbench.backends.generator.Generator` (with the generation cache if enabled)."""

        def build():
            section = self.config.generator
            if section.backend == "openai":
                return self._build_served_generator()
            return self._build_generator(resolve_model(section.model), section.max_context, section.prompt_format)

        return self.get("generator", build)

    def _build_served_generator(self) -> Any:
        """The run's generator on an OpenAI-compatible server: probed once, then every part of the run that the
        server cannot serve is refused in one line (:func:`workbench.stages.backend_needs.check_capabilities`)."""

        section = self.config.generator
        generator = build_served_generator(
            base_url=str(section.base_url),
            model=section.model,
            tokenizer=section.tokenizer,
            api_key_env=section.api_key_env,
            timeout_s=section.timeout_s,
            retries=section.retries,
            max_concurrency=section.max_concurrency,
            top_logprobs=section.top_logprobs,
            max_context=section.max_context,
            batch_size=section.batch_size,
            cache=section.cache,
            counter=self.counter,
            seed=self.config.seed,
            prompt_format=section.prompt_format,
        )
        check_capabilities(self.config, generator.capabilities, str(section.base_url))
        return generator

    def served_record(self) -> dict[str, Any] | None:
        """What the run's served generator is (URL, name, capabilities, probe, the collected features it does not give
        exactly and why, how its next-token reads were answered) for the run manifest; None when the generator is
        in-process or not built yet. Never the API key."""
        generator = self._built.get("generator")
        if generator is None or not getattr(generator, "served", False):
            return None

        return {
            "base_url": generator.settings.base_url,
            "model": generator.settings.model,
            "api_key_env": generator.settings.api_key_env,
            "capabilities": generator.capabilities.to_dict(),
            "probe": generator.probe_record.to_dict() if generator.probe_record is not None else None,
            "approximate_features": approximations(self.config, generator.capabilities),
            "option_reads": dict(generator.option_reads),
            "absent_reads": dict(generator.absent_reads),
        }

    def _build_generator(
        self, resolved: Any, max_context: int | None, prompt_format: str = "auto", share_weights_with: Any = None
    ) -> Any:
        """A generator for ``resolved`` with the ``generator`` section's device, dtype, batch size and cache, the run's
        seed and counter (the run's own generator and every second one share these settings). ``prompt_format`` is
        the section's for the run's own generator; a second model keeps ``auto`` (its own declared format or
        template), since the section's format was chosen for the run's model. A second model passes the run's
        generator as ``share_weights_with``: the layers it holds alike with it (an adapter over the same base changes
        only its target layers) stay one resident copy."""

        section = self.config.generator
        return build_generator(
            resolved,
            device=section.device,
            dtype=section.dtype,
            max_context=max_context,
            batch_size=section.batch_size,
            batch_rows=section.batch_rows,
            cache=section.cache,
            counter=self.counter,
            seed=self.config.seed,
            device_key="generator.device",
            prompt_format=prompt_format,
            share_weights_with=share_weights_with,
        )

    def controller_generator(self, spec: str | Path) -> Any:
        """A second generator for InSemRAG's controller (``evaluate.options.<method>.controller_model``), cached per
        ``spec``: an embedded name, a local model directory, an explicit hub id, or a distilled adapter
        (an ``adapter.json`` or a directory holding one; merged over its base by
        :func:`workbench.backends.lora.resolve_adapter_model`). The run's own generator when ``spec`` is the
        recipe's ``generator.model`` or resolves to the same weights; otherwise one sharing the run's generator's
        tensors wherever its weights equal them (one resident copy of a common base). Built with the ``generator``
        section's device, dtype, batch size and cache and the run's seed (its own context window); it counts in the
        run's counter."""
        spec = str(spec)
        section = self.config.generator
        if spec == str(section.model):
            return self.generator()

        def build():
            resolved = resolve_controller_model(spec)
            run = self.generator()
            if same_weights(run.resolved, resolved):
                return run
            return self.get(  # one generator per model, whatever reference names it
                f"controller_generator@{resolved.path}:{resolved.fingerprint}",
                lambda: self._build_generator(resolved, None, share_weights_with=run),
            )

        return self.get(f"controller_generator:{spec}", build)

    def embedder(self):
        """The run's :class:`workbench.backends.embedder.Embedder`, on ``embedder.device`` — or, with
        ``embedder.backend: openai``, its :class:`workbench.backends.served_embedder.ServedEmbedder` (same
        interface)."""

        def build():
            section = self.config.embedder
            if section.backend == "openai":
                return build_served_embedder(
                    base_url=str(section.base_url),
                    model=section.model,
                    api_key_env=section.api_key_env,
                    timeout_s=section.timeout_s,
                    retries=section.retries,
                    max_concurrency=section.max_concurrency,
                    batch_size=section.batch_size,
                    encoding_format=section.encoding_format,
                    counter=self.counter,
                )
            return build_embedder(
                section.model,
                batch_size=section.batch_size,
                counter=self.counter,
                device=section.device,
                device_key="embedder.device",
            )

        return self.get("embedder", build)

    def served_embedder_record(self) -> dict[str, Any] | None:
        """What the run's served embedder is (URL, served name, the NAME of its key variable, dimension, probe vectors)
        for the run manifest; None when the embedder is in-process or not built yet. Never the API key."""
        embedder = self._built.get("embedder")
        if embedder is None or not getattr(embedder, "served", False):
            return None
        return {
            "base_url": embedder.settings.base_url,
            "model": embedder.settings.model,
            "api_key_env": embedder.settings.api_key_env,
            "dim": embedder.dim,
            "probe": embedder.probe_record.to_dict(),
        }

    def retriever(self, corpus):
        """The run's retriever over ``corpus`` (a Dataset with ``chunk_id`` and ``text``), as ``retrieval`` says."""

        def build():
            section = self.config.retrieval
            connection = None
            if section.backend not in ("bm25", "dense", "hybrid"):
                from workbench.backends.retrieval_engines import Connection

                connection = Connection(**asdict(section.connection))
            return build_retriever(
                section.backend, corpus, embedder=self.embedder, counter=self.counter, connection=connection
            )

        return self.get(f"retriever:{self.config.retrieval.backend}", build)

    def judge(self, kind: str | None = None, model: str | Path | None = None):
        """The NLI judge ``kind`` (default: the recipe's ``nli.kind``) on the run's shared embedder / generator;
        ``model`` is the checkpoint of ``cross_encoder`` / ``hf`` judges (default: ``nli.model``), placed on
        ``nli.device`` (the other judges run where the embedder / generator runs)."""

        kind = kind or self.config.nli.kind
        model = model if model is not None else self.config.nli.model
        return build_judge(
            kind,
            model=model,
            embedder=self.embedder,
            generator=self.generator,
            batch_size=self.config.nli.batch_size,
            counter=self.counter,
            device=self.config.nli.device,
            device_key="nli.device",
        )


@dataclass
class StageContext:
    """Everything a stage needs. ``out_dir`` is a fresh temporary directory that becomes the stage's output
    when the stage returns; ``inputs`` maps each input stage's name to its finished output directory."""

    config: RecipeView
    spec: StageSpec
    out_dir: Path
    run_dir: Path
    inputs: dict[str, Path]
    resources: Resources
    tracker: Any
    counter: CostCounter = field(default_factory=CostCounter)
    run_started: float = 0.0  # time.perf_counter() when the run began (for wall-time reporting)
    key: str = ""  # the stage's cache key
    command: str = ""  # the `workbench run ...` command line of this run (recipe as given, overrides)

    @property
    def rerun(self) -> str:
        """The command that regenerates this run's outputs: :attr:`command`, else ``workbench run <name>``."""
        return self.command or f"workbench run {self.config.name}"

    @property
    def scratch_dir(self) -> Path:
        """A persistent directory for this stage and key (``<run_dir>/scratch/<stage>-<key>``) that survives an
        interruption, so long stages can checkpoint rows and resume; it is deleted when the stage completes."""
        path = self.run_dir / "scratch" / f"{self.spec.name}-{self.key}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def log(self) -> logging.Logger:
        """The stage's logger (``workbench.stage.<name>``)."""
        return logging.getLogger(f"workbench.stage.{self.spec.name}")
