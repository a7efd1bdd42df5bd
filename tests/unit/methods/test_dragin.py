"""DRAGIN (workbench/methods/dragin/): RIND and QFS on hand-made entropies and attention matrices (Su et al., 2024,
§3.1–3.2), the trigger and cut on a hand-made reading, its settings and backend needs, the method on a tiny model,
and an answer through the runtime from a bundle that names it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from workbench.core.errors import ConfigError
from workbench.methods.dragin import rind
from workbench.methods.dragin.method import find_trigger
from workbench.methods.dragin.reading import AnswerReading
from workbench.methods.dragin.settings import DraginSettings
from workbench.methods.registry import METHOD_TABLE, build_method, configure


# ------------------------------------------------------------------------------------------------ RIND and QFS
def test_attention_influence_is_the_largest_weight_any_later_token_pays():
    a = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.7, 0.3, 0.0, 0.0],
            [0.1, 0.6, 0.3, 0.0],
            [0.5, 0.2, 0.1, 0.2],
        ]
    )
    # a_max(0) = max(0.7, 0.1, 0.5); a_max(1) = max(0.6, 0.2); a_max(2) = 0.1; the last token: no later token
    assert rind.attention_influence(a).tolist() == pytest.approx([0.7, 0.6, 0.1, 0.0])


def test_rind_is_entropy_times_mean_one_influence_times_significance():
    entropies = [2.0, 1.0, 0.5, 3.0]
    influence = [0.2, 0.2, 0.4, 0.2]
    groups = [[0, 1], [2], [3]]  # a two-token word, then two one-token words
    scores = rind.rind_scores(entropies, influence, groups, [True, True, False])
    # H = (1.5, 0.5, 3.0); a = (0.4, 0.4, 0.2) rescaled to mean 1 over 3 words: (1.2, 1.2, 0.6); s = (1, 1, 0)
    assert scores.tolist() == pytest.approx([1.8, 0.6, 0.0])
    assert rind.rind_scores([1.0], [0.0], [[0]], [True]).tolist() == [0.0]  # no influence at all: nothing to weigh
    assert rind.first_trigger(scores, 1.2) == 0 and rind.first_trigger(scores, 0.6) == 0
    assert rind.first_trigger([0.5, 1.2, 1.3], 1.2) == 2  # strictly above the threshold
    assert rind.first_trigger(scores, 1.81) is None


def test_semantic_significance_drops_stopwords_and_punctuation():
    assert rind.is_significant("Shakespeare") and rind.is_significant("1905")
    assert not rind.is_significant("The") and not rind.is_significant("of") and not rind.is_significant("--")


def test_words_are_tied_to_the_tokens_that_overlap_them():
    text = "<s>Who wrote Hamlet?"
    spans = [(0, 0), (3, 6), (6, 9), (9, 12), (12, 16), (16, 19), (19, 20)]  # BOS; "Who", " wr", "ote", " Ham", ...
    words = rind.word_spans(text, 3)
    assert [text[a:b] for a, b in words] == ["Who", "wrote", "Hamlet"]
    assert rind.token_groups(spans, words) == [[1], [2, 3], [4, 5]]


def test_qfs_keeps_the_most_attended_significant_words_in_text_order():
    words = ["who", "wrote", "Hamlet", "the", "play", "Shakespeare"]
    groups = [[0], [1], [2, 3], [4], [5], [6]]
    weights = [0.30, 0.05, 0.10, 0.15, 0.40, 0.12, 0.20]
    # word weights: who .30 (stopword), wrote .05, Hamlet .25, the .40 (stopword), play .12, Shakespeare .20
    assert rind.qfs_query(weights, groups, words, 2) == "Hamlet Shakespeare"
    assert rind.qfs_query(weights, groups, words, 3) == "Hamlet play Shakespeare"
    assert rind.qfs_query([0.1, 0.1], [[0], [1]], ["alpha", "beta"], 1) == "alpha"  # a tie goes to the earlier word
    assert rind.qfs_query([0.5], [[0]], ["the"], 3) == ""


def test_the_trigger_cuts_before_its_word_and_queries_the_question_and_the_answer_before_it():
    # prompt "<q>Who wrote Hamlet?<a>" (tokens 0-4), answer " William Shakes" (tokens 5-7)
    text = "<q>Who wrote Hamlet?<a> William Shakes"
    answer_start = text.index(" William")
    spans = [(0, 3), (3, 6), (6, 12), (12, 19), (19, 23), (23, 31), (31, 37), (37, 39)]
    n = len(spans)
    attention = np.tril(np.full((n, n), 0.01))
    attention[6, 5] = 0.5  # " Sha" leans on " William": William's influence
    attention[7, 6] = 0.2
    attention[5, 3] = 0.6  # the trigger's first token (" William", position 5) attends to "Hamlet" most ...
    attention[5, 1] = 0.3  # ... then to "Who" (a stopword), and to the "<q>" template token
    attention[5, 0] = 0.9
    reading = AnswerReading(attention, spans, text, 5, answer_start)
    entropies = [2.0, 1.0, 1.0]  # William; Shakes = " Sha" + "kes"
    settings = DraginSettings(threshold=1.0, query_words=2)
    found = find_trigger(reading, entropies, [(3, 19)], settings)
    assert found.words == ["William", "Shakes"]
    # a = (0.5, 0.2 + 0) over two words, rescaled to (1.4286, 0.5714); H = (2.0, 1.0)
    assert found.scores == pytest.approx([2.0 * 0.5 / 0.7 * 2, 1.0 * 0.2 / 0.7 * 2])
    assert found.word == 0 and text[: found.cut] == "<q>Who wrote Hamlet?<a>"
    assert found.query == "wrote Hamlet"  # the template's "q" is no source; "Who" is a stopword
    quiet = find_trigger(reading, entropies, [(3, 19)], DraginSettings(threshold=3.0))
    assert quiet.cut is None and quiet.query == ""


# ------------------------------------------------------------------------------------------------ the spec
def test_the_settings_are_checked_at_their_own_key_and_the_spec_says_what_it_needs():
    spec = METHOD_TABLE["dragin"]
    assert spec.settings_class() is DraginSettings and spec.decide(1.3, 1.2) and not spec.decide(1.2, 1.2)
    assert configure("dragin", {}).settings == DraginSettings(threshold=1.2, query_words=35, k=3, max_retrievals=3)
    for key, value in [("threshold", -0.1), ("threshold", "high"), ("k", 0), ("query_words", 1.5)]:
        with pytest.raises(ConfigError) as bad:
            configure("dragin", {key: value})
        assert bad.value.where == f"evaluate.options.dragin.{key}"
    assert {"logprobs", "attentions"} <= spec.needs
    from workbench.tuning.space import parse_spaces

    (param,) = parse_spaces(["dragin"], {}, "study.space")["dragin"]
    assert (param.name, param.low, param.high, param.log) == ("threshold", 0.1, 20.0, True)


def test_a_served_backend_without_attentions_is_refused_in_one_line():
    from workbench.backends.capabilities import Capabilities
    from workbench.methods.backend_needs import check_served_methods

    served = Capabilities(logprobs=True, top_logprobs=20, echo=True, token_prompts=True, token_ids=True)
    with pytest.raises(ConfigError) as bad:
        check_served_methods(["dragin"], [], served, "http://127.0.0.1:8000/v1")
    message = str(bad.value)
    assert "method dragin needs" in message and "attention weights" in message and "\n" not in message
    check_served_methods(["dragin"], [], Capabilities.in_process(), "in-process")


# ------------------------------------------------------------------------------------------------ on a tiny model
@pytest.fixture(scope="module")
def peaked_lm_dir(tmp_path_factory):
    """A tiny Llama whose greedy answers are text (words to score), not one repeated special token."""
    from tests.tiny_models import build_tiny_llama

    path = tmp_path_factory.mktemp("tiny-peaked-dragin")
    return build_tiny_llama(path, seed=0, max_positions=4096, tie_embeddings=False, initializer_range=1.0)


@pytest.fixture(scope="module")
def peaked_generator(peaked_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(peaked_lm_dir, batch_size=16)


QUESTIONS = [{"question": "What is the capital of France?"}, {"question": "Which river flows through Paris?"}]


def test_dragin_cuts_retrieves_with_its_query_and_regenerates(peaked_generator):
    from tests.unit.methods.conftest import _tools_over, make_corpus

    tools = _tools_over(peaked_generator, make_corpus(), max_new_tokens=8)
    closed = [a.text for a in build_method("no_rag", tools, {}, None).answer_many(QUESTIONS)]
    never = build_method("dragin", tools, {"threshold": 1000.0}, None).answer_many(QUESTIONS)
    assert [a.text for a in never] == closed and not any(a.trace.retrieved for a in never)
    assert all(a.trace.find("rind").detail["retrieve"] is False for a in never)

    answers = build_method("dragin", tools, {"threshold": 0.0, "k": 2, "max_retrievals": 1}, None).answer_many(
        QUESTIONS
    )
    retrieved = [a for a in answers if a.trace.retrieved]
    assert retrieved, "threshold 0: any significant word with entropy and influence triggers"
    for answer, example in zip(answers, QUESTIONS, strict=True):
        steps = [s.name for s in answer.trace.steps]
        scored = answer.trace.find("rind").detail
        if not answer.trace.retrieved:
            continue
        assert steps == ["generate", "rind", "retrieve", "generate"]  # one retrieval allowed: no second RIND pass
        query = answer.trace.find("retrieve").detail["query"]
        assert (
            scored["query"] == query
            and query
            and set(query.split()) <= set(example["question"].replace("?", "").split() + scored["words"])
        )
        assert len(answer.trace.passages) == 2
        second = [s for s in answer.trace.steps if s.name == "generate"][1].detail
        assert second["round"] == 1 and answer.text.startswith(second["kept"].strip())


def test_without_query_words_dragin_searches_with_the_question(peaked_generator, monkeypatch):
    import workbench.methods.dragin.method as dragin_method
    from tests.unit.methods.conftest import _tools_over, make_corpus

    monkeypatch.setattr(dragin_method, "qfs_query", lambda *args: "")  # QFS finds no significant word
    tools = _tools_over(peaked_generator, make_corpus(), max_new_tokens=8)
    answers = build_method("dragin", tools, {"threshold": 0.0, "max_retrievals": 1}, None).answer_many(QUESTIONS)
    queries = [a.trace.find("retrieve").detail["query"] for a in answers if a.trace.find("retrieve")]
    assert queries and set(queries) <= {q["question"] for q in QUESTIONS}


def test_a_tokenizer_without_offsets_leaves_the_prompt_out_of_the_query(peaked_generator):
    from workbench.methods.dragin.reading import _prompt_spans

    class Slow:
        """The tiny tokenizer as a slow one: no offset mapping."""

        bos_token = peaked_generator.tokenizer.bos_token

        def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
            if return_offsets_mapping:
                raise NotImplementedError("return_offset_mapping is not available when using Python tokenizers")
            return peaked_generator.tokenizer(text, add_special_tokens=add_special_tokens)

    fast_ids, fast_spans = _prompt_spans(peaked_generator.tokenizer, "Who wrote Hamlet?", 100)
    slow_ids, slow_spans = _prompt_spans(Slow(), "Who wrote Hamlet?", 100)
    assert slow_ids == fast_ids and any(a < b for a, b in fast_spans) and all(a == b for a, b in slow_spans)


# ------------------------------------------------------------------------------------------------ through the runtime
def test_a_bundle_with_dragin_answers_through_the_runtime(tmp_path, peaked_lm_dir, tiny_encoder_dir):
    from tests.bundle_run import FIXTURE, write_corpus
    from workbench.bundle.manifest import content_digest
    from workbench.runtime import load_bundle
    from workbench.scoring.decisions import bundle_decider
    from workbench.scoring.records import GivenText, ScoreRecord

    bundle = shutil.copytree(FIXTURE, tmp_path / "tiny" / "1.0.0")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["methods"]["dragin"] = {"options": {"threshold": 0.0, "k": 2, "max_retrievals": 1}, "requires_gold": False}
    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    overrides = {
        "generator": str(peaked_lm_dir),
        "embedder": str(tiny_encoder_dir),
        "allow_model_mismatch": True,
        "corpus": str(write_corpus(tmp_path / "corpus.jsonl", n=30)),
    }
    rt = load_bundle(bundle, overrides)
    assert rt.method_options["dragin"]["threshold"] == 0.0
    title = json.loads((tmp_path / "corpus.jsonl").read_text().splitlines()[0])["title"]
    questions = [f"Where is {title} found?", "What is the capital of France?"]
    answers = rt.answer_many(questions, "dragin")
    assert any(a.retrieved for a in answers)
    decide = bundle_decider(rt)  # workbench score's decisions: DRAGIN's round 0 on the logged question
    features = dict.fromkeys(rt.policy.features, -0.5)  # D²-RAG decides too: any values
    for question, answer in zip(questions, answers, strict=True):
        steps = [s["name"] for s in answer.trace["steps"]]
        assert steps[:2] == ["generate", "rind"]
        if answer.retrieved:
            assert answer.passages and answer.retrieval_calls >= 1 and "retrieve" in steps
        first = answer.trace["steps"][1]["detail"]
        made = decide(features, {}, ScoreRecord(0, "x", question, GivenText("a logged answer")))["decisions"]["dragin"]
        assert made["retrieve"] == first["retrieve"] and made["max_rind"] == pytest.approx(first["max_rind"], rel=1e-4)
        assert made.get("query") == first.get("query")
    never = load_bundle(bundle, {**overrides, "methods": {"dragin": {"threshold": 1000.0}}})  # never retrieves
    assert [a.text for a in never.answer_many(questions, "dragin")] == [
        a.text for a in never.answer_many(questions, "no_rag")
    ]
