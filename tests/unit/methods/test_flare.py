"""FLARE (Jiang et al., 2023, FLARE-direct): the trigger rule and the masked query on hand-made token probabilities,
sentence cuts, settings checks, the method on the tiny model, the served-backend refusal, the study space, and one
tiny run that evaluates and exports it and answers with it through the runtime."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.core.errors import ConfigError
from workbench.methods.active_retrieval import (
    first_sentence,
    masked_query,
    min_token_prob,
    prefix_tokens,
    sentence_end,
    tokenizer_of,
)
from workbench.methods.flare import FLARESettings, decide

WORDS = {1: "The", 2: " painter", 3: " was", 4: " Leonardo", 5: ".", 6: " He", 7: " lived", 8: " long"}


def _decode(ids):
    return "".join(WORDS[i] for i in ids)


def _log(probs):
    return np.log(np.asarray(probs, dtype=np.float64))


def test_the_trigger_rule_retrieves_iff_some_token_is_below_theta():
    # §3.2: accept ŝ_t iff every token has p >= θ; retrieve otherwise
    confident = _log([0.9, 0.95, 0.81])
    one_doubt = _log([0.9, 0.95, 0.79])
    assert not decide(min_token_prob(confident), 0.8)
    assert decide(min_token_prob(one_doubt), 0.8)
    assert not decide(min_token_prob(_log([0.8, 0.9])), 0.8)  # p == θ is confident
    assert not decide(min_token_prob(one_doubt), 0.0)  # θ = 0 never retrieves
    assert min_token_prob([]) == 1.0 and not decide(min_token_prob([]), 1.0)  # no token: nothing uncertain
    lows = np.array([0.2, 0.5, 0.9])
    assert decide(lows, 0.6).tolist() == [True, True, False]  # batch decisions: the same rule on an array


def test_the_query_masks_the_tokens_below_beta():
    ids = [1, 2, 3, 4, 5]
    logprobs = _log([0.95, 0.3, 0.9, 0.35, 0.99])  # "painter" and "Leonardo" are the doubtful tokens
    assert masked_query(ids, logprobs, 0.4, _decode) == "The was."
    assert masked_query(ids, logprobs, 0.0, _decode) == "The painter was Leonardo."  # β = 0: the whole sentence
    assert masked_query(ids, logprobs, 1.0, _decode) == ""  # everything masked
    with pytest.raises(ValueError):
        masked_query(ids, logprobs[:3], 0.4, _decode)


def test_the_first_sentence_is_cut_at_its_end_with_the_tokens_that_cover_it():
    assert sentence_end("Leonardo. He lived") == len("Leonardo.")
    assert sentence_end("3.5 million people") is None  # a decimal point ends no sentence
    assert sentence_end(' "Yes." he said') == len(' "Yes."')
    assert sentence_end("  . x") is None  # no words before the stop: no sentence
    ids = [1, 2, 3, 4, 5, 6, 7]
    assert prefix_tokens(ids, len("The painter was Leonardo."), _decode) == 5
    gen = SimpleNamespace(text=_decode(ids), token_ids=ids, logprobs=_log([0.9] * 5 + [0.1, 0.2]))
    first = first_sentence(gen, _decode)
    assert first.text == "The painter was Leonardo." and first.token_ids == [1, 2, 3, 4, 5] and not first.whole
    assert min_token_prob(first.logprobs) == pytest.approx(0.9)  # the next sentence's doubts are not this one's
    whole = first_sentence(SimpleNamespace(text=_decode(ids[:5]), token_ids=ids[:5], logprobs=_log([0.5] * 5)), _decode)
    assert whole.whole and whole.token_ids == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("key", "value"),
    [("theta", 1.5), ("theta", math.nan), ("beta", -0.1), ("k", 0), ("max_sentences", 0), ("prepend_question", 1)],
)
def test_settings_are_checked_at_their_key(key, value):
    with pytest.raises(ConfigError) as caught:
        FLARESettings(**{key: value}).validate()
    assert caught.value.where == f"flare.{key}"
    from workbench.methods import registry

    with pytest.raises(ConfigError) as caught:
        registry.check_options(["flare"], {"flare": {key: value}})
    assert caught.value.where == f"evaluate.options.flare.{key}"


def test_the_spec_declares_its_needs_its_study_space_and_a_served_model_lacking_them_is_refused():
    from workbench.backends.capabilities import Capabilities
    from workbench.methods.backend_needs import check_served_methods, method_needs
    from workbench.tuning.space import parse_spaces

    assert method_needs("flare") == {"logprobs", "token_ids"}
    (param,) = parse_spaces(["flare"], {}, "study.space")["flare"]
    assert (param.name, param.kind, param.low, param.high) == ("theta", "float", 0.05, 0.95)
    check_served_methods(["flare"], [], Capabilities(logprobs=True, token_ids=True), "http://x")  # enough
    with pytest.raises(ConfigError) as caught:
        check_served_methods(["flare"], [], Capabilities(token_ids=True), "http://x")
    assert "method flare" in str(caught.value) and "log-probabilities" in str(caught.value)
    assert "\n" not in str(caught.value)
    # a served model without a tokenizer (chat-only) cannot cut sentences or mask tokens: one line
    with pytest.raises(ConfigError) as caught:
        tokenizer_of(SimpleNamespace(generator=SimpleNamespace(tokenizer=None)), "flare")
    assert caught.value.where == "flare" and "generator.tokenizer" in str(caught.value)


VOCAB = [" Hamlet", " was", " written", " by", " Shakespeare", ".", " He", " born", " in", " London", " Stratford"]


class _Tokenizer:
    """Token ids of :data:`VOCAB` (id = position + 1) to text."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(VOCAB[i - 1] for i in ids)


class _ScriptedGenerator:
    """A generator that answers a script: continuation (tokens, probabilities) by (closed-book or not, answer so far);
    every prompt it was sent is kept."""

    tokenizer = _Tokenizer()

    def __init__(self, script):
        self.script, self.prompts = script, []

    def build_prompt(self, question, context, *, max_new_tokens, system=None):
        return SimpleNamespace(text=f"<{context or 'closed'}>", n_tokens=10, truncated=False)

    def generate(self, prompts, *, temperature, max_new_tokens, stop):
        self.prompts += prompts
        outputs = []
        for prompt in prompts:
            context, prefix = prompt[1:].split(">", 1)
            words, probs = self.script[(context == "closed", prefix)]
            ids = [VOCAB.index(w) + 1 for w in words]
            text = "".join(words)
            outputs.append(SimpleNamespace(text=text, token_ids=ids, logprobs=_log(probs), finish_reason="eos"))
        return outputs


FIRST = " Hamlet was written by Shakespeare."
SCRIPT = {
    # the first look-ahead: a confident sentence, then an uncertain one (" London" at p = 0.1)
    (True, ""): (
        [" Hamlet", " was", " written", " by", " Shakespeare", ".", " He", " was", " born", " in", " London", "."],
        [0.9] * 10 + [0.1, 0.9],
    ),
    # the second look-ahead, after the first sentence: the uncertain sentence again
    (True, FIRST): ([" He", " was", " born", " in", " London", "."], [0.9, 0.9, 0.9, 0.9, 0.1, 0.9]),
    # regenerated with the passages
    (False, FIRST): ([" He", " was", " born", " in", " Stratford", "."], [0.9] * 6),
}


def _scripted_tools(script):
    from tests.unit.methods.conftest import make_corpus
    from workbench.backends.cost import CostCounter
    from workbench.backends.retrievers import BM25Retriever
    from workbench.methods.base import Tools

    counter, corpus = CostCounter(), make_corpus()
    generator = _ScriptedGenerator(script)
    retriever = BM25Retriever(corpus, counter=counter)
    tools = Tools(generator=generator, retriever=retriever, corpus=corpus, counter=counter, max_new_tokens=32)
    return tools, generator


def test_the_sentence_loop_keeps_confident_sentences_and_regenerates_an_uncertain_one_with_its_passages():
    from workbench.methods.flare.method import FLARE

    tools, generator = _scripted_tools(SCRIPT)
    answer = FLARE(tools, FLARESettings(theta=0.8, beta=0.4).validate()).answer({"question": "Who wrote Hamlet?"})
    assert answer.text == "Hamlet was written by Shakespeare. He was born in Stratford."
    steps = answer.trace.steps
    assert [(s.name, s.detail["sentence"]) for s in steps] == [
        ("look_ahead", 0),
        ("look_ahead", 1),
        ("retrieve", 1),
        ("regenerate", 1),
    ]
    assert steps[0].detail["retrieve"] is False and steps[0].detail["text"] == FIRST  # cut at its sentence end
    assert steps[0].detail["min_prob"] == pytest.approx(0.9)  # the next sentence's doubt is not the first's
    assert steps[1].detail["retrieve"] is True and steps[1].detail["min_prob"] == pytest.approx(0.1)
    assert steps[2].detail["query"] == "He was born in."  # " London" (p = 0.1 < β) masked out
    assert "d3#0" in steps[2].detail["ids"] and answer.trace.retrieved and "d3#0" in answer.trace.passages
    # the regeneration continues the answer so far, with the passages in its prompt
    regenerated = generator.prompts[-1]
    assert regenerated.endswith(">" + FIRST) and "Stratford" in regenerated.split(">")[0]
    assert answer.trace.totals()["retrieval_calls"] == 1

    # θ below every token's probability: the look-ahead sentences are kept as they are, nothing is retrieved
    tools, _ = _scripted_tools(SCRIPT)
    kept = FLARE(tools, FLARESettings(theta=0.05).validate()).answer({"question": "Who wrote Hamlet?"})
    assert kept.text == "Hamlet was written by Shakespeare. He was born in London." and not kept.trace.retrieved
    assert [s.name for s in kept.trace.steps] == ["look_ahead", "look_ahead"]


QUESTIONS = [{"question": "Who painted the Mona Lisa?"}, {"question": "What is the capital of France?"}]


def _flare(tools, **settings):
    from workbench.methods import registry

    return registry.build_method("flare", tools, settings, None)


def test_theta_zero_never_retrieves_and_answers_as_no_rag(tools):
    from workbench.methods.baselines import NoRAG

    closed = NoRAG(tools).answer_many(QUESTIONS)
    answers = _flare(tools, theta=0.0).answer_many(QUESTIONS)
    for flare, plain in zip(answers, closed, strict=True):
        assert flare.trace.steps[0].name == "look_ahead"
        assert "retrieve" not in [s.name for s in flare.trace.steps] and not flare.trace.retrieved
        assert plain.text.startswith(flare.text)  # its first look-ahead is the closed-book answer's prompt
        assert flare.trace.totals()["retrieval_calls"] == 0


def test_theta_one_retrieves_with_the_masked_sentence_and_regenerates_with_the_passages(tools):
    answers = _flare(tools, theta=1.0, beta=0.0, max_sentences=1).answer_many(QUESTIONS)
    assert any(answer.trace.retrieved for answer in answers)  # BM25 finds the capital of France
    for answer, example in zip(answers, QUESTIONS, strict=True):
        names = [s.name for s in answer.trace.steps]
        look = answer.trace.find("look_ahead").detail
        assert look["retrieve"] is True and look["min_prob"] < 1.0
        query = answer.trace.find("retrieve").detail["query"]
        assert query == (look["text"].strip() or example["question"])  # β = 0: the whole sentence (or the question)
        if answer.trace.find("retrieve").detail["ids"]:
            assert names == ["look_ahead", "retrieve", "regenerate"] and answer.trace.retrieved
            assert answer.trace.passages == answer.trace.find("regenerate").detail["ids"]
            assert answer.trace.totals()["retrieval_calls"] == 1 and answer.trace.totals()["lm_calls"] == 2
    capped = _flare(tools, theta=1.0, max_retrievals=1, max_sentences=3, answer_max_tokens=12).answer_many(QUESTIONS)
    for answer in capped:  # at most one retrieval, however many sentences are uncertain
        assert [s.name for s in answer.trace.steps].count("retrieve") <= 1


def test_flare_is_studied_evaluated_exported_and_answered_through_the_runtime(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    from tests.bundle_run import run_overrides
    from workbench.recipe import load_recipe
    from workbench.runtime import load_bundle
    from workbench.stages.runner import run_recipe

    overrides = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        tiny_encoder_dir,
        "stages=[build_data,study,evaluate,export]",
        "export.name=flare",
        "evaluate.methods=[no_rag,flare]",
        "evaluate.options={flare: {beta: 0.0}}",
        "evaluate.limit=3",
        "study.methods=[flare]",
        "study.space={}",
        "study.limit=2",
        "study.n_trials=2",
    )
    result = run_recipe(load_recipe("quickstart", overrides))
    stages = result.run_dir / "stages"
    assert "flare" in json.dumps(json.loads((stages / "evaluate" / "summary.json").read_text()))
    studied = json.loads((stages / "study" / "params" / "flare.json").read_text())["options"]["theta"]
    assert 0.05 <= studied <= 0.95  # drawn from FLARE's own study space
    bundle = next((tmp_path / "bundles" / "flare").glob("1.*"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["methods"]["flare"]["options"]["theta"] == studied  # evaluate laid the study's pick over it
    assert manifest["methods"]["flare"]["options"]["beta"] == 0.0
    runtime = load_bundle(bundle, {"allow_model_mismatch": True})
    answer = runtime.answer("What is the capital of France?", "flare")
    look = answer.trace["steps"][0]
    assert look["name"] == "look_ahead" and look["detail"]["theta"] == studied
    assert look["detail"]["retrieve"] == (look["detail"]["min_prob"] < studied)  # the bundle's θ decides
    names = [s["name"] for s in answer.trace["steps"]]
    assert ("retrieve" in names) == look["detail"]["retrieve"]
