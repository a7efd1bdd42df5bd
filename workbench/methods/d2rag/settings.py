"""D²-RAG's settings: every knob, its bounds and checks, and the spec's recommended defaults (the docstring of
:class:`D2RAGSettings`). Light to import: the registry and the recipe loader read it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.core.bounds import NEW_TOKENS, PASSAGES, check_int, check_number
from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.uncertainty.calculators import StatSettings
from workbench.uncertainty.features import get_features

__all__ = ["ALPHA_BOUND", "MODES", "D2RAGSettings"]

ALPHA_BOUND = 100.0
"""Largest contrast strength α (the paper's are 0.1 and 1; the study searches [0, 2])."""

MODES = {"relevant": "ctx-pos-acd", "noisy": "ctx-neg-acd", "neutral": "ctx-normal", "closed": "noctx-normal"}
"""Utility class → the released code's strategy name (spec §7.2)."""


@dataclass(frozen=True)
class D2RAGSettings:
    """D²-RAG's hyper-parameters (defaults and their sources in the spec).

    * ``tau_pos`` / ``tau_neg`` — utility thresholds: relevant iff δ > τ_pos, noisy iff δ < τ_neg (§13.3 [REC]:
      0.12 / −0.10, the medians of the paper's App. C values; tune on dev). A utility classifier decides the class
      itself (its training labels were cut at the τ's it stores), so these act only on δ-valued utilities.
    * ``alpha_pos`` / ``alpha_neg`` — contrast strengths (§13.4 [REC]: 1.0 / 0.1).
    * ``dynamic`` — the entropy factor w_t of eq. 37 (False: λ_t = α).
    * ``k`` — passages retrieved (§6: top-5).
    * ``features`` — Stage-1 features in the classifier's column order (None: the classifier's ``feature_names``).
    * ``stats`` — how the stats are produced (None: :class:`StatSettings` with ``max_new_tokens`` = the answer
      budget, so the closed-book answer doubles as a_para).
    * ``max_new_tokens`` — answer budget (None: ``tools.max_new_tokens``; the paper uses 20).
    * ``noisy_labels`` — label the passages ``[NEG-i]`` in the noisy mode's amateur prompt (§7.5 [CODE], kept for
      fidelity per §13.14 [REC]; set False for the ablation).
    * ``score_always`` — compute every Stage-1 feature and p even when τ > 1 retrieves for every question (False:
      only what the utility reads; the study's τ replay sets it, since it reads p).
    """

    tau_pos: float = doc("utility threshold: a context is relevant iff its utility > tau_pos", 0.12)
    tau_neg: float = doc(
        "utility threshold: a context is noisy iff its utility < tau_neg (-1 <= tau_neg < tau_pos <= 1)", -0.10
    )
    alpha_pos: float = doc("contrast strength of relevant contexts (>= 0)", 1.0)
    alpha_neg: float = doc("contrast strength of noisy contexts (>= 0)", 0.1)
    dynamic: bool = doc("scale the contrast by the entropy factor w_t (false: constant alpha)", True)
    k: int = doc("passages retrieved", 5)
    features: tuple[str, ...] | None = doc(
        "the classifier's features in column order (set by the run: the classify stage's features)", None
    )
    stats: StatSettings | None = doc(
        "how the features' stats are produced (set by the run: the settings the features were collected with)", None
    )
    max_new_tokens: int | None = doc("answer token budget (null: evaluate.max_new_tokens)", None)
    noisy_labels: bool = doc("label passages [NEG-i] in the noisy mode's amateur prompt", True)
    score_always: bool = doc(
        "compute every Stage-1 feature and P(correct) even when tau > 1 retrieves for every question (false: only the"
        " closed-book answer the utility reads)",
        False,
    )

    def __post_init__(self) -> None:
        if isinstance(self.stats, dict):  # as a recipe or a bundle writes it
            object.__setattr__(self, "stats", StatSettings.from_dict(self.stats, "d2rag.stats"))

    def validate(self) -> None:
        """Raise :class:`ConfigError` on out-of-range or inconsistent settings."""
        where = "d2rag"
        for name in ("tau_pos", "tau_neg", "alpha_pos", "alpha_neg"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}", f"{where}.{name}")
        for name in ("tau_pos", "tau_neg"):
            check_number(getattr(self, name), name, f"{where}.{name}", -1.0, 1.0)
        if not -1.0 <= self.tau_neg < self.tau_pos <= 1.0:
            raise ConfigError(
                f"need -1 <= tau_neg < tau_pos <= 1 (ΔSePer range), got {self.tau_neg} / {self.tau_pos}", where
            )
        for name in ("alpha_pos", "alpha_neg"):
            if getattr(self, name) < 0:
                raise ConfigError(f"alphas must be >= 0, got {self.alpha_pos} / {self.alpha_neg}", f"{where}.{name}")
            check_number(getattr(self, name), name, f"{where}.{name}", 0.0, ALPHA_BOUND)
        check_int(self.k, "k", f"{where}.k", PASSAGES)
        check_int(self.max_new_tokens, "max_new_tokens", f"{where}.max_new_tokens", NEW_TOKENS, optional=True)
        if self.features is not None:
            if not self.features:
                raise ConfigError("features must not be empty", f"{where}.features")
            get_features(self.features)
        if self.stats is not None:
            if not isinstance(self.stats, StatSettings):
                raise ConfigError("stats must be a mapping of stats settings", f"{where}.stats")
            self.stats.validate()
        for name in ("dynamic", "noisy_labels", "score_always"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}", f"{where}.{name}")
