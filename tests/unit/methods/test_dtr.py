"""DTR on the tiny model: hand-computed selection scores, the τ trigger, batching, fallbacks and settings checks.

The tiny random LM only ever emits special tokens (empty text), so most tests wrap its ``generate`` with a script
that keeps the real call (costs, log-probs) but replaces the text by a deterministic function of the prompt.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.core.errors import ConfigError
from workbench.methods.base import Passage
from workbench.methods.dtr import (
    DTR,
    TAU_BOUND,
    DTRSettings,
    combine,
    cosine_similarities,
    merge_candidates,
    nll_of,
    select_top_k,
    selection_scores,
)

EXAMPLE = {"question": "What is the capital of France?", "answers": ["Paris"]}
PSEUDO_MARK = "encyclopedia entry"  # a phrase of DTR's pseudo-context request
FAST = {"pseudo_max_tokens": 4}


@pytest.fixture(scope="module")
def embedder(tiny_encoder_dir):
    from workbench.backends.embedder import Embedder

    return Embedder(str(tiny_encoder_dir), cache=False)


@pytest.fixture
def dtr_tools(tools, embedder):
    tools.embedder = embedder
    return tools


def script(monkeypatch, tools, closed="Paris", pseudo="Paris is the capital of France on the river Seine."):
    """Patch the generator: real calls, scripted texts. ``closed`` / ``pseudo``: a string or a question -> text map.

    A prompt with a context block answers with the title of its first passage. Returns the list of prompts seen.
    """
    real = tools.generator.generate
    prompts: list[str] = []

    def pick(value, prompt):
        if isinstance(value, dict):
            return next((text for q, text in value.items() if q in prompt), "")
        return value

    def generate(batch, **kwargs):
        prompts.extend(batch)
        outputs = real(batch, **kwargs)
        texts = []
        for prompt in batch:
            first = re.search(r"\[1\] ([^:\n]+):", prompt)
            if PSEUDO_MARK in prompt:
                texts.append(pick(pseudo, prompt))
            elif first:
                texts.append(first.group(1))
            else:
                texts.append(pick(closed, prompt))
        return [replace(out, text=text) for out, text in zip(outputs, texts, strict=True)]

    monkeypatch.setattr(tools.generator, "generate", generate)
    return prompts


def _passage(name: str, index: int, score: float = 1.0) -> Passage:
    return Passage(index=index, chunk_id=name, doc_id=name, title=name.upper(), text=f"text {name}", score=score)


# ---------------------------------------------------------------------------------------------- pure scoring
def test_selection_scores_by_hand_on_2d_vectors():
    q = np.array([1.0, 0.0])  # query at 0°
    p = np.array([0.0, 2.0])  # pseudo-context at 90° (length does not matter: normalised)
    cands = np.array(
        [
            [1.0, 0.0],  # a at 0°:    s1 = 1,     s2 = 0;     θ1 + θ2 = 0 + 90° = 90°
            [1.0, 1.0],  # b at 45°:   s1 = s2 = √½ = 0.7071;  θ1 + θ2 = 45° + 45° = 90°
            [math.sqrt(3), -1.0],  # c at −30°: s1 = cos 30° = 0.8660, s2 = cos 120° = −0.5; θ1 + θ2 = 150°
            [-1.0, 0.0],  # d at 180°: s1 = −1, s2 = 0;    θ1 + θ2 = 180° + 90° = 270° > 180°
        ]
    )
    s1, s2 = cosine_similarities(q, p, cands)
    np.testing.assert_allclose(s1, [1.0, math.sqrt(0.5), math.sqrt(3) / 2, -1.0], atol=1e-12)
    np.testing.assert_allclose(s2, [0.0, math.sqrt(0.5), -0.5, 0.0], atol=1e-12)
    # cos(θ1+θ2) = s1·s2 − √(1−s1²)·√(1−s2²):
    #   a: 1·0 − 0·1 = 0;  b: 0.5 − 0.5 = 0;  c: 0.8660·(−0.5) − 0.5·0.8660 = −0.8660 (= cos 150°);
    #   d: 270° > 180°: eq. 7 would wrap to −1·0 − 0·1 = 0 (a tie with a and b!);
    #      continued as −1 − (3π/2 − π) = −2.5708
    cos_sum = selection_scores(q, p, cands, "cos_sum")
    np.testing.assert_allclose(cos_sum, [0.0, 0.0, -math.sqrt(3) / 2, -1.0 - math.pi / 2], atol=1e-12)
    # s1 + s2:  a: 1 + 0 = 1;  b: 2·0.7071 = 1.4142;  c: 0.8660 − 0.5 = 0.3660;  d: −1 + 0 = −1
    score_sum = selection_scores(q, p, cands, "score_sum")
    np.testing.assert_allclose(score_sum, [1.0, math.sqrt(2), math.sqrt(3) / 2 - 0.5, -1.0], atol=1e-12)
    # the raw eq. 7 agrees wherever the angle sum is ≤ π
    angle_sum = np.arccos(s1[:3]) + np.arccos(s2[:3])
    np.testing.assert_allclose(combine(s1[:3], s2[:3], "cos_sum"), np.cos(angle_sum), atol=1e-12)


def test_union_merges_a_passage_found_by_both_paths_and_selection_follows_the_rule():
    a, b, c, d = (_passage(n, i) for i, n in enumerate("abcd"))
    # query path finds a, c, d; the pseudo-context path finds b, then a again (a duplicate: merged)
    cands = merge_candidates([a, c, d], [b, replace(a, score=7.0)])
    assert [x.passage.chunk_id for x in cands] == ["a", "c", "d", "b"]
    assert cands[0].paths == ["query", "pseudo"] and (cands[0].query_rank, cands[0].pseudo_rank) == (0, 1)
    assert cands[0].pseudo_score == 7.0 and cands[3].paths == ["pseudo"] and cands[3].best_rank == 0
    # the 2-D vectors of the previous test, in union order a, c, d, b
    vecs = np.array([[1.0, 0.0], [math.sqrt(3), -1.0], [-1.0, 0.0], [1.0, 1.0]])
    q, p = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    cos_sum = selection_scores(q, p, vecs, "cos_sum")  # a 0, c −0.866, d −2.571, b 0
    # a and b tie at 0 (up to float noise); both have best rank 0 -> chunk id: a before b; then c
    assert [cands[i].passage.chunk_id for i in select_top_k(cands, cos_sum, 3)] == ["a", "b", "c"]
    score_sum = selection_scores(q, p, vecs, "score_sum")  # a 1, c 0.366, d −1, b 1.414
    assert [cands[i].passage.chunk_id for i in select_top_k(cands, score_sum, 3)] == ["b", "a", "c"]
    # no pseudo-context: s2 = s1, so both rules rank by the query similarity alone (a 1 > c 0.866 > b 0.707 > d −1)
    s1, s2 = cosine_similarities(q, None, vecs)
    np.testing.assert_array_equal(s1, s2)
    for rule in ("cos_sum", "score_sum"):
        order = select_top_k(cands, selection_scores(q, None, vecs, rule), 4)
        assert [cands[i].passage.chunk_id for i in order] == ["a", "c", "b", "d"]


def test_nll_uses_the_feature_with_and_without_eos_and_empty_answers_are_infinite():
    gen = SimpleNamespace(text=" Paris", logprobs=np.array([-0.1, -0.3]), finish_reason="eos", eos_logprob=-0.5)
    assert nll_of(gen, include_eos=False) == pytest.approx((0.1 + 0.3) / 2)  # 0.2
    assert nll_of(gen, include_eos=True) == pytest.approx((0.1 + 0.3 + 0.5) / 3)  # 0.3
    cut = replace_ns(gen, finish_reason="length")  # no EOS entry: both variants average the two tokens
    assert nll_of(cut, include_eos=True) == pytest.approx(0.2)
    assert nll_of(replace_ns(gen, text="  "), include_eos=False) == math.inf


def replace_ns(ns: SimpleNamespace, **changes) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(ns), **changes})


# ---------------------------------------------------------------------------------------------- the trigger
def test_high_tau_never_retrieves(dtr_tools, monkeypatch):
    script(monkeypatch, dtr_tools)
    answer = DTR(dtr_tools, DTRSettings(tau=TAU_BOUND, **FAST)).answer(EXAMPLE)  # the highest finite τ
    totals = answer.trace.totals()
    assert answer.text == "Paris" and not answer.trace.retrieved
    assert totals["lm_calls"] == 1 and totals["retrieval_calls"] == 0
    closed = answer.trace.find("closed_book").detail
    assert [s.name for s in answer.trace.steps] == ["closed_book"]
    assert 0 < closed["nll"] < TAU_BOUND and closed["retrieve"] is False and closed["tau"] == TAU_BOUND


def test_low_tau_always_retrieves_with_both_paths_and_keeps_k(dtr_tools, monkeypatch):
    prompts = script(monkeypatch, dtr_tools)
    answer = DTR(dtr_tools, DTRSettings(tau=-1.0, k=2, **FAST)).answer(EXAMPLE)
    trace = answer.trace
    assert [s.name for s in trace.steps] == ["closed_book", "pseudo_context", "retrieve", "select", "generate"]
    assert trace.retrieved and trace.fallbacks == 0
    totals = trace.totals()
    assert totals["retrieval_calls"] == 2 and totals["lm_calls"] == 3
    retrieve = trace.find("retrieve").detail
    assert retrieve["queries"]["pseudo"].startswith("Paris is the capital") and retrieve["pseudo_ids"]
    select = trace.find("select").detail
    ids = {c["id"] for c in select["candidates"]}
    assert ids == set(retrieve["query_ids"]) | set(retrieve["pseudo_ids"])  # union, duplicates merged
    assert len(select["candidates"]) == len(ids)
    assert len(select["kept_ids"]) == 2 and select["rule"] == "cos_sum"
    assert select["kept_scores"] == sorted(select["kept_scores"], reverse=True)
    final_prompt = prompts[-1]
    for chunk_id in select["kept_ids"]:
        text = dtr_tools.passage(dtr_tools.column("chunk_id").index(chunk_id)).text
        assert text in final_prompt
    first_title = dtr_tools.passage(dtr_tools.column("chunk_id").index(select["kept_ids"][0])).title
    assert answer.text == first_title == trace.find("generate").detail["answer"]


def test_score_sum_rule_is_a_switch(dtr_tools, monkeypatch):
    script(monkeypatch, dtr_tools)
    answer = DTR(dtr_tools, DTRSettings(tau=-1.0, rule="score_sum", **FAST)).answer(EXAMPLE)
    select = answer.trace.find("select").detail
    assert select["rule"] == "score_sum"
    for c in select["candidates"]:
        assert c["score"] == pytest.approx(c["s1"] + c["s2"])


def test_an_empty_closed_book_answer_is_uncertain_but_tau_inf_never_retrieves(dtr_tools):
    # the raw tiny model emits only special tokens: an empty answer, so u = +inf
    answer = DTR(dtr_tools, DTRSettings(tau=TAU_BOUND, **FAST)).answer(EXAMPLE)
    closed = answer.trace.find("closed_book").detail
    assert closed["answer"] == "" and closed["nll"] == math.inf and closed["retrieve"] is True
    never = DTR(dtr_tools, DTRSettings(tau=math.inf, **FAST)).answer(EXAMPLE)
    assert not never.trace.retrieved and never.trace.totals()["lm_calls"] == 1


# ---------------------------------------------------------------------------------------------- batching
def test_answer_many_matches_answer_with_the_same_lm_calls_in_fewer_batches(dtr_tools, monkeypatch):
    questions = ["What is the capital of France?", "Who wrote Hamlet?", "Where is Stratford?", "What is the Seine?"]
    closed = {questions[0]: "", questions[1]: "", questions[2]: "England", questions[3]: "a river"}
    pseudo = {
        questions[0]: "Paris is the capital of France.",
        questions[1]: "Hamlet is a tragedy by William Shakespeare.",
    }
    script(monkeypatch, dtr_tools, closed=closed, pseudo=pseudo)
    method = DTR(dtr_tools, DTRSettings(tau=100.0, k=2, **FAST))  # empty answers (u = inf) retrieve, others not
    examples = [{"question": q} for q in questions]
    counter = dtr_tools.counter
    before = counter.snapshot()
    single = [method.answer(ex) for ex in examples]
    single_cost = counter.since(before)
    before = counter.snapshot()
    batched = method.answer_many(examples)
    batch_cost = counter.since(before)
    assert [a.text for a in batched] == [a.text for a in single]
    assert [a.trace.retrieved for a in batched] == [True, True, False, False]
    for one, many in zip(single, batched, strict=True):
        assert [s.name for s in one.trace.steps] == [s.name for s in many.trace.steps]
        if one.trace.retrieved:
            assert one.trace.find("select").detail["kept_ids"] == many.trace.find("select").detail["kept_ids"]
    # LM calls count prompts: the same 3 + 3 + 1 + 1 either way; batching saves forward batches (8 → 3)
    assert single_cost.lm_calls == batch_cost.lm_calls == 3 + 3 + 1 + 1
    assert single_cost.lm_batches == 8 and batch_cost.lm_batches == 3
    # a batched stage's cost is split over the questions that took part: each trace holds its own prompts, exactly
    assert [a.trace.totals()["lm_calls"] for a in batched] == [3.0, 3.0, 1.0, 1.0]
    assert [a.trace.totals()["lm_calls"] for a in single] == [3.0, 3.0, 1.0, 1.0]


# ---------------------------------------------------------------------------------------------- fallbacks
def test_no_hits_on_either_path_keeps_the_closed_book_answer(dtr_tools, monkeypatch):
    script(monkeypatch, dtr_tools, closed="somewhere", pseudo="xyzzy plugh")
    # the run's BM25 finds no passage with an unknown word (a dense index always returns its nearest passages)
    answer = DTR(dtr_tools, DTRSettings(tau=-1.0, retriever="run", **FAST)).answer({"question": "zzzz qqqq"})
    assert answer.text == "somewhere" and not answer.trace.retrieved and answer.trace.fallbacks == 1
    assert "nothing on either path" in answer.trace.notes[0]
    assert [s.name for s in answer.trace.steps] == ["closed_book", "pseudo_context", "retrieve"]
    assert answer.trace.totals()["lm_calls"] == 2 and answer.trace.totals()["retrieval_calls"] == 2


def test_empty_pseudo_context_uses_the_query_path_only(dtr_tools, monkeypatch):
    script(monkeypatch, dtr_tools, pseudo="   ")
    answer = DTR(dtr_tools, DTRSettings(tau=-1.0, **FAST)).answer(EXAMPLE)
    trace = answer.trace
    assert trace.retrieved and trace.fallbacks == 1 and "pseudo-context" in trace.notes[0]
    assert trace.totals()["retrieval_calls"] == 1
    retrieve = trace.find("retrieve").detail
    assert retrieve["queries"]["pseudo"] is None and retrieve["pseudo_ids"] == []
    candidates = trace.find("select").detail["candidates"]
    assert candidates and all(c["paths"] == ["query"] and c["s1"] == c["s2"] for c in candidates)


# ---------------------------------------------------------------------------------------------- the dense index
def test_both_paths_search_a_dense_index_by_default_not_the_runs_bm25(dtr_tools, monkeypatch):
    """Spec §3.4 / §6.2: DTR searches a dense index ("no BM25 anywhere"), whatever the run's retriever is."""
    from workbench.backends.retrievers import BM25Retriever, DenseRetriever

    script(monkeypatch, dtr_tools, pseudo="xyzzy plugh")  # no word BM25 knows, in the question or the passage
    assert isinstance(dtr_tools.retriever, BM25Retriever)
    method = DTR(dtr_tools, DTRSettings(tau=-1.0, n_per_path=2, k=2, **FAST))
    question = {"question": "zzzz qqqq"}
    answer = method.answer(question)
    assert isinstance(method.retriever, DenseRetriever) and method.retriever.index_kind == "flat"
    retrieve = answer.trace.find("retrieve").detail
    assert retrieve["retriever"] == "DenseRetriever" and answer.trace.retrieved and answer.trace.fallbacks == 0
    # exactly the dense index's top 2 by cosine (exact inner product over the embedder's unit vectors)
    texts = dtr_tools.column("text")
    passages = dtr_tools.embedder.encode(texts)
    for path, query in (("query", "zzzz qqqq"), ("pseudo", "xyzzy plugh")):
        cosine = passages @ dtr_tools.embedder.encode([query])[0]
        top = np.argsort(-cosine, kind="stable")[:2]
        assert retrieve[f"{path}_ids"] == [dtr_tools.column("chunk_id")[i] for i in top]
        np.testing.assert_allclose(retrieve[f"{path}_scores"], cosine[top], atol=1e-5)
    # the run's retriever on request (here BM25: nothing matches, the closed-book answer stays)
    run = DTR(dtr_tools, DTRSettings(tau=-1.0, retriever="run", **FAST)).answer(question)
    assert run.trace.find("retrieve").detail["retriever"] == "BM25Retriever" and not run.trace.retrieved


def test_methods_on_one_tools_share_one_dense_index_and_a_dense_run_retriever_is_reused(dtr_tools):
    from workbench.backends.retrievers import DenseRetriever, PooledDenseRetriever

    first, second = DTR(dtr_tools), DTR(dtr_tools)
    assert first.retriever is second.retriever is dtr_tools.dense_retriever("full")
    pooled = DTR(dtr_tools, DTRSettings(dense_index="pooled", dense_pool=3)).retriever
    assert isinstance(pooled, PooledDenseRetriever) and pooled.pool == 3 and pooled.base is dtr_tools.bm25_retriever()
    own = DenseRetriever(dtr_tools.corpus, dtr_tools.embedder, counter=dtr_tools.counter, cache=False)
    dtr_tools.retriever = own  # retrieval.backend: dense over the same passages is the same index
    assert DTR(dtr_tools).retriever is own


# ---------------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "bad",
    [
        {"tau": float("nan")},
        {"tau": "0.1"},
        {"pseudo_max_tokens": 0},
        {"n_per_path": 0},
        {"k": 0},
        {"k": 11},  # > 2 * n_per_path = 10
        {"rule": "alpha"},
        {"answer_max_tokens": 0},
        {"include_eos": "no"},
        {"retriever": "bm25"},
        {"dense_index": "hnsw"},
        {"dense_pool": 0},
    ],
)
def test_settings_validation(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        DTRSettings(**bad).validate()


def test_defaults_follow_the_spec_and_an_embedder_is_required(tools):
    s = DTRSettings().validate()
    assert (s.tau, s.n_per_path, s.k, s.rule, s.include_eos) == (0.001, 5, 3, "cos_sum", False)
    assert (s.retriever, s.dense_index) == ("dense", "full")  # the paper's exact dense search
    with pytest.raises(ConfigError, match="embedder"):
        DTR(tools)
    with pytest.raises(ConfigError, match="rule"):
        combine(np.zeros(1), np.zeros(1), "nope")
