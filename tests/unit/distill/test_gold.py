"""The gold-derived labels: intact and damaged chunks, relevance from gold-document membership with hard negatives,
coverage from gold-answer presence, the best channel-weight intent from the fused gold rank, and the labeler that
puts them together with InSemRAG's own retrieval and the controller's own prompt rendering."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from tests.unit.distill.conftest import CHUNKS, chunked_corpus
from workbench.distill.gold import (
    CONNECTIVES,
    DAMAGE_KINDS,
    GoldLabeler,
    answer_in,
    best_intent,
    completeness_examples,
    coverage_examples,
    damage_chunk,
    gold_rank,
    intact_chunk,
    relevance_examples,
    template_weights,
)
from workbench.methods.controller import (
    CONTROLLER_SYSTEM,
    ENTAIL_PROMPT,
    INTENT_TEMPLATES,
    RELEVANCE_PROMPT,
    WEIGHTS_PROMPT,
    completeness_checks,
)

TEXT = (
    "Paris is the capital and largest city of France. It lies on the river Seine. "
    "The city is known for the Eiffel Tower, the Louvre and its cafés. As a result, tourism is a large industry."
)


def test_intact_chunks_are_whole_sentences_with_a_clean_start_and_end():
    for seed in range(20):
        chunk = intact_chunk(TEXT, random.Random(seed), max_words=25)
        assert chunk is not None and len(chunk.split()) <= 25
        assert TEXT.find(chunk) in (0, TEXT.find("The city"))  # never from "It lies" or "As a result"
        checks = completeness_checks(chunk)
        assert checks["starts_clean"] and checks["ends_clean"]
    assert intact_chunk("It was built later. As a result, it grew.", random.Random(0), 30) is None
    assert intact_chunk("", random.Random(0), 30) is None
    # one sentence longer than the budget is still taken whole
    assert intact_chunk(TEXT, random.Random(0), max_words=3).endswith(".")


def test_damaged_chunks_take_every_kind_and_are_damaged():
    chunk = "Paris is the capital and largest city of France. The city lies on the river Seine."
    seen = set()
    for seed in range(60):
        damaged, kind = damage_chunk(chunk, random.Random(seed), title="Paris")
        seen.add(kind)
        words, original = damaged.split(), chunk.split()
        if kind == "cut_start":
            assert words == original[len(original) - len(words) :] and 1 <= len(original) - len(words) <= 8
        elif kind == "cut_end":
            assert chunk.startswith(damaged) and not damaged.endswith(".") and len(words) >= 9
        elif kind == "connective":
            assert damaged.startswith(CONNECTIVES) and damaged.endswith(chunk[1:])
            assert not completeness_checks(damaged)["starts_clean"]
        else:
            assert damaged == "It" + chunk[len("Paris") :]
    assert seen == set(DAMAGE_KINDS)
    # no title at the start: never a pronoun swap; "The" is lower-cased behind a connective
    kinds = {damage_chunk("The Seine is a river of France.", random.Random(s))[1] for s in range(40)}
    assert "pronoun" not in kinds
    damaged = next(
        d for s in range(40) if (d := damage_chunk("The Seine is a river.", random.Random(s)))[1] == "connective"
    )[0]
    assert damaged.startswith(CONNECTIVES) and damaged.endswith(" the Seine is a river.")


def test_completeness_examples_are_balanced_and_seeded():
    passages = [("Paris", TEXT), ("Nothing", "it was. as a result, more.")]
    examples = completeness_examples(passages, random.Random(3), max_words=30)
    assert [(label, kind == "intact") for _, label, kind in examples] == [(True, True), (False, False)]
    assert examples == completeness_examples(passages, random.Random(3), max_words=30)


def test_relevance_positives_come_from_gold_documents_and_negatives_are_the_best_ranked_others():
    def c(doc, i):
        return SimpleNamespace(doc_id=doc, chunk_id=f"{doc}#{i}")

    pool = [c("a", 0), c("g", 1), c("b", 0), c("c", 0), c("d", 0), c("e", 0), c("f", 0), c("h", 0)]
    pairs = relevance_examples(pool, {"g"}, [c("g", 0), c("g", 1)], negatives_per_positive=3, max_positives=2)
    assert [(p.chunk_id, label) for p, label in pairs] == [
        ("g#1", True),  # in the pool first
        ("g#0", True),  # then a gold chunk the pool missed; g#1 is not repeated
        ("a#0", False),
        ("b#0", False),
        ("c#0", False),
        ("d#0", False),
        ("e#0", False),
        ("f#0", False),
    ]
    assert relevance_examples(pool, {"zz"}, []) == []  # no gold chunk: no positive, no negative
    only_one = relevance_examples(pool, {"g"}, [], negatives_per_positive=3)
    assert [label for _, label in only_one] == [True, False, False, False]


def test_coverage_is_gold_answer_presence_balanced_per_element():
    passages = ["Seine: a river.", "Paris: the Parisian metro.", "Paris: on the Seine.", "Oslo: in Norway."]
    triples = coverage_examples(["q", "e"], passages, ["Seine"], max_positives=2)
    assert [(e, p, label) for e, p, label in triples] == [
        ("q", passages[0], True),
        ("q", passages[2], True),
        ("e", passages[0], True),
        ("e", passages[2], True),
        ("q", passages[1], False),
        ("q", passages[3], False),
        ("e", passages[1], False),
        ("e", passages[3], False),
    ]
    assert coverage_examples(["q"], passages, ["Lyon"]) == []
    assert answer_in("the Parisian metro", ["Paris"]) is False and answer_in("in PARIS.", ["Paris"]) is True
    assert answer_in("anything", []) is False


def test_gold_rank_and_the_best_intent_tie_to_the_most_uniform_template():
    assert gold_rank(["x", "g", "y", "g"], {"g"}, 3) == (0.5, pytest.approx(2 / 3))
    assert gold_rank(["x", "y"], {"g"}, 2) == (0.0, 0.0)
    weights = template_weights(INTENT_TEMPLATES, ["dense", "sparse"])
    assert weights["entity"] == pytest.approx({"dense": 1 / 3, "sparse": 2 / 3})
    assert all(sum(w.values()) == pytest.approx(1.0) for w in weights.values())
    assert best_intent({"entity": (1.0, 0.5), "explanatory": (0.5, 1.0), "multihop": (0.5, 0.5)}, weights) == "entity"
    assert best_intent({"entity": (0.5, 0.5), "explanatory": (0.5, 1.0), "multihop": (0.5, 0.5)}, weights) == (
        "explanatory"
    )
    tie = {"entity": (0.5, 0.5), "explanatory": (0.5, 0.5), "multihop": (0.5, 0.5)}
    assert best_intent(tie, weights) == "multihop"  # (0.34, 0.33) normalised: the closest to uniform
    skewed = template_weights({**INTENT_TEMPLATES, "multihop": {"dense": 0.9, "sparse": 0.1}}, ["dense", "sparse"])
    assert best_intent(tie, skewed) == "entity"  # (1/3, 2/3) is now the closest
    assert best_intent({i: (0.0, 0.0) for i in tie}, weights) is None


class Renderer:
    """Renders like a chat model; running it would fail (the labeler must not run a model)."""

    def render_chat(self, message, system=None):
        return f"<sys>{system}</sys><user>{message}</user><assistant>"

    def generate(self, *args, **kwargs):
        raise AssertionError("the gold labeler ran a model")

    next_token_logprobs = generate


@pytest.fixture(scope="module")
def insemrag(tiny_encoder_dir):
    from workbench.backends.cost import CostCounter
    from workbench.backends.embedder import Embedder
    from workbench.methods.base import Tools
    from workbench.methods.controller import HeuristicController
    from workbench.methods.insemrag import InSemRAG, InSemRAGSettings

    tools = Tools(
        generator=None,
        retriever=None,
        corpus=chunked_corpus(),
        counter=CostCounter(),
        embedder=Embedder(tiny_encoder_dir),
        passage_chars=400,
    )
    settings = InSemRAGSettings(k1=5, k=3, candidates_per_channel=7, dense_index="full", chunking="corpus")
    return InSemRAG(tools, HeuristicController(), settings)


EXAMPLE = {
    "id": "q1",
    "question": "Which river flows through Paris?",
    "answers": ["Seine"],
    "gold_passages": [{"doc_id": "paris", "title": "Paris", "text": CHUNKS[0][3] + " " + CHUNKS[2][3]}],
}


def test_labeler_builds_gold_rows_with_the_controllers_rendering(insemrag):
    renderer = Renderer()
    labeler = GoldLabeler(insemrag, renderer, seed=1)
    rows = labeler.label(EXAMPLE, "q1", extra_elements=["the river of Paris"])
    assert all(r.source == "gold" and r.question_id == "q1" for r in rows)
    q = EXAMPLE["question"]

    def render(message):
        return renderer.render_chat(message, system=CONTROLLER_SYSTEM)

    refine = [r for r in rows if r.decision == "refine"]
    yes = [r for r in refine if r.target == "Yes"]
    assert {r.input for r in yes} == {
        render(RELEVANCE_PROMPT.format(query=q, passage=f"Paris: {text}"))
        for doc, _, _, text in CHUNKS
        if doc == "paris"
    }
    no = [r for r in refine if r.target == "No"]
    assert 3 <= len(no) <= 5  # k1 = 5: every non-gold candidate of the pool (fewer than 3 per positive)
    assert all("Passage: Paris:" not in r.input for r in no) and all(r.score == 0.0 for r in no)
    assert all(r.score == 1.0 and r.single_token for r in yes)

    complete = [r for r in rows if r.decision == "completeness"]
    assert [r.target for r in complete] == ["Yes", "No"] and complete[0].input.startswith(f"<sys>{CONTROLLER_SYSTEM}")

    coverage = [r for r in rows if r.decision == "coverage"]
    for r in coverage:
        passage = r.input.split("Passage: ")[1].split("\n\nDoes")[0]
        assert (r.target == "Yes") == ("Seine" in passage)
        element = r.input.split("Information needed: ")[1].split("\n\n")[0]
        assert r.input == render(ENTAIL_PROMPT.format(element=element, passage=passage))
    assert {r.input.split("Information needed: ")[1].split("\n\n")[0] for r in coverage} == {q, "the river of Paris"}
    assert sum(r.target == "Yes" for r in coverage) == sum(r.target == "No" for r in coverage) > 0

    (weights,) = [r for r in rows if r.decision == "channel_weights"]
    assert weights.input == render(WEIGHTS_PROMPT.format(query=q)) and weights.target in ("A", "B", "C")
    assert math.isnan(weights.score)
    assert labeler.stats["questions"] == 1 and labeler.stats["gold_in_view"] == 1
    assert labeler.stats["refine_rows"] == len(refine)


def test_labeler_gives_no_relevance_or_weight_label_without_a_gold_chunk(insemrag):
    example = {**EXAMPLE, "gold_passages": [{"doc_id": "berlin", "title": "Berlin", "text": "Berlin is a city."}]}
    rows = GoldLabeler(insemrag, Renderer()).label(example, "q2")
    assert {r.decision for r in rows} <= {"completeness", "coverage"}
    assert [r.target for r in rows if r.decision == "completeness"] == []  # "Berlin is a city." is too short
    assert any(r.decision == "coverage" for r in rows)  # coverage needs the answer only


def test_labeler_damage_is_seeded_by_seed_and_question(insemrag):
    def chunks(seed, qid):
        rows = GoldLabeler(insemrag, Renderer(), seed=seed).label(EXAMPLE, qid)
        return [r.input for r in rows if r.decision == "completeness"]

    assert chunks(0, "q1") == chunks(0, "q1")
    assert len({tuple(chunks(s, "q1")) for s in range(8)}) > 1
