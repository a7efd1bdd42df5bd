"""DENSE stats: rephrasing clean-up, single-edit contexts, the batched calls and the NLI matrix over k + 1 answers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.core.errors import ConfigError
from workbench.uncertainty.calculators import compute_stats
from workbench.uncertainty.dense_stats import DenseSettings, clean_rephrasing, dense_stats, single_edit_contexts
from workbench.uncertainty.features import compute_features


def test_clean_rephrasing_strips_preambles_and_quotes_and_falls_back_when_empty():
    assert clean_rephrasing("Here is the rewritten text: Paris is big.", "x") == ("Paris is big.", False)
    assert clean_rephrasing("Sure! Here's a rephrased version:\n'Paris is big.'", "x") == ("Paris is big.", False)
    assert clean_rephrasing('"Lyon lies on the Rhône."', "x") == ("Lyon lies on the Rhône.", False)
    assert clean_rephrasing("   ", "original chunk") == ("original chunk", True)
    assert clean_rephrasing("Here is the rewritten text:", "orig") == ("orig", True)


def test_single_edit_contexts_replace_one_position_each():
    contexts = single_edit_contexts(["a", "b", "c"], ["A", "B", "C"])
    assert contexts == [["a", "b", "c"], ["A", "b", "c"], ["a", "B", "c"], ["a", "b", "C"]]
    with pytest.raises(ValueError):
        single_edit_contexts(["a"], [])


@dataclass
class _Gen:
    text: str


class ScriptedGenerator:
    """Rephrases a chunk by upper-casing it; answers "paris" unless the context holds the edited chunk 'B'."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []

    def render_chat(self, message):
        return f"CHAT:{message}"

    def build_prompt(self, question, context, **kwargs):
        @dataclass
        class Built:
            text: str

        return Built(f"Q:{question}|C:{context}")

    def generate(self, prompts, *, temperature, max_new_tokens, stop, seed=None):
        self.calls.append((len(prompts), temperature))
        out = []
        for p in prompts:
            if p.startswith("CHAT:"):
                chunk = p.rsplit("Passage: ", 1)[1]
                out.append(_Gen("" if chunk == "empty" else f"Here is the rewritten text: {chunk.upper()}"))
            else:
                out.append(_Gen("lyon" if "] B" in p else "paris"))
        return out


def test_dense_stats_batches_three_calls_and_builds_the_answer_graph():
    generator, judge = ScriptedGenerator(), AnswerEquivalenceJudge()
    stats = dense_stats(
        ["capital?", "other?", "none?"],
        [["a", "b"], ["b", "empty"], []],
        generator=generator,
        judge=judge,
        system="sys",
    )
    # one rephrasing call over the 3 distinct chunks (b shared), one answering call over (2+1) + (2+1) contexts
    assert generator.calls == [(3, 0.0), (6, 0.0)]
    first, second, third = stats
    assert first["dense_rephrased"] == ["A", "B"] and first["dense_fallbacks"] == 0
    assert first["dense_answers"] == ["paris", "paris", "lyon"]  # chunk 2 rephrased to 'B' changes the answer
    assert second["dense_rephrased"] == ["B", "empty"] and second["dense_fallbacks"] == 1
    assert second["dense_answers"] == ["paris", "lyon", "paris"]
    assert third["dense_answers"] == [] and third["dense_nli_probs"].shape == (0, 0, 3)
    probs = first["dense_nli_probs"]
    assert probs.shape == (3, 3, 3)
    assert np.allclose(probs[0, 1], [0, 0, 1]) and probs[0, 2].argmax() != 2  # equal strings; paris vs lyon
    # DSE by hand: W = [[1,1,0],[1,1,0],[0,0,1]] → D = (2, 2, 1); −(1/3)(2 ln(2/3) + ln(1/3)) = 0.6365
    dse = -(2 * math.log(2 / 3) + math.log(1 / 3)) / 3
    assert compute_features(first, ["dense"])["dense"] == pytest.approx(-dse)  # oriented: higher = more certain
    assert math.isnan(compute_features(third, ["dense"])["dense"])


def test_dense_settings_are_validated():
    with pytest.raises(ConfigError):
        DenseSettings(rephrase_temperature=-1).validate()
    with pytest.raises(ConfigError):
        DenseSettings(answer_max_new_tokens=0).validate()


def test_compute_stats_produces_dense_stats_with_a_tiny_model(tiny_lm_long_dir):
    from workbench.backends.generator import Generator

    generator = Generator(tiny_lm_long_dir, batch_size=16)
    before = generator.counter.lm_batches
    stats = compute_stats(
        [{"question": "Where is Paris?"}, {"question": "Who wrote Hamlet?"}],
        {"dense_answers", "dense_nli_probs"},
        generator=generator,
        judge=AnswerEquivalenceJudge(),
        contexts=[["Paris is in France.", "It is big."], ["Hamlet is a play."]],
        dense_settings=DenseSettings(rephrase_max_new_tokens=6, answer_max_new_tokens=4),
    )
    assert generator.counter.lm_batches - before == 2  # rephrasing + answering, each one batched call
    assert [len(s["dense_answers"]) for s in stats] == [3, 2]
    assert stats[0]["dense_nli_probs"].shape == (3, 3, 3)
    value = compute_features(stats[0], ["dense"])["dense"]
    assert -math.log(3) - 1e-9 <= value <= 0.0  # DSE ∈ [0, ln(k+1)], oriented
