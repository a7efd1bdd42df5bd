"""SePer / ΔSePer: hand-computed pure functions, a scripted pipeline, and the tiny random Llama with fake judges."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import C, E, N
from workbench.backends.generator import Generation, Scored
from workbench.backends.nli import NLIJudge
from workbench.core.errors import ConfigError, DataError
from workbench.metrics.qa import normalize_answer
from workbench.uncertainty.seper import (
    REQUIRES_GOLD,
    SeperSettings,
    delta_seper,
    greedy_clusters,
    predicate_bi,
    predicate_loose,
    sample_weights,
    seper_hard,
    seper_scores,
    seper_soft,
)


def onehot(label: int) -> np.ndarray:
    row = np.full(3, 0.1)
    row[label] = 0.8
    return row


# ---------------------------------------------------------------------------------------------- pure functions
def test_sample_weights_three_rules():
    ln2 = math.log(2)
    lists = [[-1.0, -3.0], [-2.0], [-2.0 + ln2]]
    # softmax_mean: λ = (-2, -2, -2 + ln 2) → exp ∝ (1, 1, 2) → ℓ = (0.25, 0.25, 0.5)
    assert sample_weights(lists) == pytest.approx([0.25, 0.25, 0.5])
    # sequence: Σ log p = (-4, -2, -2 + ln 2) → p ∝ (e^-4, e^-2, 2e^-2); ℓ_0 = e^-4 / (e^-4 + 3e^-2) = 1 / (1 + 3e²)
    first = 1 / (1 + 3 * math.e**2)
    rest = (1 - first) / 3  # the remaining mass splits 1 : 2
    assert sample_weights(lists, "sequence") == pytest.approx([first, rest, 2 * rest])
    # frequency: 1/N each
    assert sample_weights(lists, "frequency") == pytest.approx([1 / 3] * 3)
    assert sample_weights([], "softmax_mean").shape == (0,)


def test_sample_weights_empty_answer_and_floor():
    # an answer without its first token's log-prob cannot be weighted (spec §3.2: use the first token)
    with pytest.raises(DataError, match="first generated token"):
        sample_weights([[-1.0], []])
    assert sample_weights([[-1.0], []], "frequency") == pytest.approx([0.5, 0.5])
    # -inf is floored at ln 1e-12: finite weights, the certain answer takes (almost) everything
    w = sample_weights([[0.0], [-math.inf]])
    assert np.isfinite(w).all() and w[0] == pytest.approx(1.0) and w[1] == pytest.approx(1e-12)
    with pytest.raises(ValueError):
        sample_weights([[0.0]], "bogus")


def test_seper_soft_directions_and_alias_aggregation():
    w = np.array([0.5, 0.3, 0.2])
    fwd = np.array([[0.9, 0.1], [0.2, 0.0], [0.0, 0.6]])  # E(r_i ⊢ a_j)
    bwd = np.array([[0.4, 0.3], [0.8, 0.1], [0.0, 0.2]])  # E(a_j ⊢ r_i)
    # fwd: S_0 = 0.5·0.9 + 0.3·0.2 + 0.2·0 = 0.51; S_1 = 0.5·0.1 + 0.3·0 + 0.2·0.6 = 0.17
    assert seper_soft(w, fwd, None, "fwd", "max") == pytest.approx(0.51)
    assert seper_soft(w, fwd, bwd, "fwd", "mean") == pytest.approx((0.51 + 0.17) / 2)  # 0.34
    # max: k = [[0.9, 0.3], [0.8, 0.1], [0.0, 0.6]]; S_0 = 0.45 + 0.24 + 0 = 0.69; S_1 = 0.15 + 0.03 + 0.12 = 0.30
    assert seper_soft(w, fwd, bwd, "max", "max") == pytest.approx(0.69)
    assert seper_soft(w, fwd, bwd, "max", "mean") == pytest.approx((0.69 + 0.30) / 2)  # 0.495
    assert math.isnan(seper_soft(w, np.zeros((3, 0)), np.zeros((3, 0))))  # no alias: undefined
    with pytest.raises(ValueError):
        seper_soft(w, fwd, None, "max")
    with pytest.raises(ValueError):
        seper_soft(w, fwd, bwd, "both")


def test_predicates_truth_tables():
    labels = {(E, E): (True, True), (E, N): (False, True), (N, E): (False, True), (N, N): (False, False)}
    labels |= {(a, C): (False, False) for a in (C, N, E)} | {(C, b): (False, False) for b in (N, E)}
    assert len(labels) == 9
    for (ab, ba), (bi, loose) in labels.items():
        assert predicate_bi(onehot(ab), onehot(ba)) is bi, (ab, ba)
        assert predicate_loose(onehot(ab), onehot(ba)) is loose, (ab, ba)
    # stacked rows: one answer per row
    p_ab = np.stack([onehot(E), onehot(E), onehot(N)])
    p_ba = np.stack([onehot(E), onehot(N), onehot(N)])
    assert predicate_bi(p_ab, p_ba).tolist() == [True, False, False]
    assert predicate_loose(p_ab, p_ba).tolist() == [True, True, False]


def test_greedy_clusters_assign_only_unassigned():
    bi = np.zeros((5, 5), dtype=bool)
    for i, j in [(0, 2), (1, 2), (1, 3), (2, 4)]:
        bi[i, j] = bi[j, i] = True
    # i=0 opens cluster 0 and takes 2; i=1 opens cluster 1, skips 2 (already assigned), takes 3;
    # 2 and 3 are assigned; 4 was only equivalent to 2, which is no representative → cluster 2.
    # (the legacy re-labelling would give [0, 1, 1, 1, 2])
    assert greedy_clusters(bi) == [0, 1, 0, 1, 2]
    assert greedy_clusters(np.ones((3, 3))) == [0, 0, 0]
    assert greedy_clusters(np.eye(3)) == [0, 1, 2]
    assert greedy_clusters(np.zeros((0, 0))) == []


def test_seper_hard_cluster_mass_of_matching_clusters():
    w = np.array([0.4, 0.1, 0.2, 0.25, 0.05])
    ids = [0, 1, 0, 1, 2]  # p(C_0) = 0.4 + 0.2 = 0.6, p(C_1) = 0.1 + 0.25 = 0.35, p(C_2) = 0.05
    matches = np.array([[True, False], [False, True], [False, False]])  # cluster × alias
    # max (OR per cluster): C_0 and C_1 match → 0.6 + 0.35 = 0.95
    assert seper_hard(w, ids, matches) == pytest.approx(0.95)
    # mean over aliases (Eq. 10): alias 0 → 0.6, alias 1 → 0.35 → 0.475
    assert seper_hard(w, ids, matches, "mean") == pytest.approx(0.475)
    # one bool per cluster: C_0 + C_2 = 0.65
    assert seper_hard(w, ids, [True, False, True]) == pytest.approx(0.65)
    with pytest.raises(ValueError):
        seper_hard(w, ids, [True, False])
    with pytest.raises(ValueError):
        seper_hard(w, ids, matches, "sum")


def test_settings_validation():
    SeperSettings().validate()
    assert SeperSettings().samples == 10 and SeperSettings().normalisation == "softmax_mean" and REQUIRES_GOLD
    bad = [
        {"samples": 0},
        {"max_new_tokens": 0},
        {"temperature": 0.0},
        {"stop": ("",)},
        {"normalisation": "softmax_sum"},
        {"direction": "bwd"},
        {"alias_agg": "min"},
        {"match_predicate": "strict"},
    ]
    for kwargs in bad:
        with pytest.raises(ConfigError):
            SeperSettings(**kwargs).validate()


# ---------------------------------------------------------------------------------------------- fakes
class EqualityJudge(NLIJudge):
    """Entailment iff the normalised texts are equal, contradiction otherwise; counts its ``entail`` calls."""

    kind = "fake_equality"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def entail(self, premises, hypotheses, question=None):
        self.calls += 1
        return super().entail(premises, hypotheses, question)

    def _predict(self, premises, hypotheses, questions):
        same = [normalize_answer(p) == normalize_answer(h) for p, h in zip(premises, hypotheses, strict=True)]
        return np.array([[0.0, 0.0, 1.0] if s else [1.0, 0.0, 0.0] for s in same])


class AlwaysEntailJudge(EqualityJudge):
    """Every text entails every other: each sample means the gold answer."""

    kind = "fake_always"

    def _predict(self, premises, hypotheses, questions):
        return np.tile([0.0, 0.0, 1.0], (len(premises), 1))


class ContainmentJudge(EqualityJudge):
    """Premise ⊢ hypothesis iff the normalised hypothesis occurs in the normalised premise; else neutral."""

    kind = "fake_containment"

    def _predict(self, premises, hypotheses, questions):
        inside = [
            f" {normalize_answer(h)} " in f" {normalize_answer(p)} " for p, h in zip(premises, hypotheses, strict=True)
        ]
        return np.array([[0.0, 0.0, 1.0] if s else [0.0, 1.0, 0.0] for s in inside])


class ScriptedGenerator:
    """A model-free generator: fixed samples per context, a fixed first-token log-prob for empty answers."""

    def __init__(self, samples: dict[str | None, list[tuple[str, list[float], str]]], first_logprob: float = -1.0):
        self.samples = samples
        self.first_logprob = first_logprob
        self.generate_calls: list[list[str]] = []
        self.score_calls: list[tuple[list[str], list[str], bool]] = []

    def build_prompt(self, question, context=None, *, max_new_tokens, system=None):
        return SimpleNamespace(text=f"{system}|{context}|{question}")

    def generate(self, prompts, *, n, **kwargs):
        self.generate_calls.append(list(prompts))
        out = []
        for prompt in prompts:
            context = prompt.split("|")[1]
            script = self.samples[None if context == "None" else context]
            assert len(script) == n
            for j, (text, lps, finish) in enumerate(script):
                lp = np.asarray(lps, dtype=np.float32)
                ids = np.arange(len(lp))
                out.append(Generation(prompt, text, ids, lp, lp, np.zeros_like(lp), finish, sample_index=j))
        return out

    def score(self, prompts, continuations, *, add_eos=False):
        self.score_calls.append((list(prompts), list(continuations), add_eos))
        lp = np.array([self.first_logprob, -9.0], dtype=np.float32)
        return [
            Scored(p, c, np.arange(2), lp, np.zeros(2), float(lp.sum()), float(lp.mean()))
            for p, c in zip(prompts, continuations, strict=True)
        ]


LN2 = math.log(2)
FREQ4 = SeperSettings(samples=4, normalisation="frequency")
FRANCE = {"question": "What is the capital of France?", "answers": ["Paris"]}


def test_scripted_pipeline_hand_computed_with_an_empty_answer():
    # λ = (-1, -1 [first token, scored], -1, -1 + ln 2) → exp ∝ (1, 1, 1, 2) → ℓ = (0.2, 0.2, 0.2, 0.4)
    script = [("Paris", [-0.5, -1.5], "eos"), ("", [], "stop"), ("paris.", [-1.0], "stop"), ("Lyon", [-1 + LN2], "eos")]
    gen = ScriptedGenerator({None: script}, first_logprob=-1.0)
    judge = EqualityJudge()
    settings = SeperSettings(samples=4)
    [out] = seper_scores([FRANCE], [None], generator=gen, judge=judge, settings=settings)
    # S: "Paris" and "paris." entail the gold both ways (k = 1), "" never matches, "Lyon" contradicts → 0.2 + 0.2
    assert out["seper_s"] == pytest.approx(0.4)
    # H: clusters {Paris, paris.}, {""}, {Lyon}; only the first matches (loose: E both ways) → 0.4
    assert out["seper_h"] == pytest.approx(0.4) and out["n_clusters"] == 3
    assert len(gen.generate_calls) == 1 and judge.calls == 1
    # the empty stop-ended answer's first token: its stop string, scored once with add_eos
    assert gen.score_calls == [([gen.generate_calls[0][0]], ["\n"], True)]
    # frequency weights (1/4 each) need no scoring: S = H = 2/4
    gen = ScriptedGenerator({None: script})
    [freq] = seper_scores([FRANCE], None, generator=gen, judge=EqualityJudge(), settings=FREQ4)
    assert freq["seper_s"] == pytest.approx(0.5) and freq["seper_h"] == pytest.approx(0.5) and not gen.score_calls


def test_scripted_pipeline_direction_and_match_predicate():
    example = {"question": "What is the capital of France?", "answers": ["Paris France"]}
    # frequency weights 1/4; "Paris" ⊢ "Paris France" is neutral, "Paris France" ⊢ "Paris" is entailment
    script = [("Paris", [-1.0], "eos")] * 2 + [("Lyon", [-1.0], "eos")] * 2
    gen = ScriptedGenerator({None: script})

    def run(**kwargs):
        settings = SeperSettings(samples=4, normalisation="frequency", **kwargs)
        return seper_scores([example], [None], generator=gen, judge=ContainmentJudge(), settings=settings)[0]

    # soft, max direction: k(Paris) = max(N→0, E→1) = 1 → 0.25 + 0.25; fwd direction: k(Paris) = 0 → 0
    assert run()["seper_s"] == pytest.approx(0.5)
    assert run(direction="fwd")["seper_s"] == pytest.approx(0.0)
    # hard: cluster {Paris, Paris} (identical strings), {Lyon, Lyon}; rep "Paris" vs gold is (N, E):
    # loose → match (0.5), bi → no match (0)
    assert run()["seper_h"] == pytest.approx(0.5) and run()["n_clusters"] == 2
    assert run(match_predicate="bi")["seper_h"] == pytest.approx(0.0)


def test_scripted_delta_is_with_minus_closed():
    closed = [("Lyon", [-1.0], "eos")] * 3 + [("Paris", [-1.0], "eos")]
    rag = [("Paris", [-1.0], "eos")] * 3 + [("Nice", [-1.0], "eos")]
    gen = ScriptedGenerator({None: closed, "Paris is the capital.": rag})
    judge = EqualityJudge()
    examples = [FRANCE, FRANCE]
    out = delta_seper(
        examples, ["Paris is the capital.", ""], generator=gen, judge=judge, settings=SeperSettings(samples=4)
    )
    # equal λ → ℓ = 1/4: closed 1/4, with context 3/4 → Δ = +0.5; the second example has no context → Δ = 0
    assert out[0]["seper_s_closed"] == pytest.approx(0.25) and out[0]["seper_s"] == pytest.approx(0.75)
    assert out[0]["delta_seper_s"] == pytest.approx(0.5) and out[0]["delta_seper_h"] == pytest.approx(0.5)
    assert out[1]["delta_seper_s"] == 0.0 and out[1]["seper_h"] == out[1]["seper_h_closed"] == pytest.approx(0.25)
    # the closed-book prompt is sampled once for both examples, with the RAG prompt, in one call
    assert len(gen.generate_calls) == 1 and len(gen.generate_calls[0]) == 2 and judge.calls == 1


def test_gold_answers_are_required():
    gen = ScriptedGenerator({None: [("Paris", [-1.0], "eos")]})
    with pytest.raises(DataError, match="gold"):
        seper_scores([{"question": "q", "answers": [" "]}], None, generator=gen, judge=EqualityJudge())
    with pytest.raises(DataError, match="contexts"):
        seper_scores([FRANCE], ["a", "b"], generator=gen, judge=EqualityJudge())


# ---------------------------------------------------------------------------------------------- tiny random Llama
QUESTIONS = [
    {"question": "What is the capital of France?", "answers": ["Paris"]},
    {"question": "Who wrote Hamlet?", "answers": ["William Shakespeare", "Shakespeare"]},
]
CONTEXTS = ["Paris is the capital of France.", None]
TINY = SeperSettings(samples=4, max_new_tokens=4)


@pytest.fixture
def sampling_calls(generator):
    """Record the prompt count of every sampling (temperature > 0) generate call."""
    calls: list[int] = []
    original = generator.generate

    def spy(prompts, **kwargs):
        if kwargs.get("temperature", 0.0) > 0:
            calls.append(len(prompts))
        return original(prompts, **kwargs)

    generator.generate = spy
    yield calls
    del generator.generate


def _samples(generator, question: str, context: str | None) -> list[Generation]:
    """The samples the pipeline draws for one prompt (sampling is seeded per prompt and sample index)."""
    from workbench.uncertainty.calculators import ANSWER_SYSTEM

    prompt = generator.build_prompt(question, context, max_new_tokens=TINY.max_new_tokens, system=ANSWER_SYSTEM).text
    return generator.generate(
        [prompt], n=TINY.samples, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, stop=TINY.stop, seed=None
    )


def test_tiny_model_matches_the_hand_computed_belief(generator, sampling_calls):
    # gold = the first sample's text: SePer = Σ ℓ_i over the samples that normalise to the same string (S and H)
    samples = [_samples(generator, ex["question"], c) for ex, c in zip(QUESTIONS, CONTEXTS, strict=True)]
    assert all(s.text.strip() for group in samples for s in group), "precondition: no empty sample"
    examples = [
        {"question": ex["question"], "answers": [group[0].text]} for ex, group in zip(QUESTIONS, samples, strict=True)
    ]
    sampling_calls.clear()
    judge = EqualityJudge()
    out = seper_scores(examples, CONTEXTS, generator=generator, judge=judge, settings=TINY)
    assert sampling_calls == [2] and judge.calls == 1
    for row, group in zip(out, samples, strict=True):
        weights = sample_weights([s.logprobs for s in group])
        gold = normalize_answer(group[0].text)
        expected = sum(w for w, s in zip(weights, group, strict=True) if normalize_answer(s.text) == gold)
        assert row["seper_s"] == pytest.approx(expected) and row["seper_h"] == pytest.approx(expected)
        assert row["n_clusters"] == len({normalize_answer(s.text) for s in group})
        assert 0.0 < row["seper_s"] <= 1.0


def test_tiny_model_seper_scores_one_call_each(generator, sampling_calls):
    judge = EqualityJudge()
    out = seper_scores(QUESTIONS, CONTEXTS, generator=generator, judge=judge, settings=TINY)
    assert sampling_calls == [2] and judge.calls == 1
    assert len(out) == 2
    for row in out:
        assert set(row) == {"seper_h", "seper_s", "n_clusters"}
        assert 0.0 <= row["seper_h"] <= 1.0 and 0.0 <= row["seper_s"] <= 1.0 and 1 <= row["n_clusters"] <= 4
    # when every sample means the gold answer: one cluster holding all the mass
    everything = seper_scores(QUESTIONS, CONTEXTS, generator=generator, judge=AlwaysEntailJudge(), settings=TINY)
    for row in everything:
        assert row["seper_h"] == pytest.approx(1.0) and row["seper_s"] == pytest.approx(1.0)
        assert row["n_clusters"] == 1


def test_tiny_model_delta_seper(generator, sampling_calls):
    # gold of the first question = its first sample with the context: the belief with context is > 0
    gold = _samples(generator, QUESTIONS[0]["question"], CONTEXTS[0])[0].text
    examples = [{**QUESTIONS[0], "answers": [gold]}, QUESTIONS[1]]
    sampling_calls.clear()
    judge = EqualityJudge()
    out = delta_seper(examples, CONTEXTS, generator=generator, judge=judge, settings=TINY)
    # closed book for both questions + the one RAG prompt, sampled in one call; every NLI pair in one call
    assert sampling_calls == [3] and judge.calls == 1
    keys = {"seper_h", "seper_s", "seper_h_closed", "seper_s_closed", "delta_seper_h", "delta_seper_s"}
    closed = seper_scores(examples, None, generator=generator, judge=EqualityJudge(), settings=TINY)
    rag = seper_scores(examples, CONTEXTS, generator=generator, judge=EqualityJudge(), settings=TINY)
    for row, before, after in zip(out, closed, rag, strict=True):
        assert set(row) == keys
        for est in ("h", "s"):
            assert 0.0 <= row[f"seper_{est}"] <= 1.0 and 0.0 <= row[f"seper_{est}_closed"] <= 1.0
            assert row[f"delta_seper_{est}"] == pytest.approx(row[f"seper_{est}"] - row[f"seper_{est}_closed"])
            assert row[f"seper_{est}_closed"] == pytest.approx(before[f"seper_{est}"])
            assert row[f"seper_{est}"] == pytest.approx(after[f"seper_{est}"])
    assert out[0]["seper_s"] > 0.0 and out[0]["delta_seper_s"] != 0.0
    assert out[1]["delta_seper_h"] == 0.0 and out[1]["delta_seper_s"] == 0.0  # no context: nothing changes
    # every sample means the gold in both conditions → SePer 1 with and without context, Δ = 0
    for row in delta_seper(QUESTIONS, CONTEXTS, generator=generator, judge=AlwaysEntailJudge(), settings=TINY):
        assert row["seper_s"] == pytest.approx(1.0) and row["seper_h_closed"] == pytest.approx(1.0)
        assert row["delta_seper_s"] == pytest.approx(0.0) and row["delta_seper_h"] == pytest.approx(0.0)
