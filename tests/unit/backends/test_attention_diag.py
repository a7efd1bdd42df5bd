"""The last layer's attention diagonal read while decoding (``return_answer_attention``): the formula against eager
softmax, the same values as the teacher-forced pass (itself against transformers' eager weights), no token changed,
the attention function restored, the hook scoped to the model and thread that asked, the extra memory linear in the
sequence length (issue 41, item 6), and the stats graph's fallback to the pass for answers without it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

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
        # read in blocks of one or two query rows, and only the last queries: the same values
        for block in (1, batch * heads * keys * 2):
            blocked = own_key_logprobs(
                query, key, mask, scaling=scaling, groups=heads // kv_heads, softcap=softcap, block_elements=block
            )
            assert torch.allclose(blocked.double(), want, atol=1e-5), (name, block)
        last = own_key_logprobs(query, key, mask, scaling=scaling, groups=heads // kv_heads, softcap=softcap, queries=2)
        assert last.shape == (batch, heads, 2) and torch.allclose(last.double(), want[..., -2:], atol=1e-5), name
    assert float(got.min()) >= LOG_FLOOR


class _NewStorage(TorchDispatchMode):
    """Records the bytes of every new storage an aten operation returns while the mode is active (a view of a
    storage already seen, the inputs' included, allocates nothing)."""

    def __init__(self, *inputs: torch.Tensor) -> None:
        super().__init__()
        self.known = {t.untyped_storage().data_ptr() for t in inputs}
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, tuple | list) else (out,):
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() not in self.known:
                self.known.add(value.untyped_storage().data_ptr())
                self.sizes.append(value.untyped_storage().nbytes())
        return out


def _largest(length: int, **kwargs) -> int:
    """The largest storage (bytes) :func:`own_key_logprobs` allocates for a causal prefill of ``length`` tokens."""
    gen = torch.Generator().manual_seed(1)
    batch, heads, kv_heads, dim = 2, 4, 2, 8
    query = torch.randn(batch, heads, length, dim, generator=gen)
    key = torch.randn(batch, kv_heads, length, dim, generator=gen)
    causal = torch.ones(batch, 1, length, length, dtype=torch.bool).tril()
    with _NewStorage(query, key, causal) as mode:
        own_key_logprobs(query, key, causal, scaling=dim**-0.5, groups=2, **kwargs)
    return max(mode.sizes)


def test_the_recorders_extra_memory_grows_linearly_with_the_sequence_length():
    # what a decoding recorder reads of a prefill (its last query), and every query read in blocks: 4x the length,
    # 4x the largest tensor; the full matrix in one block (the recorder before) grows 16x — the check can fail
    block = 2 * 4 * 256 * 2  # two query rows of the longer prefill's scores
    for kwargs in ({"queries": 1}, {"block_elements": block}):
        short, long = _largest(64, **kwargs), _largest(256, **kwargs)
        assert long <= 4 * short, kwargs
        assert long <= 4 * block, kwargs  # float32: at most two query rows of scores at once
    full_short, full_long = _largest(64, block_elements=None), _largest(256, block_elements=None)
    assert full_long == 16 * full_short == 4 * 2 * 4 * 256 * 256  # the (B, H, L, L) float32 scores


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
    target = attention_diag.last_attention_module(generator.model)
    config = target.config
    with pytest.raises(RuntimeError, match="boom"), last_layer_logdiag(generator.model) as recorder:
        assert recorder.active and target.config is not config
        raise RuntimeError("boom")
    assert dict(ALL_ATTENTION_FUNCTIONS._local_mapping) == before
    assert target.config is config and attention_diag.WRAPPER_KEY not in ALL_ATTENTION_FUNCTIONS


def test_only_the_model_and_the_thread_that_asked_go_through_the_recorder(generator, tiny_lm_dir, monkeypatch):
    """Another model of the process, and another thread running the same model, call transformers' attention
    straight from the modeling code while a recorder is open, with the same outputs; the asking thread's forward
    records its last layer only."""
    import sys
    import threading

    from transformers import AutoModelForCausalLM
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = generator.model
    other = AutoModelForCausalLM.from_pretrained(tiny_lm_dir).eval()
    implementation = model.config._attn_implementation
    real = ALL_ATTENTION_FUNCTIONS[implementation]
    calls: list[tuple[str, int, str]] = []  # (which model, thread, the function that called the attention)

    def spy(module, *args, **kwargs):
        owner = "model" if any(module is m for m in model.modules()) else "other"
        calls.append((owner, threading.get_ident(), sys._getframe(1).f_code.co_name))
        return real(module, *args, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._local_mapping, implementation, spy)
    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 11, 2]])
    with torch.inference_mode():
        alone = {"model": model(input_ids=ids).logits, "other": other(input_ids=ids).logits}
    calls.clear()
    outputs: dict[str, torch.Tensor] = {}
    with last_layer_logdiag(model, queries=1) as recorder, torch.inference_mode():
        outputs["other"] = other(input_ids=ids).logits
        worker = threading.Thread(target=lambda: outputs.setdefault("thread", model(input_ids=ids).logits))
        worker.start()
        worker.join()
        assert recorder.take() == []  # the other model and the other thread recorded nothing
        untouched = list(calls)
        calls.clear()
        outputs["model"] = model(input_ids=ids).logits
        recorded = recorder.take()
    layers = model.config.num_hidden_layers
    assert len(untouched) == 2 * layers and {caller for _, _, caller in untouched} == {"forward"}
    assert {owner for owner, _, _ in untouched} == {"model", "other"}
    assert [caller for _, _, caller in calls] == ["forward"] * (layers - 1) + ["_recording_attention"]
    assert len(recorded) == 1 and recorded[0].shape == (1, model.config.num_attention_heads, 1)
    assert torch.equal(outputs["other"], alone["other"]) and torch.equal(outputs["thread"], alone["model"])
    assert torch.equal(outputs["model"], alone["model"])


def _eager_reference(generator, prompts, answers) -> list[np.ndarray]:
    """log A^h_jj at each answer's tokens from the last layer's weights that eager attention returns for prompt +
    answer (left-padded, one forward): read here without the workbench's recorder."""
    from workbench.backends.decoding_state import left_padded_batch
    from workbench.backends.prompts import encode

    sequences = [
        encode(generator.tokenizer, p)[-a.prompt_tokens :] + list(a.token_ids)
        for p, a in zip(prompts, answers, strict=True)
    ]
    input_ids, mask, positions = left_padded_batch(sequences, generator.tokenizer.pad_token_id)
    previous = generator.model.config._attn_implementation
    generator.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            weights = generator.model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, output_attentions=True
            ).attentions[-1]
    finally:
        generator.model.set_attn_implementation(previous)
    diagonal = torch.diagonal(weights, dim1=-2, dim2=-1).double().clamp_min(1e-12).log()
    return [diagonal[b, :, diagonal.shape[-1] - len(a.token_ids) :].numpy() for b, a in enumerate(answers)]


def test_the_pass_reads_the_diagonal_of_transformers_eager_attention_weights(generator):
    """The teacher-forced pass, recorded beside the model's own attention, against the last layer's weights that
    eager attention returns."""
    generator.cache, generator.counter = None, CostCounter()
    answers = generator.generate(PROMPTS[:4], max_new_tokens=5, stop=())
    got = _pass(generator, PROMPTS[:4], answers)
    assert generator.model.config._attn_implementation != "eager"  # the pass ran under the model's own kernel
    for answer, values, reference in zip(answers, got, _eager_reference(generator, PROMPTS[:4], answers), strict=True):
        assert values.shape == (generator.model.config.num_attention_heads, len(answer.token_ids))
        np.testing.assert_allclose(values, reference, atol=1e-5)


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
    eager = _eager_reference(generator, PROMPTS[:4], plain)  # the sliding window's own weights, from transformers
    for a, b, ref, want in zip(plain, read, _pass(generator, PROMPTS[:4], plain), eager, strict=True):
        assert list(a.token_ids) == list(b.token_ids)
        np.testing.assert_allclose(b.attention_logdiag, ref, atol=1e-4)
        np.testing.assert_allclose(ref, want, atol=1e-5)
