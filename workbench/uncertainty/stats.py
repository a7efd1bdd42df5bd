"""The stat names contract between the stats graph (producers) and the uncertainty features (consumers).

A **stat** is a named intermediate quantity computed once per question by the stats graph with the generator, the
NLI judge and auxiliary scorers, batched across questions (LM-Polygraph's "stat calculators"). A **feature** is a
pure numpy function of some stats (:mod:`workbench.uncertainty.features`). This module is the single list of stat
names, their types and shapes, and what exactly each holds; a producer must follow it, and a feature may rely on it.

Conventions shared by every stat:

* Log-probabilities are natural-log, from ``log_softmax`` of the **raw** (temperature-1, unprocessed) logits,
  evaluated at the chosen token, even when the token was sampled at T > 0 (D²-RAG §3.2; DTR §3.2).
* "Greedy answer" is the Stage-1 answer a_para decoded greedily (D²-RAG §13.6 [REC]; TTLM samples it at T = 0.7).
* "Samples" are the N answers sampled at T > 0, each cut at its first EOS. The paper's N = 10 covers every feature
  (INSIDE uses 10, the others the first 5 or 4); the stats graph samples N = 5 by default (INSIDE then uses 5).
* NLI probabilities are ordered (contradiction, neutral, entailment) — :data:`NLI_ORDER` — and are the judge's
  softmax at temperature 1. Features that need a tempered NLI distribution (the Lin et al. graph methods,
  T = 3.0) re-derive it exactly from these probabilities: softmax(log p / T) = softmax(z / T) for logits z, because
  log p differs from z by a per-row constant (:func:`workbench.uncertainty.graph_math.temper_probs`).
* Arrays may be numpy arrays or nested lists; features convert with ``numpy.asarray(..., dtype=float)``.

A stat that cannot be produced is **left out** of the mapping (or set to ``None``); a feature that needs it then
raises :class:`MissingStatError` naming the stat, and the collector records the feature as missing rather than
inventing a value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import ConfigError, DataError
from workbench.data.nli_labels import NLI_LABELS

NLI_ORDER = NLI_LABELS
"""Column order of the last axis of every ``*_nli_probs`` stat (:data:`workbench.data.nli_labels.NLI_LABELS`)."""


@dataclass(frozen=True)
class StatSpec:
    """One entry of the contract: a stat's ``name``, Python/numpy ``type``, ``shape`` (symbolic) and ``doc``.

    ``producer`` names the component expected to compute it (documentation only; the stats graph owns the code).
    """

    name: str
    type: str
    shape: str
    doc: str
    producer: str


_SPECS: tuple[StatSpec, ...] = (
    # --- greedy (main) answer -----------------------------------------------------------------------------------
    StatSpec(
        "greedy_text",
        "str",
        "()",
        "The greedy Stage-1 answer a_para to the question, without context (special tokens and EOS removed).",
        "generator",
    ),
    StatSpec(
        "greedy_logprobs",
        "float",
        "[L]",
        "Raw T=1 log-probs of the greedy answer's tokens, teacher-forced or read during decoding; the EOS token is "
        "INCLUDED as the last entry when the answer ended with EOS (see greedy_eos). L may be 0.",
        "generator (Scored with add_eos when finish_reason == 'eos')",
    ),
    StatSpec(
        "greedy_eos",
        "bool",
        "()",
        "True when the last entry of greedy_logprobs is the EOS token. Features that exclude EOS (MARS, TokenSAR, "
        "DTR's NLL) drop that entry; Confidence keeps it (TTLM).",
        "generator",
    ),
    StatSpec(
        "greedy_entropies",
        "float",
        "[L]",
        "Full-vocabulary entropy (nats) of the raw next-token distribution at each greedy token, aligned with "
        "greedy_logprobs. Not consumed by the current features (kept for entropy-weighted decoding and analysis).",
        "generator",
    ),
    StatSpec(
        "token_relevance",
        "float",
        "[L']",
        "TokenSAR relevance RT_i = 1 − g(q + answer without token i, q + answer) for each greedy answer token, "
        "EOS excluded (L' = L − greedy_eos). g is a semantic-similarity scorer in [0, 1]: SAR's STS cross-encoder, "
        "offline substitute = cosine of MiniLM sentence embeddings (all-MiniLM-L6-v2) clipped to [0, 1].",
        "stats graph + embedder",
    ),
    StatSpec(
        "token_importance",
        "float",
        "[L']",
        "MARS importance in [0, 1] of each greedy answer token, EOS excluded (L' = L − greedy_eos). Published: the "
        "MARS phrase classifier. Offline substitute: "
        "workbench.uncertainty.features.probability.heuristic_token_importance (1 for content tokens, 0.1 for "
        "stop-word / punctuation-only tokens).",
        "stats graph (MARS model or heuristic)",
    ),
    StatSpec(
        "attention_logdiag",
        "float",
        "[H, m]",
        "log A^h_jj: log of the diagonal of the LAST layer's post-softmax attention, per head h, at each position "
        "j of the sequence (spec: prompt + answer, m tokens), probabilities floored at 1e-12. The stats graph "
        "passes the greedy answer tokens' own positions only (m = L' answer tokens, EOS excluded: column j is the "
        "query at answer token j attending to itself, from a teacher-forced pass over prompt + answer) and records "
        "the scope in the collection metadata (attention_logdiag_scope = 'answer_positions').",
        "stats graph (teacher-forced pass, eager attention)",
    ),
    StatSpec(
        "lars_score",
        "float",
        "()",
        "Learned confidence in (0, 1) of the greedy answer from a LARS-style scorer. Published: the LARS RoBERTa "
        "model. Offline: LarsLikeScorer.predict on the greedy answer's log-probs (EOS excluded), available only "
        "once a scorer has been fitted on collected data; absent before that.",
        "LarsLikeScorer (fitted by the workbench)",
    ),
    StatSpec(
        "ptrue",
        "float",
        "()",
        "P(True): P(true) / (P(true) + P(false)) of the reply's first token after the self-check prompt, which "
        "lists the distinct answers among the first 5 samples with their counts and the greedy answer as the "
        "proposed answer ('true'/'True' pooled against 'false'/'False'; self_check_stats.SELF_CHECK_PROMPT, "
        "ptrue_from_logprobs). Read in the same forward as verbalized_confidence.",
        "generator (next-token log-probs)",
    ),
    StatSpec(
        "verbalized_confidence",
        "float",
        "()",
        "Stated confidence in [0, 1]: the expected value / 9 of the digit 0-9 that follows the forced reply "
        "opening 'Confidence (0-9): ' after the self-check prompt (the digit distribution renormalised over the "
        "ten digits; self_check_stats.verbalized_from_logprobs). Read in the same forward as ptrue.",
        "generator (next-token log-probs)",
    ),
    # --- samples ------------------------------------------------------------------------------------------------
    StatSpec(
        "sample_texts",
        "list[str]",
        "[N]",
        "N answers sampled at T > 0 (N = 5 by default; the paper's 10 for INSIDE's K = 10), each cut at its "
        "first EOS, special tokens removed.",
        "generator",
    ),
    StatSpec(
        "sample_logprobs",
        "list[float[L_b]]",
        "[N][L_b]",
        "Raw T=1 log-probs of each sample's tokens up to and including its first EOS (when it ended with EOS). "
        "LNS(s_b) = mean of the list. An empty list means the sample has no scored token; sample-based features "
        "skip such samples.",
        "generator",
    ),
    StatSpec(
        "sample_hidden",
        "float",
        "[N, d]",
        "INSIDE embedding z_b of each sample: the hidden state of the middle layer (index floor(n_hs/2) of HF "
        "hidden_states, embeddings included) at the last decoding step kept: the step whose input is the sample's "
        "last token (the last before EOS), computed when a terminator (EOS, or a token holding the stop string) "
        "followed it; otherwise (cut by the length cap, or the stop string inside the last token) the last step "
        "computed, whose input is the token before "
        "the last, as HF generate's last hidden state — the workbench Generator's hidden_last.",
        "generator",
    ),
    StatSpec(
        "sts_samples",
        "float",
        "[N, N]",
        "SentSAR's semantic similarity g(q + s_i, q + s_j) in [0, 1] between samples (diagonal ignored). Published: "
        "STS cross-encoder (stsb-roberta-large). Offline substitute: cosine of MiniLM sentence embeddings clipped "
        "to [0, 1].",
        "stats graph + embedder",
    ),
    # --- one NLI matrix shared by every graph / clustering feature ----------------------------------------------
    StatSpec(
        "nli_texts",
        "list[str]",
        "[U]",
        "The UNIQUE answer strings among [greedy] + samples, in first-seen order (greedy first); the stats graph "
        "includes the greedy answer only when nli_index_greedy is needed too (no other feature reads it).",
        "stats graph",
    ),
    StatSpec(
        "nli_index_greedy",
        "int",
        "()",
        "Position of greedy_text in nli_texts (produced only when asked for: it puts the greedy answer in the matrix).",
        "stats graph",
    ),
    StatSpec(
        "nli_index_samples",
        "int",
        "[N]",
        "Position of each sample in nli_texts (repeated strings share a position).",
        "stats graph",
    ),
    StatSpec(
        "nli_probs",
        "float",
        "[U, U, 3]",
        "NLI probabilities (contradiction, neutral, entailment) at temperature 1 for premise nli_texts[i] -> "
        "hypothesis nli_texts[j], both prefixed with the question as 'Question: <q>\\n<text>' (backends.nli."
        "with_question, the form the workbench's cross-encoder is trained on; TTLM joins them as q + ' ' + text). "
        "The diagonal [u, u] must hold the "
        "judge's output for a text against itself, or (0, 0, 1) if not computed: it is read when two positions of "
        "a feature's answer set hold the same string. Features pick sub-matrices (samples 1-5; samples 1-4 + "
        "greedy). The stats graph sets every entry between identical strings (the diagonal) to (0, 0, 1) without "
        "a judge call and, for a symmetric judge, judges each unordered pair once.",
        "stats graph + NLI judge",
    ),
    # --- Self-Detection ----------------------------------------------------------------------------------------
    StatSpec(
        "paraphrase_answers",
        "list[str]",
        "[P]",
        "Answers to the question and its P − 1 paraphrases (P = 5: q + 4 paraphrases), one greedy answer each, "
        "the question's own first (the greedy answer). The paraphrases are sampled from the generator (one line "
        "each, capped near the question's length) and stripped of preambles, labels and quotes before they are "
        "answered (calculators.clean_paraphrase), in the same greedy call as the greedy answer; each is answered as "
        "written (TTLM's answer prompt appends '?' to it).",
        "generator",
    ),
    StatSpec(
        "paraphrase_nli_probs",
        "float",
        "[P, P, 3]",
        "NLI probabilities (contradiction, neutral, entailment) between paraphrase_answers (by position), "
        "question-prefixed as nli_probs ('Question: <q>\\n<text>'), temperature 1; identical answers get (0, 0, 1) "
        "without a judge call.",
        "stats graph + NLI judge",
    ),
    # --- DENSE -------------------------------------------------------------------------------------------------
    StatSpec(
        "dense_answers",
        "list[str]",
        "[k+1]",
        "Greedy answers under the original context (index 0) and the k single-edit rephrased contexts (index i = "
        "chunk i rephrased), ordered by context index; duplicates kept.",
        "generator",
    ),
    StatSpec(
        "dense_nli_probs",
        "float",
        "[k+1, k+1, 3]",
        "NLI probabilities (contradiction, neutral, entailment) for dense_answers[i] -> dense_answers[j]; an LLM "
        "judge's discrete verdict is passed one-hot. The diagonal is ignored (w_ii = 1).",
        "stats graph + NLI judge",
    ),
)

STATS: dict[str, StatSpec] = {spec.name: spec for spec in _SPECS}
"""Every stat name the stats graph produces, with its contract (plugin stats: :class:`DerivedStat`)."""


@dataclass(frozen=True)
class DerivedStat:
    """A stat a feature plugin brings (docs/adding-a-feature.md): derived per question from stats of :data:`STATS`.

    ``name`` must not be a stat of :data:`STATS`; ``needs`` are the :data:`STATS` names it reads; ``compute(question,
    stats)`` returns its value from the question text and a mapping holding ``needs``. The stats graph computes
    ``needs`` (batched, with the built-in stats) and then ``compute`` for each question, so the derived stat costs
    what its ``needs`` cost. ``type`` / ``shape`` / ``doc`` document it as :class:`StatSpec` does.
    """

    name: str
    needs: tuple[str, ...]
    compute: Callable[[str, Mapping[str, Any]], Any]
    doc: str = ""
    type: str = "float"
    shape: str = "()"


DERIVED_STATS: dict[str, DerivedStat] = {}
"""The derived stats of the feature plugins loaded so far, by name (filled by
:func:`workbench.uncertainty.features.plugins.load_plugin`; empty until a recipe or bundle names a plugin feature)."""


def register_derived_stat(stat: DerivedStat, where: str) -> None:
    """Add ``stat`` to :data:`DERIVED_STATS`; ConfigError at ``where`` when its name is a built-in stat, another
    plugin's stat, or one of its ``needs`` is not a stat of :data:`STATS`. Registering the same object twice is a
    no-op."""
    if not isinstance(stat, DerivedStat):
        raise ConfigError(f"a plugin stat must be a DerivedStat, got {type(stat).__name__}", where)
    if DERIVED_STATS.get(stat.name) is stat:
        return
    if stat.name in STATS or stat.name in DERIVED_STATS:
        raise ConfigError(f"stat {stat.name!r} is already defined: a plugin stat needs a new name", where)
    unknown = sorted(set(stat.needs) - set(STATS))
    if unknown or not callable(stat.compute):
        what = f"needs unknown stat(s) {unknown}" if unknown else "has no callable compute"
        raise ConfigError(f"plugin stat {stat.name!r} {what}", where)
    DERIVED_STATS[stat.name] = stat


def is_stat(name: str) -> bool:
    """Whether ``name`` is a stat of :data:`STATS` or a loaded plugin's :class:`DerivedStat`."""
    return name in STATS or name in DERIVED_STATS


class MissingStatError(DataError):
    """A feature needs a stat that the collected stats do not hold (absent or ``None``)."""


def get_stat(stats: Mapping[str, Any], name: str, feature: str) -> Any:
    """Return ``stats[name]``; raise :class:`MissingStatError` naming the stat and ``feature`` when it is absent.

    ``name`` must be a contract name (:data:`STATS`, or a loaded plugin's :data:`DERIVED_STATS`); asking for an
    unknown name is a programming error (``KeyError``).
    """
    if not is_stat(name):
        raise KeyError(f"unknown stat {name!r}; the contract is workbench.uncertainty.stats.STATS")
    value = stats.get(name)
    if value is None:
        hint = ""
        if name == "lars_score":
            hint = " (no fitted LarsLikeScorer: fit one with features.probability.LarsLikeScorer first)"
        raise MissingStatError(f"stat {name!r} is missing{hint}", f"feature {feature!r}")
    return value


def missing_stats(stats: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    """The names among ``names`` that ``stats`` lacks (absent or ``None``), in the given order."""
    return [n for n in names if stats.get(n) is None]
