"""The generator on the real embedded SmolLM2-135M-Instruct."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    from workbench.backends.generator import Generator

    return Generator(smollm2_dir)


def test_greedy_answer_knows_paris(smollm2):
    prompt = smollm2.render_chat("What is the capital of France?")
    out = smollm2.generate([prompt], max_new_tokens=24)[0]
    assert "Paris" in out.text
    assert out.finish_reason in {"stop", "eos", "length"}
    assert len(out.token_ids) == len(out.logprobs) == len(out.entropies) > 0


def test_four_samples_share_one_prefill(smollm2):
    from workbench.backends.prompts import encode

    prompt = smollm2.render_chat("Name a famous scientist.")
    before = smollm2.counter.snapshot()
    samples = smollm2.generate([prompt], max_new_tokens=12, temperature=0.7, n=4, seed=0, return_hidden_layer=15)
    cost = smollm2.counter.since(before)
    assert len(samples) == 4 and [s.sample_index for s in samples] == [0, 1, 2, 3]
    assert cost.prefill_tokens == len(encode(smollm2.tokenizer, prompt))
    assert cost.lm_calls == 1
    assert all(s.hidden_last.shape == (smollm2.model.config.hidden_size,) for s in samples)
    for s in samples:
        assert np.isfinite(s.logprobs).all() and np.isfinite(s.logprobs_processed).all()
        assert (s.logprobs <= 0).all() and (s.entropies >= 0).all()
    naive = smollm2.generate([prompt], max_new_tokens=12, temperature=0.7, n=4, seed=0, share_prefill=False)
    assert [s.text for s in naive] == [s.text for s in samples]
