"""The LLM-as-judge correctness label: hand-computed probabilities from fixed log-probs, and the tiny random Llama."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.errors import ConfigError, DataError
from workbench.metrics.llm_judge import NO_OPTIONS, YES_OPTIONS, LLMCorrectnessJudge

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "What is 2 + 2?"]
ANSWERS = ["Paris", "Marlowe", "four"]
GOLDS = [["Paris"], ["William Shakespeare", "Shakespeare"], ["4", "four"]]


class FixedGenerator:
    """Returns fixed next-token log-probs (options yes, Yes, no, No) and records what it was asked."""

    def __init__(self, probs: list[list[float]]) -> None:
        self.logprobs = np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)
        self.calls: list[tuple[list[str], list[str]]] = []

    def render_chat(self, message, system=None):
        return f"<{system}>{message}"

    def next_token_logprobs(self, prompts, options):
        self.calls.append((list(prompts), list(options)))
        return self.logprobs[: len(prompts)]


def test_hand_computed_probabilities_and_labels():
    gen = FixedGenerator(
        [
            [0.2, 0.1, 0.3, 0.1],  # P(yes) = 0.2 + 0.1 = 0.3, P(no) = 0.3 + 0.1 = 0.4 → 0.3 / 0.7 = 3/7
            [0.5, 0.3, 0.1, 0.1],  # 0.8 / (0.8 + 0.2) = 0.8
            [0.05, 0.05, 0.05, 0.05],  # 0.1 / 0.2 = 0.5: a tie counts as correct (>= 0.5)
        ]
    )
    judge = LLMCorrectnessJudge(gen)
    p = judge.judge(QUESTIONS, ANSWERS, GOLDS)
    assert p == pytest.approx([3 / 7, 0.8, 0.5], abs=1e-6)
    assert judge.labels(QUESTIONS, ANSWERS, GOLDS).tolist() == [0.0, 1.0, 1.0]
    assert len(gen.calls) == 2  # one batched call per judge / labels
    prompts, options = gen.calls[0]
    assert options == [*YES_OPTIONS, *NO_OPTIONS] and len(prompts) == 3
    # every gold alias, the candidate and the question reach the prompt
    assert "- William Shakespeare\n- Shakespeare" in prompts[1] and "Marlowe" in prompts[1]
    assert "Who wrote Hamlet?" in prompts[1] and "yes or no" in prompts[1]
    assert LLMCorrectnessJudge.requires_gold


def test_custom_threshold_and_empty_answer():
    gen = FixedGenerator([[0.2, 0.1, 0.3, 0.1]])  # 3/7 ≈ 0.43
    judge = LLMCorrectnessJudge(gen, threshold=0.4)
    assert judge.labels(QUESTIONS[:1], [""], GOLDS[:1]).tolist() == [1.0]
    assert "(no answer)" in gen.calls[0][0][0]


def test_inputs_are_validated():
    gen = FixedGenerator([[0.5, 0.1, 0.3, 0.1]])
    judge = LLMCorrectnessJudge(gen)
    with pytest.raises(DataError, match="gold"):
        judge.judge(QUESTIONS[:1], ANSWERS[:1], [[" "]])
    with pytest.raises(DataError):
        judge.judge(QUESTIONS, ANSWERS[:2], GOLDS)
    assert judge.judge([], [], []).shape == (0,) and not gen.calls
    with pytest.raises(ConfigError):
        LLMCorrectnessJudge(gen, prompt="Question: {question}")
    with pytest.raises(ConfigError):
        LLMCorrectnessJudge(gen, threshold=1.5)
    with pytest.raises(ConfigError):
        LLMCorrectnessJudge(gen, yes=())


@pytest.fixture(scope="module")
def generator(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, batch_size=16)


def test_tiny_model_one_call_in_range_and_deterministic(generator):
    judge = LLMCorrectnessJudge(generator)
    before = generator.counter.lm_batches
    p = judge.judge(QUESTIONS, ANSWERS, GOLDS)
    assert generator.counter.lm_batches - before == 1  # one batched next-token read
    assert p.shape == (3,) and np.all((p >= 0.0) & (p <= 1.0)) and all(math.isfinite(v) for v in p)
    assert np.array_equal(judge.judge(QUESTIONS, ANSWERS, GOLDS), p)
    labels = judge.labels(QUESTIONS, ANSWERS, GOLDS)
    assert labels.tolist() == (p >= 0.5).astype(float).tolist()
