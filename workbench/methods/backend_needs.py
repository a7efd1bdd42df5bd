"""What each stat, feature, label, method and stage asks of the generator backend (capability names of
:mod:`workbench.backends.capabilities`).

The in-process backend gives everything; a served one (``generator.backend: openai``) gives what its server answers.
The stages check a recipe against these tables (:mod:`workbench.stages.backend_needs`); the runtime checks a bundle's
methods and features (:func:`check_served_methods`). Approximations (:data:`APPROXIMATE_STATS`) are computed from the
top-k log-probabilities a server returns and are recorded as such (docs/served-models.md says how far they are from
the exact values).
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.backends.capabilities import Capabilities, describe_missing, missing_capabilities
from workbench.core.errors import ConfigError

STAT_NEEDS: dict[str, frozenset[str]] = {
    "greedy_logprobs": frozenset({"logprobs"}),
    "greedy_eos": frozenset({"logprobs"}),
    "greedy_entropies": frozenset({"logprobs", "top_logprobs"}),
    "sample_logprobs": frozenset({"logprobs"}),
    "token_importance": frozenset({"logprobs", "token_ids"}),
    "token_relevance": frozenset({"logprobs", "token_ids"}),
    "attention_logdiag": frozenset({"attentions"}),
    "sample_hidden": frozenset({"hidden_states"}),
    "ptrue": frozenset({"top_logprobs", "token_prompts"}),
    "verbalized_confidence": frozenset({"top_logprobs", "token_prompts"}),
}
"""Stats that need more than generated text (every other stat needs generation only)."""

APPROXIMATE_STATS: dict[str, str] = {
    "ptrue": "option tokens outside the server's top-k log-probs get the k-th log-prob",
    "verbalized_confidence": "digit tokens outside the server's top-k log-probs get the k-th log-prob",
    "greedy_entropies": "entropy from the top-k log-probs, the rest of the mass as one outcome (a lower bound)",
}
"""Stats a served backend computes from top-k log-probabilities: approximations, exact only when the top k cover
the distribution."""

LABEL_NEEDS: dict[str, frozenset[str]] = {"seper": frozenset({"logprobs", "echo", "token_prompts"})}
"""Collection labels that need more than generation: SePer weighs sampled answers by their log-probs and scores the
first token of an empty answer by teacher forcing (echo)."""

METHOD_NEEDS: dict[str, frozenset[str]] = {
    "dtr": frozenset({"logprobs"}),
    "d2rag": frozenset({"step_logits"}),
    "d2rag_oracle": frozenset({"step_logits"}),
    "insemrag": frozenset({"top_logprobs", "token_prompts"}),
}
"""Methods that need more than generation: D²-RAG's contrastive decoding reads the per-step logits of two streams;
DTR reads the answer's log-probs; InSemRAG's prompted controller reads next-token log-probs."""

STAGE_NEEDS: dict[str, frozenset[str]] = {
    "tune_reader": frozenset({"weights"}),
    "bench_features": frozenset({"weights"}),
    "bench_decoding": frozenset({"weights", "step_logits"}),
    "bench_backends": frozenset({"weights"}),
    "distill_data": frozenset({"top_logprobs", "token_prompts"}),
}
"""Stages that train or time the generator's own weights (in-process only), and the distillation teacher (the
prompted controller reads next-token log-probs)."""


def feature_needs(name: str) -> frozenset[str]:
    """The capabilities a feature needs, from the stats it reads."""
    from workbench.uncertainty.features import FEATURES

    feature = FEATURES.get(name)
    stats = feature.stats if feature is not None else ()
    return frozenset().union(*(STAT_NEEDS.get(s, frozenset()) for s in stats))


def check_served_methods(methods: Iterable[str], features: Iterable[str], capabilities: Capabilities, url: str) -> None:
    """Refuse, in one line, the first method or feature a bundle runs that the server at ``url`` cannot serve."""
    needs = {f"method {m}": METHOD_NEEDS.get(m, frozenset()) for m in methods}
    needs.update({f"feature {f}": feature_needs(f) for f in features})
    for where, need in needs.items():
        missing = missing_capabilities(need, capabilities)
        if missing:
            raise ConfigError(
                f"{where} needs {describe_missing(missing)}, which the server at {url} does not give", "bundle"
            )
