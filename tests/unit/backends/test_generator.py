"""Generator: decoding-loop correctness against HF and direct forward passes, shared prefill, seeding, prompts."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.core.errors import AssetError, DataError

torch = pytest.importorskip("torch")

PROMPTS = [
    "The capital of France",
    "Question: who wrote Hamlet? Answer: William",
    "Albert Einstein developed the theory of relativity in",
]


@pytest.fixture(scope="module")
def shared_gen(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, max_context=128)


@pytest.fixture
def gen(shared_gen):
    """The module's generator with a fresh cost counter and its default end-of-sequence ids."""
    shared_gen.counter = CostCounter()
    eos = shared_gen.eos_ids
    yield shared_gen
    shared_gen.eos_ids = eos


def _ids(gen, text: str) -> list[int]:
    from workbench.backends.prompts import encode

    return encode(gen.tokenizer, text)


def _direct_logits(gen, ids: list[int]) -> torch.Tensor:
    """Logits of one unpadded sequence, one row per position."""
    with torch.inference_mode():
        return gen.model(input_ids=torch.tensor([ids])).logits[0].float()


# ---------------------------------------------------------------------- greedy vs HF
def test_greedy_matches_hf_generate_with_left_padding(gen):
    outs = gen.generate(PROMPTS, max_new_tokens=10, stop=None)
    assert len({len(_ids(gen, p)) for p in PROMPTS}) > 1  # the batch really needs padding
    for prompt, out in zip(PROMPTS, outs, strict=True):
        ids = torch.tensor([_ids(gen, prompt)])
        with torch.inference_mode():
            ref = gen.model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=10, pad_token_id=0
            )[0, ids.shape[1] :].tolist()
        n = len(out.token_ids)
        assert out.token_ids.tolist() == ref[:n]
        if out.finish_reason == "eos":
            assert ref[n] in gen.eos_ids
        else:
            assert out.finish_reason == "length" and n == 10
    # and HF's own batched, left-padded greedy agrees too
    batch = gen.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert (batch["attention_mask"][:, 0] == 0).any()
    with torch.inference_mode():
        hf = gen.model.generate(**batch, do_sample=False, max_new_tokens=10, pad_token_id=0)[
            :, batch["input_ids"].shape[1] :
        ]
    for row, out in zip(hf.tolist(), outs, strict=True):
        assert out.token_ids.tolist() == row[: len(out.token_ids)]


def test_logprobs_and_entropies_match_a_direct_forward_pass(gen):
    out = gen.generate([PROMPTS[1]], max_new_tokens=6, stop=None)[0]
    prompt_ids = _ids(gen, PROMPTS[1])
    logits = _direct_logits(gen, prompt_ids + out.token_ids.tolist())
    logp = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
    expected = logp.gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0].numpy()
    entropy = (-(logp.exp() * logp).sum(-1)).numpy()
    np.testing.assert_allclose(out.logprobs, expected, atol=1e-5)
    np.testing.assert_allclose(out.entropies, entropy, atol=1e-5)
    assert np.all(out.logprobs_processed == 0.0)  # greedy: the processed distribution is a point mass
    assert out.logprobs.dtype == np.float32 and out.token_ids.dtype == np.int64


def test_sampled_processed_logprobs_match_direct_computation(gen):
    from workbench.backends.generator import process_logits

    out = gen.generate([PROMPTS[0]], max_new_tokens=6, temperature=0.7, top_k=20, top_p=0.9, stop=None, seed=3)[0]
    prompt_ids = _ids(gen, PROMPTS[0])
    logits = _direct_logits(gen, prompt_ids + out.token_ids.tolist())[len(prompt_ids) - 1 : -1]
    proc = process_logits(logits, 0.7, 20, 0.9)
    target = torch.tensor(out.token_ids)[:, None]
    np.testing.assert_allclose(out.logprobs_processed, proc.gather(-1, target)[:, 0].numpy(), atol=1e-5)
    np.testing.assert_allclose(out.logprobs, torch.log_softmax(logits, -1).gather(-1, target)[:, 0].numpy(), atol=1e-5)
    assert np.all(np.isfinite(out.logprobs_processed))  # every sampled token survived the filters
    assert np.all(out.logprobs_processed > out.logprobs)  # sharpening at T=0.7 plus filtering raises them


def test_process_logits_filters():
    from workbench.backends.generator import process_logits

    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    top2 = process_logits(logits, 1.0, 2, 1.0)
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    np.testing.assert_allclose(top2[0, :2].exp().numpy(), torch.softmax(logits[0, :2], -1).numpy(), rtol=1e-6)
    probs = torch.softmax(logits, -1)[0]  # ≈ .64 .24 .09 .03 .01
    nucleus = process_logits(logits, 1.0, 0, 0.8)
    assert torch.isfinite(nucleus[0, :2]).all() and torch.isinf(nucleus[0, 2:]).all()
    assert probs[0] < 0.8 < probs[:2].sum()
    hot = process_logits(logits, 2.0, 0, 1.0)
    np.testing.assert_allclose(hot.exp().numpy(), torch.softmax(logits / 2, -1).numpy(), rtol=1e-6)


# ---------------------------------------------------------------------- shared prefill
def _reference_samples(gen, prompt: str, n: int, steps: int, temperature: float, seed: int) -> list[list[int]]:
    """Naive sampling: every sample re-encodes prompt + its tokens from scratch at every step (no cache)."""
    from workbench.backends.generator import process_logits, sample_seed

    prompt_ids = _ids(gen, prompt)
    samples = []
    for j in range(n):
        rng = torch.Generator().manual_seed(sample_seed(seed, prompt, j))
        tokens: list[int] = []
        for _ in range(steps):
            logits = _direct_logits(gen, prompt_ids + tokens)[-1:]
            probs = process_logits(logits, temperature, 0, 1.0).exp()[0]
            u = torch.rand((), generator=rng)
            cdf = probs.cumsum(-1)
            tokens.append(int(min(int((cdf <= u * cdf[-1]).sum()), len(cdf) - 1)))
            if tokens[-1] in gen.eos_ids:
                break
        samples.append(tokens)
    return samples


def test_shared_prefill_equals_naive_reencoding(gen):
    n, steps = 4, 8
    shared = gen.generate(PROMPTS[:2], max_new_tokens=steps, temperature=1.0, n=n, stop=None, seed=11)
    shared_cost = gen.counter.snapshot()
    naive = gen.generate(
        PROMPTS[:2], max_new_tokens=steps, temperature=1.0, n=n, stop=None, seed=11, share_prefill=False
    )
    naive_cost = gen.counter.since(shared_cost)
    for i, prompt in enumerate(PROMPTS[:2]):
        reference = _reference_samples(gen, prompt, n, steps, 1.0, seed=11)
        for j in range(n):
            a, b = shared[i * n + j], naive[i * n + j]
            tokens = a.token_ids.tolist() + ([reference[j][-1]] if a.finish_reason == "eos" else [])
            assert tokens == reference[j]
            assert a.token_ids.tolist() == b.token_ids.tolist() and a.text == b.text
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
            assert a.sample_index == j
    assert len({tuple(g.token_ids) for g in shared[:n]}) > 1  # the samples differ from each other
    prompt_tokens = sum(len(_ids(gen, p)) for p in PROMPTS[:2])
    assert shared_cost.prefill_tokens == prompt_tokens
    assert naive_cost.prefill_tokens == n * prompt_tokens
    assert shared_cost.decoded_tokens == naive_cost.decoded_tokens
    assert shared_cost.lm_calls == naive_cost.lm_calls == 2  # prompts (their samples count once)
    assert shared_cost.lm_batches == naive_cost.lm_batches == 1


def test_greedy_with_n_returns_identical_copies(gen):
    outs = gen.generate(PROMPTS[:2], max_new_tokens=5, n=3, stop=None)
    assert len(outs) == 6
    assert [g.sample_index for g in outs] == [0, 1, 2, 0, 1, 2]
    assert all(g.token_ids.tolist() == outs[0].token_ids.tolist() for g in outs[:3])
    assert gen.counter.prefill_tokens == sum(len(_ids(gen, p)) for p in PROMPTS[:2])
    assert gen.counter.decoded_tokens <= 2 * 5


def test_sample_groups_per_prompt(gen):
    groups = gen.sample(PROMPTS, 2, max_new_tokens=3, temperature=1.0, stop=None)
    assert len(groups) == 3 and all(len(g) == 2 for g in groups)
    assert [g[0].prompt for g in groups] == PROMPTS


# ---------------------------------------------------------------------- determinism
def test_samples_do_not_depend_on_batch_composition(gen):
    kwargs = {"max_new_tokens": 8, "temperature": 1.0, "top_p": 0.95, "stop": None, "seed": 5}
    alone = gen.generate([PROMPTS[2]], n=3, **kwargs)
    in_batch = gen.generate([PROMPTS[0], PROMPTS[2], PROMPTS[1]], n=3, **kwargs)[3:6]
    fewer = gen.generate([PROMPTS[2]], n=2, **kwargs)
    for a, b in zip(alone, in_batch, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert [g.token_ids.tolist() for g in fewer] == [g.token_ids.tolist() for g in alone[:2]]
    again = gen.generate([PROMPTS[2]], n=3, **kwargs)
    assert [g.token_ids.tolist() for g in again] == [g.token_ids.tolist() for g in alone]
    other_seed = gen.generate([PROMPTS[2]], n=3, **{**kwargs, "seed": 6})
    assert [g.token_ids.tolist() for g in other_seed] != [g.token_ids.tolist() for g in alone]


def test_default_seed_is_the_generators(gen):
    a = gen.generate([PROMPTS[0]], max_new_tokens=5, temperature=1.0, stop=None)
    b = gen.generate([PROMPTS[0]], max_new_tokens=5, temperature=1.0, stop=None, seed=gen.seed)
    assert a[0].token_ids.tolist() == b[0].token_ids.tolist()


# ---------------------------------------------------------------------- stopping
def test_stop_string_cuts_text_and_tokens(gen):
    full = gen.generate([PROMPTS[1]], max_new_tokens=12, stop=None)[0]
    assert len(full.text) > 4
    stop = full.text[3:5]
    cut = gen.generate([PROMPTS[1]], max_new_tokens=12, stop=[stop, "no-such-stop"])[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(stop)]
    k = len(cut.token_ids)
    assert cut.token_ids.tolist() == full.token_ids[:k].tolist()
    decoded = gen.tokenizer.decode(cut.token_ids.tolist())
    assert decoded.startswith(cut.text)  # the kept tokens cover the text ...
    assert len(gen.tokenizer.decode(cut.token_ids[:-1].tolist())) < len(cut.text) or k == 0  # ... minimally
    np.testing.assert_allclose(cut.logprobs, full.logprobs[:k], atol=1e-6)
    assert gen.counter.decoded_tokens < 12 + 12


def test_eos_ends_a_sequence_and_is_not_kept(gen):
    full = gen.generate([PROMPTS[0]], max_new_tokens=8, stop=None)[0]
    gen.eos_ids = frozenset({int(full.token_ids[2])})
    out = gen.generate([PROMPTS[0]], max_new_tokens=8, stop=None)[0]
    first = full.token_ids.tolist().index(int(full.token_ids[2]))
    assert out.finish_reason == "eos"
    assert out.token_ids.tolist() == full.token_ids[:first].tolist()
    # the EOS token's log-prob and entropy are kept for the stats graph (no scoring pass needed)
    assert out.eos_logprob == pytest.approx(float(full.logprobs[first]), abs=1e-6)
    assert out.eos_entropy == pytest.approx(float(full.entropies[first]), abs=1e-6)
    assert full.eos_logprob is None


def test_finished_rows_leave_the_batch(gen):
    short_stop = gen.generate([PROMPTS[0]], max_new_tokens=10, stop=None)[0].text[:1]
    outs = gen.generate([PROMPTS[0], PROMPTS[2]], max_new_tokens=10, stop=[short_stop])
    assert outs[0].finish_reason == "stop" and outs[0].text == "" and len(outs[0].token_ids) == 0
    alone = gen.generate([PROMPTS[2]], max_new_tokens=10, stop=[short_stop])[0]
    assert alone.token_ids.tolist() == outs[1].token_ids.tolist()


# ---------------------------------------------------------------------- hidden states and attentions
def test_hidden_states_match_a_direct_forward_pass(gen):
    out = gen.generate([PROMPTS[1]], max_new_tokens=5, stop=None, return_hidden_layer=1)[0]
    prompt_ids = _ids(gen, PROMPTS[1])
    with torch.inference_mode():
        hs = gen.model(input_ids=torch.tensor([prompt_ids + out.token_ids.tolist()]), output_hidden_states=True)
    layer = hs.hidden_states[1][0].numpy()
    predicting = layer[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(out.token_ids)]
    np.testing.assert_allclose(out.hidden_mean, predicting.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(out.hidden_last, predicting[-1], atol=1e-5)  # length finish: last computed step
    assert out.hidden_mean.shape == (gen.model.config.hidden_size,)
    assert out.attentions is None


def test_hidden_last_is_the_step_fed_the_last_answer_token_when_a_stop_follows(gen):
    kwargs = {"max_new_tokens": 8, "temperature": 1.0, "seed": 1}
    full = gen.generate([PROMPTS[1]], stop=None, **kwargs)[0]
    pieces = [gen.tokenizer.decode([t]) for t in full.token_ids.tolist()]
    k = next(k for k in range(2, 8) if pieces[k].strip() and pieces[k] not in "".join(pieces[:k]))
    out = gen.generate([PROMPTS[1]], stop=[pieces[k]], return_hidden_layer=-1, **kwargs)[0]
    assert out.finish_reason == "stop" and len(out.token_ids) == k
    prompt_ids = _ids(gen, PROMPTS[1])
    with torch.inference_mode():
        hs = gen.model(input_ids=torch.tensor([prompt_ids + out.token_ids.tolist()]), output_hidden_states=True)
    layer = hs.hidden_states[-1][0].numpy()
    np.testing.assert_allclose(out.hidden_last, layer[-1], atol=1e-5)  # input = last answer token
    np.testing.assert_allclose(out.hidden_mean, layer[len(prompt_ids) - 1 : -1].mean(axis=0), atol=1e-5)


def test_attention_diagonal_over_answer_tokens(gen):
    out = gen.generate([PROMPTS[0]], max_new_tokens=4, stop=None, return_attentions=True)[0]
    cfg = gen.model.config
    assert out.attentions.shape == (cfg.num_hidden_layers, cfg.num_attention_heads, len(out.token_ids))
    prompt_ids = _ids(gen, PROMPTS[0])
    gen.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            ref = gen.model(input_ids=torch.tensor([prompt_ids + out.token_ids.tolist()]), output_attentions=True)
    finally:
        gen.model.set_attn_implementation("sdpa")
    last = ref.attentions[-1][0]  # (heads, q, k)
    positions = range(len(prompt_ids) - 1, len(prompt_ids) - 1 + len(out.token_ids))
    diag = np.stack([last[:, p, p].numpy() for p in positions], axis=-1)
    np.testing.assert_allclose(out.attentions[-1], diag, atol=1e-5)
    assert gen.model.config._attn_implementation == "sdpa"  # restored after the call


# ---------------------------------------------------------------------- scoring
def test_score_equals_manual_log_likelihood(gen):
    prompts = [PROMPTS[0], PROMPTS[1]]
    conts = [" is Paris.", " Shakespeare"]
    scored = gen.score(prompts, conts, add_eos=True)
    for prompt, cont, s in zip(prompts, conts, scored, strict=True):
        p_ids = _ids(gen, prompt)
        c_ids = gen.tokenizer(cont, add_special_tokens=False)["input_ids"] + [gen.tokenizer.eos_token_id]
        logp = torch.log_softmax(_direct_logits(gen, p_ids + c_ids)[len(p_ids) - 1 : -1], -1)
        manual = logp.gather(-1, torch.tensor(c_ids)[:, None])[:, 0].numpy()
        assert s.token_ids.tolist() == c_ids
        np.testing.assert_allclose(s.logprobs, manual, atol=1e-5)
        assert s.sum_logprob == pytest.approx(float(manual.sum()), abs=1e-4)
        assert s.mean_logprob == pytest.approx(float(manual.mean()), abs=1e-5)
    assert gen.counter.lm_calls == 2 and gen.counter.lm_batches == 1  # two scored pairs, one batch
    assert gen.counter.scored_tokens == sum(len(s.token_ids) for s in scored)


def test_score_agrees_with_generation_logprobs(gen):
    out = gen.generate([PROMPTS[2]], max_new_tokens=6, stop=None)[0]
    scored = gen.score([PROMPTS[2]], [gen.tokenizer.decode(out.token_ids.tolist())])[0]
    if scored.token_ids.tolist() == out.token_ids.tolist():  # re-tokenisation can merge differently
        np.testing.assert_allclose(scored.logprobs, out.logprobs, atol=1e-5)
    empty = gen.score([PROMPTS[0]], [""])[0]
    assert len(empty.token_ids) == 0 and empty.sum_logprob == 0.0 and np.isnan(empty.mean_logprob)
    with pytest.raises(ValueError, match="continuations"):
        gen.score(PROMPTS, ["x"])


# ---------------------------------------------------------------------- prompts, truncation, edge cases
def test_build_prompt_truncates_context_only(gen):
    question = "who wrote Hamlet?"
    context = " ".join(f"fact{i} about the Nile river." for i in range(60))
    built = gen.build_prompt(question, context, max_new_tokens=16)
    assert built.truncated and built.context_tokens_dropped > 0
    assert built.n_tokens <= gen.max_context - 16
    assert len(_ids(gen, built.text)) == built.n_tokens
    assert question in built.text
    assert "fact59 about the Nile river.\n" in built.text  # left truncation keeps the end of the context
    assert "fact0 " not in built.text
    assert gen.counter.truncated_prompts == 1
    short = gen.build_prompt(question, "The Nile is a river.", max_new_tokens=16)
    assert not short.truncated and "The Nile is a river." in short.text and gen.counter.truncated_prompts == 1
    with pytest.raises(DataError, match="question"):
        gen.build_prompt("why " * 200, context, max_new_tokens=16)


def test_overlong_plain_prompt_is_left_truncated_and_counted(gen):
    long_prompt = "the a an of in on " * 60 + "The capital of France"
    out = gen.generate([long_prompt], max_new_tokens=4, stop=None)[0]
    assert out.prompt_tokens == gen.max_context - 4
    assert gen.counter.truncated_prompts == 1
    assert gen.counter.prefill_tokens == gen.max_context - 4


def test_chat_template_rendering(gen):
    text = gen.render_chat("Hi there", system="Be brief.")
    assert text == "<|system|>Be brief.<|end|>\n<|user|>Hi there<|end|>\n<|assistant|>"


def test_no_chat_template_falls_back_and_warns_once(tiny_lm_no_template_dir, caplog):
    from workbench.backends.generator import Generator

    plain = Generator(tiny_lm_no_template_dir)
    with caplog.at_level(logging.WARNING, logger="workbench.backends.prompts"):
        first = plain.render_chat("What is the capital of France?", system="Answer briefly.")
        plain.render_chat("Another question?")
        plain.build_prompt("q?", "ctx", max_new_tokens=4)
    assert first == "System: Answer briefly.\nUser: What is the capital of France?\nAssistant:"
    warnings = [r for r in caplog.records if "no chat template" in r.getMessage()]
    assert len(warnings) == 1
    assert plain.prompts.fallback_warnings == 1


def test_empty_batch_and_bad_arguments(gen):
    assert gen.generate([], max_new_tokens=5) == []
    assert gen.score([], []) == []
    assert gen.counter.lm_calls == 0
    with pytest.raises(ValueError, match="top_p"):
        gen.generate(PROMPTS, max_new_tokens=5, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="n must be"):
        gen.generate(PROMPTS, max_new_tokens=5, n=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate(PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="no tokens"):
        gen.generate([""], max_new_tokens=3)


def test_unknown_model_path_is_a_one_line_asset_error(tmp_path):
    from workbench.backends.generator import Generator

    with pytest.raises(AssetError) as info:
        Generator(tmp_path / "no-such-model")
    assert "\n" not in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(AssetError) as info:
        Generator(tmp_path / "empty")
    assert "\n" not in str(info.value) and "cannot load" in str(info.value)


def test_cost_counts_of_a_plain_call(gen):
    outs = gen.generate(PROMPTS, max_new_tokens=3, stop=None)
    assert gen.counter.lm_calls == 3 and gen.counter.lm_batches == 1  # three prompts, one batch (batch_size 8)
    assert gen.counter.prefill_tokens == sum(len(_ids(gen, p)) for p in PROMPTS)
    assert gen.counter.decoded_tokens == sum(len(g.token_ids) + (g.finish_reason == "eos") for g in outs)
    assert gen.fingerprint and isinstance(gen.fingerprint, str)


def test_left_padded_batch_right_aligns_rows_and_counts_positions_from_each_first_token():
    from workbench.backends.generator import left_padded_batch

    ids, mask, positions = left_padded_batch([[5, 6, 7], [9]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]


# ---------------------------------------------------------------------- split prefill on a CPU
def test_a_cpu_prefill_over_the_token_budget_is_split_and_joined_with_the_same_outputs(gen, monkeypatch):
    from workbench.backends.generator import prefill as module

    prompts = [" ".join([p] * k) for p, k in zip(PROMPTS, (1, 2, 3), strict=True)]  # 3 widths, padding needed
    widths = [len(_ids(gen, p)) for p in prompts]
    kwargs = {"max_new_tokens": 6, "temperature": 1.0, "n": 2, "stop": None, "seed": 3}
    monkeypatch.setattr(module, "CPU_PREFILL_TOKENS", 10_000)  # one padded forward
    together = gen.generate(prompts, **kwargs)
    together_cost = gen.counter.snapshot()
    forwards: list[int] = []
    real_forward = gen._prefill_forward
    monkeypatch.setattr(
        gen, "_prefill_forward", lambda ids, params: forwards.append(len(ids)) or real_forward(ids, params)
    )
    monkeypatch.setattr(module, "CPU_PREFILL_TOKENS", min(widths) + 1)  # no two rows fit together
    split = gen.generate(prompts, **kwargs)
    split_cost = gen.counter.since(together_cost)
    assert forwards == [1, 1, 1] and gen.joinable_cache is True
    for a, b in zip(together, split, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.text == b.text
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert split_cost.prefill_tokens == together_cost.prefill_tokens == sum(widths)
    assert split_cost.lm_calls == together_cost.lm_calls and split_cost.lm_batches == together_cost.lm_batches


def test_rows_that_fit_the_budget_share_a_forward(gen, monkeypatch):
    from workbench.backends.generator import prefill as module

    widths = [len(_ids(gen, p)) for p in PROMPTS]
    monkeypatch.setattr(module, "CPU_PREFILL_TOKENS", 2 * max(widths))
    groups = gen._prefill_groups([_ids(gen, p) for p in PROMPTS], module.DecodingParams(max_new_tokens=1))
    assert [len(g) for g in groups] == [2, 1]
    attentions = module.DecodingParams(max_new_tokens=1, attentions=True)  # attention diagonals: one forward
    assert len(gen._prefill_groups([_ids(gen, p) for p in PROMPTS], attentions)) == 1
