"""InSemRAG (spec ``seed-004-insemrag.md``): a controller LM enriches the query, weights the retrieval channels,
refines and repairs damaged chunks and audits coverage. One job per module:

* :mod:`~workbench.methods.insemrag.settings` — :class:`InSemRAGSettings`, every knob and its checks;
* :mod:`~workbench.methods.insemrag.controller_options` — which controller, on which model, and building it;
* :mod:`~workbench.methods.insemrag.retrieval` — the hybrid retriever over InSemRAG's own views of the corpus;
* :mod:`~workbench.methods.insemrag.method` — :class:`InSemRAG`, the per-question flow (imported when built).

This ``__init__`` holds the options and the specs (``insemrag`` and ``insemrag_distilled``, whose
controller defaults to the distilled one); every public name of
``settings`` (:class:`InSemRAGSettings`), ``method`` and ``retrieval`` is importable from here on first use.
"""

from __future__ import annotations

from typing import Any

from workbench.methods.insemrag import pipeline
from workbench.methods.insemrag.controller_options import ControllerOptions, build_controller
from workbench.methods.spec import BuildRequest, MethodHooks, MethodSpec, Tunable, lazy_exports

__all__ = ["METHODS", "ControllerOptions"]

__getattr__ = lazy_exports(__name__, "settings", "method", "retrieval")


def _build(req: BuildRequest) -> Any:
    from workbench.methods.insemrag.method import InSemRAG

    settings = req.settings()
    controller = build_controller(
        req.name,
        req.options,
        req.tools,
        settings.keep_threshold,
        controller_generator=req.controller_generator,
        distilled_adapter=req.distilled_adapter,
    )
    method = InSemRAG(req.tools, controller, settings)
    method.name = req.name
    return method


def _record_decision(method: Any, question: str, contexts: Any) -> dict[str, Any]:
    """The controller's decisions on a logged question (elements, round 1's query views and channel weights)."""
    return method.question_decisions(question)


def _settings_class() -> type:
    # the settings read the controller's channel names, whose package loads the controllers: loaded when needed
    from workbench.methods.insemrag.settings import InSemRAGSettings

    return InSemRAGSettings


_COMMON: dict[str, Any] = {
    "settings": _settings_class,
    "options": ControllerOptions,
    "family": "insemrag",
    "record_decision": _record_decision,
}

METHODS = (
    MethodSpec(
        "insemrag",
        "InSemRAG: a controller enriches, weights, refines, repairs and audits the retrieval",
        _build,
        # τ / γ: completeness and coverage thresholds; keep_threshold: the controller's relevance filter
        # (keep a candidate iff p(Yes) >= it)
        tunable={
            "tau": Tunable("float", 0.0, 1.0),
            "gamma": Tunable("float", 0.0, 1.0),
            "keep_threshold": Tunable("float", 0.0, 1.0),
        },
        needs=frozenset({"top_logprobs", "token_prompts"}),  # the prompted controller reads next-token log-probs
        hooks=MethodHooks(check_study=pipeline.check_study),
        **_COMMON,
    ),
    MethodSpec(
        "insemrag_distilled",
        "InSemRAG with the distilled controller by default",
        _build,
        defaults={"controller": "distilled"},
        **_COMMON,
    ),
)
"""InSemRAG's two variants: same settings and options, different default ``controller``, so one evaluation puts the
prompted and the distilled controller side by side on the same questions."""
