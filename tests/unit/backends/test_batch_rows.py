"""The generator's batches: past ``batch_size`` prompts while the decoding rows stay within ``batch_rows``, never
past it for a request of attentions, and the same generations whatever the packing."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.cost import CostCounter

pytest.importorskip("torch")

QUESTIONS = [f"Question number {i}: what is {i} plus {i}?" for i in range(20)]


@pytest.fixture(scope="module")
def generator(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, batch_size=4, batch_rows=12)


def _batches(generator, **kwargs) -> int:
    """The decoding batches one uncached call made."""
    generator.cache, generator.counter = None, CostCounter()
    generator.generate(QUESTIONS[: kwargs.pop("prompts")], max_new_tokens=3, stop=(), **kwargs)
    return generator.counter.lm_batches


def test_greedy_prompts_fill_a_batch_up_to_batch_rows(generator):
    assert _batches(generator, prompts=12) == 1  # 12 rows: three times batch_size prompts, one batch
    assert _batches(generator, prompts=13) == 2
    assert _batches(generator, prompts=20) == 2  # 12 + 8


def test_samples_count_as_rows_and_batch_size_prompts_always_go_together(generator):
    assert _batches(generator, prompts=6, n=2, temperature=0.7) == 1  # 6 prompts x 2 samples = 12 rows
    assert _batches(generator, prompts=6, n=3, temperature=0.7) == 2  # 4 prompts (12 rows), then 2
    # batch_size prompts go together even past batch_rows (5 samples each: 20 rows), as before batch_rows
    assert _batches(generator, prompts=8, n=5, temperature=0.7) == 2


def test_attentions_keep_batch_size_prompts(generator):
    assert _batches(generator, prompts=12, return_attentions=True) == 3


def test_the_packing_changes_no_generation(generator):
    def run(rows: int):
        generator.cache, generator.counter, generator.batch_rows = None, CostCounter(), rows
        try:
            return generator.generate(QUESTIONS, max_new_tokens=6, stop=(), temperature=0.7, n=2, seed=3)
        finally:
            generator.batch_rows = 12

    packed, plain = run(40), run(1)  # one batch of 20 prompts (40 rows) vs 5 of batch_size = 4
    for a, b in zip(packed, plain, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.text == b.text
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_batch_rows_must_be_positive(tiny_lm_dir):
    from workbench.backends.generator import Generator

    with pytest.raises(ValueError, match="batch_rows"):
        Generator(tiny_lm_dir, batch_rows=0)


def test_a_gpu_prefill_forwards_batch_size_rows_at_a_time(generator, monkeypatch):
    """Off a CPU a batch of up to batch_rows prompts is prefilled batch_size rows per forward (the activations of
    batch_size prompts, as before batch_rows), and decodes as one batch with the same generations."""
    widths: list[int] = []
    hook = generator.model.register_forward_hook(
        lambda m, args, kwargs, out: widths.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        generator.cache, generator.counter, generator.prefix_reuse = None, CostCounter(), False
        on_cpu = generator.generate(QUESTIONS[:12], max_new_tokens=2, stop=())
        cpu_widths, widths[:] = list(widths), []
        monkeypatch.setattr(type(generator), "_device_type", lambda self: "cuda")
        as_gpu = generator.generate(QUESTIONS[:12], max_new_tokens=2, stop=())
    finally:
        hook.remove()
        generator.prefix_reuse = True
    assert widths == [4, 4, 4, 12]  # three prefill forwards of batch_size rows, then one step of all 12
    assert cpu_widths[-1] == 12 and generator.counter.lm_batches == 2  # one batch per call
    for a, b in zip(on_cpu, as_gpu, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()


def test_a_cache_that_cannot_be_joined_keeps_batch_size_prompts(generator):
    saved = generator.joinable_cache
    generator.joinable_cache = False  # e.g. sliding-window layers: a prefill is one forward of the whole batch
    try:
        assert _batches(generator, prompts=12) == 3
    finally:
        generator.joinable_cache = saved
