"""Prefix reuse in the generator: the plan, token-for-token parity with reuse off, the saved-token counter, and where
reuse turns itself off."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.prefix_reuse import PrefixGroup, common_prefix_length, continued_layout, plan_prefix_groups

torch = pytest.importorskip("torch")

SYSTEM = "You answer quiz questions. Reply with the answer only: a name, a date, a number or a short phrase."
QUESTIONS = [
    "Who wrote Hamlet?",
    "The Nile is a river in Africa. Where does it flow?",
    "What is the capital of France?",
    "Albert Einstein developed which theory?",
]


@pytest.fixture(scope="module")
def peaked(tmp_path_factory):
    """A tiny random Llama with large weights: peaked next-token distributions, so answers are varied tokens."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-peaked-reuse")
    build_tiny_llama(path, seed=2, max_positions=1024, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=8)


@pytest.fixture(scope="module")
def smooth(tiny_lm_long_dir):
    """The shared tiny Llama (small weights: float parity of log-probs is tight)."""
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_long_dir, batch_size=8)


def _fresh(gen):
    gen.counter = CostCounter()
    gen.prefix_reuse = True
    return gen


def _prompts(gen) -> list[str]:
    return [gen.render_chat(q, system=SYSTEM) for q in QUESTIONS]


def _both(gen, fn):
    """``fn()`` with reuse off, then on: the two results and the two costs."""
    out = {}
    for reuse in (False, True):
        gen.prefix_reuse = reuse
        before = gen.counter.snapshot()
        result = fn()
        out[reuse] = (result, gen.counter.since(before))
    gen.prefix_reuse = True
    return out[False], out[True]


def _same_generations(off, on, atol):
    assert len(off) == len(on)
    for a, b in zip(off, on, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        assert a.text == b.text and a.finish_reason == b.finish_reason
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=atol)
        np.testing.assert_allclose(a.entropies, b.entropies, atol=atol)


# ---------------------------------------------------------------------- the plan
def test_common_prefix_length():
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0


def test_the_plan_groups_rows_by_their_longest_worthwhile_shared_prefix():
    head, other = list(range(100, 120)), list(range(200, 230))
    rows = [[*head, 1, 2], [*other, 5], [*head, 3], [7, 8, 9], [*other, 6, 6], [*head, 4, 4, 4]]
    groups = plan_prefix_groups(rows, min_prefix=16)
    assert sorted(groups, key=lambda g: g.rows) == [PrefixGroup((0, 2, 5), 20), PrefixGroup((1, 4), 30)]
    assert sum(g.saved for g in groups) == 2 * 20 + 30
    assert plan_prefix_groups(rows, min_prefix=31) == []  # nothing shared is that long
    assert plan_prefix_groups(rows[:1]) == []


def test_every_row_keeps_its_own_suffix():
    head = list(range(100, 120))
    # a row that IS the prefix of the others keeps its last token (its logits), a read of k positions keeps k
    assert plan_prefix_groups([head, [*head, 1], [*head, 2]], min_prefix=4) == [PrefixGroup((0, 1, 2), 19)]
    assert plan_prefix_groups([[*head, 1, 2, 3], [*head, 4, 5, 6]], 4, min_suffix=5) == [PrefixGroup((0, 1), 18)]
    assert plan_prefix_groups([head, head], min_prefix=4) == [PrefixGroup((0, 1), 19)]  # identical rows


def test_the_plan_prefers_the_larger_saving_over_a_longer_prefix():
    system = list(range(100, 120))
    # 4 rows share 20 tokens; two of them share 25: one group of 4 saves 60, (2 + lone 2) would save 25 + 20
    rows = [system + [1] * 5 + [2], system + [1] * 5 + [3], [*system, 4], [*system, 5]]
    assert plan_prefix_groups(rows, min_prefix=16) == [PrefixGroup((0, 1, 2, 3), 20)]
    # with only the two that share 25 tokens and one other, the two form the group
    assert plan_prefix_groups([rows[0], rows[1], list(range(300, 330))], min_prefix=16) == [PrefixGroup((0, 1), 25)]


def test_the_continued_layout_leaves_a_hole_between_prefix_and_padded_suffix():
    ids, mask, positions = continued_layout([[5, 6], [7]], 3, pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 1]]
    assert positions.tolist() == [[3, 4], [3, 3]]


# ---------------------------------------------------------------------- parity, reuse on vs off
@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 0.0},
        {"temperature": 1.0, "n": 3, "seed": 5},
        {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "n": 2, "seed": 1, "return_hidden_layer": 1},
    ],
    ids=["greedy", "sampled", "nucleus+hidden"],
)
def test_generations_are_token_for_token_the_same_with_reuse(peaked, kwargs):
    gen = _fresh(peaked)
    prompts = _prompts(gen)
    lone = "True False yes no maybe"  # shares nothing: encoded whole beside the reused rows
    calls = [*prompts, lone]
    (off, off_cost), (on, on_cost) = _both(gen, lambda: gen.generate(calls, max_new_tokens=10, stop=None, **kwargs))
    _same_generations(off, on, atol=1e-4)
    if kwargs.get("return_hidden_layer") is not None:
        for a, b in zip(off, on, strict=True):
            np.testing.assert_allclose(a.hidden_last, b.hidden_last, rtol=1e-4, atol=1e-3)
    assert off_cost.prefix_reused_tokens == 0 and on_cost.prefix_reused_tokens > 0
    assert on_cost.prefill_tokens == off_cost.prefill_tokens  # a prompt's counted cost is its own either way
    assert on_cost.decoded_tokens == off_cost.decoded_tokens and on_cost.lm_calls == off_cost.lm_calls


def test_first_step_logprobs_agree_within_1e_5(smooth):
    gen = _fresh(smooth)
    prompts = _prompts(gen)
    (off, _), (on, cost) = _both(
        gen, lambda: gen.generate(prompts, max_new_tokens=1, stop=None, temperature=0.0, top_logprobs=10)
    )
    assert cost.prefix_reused_tokens > 0
    for a, b in zip(off, on, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        assert a.top_ids[0].tolist() == b.top_ids[0].tolist()
        np.testing.assert_allclose(a.top_logprobs[0], b.top_logprobs[0], atol=1e-5)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_rows_come_back_in_order_when_groups_interleave_and_cpu_chunks_split(peaked, monkeypatch):
    from workbench.backends.generator import prefill as module

    gen = _fresh(peaked)
    first = [gen.render_chat(q, system=SYSTEM) for q in QUESTIONS[:2]]
    second = [gen.render_chat(q, system="Answer like a pirate, in a few words, and never explain.") for q in QUESTIONS]
    calls = [second[0], first[0], "Paris", second[1], first[1], second[2], second[3]]
    (off, _), (on, cost) = _both(gen, lambda: gen.generate(calls, max_new_tokens=6, stop=None, temperature=0.0))
    _same_generations(off, on, atol=1e-4)
    monkeypatch.setattr(module, "CPU_PREFILL_TOKENS", 8)  # every suffix chunk holds one row
    gen.counter = CostCounter()
    split = gen.generate(calls, max_new_tokens=6, stop=None, temperature=0.0)
    _same_generations(off, split, atol=1e-4)
    assert gen.counter.prefix_reused_tokens == cost.prefix_reused_tokens > 0


def test_the_saved_token_count_on_a_constructed_example(smooth):
    from workbench.backends.generator import DecodingParams

    gen = _fresh(smooth)
    head = list(range(10, 40))  # 30 shared tokens
    rows = [[*head, 50, 51], [60, 61, 62], [*head, 52], [*head, 53, 54, 55]]
    params = DecodingParams(max_new_tokens=1)
    with torch.inference_mode():
        state = gen.prefill(rows, params)
        gen.prefix_reuse = False
        plain = gen.prefill(rows, params)
    assert gen.counter.prefix_reused_tokens == 2 * 30  # 3 rows share the head: it is encoded once, not 3 times
    assert gen.counter.prefill_tokens == 2 * sum(len(r) for r in rows)  # counted per row either way
    torch.testing.assert_close(state["logits"], plain["logits"], atol=1e-5, rtol=0)
    assert state["next_pos"].flatten().tolist() == [len(r) for r in rows] == plain["next_pos"].flatten().tolist()
    assert state["mask"].sum(1).tolist() == [len(r) for r in rows]  # the hole before each suffix is masked


def test_teacher_forced_reads_reuse_the_prefix_with_the_same_values(peaked):
    gen = _fresh(peaked)
    prompts = _prompts(gen)
    answers = ["Shakespeare", "north", "Paris", "relativity"]
    (off, off_cost), (on, on_cost) = _both(gen, lambda: gen.score(prompts, answers, add_eos=True))
    for a, b in zip(off, on, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    assert on_cost.prefix_reused_tokens > 0 and on_cost.prefill_tokens == off_cost.prefill_tokens
    (off, _), (on, cost) = _both(gen, lambda: gen.next_token_logprobs(prompts, ["yes", "no"]))
    np.testing.assert_allclose(off, on, atol=1e-4)
    assert cost.prefix_reused_tokens > 0


# ---------------------------------------------------------------------- where reuse is off
def test_reuse_is_off_when_attentions_are_requested(peaked):
    from workbench.backends.generator import DecodingParams

    gen = _fresh(peaked)
    assert gen.reuses_prefixes(DecodingParams(max_new_tokens=1))
    assert not gen.reuses_prefixes(DecodingParams(max_new_tokens=1, attentions=True))
    gen.generate(_prompts(gen), max_new_tokens=3, stop=None, temperature=0.0, return_attentions=True)
    assert gen.counter.prefix_reused_tokens == 0


def test_reuse_is_off_for_the_reencoding_comparison_and_by_the_switch(peaked):
    gen = _fresh(peaked)
    gen.generate(_prompts(gen), max_new_tokens=3, stop=None, temperature=1.0, n=2, share_prefill=False)
    assert gen.counter.prefix_reused_tokens == 0
    gen.prefix_reuse = False
    gen.generate(_prompts(gen), max_new_tokens=3, stop=None, temperature=1.0, n=2, seed=9)
    assert gen.counter.prefix_reused_tokens == 0


def test_reuse_is_off_for_a_cache_that_cannot_be_joined(peaked, monkeypatch):
    from workbench.backends.generator import prefill as module

    gen = _fresh(peaked)
    saved = gen.joinable_cache
    monkeypatch.setattr(module, "joinable", lambda state: False)
    gen.joinable_cache = None
    try:
        (off, _), (on, cost) = _both(gen, lambda: gen.generate(_prompts(gen), max_new_tokens=4, temperature=0.0))
        _same_generations(off, on, atol=1e-4)
        assert cost.prefix_reused_tokens == 0 and gen.joinable_cache is False
        assert not gen.reuses_prefixes()
    finally:
        gen.joinable_cache = saved


def test_reuse_is_off_under_an_attention_kernel_without_arbitrary_masks(peaked, monkeypatch):
    gen = _fresh(peaked)
    monkeypatch.setattr(gen.model.config, "_attn_implementation", "flash_attention_2")
    assert not gen.reuses_prefixes()


def test_the_generation_cache_key_does_not_depend_on_the_switch(peaked, tmp_path):
    from workbench.backends.gencache import GenerationCache

    gen = _fresh(peaked)
    gen.cache = GenerationCache(tmp_path / "generations.sqlite")
    try:
        first = gen.generate(_prompts(gen), max_new_tokens=4, temperature=1.0, n=2, seed=3)
        gen.prefix_reuse = False
        again = gen.generate(_prompts(gen), max_new_tokens=4, temperature=1.0, n=2, seed=3)
    finally:
        gen.cache = None
    assert gen.counter.cache_hits == len(again) and [g.text for g in first] == [g.text for g in again]
