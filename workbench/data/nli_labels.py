"""The one NLI label order of the workbench: every judge returns, and every stat, feature and utility reads,
probability rows in :data:`NLI_LABELS` order; the NLI pair builder labels its pairs with the same indices. No
imports, so any layer from data up can use it cheaply."""

from __future__ import annotations

NLI_LABELS: tuple[str, str, str] = ("contradiction", "neutral", "entailment")
"""Column order of every NLI probability row (``NLIJudge.entail`` and the ``*_nli_probs`` stats)."""

CONTRADICTION, NEUTRAL, ENTAILMENT = (NLI_LABELS.index(name) for name in ("contradiction", "neutral", "entailment"))
"""Column indices of the three labels in :data:`NLI_LABELS`."""
