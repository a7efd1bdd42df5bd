"""NLI pair planning: identical texts need no judge call, a symmetric judge is asked each unordered pair once, and
the answer matrix holds only the texts the selected features read."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.nli import AnswerEquivalenceJudge, NLIJudge
from workbench.data.nli_labels import ENTAILMENT
from workbench.uncertainty.calculators import StatSettings, compute_stats
from workbench.uncertainty.nli_matrix import SELF_PAIR, NLIMatrices, judge_is_symmetric


class DirectionalJudge(NLIJudge):
    """A deterministic, order-dependent judge: entailment mass = len(premise) / (len(premise) + len(hypothesis))."""

    kind = "directional-test"

    def _predict(self, premises, hypotheses, questions):
        e = np.array([len(p) / (len(p) + len(h)) for p, h in zip(premises, hypotheses, strict=True)])
        return np.stack([(1 - e) / 2, (1 - e) / 2, e], axis=1)


def test_identical_texts_get_the_self_pair_without_a_call():
    judge = DirectionalJudge()
    plan = NLIMatrices(symmetric=False)
    handle = plan.add("q", ["Paris", "Paris", "Lyon"])
    plan.run(judge)
    matrix = plan.matrix(handle)
    assert judge.counter.nli_pairs == 2  # Paris → Lyon and Lyon → Paris only
    for x, y in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 2)]:
        np.testing.assert_array_equal(matrix[x, y], SELF_PAIR)
    assert SELF_PAIR.argmax() == ENTAILMENT
    assert plan.saved["identical"] == 2
    np.testing.assert_allclose(matrix[0, 2], judge.entail(["Paris"], ["Lyon"], "q")[0])


def test_a_symmetric_judge_is_asked_each_unordered_pair_once_and_mirrored():
    texts = ["Paris", "the city of Paris", "Lyon"]
    judge = AnswerEquivalenceJudge()
    plan = NLIMatrices(symmetric=judge_is_symmetric(judge))
    handle = plan.add("q", texts)
    plan.run(judge)
    assert judge.counter.nli_pairs == 3 and plan.saved["symmetric"] == 3
    full = AnswerEquivalenceJudge()  # every ordered pair, judged directly
    for x, a in enumerate(texts):
        for y, b in enumerate(texts):
            if x != y:
                np.testing.assert_allclose(plan.matrix(handle)[x, y], full.entail([a], [b], "q")[0])


def test_a_directional_judge_gets_both_orders():
    judge = DirectionalJudge()
    assert not judge_is_symmetric(judge) and judge_is_symmetric(AnswerEquivalenceJudge())
    plan = NLIMatrices(symmetric=judge_is_symmetric(judge))
    handle = plan.add("q", ["a", "bbb"])
    plan.run(judge)
    matrix = plan.matrix(handle)
    assert judge.counter.nli_pairs == 2
    assert matrix[0, 1, ENTAILMENT] == pytest.approx(0.25) and matrix[1, 0, ENTAILMENT] == pytest.approx(0.75)


def test_a_judge_flag_overrides_the_type_check():
    judge = DirectionalJudge()
    judge.symmetric = True
    assert judge_is_symmetric(judge)


class RepeatingGenerator:
    """Greedy answer "Paris"; samples "Paris", "Lyon", "Paris"; paraphrase answers repeat the greedy answer."""

    tokenizer = None

    def build_prompt(self, question, context=None, *, max_new_tokens, system=None):
        from types import SimpleNamespace

        return SimpleNamespace(text=f"[answer] {question}")

    def generate(self, prompts, *, max_new_tokens, temperature=0.0, n=1, stop=None, seed=None, **_):
        from workbench.backends.generator import Generation

        texts = ["Paris", "Lyon", "Paris"] if temperature > 0 else ["Paris"]
        empty = np.zeros(1, dtype=np.float32)
        return [
            Generation(p, texts[j % len(texts)], np.array([5]), empty - 0.1, empty, empty, "stop", sample_index=j)
            for p in prompts
            for j in range(n)
        ]


def test_the_answer_matrix_holds_the_greedy_answer_only_when_a_feature_reads_it():
    judge = DirectionalJudge()
    settings = StatSettings(samples=3)
    needed = {"nli_probs", "nli_index_samples", "nli_texts"}  # semantic entropy / DEG: samples only
    (row,) = compute_stats([{"question": "q"}], needed, generator=RepeatingGenerator(), judge=judge, settings=settings)
    assert row["nli_texts"] == ["Paris", "Lyon"] and row["nli_index_samples"] == [0, 1, 0]
    assert "greedy_text" not in row and "nli_index_greedy" not in row
    saved: dict[str, int] = {}
    (row,) = compute_stats(
        [{"question": "q"}],
        needed | {"nli_index_greedy"},
        generator=RepeatingGenerator(),
        judge=judge,
        settings=settings,
        nli_saved=saved,
    )
    assert row["nli_texts"] == ["Paris", "Lyon"] and row["nli_index_greedy"] == 0
    assert saved == {"identical": 0, "symmetric": 0, "repeated": 0}
