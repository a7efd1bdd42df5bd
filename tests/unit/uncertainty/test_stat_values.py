"""Value tests of the stats producers (workbench/uncertainty/calculators.py): each expected value is computed here,
independently, from a direct torch forward pass of the tiny model or from a fake generator whose outputs the test
controls. Each test fails on a specific producer bug:

* P(True) / Verbalized Confidence: the "true" and "false" sides swapped, the case variants not pooled, the digits
  read at the wrong position, or more than one forward for the two;
* Attention Score: the diagonal read one position off (e.g. at the decoding step's query, the previous token);
* INSIDE: the wrong hidden layer, the mean over steps instead of the last kept step, or the last step off by one.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from workbench.backends.prompts import encode
from workbench.uncertainty.calculators import ANSWER_SYSTEM, StatSettings, compute_stats
from workbench.uncertainty.features import FEATURES
from workbench.uncertainty.self_check_stats import (
    CONFIDENCE_OPTIONS,
    CONFIDENCE_REPLY_PREFIX,
    PTRUE_OPTIONS_FALSE,
    PTRUE_OPTIONS_TRUE,
    ptrue_from_logprobs,
    self_check_prompt,
    verbalized_from_logprobs,
)

torch = pytest.importorskip("torch")

QUESTIONS = [{"question": "What is the capital of France?"}, {"question": "Who wrote the play Hamlet in 1600?"}]


@pytest.fixture(scope="module")
def peaked_lm_dir(tmp_path_factory):
    """A tiny random Llama with peaked next-token distributions (varied answers, P(True) far from ½)."""
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(
        tmp_path_factory.mktemp("tiny-peaked"), seed=3, max_positions=4096, tie_embeddings=False, initializer_range=1.0
    )


@pytest.fixture
def generator(peaked_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(peaked_lm_dir, batch_size=16, seed=5)


def _answer_prompt_ids(generator, question: str, settings: StatSettings) -> list[int]:
    prompt = generator.build_prompt(question, None, max_new_tokens=settings.max_new_tokens, system=ANSWER_SYSTEM)
    return encode(generator.tokenizer, prompt.text)


def _direct(generator, ids: list[int], **kwargs):
    with torch.inference_mode():
        return generator.model(input_ids=torch.tensor([ids]), **kwargs)


# ------------------------------------------------------------------------------- P(True) and Verbalized Confidence
def test_self_check_prompt_lists_each_distinct_idea_once_with_its_count():
    message = self_check_prompt("Q?", "Paris", ["Paris", "Lyon", "Paris", "", "Paris", "Nice"], ideas=5)
    assert "- Paris (3 of 5)" in message and "- Lyon (1 of 5)" in message and "Proposed answer: Paris" in message
    assert message.count("- Paris") == 1 and "Nice" not in message  # the 6th sample is past the 5 ideas
    assert "- (none)" in self_check_prompt("Q?", "x", ["", ""], ideas=5)


def test_ptrue_pools_the_case_variants_and_verbalized_is_the_expected_digit():
    probs = np.array([[0.30, 0.10, 0.05, 0.15]])  # true, True, false, False; the rest of the mass elsewhere
    assert ptrue_from_logprobs(np.log(probs))[0] == pytest.approx(0.4 / 0.6)  # swapped 1/3, "true" alone 6/7
    digits = np.full((1, 10), 1e-9)
    digits[0, [3, 9]] = (0.1, 0.3)  # renormalised: 1/4 on 3, 3/4 on 9 → (0.75 + 6.75) / 9
    assert verbalized_from_logprobs(np.log(digits))[0] == pytest.approx(7.5 / 9, abs=1e-6)


def test_ptrue_and_verbalized_come_from_one_forward_at_two_positions(generator):
    """ptrue at the reply's first token, verbalized confidence after the forced 'Confidence (0-9): ' opening, both
    from ONE batched forward (one LM batch for both questions), whichever of the two features is selected."""
    settings = StatSettings(samples=3, max_new_tokens=4, seed=1)
    base = compute_stats(QUESTIONS, {"greedy_text", "sample_texts"}, generator=generator, settings=settings)
    batches = {}
    for needed in ({"ptrue"}, {"verbalized_confidence"}, {"ptrue", "verbalized_confidence"}):
        before = generator.counter.snapshot()
        stats = compute_stats(QUESTIONS, needed, generator=generator, settings=settings)
        batches[frozenset(needed)] = generator.counter.since(before).lm_batches
    # greedy + samples (two batches each time: nothing cached) + ONE forward for the self-check read
    assert set(batches.values()) == {3}, batches
    tok = generator.tokenizer
    true_ids = [tok(o, add_special_tokens=False)["input_ids"][0] for o in PTRUE_OPTIONS_TRUE]
    false_ids = [tok(o, add_special_tokens=False)["input_ids"][0] for o in PTRUE_OPTIONS_FALSE]
    digit_ids = [tok(o, add_special_tokens=False)["input_ids"][0] for o in CONFIDENCE_OPTIONS]
    assert set(true_ids).isdisjoint(false_ids) and len(set(digit_ids)) == 10
    for example, b, s in zip(QUESTIONS, base, stats, strict=True):
        message = self_check_prompt(example["question"], b["greedy_text"], b["sample_texts"], settings.ptrue_ideas)
        chat = encode(tok, generator.render_chat(message))
        tail = tok(CONFIDENCE_REPLY_PREFIX, add_special_tokens=False)["input_ids"]
        verdict = torch.softmax(_direct(generator, chat).logits[0, -1].double(), -1).numpy()
        digits = torch.softmax(_direct(generator, chat + tail).logits[0, -1].double(), -1).numpy()
        p_true, p_false = verdict[true_ids].sum(), verdict[false_ids].sum()
        expected_ptrue = p_true / (p_true + p_false)
        expected_conf = float(digits[digit_ids] @ np.arange(10)) / digits[digit_ids].sum() / 9
        assert abs(expected_ptrue - 0.5) > 1e-3  # a swap of the two sides would show
        assert s["ptrue"] == pytest.approx(expected_ptrue, abs=1e-5)
        assert s["verbalized_confidence"] == pytest.approx(expected_conf, abs=1e-5)
        wrong_position = float(verdict[digit_ids] @ np.arange(10)) / verdict[digit_ids].sum() / 9
        assert abs(wrong_position - expected_conf) > 1e-3  # reading the digits at the first position would show
        assert FEATURES["ptrue"].compute(s) == pytest.approx(expected_ptrue, abs=1e-5)
        assert FEATURES["verbalized_confidence"].compute(s) == pytest.approx(expected_conf, abs=1e-5)


# ---------------------------------------------------------------------------------------------- Attention Score
def test_attention_logdiag_is_the_last_layer_diagonal_at_the_answer_tokens(tiny_lm_long_dir):
    """log A^h_jj of the last layer at the answer tokens' own positions P..P+L−1 (small-init model: its attention is
    spread, so the diagonal is far from the 1e-12 floor and changes from one position to the next)."""
    from workbench.backends.generator import Generator

    generator = Generator(tiny_lm_long_dir, batch_size=16)
    settings = StatSettings(max_new_tokens=5, stop=())
    stats = compute_stats(QUESTIONS, {"attention_logdiag"}, generator=generator, settings=settings)
    assert generator.model.config._attn_implementation != "eager"  # restored after the eager pass
    prompt_ids = [_answer_prompt_ids(generator, q["question"], settings) for q in QUESTIONS]
    answers = generator.generate(
        [generator.build_prompt(q["question"], None, max_new_tokens=5, system=ANSWER_SYSTEM).text for q in QUESTIONS],
        max_new_tokens=5,
        stop=(),
    )
    assert min(len(a.token_ids) for a in answers) >= 2 and len({len(ids) for ids in prompt_ids}) == 2  # padding
    model = generator.model
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        for ids, answer, s in zip(prompt_ids, answers, stats, strict=True):
            answer_ids = answer.token_ids.tolist()
            attn = _direct(generator, ids + answer_ids, output_attentions=True).attentions[-1][0].double()
            start = len(ids)  # answer token j sits at position start + j and attends to itself there
            log_diag = np.log(np.stack([attn[:, start + j, start + j].numpy() for j in range(len(answer_ids))], -1))
            got = np.asarray(s["attention_logdiag"])
            assert got.shape == (model.config.num_attention_heads, len(answer_ids))
            np.testing.assert_allclose(got, log_diag, atol=1e-4)
            shifted = np.log(
                np.stack([attn[:, start + j - 1, start + j - 1].numpy() for j in range(len(answer_ids))], -1)
            )
            assert np.abs(shifted - log_diag).max() > 1e-3  # the off-by-one reading is distinguishable
            assert FEATURES["attention_score"].raw(s) == pytest.approx(float(log_diag.mean()), abs=1e-5)
    finally:
        model.set_attn_implementation(previous)


# ---------------------------------------------------------------------------------------------------- INSIDE
def _eigen_score_reference(z: np.ndarray, alpha: float = 1e-3) -> float:
    """E = (1/K) ln det(Z J_d Zᵀ + α I_K) with the explicit centring matrix J_d = I_d − (1/d) 1 1ᵀ (eqs. 20–21)."""
    k, d = z.shape
    j = np.eye(d) - np.ones((d, d)) / d
    sign, logdet = np.linalg.slogdet(z @ j @ z.T + alpha * np.eye(k))
    assert sign > 0
    return logdet / k


def test_sample_hidden_is_the_middle_layer_at_the_last_kept_step(generator):
    """z_b = hidden_states[⌊n_hs/2⌋] at the step whose input is the last answer token (answer ended by EOS), or at
    the last step computed (answer cut by the length cap: its last token was never fed back)."""
    settings = StatSettings(samples=5, max_new_tokens=6, stop=(), seed=11)
    prompts = [
        generator.build_prompt(q["question"], None, max_new_tokens=6, system=ANSWER_SYSTEM).text for q in QUESTIONS
    ]
    probe = generator.generate(prompts, temperature=0.7, n=5, max_new_tokens=6, stop=(), seed=11)
    common = Counter(t for g in probe for t in g.token_ids.tolist()[1:]).most_common(1)[0][0]
    generator.eos_ids = frozenset({*generator.eos_ids, common})  # a frequent token ends answers like EOS
    stats = compute_stats(QUESTIONS, {"sample_hidden"}, generator=generator, settings=settings)
    samples = generator.generate(prompts, temperature=0.7, n=5, max_new_tokens=6, stop=(), seed=11)
    reasons = Counter(s.finish_reason for s in samples)
    assert reasons["eos"] >= 2 and reasons["length"] >= 1, reasons  # both cases are exercised
    for i, (example, s) in enumerate(zip(QUESTIONS, stats, strict=True)):
        prompt_ids = _answer_prompt_ids(generator, example["question"], settings)
        expected = []
        for sample in samples[i * 5 : (i + 1) * 5]:
            hs = _direct(generator, prompt_ids + sample.token_ids.tolist(), output_hidden_states=True).hidden_states
            middle = hs[len(hs) // 2][0]  # n_hs = layers + 1 (embeddings included)
            expected.append(middle[-1 if sample.finish_reason == "eos" else -2].numpy())
        expected = np.stack(expected)
        np.testing.assert_allclose(np.asarray(s["sample_hidden"]), expected, rtol=1e-4, atol=1e-4)
        assert FEATURES["inside"].raw(s) == pytest.approx(_eigen_score_reference(expected.astype(np.float64)), abs=1e-3)
