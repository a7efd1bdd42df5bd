"""DENSE-RAG: the pure decision functions by hand, the whole method on scripted fakes (known outcomes) and on the
tiny random models (steps and costs)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.nli import AnswerEquivalenceJudge, NLIJudge
from workbench.core.errors import ConfigError
from workbench.data.corpus import document_text
from workbench.methods.base import Tools
from workbench.methods.dense_rag import (
    CERTAIN,
    NECESSARY,
    UNNECESSARY,
    DenseRAG,
    DenseRAGSettings,
    classify_chunks,
    entailment_verdicts,
    is_better,
    is_unchanged,
    method,
    parse_self_evaluation,
    refill,
    select_answer,
    should_stop,
    top_up,
)
from workbench.uncertainty.dense_stats import REPHRASE_PROMPT

# --------------------------------------------------------------------------------------------- pure functions


def _verdicts(answers: list[str], one_way: tuple[int, int] | None = None) -> np.ndarray:
    """E[i, j] = (answers equal); ``one_way=(i, j)`` adds a single directional entailment i ⇒ j."""
    e = np.array([[a == b for b in answers] for a in answers])
    if one_way is not None:
        e[one_way] = True
    return e


def test_classify_chunks_sorts_certain_necessary_and_unnecessary_by_each_rule():
    # r0 = r1 (chunk 0 certain); r2 differs (chunk 1 uncertain); r3 ⇒ r0 one way only (chunk 2 uncertain, w = ½)
    verdicts = _verdicts(["paris", "paris", "lyon", "nice"], one_way=(3, 0))
    ablation = {1: (False, False), 2: (False, True)}  # (r0 ⇒ ar, ar ⇒ r0)
    assert classify_chunks(verdicts, ablation) == [CERTAIN, NECESSARY, UNNECESSARY]  # code_oneway: ar ⇒ r0
    assert classify_chunks(verdicts, ablation, "alg3_bidirectional") == [CERTAIN, NECESSARY, NECESSARY]
    assert classify_chunks(verdicts, {1: (True, False), 2: (False, False)}, "eq10_both_zero") == [
        CERTAIN,
        UNNECESSARY,
        NECESSARY,
    ]
    with pytest.raises(KeyError):
        classify_chunks(verdicts, {1: (True, True)})
    assert is_unchanged(True, True, "alg3_bidirectional") and not is_unchanged(True, False, "code_oneway")
    with pytest.raises(ValueError):
        is_unchanged(True, True, "nope")


def test_entailment_verdicts_take_the_argmax_and_set_the_diagonal():
    probs = np.zeros((2, 2, 3))
    probs[0, 1] = (0.1, 0.2, 0.7)
    probs[1, 0] = (0.6, 0.3, 0.1)
    assert entailment_verdicts(probs).tolist() == [[True, True], [False, True]]


def test_refill_picks_the_most_similar_unvisited_chunk_for_each_necessary_one():
    vectors = np.array(
        [
            [1.0, 0.0, 0.0],  # 0: necessary anchor A
            [0.0, 1.0, 0.0],  # 1: necessary anchor B
            [0.0, 0.0, 1.0],  # 2: unrelated
            [0.8, 0.6, 0.0],  # 3: closest to A, second to B
            [0.1, 0.995, 0.0],  # 4: closest to B
            [0.6, 0.8, 0.0],  # 5
        ]
    )
    assert refill([0, 1], vectors, [2, 3, 4, 5], kept=2, k=5) == [3, 4]
    # both anchors prefer 3 when 4 is not a candidate: the second takes the next best (a chunk is picked once)
    assert refill([0, 1], vectors, [2, 3, 5], kept=2, k=5) == [3, 5]
    # the context may reach k + 1 but no more: one pick always, then stop once kept + picked reaches k
    assert refill([0, 1], vectors, [2, 3, 4, 5], kept=5, k=5) == [3]
    assert refill([0, 1], vectors, [2, 3, 4, 5], kept=4, k=5) == [3]
    assert refill([0], vectors, [], kept=1, k=5) == []
    assert top_up([0, 3], range(6), {0, 1, 3}, k=4) == [0, 3, 2, 4]


def test_stop_rule_and_best_update_in_both_variants():
    assert should_stop(0.1, 1) and not should_stop(0.1, 0) and not should_stop(0.2, 1)  # strict < θ in refinement
    assert should_stop(0.1, 0, rule="or") and should_stop(0.9, 1, rule="or") and not should_stop(0.9, 0, rule="or")
    with pytest.raises(ValueError):
        should_stop(0.1, 1, rule="xor")
    assert is_better(0.3, 0, math.inf, 0) and is_better(0.3, 1, 0.3, 0)  # ≤: equal DSE judged sufficient wins
    assert not is_better(0.1, 0, 0.3, 1)  # never trade a sufficient best for an insufficient context
    assert not is_better(0.4, 1, 0.3, 0)


def test_select_answer_takes_the_unique_mode_else_r0():
    assert select_answer(["Lyon", "The Paris", "paris.", "Lyon", "Paris"]) == "The Paris"
    assert select_answer(["Lyon", "Paris", "Paris", "Lyon"]) == "Lyon"  # tie → r₀
    assert select_answer([" Nice "]) == "Nice" and select_answer([]) == ""


def test_parse_self_evaluation_reads_the_first_yes_or_no_word():
    assert parse_self_evaluation("Yes.") == 1 and parse_self_evaluation("No, it does not.") == 0
    assert parse_self_evaluation("I do not know") is None  # "no" inside "not"/"know" is not a verdict
    assert parse_self_evaluation("") is None


def test_document_text_joins_chunks_by_index_and_drops_overlaps():
    doc = "Alpha beta gamma. Delta epsilon."
    pieces = [(1, doc[11:23], 11, 23), (0, doc[0:17], 0, 17), (2, doc[24:32], 24, 32)]  # overlap, then a gap
    assert document_text(pieces) == "Alpha beta gamma. Delta epsilon."
    assert document_text([(1, "two", None, None), (0, "one", None, None)]) == "one two"
    assert document_text([]) == ""


def test_settings_are_validated():
    DenseRAGSettings().validate()
    for bad in (
        {"k": 0},
        {"theta": -0.1},
        {"tau": 1.5},
        {"candidates": 3},
        {"max_iterations": 0},
        {"stop_rule": "xor"},
        {"necessity_rule": "other"},
        {"refill_from": "all"},
        {"rephrase_temperature": -1.0},
        {"chunking": "none"},
        {"chunk_overlap": 512},
        {"rephrase_length_factor": 0},
        {"rephrase_max_new_tokens": 0},
    ):
        with pytest.raises(ConfigError):
            DenseRAGSettings(**bad).validate()


# --------------------------------------------------------------------------------------------- scripted fakes

DOCS = [  # (doc_id, title, text): one sentence each, so each document is one semantic chunk
    ("topic", "Hamlet", "Hamlet is a famous play about a Danish prince."),
    ("noise", "Marlowe", "Marlowe was a playwright and a rival of many."),
    ("f1", "Denmark", "Denmark is a country in northern Europe."),
    ("f2", "Elsinore", "Elsinore is a town with an old castle."),
    ("f3", "Prince", "A prince is the son of a monarch."),
    ("other", "Globe", "The Globe was a theatre in London."),
    ("answer", "Author", "Shakespeare wrote Hamlet around the year 1600."),
]
QUESTION = "Who is the author of Hamlet?"
# cosine to the question ranks the documents in DOCS order; "answer" is the closest to "topic", "other" is not
VECTORS = [
    ("author of", [1.0, 0.0, 0.0, 0.0, 0.0]),
    ("famous play", [0.9, 0.0, 0.0, 0.4, 0.0]),
    ("rival", [0.8, 0.6, 0.0, 0.0, 0.0]),
    ("country", [0.7, 0.0, 0.714, 0.0, 0.0]),
    ("castle", [0.6, 0.0, 0.8, 0.0, 0.0]),
    ("son of", [0.5, 0.0, 0.866, 0.0, 0.0]),
    ("globe", [0.4, 0.0, 0.0, 0.0, 0.917]),
    ("wrote hamlet", [0.3, 0.0, 0.0, 0.954, 0.0]),
]


def scripted_qa(chunks: list[str]) -> str:
    """ "Shakespeare" once the answer chunk is in; a rephrased topic/noise chunk confuses the model ("Unknown");
    the topic chunk alone misleads it ("Marlowe")."""
    if any("wrote hamlet" in c.lower() for c in chunks):
        return "Shakespeare"
    if any(c == c.upper() and ("FAMOUS PLAY" in c or "RIVAL" in c) for c in chunks):
        return "Unknown"
    if any("famous play" in c.lower() for c in chunks):
        return "Marlowe"
    return "Unknown"


def _chunks(block: str) -> list[str]:
    return [re.sub(r"^\[\d+\] ", "", line) for line in block.split("\n") if line]


@dataclass
class _Out:
    text: str
    built: Any = None
    finish_reason: str = "stop"


@dataclass
class _Built:
    text: str
    n_tokens: int = 10
    truncated: bool = False


class ScriptedGenerator:
    """Rephrases by upper-casing, answers by ``qa(chunks)``, self-evaluates by ``judge_reply(chunks)``."""

    def __init__(self, counter: CostCounter, qa=scripted_qa, judge_reply=None) -> None:
        self.counter, self.qa = counter, qa
        self.judge_reply = judge_reply or (
            lambda chunks: "Yes." if "wrote hamlet" in " ".join(chunks).lower() else "No."
        )
        self.prompts: list[str] = []
        self.caps: dict[str, int] = {}  # prompt -> the max_new_tokens it was generated with
        self.cut_rephrasings: set[str] = set()  # chunk texts whose rephrasing stops at its cap ("length")

    def render_chat(self, message, system=None):
        return "CHAT\x1f" + message

    def build_prompt(self, question, context=None, template=None, *, max_new_tokens, system=None, **kwargs):
        return _Built(("EVAL\x1f" if template else "QA\x1f") + (context or ""))

    def generate(self, prompts, *, max_new_tokens, temperature=0.0, stop=None, seed=None, **kwargs):
        self.counter.lm_calls += len(prompts)  # LM calls count prompts
        self.counter.lm_batches += 1
        self.prompts.extend(prompts)
        out = []
        for prompt in prompts:
            kind, _, body = prompt.partition("\x1f")
            self.caps[prompt] = max_new_tokens
            if kind == "CHAT":
                assert body.startswith(REPHRASE_PROMPT.split("{chunk}")[0])
                chunk = body.rsplit("Passage: ", 1)[1]
                out.append(_Out(chunk.upper(), finish_reason="length" if chunk in self.cut_rephrasings else "stop"))
            elif kind == "EVAL":
                out.append(_Out(self.judge_reply(_chunks(body))))
            else:
                out.append(_Out(self.qa(_chunks(body))))
        return out


class FakeRetriever:
    def __init__(self, order: list[int], counter: CostCounter) -> None:
        self.order, self.counter = order, counter

    def search(self, queries, k):
        self.counter.retrieval_calls += 1
        hits = self.order[:k]
        return [SimpleNamespace(indices=np.array(hits), scores=np.linspace(1.0, 0.5, len(hits))) for _ in queries]


class FakeEmbedder:
    """Vectors by keyword (first match in ``VECTORS``), L2-normalised."""

    def __init__(self) -> None:
        self.texts = 0

    def encode(self, texts):
        self.texts += len(texts)
        rows = [next(np.array(v) for key, v in VECTORS if key in t.lower()) for t in texts]
        matrix = np.array(rows, dtype=np.float32).reshape(len(texts), 5)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def scripted_tools(order=None, docs=DOCS, embedder=None, **generator_kwargs) -> tuple[Tools, ScriptedGenerator]:
    import datasets

    counter = CostCounter()
    corpus = datasets.Dataset.from_dict(
        {
            "chunk_id": [f"{d}#0" for d, _, _ in docs],
            "doc_id": [d for d, _, _ in docs],
            "title": [t for _, t, _ in docs],
            "text": [x for _, _, x in docs],
            "index": [0] * len(docs),
        }
    )
    generator = ScriptedGenerator(counter, **generator_kwargs)
    tools = Tools(
        generator=generator,
        retriever=FakeRetriever(list(range(len(docs))) if order is None else order, counter),
        corpus=corpus,
        counter=counter,
        judge=AnswerEquivalenceJudge(counter=counter),
        embedder=embedder or FakeEmbedder(),
    )
    return tools, generator


def _names(answer) -> list[str]:
    return [s.name for s in answer.trace.steps]


def test_a_certain_question_stops_after_the_first_dense():
    tools, _ = scripted_tools(qa=lambda chunks: "Shakespeare")
    answer = DenseRAG(tools).answer({"question": QUESTION})
    assert answer.text == "Shakespeare"
    assert _names(answer) == ["retrieve", "dense", "select_answer"]
    dense = answer.trace.find("dense")
    assert dense.detail["certain"] and dense.detail["dse"] == 0.0 and len(dense.detail["answers"]) == 6
    assert dense.cost["lm_calls"] == 5 + 6  # 5 chunks rephrased, the 6 contexts (C₀ and 5 single edits) answered
    # C₀ = the top 5 of DENSE-RAG's own chunks of the 7 retrieved documents, ranked by cosine (7 chunks + question)
    assert answer.trace.find("retrieve").detail["ids"] == [f"{d}#f0" for d, _, _ in DOCS[:5]]
    assert tools.embedder.texts == len(DOCS) + 1 and answer.trace.fallbacks == 0 and answer.trace.retrieved


def test_an_uncertain_question_prunes_the_misleading_chunk_and_refills_the_answer_chunk():
    tools, generator = scripted_tools()
    answer = DenseRAG(tools).answer({"question": QUESTION})
    assert _names(answer) == ["retrieve", "dense", "semantic_chunking", "refine", "refine", "select_answer"]
    dense = answer.trace.find("dense").detail
    assert not dense["certain"] and dense["answers"] == [
        "Marlowe",
        "Unknown",
        "Unknown",
        "Marlowe",
        "Marlowe",
        "Marlowe",
    ]
    assert dense["dse"] == pytest.approx(0.636514, abs=1e-5)  # clusters 4 + 2
    chunking = answer.trace.find("semantic_chunking").detail
    assert chunking["documents"] == 7 and chunking["pool"] == [f"{d}#s0" for d, _, _ in DOCS]
    first, second = [s for s in answer.trace.steps if s.name == "refine"]
    assert first.detail["classes"] == {
        "topic#s0": NECESSARY,
        "noise#s0": UNNECESSARY,
        "f1#s0": CERTAIN,
        "f2#s0": CERTAIN,
        "f3#s0": CERTAIN,
    }
    assert first.detail["pruned"] == ["noise#s0"]
    assert first.detail["added"] == ["answer#s0"] and first.detail["topped_up"] == []  # not "other", the next by rank
    assert first.detail["self_eval"] == {"reply": "No.", "flag": 0}
    assert second.detail["ids"] == ["topic#s0", "f1#s0", "f2#s0", "f3#s0", "answer#s0"]
    assert second.detail["dse"] == 0.0 and second.detail["stop"] == "success"
    final = answer.trace.find("select_answer").detail
    assert answer.text == "Shakespeare" and final["success"] and final["iteration"] == 2
    # the memo: iteration 1 re-uses the fixed context's rephrasings and answers (same chunk texts) → only the
    # self-evaluation and the ablation answers of the 2 uncertain chunks are generated; iteration 2 rephrases only
    # the new chunk, answers its 6 new contexts and self-evaluates (LM calls count prompts)
    assert first.cost["lm_calls"] == 1 + 2 and second.cost["lm_calls"] == 1 + 6 + 1
    assert first.detail["new_rephrasings"] == 0 and second.detail["new_rephrasings"] == 1
    assert sum(1 for p in generator.prompts if p.startswith("CHAT")) == len(DOCS) - 1  # "other" never rephrased
    totals = answer.trace.totals()
    # NLI pairs: the 2 distinct answers of C₀'s replies (Marlowe / Unknown) both ways, again when iteration 1 re-runs
    # DENSE on the same replies, and r₀ against the one differing ablation answer ("Unknown") both ways; iteration
    # 2's replies all agree (no pair)
    assert [s.cost["nli_pairs"] for s in answer.trace.steps] == [0, 2, 0, 2 + 2, 0, 0]
    assert totals["retrieval_calls"] == 1 and totals["nli_pairs"] == 6 and answer.trace.fallbacks == 0


def test_an_unparseable_self_evaluation_counts_a_fallback_and_blocks_the_and_rule():
    tools, _ = scripted_tools(judge_reply=lambda chunks: "banana")
    answer = DenseRAG(tools).answer({"question": QUESTION})
    refines = [s for s in answer.trace.steps if s.name == "refine"]
    assert len(refines) == 2 and refines[-1].detail["stop"] == "no_necessary_chunk"
    assert answer.trace.fallbacks == 2 and all("self-evaluation" in n for n in answer.trace.notes)
    final = answer.trace.find("select_answer").detail
    assert not final["success"] and final["source"] == "lowest_dse_context" and final["dse"] == 0.0
    assert answer.text == "Shakespeare"
    # the prose's OR rule (or no self-evaluation at all) stops on DSE alone
    for settings in (DenseRAGSettings(stop_rule="or"), DenseRAGSettings(self_evaluation=False)):
        tools, _ = scripted_tools(judge_reply=lambda chunks: "banana")
        again = DenseRAG(tools, settings).answer({"question": QUESTION})
        assert again.trace.find("select_answer").detail["success"]


def test_variants_only_removing_and_chunking_only():
    tools, _ = scripted_tools()
    pruned = DenseRAG(tools, DenseRAGSettings(refill_from="none")).answer({"question": QUESTION})
    refines = [s for s in pruned.trace.steps if s.name == "refine"]
    assert refines[1].detail["ids"] == ["topic#s0", "f1#s0", "f2#s0", "f3#s0"]  # the context shrinks
    assert refines[-1].detail["stop"] == "unchanged" and pruned.text == "Marlowe"
    tools, _ = scripted_tools()
    chunking = DenseRAG(tools, DenseRAGSettings(refine=False)).answer({"question": QUESTION})
    assert _names(chunking) == ["retrieve", "dense", "semantic_chunking", "generate"] and chunking.text == "Marlowe"


def test_max_iterations_caps_the_refinement(monkeypatch):
    tools, _ = scripted_tools()
    answer = DenseRAG(tools, DenseRAGSettings(max_iterations=1)).answer({"question": QUESTION})
    refines = [s for s in answer.trace.steps if s.name == "refine"]
    assert len(refines) == 1 and refines[0].detail["stop"] == "max_iterations"
    assert answer.text == "Marlowe"  # the best (only) context: mode of its replies


def test_empty_retrieval_answers_closed_book_with_a_fallback():
    tools, _ = scripted_tools(order=[])
    answer = DenseRAG(tools).answer({"question": QUESTION})
    assert _names(answer) == ["retrieve", "generate"] and answer.text == "Unknown"
    assert answer.trace.fallbacks == 1 and "closed-book" in answer.trace.notes[0] and not answer.trace.retrieved


def test_dense_rag_needs_a_judge_and_an_embedder():
    tools, _ = scripted_tools()
    tools.embedder = None
    with pytest.raises(ConfigError):
        DenseRAG(tools)


# --------------------------------------------------------------------------------------------- own chunks, caps

KEYWORDS = ("alpha", "beta", "gamma", "delta")


class CountEmbedder:
    """Any text: keyword counts plus a small constant, L2-normalised (so every text has a vector)."""

    def encode(self, texts):
        rows = np.array([[t.lower().count(k) for k in KEYWORDS] + [0.1] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


LONG = " ".join(
    f"Sentence {i} is about {KEYWORDS[i % 4]} matters and says a little more about them." for i in range(16)
)  # one document of 1,105 characters, stored as ONE corpus passage (data.chunking: none)


def test_c0_is_the_top_k_of_dense_rags_own_512_64_chunks_of_the_retrieved_documents():
    """Spec §3 steps 1–3 / §6.1: the retrieved documents are cut into 512-character chunks with a 64-character
    overlap (LangChain's recursive splitter) and ranked by cosine, whatever the corpus's own chunking."""
    from workbench.data.chunkers import LANGCHAIN_SEPARATORS, RecursiveChunker

    assert len(LONG) == 1105
    tools, generator = scripted_tools(docs=[("long", "Long", LONG)], embedder=CountEmbedder(), qa=lambda c: "x")
    question = "Which delta matters?"
    answer = DenseRAG(tools, DenseRAGSettings(k=2)).answer({"question": question})
    chunks = RecursiveChunker(512, LANGCHAIN_SEPARATORS, overlap=64).chunk(LONG, "long")
    assert [(c.start, c.end) for c in chunks] == [(0, 506), (446, 953), (891, 1105)]  # ≤ 512 chars, ≤ 64 overlap
    vectors = CountEmbedder().encode([c.text for c in chunks])
    cosine = vectors @ CountEmbedder().encode([question])[0]
    best = np.argsort(-cosine, kind="stable")[:2]
    retrieve = answer.trace.find("retrieve").detail
    assert retrieve["chunking"] == "recursive" and retrieve["chunks"] == 3 and retrieve["documents"] == ["long"]
    assert retrieve["ids"] == [f"long#f{i}" for i in best] and retrieve["scores"] == pytest.approx(cosine[best])
    assert answer.trace.passages == retrieve["ids"]
    # each chunk reaches the prompts whole (not cut at passage_chars = 400)
    answered = next(p for p in generator.prompts if p.startswith("QA"))
    assert all(f"Long: {chunks[i].text}" in answered for i in best) and max(len(chunks[i].text) for i in best) > 400
    # chunking "corpus": the run's passages as they are (here the whole document, cut at passage_chars)
    tools, _ = scripted_tools(docs=[("long", "Long", LONG)], embedder=CountEmbedder(), qa=lambda c: "x")
    corpus = DenseRAG(tools, DenseRAGSettings(k=2, chunking="corpus")).answer({"question": question})
    assert corpus.trace.find("retrieve").detail["ids"] == ["long#0"]


def test_each_rephrasing_may_take_one_and_a_half_times_its_chunk_and_a_cut_one_is_counted():
    """Spec A7: a rephrasing's budget is at least 1.5× its chunk's token count (the old fixed 96 tokens cut chunks of
    up to ~130 tokens); a rephrasing that stops at its cap is counted."""
    long_text = " ".join(["aa"] * 100)  # 300 characters: one chunk; "Long: aa aa …" = 101 tokens (words here)
    docs = [("long", "Long", long_text), ("short", "Short", "tiny text here")]
    tools, generator = scripted_tools(docs=docs, embedder=CountEmbedder(), qa=lambda c: "x")
    generator.tokenizer = lambda text, add_special_tokens=False: {"input_ids": text.split()}
    generator.cut_rephrasings = {f"Long: {long_text}"}
    answer = DenseRAG(tools, DenseRAGSettings(k=2)).answer({"question": "What?"})
    caps = {p.rsplit("Passage: ", 1)[1]: cap for p, cap in generator.caps.items() if p.startswith("CHAT")}
    # ⌈1.5 × 101⌉ = 152 → 160 (a multiple of 16); ⌈1.5 × 4⌉ = 6 → 16
    assert caps == {f"Long: {long_text}": 160, "Short: tiny text here": 16}
    dense = answer.trace.find("dense").detail
    assert sorted(dense["rephrase_caps"]) == [16, 160] and dense["rephrase_capped"] == 1
    assert answer.trace.fallbacks == 1
    assert answer.trace.notes == ["1 rephrasing(s) cut at their length cap: part of the chunk may be missing"]
    # rephrase_max_new_tokens caps the budget (a quick-run knob): both cut to 50 → still counted when cut
    tools, generator = scripted_tools(docs=docs, embedder=CountEmbedder(), qa=lambda c: "x")
    generator.tokenizer = lambda text, add_special_tokens=False: {"input_ids": text.split()}
    DenseRAG(tools, DenseRAGSettings(k=2, rephrase_max_new_tokens=50)).answer({"question": "What?"})
    assert sorted(cap for p, cap in generator.caps.items() if p.startswith("CHAT")) == [16, 50]


# --------------------------------------------------------------------------------------------- tiny models


class AlwaysEntail(NLIJudge):
    kind = "always_entail"

    def _predict(self, premises, hypotheses, questions):
        return np.tile(np.array([0.0, 0.0, 1.0], dtype=np.float32), (len(premises), 1))


@pytest.fixture
def tiny_tools(tools, tiny_encoder_dir):
    from workbench.backends.embedder import Embedder

    tools.embedder = Embedder(tiny_encoder_dir, cache=False, counter=tools.counter)
    return tools


EXAMPLE = {"question": "What is the capital of France?", "answers": ["Paris"]}


def test_tiny_model_certain_question_runs_one_dense(tiny_tools):
    tiny_tools.judge = AlwaysEntail(counter=tiny_tools.counter)
    answer = DenseRAG(tiny_tools, DenseRAGSettings(rephrase_max_new_tokens=6)).answer(EXAMPLE)
    assert _names(answer) == ["retrieve", "dense", "select_answer"]
    dense = answer.trace.find("dense")
    assert dense.detail["certain"] and dense.detail["dse"] == 0.0
    chunks = answer.trace.find("retrieve").detail["ids"]
    # the random model's rephrasings are empty (each falls back to its chunk), so every single-edit context is C₀:
    # one prompt per chunk rephrased, one answer prompt for the one distinct context
    assert dense.detail["rephrase_fallbacks"] == len(chunks) and set(dense.detail["answers"]) == {""}
    assert dense.cost["lm_calls"] == len(chunks) + 1 and dense.cost["decoded_tokens"] > 0
    assert answer.text == select_answer(dense.detail["answers"])


def test_tiny_model_uncertain_question_chunks_and_refines_within_the_cap(tiny_tools, monkeypatch):
    monkeypatch.setattr(method, "Dense", lambda rule: SimpleNamespace(raw=lambda row: 1.0))  # always uncertain
    settings = DenseRAGSettings(k=2, max_iterations=3, rephrase_max_new_tokens=6, self_eval_max_new_tokens=3)
    answer = DenseRAG(tiny_tools, settings).answer(EXAMPLE)
    names = _names(answer)
    assert names[:3] == ["retrieve", "dense", "semantic_chunking"] and names[-1] == "select_answer"
    refines = [s for s in answer.trace.steps if s.name == "refine"]
    assert 1 <= len(refines) <= 3 and set(names[3:-1]) == {"refine"}
    reasons = {"pool_exhausted", "unchanged", "max_iterations", "no_necessary_chunk", "all_important", "empty_context"}
    assert refines[-1].detail["stop"] in reasons
    assert len(answer.trace.find("semantic_chunking").detail["pool"]) > 2  # the pool is larger than the context
    assert "classes" in refines[0].detail  # the k = 2 context does not exhaust the pool: chunks are classified
    assert all(s.cost["lm_calls"] >= 1 for s in refines)  # at least the self-evaluation
    assert not answer.trace.find("select_answer").detail["success"]
    totals = answer.trace.to_dict()["totals"]
    # the random model answers "" under every context (and every ablation): no two answers differ, so no NLI pair
    # is ever judged; each iteration self-evaluates once
    replies = [a for s in [answer.trace.find("dense"), *refines] for a in s.detail["answers"]]
    replies += [a for s in refines for a in s.detail.get("ablation_answers", {}).values()]
    assert set(replies) == {""} and totals["nli_pairs"] == 0
    assert all(s.detail["self_eval"]["reply"] == "" for s in refines)
    assert totals["lm_calls"] >= 3 and totals["seconds"] > 0
