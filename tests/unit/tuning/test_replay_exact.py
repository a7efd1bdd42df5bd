"""A replayed τ at which some questions retrieve and some do not reports the quality and cost the method reports when
run at that τ: every stage after the decision records each question's own cost, not an even share of its batch.

DTR and D²-RAG run on the tiny models: an always-retrieve run makes the replay table, a run at a τ that splits the
questions is the reference. Without per-question costs a retrieving question carries 1/4 of a batched stage run for
four questions where the run at τ charges it 1/2 of the stage run for two, and the token counts differ.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.methods.conftest import _tools_over, make_corpus
from tests.unit.methods.test_dtr import script
from workbench.calibration.registry import calibrator_from_dict
from workbench.classify.threshold import ABOVE_ONE
from workbench.core.errors import DataError
from workbench.methods.base import Trace, shared_step
from workbench.methods.d2rag import D2RAG, D2RAGSettings
from workbench.methods.dtr import DTR, DTRSettings
from workbench.methods.evaluation import evaluate_built
from workbench.methods.seper.utility import UtilityEstimate
from workbench.tuning.objective import metrics_of
from workbench.tuning.replay import replay_rule, replay_table
from workbench.uncertainty.calculators import StatSettings

QUESTIONS = [
    "What is the capital of France?",
    "Who wrote the tragedy Hamlet around the year 1600 in England?",
    "Where is Stratford?",
    "Which river flows through Paris to the English Channel in northern France?",
]
ROWS = [{"id": f"q{i}", "question": q, "answers": ["Paris"], "options": []} for i, q in enumerate(QUESTIONS)]
EXACT = ("em", "f1", "contains", "retrieval_rate", "lm_calls", "tokens", "cached_tokens", "nli_pairs")
CALIBRATORS = {"confidence": {"kind": "isotonic", "version": 1, "x": [-20.0, 0.0], "y": [0.0, 1.0]}}


@pytest.fixture(scope="module")
def generator(tiny_lm_long_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_long_dir, batch_size=16)


@pytest.fixture(scope="module")
def peaked(tmp_path_factory):
    """A tiny Llama whose greedy answers are varied text (so D²-RAG's confidence differs between questions)."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-peaked-replay")
    build_tiny_llama(path, seed=1, max_positions=4096, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=16)


@pytest.fixture(scope="module")
def embedder(tiny_encoder_dir):
    from workbench.backends.embedder import Embedder

    return Embedder(str(tiny_encoder_dir), cache=False)


def _same(replayed: dict, direct: dict) -> None:
    assert 0.0 < direct["retrieval_rate"] < 1.0  # the τ splits the questions
    for key in EXACT:
        assert replayed[key] == pytest.approx(direct[key], abs=1e-9), key
    assert replayed["costs_exact"] == 1.0


def test_dtr_replay_at_a_splitting_tau_costs_what_the_run_costs(generator, embedder, monkeypatch):
    tools = _tools_over(generator, make_corpus(), max_new_tokens=6)
    tools.embedder = embedder
    script(monkeypatch, tools, closed={q: "" if i % 2 == 0 else "a guess" for i, q in enumerate(QUESTIONS)})
    options = {"k": 2, "pseudo_max_tokens": 4}
    always_tau = replay_rule("dtr").always
    always = evaluate_built("dtr", DTR(tools, DTRSettings(tau=always_tau, **options)), ROWS, progress=False)
    table = replay_table("dtr", always.records, ROWS)
    assert table.costs_exact
    tau = 100.0  # an empty closed-book answer (u = inf) retrieves, the finite ones do not
    run = evaluate_built("dtr", DTR(tools, DTRSettings(tau=tau, **options)), ROWS, progress=False)
    _same(table.evaluate(tau), metrics_of(run.records))
    assert [r["retrieved"] for r in run.records] == [True, False, True, False]
    # per question too: a retrieving question's recorded cost does not depend on who retrieved with it
    for a, r in zip(always.records, run.records, strict=True):
        if r["retrieved"]:
            assert (a["tokens"], a["lm_calls"]) == pytest.approx((r["tokens"], r["lm_calls"]))
    steps = [s for r in run.records for s in json.loads(r["trace"])["steps"]]
    assert {s["split"] for s in steps} == {"own"}


class _Classifier:
    """P(correct) = the calibrated confidence (varies with the question)."""

    feature_names = ("confidence",)

    def predict_proba(self, X):
        return np.asarray(X, dtype=float)[:, 0]


class _Utility:
    """A gold-free utility with no model call: relevant for two questions, neutral for the others."""

    requires_gold = False

    def estimate(self, tools, examples, contexts, scores, closed=None):
        delta = [0.5 if ("France" in ex["question"] or "Stratford" in ex["question"]) else 0.0 for ex in examples]
        return UtilityEstimate(np.asarray(delta, dtype=float), "fixed")


def _d2rag(tools, tau, **settings):
    return D2RAG(
        tools,
        calibrators={k: calibrator_from_dict(v) for k, v in CALIBRATORS.items()},
        classifier=_Classifier(),
        tau=tau,
        utility=_Utility(),
        settings=D2RAGSettings(k=2, **settings),
    )


def test_d2rag_replay_at_a_splitting_tau_costs_what_the_run_costs(peaked):
    tools = _tools_over(peaked, make_corpus(), max_new_tokens=6)
    always = evaluate_built("d2rag", _d2rag(tools, ABOVE_ONE, score_always=True), ROWS, progress=False)
    table = replay_table("d2rag", always.records, ROWS)
    p = sorted(table.score)
    assert p[0] < p[-1]  # the questions differ
    tau = float((p[1] + p[2]) / 2)  # two retrieve, two do not
    run = evaluate_built("d2rag", _d2rag(tools, tau), ROWS, progress=False)
    _same(table.evaluate(tau), metrics_of(run.records))
    decodings = {r["decoding"] for r in always.records}
    assert decodings == {"contrastive", "greedy"}  # both the contrastive pairs and the neutral answers are charged


def test_d2rag_with_a_learned_utility_charges_each_question_its_utility_answer_and_nli_pairs(peaked):
    from workbench.backends.nli import AnswerEquivalenceJudge
    from workbench.methods.seper.utility import UTILITY_FEATURES, UtilityPredictor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, len(UTILITY_FEATURES)))
    predictor = UtilityPredictor(l2=1.0).fit(X, np.clip(X[:, 2] * 0.2, -1, 1))  # δ varies: several classes
    judge = AnswerEquivalenceJudge()
    tools = _tools_over(peaked, make_corpus(), judge=judge, max_new_tokens=6)
    judge.counter = tools.counter

    def method(tau, **settings):
        return D2RAG(
            tools,
            calibrators={k: calibrator_from_dict(v) for k, v in CALIBRATORS.items()},
            classifier=_Classifier(),
            tau=tau,
            utility=predictor,
            settings=D2RAGSettings(k=2, **settings),
        )

    always = evaluate_built("d2rag", method(ABOVE_ONE, score_always=True), ROWS, progress=False)
    utility = [s for r in always.records for s in json.loads(r["trace"])["steps"] if s["name"] == "utility"]
    assert len(utility) == 4 and {s["split"] for s in utility} == {"own"}
    assert sum(s["cost"]["nli_pairs"] for s in utility) > 0
    table = replay_table("d2rag", always.records, ROWS)
    p = sorted(table.score)
    tau = float((p[1] + p[2]) / 2)
    _same(table.evaluate(tau), metrics_of(evaluate_built("d2rag", method(tau), ROWS, progress=False).records))


def test_d2rag_replay_refuses_a_closed_book_answer_made_at_another_budget(peaked):
    tools = _tools_over(peaked, make_corpus(), max_new_tokens=6)
    method = _d2rag(tools, ABOVE_ONE, score_always=True, max_new_tokens=8, stats=StatSettings(max_new_tokens=6))
    records = evaluate_built("d2rag", method, ROWS[:1], progress=False).records
    with pytest.raises(DataError, match=r"collect\.max_new_tokens"):
        replay_table("d2rag", records, ROWS[:1])


def test_a_stage_whose_parts_do_not_add_up_is_split_evenly_and_the_replay_says_so(generator):
    from workbench.backends.cost import CostCounter

    counter = CostCounter()
    traces = [Trace("x"), Trace("x")]
    with shared_step(traces, "generate", counter, [{"lm_calls": 1.0}, {"lm_calls": 2.0}]):
        counter.lm_calls += 3  # the parts add up: each its own
    with shared_step(traces, "generate", counter, [{"lm_calls": 1.0}, {"lm_calls": 1.0}]):
        counter.lm_calls += 3  # they do not (a prompt shared, a backend that does not say): an even split
    with shared_step(traces, "select", counter):
        pass  # nothing spent: nothing to split
    assert [[s.cost["lm_calls"] for s in t.steps] for t in traces] == [[1.0, 1.5, 0.0], [2.0, 1.5, 0.0]]
    assert [s.split for s in traces[0].steps] == ["own", "even", "own"]

    def record(qid, nll, split):
        steps = [
            {"name": "closed_book", "detail": {"nll": nll, "answer": "x", "retrieve": True}, "split": "even"},
            {"name": "generate", "detail": {}, "cost": {"prefill_tokens": 10.0}, "split": split},
        ]
        return {"id": qid, "trace": json.dumps({"retrieved": True, "steps": steps}), "em": 0, "f1": 0, "contains": 0}

    rows = [{"answers": ["y"]}, {"answers": ["y"]}]
    even = replay_table("dtr", [record("a", 1.0, "even"), record("b", 3.0, "own")], rows)
    assert even.evaluate(2.0)["costs_exact"] == 0.0  # τ splits the batch of an evenly split stage
    assert even.evaluate(0.0)["costs_exact"] == 1.0 and even.evaluate(9.0)["costs_exact"] == 1.0  # all / none
    own = replay_table("dtr", [record("a", 1.0, "own"), record("b", 3.0, "own")], rows)
    assert own.evaluate(2.0)["costs_exact"] == 1.0


def test_generation_costs_say_what_the_call_counted(generator, tmp_path):
    from workbench.backends.cost import CostCounter, generation_cost
    from workbench.backends.gencache import GenerationCache

    counter, old = CostCounter(), (generator.counter, generator.cache)
    generator.counter, generator.cache = counter, GenerationCache(tmp_path / "g.sqlite")
    try:
        prompts = [generator.render_chat(q) for q in QUESTIONS]
        fresh = generator.generate(prompts, max_new_tokens=5)
        made = counter.snapshot()
        cached = generator.generate(prompts, max_new_tokens=5)
    finally:
        generator.counter, generator.cache = old
    by_field = lambda gens, name: sum(generation_cost(g).get(name, 0.0) for g in gens)  # noqa: E731
    assert all(g.decode_steps is not None for g in fresh) and all(g.decode_steps is None for g in cached)
    for name in ("lm_calls", "prefill_tokens", "decoded_tokens"):
        assert by_field(fresh, name) == getattr(made, name)
    saved = counter.since(made)
    for name in ("cached_lm_calls", "cached_prefill_tokens", "cached_decoded_tokens"):
        assert by_field(cached, name) == getattr(saved, name)
