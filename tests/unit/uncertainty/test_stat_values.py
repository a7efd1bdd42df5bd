"""Value tests of the stats producers (workbench/uncertainty/calculators.py): each expected value is computed here,
independently, from a direct torch forward pass of the tiny model or from a fake generator whose outputs the test
controls. Each test fails on a specific producer bug:

* P(True): the "true" and "false" sides swapped, or the case variants not pooled;
* Attention Score: the diagonal read one position off (e.g. at the decoding step's query, the previous token);
* INSIDE: the wrong hidden layer, the mean over steps instead of the last kept step, or the last step off by one.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from workbench.backends.generator import Generation
from workbench.backends.prompts import encode
from workbench.uncertainty.calculators import (
    ANSWER_SYSTEM,
    PTRUE_OPTIONS_FALSE,
    PTRUE_OPTIONS_TRUE,
    StatSettings,
    compute_stats,
    ptrue_prompt,
)
from workbench.uncertainty.features import FEATURES

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


# ---------------------------------------------------------------------------------------------------- P(True)
class ScriptedGenerator:
    """Scripted answers and next-token probabilities per option string; records the P(True) prompts."""

    def __init__(self, option_probs: dict[str, float]) -> None:
        self.option_probs = option_probs
        self.chats: list[str] = []
        self.options: list[str] = []

    def build_prompt(self, question, context=None, *, max_new_tokens, system=None):
        from types import SimpleNamespace

        return SimpleNamespace(text=f"[answer] {question}")

    def render_chat(self, message, system=None):
        return f"<user>{message}</user>"

    def generate(self, prompts, *, max_new_tokens, temperature=0.0, n=1, stop=None, seed=None, **_):
        def gen(prompt, j):
            text = "Paris" if temperature == 0 else f"idea{j}"
            empty = np.zeros(1, dtype=np.float32)
            return Generation(prompt, text, np.array([7]), empty - 0.5, empty, empty, "stop", sample_index=j)

        return [gen(p, j) for p in prompts for j in range(n)]

    def next_token_logprobs(self, prompts, options):
        self.chats.extend(prompts)
        self.options = list(options)
        row = np.log([self.option_probs[o] for o in options])
        return np.tile(row, (len(prompts), 1)).astype(np.float32)


def test_ptrue_is_the_pooled_true_mass_over_true_plus_false():
    probs = {"true": 0.30, "True": 0.10, "false": 0.05, "False": 0.15}  # the rest of the mass on other tokens
    fake = ScriptedGenerator(probs)
    settings = StatSettings(samples=7, ptrue_ideas=5)
    stats = compute_stats(QUESTIONS, {"ptrue"}, generator=fake, settings=settings)
    expected = (0.30 + 0.10) / (0.30 + 0.10 + 0.05 + 0.15)  # 2/3; swapped sides give 1/3, "true" alone 6/7
    assert [s["ptrue"] for s in stats] == pytest.approx([expected, expected], abs=1e-6)
    assert set(fake.options) == set(probs)
    assert len(fake.chats) == 2  # one next-token read for the batch
    chat = fake.chats[0]
    assert QUESTIONS[0]["question"] in chat and "Proposed answer: Paris" in chat
    listed = [f"- idea{j}" for j in range(7)]
    assert all(line in chat for line in listed[:5]) and not any(line in chat for line in listed[5:])


def test_ptrue_matches_a_direct_forward_pass_of_the_tiny_model(generator):
    settings = StatSettings(samples=3, max_new_tokens=4, seed=1)
    stats = compute_stats(QUESTIONS, {"ptrue"}, generator=generator, settings=settings)
    tok = generator.tokenizer
    true_ids = {tok(o, add_special_tokens=False)["input_ids"][0] for o in PTRUE_OPTIONS_TRUE}
    false_ids = {tok(o, add_special_tokens=False)["input_ids"][0] for o in PTRUE_OPTIONS_FALSE}
    assert true_ids.isdisjoint(false_ids)
    for example, s in zip(QUESTIONS, stats, strict=True):
        message = ptrue_prompt(example["question"], s["greedy_text"], s["sample_texts"], settings.ptrue_ideas)
        ids = encode(tok, generator.render_chat(message))
        probs = torch.softmax(_direct(generator, ids).logits[0, -1].double(), -1).numpy()
        p_true, p_false = probs[sorted(true_ids)].sum(), probs[sorted(false_ids)].sum()
        expected = p_true / (p_true + p_false)
        assert abs(expected - 0.5) > 1e-3  # a swap of the two sides would show
        assert s["ptrue"] == pytest.approx(expected, abs=1e-5)
        assert FEATURES["ptrue"].compute(s) == pytest.approx(expected, abs=1e-5)


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
