"""The LLM-as-judge NLI backend on the tiny random Llama: shapes, probabilities, caching of pairs, verdict order."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.generator import Generator
from workbench.backends.nli import make_nli_judge
from workbench.backends.nli_llm import VERDICTS, LLMJudgeNLI


@pytest.fixture(scope="module")
def generator(tiny_lm_long_dir):
    return Generator(str(tiny_lm_long_dir), batch_size=4)


def test_next_token_logprobs_match_a_forward_pass(generator):
    import torch

    prompt = generator.render_chat("Is Paris in France?")
    got = generator.next_token_logprobs([prompt, prompt + " x"], ["yes", "no"])
    ids = generator.tokenizer(prompt)["input_ids"]
    with torch.inference_mode():
        logits = generator.model(input_ids=torch.tensor([ids])).logits[0, -1]
    expected = torch.log_softmax(logits.float(), -1)
    yes = generator.tokenizer("yes", add_special_tokens=False)["input_ids"][0]
    assert got.shape == (2, 2)
    assert got[0, 0] == pytest.approx(float(expected[yes]), abs=1e-4)


def test_llm_judge_returns_normalised_probabilities_and_dedups(generator):
    judge = make_nli_judge("llm", generator=generator)
    assert isinstance(judge, LLMJudgeNLI)
    before = generator.counter.lm_batches
    probs = judge.entail(["Paris is in France."] * 3, ["Paris is in Europe.", "Paris is in Europe.", "No."], "q?")
    assert probs.shape == (3, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs[0], probs[1])
    assert judge.counter.nli_pairs >= 2 and generator.counter.lm_batches == before + 1  # 2 unique pairs, one batch


def test_verdicts_map_to_label_order(generator, monkeypatch):
    judge = LLMJudgeNLI(generator)
    # a model that always prefers "yes" must be read as entailment (last column)
    monkeypatch.setattr(
        generator, "next_token_logprobs", lambda prompts, options: np.tile([-5.0, -5.0, -0.1], (len(prompts), 1))
    )
    assert VERDICTS[2] == "yes" and judge.labels(["a"], ["b"])[0] == 2
