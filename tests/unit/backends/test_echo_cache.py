"""The echo cache: an echoed sequence that continues one echoed before (by an earlier call) is encoded from that
one's kept KV cache, with the same log-probs, entropies, top lists and next-token logits as a whole forward; the
cache is bounded in tokens, least recently used out first, and only entries wide enough are used."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.echo_cache import EchoCache
from workbench.backends.generator import Generator


@pytest.fixture(scope="module")
def gen(tiny_lm_long_dir):
    return Generator(str(tiny_lm_long_dir), cache=None, batch_size=4)


def _ids(gen, text: str) -> list[int]:
    return list(gen.tokenizer(text, add_special_tokens=False)["input_ids"])


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.token_ids, b.token_ids)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    np.testing.assert_allclose(a.entropies, b.entropies, atol=1e-4)
    np.testing.assert_array_equal(a.top_ids, b.top_ids)
    np.testing.assert_allclose(a.top_logprobs, b.top_logprobs, atol=1e-4)


@pytest.mark.parametrize("opening", ["", "You answer questions about rivers, towns and their history, briefly. "])
def test_a_later_echo_continuing_an_earlier_one_reuses_its_kv_with_the_same_values(gen, opening):
    # with a shared opening the first call encodes it once for all three (a prefix group), else row by row
    base = [
        _ids(gen, f"{opening}Question {i}: which river flows through the old town of number {i}? Answer:")
        for i in range(3)
    ]
    cache = EchoCache(4096)
    first = gen.prompt_logprobs(base, top_logprobs=5, echo_cache=cache)
    assert len(cache) == 3 and cache.held_tokens == sum(map(len, base))
    for got, ids in zip(first, base, strict=True):
        _same(got, gen.prompt_logprobs([ids], top_logprobs=5)[0])
    # the teacher-forced option reads: a prompt + one option token, a prompt cut short + another token
    later = [[*base[0], 7], [*base[1], 9, 11], [*base[2][:-3], 5]]
    reused = gen.counter.prefix_reused_tokens
    kept, plain_next = [], []
    got = gen.prompt_logprobs(later, top_logprobs=3, echo_cache=cache, next_logits=kept)
    reused = gen.counter.prefix_reused_tokens - reused
    want = gen.prompt_logprobs(later, top_logprobs=3, next_logits=plain_next)
    for a, b in zip(got, want, strict=True):
        _same(a, b)
    for a, b in zip(kept, plain_next, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-4)
    assert cache.hits == 3
    assert reused == (len(base[0]) - 1) + (len(base[1]) - 1) + (len(base[2]) - 4)  # each fed from its last shared


def test_an_entry_narrower_than_asked_or_sharing_too_little_is_not_used(gen):
    ids = _ids(gen, "Which mountain range holds the highest peak of the whole continent, and how high is it?")
    cache = EchoCache(4096)
    gen.prompt_logprobs([ids], top_logprobs=2, echo_cache=cache)
    assert cache.lookup([*ids, 3], gen.prefix_min_tokens, width=5) is None  # top 2 kept, top 5 asked
    assert cache.lookup([*ids, 3], gen.prefix_min_tokens, width=2) is not None
    assert cache.lookup([*ids[:1], 3, 4, 5], gen.prefix_min_tokens, width=2) is None  # one token shared


def test_the_cache_holds_at_most_its_tokens_dropping_the_least_recently_used(gen):
    seqs = [_ids(gen, f"Entry number {i} of the cache, a sentence long enough to count.") for i in range(3)]
    cache = EchoCache(2 * max(map(len, seqs)))
    gen.prompt_logprobs(seqs[:2], top_logprobs=1, echo_cache=cache)
    assert cache.lookup([*seqs[0], 1], 2, 1) is not None  # entry 0 is now the most recently used
    gen.prompt_logprobs(seqs[2:], top_logprobs=1, echo_cache=cache)
    assert cache.held_tokens <= cache.max_tokens and len(cache) == 2
    assert cache.lookup([*seqs[1], 1], len(seqs[1]), 1) is None  # entry 1 went first
    assert cache.lookup([*seqs[0], 1], len(seqs[0]), 1) is not None
    with pytest.raises(ValueError, match="max_tokens"):
        EchoCache(0)
