"""Every departure from TruthTorchLM 0.1.19 that docs/features.md lists, pinned: the NLI input, the directional
entailment graph's word split, repeated strings and empty answers, Token SAR's EOS and all-zero relevances, and the
Self-Detection paraphrases answered as written. Each test states what TTLM does instead."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from workbench.uncertainty.features.graph import DirectionalEntailmentGraph
from workbench.uncertainty.features.probability import TokenSar
from workbench.uncertainty.graph_math import jaccard_matrix, random_walk_eigen_uncertainty, word_set

FEATURES_MD = Path(__file__).resolve().parents[3] / "docs" / "features.md"


def _ttlm_words(text: str) -> list[str]:
    """TTLM's DirectionalEntailmentGraph._tokenize."""
    return re.sub(r"[^\w\s]", "", text.lower()).split()


def _ttlm_jaccard(a: str, b: str) -> float:
    """TTLM's DirectionalEntailmentGraph._jaccard_similarity (the diagonal included)."""
    x, y = set(_ttlm_words(a)), set(_ttlm_words(b))
    return len(x & y) / len(x | y) if x | y else 0.0


# ---------------------------------------------------------------------------------------------- the NLI input
def test_a_model_judge_reads_question_newline_answer_not_ttlms_question_space_answer(tmp_path):
    from tests.tiny_models import build_tiny_encoder
    from workbench.backends.nli import HFSequenceClassificationNLI
    from workbench.backends.nli_train import _with_q

    judge = HFSequenceClassificationNLI(
        build_tiny_encoder(tmp_path / "nli", num_labels=3), label_order=("contradiction", "neutral", "entailment")
    )
    seen: list[tuple[list[str], list[str]]] = []
    real = judge._tokenizer

    def spy(firsts, seconds, **kwargs):
        seen.append((list(firsts), list(seconds)))
        return real(firsts, seconds, **kwargs)

    judge._tokenizer = spy
    judge.entail(["Paris"], ["Paris, France"], question="What is the capital of France?")
    assert seen == [
        (
            ["Question: What is the capital of France?\nParis"],
            ["Question: What is the capital of France?\nParis, France"],
        )
    ]
    assert seen[0][0][0] != "What is the capital of France? Paris"  # TTLM's check_entailment: context + " " + seq
    # the form the workbench's cross-encoder is trained on (so a judge trained here reads what it learned)

    class Pair:
        question, premise, hypothesis = "What is the capital of France?", "Paris", "Paris, France"

    assert _with_q(Pair(), "Paris") == seen[0][0][0]


# ---------------------------------------------------------------------------------------------- DEG
def test_deg_words_drop_ascii_punctuation_only():
    text = "Naïve—café, l'été_x!"
    assert word_set(text) == frozenset({"naïve—café", "létéx"})
    assert set(_ttlm_words(text)) == {"naïvecafé", "lété_x"}  # TTLM drops "—" too and keeps "_"
    # a curly apostrophe is a word character here and punctuation to TTLM; "_" the other way round
    assert jaccard_matrix(["Paris.", "Paris’"])[0, 1] == 0.0 and _ttlm_jaccard("Paris.", "Paris’") == 1.0
    assert jaccard_matrix(["new_york", "newyork"])[0, 1] == 1.0 and _ttlm_jaccard("new_york", "newyork") == 0.0


def test_deg_empty_answers_have_jaccard_one():
    t = jaccard_matrix(["", "...", "paris"])  # "..." is empty once its punctuation is gone
    np.testing.assert_array_equal(t, [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    assert _ttlm_jaccard("", "") == 0.0 and _ttlm_jaccard("", "...") == 0.0  # TTLM: 0, the diagonal too


def test_deg_repeated_strings_entail_each_other_without_a_judge_call():
    from workbench.uncertainty.nli_matrix import NLIMatrices

    asked: list[tuple[str, str]] = []

    class Judge:
        def entail(self, premises, hypotheses, question=None):
            asked.extend(zip(premises, hypotheses, strict=True))
            return np.tile([0.1, 0.3, 0.6], (len(premises), 1))

    plan = NLIMatrices(symmetric=False)
    texts = ["paris", "lyon"]
    handle = plan.add("q", texts)
    plan.run(Judge())
    assert sorted(asked) == [("lyon", "paris"), ("paris", "lyon")]  # no (paris, paris): TTLM judges it
    probs = plan.matrix(handle)
    stats = {"nli_probs": probs, "nli_index_samples": [0, 0, 1, 1, 0], "nli_texts": texts}
    # samples 1 and 2 (both "paris"): entailment 1 from the diagonal, not a judged probability
    entail = np.where(np.equal.outer([0, 0, 1, 1, 0], [0, 0, 1, 1, 0]), 1.0, 0.6)
    jaccard = np.equal.outer([0, 0, 1, 1, 0], [0, 0, 1, 1, 0]).astype(float)
    expected = random_walk_eigen_uncertainty(entail + jaccard, 1e-6)
    assert DirectionalEntailmentGraph().raw(stats) == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------- Token SAR
def test_token_sar_leaves_eos_out():
    stats = {"greedy_logprobs": [-1.0, -2.0, -3.0], "greedy_eos": True, "token_relevance": [0.25, 0.75]}
    assert TokenSar().raw(stats) == pytest.approx(0.25 * 1.0 + 0.75 * 2.0)  # the EOS entry (-3.0) has no weight
    # TTLM keeps the EOS token with RT_EOS = 1 - g(answer, answer): with RT_EOS = 0.01 it would read
    ttlm = np.dot(np.array([0.25, 0.75, 0.01]) / 1.01, [1.0, 2.0, 3.0])
    assert TokenSar().raw(stats) != pytest.approx(ttlm)


def test_token_sar_weighs_uniformly_when_every_relevance_is_zero():
    stats = {"greedy_logprobs": [-1.0, -2.0], "greedy_eos": False, "token_relevance": [0.0, 0.0]}
    assert TokenSar().raw(stats) == pytest.approx(1.5)  # the mean NLL
    with np.errstate(invalid="ignore"):
        assert math.isnan(float(np.dot(np.zeros(2) / np.zeros(2).sum(), [-1.0, -2.0])))  # TTLM: 0 / 0


# ---------------------------------------------------------------------------------------------- Self-Detection
def test_self_detection_answers_each_paraphrase_as_written(tiny_lm_long_dir, monkeypatch):
    import workbench.uncertainty.calculators as calculators
    from workbench.backends.generator import Generator
    from workbench.backends.nli import AnswerEquivalenceJudge
    from workbench.backends.prompts import ANSWER_SYSTEM
    from workbench.uncertainty.calculators import StatSettings, compute_stats

    generator = Generator(tiny_lm_long_dir, batch_size=16)
    paraphrases = ["Which city is the French capital?", "Name the capital of France"]
    monkeypatch.setattr(calculators, "sample_paraphrases", lambda questions, gen, settings: list(paraphrases))
    prompts: list[str] = []
    real = generator.generate

    def spy(batch, **kwargs):
        prompts.extend(batch)
        return real(batch, **kwargs)

    monkeypatch.setattr(generator, "generate", spy)
    settings = StatSettings(max_new_tokens=4, paraphrases=3)
    question = [{"question": "What is the capital of France?"}]
    judge = AnswerEquivalenceJudge()
    compute_stats(question, {"paraphrase_answers"}, generator=generator, judge=judge, settings=settings)

    def answering(question):
        return generator.build_prompt(question, None, max_new_tokens=4, system=ANSWER_SYSTEM).text

    for p in paraphrases:  # the prompt holds the paraphrase as written: no "?" appended (TTLM: "{question}?")
        assert answering(p) in prompts and answering(p + "?") not in prompts


# ---------------------------------------------------------------------------------------------- the table says it
def test_the_features_table_lists_every_departure():
    text = FEATURES_MD.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| \d+ \| `(\w+)` \|.*$", text, re.M)}
    assert '`q + " " + answer`' in rows["semantic_entropy"] and "with_question" in rows["semantic_entropy"]
    assert "EOS dropped" in rows["token_sar"] and "NaN" in rows["token_sar"]
    assert "as written" in rows["self_detection"] and '"{question}?"' in rows["self_detection"]
    deg = rows["directional_entailment_graph"]
    assert "Words" in deg and "Repeated strings" in deg and "Empty answers" in deg
    assert "as TTLM does" not in text  # the NLI input is not TTLM's
