"""SePer and ΔSePer: the model's belief in the gold answer, with and without a retrieved context (seed-001 spec).

**requires_gold**: every number here is measured against the gold answers, so these are *labels* of retrieval
utility (for training and evaluating retrieval decisions), never runtime features; a bundle must refuse them
(:data:`REQUIRES_GOLD`).

For a question q with gold aliases A, N answers r_i are sampled from the generator at temperature T, each with a
likelihood weight ℓ_i (spec §3.3, :func:`sample_weights`). Then (spec §3.5–§3.8):

* **SePer-S** (:func:`seper_soft`) = agg_{a∈A} Σ_i ℓ_i · k(r_i, a), with k the NLI entailment probability (forward,
  or the max of both directions);
* **SePer-H** (:func:`seper_hard`) = Σ_k match(C_k, A) · p(C_k), over the clusters C_k of the samples under strict
  bidirectional entailment (:func:`greedy_clusters`, :func:`predicate_bi`), each cluster matched through its first
  member with the ``loose`` (or ``bi``) predicate;
* **ΔSePer** = SePer(q, A | d) − SePer(q, A): positive when the context d moves the belief toward the gold answer.

:func:`seper_scores` and :func:`delta_seper` run the whole pipeline over a batch with ONE sampling call to the
generator (every distinct prompt, ``n = N``) and ONE ``judge.entail`` call holding every NLI pair (sample ↔ sample
for clustering, sample ↔ alias in both directions). When some sampled answer is empty, one extra teacher-forced
``generator.score`` pass reads the log-prob of its first generated token (spec §3.2). The closed-book prompt is the
stats graph's (:data:`~workbench.uncertainty.calculators.ANSWER_SYSTEM`), the RAG prompt the same with the context
block, so only the presence of d differs between the two conditions (spec §3.1 [REC]).

Choices the spec leaves open (§10), as implemented: argmax NLI semantics (no numeric τ); the question is passed to
the judge, which prefixes it to both texts; identical answer strings are equivalent without asking the judge;
empty answers are equivalent only to each other, never match the gold (k = 0), and cost no NLI pair; the greedy
clustering assigns only unassigned answers (no legacy re-labelling). Sampling uses top-p = 1, top-k = 0, so the
generator's raw token log-probs are the sampled distribution's at T = 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import ConfigError, DataError
from workbench.data.nli_labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from workbench.uncertainty.calculators import ANSWER_SYSTEM
from workbench.uncertainty.features.base import LOGPROB_FLOOR

REQUIRES_GOLD = True
"""SePer needs the gold answers: its values are labels, never features a bundle may use at runtime."""

NORMALISATIONS: tuple[str, ...] = ("softmax_mean", "frequency", "sequence")
DIRECTIONS: tuple[str, ...] = ("max", "fwd")
ALIAS_AGGREGATIONS: tuple[str, ...] = ("max", "mean")
MATCH_PREDICATES: tuple[str, ...] = ("loose", "bi")


@dataclass(frozen=True)
class SeperSettings:
    """How SePer is estimated (defaults: the spec's reproduction choices).

    ``samples`` N answers per condition, sampled at ``temperature`` (at most ``max_new_tokens`` tokens, cut at
    ``stop``); ``normalisation`` of the weights ℓ_i (see :func:`sample_weights`); ``direction`` of the soft kernel
    (``"max"`` of both entailment directions as in the official code, ``"fwd"`` = E(r_i ⊢ a) as in the paper's
    Alg. 1); ``alias_agg`` over gold aliases (``"max"`` as in the code, ``"mean"`` = paper Eq. 10); ``match_predicate``
    matching a cluster's representative to the gold (``"loose"`` as in the code, ``"bi"`` = Definition 2);
    ``seed`` overrides the generator's sampling seed (None: the generator's).
    """

    samples: int = 10
    temperature: float = 1.0
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ("\n",)
    normalisation: str = "softmax_mean"
    direction: str = "max"
    alias_agg: str = "max"
    match_predicate: str = "loose"
    seed: int | None = None

    def validate(self) -> None:
        """Raise :class:`ConfigError` on an out-of-range number or an unknown option."""
        where = "SeperSettings"
        if self.samples < 1 or self.max_new_tokens < 1:
            raise ConfigError(
                f"samples and max_new_tokens must be >= 1, got {self.samples}, {self.max_new_tokens}", where
            )
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0 (SePer samples), got {self.temperature}", where)
        if any(not s for s in self.stop):
            raise ConfigError("stop strings must be non-empty", where)
        for name, value, allowed in (
            ("normalisation", self.normalisation, NORMALISATIONS),
            ("direction", self.direction, DIRECTIONS),
            ("alias_agg", self.alias_agg, ALIAS_AGGREGATIONS),
            ("match_predicate", self.match_predicate, MATCH_PREDICATES),
        ):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; use one of {list(allowed)}", where)


# ---------------------------------------------------------------------------------------------- pure functions
def sample_weights(logprob_lists: Sequence[Sequence[float]], rule: str = "softmax_mean") -> np.ndarray:
    """The weights ℓ_i of N sampled answers, summing to 1 (spec §3.3).

    * ``"softmax_mean"`` (official code): λ_i = (1/|r_i|) Σ_t log p(t); ℓ_i = exp(λ_i) / Σ_j exp(λ_j).
    * ``"frequency"``: ℓ_i = 1/N (the Monte-Carlo estimate of a cluster's probability).
    * ``"sequence"``: self-normalised sequence probabilities, ℓ_i = p(r_i) / Σ_j p(r_j), p(r) = Π_t p(t) (Eq. 7).

    Log-probs are floored at ln 1e-12. An answer with no tokens must come with the log-prob of its first generated
    token (spec §3.2: "if 0 tokens remain, the first token is used"); an empty list raises :class:`DataError`
    under the likelihood rules. No answers give an empty array.
    """
    if rule not in NORMALISATIONS:
        raise ValueError(f"unknown normalisation {rule!r}; use one of {list(NORMALISATIONS)}")
    n = len(logprob_lists)
    if n == 0:
        return np.zeros(0)
    if rule == "frequency":
        return np.full(n, 1.0 / n)
    scores = np.empty(n)
    for i, values in enumerate(logprob_lists):
        lp = np.maximum(np.asarray(values, dtype=np.float64), LOGPROB_FLOOR)
        if lp.size == 0:
            raise DataError(f"answer {i} has no token log-prob; pass its first generated token's", "sample_weights")
        scores[i] = lp.mean() if rule == "softmax_mean" else lp.sum()
    shifted = np.exp(scores - scores.max())
    return shifted / shifted.sum()


def seper_soft(
    weights: np.ndarray,
    fwd_entail: np.ndarray,
    bwd_entail: np.ndarray | None = None,
    direction: str = "max",
    alias_agg: str = "max",
) -> float:
    """SePer-S = agg_j Σ_i ℓ_i · k_ij (spec §3.5, Alg. 1 right column; §3.7 for the aggregation over aliases).

    ``fwd_entail[i, j]`` = P(entail) of sample r_i ⊢ alias a_j, ``bwd_entail[i, j]`` = P(entail) of a_j ⊢ r_i, both
    ``(N, |A|)``. ``direction``: ``"max"`` k_ij = max(f_ij, b_ij) (code, "setting2"), ``"fwd"`` k_ij = f_ij (paper;
    ``bwd_entail`` may then be None). ``alias_agg``: ``"max"`` over the per-alias sums S_j (code) or ``"mean"``
    (paper Eq. 10). NaN when there is no alias.
    """
    if direction not in DIRECTIONS or alias_agg not in ALIAS_AGGREGATIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, alias_agg one of {ALIAS_AGGREGATIONS}")
    w = np.asarray(weights, dtype=np.float64)
    fwd = np.asarray(fwd_entail, dtype=np.float64).reshape(len(w), -1)
    if direction == "max":
        if bwd_entail is None:
            raise ValueError("direction 'max' needs bwd_entail")
        kernel = np.maximum(fwd, np.asarray(bwd_entail, dtype=np.float64).reshape(fwd.shape))
    else:
        kernel = fwd
    if kernel.shape[1] == 0:
        return float("nan")
    per_alias = w @ kernel
    return float(per_alias.max() if alias_agg == "max" else per_alias.mean())


def _labels(p: np.ndarray) -> np.ndarray:
    return np.asarray(p, dtype=np.float64).argmax(axis=-1)


def predicate_bi(p_ab: np.ndarray, p_ba: np.ndarray) -> Any:
    """Strict equivalence a ≡ b (spec §3.4 ``bi``, Definition 2): argmax is ENTAILMENT in both directions.

    ``p_ab`` / ``p_ba`` are 3-way probability rows (contradiction, neutral, entailment) of a ⊢ b and b ⊢ a, or
    stacks of rows ``(..., 3)``; returns a bool (one pair) or a bool array. Ties go to the earlier label.
    """
    out = (_labels(p_ab) == ENTAILMENT) & (_labels(p_ba) == ENTAILMENT)
    return bool(out) if out.ndim == 0 else out


def predicate_loose(p_ab: np.ndarray, p_ba: np.ndarray) -> Any:
    """Loose equivalence (spec §3.4 ``loose``): no direction is CONTRADICTION and not both are NEUTRAL.

    True for the argmax pairs (E, E), (E, N) and (N, E); same shapes as :func:`predicate_bi`.
    """
    a, b = _labels(p_ab), _labels(p_ba)
    out = (a != CONTRADICTION) & (b != CONTRADICTION) & ~((a == NEUTRAL) & (b == NEUTRAL))
    return bool(out) if out.ndim == 0 else out


def greedy_clusters(bi_matrix: np.ndarray) -> list[int]:
    """Greedy semantic clusters C = {C_k} of N answers (spec §3.6 [CODE], Eq. 4), ids 0.. in order of appearance.

    ``bi_matrix[i, j]`` is truthy when answers i and j are equivalent (only ``i < j`` is read). Answer i, if still
    unassigned, opens a new cluster and takes every *unassigned* j > i equivalent to it — the clean variant the
    spec recommends (§10 item 7): a later representative never re-labels an assigned answer.
    """
    bi = np.asarray(bi_matrix, dtype=bool)
    n = len(bi)
    ids = [-1] * n
    next_id = 0
    for i in range(n):
        if ids[i] != -1:
            continue
        ids[i] = next_id
        for j in range(i + 1, n):
            if ids[j] == -1 and bi[i, j]:
                ids[j] = next_id
        next_id += 1
    return ids


def seper_hard(
    weights: np.ndarray, cluster_ids: Sequence[int], rep_matches: np.ndarray, alias_agg: str = "max"
) -> float:
    """SePer-H = Σ_k I(C_k, A) · p(C_k), with p(C_k) = Σ_{i ∈ C_k} ℓ_i (spec §3.6, Eqs. 6, 8, 9).

    ``rep_matches[k]`` says whether cluster k's representative matches the gold: a bool per cluster, or ``(|C|,
    |A|)`` per alias. ``alias_agg``: ``"max"`` ORs the aliases per cluster, then sums (code); ``"mean"`` averages
    the per-alias sums Σ_k I(C_k, a_j) p(C_k) (paper Eq. 10).
    """
    if alias_agg not in ALIAS_AGGREGATIONS:
        raise ValueError(f"unknown alias_agg {alias_agg!r}; use one of {list(ALIAS_AGGREGATIONS)}")
    w = np.asarray(weights, dtype=np.float64)
    ids = np.asarray(cluster_ids, dtype=int)
    matches = np.asarray(rep_matches, dtype=bool)
    n_clusters = int(ids.max()) + 1 if ids.size else 0
    if matches.ndim == 1:
        matches = matches[:, None]
    if len(matches) != n_clusters:
        raise ValueError(f"{len(matches)} cluster matches for {n_clusters} clusters")
    cluster_p = np.bincount(ids, weights=w, minlength=n_clusters) if ids.size else np.zeros(0)
    if alias_agg == "max":
        return float(cluster_p @ matches.any(axis=1))
    if matches.shape[1] == 0:
        return float("nan")
    return float((cluster_p @ matches).mean())


# ---------------------------------------------------------------------------------------------- pipeline
@dataclass
class _Job:
    """One condition to estimate: question, gold aliases, rendered prompt; then its sampled texts and log-probs."""

    question: str
    answers: list[str]
    prompt: str
    texts: list[str] | None = None
    logprobs: list[list[float]] | None = None


def seper_scores(
    examples: Sequence[dict[str, Any]],
    contexts: Sequence[str | None] | None,
    *,
    generator: Any,
    judge: Any,
    settings: SeperSettings | None = None,
) -> list[dict[str, Any]]:
    """``{"seper_h", "seper_s", "n_clusters"}`` per example, under its context (None or ``""``: closed book).

    Each example needs a ``"question"`` and a non-empty ``"answers"`` list (gold aliases; requires_gold). One
    sampling call and one NLI call for the whole batch (see the module docstring); identical prompts are sampled
    once. Values are clipped to [0, 1].
    """
    settings = settings or SeperSettings()
    settings.validate()
    ctx = _contexts(contexts, len(examples))
    jobs = [_job(ex, c, generator, settings) for ex, c in zip(examples, ctx, strict=True)]
    return _estimate(jobs, generator, judge, settings)


def delta_seper(
    examples: Sequence[dict[str, Any]],
    contexts: Sequence[str | None] | None,
    *,
    generator: Any,
    judge: Any,
    settings: SeperSettings | None = None,
) -> list[dict[str, float]]:
    """ΔSePer = SePer(q, A | d) − SePer(q, A) per example (spec §3.8, Eq. 11), for both estimators.

    Returns ``{"seper_h", "seper_s"}`` (with the context), ``{"seper_h_closed", "seper_s_closed"}`` (closed book,
    computed once per distinct question) and ``{"delta_seper_h", "delta_seper_s"}`` in [−1, 1]. Both conditions go
    through the same sampling call and the same NLI call. An example without context has Δ = 0.
    """
    settings = settings or SeperSettings()
    settings.validate()
    ctx = _contexts(contexts, len(examples))
    closed = [_job(ex, None, generator, settings) for ex in examples]
    rag = [_job(ex, c, generator, settings) for ex, c in zip(examples, ctx, strict=True)]
    results = _estimate(closed + rag, generator, judge, settings)
    out = []
    for before, after in zip(results[: len(examples)], results[len(examples) :], strict=True):
        out.append(
            {
                "seper_h": after["seper_h"],
                "seper_s": after["seper_s"],
                "seper_h_closed": before["seper_h"],
                "seper_s_closed": before["seper_s"],
                "delta_seper_h": after["seper_h"] - before["seper_h"],
                "delta_seper_s": after["seper_s"] - before["seper_s"],
            }
        )
    return out


def _contexts(contexts: Sequence[str | None] | None, n: int) -> list[str | None]:
    if contexts is None:
        return [None] * n
    ctx = list(contexts)
    if len(ctx) != n:
        raise DataError(f"{len(ctx)} contexts for {n} examples", "seper")
    return [c or None for c in ctx]


def _job(example: dict[str, Any], context: str | None, generator: Any, settings: SeperSettings) -> _Job:
    question = str(example["question"])
    answers = [str(a).strip() for a in example.get("answers") or [] if str(a).strip()]
    if not answers:
        raise DataError(f"SePer needs gold answers (requires_gold); none for question {question!r}", "seper")
    prompt = generator.build_prompt(question, context, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM)
    return _Job(question, list(dict.fromkeys(answers)), prompt.text)


def _estimate(jobs: list[_Job], generator: Any, judge: Any, settings: SeperSettings) -> list[dict[str, Any]]:
    """Sample (one call), fill empty answers' first-token log-probs, judge every pair (one call), then score."""
    if not jobs:
        return []
    _sample(jobs, generator, settings)
    premises: list[str] = []
    hypotheses: list[str] = []
    asked: list[str] = []
    index: dict[tuple[str, str, str], int] = {}

    def ask(question: str, premise: str, hypothesis: str) -> None:
        if premise != hypothesis and (question, premise, hypothesis) not in index:
            index[(question, premise, hypothesis)] = len(premises)
            premises.append(premise)
            hypotheses.append(hypothesis)
            asked.append(question)

    for job in jobs:
        unique = [t for t in dict.fromkeys(job.texts or []) if t]
        for x, a in enumerate(unique):
            for b in unique[x + 1 :]:
                ask(job.question, a, b)
                ask(job.question, b, a)
            for alias in job.answers:
                ask(job.question, a, alias)
                ask(job.question, alias, a)
    probs = np.asarray(judge.entail(premises, hypotheses, asked), dtype=np.float64) if premises else np.zeros((0, 3))
    return [_score_job(job, probs, index, settings) for job in jobs]


def _sample(jobs: list[_Job], generator: Any, settings: SeperSettings) -> None:
    """One ``generate`` call over the distinct prompts; sets each job's answer texts and token log-probs."""
    n = settings.samples
    prompts = list(dict.fromkeys(job.prompt for job in jobs))
    flat = generator.generate(
        prompts,
        n=n,
        temperature=settings.temperature,
        top_p=1.0,
        top_k=0,
        max_new_tokens=settings.max_new_tokens,
        stop=settings.stop,
        seed=settings.seed,
    )
    by_prompt = {p: flat[i * n : (i + 1) * n] for i, p in enumerate(prompts)}
    logprobs = {p: [[float(v) for v in g.logprobs] for g in group] for p, group in by_prompt.items()}
    if settings.normalisation != "frequency":
        _first_token_logprobs(by_prompt, logprobs, generator, settings)
    for job in jobs:
        job.texts = [g.text.strip() for g in by_prompt[job.prompt]]
        job.logprobs = logprobs[job.prompt]


def _first_token_logprobs(by_prompt: dict, logprobs: dict, generator: Any, settings: SeperSettings) -> None:
    """For answers with no token: the log-prob of the first generated token (EOS or the stop string), one pass.

    Scored with ``add_eos``: an EOS-ended answer scores ``"" + EOS``, a stop-ended one its first stop string; the
    first scored token is the one wanted either way (later tokens do not change its log-prob).
    """
    holes = [(p, j) for p, group in by_prompt.items() for j, g in enumerate(group) if not len(g.logprobs)]
    if not holes:
        return
    stop = settings.stop[0] if settings.stop else ""
    conts = ["" if by_prompt[p][j].finish_reason == "eos" else stop for p, j in holes]
    scored = generator.score([p for p, _ in holes], conts, add_eos=True)
    for (p, j), s in zip(holes, scored, strict=True):
        logprobs[p][j] = [float(s.logprobs[0])] if len(s.logprobs) else [0.0]


def _score_job(job: _Job, probs: np.ndarray, index: dict, settings: SeperSettings) -> dict[str, Any]:
    texts = job.texts or []
    n, n_alias = len(texts), len(job.answers)
    certain = np.array([0.0, 0.0, 1.0])

    def row(premise: str, hypothesis: str) -> np.ndarray:
        if premise == hypothesis:
            return certain  # a text entails itself
        return probs[index[(job.question, premise, hypothesis)]]

    weights = sample_weights(job.logprobs or [], settings.normalisation)
    fwd = np.zeros((n, n_alias))
    bwd = np.zeros((n, n_alias))
    for i, text in enumerate(texts):
        if text:  # an empty answer never matches the gold (spec §10 item 19)
            for j, alias in enumerate(job.answers):
                fwd[i, j] = row(text, alias)[ENTAILMENT]
                bwd[i, j] = row(alias, text)[ENTAILMENT]
    soft = seper_soft(weights, fwd, bwd, settings.direction, settings.alias_agg)

    bi = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = texts[i], texts[j]
            bi[i, j] = a == b or (bool(a) and bool(b) and predicate_bi(row(a, b), row(b, a)))
    clusters = greedy_clusters(bi)
    n_clusters = max(clusters) + 1 if clusters else 0
    predicate = predicate_loose if settings.match_predicate == "loose" else predicate_bi
    matches = np.zeros((n_clusters, n_alias), dtype=bool)
    for k in range(n_clusters):
        rep = texts[clusters.index(k)]  # the first (lowest-index) member represents the cluster
        if rep:
            for j, alias in enumerate(job.answers):
                matches[k, j] = predicate(row(rep, alias), row(alias, rep))
    hard = seper_hard(weights, clusters, matches, settings.alias_agg)
    return {"seper_h": _unit(hard), "seper_s": _unit(soft), "n_clusters": n_clusters}


def _unit(value: float) -> float:
    return float(min(max(value, 0.0), 1.0))
