"""DTR — Decide Then Retrieve (spec ``seed-002-dtr.md``): retrieve iff the closed-book answer's normalised NLL
u ≥ τ; dual-path retrieval and adaptive information selection. One job per module:

* :mod:`~workbench.methods.dtr.settings` — :class:`DTRSettings`, every knob and its checks;
* :mod:`~workbench.methods.dtr.rule` — :func:`decide`, the one retrieval rule (method, runtime, study replays);
* :mod:`~workbench.methods.dtr.method` — :class:`DTR`, the batched per-question flow (imported when built).

This ``__init__`` holds the settings and the spec only; every public name of ``method`` is importable from here on
first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.core.errors import DataError
from workbench.methods.dtr.rule import decide
from workbench.methods.dtr.settings import DTRSettings
from workbench.methods.spec import BuildRequest, MethodSpec, ReplayRule, Tunable, lazy_exports

__all__ = ["METHOD", "DTRSettings", "decide"]

__getattr__ = lazy_exports(__name__, "method", "settings")


def _build(req: BuildRequest) -> Any:
    from workbench.methods.dtr.method import DTR

    return DTR(req.tools, settings=req.settings())


def _read_replay(steps: dict[str, dict[str, Any]], trace: dict[str, Any]) -> tuple[float, str, bool]:
    """(normalised NLL, closed-book answer, retrieved) from the ``closed_book`` step of an always-retrieve trace."""
    try:
        detail = steps["closed_book"]["detail"]
        return float(detail["nll"]), str(detail["answer"]), bool(detail["retrieve"])
    except KeyError as exc:
        raise DataError(f"trace of {trace.get('method')} lacks {exc}", "replay") from None


def _decision_score(stats: Mapping[str, Any], settings: DTRSettings) -> float:
    """u, the closed-book answer's normalised NLL, from its stats (the same :class:`~workbench.uncertainty.features.
    dtr.DtrNll` the method reads, with its ``include_eos``)."""
    from workbench.uncertainty.features.dtr import DtrNll

    return DtrNll(include_eos=bool(settings.include_eos)).raw(stats)


METHOD = MethodSpec(
    "dtr",
    "DTR: retrieve iff the closed-book answer's normalised NLL >= tau; dual-path retrieval",
    _build,
    settings=DTRSettings,
    family="dtr",
    tunable={
        "tau": Tunable("float", 0.0, None, threshold=True),
        "rule": Tunable("str"),
        "k": Tunable("int", 1, None),
        "n_per_path": Tunable("int", 1, None),
    },
    # τ on a log scale over the normalised NLLs a small model produces (nats per token)
    space={"tau": {"low": 0.01, "high": 10.0, "log": True}},
    replay=ReplayRule(always=0.0, branch_steps=("closed_book",), read=_read_replay),
    decide=decide,
    decision_score=_decision_score,
    decision_stats=("greedy_logprobs", "greedy_eos"),
    needs=frozenset({"logprobs"}),  # u reads the answer's log-probs
)
"""DTR's spec."""
