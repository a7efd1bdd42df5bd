"""InSemRAG on a tiny chunked corpus: enrichment and weights reach the hybrid search, damaged chunks are repaired
from their neighbours, coverage drives follow-up rounds, one final generator call, every decision traced; the two
controllers (heuristic, prompted LM with a fake generator) and the settings' validation."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.backends.retrievers import RetrievalResult, Retriever
from workbench.core.errors import ConfigError
from workbench.methods.controller import (
    INTENT_TEMPLATES,
    ChannelWeights,
    Completeness,
    Compression,
    Controller,
    Coverage,
    Elements,
    Enrichment,
    FollowUp,
    HeuristicController,
    PromptedLMController,
    Relevance,
    completeness_checks,
    content_words,
    extractive_stitch,
)
from workbench.methods.insemrag import InSemRAG, InSemRAGSettings

# rows deliberately interleave documents: neighbours must be found by (doc_id, index), not by row
CHUNKS = [
    ("eiffel", 0, "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris."),
    ("louvre", 0, "Louvre", "The Louvre is the most visited art museum in the world."),
    ("eiffel", 1, "Eiffel Tower", "it was designed by the engineering company of Gustave Eiffel and"),
    ("louvre", 1, "Louvre", "It houses the Mona Lisa, painted by Leonardo da Vinci."),
    ("eiffel", 2, "Eiffel Tower", "Construction of the tower finished in 1889 for the World's Fair."),
    ("seine", 0, "Seine", "The Seine is a river that flows through Paris to the English Channel."),
    ("hamlet", 0, "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
]
TEXT = {f"{d}#{i}": text for d, i, _, text in CHUNKS}
QUESTION = {"question": "Who designed the Eiffel Tower?", "answers": ["Gustave Eiffel"]}
# full: every chunk reaches the fusion; corpus: these tests search the corpus's own chunks (CHUNKS)
FAST = {"k1": 7, "k": 4, "candidates_per_channel": 7, "dense_index": "full", "chunking": "corpus"}


def chunked_corpus(chunks=None):
    """A chunked corpus dataset from ``(doc_id, index, title, text)`` rows (default :data:`CHUNKS`)."""
    import datasets

    chunks = CHUNKS if chunks is None else chunks
    return datasets.Dataset.from_dict(
        {
            "chunk_id": [f"{d}#{i}" for d, i, _, _ in chunks],
            "doc_id": [d for d, _, _, _ in chunks],
            "title": [t for _, _, t, _ in chunks],
            "text": [x for _, _, _, x in chunks],
            "index": [i for _, i, _, _ in chunks],
        }
    )


class Spy(Retriever):
    """Wraps a retriever and records the texts its ``_search`` receives."""

    def __init__(self, inner):
        self.inner, self.corpus, self.counter, self.seen = inner, inner.corpus, inner.counter, []

    def _search(self, queries, k):
        self.seen.extend(queries)
        return self.inner._search(queries, k)


def spied_hybrid(tools):
    from workbench.backends.retrievers import BM25Retriever, DenseRetriever, HybridRetriever

    dense = Spy(DenseRetriever(tools.corpus, tools.embedder, counter=tools.counter))
    sparse = Spy(BM25Retriever(tools.corpus, counter=tools.counter))
    return HybridRetriever({"dense": dense, "sparse": sparse}, counter=tools.counter), dense, sparse


class Scripted(Controller):
    """A controller that plays back fixed decisions and counts its calls."""

    name = "scripted"

    def __init__(self, *, weights=None, completeness=1.0, coverage=(1.0,), keywords=("Gustave", "Eiffel")):
        self.weights = weights or {"dense": 0.5, "sparse": 0.5}
        self.complete = completeness
        self.coverage_scores = list(coverage)
        self.keywords = list(keywords)
        self.calls: dict[str, int] = {}
        self.follow_ups = 0

    def _count(self, name: str, n: int = 1) -> None:
        self.calls[name] = self.calls.get(name, 0) + n

    def enrich(self, query: str) -> Enrichment:
        self._count("enrich")
        return Enrichment(dense=f"paraphrase of {query}", keywords=self.keywords, raw="scripted enrich")

    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        self._count("weights")
        return ChannelWeights(weights={c: self.weights.get(c, 0.0) for c in channels}, raw="scripted weights")

    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        self._count("refine", len(passages))
        return [Relevance(score=1.0 - i / 100, keep=True, raw="Yes") for i, _ in enumerate(passages)]

    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        self._count("completeness", len(passages))
        score = self.complete
        return [Completeness(score=score(p) if callable(score) else score, raw="scripted") for p in passages]

    def compress(self, query, previous, center, following, max_tokens) -> Compression:
        self._count("compress")
        return Compression(text=" | ".join(x for x in (previous, center, following) if x), raw="scripted compress")

    def elements(self, question: str) -> Elements:
        self._count("elements")
        return Elements(elements=["designer", "year"], raw="scripted elements")

    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        self._count("coverage")
        score = self.coverage_scores.pop(0) if len(self.coverage_scores) > 1 else self.coverage_scores[0]
        return Coverage(elements=list(elements), scores=[1.0, score], raw="scripted coverage")

    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        self._count("follow_up")
        self.follow_ups += 1
        return FollowUp(query=f"follow-up {self.follow_ups} about {element}", raw="scripted follow-up")


def names(trace):
    return [s.name for s in trace.steps]


# ------------------------------------------------------------------------------------------------------ method
def test_enrichment_and_weights_reach_the_hybrid_search(ctools):
    hybrid, dense, sparse = spied_hybrid(ctools)
    method = InSemRAG(ctools, Scripted(weights={"dense": 0.0, "sparse": 1.0}), InSemRAGSettings(**FAST), hybrid)
    seen_weights = []
    search = method.retriever.search
    method.retriever.search = lambda queries, k, weights=None: (
        seen_weights.append(weights) or search(queries, k, weights=weights)
    )
    answer = method.answer(QUESTION)

    assert dense.seen == [f"paraphrase of {QUESTION['question']}"]
    assert sparse.seen == ["Gustave Eiffel"]
    assert seen_weights == [[{"dense": 0.0, "sparse": 1.0}]]
    retrieve = answer.trace.find("retrieve").detail["per_query"][0]
    assert retrieve["views"] == {"dense": dense.seen[0], "sparse": "Gustave Eiffel"}
    assert retrieve["weights"] == {"dense": 0.0, "sparse": 1.0}
    # all weight on the sparse channel: the fused score is the min-max normalised BM25 score of the keywords
    sparse_scores = {c["chunk_id"]: c["channels"]["sparse"] for c in retrieve["candidates"]}
    hits = [v for v in sparse_scores.values() if v is not None]
    low, high = min(hits), max(hits)
    for c in retrieve["candidates"]:
        raw = sparse_scores[c["chunk_id"]]
        assert c["fused"] == pytest.approx(0.0 if raw is None else (raw - low) / (high - low))
    assert retrieve["candidates"][0]["chunk_id"] == "eiffel#1" and set(sparse_scores) == set(TEXT)
    assert all(set(c["channels"]) == {"dense", "sparse"} for c in retrieve["candidates"])


class Empty(Retriever):
    """A channel that never finds anything (an empty index, a query with no known term)."""

    def __init__(self, inner):
        self.corpus, self.counter = inner.corpus, inner.counter

    def _search(self, queries, k):
        return [RetrievalResult.from_arrays(q, self.corpus, np.zeros(0, np.int64), np.zeros(0)) for q in queries]


def test_empty_retrieval_answers_closed_book_with_one_generator_call_and_a_fallback(ctools):
    from workbench.backends.retrievers import BM25Retriever, HybridRetriever

    empty = Empty(BM25Retriever(ctools.corpus, counter=ctools.counter))
    hybrid = HybridRetriever({"dense": empty, "sparse": empty}, counter=ctools.counter)
    controller = Scripted(coverage=(0.0,))  # coverage stays below γ: every follow-up round finds nothing too
    before = ctools.counter.lm_calls
    answer = InSemRAG(ctools, controller, InSemRAGSettings(**FAST), hybrid).answer(QUESTION)

    trace = answer.trace
    assert not trace.retrieved and trace.find("generate").detail["ids"] == []
    assert any("no evidence" in note for note in trace.notes) and trace.fallbacks >= 1
    assert controller.calls.get("refine", 0) == controller.calls.get("compress", 0) == 0  # nothing to judge or repair
    assert controller.calls["enrich"] == 3  # the first round and two follow-up rounds (at most 3), all empty
    assert ctools.counter.lm_calls - before == 1  # the scripted controller is free: only the final answer


def test_heuristic_damage_below_tau_repairs_with_previous_and_next_chunk_of_the_same_document(ctools):
    answer = InSemRAG(ctools, HeuristicController(), InSemRAGSettings(**FAST)).answer(QUESTION)
    trace = answer.trace

    damage = trace.find("damage").detail
    assert "eiffel#1" in damage["damaged"]
    scores = {c["chunk_id"]: c["score"] for c in damage["chunks"]}
    assert scores["eiffel#1"] < 0.5 <= scores["eiffel#0"]
    repair = next(s.detail for s in trace.steps if s.name == "repair" and s.detail["chunk_id"] == "eiffel#1")
    assert (repair["previous_id"], repair["next_id"]) == ("eiffel#0", "eiffel#2")  # not the louvre rows between
    stitched = f"{TEXT['eiffel#0']} {TEXT['eiffel#1']} {TEXT['eiffel#2']}"
    assert repair["stitched"] == stitched and repair["text"] == stitched
    assert repair["sources"] == ["eiffel#0", "eiffel#1", "eiffel#2"]
    generate = trace.find("generate").detail
    assert "rep:eiffel#1" in generate["ids"] and "eiffel#1" not in generate["ids"]
    assert names(trace).count("generate") == 1 and trace.totals()["lm_calls"] == 1
    assert trace.retrieved and trace.fallbacks == 0
    json.dumps(trace.to_dict())


def test_repair_at_document_boundaries_and_unrepairable_single_chunks(ctools):
    controller = Scripted(completeness=0.0, keywords=("Louvre", "Seine", "Mona"))
    answer = InSemRAG(ctools, controller, InSemRAGSettings(**{**FAST, "k": 7})).answer(QUESTION)
    repairs = {s.detail["chunk_id"]: s.detail for s in answer.trace.steps if s.name == "repair"}
    assert repairs["louvre#1"]["previous_id"] == "louvre#0" and repairs["louvre#1"]["next_id"] is None
    assert repairs["louvre#1"]["text"] == f"{TEXT['louvre#0']} | {TEXT['louvre#1']}"
    assert repairs["louvre#0"]["text"] == f"{TEXT['louvre#0']} | {TEXT['louvre#1']}"
    assert repairs["seine#0"]["unrepairable"] and "text" not in repairs["seine#0"]
    ids = answer.trace.find("generate").detail["ids"]
    assert {"rep:louvre#0", "rep:louvre#1", "seine#0"} <= set(ids)
    assert controller.calls["compress"] == sum(1 for r in repairs.values() if not r.get("unrepairable"))
    # every kept chunk is damaged (completeness 0): the two single-chunk documents have no neighbour — each is an
    # unrepairable chunk, counted as a fallback (spec §20 "Neighbors"), and nothing else falls back
    unrepairable = sorted(cid for cid, r in repairs.items() if r.get("unrepairable"))
    assert unrepairable == ["hamlet#0", "seine#0"] and answer.trace.fallbacks == 2
    assert sorted(answer.trace.notes) == [
        f"unrepairable chunk {cid}: no neighbour in its document, kept as it is" for cid in unrepairable
    ]


@pytest.mark.parametrize(
    ("coverage", "gamma", "rounds"),
    [((0.0,), 0.5, 3), ((0.0, 1.0), 0.5, 2), ((0.0,), 0.0, 1), ((1.0,), 0.5, 1), ((1.0,), 1.5, 3)],
)
def test_coverage_below_gamma_runs_follow_up_rounds_up_to_three(ctools, coverage, gamma, rounds):
    controller = Scripted(coverage=coverage)
    answer = InSemRAG(ctools, controller, InSemRAGSettings(**FAST, gamma=gamma)).answer(QUESTION)
    trace = answer.trace
    assert names(trace).count("coverage") == rounds
    assert names(trace).count("follow_up") == rounds - 1
    assert names(trace).count("retrieve") == rounds
    assert trace.find("generate").detail["rounds"] == rounds
    assert names(trace).count("generate") == 1 and trace.totals()["lm_calls"] == 1
    if rounds > 1:
        follow = trace.find("follow_up").detail
        assert follow["uncovered"] == (["year"] if gamma <= 1 else ["designer", "year"])
        round_two = [s.detail["query"] for s in trace.steps if s.name == "enrich" and s.detail["round"] == 2]
        assert round_two == follow["queries"] and round_two[0].startswith("follow-up 1")


def test_trace_holds_every_controller_decision_with_its_raw_reply(ctools):
    controller = Scripted(coverage=(0.0, 1.0), completeness=lambda text: 0.0 if text.startswith("it ") else 1.0)
    trace = InSemRAG(ctools, controller, InSemRAGSettings(**FAST)).answer(QUESTION).trace
    steps = trace.steps

    def decisions(name, key="decision"):
        return [s.detail[key] for s in steps if s.name == name and key in s.detail]

    assert len(decisions("elements")) == controller.calls["elements"] == 1
    assert len(decisions("enrich")) == controller.calls["enrich"] == 2
    assert len(decisions("weights")) == controller.calls["weights"] == 2
    assert sum(len(d) for d in decisions("refine", "decisions")) == controller.calls["refine"]
    assert sum(len(d) for d in decisions("damage", "chunks")) == controller.calls["completeness"]
    assert len(decisions("repair")) == controller.calls["compress"] >= 1
    assert len(decisions("coverage")) == controller.calls["coverage"] == 2
    assert sum(len(d) for d in decisions("follow_up", "decisions")) == controller.calls["follow_up"] == 1
    for d in decisions("enrich") + decisions("coverage") + decisions("repair"):
        assert d["raw"].startswith("scripted") and d["fallback"] is False
    assert all(d["raw"] == "Yes" for ds in decisions("refine", "decisions") for d in ds)
    assert trace.fallbacks == 0
    json.dumps(trace.to_dict())


def test_ablations_skip_the_controller_and_invalid_weights_fall_back_to_uniform(ctools):
    controller = Scripted(weights={"dense": -1.0, "sparse": 0.0})
    trace = InSemRAG(ctools, controller, InSemRAGSettings(**FAST)).answer(QUESTION).trace
    assert trace.find("weights").detail["weights"] == {"dense": 0.5, "sparse": 0.5} and trace.fallbacks == 1

    controller = Scripted()
    settings = InSemRAGSettings(**FAST, enrich=False, dynamic_weights=False, refine=False, repair=False)
    trace = InSemRAG(ctools, controller, settings).answer(QUESTION).trace
    assert set(controller.calls) == {"elements", "coverage"}
    assert trace.find("enrich").detail["views"] == {"dense": QUESTION["question"], "sparse": QUESTION["question"]}
    assert trace.find("damage") is None and len(trace.find("refine").detail["kept"]) == FAST["k"]


def test_default_retriever_is_built_from_the_tools(ctools):
    method = InSemRAG(ctools, HeuristicController(), InSemRAGSettings(**FAST, channels=("dense", "sparse", "extended")))
    assert method.channels == ("dense", "sparse", "extended")
    views = method.answer(QUESTION).trace.find("retrieve").detail["per_query"][0]["views"]
    assert views["extended"] == f"{QUESTION['question']} designed Eiffel Tower"
    ctools.embedder = None
    with pytest.raises(ConfigError, match="embedder"):
        InSemRAG(ctools, HeuristicController())


# ------------------------------------------------------------------------------------------------------ prompted
class FakeGenerator:
    """A stand-in generator: ``reply(message)`` gives the generated text; optional next-token log-probs."""

    def __init__(self, reply, logprobs=None):
        self.reply, self.logprobs, self.prompts = reply, logprobs, []
        if logprobs is not None:
            self.next_token_logprobs = lambda prompts, options: np.array([logprobs(p, options) for p in prompts])

    def render_chat(self, message, system=None):
        return message

    def generate(self, prompts, *, max_new_tokens, temperature=0.0, stop=("\n",)):
        self.prompts.extend(prompts)
        return [SimpleNamespace(text=self.reply(p), finish_reason="stop") for p in prompts]


GARBAGE = FakeGenerator(lambda prompt: "~~ ?? ~~")
PASSAGES = ["Eiffel Tower: it was designed by Gustave Eiffel's company.", "Louvre: The Louvre is a museum."]


def test_prompted_controller_falls_back_on_unparseable_replies():
    c = PromptedLMController(GARBAGE)
    assert c.score_mode == "generate"
    q = QUESTION["question"]
    enrich = c.enrich(q)
    assert enrich.fallback and enrich.dense == q and enrich.keywords == content_words(q) and enrich.raw == "~~ ?? ~~"
    weights = c.channel_weights(q, ["dense", "sparse"])
    assert weights.fallback and weights.weights == {"dense": 0.5, "sparse": 0.5}
    assert all(r.fallback and r.keep and r.score == 0.5 for r in c.refine(q, PASSAGES))
    assert all(r.fallback and r.score == 1.0 for r in c.completeness(q, PASSAGES))
    compressed = c.compress(q, "Before it.", "the middle", "After it.", 50)
    assert compressed.fallback and compressed.text == "Before it. the middle After it."
    elements = c.elements(q)
    assert elements.fallback and elements.elements == [q]
    coverage = c.coverage(q, ["designer"], PASSAGES)
    assert coverage.fallback and coverage.scores == [1.0] and coverage.score == 1.0
    follow = c.follow_up(q, "year built", PASSAGES)
    assert follow.fallback and follow.query == "year built"


def test_prompted_controller_fallbacks_are_counted_in_the_trace(ctools):
    trace = InSemRAG(ctools, PromptedLMController(GARBAGE), InSemRAGSettings(**FAST)).answer(QUESTION).trace
    pool = trace.find("retrieve").detail["per_query"][0]["candidates"]
    kept = trace.find("refine").detail["kept"]
    # elements + enrich + weights + one per candidate (refine) + one per kept chunk (damage) + coverage
    assert trace.fallbacks == 4 + len(pool) + len(kept)
    assert all(note.startswith("controller ") for note in trace.notes)
    assert names(trace).count("coverage") == 1  # unreadable coverage counts as covered: the loop stops
    assert trace.find("refine").detail["fallbacks"] == len(pool)
    assert trace.totals()["lm_calls"] == 1  # the fake controller's calls are not the generator's


def well_formed(prompt: str) -> str:
    if "Prepare this request" in prompt:
        return (
            'Sure! ```json\n{"dense": "Which company designed the Eiffel Tower?", "keywords": ["Eiffel Tower", '
            '"designed"]}\n```'
        )
    if "What kind of request" in prompt:
        return "A) a lookup"
    if "helps answer" in prompt:
        return "Yes." if "Eiffel" in prompt.split("Passage:")[1] else "No"
    if "read and used on its own" in prompt:
        return "0.2" if "it was" in prompt else "90%"
    if "Rewrite MIDDLE" in prompt:
        return "Here is the passage: The Eiffel Tower was designed by the company of Gustave Eiffel."
    if "separate pieces" in prompt:
        return '["who designed the Eiffel Tower", "when it was built"]'
    if "state this information" in prompt:
        return (
            "Yes" if "designed" in prompt.split("Passage:")[0] and "designed" in prompt.split("Passage:")[1] else "No"
        )
    if "standalone search query" in prompt:
        return 'Query: "When was the Eiffel Tower built?"'
    return "?"


def test_prompted_controller_parses_well_formed_replies():
    c = PromptedLMController(FakeGenerator(well_formed), score_mode="generate")
    q = QUESTION["question"]
    enrich = c.enrich(q)
    assert not enrich.fallback and enrich.dense == "Which company designed the Eiffel Tower?"
    assert enrich.keywords == ["Eiffel Tower", "designed"]
    weights = c.channel_weights(q, ["dense", "sparse"])
    assert weights.intents == {"entity": 1.0, "explanatory": 0.0, "multihop": 0.0}
    assert weights.weights == pytest.approx({"dense": 1 / 3, "sparse": 2 / 3}) and not weights.fallback
    refine = c.refine(q, PASSAGES)
    assert [(r.score, r.keep, r.fallback) for r in refine] == [(1.0, True, False), (0.0, False, False)]
    assert [r.score for r in c.completeness(q, ["it was designed by", "The Louvre is a museum."])] == [0.2, 0.9]
    compressed = c.compress(q, "The Eiffel Tower is in Paris.", "it was designed by", None, 64)
    assert (
        compressed.text == "The Eiffel Tower was designed by the company of Gustave Eiffel." and not compressed.fallback
    )
    assert "(end of the document)" in c.generator.prompts[-1]
    elements = c.elements(q)
    assert elements.elements == ["who designed the Eiffel Tower", "when it was built"] and not elements.fallback
    coverage = c.coverage(q, elements.elements, PASSAGES)
    assert (
        coverage.scores == [1.0, 0.0] and coverage.best == [0, 0] and coverage.uncovered(0.5) == ["when it was built"]
    )
    assert len(coverage.raw) == 2 and len(coverage.raw[0]) == len(PASSAGES)
    assert c.follow_up(q, "when it was built", PASSAGES).query == "When was the Eiffel Tower built?"


def test_prompted_controller_reads_next_token_logprobs():
    def logprobs(prompt, options):
        if options == ["A", "B", "C"]:
            return np.log([0.2, 0.6, 0.2])
        if "Louvre" in prompt:
            return np.full(len(options), -np.inf)  # no usable verdict
        return np.log([0.5, 0.1, 0.3, 0.1])  # Yes, yes, No, no

    c = PromptedLMController(FakeGenerator(well_formed, logprobs))
    assert c.score_mode == "logprobs"
    weights = c.channel_weights("Why do leaves fall?", ["dense", "sparse", "extended"])
    pi = {"entity": 0.2, "explanatory": 0.6, "multihop": 0.2}
    expected = {ch: sum(p * INTENT_TEMPLATES[i][ch] for i, p in pi.items()) for ch in ("dense", "sparse", "extended")}
    assert weights.weights == pytest.approx(expected) and weights.intents["explanatory"] == pytest.approx(0.6)
    first, second = c.refine("q", PASSAGES)
    assert first.score == pytest.approx(0.6) and first.keep and not first.fallback
    assert second.fallback and second.keep and second.raw == {"yes": -math.inf, "no": -math.inf}


def test_prompted_controller_with_well_formed_replies_drives_the_method(ctools):
    controller = PromptedLMController(FakeGenerator(well_formed), score_mode="generate")
    trace = InSemRAG(ctools, controller, InSemRAGSettings(**FAST)).answer(QUESTION).trace
    assert trace.fallbacks == 0
    assert trace.find("enrich").detail["views"]["sparse"] == "Eiffel Tower designed"
    assert "louvre#0" not in trace.find("refine").detail["kept"]
    repair = next(s.detail for s in trace.steps if s.name == "repair")
    assert repair["chunk_id"] == "eiffel#1" and repair["text"].startswith("The Eiffel Tower was designed")
    assert trace.find("follow_up").detail["queries"] == ["When was the Eiffel Tower built?"]
    assert names(trace).count("generate") == 1 and trace.totals()["lm_calls"] == 1


# ------------------------------------------------------------------------------------------------------ heuristic
@pytest.mark.parametrize(
    ("text", "damaged"),
    [
        ("it was designed by the engineering company of Gustave Eiffel and", True),
        ("He then announced his resignation shortly after the investigation concluded.", True),
        ("As a result, the policy was widely criticized by experts.", True),
        ("The tower (finished in 1889 was built for the fair.", False),
        ("The tower (finished in 1889 was built for the fair", True),
        ("The Eiffel Tower is a wrought-iron lattice tower in Paris.", False),
        ('He said "yes.', True),
    ],
)
def test_heuristic_completeness_from_sentence_boundaries(text, damaged):
    score = HeuristicController().completeness("q", [text])[0].score
    assert (score < 0.5) is damaged
    assert 0.0 <= score <= 1.0


def test_heuristic_checks_weights_and_stitch():
    assert completeness_checks("Short but whole.", min_words=50)["long_enough"] is False
    assert HeuristicController(min_words=50).completeness("q", ["Short but whole."])[0].score == pytest.approx(0.7)
    h = HeuristicController()
    entity = h.channel_weights("Where does SpongeBob SquarePants live?", ["dense", "sparse"]).weights
    explain = h.channel_weights("Why did the work from home trend start to boom in recent years?", ["dense", "sparse"])
    assert entity["sparse"] > entity["dense"] and explain.weights["dense"] > explain.weights["sparse"]
    assert sum(entity.values()) == pytest.approx(1.0)
    assert h.enrich("Who wrote Hamlet in 1600?").keywords == ["wrote", "Hamlet", "1600"]
    stitched = extractive_stitch("One two three. Four five six.", "Center words here.", "Seven eight. Nine ten.", 8)
    assert stitched == "Four five six. Center words here. Seven eight."
    assert len(extractive_stitch(None, "a b c d e f g h i j", None, 4).split()) == 4
    coverage = h.coverage("q", ["Eiffel company", "Hamlet"], PASSAGES)
    assert coverage.scores == [1.0, 0.0] and coverage.score == 0.0
    assert h.follow_up("q", "Hamlet author", PASSAGES).query == "Hamlet author"
    assert h.follow_up("q", "Eiffel Tower height", PASSAGES).query == "height"


# ------------------------------------------------------------------------------------------------------ settings
def test_settings_defaults_and_validation():
    s = InSemRAGSettings().validate()
    assert (s.tau, s.gamma, s.max_rounds, s.k, s.compression_length) == (0.5, 0.5, 3, 10, None)
    assert (s.chunking, s.chunk_tokens, s.repair_length) == ("fixed", 64, 64)  # L = the chunk length (spec §7.3)
    assert InSemRAGSettings(compression_length=96).repair_length == 96
    assert InSemRAGSettings(channels=["dense", "sparse", "extended"]).validate().channels == (
        "dense",
        "sparse",
        "extended",
    )
    json.dumps(s.to_dict())
    for bad in (
        {"tau": -0.1},
        {"gamma": float("nan")},
        {"tau": True},
        {"max_rounds": 0},
        {"k": 11, "k1": 10},
        {"compression_length": 2.5},
        {"channels": ("dense", "bm42")},
        {"channels": ()},
        {"channels": ("dense", "dense")},
        {"refine": "yes"},
        {"answer_max_tokens": 0},
        {"chunking": "none"},
        {"chunk_tokens": 0},
        {"compression_length": 0},
    ):
        with pytest.raises(ConfigError, match="insemrag"):
            InSemRAGSettings(**bad).validate()


def test_prompted_controller_on_the_tiny_generator_runs_end_to_end(ctools):
    controller = PromptedLMController(ctools.generator, enrich_tokens=12, elements_tokens=12, follow_up_tokens=8)
    settings = InSemRAGSettings(**FAST, compression_length=16, max_rounds=2, tau=1.5)  # τ > 1: every chunk damaged
    trace = InSemRAG(ctools, controller, settings).answer(QUESTION).trace
    assert controller.score_mode == "logprobs"  # log-prob scoring on a random model
    assert names(trace).count("generate") == 1 and trace.find("generate").cost["lm_calls"] == 1
    for step in trace.steps:
        if step.name == "refine":
            assert all(0.0 <= d["score"] <= 1.0 for d in step.detail["decisions"])
    # the random model generates only special tokens (empty text): every generated decision falls back — elements
    # (S6: the question itself), enrich (S1: the query and its content words), each repair with a neighbour (S5: the
    # extractive stitch), each follow-up (S8: the element, here the question, already asked: the loop stops) — and a
    # damaged chunk without a neighbour is unrepairable; the log-prob decisions (S2, S3, S4, S7) never fall back
    assert trace.find("elements").detail["decision"]["elements"] == [QUESTION["question"]]
    expected = []
    for step in trace.steps:
        if step.name == "elements":
            expected.append("controller elements: no element list in the reply")
        elif step.name == "enrich":
            expected.append("controller enrich: unusable dense and keywords in the reply: used the fallback")
            assert step.detail["views"]["dense"] == step.detail["query"]
        elif step.name == "repair" and step.detail.get("unrepairable"):
            chunk = step.detail["chunk_id"]
            expected.append(f"unrepairable chunk {chunk}: no neighbour in its document, kept as it is")
        elif step.name == "repair":
            expected.append("controller compress: empty or too short compression: extractive stitch used")
        elif step.name == "follow_up":
            expected += ["controller follow_up: no query in the reply: element used"] * len(step.detail["decisions"])
            assert step.detail["queries"] == [] and trace.find("generate").detail["stop"] == "no_new_queries"
    repairs = [s.detail for s in trace.steps if s.name == "repair"]
    assert any(r.get("unrepairable") for r in repairs) and not all(r.get("unrepairable") for r in repairs)
    assert trace.notes == expected and trace.fallbacks == len(expected)
    json.dumps(trace.to_dict())


# ------------------------------------------------------------------------------------------------------ own view
def test_insemrag_searches_its_own_token_windows_of_the_documents_and_repairs_from_neighbours(ctools):
    """Spec §5 / D16: the documents are rebuilt from the corpus (here already chunked by sentence) and cut into
    non-overlapping windows of ``chunk_tokens`` encoder tokens; a damaged window is repaired from the windows
    before and after it (with the corpus rows as they are, a one-passage-per-document corpus has no neighbours)."""
    from workbench.data.chunkers import FixedSizeChunker
    from workbench.methods.insemrag import encoder_tokenizer

    # every window is retrieved (the view has about 30), so the middle Eiffel window is always repaired
    settings = InSemRAGSettings(k1=64, k=64, candidates_per_channel=64, dense_index="full", chunk_tokens=8)
    controller = Scripted(completeness=0.0, coverage=(1.0,))
    method = InSemRAG(ctools, controller, settings)
    view = method.tools.corpus
    tokenizer = encoder_tokenizer(ctools.embedder)
    eiffel = " ".join(TEXT[f"eiffel#{i}"] for i in range(3))  # rebuilt by index, rows interleaved in the corpus
    windows = FixedSizeChunker(8, 0, unit="tokens", tokenizer=tokenizer).chunk(eiffel, "eiffel")
    assert len(windows) >= 3
    rows = [i for i, d in enumerate(view["doc_id"]) if d == "eiffel"]
    assert [view["chunk_id"][i] for i in rows] == [f"eiffel#w{w.index}" for w in windows]
    assert [view["text"][i] for i in rows] == [w.text for w in windows]
    assert [view["title"][i] for i in rows] == ["Eiffel Tower"] * len(windows)
    assert method.corpus_view == {
        "chunking": "fixed",
        "chunk_tokens": 8,
        "unit": "encoder tokens" if tokenizer is not None else "words",
        "chunks": len(view["chunk_id"]),
        "documents": 4,
    }
    assert ctools.corpus["chunk_id"][0] == "eiffel#0"  # the run's corpus is untouched
    trace = method.answer(QUESTION).trace
    assert trace.find("retrieve").detail["corpus"] == method.corpus_view
    repairs = {s.detail["chunk_id"]: s.detail for s in trace.steps if s.name == "repair"}
    middle = repairs["eiffel#w1"]
    assert (middle["previous_id"], middle["next_id"]) == ("eiffel#w0", "eiffel#w2")
    assert middle["sources"] == ["eiffel#w0", "eiffel#w1", "eiffel#w2"] and middle["length"] == 8
    assert all(cid.startswith(("eiffel#w", "louvre#w", "seine#w", "hamlet#w")) for cid in repairs)
    # a document of one window has no neighbour: unrepairable, counted
    single = [cid for cid, r in repairs.items() if r.get("unrepairable")]
    assert trace.fallbacks == len(single) and all("no neighbour" in n for n in trace.notes)
    # the same view for every InSemRAG on these tools (built once)
    assert InSemRAG(ctools, HeuristicController(), settings).tools is method.tools
    # a given retriever searches tools.corpus as it is: only with chunking "corpus"
    hybrid, _, _ = spied_hybrid(ctools)
    with pytest.raises(ConfigError, match="chunking"):
        InSemRAG(ctools, controller, InSemRAGSettings(), hybrid)


def test_repaired_chunks_reach_the_coverage_check_and_the_prompt_whole(ctools, monkeypatch):
    """A repaired chunk (bounded by L) is not cut to ``passage_chars`` in the coverage check or the final prompt;
    raw chunks still are."""
    long_repair = "Gustave Eiffel's company designed and built the tower. " * 12  # 672 characters
    seen: dict[str, list] = {"coverage": [], "prompts": []}

    class LongRepair(Scripted):
        def compress(self, query, previous, center, following, max_tokens):
            self._count("compress")
            return Compression(text=long_repair, raw="scripted")

        def coverage(self, question, elements, passages):
            seen["coverage"].append(list(passages))
            return super().coverage(question, elements, passages)

    real = ctools.generator.generate
    monkeypatch.setattr(
        ctools.generator, "generate", lambda prompts, **kw: seen["prompts"].extend(prompts) or real(prompts, **kw)
    )
    ctools.passage_chars = 40
    controller = LongRepair(completeness=lambda text: 0.0 if text == TEXT["eiffel#1"] else 1.0)
    settings = InSemRAGSettings(**FAST, compression_length=200)
    trace = InSemRAG(ctools, controller, settings).answer(QUESTION).trace
    assert "rep:eiffel#1" in trace.find("generate").detail["ids"]
    repaired = f"Eiffel Tower: {long_repair.strip()}"
    assert len(repaired) > 400 and repaired in seen["coverage"][-1]
    assert repaired in seen["prompts"][-1]
    raw = [t for t in seen["coverage"][-1] if t != repaired]
    assert raw and all(t.endswith("...") for t in raw)  # raw chunks: still cut at passage_chars


# ------------------------------------------------------------------------------------------------------ keep filter
class Dropping(Scripted):
    """A controller whose relevance filter drops every candidate, with scores given per chunk id (default 0.1)."""

    def __init__(self, scores: dict[str, float], **kwargs):
        super().__init__(**kwargs)
        self.scores = scores

    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        self._count("refine", len(passages))
        out = []
        for passage in passages:
            chunk = next((cid for cid, text in TEXT.items() if text in passage), "")
            out.append(Relevance(score=self.scores.get(chunk, 0.1), keep=False, raw="No"))
        return out


def test_a_round_whose_filter_drops_every_candidate_keeps_the_top_k2_by_score_and_counts_a_fallback(ctools):
    """Before issue 14 such a round added no evidence (6 of 10 reference questions were answered closed-book); now
    Er = the top k2 by relevance score, ties broken by the fused rank (spec §7.1), and it is a counted fallback."""
    scores = {"louvre#1": 0.45, "seine#0": 0.3, "hamlet#0": 0.3, "eiffel#2": 0.3}
    controller = Dropping(scores, coverage=(1.0,))
    settings = InSemRAGSettings(**{**FAST, "k": 3})
    trace = InSemRAG(ctools, controller, settings).answer(QUESTION).trace

    refine = trace.find("refine").detail
    fused = [c["chunk_id"] for c in trace.find("retrieve").detail["per_query"][0]["candidates"]]
    tied = sorted(["seine#0", "hamlet#0", "eiffel#2"], key=fused.index)  # equal scores: fused rank decides
    assert refine["kept"] == ["louvre#1", *tied[:2]]
    assert refine["all_dropped"] is True and all(not d["keep"] for d in refine["decisions"])
    note = f"controller refine: the relevance filter dropped all {len(fused)} candidates: kept the top 3 by "
    note += "relevance score"
    assert refine["fallback_note"] == note and refine["fallbacks"] == 1
    assert trace.notes == [note] and trace.fallbacks == 1
    assert trace.retrieved and trace.find("generate").detail["ids"] == refine["kept"]
    assert not any("no evidence" in n for n in trace.notes)


def test_a_round_that_keeps_something_is_no_fallback(ctools):
    trace = InSemRAG(ctools, Scripted(), InSemRAGSettings(**FAST)).answer(QUESTION).trace
    assert trace.find("refine").detail["all_dropped"] is False and trace.fallbacks == 0


def test_keep_threshold_is_the_prompted_filter_and_settings_and_controller_must_agree(ctools):
    def logprobs(prompt, options):
        if options == ["A", "B", "C"]:
            return np.log([0.6, 0.2, 0.2])
        yes = 0.7 if "Eiffel" in prompt.split("Passage:")[-1] else 0.4  # p(Yes) / (p(Yes) + p(No))
        return np.log([yes, 1e-9, 1 - yes, 1e-9])

    def relevance(threshold):
        controller = PromptedLMController(FakeGenerator(well_formed, logprobs), keep_threshold=threshold)
        return controller.refine("q", PASSAGES)

    assert [r.keep for r in relevance(0.5)] == [True, False]
    assert [r.keep for r in relevance(0.3)] == [True, True]
    assert [r.keep for r in relevance(0.8)] == [False, False]
    assert [r.score for r in relevance(0.8)] == pytest.approx([0.7, 0.4])

    controller = PromptedLMController(FakeGenerator(well_formed, logprobs), keep_threshold=0.3)
    trace = InSemRAG(ctools, controller, InSemRAGSettings(**FAST, keep_threshold=0.3)).answer(QUESTION).trace
    refine = trace.find("refine").detail
    assert refine["keep_threshold"] == 0.3 and not refine["all_dropped"]
    assert {d["chunk_id"] for d in refine["decisions"] if d["keep"]} == {d["chunk_id"] for d in refine["decisions"]}
    with pytest.raises(ConfigError, match="keep_threshold") as caught:
        InSemRAG(ctools, controller, InSemRAGSettings(**FAST))  # 0.5 in the settings, 0.3 in the controller
    assert caught.value.where == "insemrag.keep_threshold"
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(ConfigError, match="keep_threshold"):
            InSemRAGSettings(keep_threshold=bad).validate()
        with pytest.raises(ValueError, match="keep_threshold"):
            PromptedLMController(GARBAGE, keep_threshold=bad)


def test_prompted_filter_that_drops_everything_on_the_tiny_model_still_leaves_evidence(ctools):
    """The reference failure on a real controller: p(Yes) below the threshold for every candidate (here forced by
    ``keep_threshold`` 1.0) — through the registry, as a recipe sets it."""
    from workbench.methods.registry import build_method

    options = {**FAST, "keep_threshold": 1.0, "max_rounds": 1, "repair": False}
    options.update(enrich_tokens=4, elements_tokens=4, follow_up_tokens=4)
    method = build_method("insemrag", ctools, options, None)
    assert method.controller.keep_threshold == 1.0 and method.controller.generator is ctools.generator
    trace = method.answer(QUESTION).trace
    refine = trace.find("refine").detail
    assert refine["all_dropped"] and len(refine["kept"]) == FAST["k"]
    scores = {d["chunk_id"]: d["score"] for d in refine["decisions"]}
    assert [scores[c] for c in refine["kept"]] == sorted(scores.values(), reverse=True)[: FAST["k"]]
    assert trace.retrieved and sum("dropped all" in n for n in trace.notes) == 1


def test_a_study_trial_keep_threshold_reaches_the_prompted_controller(tools):
    """The study passes a trial's parameters as options (tuning/objective.py): keep_threshold must reach the filter."""
    from workbench.methods.registry import build_method

    tools.embedder = object()  # InSemRAG's dense channel needs one; nothing is embedded here
    method = build_method("insemrag", tools, {"keep_threshold": 0.25, "k1": 8, "k": 3}, None)
    assert method.settings.keep_threshold == 0.25 and method.controller.keep_threshold == 0.25


# ------------------------------------------------------------------------------------------------------ public hooks
@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Yes.", 1.0),
        ("  **no**, it is not", 0.0),
        ("True", 1.0),
        ("0.7", 0.7),
        ("about 70% sure", 0.7),
        ("Maybe", None),
        ("1.5", None),
        ("", None),
    ],
)
def test_parse_verdict_reads_a_generated_verdict_as_a_score(reply, score):
    from workbench.methods.controller import parse_verdict

    assert parse_verdict(reply) == (None if score is None else pytest.approx(score))


def test_query_views_give_each_channel_its_query_text(ctools):
    method = InSemRAG(ctools, HeuristicController(), InSemRAGSettings(**FAST, channels=("extended", "dense", "sparse")))
    views = method.query_views("Who designed it?", Enrichment(dense="Designer of it", keywords=["designer", "it"]))
    assert list(views) == ["extended", "dense", "sparse"]
    assert views == {
        "extended": "Who designed it? Designer of it designer it",
        "dense": "Designer of it",
        "sparse": "designer it",
    }
    empty = method.query_views("Who?", Enrichment(dense=" ", keywords=[]))
    assert empty == {"extended": "Who?", "dense": "Who?", "sparse": "Who?"}
