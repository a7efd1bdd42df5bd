"""The stats graph with prefix reuse on and off: the same stats (texts token for token, numbers within float
rounding), and every self-prompting caller actually reusing its prompts' shared prefix."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import HashEmbedder
from workbench.backends.cost import CostCounter
from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.uncertainty.calculators import StatSettings, compute_stats, unavailable_features
from workbench.uncertainty.features import FEATURES, required_stats
from workbench.uncertainty.self_check_stats import self_check_stats

pytest.importorskip("torch")

QUESTIONS = [
    {"question": "What is the capital of France?"},
    {"question": "Who wrote Hamlet?"},
    {"question": "Where does the Nile flow?"},
    {"question": "Which theory did Albert Einstein develop?"},
]


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """A peaked tiny Llama (varied answers), a long window; shared prefixes from 4 tokens are reused (the tiny chat
    template has no system prompt, so the self-check prompts share only their opening)."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-peaked-stats")
    build_tiny_llama(path, seed=3, max_positions=2048, tie_embeddings=False, initializer_range=1.0)
    gen = Generator(path, batch_size=16)
    gen.prefix_min_tokens = 4
    return gen


def _assert_same(a, b, path=""):
    """Equal structure and texts; numbers within float rounding (hidden states: relative)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for key in a:
            _assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, str | bool) or a is None:
        assert a == b, path
    elif isinstance(a, list | tuple) and any(isinstance(x, str | list | dict | np.ndarray) for x in a):
        assert len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{k}]")
    else:
        tol = {"rtol": 1e-4, "atol": 1e-3} if "hidden" in path else {"rtol": 0, "atol": 1e-4}
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), err_msg=path, **tol)


def test_every_stat_is_the_same_with_and_without_reuse(generator):
    offered = [n for n in FEATURES if n not in unavailable_features(FEATURES) and n != "dense"]
    needed = required_stats(offered) | {"greedy_entropies", "greedy_text", "sample_texts"}
    settings = StatSettings(samples=3, max_new_tokens=6, paraphrases=3, paraphrase_max_new_tokens=6)
    results, costs, reused_by_call = {}, {}, {}
    original_generate, original_tail = generator.generate, generator.tail_logits
    for reuse in (False, True):
        generator.prefix_reuse = reuse
        generator.counter = CostCounter()
        calls: list[tuple[str, int]] = []

        def spy(prompts, _calls=calls, **kwargs):
            before = generator.counter.prefix_reused_tokens
            out = original_generate(prompts, **kwargs)
            kind = "greedy" if kwargs.get("temperature", 0.0) == 0 else "sampled"
            _calls.append((kind, generator.counter.prefix_reused_tokens - before))
            return out

        def tail_spy(seqs, keep, _calls=calls):
            before = generator.counter.prefix_reused_tokens
            out = original_tail(seqs, keep)
            _calls.append(("read", generator.counter.prefix_reused_tokens - before))
            return out

        generator.generate, generator.tail_logits = spy, tail_spy
        try:
            results[reuse] = compute_stats(
                QUESTIONS,
                needed,
                generator=generator,
                judge=AnswerEquivalenceJudge(),
                embedder=HashEmbedder(),
                settings=settings,
            )
        finally:
            del generator.generate, generator.tail_logits
        costs[reuse], reused_by_call[reuse] = generator.counter, calls
    generator.prefix_reuse = True
    for off, on in zip(results[False], results[True], strict=True):
        _assert_same(off, on)
    assert costs[False].prefix_reused_tokens == 0
    assert all(saved == 0 for _, saved in reused_by_call[False])
    # every caller that prompts the model reuses: the paraphrasing call, the greedy answers with the paraphrases'
    # answers (one call), the samples, the self-check read (P(True) + verbalized confidence); the EOS scoring pass is
    # not needed (the generator records EOS log-probs)
    kinds = [kind for kind, _ in reused_by_call[True]]
    assert sorted(kinds) == ["greedy", "read", "sampled", "sampled"], kinds
    assert all(saved > 0 for _, saved in reused_by_call[True]), reused_by_call[True]
    for name in ("prefill_tokens", "decoded_tokens", "scored_tokens", "lm_calls", "lm_batches"):
        assert getattr(costs[True], name) == getattr(costs[False], name), name


def test_self_check_reads_agree_within_1e_5(tiny_lm_long_dir):
    from workbench.backends.generator import Generator

    gen = Generator(tiny_lm_long_dir, batch_size=8)
    gen.prefix_min_tokens = 4
    questions = [q["question"] for q in QUESTIONS]
    greedy = ["Paris", "Shakespeare", "north", "relativity"]
    samples = [["Paris", "Lyon"], ["Shakespeare", "Marlowe"], ["north", "south"], ["relativity", "gravity"]]
    out = {}
    for reuse in (False, True):
        gen.prefix_reuse = reuse
        gen.counter = CostCounter()
        out[reuse] = (self_check_stats(gen, questions, greedy, samples, 2), gen.counter)
    np.testing.assert_allclose(np.asarray(out[False][0]), np.asarray(out[True][0]), atol=1e-5, rtol=0)
    assert out[True][1].prefix_reused_tokens > 0 == out[False][1].prefix_reused_tokens
    assert out[True][1].prefill_tokens == out[False][1].prefill_tokens
