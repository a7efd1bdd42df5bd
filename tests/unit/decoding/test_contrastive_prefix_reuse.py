"""Contrastive decoding with prefix reuse on and off: the same tokens, weights and λ (both streams' prompts share the
system prompt: the experts' rows share it through ``generator.prefill``, and the amateurs continue the experts' rows
over it or reuse their own longer prefix, whichever saves more); the batched steps' cache has room reserved."""

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


def test_one_pair_continues_the_experts_row_over_the_system_prompt(generator):
    """B = 1: the amateur's forward holds only its tokens after the prefix both prompts share; same decoding."""
    from workbench.decoding.contrastive import shared_prefix_length

    render = generator.render_chat
    context = "Context: Paris is the capital of France.\nQuestion: What is the capital of France?"
    expert = [render(context, system=SYSTEM)]
    amateur = [render("What is the capital of France?", system=SYSTEM)]
    budget = generator.max_context - 8
    ids_e, ids_a = generator.encode_prompt(expert[0], budget), generator.encode_prompt(amateur[0], budget)
    shared = shared_prefix_length([ids_e], [ids_a])
    assert shared >= 16  # the chat header and the system prompt
    widths = []
    hook = generator.model.register_forward_hook(
        lambda module, args, kwargs, output: widths.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    out = {}
    try:
        for reuse in (False, True):
            generator.prefix_reuse = reuse
            generator.counter = CostCounter()
            widths.clear()
            result = contrastive_generate(generator, expert, amateur, 1.0, max_new_tokens=8, stop=())
            out[reuse] = (result, generator.counter, list(widths))
    finally:
        hook.remove()
        generator.prefix_reuse = True
    (off, off_cost, off_widths), (on, on_cost, on_widths) = out[False], out[True]
    assert off_widths[:2] == [(1, len(ids_e)), (1, len(ids_a))]
    assert on_widths[:2] == [(1, len(ids_e)), (1, len(ids_a) - shared)]  # no forward for the shared prefix
    assert on_widths[2:] == off_widths[2:] == [(2, 1)] * 7
    assert on_cost.prefix_reused_tokens == shared and off_cost.prefix_reused_tokens == 0
    assert on_cost.prefill_tokens == off_cost.prefill_tokens == len(ids_e) + len(ids_a)
    sequential = sequential_contrastive_generate(generator, expert, amateur, 1.0, max_new_tokens=8, stop=())
    assert on[0].token_ids.tolist() == off[0].token_ids.tolist() == sequential[0].token_ids.tolist()
    np.testing.assert_allclose(on[0].lambdas, off[0].lambdas, atol=1e-4)
    np.testing.assert_allclose(on[0].amateur_logprobs, off[0].amateur_logprobs, atol=1e-4)


def test_amateurs_sharing_a_longer_prefix_use_the_generators_own_reuse(generator):
    """Many pairs whose closed-book prompts share more than the system prompt: reusing the amateurs' own longer
    prefix (one forward of its own) saves more tokens than continuing the experts' rows, so that is what runs."""
    from workbench.backends.prefix_reuse import plan_prefix_groups
    from workbench.decoding.contrastive import shared_prefix_length

    render = generator.render_chat
    tail = "Answer the question in a few words, please, and do not explain anything at all.\nQuestion: "
    questions = ["Capital of France?", "Who wrote Hamlet?", "Where does the Nile flow?", "Who painted it?"]
    experts = [render(f"Context: passage {i}.\n{tail}{q}", system=SYSTEM) for i, q in enumerate(questions)]
    amateurs = [render(f"{tail}{q}", system=SYSTEM) for q in questions]
    budget = generator.max_context - 4
    ids_e = [generator.encode_prompt(p, budget) for p in experts]
    ids_a = [generator.encode_prompt(p, budget) for p in amateurs]
    own = sum(g.saved for g in plan_prefix_groups(ids_a, generator.prefix_min_tokens))
    assert own > shared_prefix_length(ids_e, ids_a) * len(ids_a)
    generator.counter = CostCounter()
    batched = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=4, stop=())
    expert_saved = sum(g.saved for g in plan_prefix_groups(ids_e, generator.prefix_min_tokens))
    assert generator.counter.prefix_reused_tokens == expert_saved + own
    sequential = sequential_contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=4, stop=())
    assert [g.token_ids.tolist() for g in batched] == [g.token_ids.tolist() for g in sequential]


def test_the_batched_steps_write_into_a_reserved_cache(generator):
    """After the prefill the 2B rows' cache has room for the answer: each step writes in place (no whole-cache copy)."""
    from workbench.backends.decoding_state import cache_argument
    from workbench.backends.reserved_cache import ReservedLayer

    render = generator.render_chat
    experts = [render("Context: Paris is the capital of France.\nQuestion: Capital?", system=SYSTEM)] * 2
    amateurs = [render("Capital?", system=SYSTEM), render("What is the capital?", system=SYSTEM)]
    name, kinds = cache_argument(generator.model), []

    def record(module, args, kwargs, output):
        cache = kwargs.get(name)
        kinds.append(None if cache is None else {type(layer) for layer in cache.layers})

    hook = generator.model.register_forward_hook(record, with_kwargs=True)
    try:
        contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=5, stop=())
    finally:
        hook.remove()
    assert kinds[-4:] == [{ReservedLayer}] * 4  # the 4 decoding steps after the prefill
