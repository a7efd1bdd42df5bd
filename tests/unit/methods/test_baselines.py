"""The baselines on a tiny model: one generation each, retrieval recorded in the trace, oracle routing by the gold."""

from __future__ import annotations

from workbench.methods.baselines import NoRAG, OracleRouting, StandardRAG

EXAMPLE = {"question": "What is the capital of France?", "answers": ["Paris"]}


def test_no_rag_makes_one_call_and_no_retrieval(tools):
    answer = NoRAG(tools).answer(EXAMPLE)
    totals = answer.trace.totals()
    assert totals["lm_calls"] == 1 and totals["retrieval_calls"] == 0 and not answer.trace.retrieved
    assert [s.name for s in answer.trace.steps] == ["generate"]


def test_standard_rag_retrieves_top_k_and_puts_them_in_the_prompt(tools):
    answer = StandardRAG(tools, k=2).answer(EXAMPLE)
    retrieve = answer.trace.find("retrieve")
    assert retrieve.detail["ids"][0] == "d0#0" and len(retrieve.detail["ids"]) == 2
    assert answer.trace.retrieved and answer.trace.totals()["retrieval_calls"] == 1
    closed = NoRAG(tools).answer(EXAMPLE)
    assert answer.trace.find("generate").detail["prompt_tokens"] > closed.trace.find("generate").detail["prompt_tokens"]
    assert answer.trace.to_dict()["totals"]["lm_calls"] == 1


def test_standard_rag_with_no_hits_answers_closed_book_and_counts_a_fallback(tools):
    answer = StandardRAG(tools, k=2).answer({"question": "zzzz qqqq", "answers": ["x"]})
    assert not answer.trace.retrieved and answer.trace.fallbacks == 1


def test_oracle_retrieves_only_when_the_closed_book_answer_is_wrong(tools):
    closed = NoRAG(tools).answer(EXAMPLE).text
    right = OracleRouting(tools, k=2).answer({**EXAMPLE, "answers": [closed or "x"]})
    wrong = OracleRouting(tools, k=2).answer({**EXAMPLE, "answers": ["certainly not this"]})
    assert OracleRouting.requires_gold
    if closed:
        assert not right.trace.retrieved and right.trace.totals()["lm_calls"] == 1
    assert wrong.trace.retrieved and wrong.trace.totals()["lm_calls"] == 2


def test_a_context_longer_than_the_window_is_cut_and_counted(tools, tiny_lm_long_dir):
    from workbench.backends.generator import Generator

    small = Generator(tiny_lm_long_dir, max_context=160, counter=tools.counter)  # six passages need ~500 tokens
    tools.generator = small
    answer = StandardRAG(tools, k=6).answer(EXAMPLE)
    generate = answer.trace.find("generate")
    assert answer.trace.retrieved and answer.trace.fallbacks == 1
    assert generate.detail["prompt_tokens"] <= 160 - tools.max_new_tokens
    assert "cut to fit" in " ".join(answer.trace.to_dict()["notes"])
