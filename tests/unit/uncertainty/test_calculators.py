"""The stats graph on the tiny random Llama: every needed stat, right shapes, one call per kind per batch."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import HashEmbedder
from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.core.errors import ConfigError, DataError
from workbench.uncertainty.calculators import (
    DENSE_STATS,
    UNAVAILABLE_STATS,
    StatSettings,
    compute_stats,
    unavailable_features,
)
from workbench.uncertainty.features import FEATURES, compute_features, required_stats

QUESTIONS = [{"question": "What is the capital of France?"}, {"question": "Who wrote Hamlet?"}]


# every feature the graph computes without retrieved contexts (dense: tests/unit/uncertainty/test_dense_stats.py)
ALL_OFFERED = [n for n in FEATURES if n not in unavailable_features(FEATURES) and n != "dense"]


def test_every_offered_feature_gets_its_stats_with_the_right_shapes(generator):
    settings = StatSettings(samples=3, max_new_tokens=5, paraphrases=3, paraphrase_max_new_tokens=6)
    needed = required_stats(ALL_OFFERED) | {"greedy_entropies", "greedy_text", "sample_texts"}
    assert not needed & (UNAVAILABLE_STATS | DENSE_STATS)
    judge, embedder = AnswerEquivalenceJudge(), HashEmbedder()
    entail_calls = []
    real_entail = judge.entail

    def entail(premises, hypotheses, question=None):
        entail_calls.append(len(premises))
        return real_entail(premises, hypotheses, question)

    judge.entail = entail
    sampled, greedy_calls = [], []
    original = generator.generate

    def spy(prompts, **kwargs):
        if kwargs.get("temperature", 0.0) > 0:
            sampled.append(len(prompts))
        else:
            greedy_calls.append(
                (
                    len(prompts),
                    kwargs.get("return_hidden_layer"),
                    kwargs.get("return_attentions"),
                    kwargs.get("return_answer_attention"),
                )
            )
        return original(prompts, **kwargs)

    generator.generate = spy
    try:
        calls_before = generator.counter.lm_batches
        stats = compute_stats(QUESTIONS, needed, generator=generator, judge=judge, embedder=embedder, settings=settings)
        calls = generator.counter.lm_batches - calls_before
    finally:
        del generator.generate
    assert len(stats) == 2 and all(set(s) == needed for s in stats)
    assert sampled == [2, 2]  # paraphrases and answers (n each, shared prefill): one sampling call each
    # ONE greedy decode loop for the questions and their 2 paraphrases each, without hidden states or attention
    # weights, reading the last layer's attention diagonal as it decodes
    assert greedy_calls == [(2 + 2 * 2, None, None, True)]
    # paraphrases, greedy (+ paraphrase answers), samples, eos scoring (at most one batch), and ONE forward for
    # P(True) and verbalized confidence together: no attention pass
    assert 4 <= calls <= 5
    hidden = generator.model.config.hidden_size
    for s in stats:
        length = len(s["greedy_logprobs"])
        assert len(s["greedy_entropies"]) == length and length - int(s["greedy_eos"]) == len(s["token_importance"])
        assert len(s["token_relevance"]) == len(s["token_importance"])
        assert np.asarray(s["attention_logdiag"]).shape == (
            generator.model.config.num_attention_heads,
            length - s["greedy_eos"],
        )
        assert len(s["sample_texts"]) == 3 and len(s["sample_logprobs"]) == 3
        assert np.asarray(s["sample_hidden"]).shape == (3, hidden)
        assert np.asarray(s["sts_samples"]).shape == (3, 3)
        u = len(s["nli_texts"])
        assert s["nli_texts"][s["nli_index_greedy"]] == s["greedy_text"]
        assert np.asarray(s["nli_probs"]).shape == (u, u, 3)
        assert np.allclose(np.asarray(s["nli_probs"])[range(u), range(u)], [0, 0, 1])
        assert np.asarray(s["paraphrase_nli_probs"]).shape == (3, 3, 3) and len(s["paraphrase_answers"]) == 3
        assert 0.0 <= s["ptrue"] <= 1.0 and 0.0 <= s["verbalized_confidence"] <= 1.0
        values = compute_features(s, ALL_OFFERED)
        assert set(values) == set(ALL_OFFERED)
    # one call; the symmetric judge is asked each unordered pair of distinct texts at most once
    unordered = sum(len(s["nli_texts"]) * (len(s["nli_texts"]) - 1) // 2 + 3 for s in stats)
    assert len(entail_calls) == 1 and 0 < entail_calls[0] <= unordered
    assert judge.counter.nli_pairs == entail_calls[0]
    assert embedder.calls == 2  # token relevance and sample similarities, each one batch


def test_only_needed_stats_are_computed(generator):
    before = generator.counter.lm_batches
    stats = compute_stats(
        QUESTIONS, {"greedy_logprobs", "greedy_eos"}, generator=generator, settings=StatSettings(max_new_tokens=3)
    )
    assert all(set(s) == {"greedy_text", "greedy_logprobs", "greedy_eos"} for s in stats)
    assert generator.counter.lm_batches - before <= 2  # the greedy call (cached after the first test) + EOS scoring


def test_unavailable_and_unknown_stats_are_refused(generator):
    with pytest.raises(DataError, match="cannot be produced"):
        compute_stats(QUESTIONS, {"lars_score"}, generator=generator)
    with pytest.raises(DataError, match="unknown stat"):
        compute_stats(QUESTIONS, {"nope"}, generator=generator)
    with pytest.raises(DataError, match="judge"):
        compute_stats(QUESTIONS, {"nli_probs"}, generator=generator)
    assert set(unavailable_features(["lars", "dense", "confidence"])) == {"lars"}
    with pytest.raises(DataError, match="contexts"):
        compute_stats(QUESTIONS, {"dense_answers"}, generator=generator, judge=AnswerEquivalenceJudge())
    with pytest.raises(ConfigError):
        StatSettings(samples=0).validate()


def test_prompt_groups_name_the_prompts_a_feature_set_reads_and_the_whole_set_hash_is_theirs():
    from workbench.core.hashing import stable_hash
    from workbench.uncertainty.features import required_stats
    from workbench.uncertainty.stat_prompts import _prompt_parts, prompt_groups, prompts_fingerprint

    assert prompt_groups(required_stats(["confidence", "entropy", "semantic_entropy"])) == ["answer"]
    assert prompt_groups(required_stats(["ptrue", "self_detection"])) == ["answer", "paraphrase", "self_check"]
    assert prompt_groups(required_stats(["verbalized_confidence"])) == ["answer", "self_check"]
    parts = _prompt_parts()
    assert prompts_fingerprint() == stable_hash([p for group in parts.values() for p in group])
