"""FLARE — Forward-Looking Active REtrieval augmented generation (Jiang et al., 2023, "Active Retrieval Augmented
Generation", FLARE-direct): look one sentence ahead; when any of its tokens has probability below θ, retrieve with
the sentence's confident tokens as the query and regenerate the sentence with the passages. One job per module:

* :mod:`~workbench.methods.flare.settings` — :class:`FLARESettings`, every knob and its checks;
* :mod:`~workbench.methods.flare.rule` — :func:`decide`, the one trigger rule;
* :mod:`~workbench.methods.flare.method` — :class:`FLARE`, the batched sentence loop (imported when built).

This ``__init__`` holds the settings and the spec only (docs/methods/flare.md).
"""

from __future__ import annotations

from typing import Any

from workbench.methods.flare.rule import decide
from workbench.methods.flare.settings import FLARESettings
from workbench.methods.spec import BuildRequest, MethodSpec, Tunable, lazy_exports

__all__ = ["METHOD", "FLARESettings", "decide"]

__getattr__ = lazy_exports(__name__, "method", "settings")


def _build(req: BuildRequest) -> Any:
    from workbench.methods.flare.method import FLARE

    return FLARE(req.tools, settings=req.settings())


METHOD = MethodSpec(
    "flare",
    "FLARE: look one sentence ahead; retrieve with its confident tokens and regenerate it iff a token's p < theta",
    _build,
    settings=FLARESettings,
    tunable={
        "theta": Tunable("float", 0.0, 1.0),  # not a replayable threshold: a retrieval changes later sentences
        "beta": Tunable("float", 0.0, 1.0),
        "k": Tunable("int", 1, None),
    },
    # θ over token probabilities; every trial runs the method (no replay: retrieving rewrites the rest)
    space={"theta": {"low": 0.05, "high": 0.95}},
    decide=decide,
    needs=frozenset({"logprobs", "token_ids"}),  # the trigger reads token probabilities, the query token ids
)
"""FLARE's spec."""
