"""Contrastive decoding: the rule on hand-made vectors, greedy parity at α = 0, batched == sequential, one forward per
step, stop strings / EOS, costs and the benchmark."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench.bench.decoding.run import benchmark_contrastive
from workbench.decoding.contrastive import (
    choose_tokens,
    contrastive_generate,
    contrastive_scores,
    entropy,
    entropy_weight,
    sequential_contrastive_generate,
    shared_prefix_length,
)


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """A tiny random Llama with large initial weights: peaked, varied next-token distributions (unlike the shared
    tiny model, which repeats one special token), so contrast changes choices. Own instance: tests may patch it."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-peaked")
    build_tiny_llama(path, seed=1, max_positions=1024, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=8)


@pytest.fixture(scope="module")
def prompts(generator):
    """Three pairs whose expert and amateur prompts all have different lengths (left padding is exercised)."""
    render = generator.render_chat
    experts = [
        render("Context: Paris is the capital of France.\nQuestion: What is the capital of France?"),
        render("Q: who wrote Hamlet?"),
        render("The Nile is a river in Africa. Where does it flow? Answer in a few words please"),
    ]
    amateurs = [
        render("What is the capital of France?"),
        render("Question: who wrote Hamlet? Answer: William Shakespeare wrote it, a long long context"),
        render("Where does the Nile flow?"),
    ]
    return experts, amateurs


def ids(gens):
    return [g.token_ids.tolist() for g in gens]


# ------------------------------------------------------------------------------------------ the rule, by hand
def test_entropy_weight_by_hand():
    # H of a uniform distribution over 4 tokens = ln 4 = 1.386294; of a point mass = 0
    uniform = torch.log(torch.full((1, 4), 0.25))
    point = torch.log(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert entropy(uniform).item() == pytest.approx(math.log(4), abs=1e-6)
    assert entropy(point).item() == pytest.approx(0.0, abs=1e-7)
    # w = H_para / (H_para + H_rag + 1e-8): (ln 4) / (ln 4 + ln 2) = 2/3; (0, ln 2) → 0; both 0 → 0.5
    h_para = torch.tensor([math.log(4), 0.0, 0.0])
    h_rag = torch.tensor([math.log(2), math.log(2), 0.0])
    assert entropy_weight(h_para, h_rag).tolist() == pytest.approx([2 / 3, 0.0, 0.5], abs=1e-6)


def test_contrastive_scores_and_choice_by_hand():
    # expert p = (0.5, 0.4, 0.1), amateur p = (0.8, 0.1, 0.1); λ = 1:
    # s = 2·log p_e − log p_a = (2 ln .5 − ln .8, 2 ln .4 − ln .1, 2 ln .1 − ln .1)
    #   = (−1.1632, 0.4700, −2.3026) → token 1, whereas plain greedy (λ = 0) picks token 0
    lp_e = torch.log(torch.tensor([[0.5, 0.4, 0.1]]))
    lp_a = torch.log(torch.tensor([[0.8, 0.1, 0.1]]))
    s = contrastive_scores(lp_e, lp_a, torch.tensor([1.0]))
    assert s[0].tolist() == pytest.approx([-1.16315, 0.47000, -2.30259], abs=1e-4)
    assert s.argmax(-1).item() == 1
    assert torch.equal(contrastive_scores(lp_e, lp_a, torch.tensor([0.0])), lp_e)
    # a token impossible under both streams stays impossible (−inf − −inf would be NaN)
    inf = float("-inf")
    s = contrastive_scores(torch.tensor([[inf, -1.0]]), torch.tensor([[inf, -0.5]]), torch.tensor([2.0]))
    assert s[0, 0].item() == inf and s.argmax(-1).item() == 1


def test_choose_tokens_uses_the_parametric_stream_for_w():
    # logits of the same two distributions as above; H_e = H(.5,.4,.1) = 0.9433, H_a = H(.8,.1,.1) = 0.6390
    e = torch.log(torch.tensor([[0.5, 0.4, 0.1], [0.5, 0.4, 0.1]]))
    a = torch.log(torch.tensor([[0.8, 0.1, 0.1], [0.8, 0.1, 0.1]]))
    h_e, h_a = 0.943348, 0.639032
    alphas = torch.tensor([1.0, 1.0])
    para = torch.tensor([False, True])  # relevant mode (amateur = no context), noisy mode (expert = no context)
    c = choose_tokens(e, a, alphas, para)
    # relevant: w = H_a / (H_a + H_e) = 0.4038; noisy: w = H_e / (H_e + H_a) = 0.5962
    assert c.weights.tolist() == pytest.approx([h_a / (h_a + h_e), h_e / (h_a + h_e)], abs=1e-5)
    assert c.lambdas.tolist() == pytest.approx(c.weights.tolist())
    # λ = 0.4038: s_0 = 1.4038 ln .5 − .4038 ln .8 = −0.8829, s_1 = 1.4038 ln .4 − .4038 ln .1 = −0.3564 → token 1
    assert c.tokens.tolist() == [1, 1]
    assert c.expert_entropy.tolist() == pytest.approx([h_e, h_e], abs=1e-5)
    fixed = choose_tokens(e, a, torch.tensor([0.3, 0.3]), para, dynamic=False)
    assert fixed.weights.tolist() == [1.0, 1.0] and fixed.lambdas.tolist() == pytest.approx([0.3, 0.3])
    # λ = 0.3: s_0 = 1.3 ln .5 − .3 ln .8 = −0.8341, s_1 = 1.3 ln .4 − .3 ln .1 = −0.5004 → still token 1
    assert fixed.tokens.tolist() == [1, 1]
    small = choose_tokens(e, a, torch.tensor([0.1, 0.1]), para, dynamic=False)
    # λ = 0.1: s_0 = 1.1 ln .5 − .1 ln .8 = −0.7401, s_1 = 1.1 ln .4 − .1 ln .1 = −0.7776 → token 0
    assert small.tokens.tolist() == [0, 0]


# ------------------------------------------------------------------------------------------ the engines
def test_alpha_zero_is_plain_greedy(generator, prompts):
    experts, amateurs = prompts
    for stop in ((), ("\n",)):
        greedy = generator.generate(experts, max_new_tokens=10, temperature=0.0, stop=stop)
        cd = contrastive_generate(generator, experts, amateurs, 0.0, max_new_tokens=10, stop=stop)
        assert ids(cd) == ids(greedy)
        assert [g.text for g in cd] == [g.text for g in greedy]
        assert [g.finish_reason for g in cd] == [g.finish_reason for g in greedy]
        assert all(np.all(g.lambdas == 0) for g in cd)


def test_batched_equals_sequential_and_contrast_changes_tokens(generator, prompts):
    experts, amateurs = prompts
    kwargs = {"max_new_tokens": 12, "stop": (), "parametric": ["amateur", "expert", "amateur"]}
    batched = contrastive_generate(generator, experts, amateurs, [1.0, 0.5, 3.0], **kwargs)
    sequential = sequential_contrastive_generate(generator, experts, amateurs, [1.0, 0.5, 3.0], **kwargs)
    assert ids(batched) == ids(sequential)
    for b, s in zip(batched, sequential, strict=True):
        np.testing.assert_allclose(b.lambdas, s.lambdas, atol=1e-5)
        assert b.text == s.text and b.steps == 12
        assert np.all((b.weights >= 0) & (b.weights <= 1))
        np.testing.assert_allclose(b.lambdas, b.alpha * b.weights, rtol=1e-6)
    greedy = generator.generate(experts, max_new_tokens=12, temperature=0.0, stop=())
    assert ids(batched) != ids(greedy)
    assert [g.parametric for g in batched] == ["amateur", "expert", "amateur"]
    static = contrastive_generate(generator, experts, amateurs, 0.7, max_new_tokens=4, stop=(), dynamic=False)
    assert all(np.allclose(g.lambdas, 0.7) and np.all(g.weights == 1) for g in static)


def test_one_forward_per_step_and_costs(generator, prompts):
    experts, amateurs = prompts
    calls = []
    hook = generator.model.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        before = generator.counter.snapshot()
        batched = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=6, stop=())
        spent = generator.counter.since(before)
        n_batched = len(calls)
        calls.clear()
        sequential_contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=6, stop=())
        n_sequential = len(calls)
    finally:
        hook.remove()
    steps = max(g.steps for g in batched)
    assert steps == 6
    # the streams' prompts differ in width: one prefill forward per stream, then ONE forward per later step
    assert n_batched == 2 + (steps - 1)
    assert n_sequential == 2 * steps
    assert spent.lm_batches == 1 and spent.lm_calls == 2 * len(batched)  # one batch; two prompts per pair
    assert spent.decoded_tokens == 2 * sum(g.steps for g in batched)
    assert spent.prefill_tokens == sum(sum(g.prompt_tokens) for g in batched)  # padding is never counted


def test_split_prefill_joins_the_caches_and_falls_back_to_one_forward(generator, prompts):
    """Split prefill (each stream at its own width, caches joined) decodes exactly like one padded forward."""
    from workbench.backends.generator import DecodingParams
    from workbench.decoding.contrastive import prefill_streams

    experts, amateurs = prompts
    shapes = []
    hook = generator.model.register_forward_hook(
        lambda module, args, kwargs, output: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        split = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=6, stop=())
        split_shapes = list(shapes)
        shapes.clear()
        generator.joinable_cache = False  # as for a model with sliding-window layers
        single = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=6, stop=())
    finally:
        hook.remove()
        generator.joinable_cache = None
    budget = generator.max_context - 6
    width_e = max(len(generator._encode_prompt(p, budget)) for p in experts)
    width_a = max(len(generator._encode_prompt(p, budget)) for p in amateurs)
    shared = shared_prefix_length(
        [generator.encode_prompt(p, budget) for p in experts], [generator.encode_prompt(p, budget) for p in amateurs]
    )
    assert width_e != width_a and shared >= 1  # the chat template's header
    # own widths (the amateurs continue the experts' rows over the shared prefix), then 2B rows per step
    assert split_shapes == [(3, width_e), (3, width_a - shared)] + [(6, 1)] * 5
    assert shapes == [(6, max(width_e, width_a))] + [(6, 1)] * 5  # one padded forward, then the same steps
    assert ids(split) == ids(single)
    for a, b in zip(split, single, strict=True):
        np.testing.assert_allclose(a.lambdas, b.lambdas, atol=1e-5)
        np.testing.assert_allclose(a.expert_logprobs, b.expert_logprobs, atol=1e-4)

    params = DecodingParams(max_new_tokens=2, temperature=0.0).normalised()
    short = [generator._encode_prompt(p, budget) for p in experts]
    long = [generator._encode_prompt(p, budget) for p in amateurs]
    state = prefill_streams(generator, short, long, params)
    assert state["mask"].shape == (6, max(width_e, width_a)) and state["logits"].shape[0] == 6
    assert state["mask"].sum(1).tolist() == [len(ids) for ids in short + long]  # real tokens only, left-padded
    assert generator.joinable_cache is True
    generator.joinable_cache = None


def test_finished_pairs_leave_the_batch(generator, prompts):
    """Different lengths per pair (a stop string one pair hits early): the rest go on and still match sequential."""
    experts, amateurs = prompts
    full = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=12, stop=())
    text = full[0].text
    stop = next(text[i : i + 2] for i in range(2, len(text) - 1) if text[i : i + 2].strip())
    batched = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=12, stop=(stop,))
    sequential = sequential_contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=12, stop=(stop,))
    assert ids(batched) == ids(sequential)
    first = batched[0]
    assert first.finish_reason == "stop" and first.text == text[: text.find(stop)]
    assert first.steps < 12 and len(first.token_ids) <= first.steps
    for b, f in zip(batched[1:], full[1:], strict=True):
        if b.finish_reason == "length":
            assert b.token_ids.tolist() == f.token_ids.tolist()


def test_stop_strings_and_eos_match_the_generator(generator, prompts):
    experts, amateurs = prompts
    plain = generator.generate(experts, max_new_tokens=10, temperature=0.0, stop=())
    text = plain[1].text
    stop = next(text[i : i + 2] for i in range(1, len(text) - 1) if text[i : i + 2].strip())
    greedy = generator.generate(experts, max_new_tokens=10, temperature=0.0, stop=(stop,))
    cd = contrastive_generate(generator, experts, amateurs, 0.0, max_new_tokens=10, stop=(stop,))
    assert cd[1].finish_reason == "stop" and cd[1].text == greedy[1].text == text[: text.find(stop)]
    assert ids(cd) == ids(greedy)
    # make the token greedy chooses at step 3 of the first prompt an EOS token
    eos_token = int(plain[0].token_ids[3])
    saved = generator.eos_ids
    generator.eos_ids = frozenset({*saved, eos_token})
    try:
        greedy = generator.generate(experts, max_new_tokens=10, temperature=0.0, stop=())
        cd = contrastive_generate(generator, experts, amateurs, 0.0, max_new_tokens=10, stop=())
    finally:
        generator.eos_ids = saved
    assert cd[0].finish_reason == "eos" == greedy[0].finish_reason
    assert cd[0].token_ids.tolist() == plain[0].token_ids[:3].tolist() == greedy[0].token_ids.tolist()
    assert cd[0].steps == 4  # the EOS step is recorded, the EOS token is not part of the answer
    assert ids(cd) == ids(greedy)


def test_input_validation_and_empty(generator, prompts):
    experts, amateurs = prompts
    assert contrastive_generate(generator, [], [], 1.0, max_new_tokens=3) == []
    with pytest.raises(ValueError, match="amateur"):
        contrastive_generate(generator, experts, amateurs[:2], 1.0, max_new_tokens=3)
    with pytest.raises(ValueError, match="alphas"):
        contrastive_generate(generator, experts, amateurs, [1.0, 2.0], max_new_tokens=3)
    with pytest.raises(ValueError, match=">= 0"):
        contrastive_generate(generator, experts, amateurs, -1.0, max_new_tokens=3)
    with pytest.raises(ValueError, match="parametric"):
        contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=3, parametric="context")


def test_many_pairs_run_in_generator_batches(generator, prompts):
    experts, amateurs = prompts
    saved = generator.batch_size
    generator.batch_size = 2
    try:
        before = generator.counter.snapshot()
        small = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=5, stop=())
        calls = generator.counter.since(before).lm_batches
    finally:
        generator.batch_size = saved
    whole = contrastive_generate(generator, experts, amateurs, 1.0, max_new_tokens=5, stop=())
    assert calls == 2 and ids(small) == ids(whole)


def test_benchmark_returns_the_three_timings(generator, prompts):
    experts, amateurs = prompts
    counter = generator.counter
    result = benchmark_contrastive(generator, experts, amateurs, max_new_tokens=4, repeats=2)
    assert generator.counter is counter
    for key in ("greedy_s", "batched_s", "sequential_s", "padded_s"):
        assert result[key] > 0 and len(result["times_s"][key.removesuffix("_s")]) == 2
    assert result["ratio_batched_vs_greedy"] == pytest.approx(result["batched_s"] / result["greedy_s"])
    assert result["parity"] is True
    assert result["costs"]["batched"]["lm_batches"] == 1 and result["costs"]["sequential"]["lm_batches"] == 2
    assert result["costs"]["batched"]["lm_calls"] == result["costs"]["sequential"]["lm_calls"]  # the same prompts
    assert set(result["steps"]) == {"greedy", "batched", "sequential", "padded"}
    assert result["forwards"]["sequential"] == 2 * 4 and result["forwards"]["batched"] == 2 + 3  # split prefill
    assert result["forwards"]["padded"] == 4 and result["padded_s"] > 0  # one padded prefill forward
    assert result["speedup_split_vs_padded_prefill"] == pytest.approx(result["padded_s"] / result["batched_s"])
    assert generator.joinable_cache is not False  # the padded variant restores the generator
    assert result["ratio_per_forward_batched_vs_greedy"] > 0
    assert not generator.model._forward_hooks  # the counting hook is removed
