"""The self-prompting stats (Self-Detection's paraphrases and their answers, P(True), verbalized confidence) batched
across the questions of a batch equal the same stats computed one question at a time (texts token for token,
numbers within 1e-5), in a fraction of the model batches."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import HashEmbedder
from workbench.backends.cost import CostCounter
from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.uncertainty.calculators import StatSettings, compute_stats

pytest.importorskip("torch")

QUESTIONS = [
    {"question": "What is the capital of France?"},
    {"question": "Who wrote Hamlet?"},
    {"question": "Where does the Nile flow?"},
]
SELF_PROMPTING = {"paraphrase_answers", "paraphrase_nli_probs", "ptrue", "verbalized_confidence"}


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    """A peaked tiny Llama (answers and paraphrases that vary with the prompt), long window."""
    from tests.tiny_models import build_tiny_llama
    from workbench.backends.generator import Generator

    path = tmp_path_factory.mktemp("tiny-llama-self-prompting")
    build_tiny_llama(path, seed=3, max_positions=2048, tie_embeddings=False, initializer_range=1.0)
    return Generator(path, batch_size=16)


def test_self_prompting_stats_batched_equal_one_question_at_a_time(generator):
    settings = StatSettings(samples=3, max_new_tokens=5, paraphrases=3, paraphrase_max_new_tokens=6)
    judge, embedder = AnswerEquivalenceJudge(), HashEmbedder()

    def run(batch):
        return compute_stats(
            batch, SELF_PROMPTING, generator=generator, judge=judge, embedder=embedder, settings=settings
        )

    generator.counter = CostCounter()
    batched = run(QUESTIONS)
    batched_batches = generator.counter.lm_batches
    generator.counter = CostCounter()
    alone = [run([q])[0] for q in QUESTIONS]
    alone_batches = generator.counter.lm_batches
    for b, a in zip(batched, alone, strict=True):
        assert b["paraphrase_answers"] == a["paraphrase_answers"]
        assert b["greedy_text"] == a["greedy_text"] and b["sample_texts"] == a["sample_texts"]
        for name in ("paraphrase_nli_probs", "ptrue", "verbalized_confidence"):
            np.testing.assert_allclose(np.asarray(b[name]), np.asarray(a[name]), atol=1e-5, rtol=0, err_msg=name)
    assert len({tuple(b["paraphrase_answers"]) for b in batched}) > 1  # the questions do differ
    # per batch: the paraphrase sampling call, the greedy loop (answers + paraphrases' answers), the samples, the
    # self-check read: 4 model batches for all the questions, against 4 per question one at a time
    assert batched_batches == 4 and alone_batches == 4 * len(QUESTIONS)
