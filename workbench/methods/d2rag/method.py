"""D²-RAG (seed-003 spec): a calibrated-uncertainty retrieval decision, then utility-aware contrastive decoding.

**Stage 1 — retrieve?** The stats graph (:func:`~workbench.uncertainty.calculators.compute_stats`) answers the question
closed-book (greedy a_para, spec §13.6 [REC]) and produces the stats of the classifier's features; each oriented
feature (higher = more certain) is cleaned (NaN → the stored fit-split median, ±inf → the end of the stored fit-split
finite range on its side — a calibrator set without ranges, from before they were stored, uses the median for ±inf
too; a feature with neither: NaN → 0 and ±inf → ±1e10, spec §13.16), passed through its calibrator, and the
classifier turns the vector u into p = P(closed-book answer correct). Retrieve iff p < τ (the code's strict
inequality, spec §13.22). One object does the cleaning, calibration, classification and comparison:
:class:`~workbench.classify.policy.DecisionPolicy`, shared with the runtime. Without retrieval the answer is the
closed-book greedy answer (spec §13.5 [REC]) — a_para itself when the stats settings match the answering prompt
(same length budget, newline stop), so no second generation is spent.

τ > 1 (1 + ε, the threshold rule's "always retrieve") retrieves whatever p is, so Stage 1 computes no feature and
no p: only the closed-book answer a_para when the utility reads it (a learned utility, with the stats budget equal to
the answering budget), nothing otherwise; the ``features`` step says so (``stage1: "skipped"``) and ``decide``
records p as None. ``score_always`` computes every feature and p anyway (the study's τ replay reads them).

**Stage 2 — how to decode.** Top-k passages (spec §6: k = 5) are joined into the answering prompt's context block.
A utility δ of that context (spec §7.1: one δ for the whole top-k block) picks the mode (spec §7.2):

* δ < τ_neg — **noisy** (``ctx-neg-acd``): expert = closed-book prompt, amateur = prompt with the context (its
  passages labelled ``[NEG-i]`` when ``noisy_labels``, spec §7.5 / §13.14), α = α_neg;
* δ > τ_pos — **relevant** (``ctx-pos-acd``): expert = prompt with the context, amateur = closed-book prompt, α = α_pos;
* otherwise, or δ unknown — **neutral** (``ctx-normal``): plain greedy with the context.

A utility that decides the class itself — the gold-free
:class:`~workbench.methods.seper.utility_classifier.UtilityClassifier`, spec §13.1 [REC] — returns it in
``UtilityEstimate.classes``; D²-RAG then decodes with that class and cuts no δ (:func:`decoding_class`), so its own
τ_pos / τ_neg only act on δ-valued utilities (the oracle ΔSePer, the older ridge predictor).

Contrastive steps pick argmax((1+λ_t)·log p_expert − λ_t·log p_amateur), λ_t = α·w_t, w_t = H_para/(H_para + H_rag)
(spec eqs. 7, 8, 37; :mod:`workbench.decoding.contrastive`, both streams in one batched forward per step).

The utility is pluggable (:mod:`workbench.methods.seper.utility`):
:class:`~workbench.methods.seper.utility_classifier.UtilityClassifier` or
:class:`~workbench.methods.seper.utility.UtilityPredictor` (gold-free, runtime),
:class:`~workbench.methods.seper.utility.NoUtility` (gold-free default when no predictor was fitted: δ unknown, so
every retrieved context is decoded neutrally) or :class:`~workbench.methods.seper.utility.OracleUtility` (the paper's
ΔSePer, needs the gold answer; ``requires_gold`` then propagates to the method, so a bundle refuses it).

**Out of distribution.** With an ``ood_profile`` (:class:`~workbench.calibration.ood.OODProfile`, fitted by the
``calibrate`` stage on the calibrators' fit split and calibrated to a false-positive rate), Stage 1 checks each
question — its embedding's novelty (by ``tools.embedder`` when it is the profile's embedder), its form and length —
and the ``features`` step records ``ood: {flag, checks}``. ``on_ood`` (an attribute, ``"flag"`` by default; the
runtime sets it per call) says what a flag does here: ``flag`` only reports it, ``retrieve`` retrieves for a flagged
question whatever p is (the ``decide`` step then says ``forced_by_ood``). Refusing is the runtime's (docs/ood.md).

Trace steps: ``features`` → ``decide`` → (``retrieve`` → ``utility``) → ``generate``; ``trace.decoding`` is
``"contrastive"`` for the relevant / noisy modes and ``"greedy"`` otherwise. The ``features`` step's
``closed_book_is_answer`` says whether a_para is the closed-book answer the method returns without retrieval (the
stats budget equals the answering budget, newline stop): a τ replay needs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from workbench.backends.cost import generation_cost
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.classify.policy import Decision, DecisionPolicy, check_tau
from workbench.core.errors import ConfigError, DataError
from workbench.decoding.contrastive import contrastive_generate
from workbench.methods.base import Answer, Method, Passage, Tools, Trace, shared_step
from workbench.methods.common import context_block, generate_answers, prompt_for
from workbench.methods.d2rag.settings import MODES, D2RAGSettings
from workbench.methods.seper.utility import (
    UTILITY_CLASSES,
    NoUtility,
    OracleUtility,
    UtilityEstimate,
    closed_from_stats,
)
from workbench.methods.seper.utility_classifier import utility_class  # the one cut of δ into classes
from workbench.uncertainty.calculators import UNAVAILABLE_STATS, StatSettings, compute_stats
from workbench.uncertainty.features import compute_features, get_features, required_stats


def decoding_class(estimate: UtilityEstimate, i: int, tau_pos: float, tau_neg: float) -> tuple[str, str]:
    """``(class, how)`` of pair ``i``: the estimator's own class when it gives ``classes`` (``how`` ``"classifier"``),
    else δ cut at τ_pos / τ_neg by :func:`utility_class` (``how`` ``"delta"``). DataError on a class name that is not
    one of :data:`~workbench.methods.seper.utility.UTILITY_CLASSES`."""
    if estimate.classes is not None:
        klass = str(estimate.classes[i])
        if klass not in UTILITY_CLASSES:
            raise DataError(f"unknown utility class {klass!r} (known: {', '.join(UTILITY_CLASSES)})", "d2rag utility")
        return klass, "classifier"
    return utility_class(float(estimate.values[i]), tau_pos, tau_neg), "delta"


def _utility_pairs(judge: Any, context_answer: str, closed_answer: str) -> float:
    """The NLI pairs a learned utility's features judged for one question (:func:`~workbench.methods.seper.utility.
    utility_inputs`: the context against each answer; one pair when the two answers are the same, none without a
    judge)."""
    if judge is None:
        return 0.0
    return 1.0 if context_answer.strip() == closed_answer.strip() else 2.0


def negative_block(passages: Sequence[Passage], max_chars: int | None) -> str:
    """The context block with ``[NEG-i]`` labels instead of ``[i]`` (the noisy mode's amateur prompt, spec §7.5)."""
    return "\n".join(f"[NEG-{i}] {p.prompt_text(max_chars)}" for i, p in enumerate(passages, start=1))


class D2RAG(Method):
    """Dual-decision RAG: calibrated-uncertainty retrieval decision, then utility-aware contrastive decoding.

    Stage 1 is a :class:`~workbench.classify.policy.DecisionPolicy` (``policy``), or one built from its parts:
    ``calibrators`` (feature → fitted calibrator or its ``to_dict()``), ``classifier`` (anything with
    ``predict_proba(X) -> P(correct)``: logistic, MLP, ONNX), ``tau`` (retrieve iff p < τ; 1 + ε = always) and
    ``medians`` (feature → fit-split median of the raw value, imputing NaN / ±inf; a ``policy`` built from a
    :class:`~workbench.calibration.calibrator_set.CalibratorSet` with ``ranges`` imputes ±inf with the range's
    ends). ``utility`` is a :class:`~workbench.methods.seper.utility_classifier.UtilityClassifier`,
    :class:`~workbench.methods.seper.utility.UtilityPredictor`, :class:`~workbench.methods.seper.utility.OracleUtility`,
    :class:`~workbench.methods.seper.utility.NoUtility` or any object with ``requires_gold`` and ``estimate(...)``;
    ``lars_scorer`` (a fitted ``LarsLikeScorer``) is needed when ``lars`` is a feature. ``ood_profile`` (an
    :class:`~workbench.calibration.ood.OODProfile`, or None) adds the out-of-distribution check to Stage 1;
    ``on_ood`` (``flag`` or ``retrieve``) is what a flagged question does (see the module docstring).
    """

    name = "d2rag"
    on_ood: str = "flag"

    def __init__(
        self,
        tools: Tools,
        *,
        utility: Any,
        calibrators: Mapping[str, Any] | None = None,
        classifier: Any = None,
        tau: float | None = None,
        settings: D2RAGSettings | None = None,
        medians: Mapping[str, float] | None = None,
        lars_scorer: Any = None,
        policy: Any = None,
        ood_profile: Any = None,
    ) -> None:
        super().__init__(tools)

        self.settings = settings or D2RAGSettings()
        self.settings.validate()
        if policy is None:
            if classifier is None or tau is None:
                raise ConfigError("give a decision policy, or calibrators, a classifier and tau", "d2rag")
            check_tau(tau, "d2rag.tau")
            features = self.settings.features or tuple(getattr(classifier, "feature_names", ()) or ())
        else:
            features = self.settings.features or policy.features
        if not features:
            raise ConfigError(
                "no Stage-1 features: set settings.features or use a classifier with feature_names", "d2rag"
            )
        get_features(features)
        if "lars" in features and lars_scorer is None:
            raise ConfigError("feature 'lars' needs a fitted lars_scorer", "d2rag.lars_scorer")
        try:
            if policy is None:
                missing = [f for f in features if f not in (calibrators or {})]
                if missing:
                    raise ConfigError(f"no calibrator for feature(s) {missing}", "d2rag.calibrators")
                policy = DecisionPolicy(
                    CalibratorSet(tuple(features), dict(calibrators), dict(medians or {})), classifier, float(tau)
                )
            elif tuple(features) != policy.features:
                raise ConfigError(
                    f"features {list(features)} differ from the policy's {list(policy.features)}", "d2rag"
                )
        except DataError as exc:
            raise ConfigError(exc.what, "d2rag") from None
        self.policy = policy
        self.features = policy.features
        self.tau = policy.tau
        self.utility = utility
        self.lars_scorer = lars_scorer
        self.ood_profile = ood_profile
        self.budget = self.settings.max_new_tokens or tools.max_new_tokens
        self.stat_settings = self.settings.stats or StatSettings(max_new_tokens=self.budget)
        needed = required_stats(self.features)
        if "lars" in self.features:
            needed = (needed - {"lars_score"}) | {"greedy_logprobs"}
        blocked = sorted(needed & UNAVAILABLE_STATS)
        if blocked:
            raise ConfigError(f"stats {blocked} cannot be produced at inference", "d2rag.features")
        self.needed = needed | {"greedy_logprobs", "greedy_eos"}
        # a_para is the closed-book answer returned without retrieval (same budget, newline stop), and the utility's
        # closed-book answer when made with the utility's budget (tools.max_new_tokens)
        newline = tuple(self.stat_settings.stop) == ("\n",)
        self.closed_book_is_answer = newline and self.stat_settings.max_new_tokens == self.budget
        self.a_para_for_utility = newline and self.stat_settings.max_new_tokens == tools.max_new_tokens

    @property
    def evaluation_note(self) -> str | None:
        """What an evaluation summary says about this run of the method: which gold-using utility it decoded with
        (None: a gold-free one)."""
        if not getattr(self.utility, "requires_gold", False):
            return None
        if self.name == "d2rag_oracle":
            return "the paper's utility, ΔSePer computed with the gold answer (evaluation only)"
        return "oracle utility (ΔSePer with the gold answer): no fit_utility stage in this run"

    @property
    def scores_stage1(self) -> bool:
        """Whether Stage 1 computes the features and p: τ ≤ 1 (p decides), or ``score_always``. τ > 1 retrieves for
        every question whatever p is."""
        return self.tau <= 1.0 or self.settings.score_always

    def _stage1_stats(self) -> set[str]:
        """The stats Stage 1 computes when it does not score (τ > 1): a_para, only when the utility reads it as its
        closed-book answer (a learned utility, a_para made with the utility's budget and newline stop)."""

        if not self.a_para_for_utility or isinstance(self.utility, NoUtility | OracleUtility):
            return set()
        return {"greedy_logprobs", "greedy_eos"}

    @property
    def classifier(self) -> Any:
        """The decision policy's classifier."""
        return self.policy.classifier

    @property
    def requires_gold(self) -> bool:
        """True with the oracle utility (the paper's ΔSePer): never allowed in a bundle."""
        return bool(getattr(self.utility, "requires_gold", False))

    # ------------------------------------------------------------------ stage 1
    def raw_features(self, examples: Sequence[dict[str, Any]]) -> tuple[list[dict[str, float]], list[dict[str, Any]]]:
        """``(raw oriented features, stats)`` per question: one batched stats-graph pass (+ the LARS scorer)."""

        tools = self.tools
        rows = compute_stats(
            list(examples),
            self.needed,
            generator=tools.generator,
            judge=tools.judge,
            embedder=tools.embedder,
            settings=self.stat_settings,
        )
        raws = []
        for stats in rows:
            if self.lars_scorer is not None:
                stats["lars_score"] = float(self.lars_scorer.predict(stats["greedy_logprobs"]))
            raws.append(compute_features(stats, self.features, on_missing="nan"))
        return raws, rows

    # ------------------------------------------------------------------ answer
    def answer(self, example: dict[str, Any]) -> Answer:
        return self.answer_many([example])[0]

    def answer_many(self, examples: Sequence[dict[str, Any]]) -> list[Answer]:
        """Answer several questions, each stage batched over them: one stats-graph pass, one search, one utility
        estimate, one generate call per decoding mode. After the decision every batched stage charges each question
        its own cost (its query, its generations, its contrastive pair, a learned utility's answer and NLI pairs:
        :func:`~workbench.methods.base.shared_step`), so what a retrieving question costs does not depend on which
        others retrieve with it; the stats pass, which every question of the batch runs, is split evenly, and so is
        any stage whose parts do not add up (its steps say ``split: "even"``). Wall time is always an even share. A
        question that reuses an answer made earlier (a_para, the utility's with-context answer) records a generate
        step of its own at no cost. Samples are seeded per prompt, so the batch a question runs in does not change its
        features."""
        work = [_Question(ex, str(ex["question"]), Trace(self.name)) for ex in examples]
        if not work:
            return []
        self._stage1(work)
        retrieving = [w for w in work if w.decision.retrieve]
        self._retrieve(retrieving)
        with_context = [w for w in retrieving if w.passages]
        self._utility(with_context)
        self._answer_closed([w for w in work if not w.passages])
        self._answer_neutral([w for w in with_context if w.klass == "neutral"])
        for klass in ("relevant", "noisy"):
            self._answer_contrastive([w for w in with_context if w.klass == klass], klass)
        for w in with_context:
            w.trace.retrieved = True
            w.trace.passages = [p.chunk_id for p in w.passages]
        return [Answer(w.text.strip(), w.trace) for w in work]

    def _stage1(self, work: list[_Question]) -> None:
        """Features (one batched stats pass) and the decision of every question (τ > 1: see :meth:`_skip_stage1`)."""
        if not self.scores_stage1:
            self._skip_stage1(work)
            return
        tools = self.tools
        with shared_step([w.trace for w in work], "features", tools.counter) as details:
            raws, rows = self.raw_features([w.example for w in work])
            for w, raw, stats, detail in zip(work, raws, rows, details, strict=True):
                w.decision, w.stats = self.policy.decide(raw), stats
                detail.update(
                    {
                        "raw": {f: (None if not math.isfinite(raw[f]) else float(raw[f])) for f in self.features},
                        "calibrated": {f: float(v) for f, v in zip(self.features, w.decision.calibrated, strict=True)},
                        "imputed": w.decision.imputed,
                        "closed_book_answer": stats.get("greedy_text"),
                        "closed_book_is_answer": self.closed_book_is_answer,
                    }
                )
            self._check_ood(work, details)
        for w in work:
            if w.decision.imputed:
                w.trace.fallback(f"non-finite feature(s) imputed: {', '.join(w.decision.imputed)}")
            with w.trace.step("decide", tools.counter) as step:
                forced = w.ood_flag and self.on_ood == "retrieve" and not w.decision.retrieve
                w.decision.retrieve = w.decision.retrieve or forced
                step.update({"p_correct": w.decision.p_correct, "tau": self.tau, "retrieve": w.decision.retrieve})
                if forced:
                    step["forced_by_ood"] = True

    def _check_ood(self, work: list[_Question], details: list[dict[str, Any]]) -> None:
        """With an OOD profile: check the questions (one embedding batch) and record ``ood`` in each ``features``
        step."""
        if self.ood_profile is None:
            return
        embed = self.ood_profile.embedder_for(self.tools.embedder)
        results = self.ood_profile.check_questions([w.question for w in work], embed)
        for w, result, detail in zip(work, results, details, strict=True):
            w.ood_flag = result.ood
            detail["ood"] = result.to_dict()

    def _skip_stage1(self, work: list[_Question]) -> None:
        """τ > 1: every question retrieves, so no feature, calibration or classifier runs; only the stats the utility
        reads (:meth:`_stage1_stats`) are computed. The ``features`` step says what was skipped; ``decide`` records p
        as None."""

        tools, needed = self.tools, self._stage1_stats()
        empty = np.zeros(0)
        with shared_step([w.trace for w in work], "features", tools.counter) as details:
            rows: list[dict[str, Any]] = [{} for _ in work]
            if needed:
                rows = compute_stats(
                    [w.example for w in work],
                    needed,
                    generator=tools.generator,
                    judge=tools.judge,
                    embedder=tools.embedder,
                    settings=self.stat_settings,
                )
            for w, stats, detail in zip(work, rows, details, strict=True):
                w.decision, w.stats = Decision(math.nan, True, empty, empty, []), stats
                detail.update(
                    {
                        "stage1": "skipped",
                        "why": f"tau = {self.tau!r} > 1 retrieves for every question: no feature, no P(correct)",
                        "computed": "the closed-book answer the utility reads" if needed else "nothing",
                        "closed_book_answer": stats.get("greedy_text"),
                        "closed_book_is_answer": self.closed_book_is_answer,
                    }
                )
            self._check_ood(work, details)
        for w in work:
            with w.trace.step("decide", tools.counter) as step:
                step.update({"p_correct": None, "tau": self.tau, "retrieve": True})

    def _retrieve(self, work: list[_Question]) -> None:
        """Top-k passages of every retrieving question (one search call) and their context blocks."""
        if not work:
            return
        tools = self.tools
        own = [{"retrieval_calls": 1.0} for _ in work]  # one query each
        with shared_step([w.trace for w in work], "retrieve", tools.counter, own) as details:
            found = tools.search([w.question for w in work], self.settings.k)
            for w, passages, step in zip(work, found, details, strict=True):
                w.passages = list(passages)
                step["ids"] = [p.chunk_id for p in passages]
                step["scores"] = [p.score for p in passages]
        for w in work:
            if w.passages:
                w.context = context_block(w.passages, tools.passage_chars)
            else:
                w.trace.fallback("retrieval returned nothing: answered closed-book")

    def _utility(self, work: list[_Question]) -> None:
        """One utility estimate for every (question, context) pair, and each pair's decoding class."""
        if not work:
            return
        tools, s = self.tools, self.settings
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "utility", tools.counter, own) as details:
            closed = None  # a_para doubles as the utility's closed-book answer when made with the same prompt
            if self.a_para_for_utility and all("greedy_logprobs" in w.stats for w in work):
                closed = [closed_from_stats(w.stats) for w in work]
            estimate = self.utility.estimate(
                tools,
                [w.example for w in work],
                [w.context for w in work],
                [[p.score for p in w.passages] for w in work],
                closed=closed,
            )
            gens = estimate.context_generations
            if gens and closed is not None and len(gens) == len(work):
                # a learned utility given a_para: its with-context answer, and one NLI pair per distinct answer (the
                # with-context and the closed-book one against the context; the judge judges a repeated pair once)
                own[:] = [
                    {**generation_cost(g), "nli_pairs": _utility_pairs(tools.judge, g.text, c.text)}
                    for g, c in zip(gens, closed, strict=True)
                ]
            for i, (w, step) in enumerate(zip(work, details, strict=True)):
                w.estimate, w.index = estimate, i
                delta = float(estimate.values[i])
                w.klass, how = decoding_class(estimate, i, s.tau_pos, s.tau_neg)
                step.update(
                    {
                        "delta": None if math.isnan(delta) else delta,
                        "class": w.klass,
                        "mode": MODES[w.klass],
                        "source": estimate.source,
                        "class_from": how,
                    }
                )
                if how == "delta":
                    step.update({"tau_pos": s.tau_pos, "tau_neg": s.tau_neg})
                if estimate.probabilities is not None:
                    row = estimate.probabilities[i]
                    step["probabilities"] = {c: float(p) for c, p in zip(UTILITY_CLASSES, row, strict=True)}
                if estimate.features is not None:
                    step["features"] = [None if math.isnan(v) else float(v) for v in estimate.features[i]]
                if how == "delta" and math.isnan(delta) and estimate.source != "none":  # "none": neutral by design
                    w.trace.fallback("utility unknown: decoded as neutral")

    def _answer_closed(self, work: list[_Question]) -> None:
        """The closed-book greedy answer: a_para when it was produced by the same prompt and budget (no second
        generation), else one batched generation for the questions that need it."""
        same = self.stat_settings.max_new_tokens == self.budget and tuple(self.stat_settings.stop) == ("\n",)
        reuse = [w for w in work if same and "greedy_text" in w.stats]
        fresh = [w for w in work if w not in reuse]
        mode = {"class": "closed", "mode": MODES["closed"], "decoding": "greedy"}
        for w in reuse:
            with w.trace.step("generate", self.tools.counter) as step:
                step.update({**mode, "reused_stage1_answer": True})
                w.text = str(w.stats["greedy_text"])
        if fresh:
            own: list[dict[str, float] | None] = [None] * len(fresh)
            with shared_step([w.trace for w in fresh], "generate", self.tools.counter, own) as details:
                outputs = generate_answers(self.tools, [w.question for w in fresh], [None] * len(fresh), self.budget)
                own[:] = [generation_cost(out) for out in outputs]
                for w, out, step in zip(fresh, outputs, details, strict=True):
                    step.update({**mode, "reused_stage1_answer": False})
                    w.text = out.text
        for w in work:
            w.trace.decoding = "greedy"

    def _answer_neutral(self, work: list[_Question]) -> None:
        """Plain greedy with the context; the utility step's with-context answer is the same generation (reused)."""
        mode = {"class": "neutral", "mode": MODES["neutral"], "decoding": "greedy"}
        fresh = []
        for w in work:
            gens = w.estimate.context_generations
            out = gens[w.index] if gens else None
            if out is not None and getattr(out, "built", None) is not None and self.budget == self.tools.max_new_tokens:
                with w.trace.step("generate", self.tools.counter) as step:
                    step.update({**mode, "reused_utility_answer": True, "prompt_tokens": out.built.n_tokens})
                    w.text = out.text
            else:
                fresh.append(w)
        if fresh:
            own: list[dict[str, float] | None] = [None] * len(fresh)
            with shared_step([w.trace for w in fresh], "generate", self.tools.counter, own) as details:
                outputs = generate_answers(
                    self.tools, [w.question for w in fresh], [w.context for w in fresh], self.budget
                )
                own[:] = [generation_cost(out) for out in outputs]
                for w, out, step in zip(fresh, outputs, details, strict=True):
                    step.update({**mode, "reused_utility_answer": False, "prompt_tokens": out.built.n_tokens})
                    w.text = out.text

    def _answer_contrastive(self, work: list[_Question], klass: str) -> None:
        """Contrastive decoding of every question of one class (``relevant`` or ``noisy``) in one batched call."""

        if not work:
            return
        s, tools = self.settings, self.tools
        experts, amateurs = [], []
        for w in work:
            closed = prompt_for(tools, w.question, None, self.budget)
            if klass == "relevant":
                experts.append(prompt_for(tools, w.question, w.context, self.budget))
                amateurs.append(closed)
            else:
                noisy = negative_block(w.passages, tools.passage_chars) if s.noisy_labels else w.context
                experts.append(closed)
                amateurs.append(prompt_for(tools, w.question, noisy, self.budget))
        alpha, parametric = (s.alpha_pos, "amateur") if klass == "relevant" else (s.alpha_neg, "expert")
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "generate", tools.counter, own) as details:
            results = contrastive_generate(
                tools.generator,
                [e.text for e in experts],
                [a.text for a in amateurs],
                [alpha] * len(work),
                max_new_tokens=self.budget,
                stop=("\n",),
                dynamic=s.dynamic,
                parametric=parametric,
            )
            own[:] = [gen.cost() for gen in results]
            for w, expert, amateur, gen, step in zip(work, experts, amateurs, results, details, strict=True):
                step.update(
                    {
                        "class": klass,
                        "mode": MODES[klass],
                        "decoding": "contrastive",
                        "expert": "closed_book" if parametric == "expert" else "context",
                        "amateur": "context" if parametric == "expert" else "closed_book",
                        "prompt_tokens": {"expert": expert.n_tokens, "amateur": amateur.n_tokens},
                        **gen.summary(),
                    }
                )
                w.text = gen.text
                w.trace.decoding = "contrastive"


@dataclass
class _Question:
    """One question's state through a batch."""

    example: dict[str, Any]
    question: str
    trace: Trace
    decision: Any = None
    stats: dict[str, Any] = field(default_factory=dict)
    passages: list[Passage] = field(default_factory=list)
    context: str | None = None
    estimate: Any = None
    index: int = 0
    klass: str = "closed"
    text: str = ""
    ood_flag: bool = False


def with_settings(settings: D2RAGSettings, **changes: Any) -> D2RAGSettings:
    """A validated copy of ``settings`` with ``changes`` (e.g. a study trial's τ_pos / α_pos)."""
    out = replace(settings, **changes)
    out.validate()
    return out
