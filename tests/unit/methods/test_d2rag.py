"""D²-RAG on the tiny model: the retrieval decision, the decoding mode per utility class, the gold-free utility
predictor and its features, and settings validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from workbench.calibration.registry import calibrator_from_dict
from workbench.core.errors import ConfigError, DataError
from workbench.methods.baselines import NoRAG, StandardRAG
from workbench.methods.d2rag import D2RAG, D2RAGSettings, utility_class
from workbench.methods.seper.utility import (
    UTILITY_FEATURES,
    ClosedAnswer,
    OracleUtility,
    UtilityEstimate,
    UtilityPredictor,
    utility_features,
    utility_inputs,
)

EXAMPLE = {"question": "What is the capital of France?", "answers": ["Paris"]}
# identity-like isotonic map for the confidence feature (mean log-prob in [-20, 0] → [0, 1])
CALIBRATORS = {"confidence": {"kind": "isotonic", "version": 1, "x": [-20.0, 0.0], "y": [0.0, 1.0]}}


@pytest.fixture(scope="module")
def peaked_generator(tmp_path_factory):
    """A tiny random Llama with large initial weights, whose greedy answers are varied, non-empty text (the shared
    tiny model repeats one special token, so every answer would be empty and text comparisons vacuous)."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-peaked-d2rag")
    build_tiny_llama(path, seed=1, max_positions=4096, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=16)


@pytest.fixture
def tools(tools, peaked_generator):
    """The shared method tools (corpus, BM25, rule judge, fresh counter) around the peaked generator."""
    peaked_generator.counter = tools.counter
    tools.generator = peaked_generator
    return tools


class FixedClassifier:
    """P(correct) fixed; records the feature rows it was given."""

    feature_names = ("confidence",)

    def __init__(self, p: float) -> None:
        self.p, self.seen = p, []

    def predict_proba(self, X):
        self.seen.append(np.asarray(X))
        return np.full(len(X), self.p)


class FixedUtility:
    """δ fixed, no model call."""

    requires_gold = False

    def __init__(self, delta: float) -> None:
        self.delta = delta

    def estimate(self, tools, examples, contexts, scores, closed=None):
        return UtilityEstimate(np.full(len(examples), self.delta), "fixed")


def make(tools, p=0.2, delta=0.0, tau=0.5, **settings):
    return D2RAG(
        tools,
        calibrators={k: calibrator_from_dict(v) for k, v in CALIBRATORS.items()},
        classifier=FixedClassifier(p),
        tau=tau,
        utility=delta if not isinstance(delta, float | int) else FixedUtility(float(delta)),
        settings=D2RAGSettings(k=2, **settings),
    )


# ------------------------------------------------------------------------------------------ stage 1
def test_confident_question_is_answered_closed_book_with_one_lm_call(tools):
    method = make(tools, p=0.9, tau=0.5)
    answer = method.answer(EXAMPLE)
    trace = answer.trace
    assert [s.name for s in trace.steps] == ["features", "decide", "generate"]
    totals = trace.totals()
    assert totals["lm_calls"] == 1 and totals["retrieval_calls"] == 0
    assert not trace.retrieved and trace.decoding == "greedy"
    decide = trace.find("decide").detail
    assert decide == {"p_correct": 0.9, "tau": 0.5, "retrieve": False}
    generate = trace.find("generate").detail
    assert generate["mode"] == "noctx-normal" and generate["reused_stage1_answer"]
    assert answer.text == NoRAG(tools).answer(EXAMPLE).text
    features = trace.find("features").detail
    u = method.classifier.seen[0]
    assert u.shape == (1, 1) and 0.0 <= u[0, 0] <= 1.0
    assert features["calibrated"]["confidence"] == pytest.approx(u[0, 0])
    assert features["calibrated"]["confidence"] == pytest.approx(1 + features["raw"]["confidence"] / 20)


def test_threshold_is_strict(tools):
    assert not make(tools, p=0.5, tau=0.5).answer(EXAMPLE).trace.retrieved  # p >= τ: no retrieval
    assert make(tools, p=0.49, tau=0.5).answer(EXAMPLE).trace.retrieved


# ------------------------------------------------------------------------------------------ stage 2
@pytest.mark.parametrize(
    ("delta", "klass", "mode", "decoding"),
    [
        (0.5, "relevant", "ctx-pos-acd", "contrastive"),
        (-0.5, "noisy", "ctx-neg-acd", "contrastive"),
        (0.0, "neutral", "ctx-normal", "greedy"),
    ],
)
def test_decoding_mode_follows_the_utility_class(tools, delta, klass, mode, decoding):
    answer = make(tools, p=0.1, delta=delta).answer(EXAMPLE)
    trace = answer.trace
    assert [s.name for s in trace.steps] == ["features", "decide", "retrieve", "utility", "generate"]
    assert trace.retrieved and trace.decoding == decoding
    utility = trace.find("utility").detail
    assert utility["delta"] == delta and utility["class"] == klass and utility["mode"] == mode
    generate = trace.find("generate").detail
    assert generate["mode"] == mode and generate["decoding"] == decoding
    assert len(trace.find("retrieve").detail["ids"]) == 2
    totals = trace.totals()
    # LM calls count prompts: the stage-1 answer, then one answer (contrastive decoding runs two prompts, the
    # with-context and the closed-book stream, in one batched forward)
    assert totals["lm_calls"] == (3 if decoding == "contrastive" else 2)
    if klass == "relevant":
        assert generate["expert"] == "context" and generate["amateur"] == "closed_book"
        assert generate["alpha"] == 1.0 and generate["parametric"] == "amateur"
    if klass == "noisy":
        assert generate["expert"] == "closed_book" and generate["amateur"] == "context"
        assert generate["alpha"] == 0.1 and generate["parametric"] == "expert"
    if decoding == "contrastive":
        assert len(generate["lambdas"]) == generate["steps"] >= 1
        assert all(0 <= w <= 1 for w in generate["weights"])
        assert totals["decoded_tokens"] >= 2 * generate["steps"]
    else:
        assert answer.text == StandardRAG(tools, k=2).answer(EXAMPLE).text


def test_alpha_zero_reduces_to_the_plain_answers(tools):
    relevant = make(tools, p=0.1, delta=0.5, alpha_pos=0.0).answer(EXAMPLE)
    assert relevant.text == StandardRAG(tools, k=2).answer(EXAMPLE).text
    noisy = make(tools, p=0.1, delta=-0.5, alpha_neg=0.0).answer(EXAMPLE)
    assert noisy.text == NoRAG(tools).answer(EXAMPLE).text
    assert relevant.text and noisy.text and relevant.text != noisy.text
    contrasted = make(tools, p=0.1, delta=0.5, alpha_pos=1.0).answer(EXAMPLE)
    assert contrasted.text != relevant.text  # with this model the contrast changes the answer


def test_unknown_utility_decodes_neutral_with_a_fallback(tools):
    stored_only = OracleUtility(compute=False)
    answer = make(tools, p=0.1, delta=stored_only).answer(EXAMPLE)  # no delta_seper in the example
    assert answer.trace.find("utility").detail["class"] == "neutral" and answer.trace.fallbacks == 1
    oracle = make(tools, p=0.1, delta=OracleUtility())
    assert oracle.requires_gold
    assert oracle.answer({**EXAMPLE, "delta_seper": -0.3}).trace.find("utility").detail["class"] == "noisy"
    assert oracle.answer({**EXAMPLE, "delta_seper_s": 0.4}).trace.find("utility").detail["mode"] == "ctx-pos-acd"
    assert not make(tools).requires_gold


def test_oracle_computes_delta_seper_from_the_gold_answer_when_none_is_stored(tools):
    from workbench.uncertainty.seper import SeperSettings, delta_seper

    settings = SeperSettings(samples=3, max_new_tokens=4, seed=0)
    context = "[1] France: Paris is the capital of France."
    direct = delta_seper([EXAMPLE], [context], generator=tools.generator, judge=tools.judge, settings=settings)[0]
    for label in ("delta_seper_s", "delta_seper_h"):
        estimate = OracleUtility(settings=settings, label=label).estimate(tools, [EXAMPLE], [context], [[1.0]])
        assert estimate.source == "oracle" and estimate.values[0] == pytest.approx(direct[label])
    stored = OracleUtility(settings=settings).estimate(tools, [{**EXAMPLE, "delta_seper": 0.25}], [context], [[1.0]])
    assert stored.values[0] == 0.25  # a stored label wins over computing
    no_gold = OracleUtility(settings=settings).estimate(tools, [{"question": "q"}], [context], [[1.0]])
    assert math.isnan(no_gold.values[0])
    with pytest.raises(DataError, match="label must be"):
        OracleUtility(label="seper_s")


def test_no_passages_falls_back_to_closed_book(tools):
    answer = make(tools, p=0.1, delta=0.5).answer({"question": "zzzz qqqq"})
    assert not answer.trace.retrieved and answer.trace.fallbacks == 1
    assert answer.trace.steps[-1].detail["mode"] == "noctx-normal"


def test_learned_utility_reuses_the_stage1_and_utility_answers(tools):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, len(UTILITY_FEATURES)))
    predictor = UtilityPredictor(l2=1.0).fit(X, np.zeros(20))  # predicts 0 → neutral
    answer = make(tools, p=0.1, delta=predictor).answer(EXAMPLE)
    trace = answer.trace
    utility = trace.find("utility")
    assert utility.detail["source"] == "learned" and len(utility.detail["features"]) == len(UTILITY_FEATURES)
    assert utility.cost["lm_calls"] == 1  # with-context answer only: the closed-book one is a_para
    assert utility.cost["nli_pairs"] >= 1
    generate = trace.find("generate")
    assert generate.detail["reused_utility_answer"] and generate.cost["lm_calls"] == 0
    assert answer.text == StandardRAG(tools, k=2).answer(EXAMPLE).text


def test_a_learned_classifier_picks_the_decoding_mode_itself(tools):
    from workbench.methods.seper.utility_classifier import UtilityClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, len(UTILITY_FEATURES)))
    clf = UtilityClassifier(dev_fraction=0.0).fit(X, rng.choice([-0.5, 0.0, 0.5], size=30))
    clf.bias_ = np.array([100.0, 0.0, 0.0])  # every pair decided noisy, whatever its features
    trace = make(tools, p=0.1, delta=clf, tau_neg=-0.99).answer(EXAMPLE).trace
    utility = trace.find("utility").detail
    assert utility["class"] == "noisy" and utility["class_from"] == "classifier" and "tau_neg" not in utility
    assert set(utility["probabilities"]) == {"noisy", "neutral", "relevant"} and utility["delta"] is None
    assert trace.find("generate").detail["mode"] == "ctx-neg-acd" and trace.fallbacks == 0


def test_utility_class_boundaries():
    assert utility_class(0.12, 0.12, -0.1) == "neutral" and utility_class(0.13, 0.12, -0.1) == "relevant"
    assert utility_class(-0.1, 0.12, -0.1) == "neutral" and utility_class(-0.11, 0.12, -0.1) == "noisy"
    assert utility_class(math.nan, 0.12, -0.1) == "neutral"


def test_non_finite_features_are_imputed(tools):
    calibrators = make(tools).policy.calibrators
    assert calibrators.clean({"confidence": float("nan")})[0].tolist() == [0.0]
    assert calibrators.clean({"confidence": float("-inf")})[0].tolist() == [-1e10]
    assert calibrators.clean({"confidence": -0.5})[0].tolist() == [-0.5]
    calibrators.medians = {"confidence": -1.5}
    assert calibrators.clean({"confidence": float("nan")})[0].tolist() == [-1.5]
    assert calibrators.clean({"confidence": float("nan")})[1] == ["confidence"]


def test_always_retrieve_threshold_is_accepted_and_retrieves(tools):
    from workbench.classify.threshold import ABOVE_ONE

    method = make(tools, p=1.0, tau=ABOVE_ONE)  # the threshold rule's "always retrieve" choice (1 + ε)
    assert method.policy.always_retrieves and method.answer(EXAMPLE).trace.retrieved


# ------------------------------------------------------------------------------------------ settings
@pytest.mark.parametrize(
    "bad",
    [
        {"tau_pos": -0.2, "tau_neg": -0.1},
        {"tau_pos": 0.1, "tau_neg": 0.1},
        {"tau_pos": 1.5},
        {"alpha_pos": -1.0},
        {"alpha_neg": float("nan")},
        {"k": 0},
        {"max_new_tokens": 0},
        {"features": ("no_such_feature",)},
        {"features": ()},
    ],
)
def test_settings_validation(bad):
    with pytest.raises(ConfigError):
        D2RAGSettings(**bad).validate()


def test_defaults_follow_the_spec_recommendations():
    s = D2RAGSettings()
    s.validate()
    assert (s.tau_pos, s.tau_neg, s.alpha_pos, s.alpha_neg, s.k, s.dynamic) == (0.12, -0.10, 1.0, 0.1, 5, True)


def test_constructor_checks(tools):
    with pytest.raises(ConfigError, match="calibrator"):
        D2RAG(tools, calibrators={}, classifier=FixedClassifier(0.5), tau=0.5, utility=FixedUtility(0.0))
    with pytest.raises(ConfigError, match="tau"):
        make(tools, tau=1.5)
    with pytest.raises(ConfigError, match="lars"):
        D2RAG(
            tools,
            calibrators={"lars": CALIBRATORS["confidence"]},
            classifier=FixedClassifier(0.5),
            tau=0.5,
            utility=FixedUtility(0.0),
            settings=D2RAGSettings(features=("lars",)),
        )


# ------------------------------------------------------------------------------------------ the utility predictor
def test_predictor_recovers_a_planted_linear_relation_and_round_trips_json():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, len(UTILITY_FEATURES))) * rng.uniform(0.5, 3.0, size=len(UTILITY_FEATURES))
    w = rng.normal(scale=0.03, size=len(UTILITY_FEATURES))
    y = X @ w + 0.05 + rng.normal(scale=1e-3, size=400)
    model = UtilityPredictor(l2=1e-6).fit(X, y)
    np.testing.assert_allclose(model.coef_ / model.scale_, w, atol=2e-3)
    np.testing.assert_allclose(model.predict(X), y, atol=5e-3)
    restored = UtilityPredictor.from_dict(json.loads(json.dumps(model.to_dict())))
    np.testing.assert_array_equal(restored.predict(X), model.predict(X))
    assert not restored.requires_gold and OracleUtility.requires_gold
    row = X[:1].copy()
    row[0, 3] = np.nan  # imputed with the training mean
    assert np.isfinite(model.predict(row)).all()
    assert np.all(np.abs(model.predict(X * 1e3)) <= 1.0)  # clipped to the ΔSePer range


def test_predictor_rejects_bad_input():
    with pytest.raises(DataError):
        UtilityPredictor().fit(np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(DataError):
        UtilityPredictor().fit(np.zeros((3, len(UTILITY_FEATURES))), [0.0, np.nan, 1.0])
    with pytest.raises(RuntimeError):
        UtilityPredictor().predict(np.zeros((1, len(UTILITY_FEATURES))))
    good = UtilityPredictor().fit(np.eye(len(UTILITY_FEATURES)), np.linspace(-0.5, 0.5, len(UTILITY_FEATURES)))
    broken = {**good.to_dict(), "coef": [1.0]}
    with pytest.raises(DataError):
        UtilityPredictor.from_dict(broken)
    with pytest.raises(DataError):
        UtilityPredictor.from_dict({"kind": "ridge_utility"})


def test_utility_features_shape_and_batching(tools):
    questions = ["What is the capital of France?", "Who wrote Hamlet?", "Where is Stratford?"]
    passages = tools.search(questions, 2)
    contexts = [" ".join(p.text for p in ps) for ps in passages]
    scores = [[p.score for p in ps] for ps in passages]
    before = tools.counter.snapshot()
    X = utility_features(tools, questions, contexts, scores)
    spent = tools.counter.since(before)
    assert X.shape == (3, len(UTILITY_FEATURES))
    assert spent.lm_calls == 6 and spent.lm_batches == 2  # 3 prompts per condition, one batched call each
    assert 1 <= spent.nli_pairs <= 6  # one entail call: two hypotheses per pair (duplicates counted once)
    col = {name: X[:, j] for j, name in enumerate(UTILITY_FEATURES)}
    np.testing.assert_allclose(col["score_max"], [max(s) for s in scores])
    np.testing.assert_allclose(col["score_mean"], [np.mean(s) for s in scores])
    np.testing.assert_allclose(col["nll_delta"], col["nll_context"] - col["nll_closed"])
    assert np.all((col["answers_f1"] >= 0) & (col["answers_f1"] <= 1))
    assert np.all((col["entail_context"] >= 0) & (col["entail_context"] <= 1))
    before = tools.counter.snapshot()
    closed = [ClosedAnswer("Paris", 0.5)] * 3
    inputs = utility_inputs(tools, questions, contexts, scores, closed=closed)
    assert tools.counter.since(before).lm_calls == 3 and np.all(inputs.X[:, 2] == 0.5)
    assert len(inputs.context_generations) == 3


def test_rule_judge_entailment_asks_whether_the_context_holds_the_answer(tools):
    contexts = ["[1] France: Paris is the capital of France.", "[1] Hamlet: a play by William Shakespeare."]
    closed = [ClosedAnswer("Paris", 0.5)] * 2
    inputs = utility_inputs(
        tools, ["Capital of France?", "Capital of France?"], contexts, [[1.0], [1.0]], closed=closed
    )
    entail_closed = inputs.X[:, UTILITY_FEATURES.index("entail_closed")]
    assert entail_closed.tolist() == [1.0, 0.0]  # "Paris" occurs in the first context only


def test_utility_features_without_a_judge_leave_entailment_nan(tools):
    tools.judge = None
    X = utility_features(tools, ["Who wrote Hamlet?"], ["Hamlet is a tragedy by Shakespeare."], [[]])
    assert np.isnan(X[0, 7:]).all() and np.isnan(X[0, :2]).all()
    with pytest.raises(DataError):
        utility_features(tools, ["q"], [""], [[1.0]])


# ------------------------------------------------------------------------------------------ batches
QUESTIONS = [
    "What is the capital of France?",
    "Who wrote the tragedy Hamlet?",
    "Which river flows through Paris?",
    "Where was William Shakespeare born?",
    "Who wrote the novel Dune?",
    "Which city lies where the Rhône meets the Saône?",
]


class CyclingClassifier:
    """P(correct) from a fixed cycle, one value per decide() call: the same sequence batched or one by one."""

    feature_names = ("confidence",)

    def __init__(self, ps: list[float]) -> None:
        self.ps, self.calls = ps, 0

    def predict_proba(self, X):
        out = np.array([self.ps[(self.calls + i) % len(self.ps)] for i in range(len(X))])
        self.calls += len(X)
        return out


class UtilityByQuestion:
    """δ per question (so one batch mixes the relevant, noisy and neutral modes)."""

    requires_gold = False

    def __init__(self, deltas: dict[str, float]) -> None:
        self.deltas = deltas

    def estimate(self, tools, examples, contexts, scores, closed=None):
        return UtilityEstimate(np.array([self.deltas[ex["question"]] for ex in examples]), "fixed")


def _summary(answer):
    trace = answer.trace
    steps = [(s.name, {k: v for k, v in s.detail.items() if k not in ("seconds",)}) for s in trace.steps]
    return answer.text, trace.retrieved, trace.decoding, trace.passages, [name for name, _ in steps], trace.fallbacks


def test_a_batch_answers_exactly_as_one_question_at_a_time(tools):
    deltas = dict(zip(QUESTIONS[1:], [1.0, -1.0, 0.0, 1.0, -1.0], strict=True))
    examples = [{"question": q, "answers": ["x"]} for q in QUESTIONS]

    def build():
        return D2RAG(
            tools,
            calibrators={k: calibrator_from_dict(v) for k, v in CALIBRATORS.items()},
            classifier=CyclingClassifier([0.9, 0.1, 0.1, 0.1, 0.1, 0.1]),
            tau=0.5,
            utility=UtilityByQuestion(deltas),
            settings=D2RAGSettings(k=2, tau_pos=0.5, tau_neg=-0.5),
        )

    batched = build().answer_many(examples)
    single = build()  # its classifier's cycle runs on across the calls, as it does within the batch
    one_by_one = [single.answer(ex) for ex in examples]
    modes = [a.trace.find("generate").detail["mode"] for a in batched]
    # closed-book, relevant, noisy, neutral, nothing retrieved (closed-book after the search), noisy
    assert modes == ["noctx-normal", "ctx-pos-acd", "ctx-neg-acd", "ctx-normal", "noctx-normal", "ctx-neg-acd"]
    assert batched[4].trace.notes == ["retrieval returned nothing: answered closed-book"]
    assert [_summary(a) for a in batched] == [_summary(a) for a in one_by_one]
    assert any(a.text for a in batched)  # the peaked model writes text: the comparison is not vacuous
    for a, b in zip(batched, one_by_one, strict=True):  # the batch's cost is shared out, its LM calls kept
        assert a.trace.totals()["lm_calls"] == pytest.approx(b.trace.totals()["lm_calls"])


@pytest.mark.parametrize("method", [NoRAG, StandardRAG])
def test_baselines_batch_their_questions_with_the_same_answers(tools, method):
    examples = [{"question": q} for q in QUESTIONS]
    calls_before = tools.counter.snapshot()
    batched = method(tools).answer_many(examples)
    batch_calls = tools.counter.since(calls_before)
    one_by_one = [method(tools).answer(ex) for ex in examples]
    assert [_summary(a) for a in batched] == [_summary(a) for a in one_by_one]
    assert batch_calls.lm_calls == len(examples)
    assert sum(a.trace.totals()["lm_calls"] for a in batched) == pytest.approx(len(examples))
