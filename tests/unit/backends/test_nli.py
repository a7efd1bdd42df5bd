"""NLI judges: the shared interface (shape, order, de-duplication, questions), label mapping from id2label, the
answer-equivalence rules, the registry, and the cross-encoder's train -> save -> load round trip on a tiny BERT."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest

from workbench.backends import nli as nli_module
from workbench.backends.cost import CostCounter
from workbench.backends.nli import (
    CONTRADICTION,
    ENTAILMENT,
    NEUTRAL,
    AnswerEquivalenceJudge,
    CrossEncoderNLI,
    HFSequenceClassificationNLI,
    NLIJudge,
    label_permutation,
    make_nli_judge,
    nli_judge_kinds,
    register_nli_judge,
    with_question,
)
from workbench.backends.nli_train import evaluate_judge, train_cross_encoder
from workbench.core.errors import AssetError, ConfigError, DataError
from workbench.data.nli_pairs import BUILTIN_ANSWER_PAIRS, NLIPair

REVERSED = {"0": "ENTAILMENT", "1": "Neutral", "2": "contradiction"}


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory):
    """The tiny random BERT classifier (3 labels) with its config's id2label set to a reversed NLI order."""
    from tests.tiny_models import build_tiny_encoder

    path = build_tiny_encoder(tmp_path_factory.mktemp("tiny-nli"), num_labels=3)
    config = json.loads((path / "config.json").read_text())
    config["id2label"] = REVERSED
    config["label2id"] = {v: int(k) for k, v in REVERSED.items()}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def tiny_generic_dir(tmp_path_factory):
    """The tiny random BERT classifier with generic labels (LABEL_0..2)."""
    from tests.tiny_models import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("tiny-generic"), num_labels=3)


def test_label_permutation():
    assert label_permutation({0: "contradiction", 1: "neutral", 2: "entailment"}) == [0, 1, 2]
    assert label_permutation({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}) == [2, 1, 0]
    assert label_permutation(None, ["entailment", "contradiction", "neutral"]) == [1, 2, 0]
    with pytest.raises(AssetError):
        label_permutation({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(AssetError):
        label_permutation({0: "entailment", 1: "not_entailment"})


def test_hf_judge_maps_columns_through_id2label(tiny_nli_dir):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    judge = HFSequenceClassificationNLI(tiny_nli_dir)
    premises = ["Paris is the capital of France.", "The Nile is a river."]
    hypotheses = ["Paris is in France.", "Einstein wrote Hamlet."]
    probs = judge.entail(premises, hypotheses)
    assert probs.shape == (2, 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)

    tokenizer = AutoTokenizer.from_pretrained(tiny_nli_dir)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_nli_dir).eval()
    with torch.inference_mode():
        logits = model(**tokenizer(premises, hypotheses, padding=True, return_tensors="pt")).logits
    raw = torch.softmax(logits, dim=-1).numpy()
    np.testing.assert_allclose(probs, raw[:, ::-1], atol=1e-5)  # model order is (entailment, neutral, contradiction)


def test_generic_labels_need_label_order(tiny_generic_dir):
    with pytest.raises(AssetError):
        HFSequenceClassificationNLI(tiny_generic_dir)
    judge = HFSequenceClassificationNLI(tiny_generic_dir, label_order=["entailment", "neutral", "contradiction"])
    assert judge.columns == [2, 1, 0]


def test_dedup_counts_unique_pairs_and_questions(tiny_nli_dir):
    counter = CostCounter()
    judge = HFSequenceClassificationNLI(tiny_nli_dir, counter=counter, batch_size=2)
    premises = ["a cat", "a dog", "a cat", "a cat", "a dog"]
    hypotheses = ["an animal", "an animal", "an animal", "a pet", "an animal"]
    probs = judge.entail(premises, hypotheses)
    assert counter.nli_pairs == 3
    np.testing.assert_array_equal(probs[0], probs[2])
    np.testing.assert_array_equal(probs[1], probs[4])

    with_q = judge.entail(["a cat", "a cat"], ["an animal", "an animal"], question=["What is it?", "Who?"])
    assert counter.nli_pairs == 5  # a different question makes a different pair
    assert not np.allclose(with_q[0], with_q[1])
    same = judge.entail(["a cat"], ["an animal"], question="What is it?")
    np.testing.assert_allclose(same[0], with_q[0], atol=1e-6)
    assert judge.entail([], []).shape == (0, 3)
    with pytest.raises(DataError):
        judge.entail(["a"], ["b", "c"])
    with pytest.raises(DataError):
        judge.entail(["a"], ["b"], question=["q1", "q2"])


def test_with_question_prefix():
    assert with_question("Who?", "Paris") == "Question: Who?\nParis"
    assert with_question("", "Paris") == "Paris"


class FakeEmbedder:
    """Maps known texts to fixed unit vectors (cosine = dot product of these)."""

    dim, fingerprint = 2, "fake"
    table: ClassVar[dict[str, list[float]]] = {
        "NYC": [1.0, 0.0],
        "New York City": [1.0, 0.0],
        "Big Apple": [0.8, 0.6],
        "Boston": [0.0, 1.0],
    }

    def encode(self, texts):
        return np.array([self.table[t] for t in texts], dtype=np.float32)


@pytest.mark.parametrize(
    ("a", "b", "label"),
    [
        ("Paris", "paris, france", ENTAILMENT),  # containment
        ("The Nile", "nile", ENTAILMENT),  # normalised exact match
        ("1945", "in 1945", ENTAILMENT),
        ("Paris", "Lyon", CONTRADICTION),
        ("George Washington", "George Bush", NEUTRAL),  # token F1 0.5: middling band
        ("Albert Einstein", "Einstein's theory", CONTRADICTION),
        ("", "Paris", NEUTRAL),  # nothing to compare
    ],
)
def test_answer_equivalence_rules(a, b, label):
    judge = AnswerEquivalenceJudge()
    probs = judge.entail([a], [b])
    assert probs.argmax(axis=1).tolist() == [label]
    assert probs.max() == 1.0


def test_answer_equivalence_cosine_thresholds_and_smoothing():
    judge = AnswerEquivalenceJudge(FakeEmbedder(), cosine_entail=0.9, cosine_neutral=0.7, smoothing=0.3)
    labels = judge.labels(["NYC", "NYC", "NYC"], ["New York City", "Big Apple", "Boston"])
    assert labels.tolist() == [ENTAILMENT, NEUTRAL, CONTRADICTION]  # cosines 1.0, 0.8, 0.0
    probs = judge.entail(["NYC"], ["Boston"])
    np.testing.assert_allclose(probs[0], [0.8, 0.1, 0.1], atol=1e-6)
    without = AnswerEquivalenceJudge(use_containment=False)
    assert without.labels(["Paris"], ["Paris France"]).tolist() == [NEUTRAL]  # F1 = 2/3: middling
    assert judge.fingerprint != without.fingerprint
    with pytest.raises(ConfigError):
        AnswerEquivalenceJudge(f1_entail=0.3, f1_neutral=0.5)


def test_registry_and_factory():
    assert {"hf", "cross_encoder", "answer_equivalence"} <= set(nli_judge_kinds())
    assert isinstance(make_nli_judge("answer_equivalence", f1_entail=0.9), AnswerEquivalenceJudge)
    with pytest.raises(ConfigError):
        make_nli_judge("llm-unknown")
    with pytest.raises(ConfigError):
        make_nli_judge("answer_equivalence", no_such_option=1)

    class AlwaysNeutral(NLIJudge):
        kind = "test_always_neutral"

        def _predict(self, premises, hypotheses, questions):
            return np.tile([0.0, 1.0, 0.0], (len(premises), 1))

    register_nli_judge("test_always_neutral")(AlwaysNeutral)
    try:
        judge = make_nli_judge("test_always_neutral")
        assert judge.labels(["a", "a"], ["b", "b"]).tolist() == [NEUTRAL, NEUTRAL]
        assert judge.counter.nli_pairs == 1
        with pytest.raises(ConfigError):
            register_nli_judge("hf")(AlwaysNeutral)
    finally:
        nli_module._REGISTRY.pop("test_always_neutral", None)


def test_evaluate_judge_on_builtin_answer_pairs():
    report = evaluate_judge(AnswerEquivalenceJudge(), list(BUILTIN_ANSWER_PAIRS))
    predicted = AnswerEquivalenceJudge().labels(
        [p.answer_a for p in BUILTIN_ANSWER_PAIRS], [p.answer_b for p in BUILTIN_ANSWER_PAIRS]
    )
    gold = np.array([p.label for p in BUILTIN_ANSWER_PAIRS])
    assert report["accuracy"] == pytest.approx(float((predicted == gold).mean()))
    assert report["accuracy"] >= 0.8
    assert set(report["recall"]) == {"contradiction", "entailment"}
    assert sum(map(sum, report["confusion"])) == len(BUILTIN_ANSWER_PAIRS) and report["pairs_per_s"] > 0


def _toy_pairs(n: int) -> list[NLIPair]:
    texts = [("Paris is in France.", "Paris is in France.", 2), ("Paris is in France.", "Paris is in Peru.", 0)]
    texts.append(("Paris is in France.", "The Nile is a river.", 1))
    return [NLIPair(p, h, label, f"a{i}", "toy") for i in range(n) for p, h, label in texts][:n]


def test_train_save_load_cross_encoder(tiny_encoder_dir, tmp_path, monkeypatch, caplog):
    import logging

    import workbench.core.logs as logs

    monkeypatch.setattr(logs, "is_terminal", lambda: False)  # output to a log: the steps as lines, with the loss
    caplog.set_level(logging.INFO, logger="workbench.progress")
    out = tmp_path / "nli-ce"
    metrics = train_cross_encoder(
        _toy_pairs(12), _toy_pairs(6), out_dir=out, base_model=str(tiny_encoder_dir), batch_size=4, progress=True
    )
    (line,) = [r.getMessage() for r in caplog.records if r.name == "workbench.progress"]
    assert line.startswith("train NLI cross-encoder (steps): 3 of 3 (100%) in ") and ", loss " in line
    assert {"val_accuracy", "val_recall", "train_seconds", "val_pairs_per_s"} <= set(metrics)
    assert 0.0 <= metrics["val_accuracy"] <= 1.0 and metrics["train_pairs"] == 12
    assert (out / "model.safetensors").is_file() and (out / "workbench_nli.json").is_file()
    saved = json.loads((out / "workbench_nli.json").read_text())
    assert saved["metrics"]["val_accuracy"] == metrics["val_accuracy"]
    judge = make_nli_judge("cross_encoder", model_dir=out)
    assert isinstance(judge, CrossEncoderNLI) and judge.columns == [0, 1, 2]
    assert judge.entail(["Paris is in France."], ["Paris is in Peru."]).shape == (1, 3)
    assert not list(out.parent.glob(".nli-ce.*"))  # no temporary directory left behind


def test_cross_encoder_refuses_other_directories(tiny_nli_dir, tmp_path):
    with pytest.raises(AssetError):
        CrossEncoderNLI(tiny_nli_dir)
    with pytest.raises(ConfigError):
        train_cross_encoder(_toy_pairs(3), _toy_pairs(3), out_dir=tmp_path / "x", base_model="unused", epochs=0)
