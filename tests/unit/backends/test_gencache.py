"""GenerationCache: pickle-free round trips, keys, generator integration, and concurrent writers."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.gencache import GenerationCache, decode_generation, encode_generation
from workbench.backends.generator import Generation

PROMPTS = ["The capital of France", "Question: who wrote Hamlet? Answer:"]


def _generation(i: int = 0, with_extras: bool = True) -> Generation:
    rng = np.random.default_rng(i)
    return Generation(
        prompt=f"prompt {i} ünïcode",
        text=f"answer {i}",
        token_ids=np.arange(i, i + 4, dtype=np.int64),
        logprobs=rng.normal(size=4).astype(np.float32),
        logprobs_processed=np.zeros(4, dtype=np.float32),
        entropies=rng.random(4).astype(np.float32),
        finish_reason="stop",
        sample_index=i % 3,
        prompt_tokens=7,
        hidden_last=rng.normal(size=16).astype(np.float32) if with_extras else None,
        hidden_mean=rng.normal(size=16).astype(np.float32) if with_extras else None,
        attentions=rng.random((2, 4, 4)).astype(np.float32) if with_extras else None,
    )


def _assert_same(a: Generation, b: Generation) -> None:
    for name, value in vars(a).items():
        if name == "decode_steps":  # what the sample cost the call that made it: never cached (None when cached)
            continue
        other = getattr(b, name)
        if isinstance(value, np.ndarray):
            assert isinstance(other, np.ndarray) and other.dtype == value.dtype
            np.testing.assert_array_equal(other, value)
        else:
            assert other == value, name


def test_blob_round_trip_without_pickle():
    for gen in (_generation(1), _generation(2, with_extras=False)):
        blob = encode_generation(gen)
        assert blob.startswith(b"WBGEN1\n") and b"pickle" not in blob
        _assert_same(decode_generation(blob), gen)
    empty = Generation("p", "", *(np.zeros(0, dtype=np.float32) for _ in range(4)), finish_reason="eos")
    empty.token_ids = np.zeros(0, dtype=np.int64)
    _assert_same(decode_generation(encode_generation(empty)), empty)
    with pytest.raises(ValueError, match="magic"):
        decode_generation(b"\x80\x04garbage")


def test_put_get_stats_and_wal(tmp_path):
    cache = GenerationCache(tmp_path / "gen.sqlite")
    keys = [GenerationCache.make_key("fp", f"p{i}", {"t": 0}, 0) for i in range(3)]
    cache.put_many({keys[0]: _generation(0), keys[1]: _generation(1)})
    got = cache.get_many(keys)
    assert set(got) == set(keys[:2])
    _assert_same(got[keys[1]], _generation(1))
    assert cache.get(keys[2]) is None
    assert cache.stats() == {"hits": 2, "misses": 2, "writes": 2, "entries": 2}
    cache.put(keys[0], _generation(5))  # an existing key is kept
    _assert_same(cache.get(keys[0]), _generation(0))
    mode = sqlite3.connect(tmp_path / "gen.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"
    cache.close()
    assert len(GenerationCache(tmp_path / "gen.sqlite")) == 2  # persistent


def test_keys_separate_everything_that_changes_the_output():
    base = GenerationCache.make_key("fp", "prompt", {"temperature": 0.7, "seed": 1}, 0)
    assert base == GenerationCache.make_key("fp", "prompt", {"seed": 1, "temperature": 0.7}, 0)
    others = [
        GenerationCache.make_key("fp2", "prompt", {"temperature": 0.7, "seed": 1}, 0),
        GenerationCache.make_key("fp", "prompt ", {"temperature": 0.7, "seed": 1}, 0),
        GenerationCache.make_key("fp", "prompt", {"temperature": 0.7, "seed": 2}, 0),
        GenerationCache.make_key("fp", "prompt", {"temperature": 0.7, "seed": 1, "hidden_layer": 3}, 0),
        GenerationCache.make_key("fp", "prompt", {"temperature": 0.7, "seed": 1}, 1),
    ]
    assert len({base, *others}) == 6 and all(len(k) == 64 for k in others)


def test_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    cache = GenerationCache()
    assert cache.path == tmp_path / "generations" / "generations.sqlite"
    assert cache.path.is_file()


@pytest.fixture(scope="module")
def tiny_gen(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir)


def test_generator_second_call_hits_and_returns_identical_results(tiny_gen, tmp_path):
    tiny_gen.cache = GenerationCache(tmp_path / "gen.sqlite")
    tiny_gen.counter = CostCounter()
    kwargs = {"max_new_tokens": 6, "temperature": 0.8, "n": 3, "stop": None, "return_hidden_layer": -1}
    try:
        first = tiny_gen.generate(PROMPTS, **kwargs)
        cost = tiny_gen.counter.snapshot()
        second = tiny_gen.generate(PROMPTS, **kwargs)
        again = tiny_gen.counter.since(cost)
        for a, b in zip(first, second, strict=True):
            _assert_same(a, b)
        assert (cost.cache_misses, cost.cache_hits) == (6, 0)
        assert (again.cache_hits, again.cache_misses) == (6, 0)
        assert again.lm_calls == again.prefill_tokens == again.decoded_tokens == 0
        assert tiny_gen.cache.stats() == {"hits": 6, "misses": 6, "writes": 6, "entries": 6}
        # more samples of the same request: the first three come from the cache, three are new
        before_more = tiny_gen.counter.snapshot()
        more = tiny_gen.generate(PROMPTS, **{**kwargs, "n": 6})
        step = tiny_gen.counter.since(before_more)
        assert (step.cache_hits, step.cache_misses) == (6, 6)
        for i in range(2):
            for j in range(3):
                _assert_same(more[i * 6 + j], first[i * 3 + j])
        tiny_gen.cache = None
        fresh = tiny_gen.generate(PROMPTS, **{**kwargs, "n": 6})
        for a, b in zip(more, fresh, strict=True):
            assert a.token_ids.tolist() == b.token_ids.tolist()
    finally:
        tiny_gen.cache = None


def test_generator_cache_separates_requests_and_dedupes(tiny_gen, tmp_path):
    tiny_gen.cache = GenerationCache(tmp_path / "gen.sqlite")
    tiny_gen.counter = CostCounter()
    try:
        tiny_gen.generate(PROMPTS, max_new_tokens=4, stop=None)  # greedy: 2 misses
        tiny_gen.generate(PROMPTS, max_new_tokens=4, stop=None, seed=99)  # greedy ignores the seed: 2 hits
        tiny_gen.generate(PROMPTS, max_new_tokens=5, stop=None)  # other params: 2 misses
        dup = tiny_gen.generate([PROMPTS[0], PROMPTS[0]], max_new_tokens=6, stop=None)  # duplicate prompt: 1 miss
        assert (tiny_gen.counter.cache_hits, tiny_gen.counter.cache_misses) == (2, 5)
        assert dup[0].token_ids.tolist() == dup[1].token_ids.tolist()
        assert len(tiny_gen.cache) == 5
    finally:
        tiny_gen.cache = None


def _writer(path: str, worker: int, rounds: int, queue) -> None:
    """Child process: write overlapping and own keys many times, read them back."""
    try:
        cache = GenerationCache(path, timeout=30)
        for r in range(rounds):
            items = {
                GenerationCache.make_key("fp", "shared", {}, r): _generation(r),
                GenerationCache.make_key("fp", f"own-{worker}", {}, r): _generation(100 * worker + r),
            }
            cache.put_many(items)
            got = cache.get_many(list(items))
            assert len(got) == 2
        queue.put((worker, "ok"))
    except Exception as exc:  # reported to the parent
        queue.put((worker, repr(exc)))


def test_several_processes_share_one_database(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    GenerationCache(path).close()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    workers, rounds = 4, 40
    procs = [ctx.Process(target=_writer, args=(path, w, rounds, queue)) for w in range(workers)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results == {w: "ok" for w in range(workers)}
    cache = GenerationCache(path)
    assert len(cache) == rounds + workers * rounds
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for w in range(workers):
        key = GenerationCache.make_key("fp", f"own-{w}", {}, rounds - 1)
        _assert_same(cache.get(key), _generation(100 * w + rounds - 1))
    _assert_same(cache.get(GenerationCache.make_key("fp", "shared", {}, 3)), _generation(3))
