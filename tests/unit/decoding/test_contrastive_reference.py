"""The batched contrastive engine against an independent step-by-step reference (tests/reference_contrastive.py).

The reference decodes ONE (expert, amateur) pair at a time from the spec's ``ucd_generate`` pseudocode (§7.5, eqs. 7,
8, 37), unpadded and without a KV cache; the engine decodes many pairs at once (left padding, split prefill with
joined caches, finished pairs pruned). For α > 0, both modes D²-RAG uses (``parametric="amateur"``: relevant,
``"expert"``: noisy) and the entropy factor on and off, the answer tokens, text, finish reason and every per-step
quantity the engine records (λ_t, w_t, the chosen token's log-prob and the entropy of each stream) must agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.reference_contrastive import ReferenceResult, eos_token_ids, reference_contrastive, ucd_reference
from workbench.backends.prompts import encode
from workbench.decoding.contrastive import contrastive_generate

MAX_NEW = 10
ATOL = 1e-4  # per-step float quantities (float32 on both sides; different summation orders)
MIN_MARGIN = 1e-4  # the reference's best z_final must beat the runner-up by this much, or token parity is ill-posed

QUESTIONS = [  # (context prompt's user text, closed-book prompt's user text): every prompt a different length
    ("Context: Paris is the capital of France.\nQuestion: What is the capital of France?", "Capital of France?"),
    ("Context: Einstein developed relativity in 1905.\nQuestion: who developed relativity?", "who developed it?"),
    (
        "Context: The Nile is a river in Africa. It flows north into the Mediterranean Sea.\n"
        "Question: Where does the Nile flow?",
        "Where does the Nile flow? Answer in a few words.",
    ),
    ("Context: Hamlet.\nQuestion: who wrote Hamlet?", "Question: who wrote Hamlet? Answer: William Shakespeare"),
    ("Context: a passage about a topic. True or False? yes no maybe\nQuestion: is it true?", "is it true?"),
    ("Context: 0 1 2 3 4 5 6 7 8 9\nQuestion: what comes after 4?", "after 4?"),
]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Deterministic float sums and no oversubscription on a shared 2-core machine."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """A tiny random fp32 Llama with large initial weights (peaked, varied next-token distributions, so contrast
    changes the greedy choice). Own instance: tests patch its EOS ids and batch size."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-reference")
    build_tiny_llama(path, seed=1, max_positions=1024, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=8, dtype="float32")


@pytest.fixture(scope="module")
def prompts(generator):
    """Rendered (context, closed-book) prompt pairs."""
    return [(generator.render_chat(c), generator.render_chat(m)) for c, m in QUESTIONS]


def streams(prompts: list[tuple[str, str]], parametric: list[str]) -> tuple[list[str], list[str]]:
    """Expert and amateur prompts per pair: relevant mode (amateur parametric) contrasts context over closed book,
    noisy mode (expert parametric) closed book over context (spec §7.5), as D²-RAG's ``_contrastive`` does."""
    experts = [c if p == "amateur" else m for (c, m), p in zip(prompts, parametric, strict=True)]
    amateurs = [m if p == "amateur" else c for (c, m), p in zip(prompts, parametric, strict=True)]
    return experts, amateurs


def reference(
    generator,
    experts: list[str],
    amateurs: list[str],
    alphas: list[float],
    parametric: list[str],
    *,
    stop: tuple[str, ...],
    dynamic: bool,
    eos: frozenset[int],
) -> list[ReferenceResult]:
    """The reference, one pair at a time, on the prompts' unpadded token ids."""
    tok = generator.tokenizer
    return [
        reference_contrastive(
            generator.model,
            tok,
            encode(tok, e),
            encode(tok, a),
            alpha,
            parametric=p,
            max_new=MAX_NEW,
            eos_ids=eos,
            stop=stop,
            dynamic=dynamic,
        )
        for e, a, alpha, p in zip(experts, amateurs, alphas, parametric, strict=True)
    ]


def early_endings(
    free: Callable[[int], ReferenceResult], eos: frozenset[int]
) -> tuple[frozenset[int], tuple[str, ...]]:
    """An extra EOS id and an extra stop string, read off unstopped reference runs (``free(k)``: pair k's), so that
    pairs end at different steps (EOS, stop string, length) and the engine has to prune finished pairs from its batch:
    the token pair 0 chooses at step 3 becomes an EOS id, and the first two ASCII alphanumeric characters after the
    start of pair 1's (else pair 2's, …) answer become a stop string."""
    extra_eos = free(0).chosen[3]
    for k in range(1, len(QUESTIONS)):
        text = free(k).text
        pieces = (text[i : i + 2] for i in range(2, len(text) - 1))
        stop = next((s for s in pieces if s.isascii() and s.isalnum()), None)
        if stop:
            return frozenset({*eos, extra_eos}), ("\n", stop)
    raise AssertionError("no alphanumeric pair of characters in the reference outputs to stop on")


def run_both(
    generator, prompts: list[tuple[str, str]], alphas: list[float], parametric: list[str], *, dynamic: bool
) -> tuple[list, list[ReferenceResult], list]:
    """Engine and reference on the same pairs with D²-RAG's ``"\\n"`` stop plus early endings; returns
    ``(engine generations, reference results, greedy generations of the expert prompts)``."""
    experts, amateurs = streams(prompts, parametric)
    eos = eos_token_ids(generator.model, generator.tokenizer)

    def free(k: int) -> ReferenceResult:
        one = reference(
            generator, [experts[k]], [amateurs[k]], [alphas[k]], [parametric[k]], stop=(), dynamic=dynamic, eos=eos
        )
        return one[0]

    eos, stop = early_endings(free, eos)
    refs = reference(generator, experts, amateurs, alphas, parametric, stop=stop, dynamic=dynamic, eos=eos)
    saved = generator.eos_ids
    generator.eos_ids = eos
    try:
        gens = contrastive_generate(
            generator,
            experts,
            amateurs,
            alphas,
            max_new_tokens=MAX_NEW,
            stop=stop,
            dynamic=dynamic,
            parametric=parametric,
        )
        greedy = generator.generate(experts, max_new_tokens=MAX_NEW, temperature=0.0, stop=stop)
    finally:
        generator.eos_ids = saved
    return gens, refs, greedy


def assert_same(
    gens: list, refs: list[ReferenceResult], parametric: list[str], prompts_ids: list[tuple[int, int]]
) -> None:
    """Token ids, text and finish reason equal; every per-step quantity within ``ATOL``; no near-tie."""
    for k, (gen, ref, par) in enumerate(zip(gens, refs, parametric, strict=True)):
        where = f"pair {k} ({par})"
        assert min(ref.margins) > MIN_MARGIN, f"{where}: near-tie in the reference, token parity is ill-posed"
        assert gen.prompt_tokens == prompts_ids[k], where
        assert gen.token_ids.tolist() == ref.token_ids, where
        assert gen.text == ref.text, where
        assert gen.finish_reason == ref.finish_reason, where
        assert gen.steps == len(ref.chosen), where
        # the engine names streams expert / amateur, the reference ctx / main (spec §7.5 roles)
        lp_e, lp_a = (ref.logprob_ctx, ref.logprob_main) if par == "amateur" else (ref.logprob_main, ref.logprob_ctx)
        h_e, h_a = (ref.entropy_ctx, ref.entropy_main) if par == "amateur" else (ref.entropy_main, ref.entropy_ctx)
        for name, got, want in [
            ("lambdas", gen.lambdas, ref.lambdas),
            ("weights", gen.weights, ref.weights),
            ("expert_logprobs", gen.expert_logprobs, lp_e),
            ("amateur_logprobs", gen.amateur_logprobs, lp_a),
            ("expert_entropies", gen.expert_entropies, h_e),
            ("amateur_entropies", gen.amateur_entropies, h_a),
        ]:
            np.testing.assert_allclose(got, np.asarray(want), rtol=0, atol=ATOL, err_msg=f"{where}: {name}")


def prompt_lengths(generator, prompts: list[tuple[str, str]], parametric: list[str]) -> list[tuple[int, int]]:
    """(expert, amateur) prompt token counts per pair, from the prompts' own encoding (what the engine must see)."""
    experts, amateurs = streams(prompts, parametric)
    tok = generator.tokenizer
    return [(len(encode(tok, e)), len(encode(tok, a))) for e, a in zip(experts, amateurs, strict=True)]


# ------------------------------------------------------------------------------------------ the reference itself
class _FixedLM:
    """A stand-in model whose next-token logits depend only on the first prompt token (0: context, 1: main)."""

    def __init__(self, ctx: list[float], main: list[float]) -> None:
        self.rows = {0: torch.log(torch.tensor(ctx)), 1: torch.log(torch.tensor(main))}

    def __call__(self, input_ids, use_cache=False):
        return SimpleNamespace(logits=self.rows[int(input_ids[0, 0])][None, None, :])


_LETTERS = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "".join("abc"[i] for i in ids))


def test_reference_rule_by_hand():
    # p_ctx = (.5, .4, .1), p_main = (.8, .1, .1); H_ctx = 0.943348, H_main = 0.639032
    # relevant, dynamic: w = H_main / (H_main + H_ctx) = 0.403852, λ = α·w; α = 1:
    #   z = 1.403852·ln p_ctx − 0.403852·ln p_main = (−0.8829, −0.3564, −2.3026) → token 1 ("b")
    lm = _FixedLM([0.5, 0.4, 0.1], [0.8, 0.1, 0.1])
    h_ctx, h_main = 0.943348, 0.639032
    w = h_main / (h_main + h_ctx)
    pos = ucd_reference(lm, _LETTERS, [1], [0], "pos", 1.0, max_new=1, eos_ids=())
    assert pos.chosen == [1] and pos.text == "b" and pos.finish_reason == "length"
    assert pos.weights == pytest.approx([w], abs=1e-6) and pos.lambdas == pytest.approx([w], abs=1e-6)
    assert pos.entropy_ctx == pytest.approx([h_ctx], abs=1e-6) and pos.entropy_main == pytest.approx([h_main], abs=1e-6)
    assert pos.logprob_ctx == pytest.approx([math.log(0.4)], abs=1e-6)
    # fixed λ = α = 0.1: z = 1.1·ln p_ctx − 0.1·ln p_main = (−0.7401, −0.7776, …) → token 0 (plain greedy's choice)
    assert ucd_reference(lm, _LETTERS, [1], [0], "pos", 0.1, max_new=1, eos_ids=(), dynamic=False).chosen == [0]
    # noisy, fixed λ = 1: z = 2·ln p_main − ln p_ctx = (0.2469, −3.6889, −2.3026) → token 0; the same w_t formula
    neg = ucd_reference(lm, _LETTERS, [1], [0], "neg", 1.0, max_new=1, eos_ids=(), dynamic=False)
    assert neg.chosen == [0] and neg.weights == [1.0] and neg.lambdas == [1.0]
    assert ucd_reference(lm, _LETTERS, [1], [0], "neg", 2.0, max_new=1, eos_ids=()).weights == pytest.approx([w])
    # EOS ends decoding and is not an answer token; a stop string cuts the text and drops a stop-only token
    eos = ucd_reference(lm, _LETTERS, [1], [0], "pos", 1.0, max_new=3, eos_ids=(1,))
    assert eos.chosen == [1] and eos.token_ids == [] and eos.finish_reason == "eos" and eos.text == ""
    stopped = ucd_reference(lm, _LETTERS, [1], [0], "pos", 1.0, max_new=5, eos_ids=(), stop=("bb",))
    assert (
        stopped.chosen == [1, 1] and stopped.text == "" and stopped.token_ids == [] and stopped.finish_reason == "stop"
    )
    # the engine's expert / amateur naming maps onto the spec's modes
    by_roles = reference_contrastive(lm, _LETTERS, [0], [1], 1.0, parametric="amateur", max_new=1, eos_ids=())
    assert by_roles.chosen == pos.chosen and by_roles.lambdas == pos.lambdas


# ------------------------------------------------------------------------------------------ engine == reference
@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "fixed"])
@pytest.mark.parametrize("parametric", ["amateur", "expert"], ids=["relevant", "noisy"])
@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_batched_engine_matches_the_reference(generator, prompts, alpha, parametric, dynamic):
    modes = [parametric] * len(prompts)
    gens, refs, greedy = run_both(generator, prompts, [alpha] * len(prompts), modes, dynamic=dynamic)
    assert_same(gens, refs, modes, prompt_lengths(generator, prompts, modes))
    # the case is not vacuous: pairs end at different steps (pruning), and contrast changes some answer
    assert len({g.steps for g in gens}) > 1
    assert [g.token_ids.tolist() for g in gens] != [g.token_ids.tolist() for g in greedy]


def test_mixed_alphas_and_modes_across_generator_batches(generator, prompts):
    """Per-pair α and mode in one call, split over two generator batches (pairs sorted by length inside)."""
    alphas = [0.5, 2.0, 1.0, 0.0, 1.5, 0.1]
    modes = ["amateur", "expert", "expert", "amateur", "amateur", "expert"]
    saved = generator.batch_size
    generator.batch_size = 4
    try:
        gens, refs, _ = run_both(generator, prompts, alphas, modes, dynamic=True)
    finally:
        generator.batch_size = saved
    assert_same(gens, refs, modes, prompt_lengths(generator, prompts, modes))
    assert [g.parametric for g in gens] == modes and [g.alpha for g in gens] == alphas


@pytest.mark.parametrize("parametric", ["amateur", "expert"], ids=["relevant", "noisy"])
def test_alpha_zero_is_plain_greedy_of_the_expert(generator, prompts, parametric):
    modes = [parametric] * len(prompts)
    gens, refs, greedy = run_both(generator, prompts, [0.0] * len(prompts), modes, dynamic=True)
    assert_same(gens, refs, modes, prompt_lengths(generator, prompts, modes))
    assert [g.token_ids.tolist() for g in gens] == [g.token_ids.tolist() for g in greedy]
    assert [g.text for g in gens] == [g.text for g in greedy]
    assert [g.finish_reason for g in gens] == [g.finish_reason for g in greedy]
    assert all(np.all(g.lambdas == 0) for g in gens) and all(r.lambdas == [0.0] * len(r.chosen) for r in refs)
