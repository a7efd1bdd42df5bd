"""What each stat, feature, label, method and stage asks of the generator backend (capability names of
:mod:`workbench.backends.capabilities`).

The in-process backend gives everything; a served one (``generator.backend: openai``) gives what its server answers.
The stages check a recipe against these tables (:mod:`workbench.stages.backend_needs`); the runtime checks a bundle's
methods and features (:func:`check_served_methods`). What a server gives other than exactly
(:func:`served_departures`: an approximation, :data:`APPROXIMATE_STATS`, or a value that may be absent,
:data:`EXACT_OR_ABSENT_STATS`) is recorded in the collection and the bundle, and a bundle refuses to score such
values with calibrators fitted on exact ones unless its recipe allowed it (:func:`check_served_departures`;
docs/served-models.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
    "greedy_entropies": "entropy from the top-k log-probs, the rest of the mass as one outcome (a lower bound)",
}
"""Stats a served backend approximates from the top-k log-probabilities (exact only when the top k cover the
distribution)."""

EXACT_OR_ABSENT_STATS: dict[str, str] = {
    "ptrue": "NaN (absent) where a true / false option token is outside the server's top-k log-probs: the server "
    "has no echo to teacher-force it",
    "verbalized_confidence": "NaN (absent) where a digit token is outside the server's top-k log-probs: the server "
    "has no echo to teacher-force it",
}
"""Stats a served backend gives exactly or not at all: an option read from the top k where it is there,
teacher-forced with echo where it is not; a server without echo leaves it NaN (never a floor)."""

LABEL_NEEDS: dict[str, frozenset[str]] = {"seper": frozenset({"logprobs", "echo", "token_prompts"})}
"""Collection labels that need more than generation: SePer weighs sampled answers by their log-probs and scores the
first token of an empty answer by teacher forcing (echo)."""


def method_needs(name: str) -> frozenset[str]:
    """What method ``name`` needs beyond generation (its spec's ``needs``: D²-RAG's contrastive decoding reads the
    per-step logits of two streams, DTR the answer's log-probs, InSemRAG's prompted controller next-token
    log-probs); nothing for a name the registry does not know."""
    from workbench.methods.registry import METHOD_TABLE

    spec = METHOD_TABLE.get(name)
    return spec.needs if spec is not None else frozenset()


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
    needs = {f"method {m}": method_needs(m) for m in methods}
    needs.update({f"feature {f}": feature_needs(f) for f in features})
    for where, need in needs.items():
        missing = missing_capabilities(need, capabilities)
        if missing:
            raise ConfigError(
                f"{where} needs {describe_missing(missing)}, which the server at {url} does not give", "bundle"
            )


def served_departures(features: Iterable[str], capabilities: Capabilities) -> dict[str, str]:
    """``{feature: why}`` for each of ``features`` whose values a server with ``capabilities`` does not give exactly as
    in-process: one that reads an approximated stat (:data:`APPROXIMATE_STATS`), or an exact-or-absent stat
    (:data:`EXACT_OR_ABSENT_STATS`) on a server without echo."""
    from workbench.uncertainty.features import FEATURES

    out: dict[str, str] = {}
    for name in features:
        feature = FEATURES.get(name)
        for stat in feature.stats if feature is not None else ():
            if stat in APPROXIMATE_STATS:
                out[name] = f"approximated: {APPROXIMATE_STATS[stat]}"
            elif stat in EXACT_OR_ABSENT_STATS and not capabilities.echo:
                out[name] = EXACT_OR_ABSENT_STATS[stat]
    return out


def check_served_departures(
    features: Iterable[str], capabilities: Capabilities, generator_record: Mapping[str, Any], url: str
) -> str | None:
    """A bundle answering on the server at ``url``: refuse, in one line, to score decision ``features`` this server
    gives other than exactly (:func:`served_departures`) with calibrators fitted on exact values — those the bundle's
    own collection did not already get the same way (``models.generator.served.approximate_features``) — unless the
    bundle's recipe allowed it (``export.allow_approximate_features``, recorded as
    ``models.generator.allow_approximate_features``). Returns the note every answer then carries (None: nothing
    departs)."""
    fitted = (generator_record.get("served") or {}).get("approximate_features") or {}
    new = {name: why for name, why in served_departures(features, capabilities).items() if name not in fitted}
    if not new:
        return None
    listed = "; ".join(f"{name}: {why}" for name, why in sorted(new.items()))
    if not generator_record.get("allow_approximate_features"):
        raise ConfigError(
            f"the bundle's calibrators were fitted on exact values of {', '.join(sorted(new))}, which the server at "
            f"{url} does not give exactly ({listed}); export the bundle with export.allow_approximate_features: true "
            "to score them anyway",
            "bundle",
        )
    return f"features scored other than the calibrators were fitted on, allowed by the bundle's recipe ({listed})"
