"""The 'evaluate' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import KeyFirstError, RecipeView
from workbench.stages.export.settings import check_method_params, decision_ready

if TYPE_CHECKING:
    from workbench.methods.registry import MethodConfig


def options_template(indent: int) -> str:
    """Every method's options as commented YAML (:func:`workbench.methods.registry.options_template`), what
    ``workbench config`` prints under ``evaluate.options``."""
    # the registry gathers the method plugins' entry points: loaded when the template is printed, not with the recipe
    from workbench.methods.registry import options_template as template

    return template(indent)


@dataclass
class EvaluateSection:
    """The 'evaluate' stage: run methods over a split, save their traces, compare them."""

    split: str = doc("split to answer", "test")
    limit: int | None = doc("first N questions of the split (null: all)", 10)
    methods: list[str] = doc(
        "methods to run: any of the method registry's (`workbench config evaluate` lists each with its options; "
        "docs/methods/); those that read the gold answer evaluate only and never ship",
        ["no_rag", "standard_rag", "oracle", "dtr", "dense_rag", "d2rag", "insemrag"],
    )
    options: dict[str, dict] = doc(
        "per-method settings by field name, e.g. {dtr: {tau: 1.2}, insemrag: {controller: heuristic}} "
        "(docs/methods/ lists them)",
        {},
        template=options_template,
    )
    max_new_tokens: int = doc("answer length cap of every final answer", 16)
    passage_chars: int = doc("each passage is cut to this many characters in prompts", 400)
    batch_questions: int = doc("questions handed to a method at once (methods that batch use it)", 8)
    params: list[str] = doc(
        "study parameter files (<run>/stages/study/params/<method>.json) laid over options (and D²-RAG's τ)", []
    )
    reuse_generations: bool = doc(
        "answer from the on-disk generation cache where earlier stages or runs made the same generation; false: "
        "every method generates its own text, so its LM calls, tokens and latency are its own",
        False,
    )

    # ``options`` stays the plain mapping the user wrote (``config.yaml`` and ``workbench config`` print it as given);
    # the typed configuration of each method's entry is kept beside the fields, made once and handed on from there

    def method_config(self, name: str, where: str = "evaluate.methods") -> MethodConfig:
        """Method ``name``'s :class:`~workbench.methods.registry.MethodConfig` from its ``options`` entry: configured
        (validated) the first time it is asked for — by the recipe's load check — and the same instance after that,
        until the entry changes (a config edited in code is configured again). Errors as
        :func:`~workbench.methods.registry.configure`'s; ``where`` names the list the method came from."""
        from workbench.methods.registry import configure  # the registry reads the method plugins' entry points

        given = self.options.get(name)
        made = self.__dict__.setdefault("_configured", {})
        if name not in made or made[name][0] != given:
            made[name] = (copy.deepcopy(given), configure(name, given, where))
        return made[name][1]

    def method_configs(self) -> dict[str, MethodConfig]:
        """The :class:`~workbench.methods.registry.MethodConfig` of every method of ``methods`` and of every method
        given ``options`` (:meth:`method_config`), after checking their names
        (:func:`~workbench.methods.registry.check_method_names`)."""
        from workbench.methods.registry import check_method_names

        check_method_names(self.methods, self.options)
        return {name: self.method_config(name) for name in dict.fromkeys([*self.methods, *self.options])}

    def __getstate__(self) -> dict[str, Any]:
        """The fields only: a copy or a pickle configures its methods again when asked (the configurations hold the
        method specs' functions)."""
        return {key: value for key, value in self.__dict__.items() if key != "_configured"}


def check_distilled_controller(config: RecipeView, users: list[tuple[str, str]]) -> None:
    """InSemRAG's ``controller: distilled`` without a ``controller_model`` reads the run's distill output, which only
    the evaluate stage reads (and only when distill runs before it): refuse it for each ``(method, hint)`` of ``users``
    whose options ask for it, the error saying ``hint``."""
    from workbench.methods.registry import METHOD_TABLE

    for method, hint in users:
        options = config.evaluate.options.get(method) or {}
        if not isinstance(options, dict):
            continue  # check_options names it
        default = METHOD_TABLE[method].defaults.get("controller", "prompted")
        if options.get("controller", default) == "distilled" and options.get("controller_model") is None:
            raise ConfigError(
                f"the distilled controller of {method} needs controller_model (an adapter.json, its directory or a "
                f"model) or the run's distill output: {hint}, or set controller_model",
                f"evaluate.options.{method}.controller",
            )


def check(config: RecipeView) -> None:
    """evaluate's load check: every method's options, configured once (:meth:`EvaluateSection.method_configs`), a method
    with learned parts only with the stages that make them, a distilled InSemRAG controller it can read, study
    parameter files of methods it evaluates (:func:`workbench.stages.export.settings.check_method_params`: each
    method's own rule)."""
    from workbench.bundle.learned import read_params
    from workbench.methods.registry import INSEMRAG_METHODS, METHOD_TABLE

    section = config.evaluate
    try:
        section.method_configs()  # configured once here: evaluate, the study and the export use these
    except ConfigError as exc:  # its key is e.g. evaluate.options.dtr: reported as the method options always were
        raise KeyFirstError(exc.what, exc.where or "evaluate") from None
    unready = [m for m in section.methods if not decision_ready(config, m)]
    if unready:
        stages = " and ".join(METHOD_TABLE[unready[0]].requires_stages)
        raise ConfigError(f"{unready[0]} needs the {stages} stages before evaluate", "evaluate.methods")
    if "distill" not in config.stages:
        hint = "add the distill stage before evaluate"
        check_distilled_controller(config, [(m, hint) for m in section.methods if m in INSEMRAG_METHODS])
    for path in section.params:
        try:
            params = read_params(Path(path))
        except ConfigError as exc:
            raise ConfigError(f"{exc.where}: {exc.what}", "evaluate.params") from None
        if params["method"] not in section.methods:
            raise ConfigError(
                f"{path} holds {params['method']}'s parameters, not in evaluate.methods", "evaluate.params"
            )
    check_method_params(config)
