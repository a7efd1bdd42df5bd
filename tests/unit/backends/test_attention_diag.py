"""The last layer's attention diagonal read while decoding (``return_answer_attention``): the formula against eager
softmax, the same values as the teacher-forced pass, no token changed, the attention function restored, and the
stats graph's fallback to the pass for answers without it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from workbench.backends import attention_diag  # noqa: E402
from workbench.backends.attention_diag import LOG_FLOOR, last_layer_logdiag, own_key_logprobs  # noqa: E402
from workbench.backends.cost import CostCounter  # noqa: E402

PROMPTS = [
    "Question: what is the tallest mountain on Earth?",
    "Q: who?",
    "Question: name a river that flows through Paris, the capital of France.",
    "Tell me a colour.",
    "Question: what is two plus two?",
]


def _eager_diagonal(query, key, visible, scaling, softcap=None):
    """Eager attention's post-softmax weights (float64), read at each query's own (rightmost visible) key."""
    groups = query.shape[1] // key.shape[1]
    k = key.double().repeat_interleave(groups, dim=1)
    scores = query.double() @ k.transpose(-1, -2) * scaling
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    n_k = scores.shape[-1]
    own = n_k - 1 - torch.flip(visible.to(torch.int8), dims=[-1]).argmax(-1)  # (B, 1, Q)
    own = own.expand(scores.shape[0], scores.shape[1], -1)
    return torch.log(torch.gather(weights, -1, own.unsqueeze(-1)).squeeze(-1).clamp_min(1e-12))


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_the_formula_is_eager_softmax_at_the_own_key_for_every_mask_form(softcap):
    gen = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, queries, keys, dim = 2, 4, 2, 5, 7, 8
    query = torch.randn(batch, heads, queries, dim, generator=gen)
    key = torch.randn(batch, kv_heads, keys, dim, generator=gen)
    scaling = dim**-0.5
    causal = torch.arange(keys)[None, :] <= torch.arange(queries)[:, None] + (keys - queries)
    padded = causal[None, None].repeat(batch, 1, 1, 1)
    padded[0, :, :, :2] = False  # row 0 is left-padded by two keys
    cases = {
        "none": (None, causal[None, None].expand(batch, 1, queries, keys)),
        "bool": (padded, padded),
        "float": (torch.zeros(padded.shape).masked_fill(~padded, torch.finfo(torch.float32).min), padded),
    }
    for name, (mask, visible) in cases.items():
        got = own_key_logprobs(query, key, mask, scaling=scaling, groups=heads // kv_heads, softcap=softcap)
        want = _eager_diagonal(query, key, visible, scaling, softcap)
        assert got.shape == (batch, heads, queries), name
        assert torch.allclose(got.double(), want, atol=1e-5), name
    assert float(got.min()) >= LOG_FLOOR


@pytest.fixture(scope="module")
def generator(tiny_lm_dir):
    from workbench.backends.generator import Generator

    generator = Generator(tiny_lm_dir, batch_size=4)
    generator.prefix_min_tokens = 4  # the prompts share short prefixes: their prefill reuses them
    return generator


def _pass(generator, prompts, answers):
    from workbench.uncertainty.attention_stats import answer_attention_logdiag

    return answer_attention_logdiag(generator, prompts, answers)


@pytest.mark.parametrize(
    ("stop", "eos_early"),
    [((), False), (("\n",), False), ((), True)],
    ids=["length", "stop-strings", "eos"],
)
def test_decoding_reads_what_the_teacher_forced_pass_reads_and_changes_no_token(generator, stop, eos_early):
    generator.cache, generator.counter = None, CostCounter()
    eos_before = generator.eos_ids
    try:
        plain = generator.generate(PROMPTS, max_new_tokens=6, stop=stop)
        if eos_early:  # the third token of the first answer becomes an EOS: rows end at EOS, others at the cap
            generator.eos_ids = generator.eos_ids | {int(plain[0].token_ids[2])}
            plain = generator.generate(PROMPTS, max_new_tokens=6, stop=stop)
            assert "eos" in {g.finish_reason for g in plain}
        read = generator.generate(PROMPTS, max_new_tokens=6, stop=stop, return_answer_attention=True)
    finally:
        generator.eos_ids = eos_before
    reference = _pass(generator, PROMPTS, plain)
    heads = generator.model.config.num_attention_heads
    for a, b, ref in zip(plain, read, reference, strict=True):
        assert list(a.token_ids) == list(b.token_ids) and a.text == b.text and a.finish_reason == b.finish_reason
        assert a.attention_logdiag is None
        assert b.attention_logdiag is not None and b.attention_logdiag.dtype == np.float32
        assert b.attention_logdiag.shape == (heads, len(b.token_ids)) == ref.shape
        np.testing.assert_allclose(b.attention_logdiag, ref, atol=1e-4)


def test_the_rows_that_end_at_the_cap_cost_one_extra_forward_and_nothing_else(generator, monkeypatch):
    generator.cache, generator.counter = None, CostCounter()
    forwards = []
    real_step = type(generator).step

    def step(self, state, tokens, params):
        forwards.append(len(tokens))
        return real_step(self, state, tokens, params)

    monkeypatch.setattr(type(generator), "step", step)
    plain = generator.generate(PROMPTS[:4], max_new_tokens=5, stop=())
    counted = generator.counter.snapshot()
    plain_forwards, forwards[:] = list(forwards), []
    generator.generate(PROMPTS[:4], max_new_tokens=5, stop=(), return_answer_attention=True)
    at_cap = sum(g.finish_reason == "length" for g in plain)
    assert at_cap > 0
    assert forwards[:-1] == plain_forwards and forwards[-1] == at_cap  # one more forward: the capped rows' last token
    # the counted costs are the decode's: the extra forward feeds no decoded token
    assert generator.counter.since(counted).decoded_tokens == counted.decoded_tokens


def test_eager_attention_is_wrapped_too(generator):
    generator.cache, generator.counter = None, CostCounter()
    previous = generator.model.config._attn_implementation
    generator.model.set_attn_implementation("eager")
    try:
        read = generator.generate(PROMPTS[:3], max_new_tokens=4, stop=(), return_answer_attention=True)
    finally:
        generator.model.set_attn_implementation(previous)
    for b, ref in zip(read, _pass(generator, PROMPTS[:3], read), strict=True):
        np.testing.assert_allclose(b.attention_logdiag, ref, atol=1e-4)


def test_the_attention_function_is_restored_even_after_an_error(generator):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    with pytest.raises(RuntimeError, match="boom"), last_layer_logdiag(generator.model) as recorder:
        assert recorder.active
        raise RuntimeError("boom")
    assert dict(ALL_ATTENTION_FUNCTIONS._local_mapping) == before


def test_a_model_it_cannot_wrap_gives_no_diagonal_and_the_stats_read_it_by_the_pass(generator, monkeypatch):
    from workbench.backends.nli import AnswerEquivalenceJudge
    from workbench.uncertainty.calculators import StatSettings, compute_stats

    generator.cache, generator.counter = None, CostCounter()
    questions = [{"question": p} for p in PROMPTS[:3]]
    settings = StatSettings(max_new_tokens=5)
    judge = AnswerEquivalenceJudge()
    decoded = compute_stats(questions, {"attention_logdiag"}, generator=generator, judge=judge, settings=settings)
    assert generator.counter.scored_tokens == 0  # read while decoding: no teacher-forced pass

    monkeypatch.setattr(attention_diag, "last_attention_module", lambda model: None)
    assert generator.generate(PROMPTS[:1], max_new_tokens=3, return_answer_attention=True)[0].attention_logdiag is None
    generator.counter = CostCounter()
    passed = compute_stats(questions, {"attention_logdiag"}, generator=generator, judge=judge, settings=settings)
    assert generator.counter.scored_tokens > 0  # the pass ran for every answer
    for a, b in zip(decoded, passed, strict=True):
        np.testing.assert_allclose(a["attention_logdiag"], b["attention_logdiag"], atol=1e-4)


def test_the_diagonal_survives_the_generation_cache_and_older_entries_lack_it(generator):
    from workbench.backends.gencache import decode_generation, encode_generation

    generator.cache, generator.counter = None, CostCounter()
    read = generator.generate(PROMPTS[:1], max_new_tokens=4, return_answer_attention=True)[0]
    again = decode_generation(encode_generation(read))
    np.testing.assert_array_equal(again.attention_logdiag, read.attention_logdiag)
    read.attention_logdiag = None
    assert decode_generation(encode_generation(read)).attention_logdiag is None


def test_models_decoding_in_two_threads_at_once_each_get_their_own_diagonal(generator, tiny_lm_dir):
    from concurrent.futures import ThreadPoolExecutor

    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from workbench.backends.generator import Generator

    other = Generator(tiny_lm_dir, batch_size=2, seed=1)
    before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    generator.cache, generator.counter = None, CostCounter()

    def run(gen, prompts):
        return gen.generate(prompts, max_new_tokens=8, stop=(), return_answer_attention=True)

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run, generator, PROMPTS), pool.submit(run, other, PROMPTS[::-1])]
        results = [f.result() for f in futures]
    for gen, prompts, read in zip((generator, other), (PROMPTS, PROMPTS[::-1]), results, strict=True):
        for b, ref in zip(read, _pass(gen, prompts, read), strict=True):
            np.testing.assert_allclose(b.attention_logdiag, ref, atol=1e-4)
    assert dict(ALL_ATTENTION_FUNCTIONS._local_mapping) == before


def test_a_step_whose_forward_recorded_another_count_leaves_the_answer_to_the_pass(generator, monkeypatch):
    from workbench.backends.attention_diag import LogDiagRecorder

    generator.cache, generator.counter = None, CostCounter()
    real_take = LogDiagRecorder.take
    calls = {"n": 0}

    def take(self):
        out = real_take(self)
        calls["n"] += 1
        return out * 2 if calls["n"] == 3 else out  # the second decode step seems to run the last layer twice

    monkeypatch.setattr(LogDiagRecorder, "take", take)
    read = generator.generate(PROMPTS[:2], max_new_tokens=4, stop=(), return_answer_attention=True)
    assert all(g.attention_logdiag is None for g in read)  # never a misplaced diagonal: the pass serves them


def test_a_sliding_window_last_layer_reads_the_same_diagonal_as_the_pass(tmp_path):
    """Gemma 3's layout (the optional embedded gemma3): sliding-window layers, the last one among them, prompts longer
    than its window — the layer's mask, not the key count, says which key is the query's own."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from tests.tiny_models import build_tiny_tokenizer
    from workbench.backends.generator import Generator

    tokenizer = build_tiny_tokenizer(tmp_path)
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Gemma3ForCausalLM(config).save_pretrained(tmp_path)
    generator = Generator(tmp_path, batch_size=4)
    plain = generator.generate(PROMPTS[:4], max_new_tokens=10, stop=())
    read = generator.generate(PROMPTS[:4], max_new_tokens=10, stop=(), return_answer_attention=True)
    assert min(len(g.token_ids) for g in plain) > 0
    for a, b, ref in zip(plain, read, _pass(generator, PROMPTS[:4], plain), strict=True):
        assert list(a.token_ids) == list(b.token_ids)
        np.testing.assert_allclose(b.attention_logdiag, ref, atol=1e-4)
