"""InSemRAG's controller options and how a controller is built from them: which controller (``prompted`` |
``heuristic`` | ``distilled``), on which model (``controller_model``: an embedded name, a local model directory, an
explicit hub id, or a distilled LoRA adapter — an ``adapter.json`` or a directory holding one), and the prompted
controller's generation caps. A controller model is a second generator, loaded through the caller's
``controller_generator`` loader (the evaluation stage passes its resources' ``controller_generator``, cached per
run), else built like the answering generator and shared per :class:`~workbench.methods.base.Tools`; its LM calls
count in ``tools.counter``. :mod:`workbench.methods.registry` names :class:`ControllerOptions` as the options of the
InSemRAG entries and calls :func:`build_controller`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workbench.assets import EMBEDDED_ADAPTERS, EMBEDDED_GENERATORS, adapter_reference
from workbench.backends.factory import build_generator
from workbench.backends.lora import resolve_adapter_model, resolve_model
from workbench.core.bounds import NEW_TOKENS, check_int
from workbench.core.config import doc
from workbench.core.errors import AssetError, ConfigError
from workbench.methods.base import Tools

__all__ = [
    "CONTROLLERS",
    "CONTROLLER_TOKENS",
    "ControllerOptions",
    "adapter_file",
    "build_controller",
    "resolve_controller_model",
    "same_weights",
]

CONTROLLERS: tuple[str, ...] = ("prompted", "heuristic", "distilled")
"""InSemRAG's controllers: the paper's prompted LM, the model-free heuristic, and the prompted controller's code over
a distilled student (log-prob scoring)."""

CONTROLLER_TOKENS = ("enrich_tokens", "elements_tokens", "follow_up_tokens")
"""Generation caps of the prompted controller's free-text decisions (S1 enrich, S6 elements, S8 follow-up)."""


@dataclass(frozen=True)
class ControllerOptions:
    """InSemRAG's controller: which one, on which model, and the prompted controller's generation caps."""

    controller: str = doc(
        "prompted (the paper's prompted LM), heuristic (model-free) or distilled (the prompted controller over a"
        " distilled student: controller_model, else the run's distill output)",
        "prompted",
    )
    controller_model: str | None = doc(
        "the LM controller's model: an embedded name, a local model directory, a hub id, or a distilled adapter"
        " (adapter.json or its directory); null: the answering model (distilled: the run's distill output)",
        None,
    )
    enrich_tokens: int = doc("LM controller: token cap of the query enrichment (S1)", 128)
    elements_tokens: int = doc("LM controller: token cap of the key-element list (S6)", 128)
    follow_up_tokens: int = doc("LM controller: token cap of a follow-up query (S8)", 48)

    def validate(self, given: Mapping[str, Any]) -> ControllerOptions:
        """Raise a :class:`ConfigError` naming the bad key; return ``self`` with ``controller_model`` as a string.
        ``given``: the options as written (the token caps may only be set for an LM controller)."""
        if self.controller not in CONTROLLERS:
            raise ConfigError(
                f"controller must be prompted, heuristic or distilled, got {self.controller!r}", "controller"
            )
        model = self.controller_model
        if model is not None:
            if self.controller == "heuristic":
                raise ConfigError(
                    "controller_model sets an LM controller's model: the heuristic controller has none",
                    "controller_model",
                )
            _check_model_spec(model, "controller_model")
            model = str(model)
        caps = [key for key in CONTROLLER_TOKENS if key in given]
        for key in caps:
            check_int(getattr(self, key), key, key, NEW_TOKENS)
        if caps and self.controller == "heuristic":
            raise ConfigError(
                f"{', '.join(caps)} set the prompted controller's caps only (prompted or distilled)", caps[0]
            )
        return replace(self, controller_model=model)


def adapter_file(spec: str | Path) -> Path | None:
    """The adapter file a controller model reference names by path — an ``adapter.json`` or a directory holding one
    (a ``distill`` stage output): :func:`workbench.assets.adapter_reference` — else None (a model reference; an
    embedded adapter name is one, resolved like the answering model)."""

    return None if str(spec) in EMBEDDED_ADAPTERS else adapter_reference(str(spec))


def _check_model_spec(spec: Any, where: str) -> None:
    """A controller model reference that cannot work, refused before anything loads: not a non-empty string, or a
    path that does not exist (embedded names and explicit hub ids pass; they are resolved when built)."""
    if not isinstance(spec, str | Path) or not str(spec).strip():
        raise ConfigError(f"controller_model must be a model reference or an adapter path, got {spec!r}", where)

    ref = str(spec)
    path = Path(ref).expanduser()
    if ref in EMBEDDED_GENERATORS or ref in EMBEDDED_ADAPTERS or path.is_dir() or adapter_file(path) is not None:
        return
    if path.is_file():
        raise ConfigError(f"controller_model {ref!r} is a file but not an adapter.json", where)
    if ref.startswith((".", "/", "~")) or ref.count("/") != 1:
        raise ConfigError(
            f"controller_model {ref!r}: no such model directory or adapter, not an embedded name "
            f"({', '.join([*EMBEDDED_GENERATORS, *EMBEDDED_ADAPTERS])}) and not a hub id",
            where,
        )


def resolve_controller_model(spec: str | Path) -> Any:
    """The :class:`~workbench.assets.ResolvedModel` of a controller model reference: a distilled adapter
    (:func:`adapter_file`) is merged over its base by :func:`workbench.backends.lora.resolve_adapter_model`; anything
    else is resolved like the answering model (:func:`workbench.backends.lora.resolve_model`)."""

    adapter = adapter_file(spec)
    if adapter is not None:
        return resolve_adapter_model(adapter)
    return resolve_model(str(spec))


def same_weights(a: Any, b: Any) -> bool:
    """Whether two :class:`~workbench.assets.ResolvedModel` load the same weights: the same place and fingerprint
    (a local fingerprint covers file names and sizes only, so two checkpoints of one architecture share it)."""
    return str(a.path) == str(b.path) and a.fingerprint == b.fingerprint


def _shared_controller_generator(tools: Tools) -> Callable[[str], Any]:
    """A loader of controller generators built like ``tools.generator`` (device, dtype, batch size, generation cache,
    seed), counting in ``tools.counter``, one per model (whatever reference names it) and Tools; the answering
    generator itself when the reference resolves to its weights, else one sharing the answering generator's tensors
    wherever its weights equal them. What :func:`build_method` uses when its caller
    passes no loader."""

    def load(spec: str) -> Any:
        run = tools.generator
        resolved = resolve_controller_model(spec)
        own = getattr(run, "resolved", None)
        if own is not None and same_weights(own, resolved):
            return run

        def build() -> Any:
            return build_generator(
                resolved,
                device=str(getattr(run, "device", "cpu")),
                dtype=str(getattr(run, "dtype", "float32")),
                batch_size=int(getattr(run, "batch_size", 8)),
                cache=getattr(run, "cache", None) is not None,
                counter=tools.counter,
                seed=int(getattr(run, "seed", 0)),
                share_weights_with=run,
            )

        return tools.shared(f"controller_generator:{resolved.path}:{resolved.fingerprint}", build)

    return load


def build_controller(
    name: str,
    opts: ControllerOptions,
    tools: Tools,
    keep_threshold: float,
    *,
    controller_generator: Callable[[str], Any] | None = None,
    distilled_adapter: str | Path | None = None,
) -> Any:
    """InSemRAG's controller for the method ``name`` from its checked options ``opts`` (see the module doc); errors
    name ``evaluate.options.<name>.controller`` / ``.controller_model``. ``keep_threshold`` is the method's
    relevance filter of an LM controller."""
    from workbench.methods.controller import HeuristicController, PromptedLMController

    kind, spec = opts.controller, opts.controller_model
    if kind == "heuristic":
        return HeuristicController()
    option = "controller_model"
    if kind == "distilled" and spec is None:
        if distilled_adapter is None:
            raise ConfigError(
                "the distilled controller needs controller_model (an adapter.json, its directory or a model) or the "
                "run's distill stage before evaluate",
                f"evaluate.options.{name}.controller",
            )
        spec, option = str(distilled_adapter), "controller"  # the run's distill output
    generator = tools.generator
    if spec is not None:
        try:
            generator = (controller_generator or _shared_controller_generator(tools))(str(spec))
        except AssetError as exc:
            detail = f"{exc.where}: {exc.what}" if exc.where else exc.what
            raise AssetError(detail, f"evaluate.options.{name}.{option}") from None
    return PromptedLMController(
        generator,
        score_mode="logprobs" if kind == "distilled" else "auto",
        keep_threshold=keep_threshold,
        name=kind,
        **{key: getattr(opts, key) for key in CONTROLLER_TOKENS},
    )
