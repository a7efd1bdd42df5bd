"""D²-RAG at τ > 1 (the threshold rule's "always retrieve"): Stage 1 computes no feature and no P(correct), only the
closed-book answer a learned utility reads, and the trace says so; ``score_always`` computes them anyway (the study's
τ replay reads them). Also: the module docstring describes the imputation the decision policy does."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.calibration.registry import calibrator_from_dict
from workbench.classify.threshold import ABOVE_ONE
from workbench.methods.d2rag import D2RAG, D2RAGSettings
from workbench.methods.seper.utility import NoUtility, UtilityEstimate

EXAMPLE = {"question": "What is the capital of France?", "answers": ["Paris"]}
CALIBRATORS = {"confidence": {"kind": "isotonic", "version": 1, "x": [-20.0, 0.0], "y": [0.0, 1.0]}}


class _Classifier:
    feature_names = ("confidence",)

    def __init__(self) -> None:
        self.calls = 0

    def predict_proba(self, X):
        self.calls += 1
        return np.full(len(X), 0.3)


class _LearnedUtility:
    """Stands for a learned utility: reads the closed-book answer it is given."""

    requires_gold = False

    def __init__(self) -> None:
        self.closed = None

    def estimate(self, tools, examples, contexts, scores, closed=None):
        self.closed = closed
        return UtilityEstimate(np.zeros(len(examples)), "learned")


def _method(tools, utility, tau=ABOVE_ONE, **settings):
    return D2RAG(
        tools,
        calibrators={k: calibrator_from_dict(v) for k, v in CALIBRATORS.items()},
        classifier=_Classifier(),
        tau=tau,
        utility=utility,
        settings=D2RAGSettings(k=2, **settings),
    )


def test_always_retrieve_computes_only_the_closed_book_answer_the_utility_reads(tools, monkeypatch):
    import workbench.methods.d2rag.method as d2rag_method  # binds compute_stats at its top

    asked: list[set] = []
    real = d2rag_method.compute_stats

    def spy(examples, needed, **kwargs):
        asked.append(set(needed))
        return real(examples, needed, **kwargs)

    monkeypatch.setattr(d2rag_method, "compute_stats", spy)
    utility = _LearnedUtility()
    method = _method(tools, utility)
    answer = method.answer(EXAMPLE)
    features = answer.trace.find("features")
    assert asked == [{"greedy_logprobs", "greedy_eos"}]  # a_para only: no sample, no NLI, no feature stat
    assert method.classifier.calls == 0  # no calibration, no classifier
    assert features.detail["stage1"] == "skipped" and "no feature" in features.detail["why"]
    assert features.detail["computed"] == "the closed-book answer the utility reads"
    assert features.cost["lm_calls"] == 1.0 and "raw" not in features.detail
    assert answer.trace.find("decide").detail == {"p_correct": None, "tau": ABOVE_ONE, "retrieve": True}
    assert answer.trace.retrieved and utility.closed is not None  # the utility got a_para as its closed answer
    assert utility.closed[0].text == features.detail["closed_book_answer"]


def test_always_retrieve_with_a_utility_that_reads_nothing_computes_nothing(tools):
    answer = _method(tools, NoUtility()).answer(EXAMPLE)
    features = answer.trace.find("features")
    assert features.detail["computed"] == "nothing" and features.cost["lm_calls"] == 0.0
    assert answer.trace.retrieved and answer.trace.fallbacks == 0


def test_score_always_and_tau_at_most_one_compute_every_feature(tools):
    for method in (_method(tools, NoUtility(), score_always=True), _method(tools, NoUtility(), tau=1.0)):
        answer = method.answer(EXAMPLE)
        features = answer.trace.find("features").detail
        assert "stage1" not in features and set(features["raw"]) == {"confidence"}
        assert method.classifier.calls == 1 and answer.trace.find("decide").detail["p_correct"] == 0.3
        assert features["closed_book_is_answer"] is True


def test_score_always_must_be_a_boolean():
    from workbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="score_always"):
        D2RAGSettings(score_always="yes").validate()


def test_the_module_docstring_says_how_non_finite_features_are_imputed():
    import workbench.methods.d2rag.method as d2rag
    from workbench.calibration.calibrator_set import impute_value

    doc = " ".join(d2rag.__doc__.split())
    assert "±inf → the end of the stored fit-split finite range on its side" in doc
    assert "±inf → the stored fit-split median" not in doc  # the old, wrong sentence
    # what the docstring says is what the policy does
    assert impute_value(math.inf, 0.5, (0.0, 2.0)) == 2.0 and impute_value(-math.inf, 0.5, (0.0, 2.0)) == 0.0
    assert impute_value(math.nan, 0.5, (0.0, 2.0)) == 0.5 and impute_value(math.inf, 0.5, None) == 0.5
    assert impute_value(math.inf, math.nan, None) == 1e10 and impute_value(math.nan, math.nan, None) == 0.0
