"""Contrastive decoding with prefix reuse on and off: the same tokens, weights and λ (both streams' prompts go
through ``generator.prefill``, whose rows share the system prompt)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.decoding.contrastive import contrastive_generate, sequential_contrastive_generate

pytest.importorskip("torch")

SYSTEM = "You answer quiz questions. Reply with the answer only: a name, a date, a number or a short phrase."


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """A peaked tiny Llama (contrast changes its choices); own instance."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-peaked-cd-reuse")
    build_tiny_llama(path, seed=1, max_positions=1024, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=8)


@pytest.mark.parametrize("run", [contrastive_generate, sequential_contrastive_generate], ids=["batched", "sequential"])
def test_contrastive_decoding_is_the_same_with_reuse(generator, run):
    render = generator.render_chat
    experts = [
        render(f"Context: {c}\nQuestion: {q}", system=SYSTEM)
        for c, q in [
            ("Paris is the capital of France.", "What is the capital of France?"),
            ("Hamlet was written by Shakespeare.", "Who wrote Hamlet?"),
            ("The Nile flows north.", "Where does the Nile flow?"),
        ]
    ]
    amateurs = [render(q, system=SYSTEM) for q in ["What is the capital of France?", "Who wrote Hamlet?", "Nile?"]]
    out = {}
    for reuse in (False, True):
        generator.prefix_reuse = reuse
        generator.counter = CostCounter()
        out[reuse] = (run(generator, experts, amateurs, [1.0, 0.5, 2.0], max_new_tokens=8, stop=()), generator.counter)
    generator.prefix_reuse = True
    (off, off_cost), (on, on_cost) = out[False], out[True]
    for a, b in zip(off, on, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.text == b.text
        np.testing.assert_allclose(a.lambdas, b.lambdas, atol=1e-4)
        np.testing.assert_allclose(a.expert_logprobs, b.expert_logprobs, atol=1e-4)
        np.testing.assert_allclose(a.amateur_logprobs, b.amateur_logprobs, atol=1e-4)
    assert off_cost.prefix_reused_tokens == 0 < on_cost.prefix_reused_tokens
    assert on_cost.prefill_tokens == off_cost.prefill_tokens
