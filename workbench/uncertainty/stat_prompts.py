"""The prompts the stats are made with, by group (``answer``, ``self_check``, ``paraphrase``, ``rephrase``), and their
fingerprints: a collection and a bundle record the groups their features read, and a runtime whose prompts differ in
one of them refuses the bundle."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workbench.backends.prompts import ANSWER_SYSTEM, CLOSED_BOOK_TEMPLATE, CONTEXT_TEMPLATE, format_passages
from workbench.core.hashing import stable_hash
from workbench.uncertainty.dense_stats import REPHRASE_PROMPT
from workbench.uncertainty.paraphrase_stats import PARAPHRASE_PROMPT, PARAPHRASE_REPLY_PREFIX
from workbench.uncertainty.self_check_stats import (
    CONFIDENCE_OPTIONS,
    CONFIDENCE_REPLY_PREFIX,
    PTRUE_OPTIONS_FALSE,
    PTRUE_OPTIONS_TRUE,
    SELF_CHECK_PROMPT,
)
from workbench.uncertainty.stats import DERIVED_STATS

__all__ = [
    "STAT_PROMPT_GROUPS",
    "prompt_fingerprints",
    "prompt_group_fingerprints",
    "prompt_groups",
    "prompts_fingerprint",
]

STAT_PROMPT_GROUPS: dict[str, str] = {
    "ptrue": "self_check",
    "verbalized_confidence": "self_check",
    "paraphrase_answers": "paraphrase",
    "paraphrase_nli_probs": "paraphrase",
    "dense_answers": "rephrase",
    "dense_nli_probs": "rephrase",
}
"""The stats made with a prompt of their own, by prompt group; every stat reads the ``answer`` group (the answering
system prompt and templates, the passage format)."""


def _prompt_parts() -> dict[str, list[Any]]:
    """The texts (and option tokens) of each prompt group, in a fixed order."""

    passage_sample = format_passages(["Title", "Other"], ["word " * 30, "short text"], 40)
    return {
        "answer": [ANSWER_SYSTEM, CONTEXT_TEMPLATE, CLOSED_BOOK_TEMPLATE, passage_sample],
        "self_check": [
            SELF_CHECK_PROMPT,
            CONFIDENCE_REPLY_PREFIX,
            PTRUE_OPTIONS_TRUE,
            PTRUE_OPTIONS_FALSE,
            CONFIDENCE_OPTIONS,
        ],
        "paraphrase": [PARAPHRASE_PROMPT, PARAPHRASE_REPLY_PREFIX],
        "rephrase": [REPHRASE_PROMPT],
    }


def prompt_fingerprints() -> dict[str, str]:
    """One hash per prompt group: ``answer`` (system prompt, closed-book and context templates, passage format),
    ``self_check`` (the P(True) / verbalized-confidence prompt, reply opening and option tokens), ``paraphrase``
    (Self-Detection's rewording prompt and reply opening) and ``rephrase`` (DENSE's chunk rephrasing)."""

    return {name: stable_hash(parts) for name, parts in _prompt_parts().items()}


def prompt_groups(stats: Iterable[str]) -> list[str]:
    """The prompt groups (see :func:`prompt_fingerprints`) whose texts the stats ``stats`` are made with (a loaded
    plugin's derived stat: those of the stats it is derived from)."""
    names = {n for s in stats for n in (DERIVED_STATS[s].needs if s in DERIVED_STATS else (s,))}
    return sorted({"answer"} | {STAT_PROMPT_GROUPS[s] for s in names if s in STAT_PROMPT_GROUPS})


def prompt_group_fingerprints(stats: Iterable[str]) -> dict[str, str]:
    """``{group: fingerprint}`` of the prompt groups ``stats`` read: what a collection (and a bundle, schema 1.1)
    records so that a later change to a prompt its features never read does not refuse it."""
    current = prompt_fingerprints()
    return {group: current[group] for group in prompt_groups(stats)}


def prompts_fingerprint() -> str:
    """A hash of every prompt text and format the features and answers are made with (all the groups of
    :func:`prompt_fingerprints`, in one list).

    A collection and a bundle record it, and since bundle schema 1.1 also the fingerprints of the groups their
    features read (``prompt_groups``): a runtime whose prompts differ in a group a bundle's features read would
    compute other features than its calibrators were fitted on, so it refuses the bundle. A bundle without
    ``prompt_groups`` (schema 1.0) is checked against this whole-set fingerprint.
    """

    return stable_hash([part for parts in _prompt_parts().values() for part in parts])
