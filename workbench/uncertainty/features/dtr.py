"""DTR's retrieval trigger: the normalised NLL of the greedy closed-book answer (DTR spec §3.2, eq. 3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.uncertainty.features.base import Feature, answer_logprobs, as_logprobs


@dataclass(frozen=True)
class DtrNll(Feature):
    """u = −(1/T) Σ_t log P(â_t | q, â_<t) over the greedy answer tokens WITHOUT EOS (DTR eq. 3; spec §10 item 3).

    Raw T=1 log-probs, floored at ln 1e-12 (so a zero-probability token adds a large finite NLL, spec's fix of the
    code's NLL-0 bug). DTR retrieves when u ≥ τ. An answer with no token (EOS only) gives u = +∞ (the spec's
    "retrieve"), i.e. an oriented value of −∞. ``include_eos=True`` keeps the EOS entry (sensitivity check).
    ↑ = uncertain, orientation −1.
    """

    include_eos: bool = False

    name = "dtr_nll"
    category = "probability"
    orientation = -1
    stats = ("greedy_logprobs", "greedy_eos")

    def raw(self, stats: Mapping[str, Any]) -> float:
        logprobs = self._stat(stats, "greedy_logprobs")
        if self.include_eos:
            lp = as_logprobs(logprobs)
        else:
            lp = answer_logprobs(logprobs, bool(self._stat(stats, "greedy_eos")))
        return float(-lp.mean()) if lp.size else float("inf")
