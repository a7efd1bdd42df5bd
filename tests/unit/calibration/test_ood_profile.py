"""The OOD profile: each check on both sides, imputation as the calibrator set does it, the learned-artifact round
trip and malformed files, and the question form separating either-or wiki-qa questions from open ones."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from workbench.calibration.ood import OODProfile, OODResult, question_form
from workbench.core.errors import DataError
from workbench.methods.learned import learned_from_dict, load_learned, save_learned

EITHER_OR = [
    "Was Arthur Schopenhauer German or American? Reply with one word.",
    "Is Kharkiv in Azerbaijan or in Ukraine? Reply with the country only.",
    'Which name fills the blank, Chariot or Sailing? "A ___ is a type of vehicle." Reply with the name only.',
    "Was Nadia Boulanger French or British? Reply with one word.",
    "Is Lagos in Nigeria or in United States? Reply with the country only.",
    'Which name fills the blank, Farad or Dalton? "The ___ is a unit of mass." Reply with the name only.',
] * 5


@pytest.fixture(scope="module")
def profile() -> OODProfile:
    rng = np.random.default_rng(0)
    n = len(EITHER_OR)
    confidence = rng.uniform(0.2, 0.9, n)
    confidence[3] = math.nan  # NaN and -inf on the fit split: imputed, never out of range
    entropy = -rng.uniform(0.0, 2.0, n)
    entropy[5] = -math.inf
    answers = ["German", "Ukraine", "Chariot", "French", "Nigeria", "Dalton (unit)"] * 5
    return OODProfile.fit(EITHER_OR, {"confidence": confidence, "entropy": entropy}, answers)


def test_a_feature_inside_the_fit_range_passes_and_one_outside_fails(profile):
    record = profile.features["confidence"]
    assert 0.2 <= record["q_lo"] < record["q_hi"] <= 0.9
    assert profile.check_features({"confidence": 0.5, "entropy": -1.0}) == []
    assert profile.check_features({"confidence": 3.0, "entropy": -1.0}) == ["feature:confidence"]
    assert profile.check_features({"confidence": 0.5, "entropy": 5.0}) == ["feature:entropy"]
    # within the margin (a tenth of the inter-quantile range) past the quantile: not flagged
    slack = 0.05 * (record["q_hi"] - record["q_lo"])
    assert profile.check_features({"confidence": record["q_hi"] + slack}) == []


def test_missing_and_infinite_values_are_imputed_as_the_calibrator_set_does(profile):
    # NaN → the median, ±inf → the end of the finite range: never out of range; absent features are not checked
    assert profile.check_features({"confidence": math.nan, "entropy": -math.inf}) == []
    assert profile.check_features({"confidence": None, "entropy": math.inf}) == []
    assert profile.check_features({"other": 1e9}) == [] and profile.check_features(None) == []


def test_the_question_form_separates_either_or_from_open_questions(profile):
    assert question_form("Was X born in France or Italy?").shape == "aux|options"
    assert question_form("who has the most catches in NFL history").shape == "wh|open"
    assert question_form('Which subject, described as "a or b", fits this clue: it is red or blue.').shape == "wh|open"
    assert profile.check_question("Was Ovid Roman or Greek? Reply with one word.") == []
    assert profile.check_question("who has the most catches in NFL history")[0] == "question_form"
    assert profile.check_question("Who has the most catches in the history of the National Football League?") == [
        "question_form"
    ]
    assert "question_length" in profile.check_question("Was it red or blue? " + "word " * 200)


def test_a_short_answer_passes_and_a_long_one_fails(profile):
    assert profile.check_answer("Tom Brady") == []
    assert profile.check_answer("The answer is " + "very " * 30 + "long") == ["answer_length"]
    assert profile.check_answer(None) == []


def test_check_combines_every_check_in_order(profile):
    result = profile.check("Who has caught the most passes in the history of the NFL?", {"confidence": 9.0}, "a " * 50)
    assert result == OODResult(True, ["feature:confidence", "question_form", "answer_length"])
    assert result.to_dict() == {"flag": True, "checks": ["feature:confidence", "question_form", "answer_length"]}
    assert profile.check(EITHER_OR[0], {"confidence": 0.5}, "German").to_dict() == {"flag": False, "checks": []}


def test_the_profile_round_trips_through_the_learned_artifact_protocol(profile, tmp_path):
    save_learned(profile, tmp_path / "ood.json")
    again = load_learned(tmp_path / "ood.json", expect={"ood_profile"})
    assert again == profile and again.to_dict() == profile.to_dict()
    assert json.loads((tmp_path / "ood.json").read_text())["kind"] == "ood_profile"
    assert "2 feature ranges" in profile.describe() and "from 30 questions" in profile.describe()


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(version=2),
        lambda d: d.update(extra=1),
        lambda d: d.pop("shapes"),
        lambda d: d.update(rows=0),
        lambda d: d.update(margin=-1),
        lambda d: d.update(quantiles=[0.9, 0.1]),
        lambda d: d["features"]["confidence"].update(q_lo="x"),
        lambda d: d["features"]["confidence"].update(q_lo=5.0),  # above q_hi and max
        lambda d: d["features"]["confidence"].pop("median"),
        lambda d: d["shapes"].update({"how|maybe": 1}),
        lambda d: d["shapes"].update({"wh|open": -1}),
        lambda d: d.update(question_words=[1, 2]),
        lambda d: d.update(answer_words={"min": math.inf, "max": 1, "q_lo": 1, "q_hi": 1}),
    ],
)
def test_a_malformed_profile_is_a_data_error(profile, edit):
    d = json.loads(json.dumps(profile.to_dict()))
    edit(d)
    with pytest.raises(DataError):
        learned_from_dict(d, expect={"ood_profile"})


def test_fitting_refuses_what_it_cannot_describe():
    with pytest.raises(DataError, match="at least one question"):
        OODProfile.fit([])
    with pytest.raises(DataError, match="no finite value"):
        OODProfile.fit(["a or b?"], {"confidence": [math.nan]})
    with pytest.raises(DataError, match="2 values for 1"):
        OODProfile.fit(["a or b?"], {"confidence": [1.0, 2.0]})


def test_open_wikiqa_templates_are_flagged_and_either_or_test_questions_mostly_not():
    """Fit on the either-or templates' calib questions (what the quickstart calibrates on); the open templates —
    cloze, description, two-hop — of the test split fail the question-form check, the either-or ones pass."""
    from workbench.data.wikiqa import CHOICE_TEMPLATES, OPEN_TEMPLATES, TEMPLATES, build_wikiqa, load_articles

    ds = build_wikiqa(load_articles()[:4000], templates=TEMPLATES, max_per_template=40, seed=0)

    def template(row):
        return json.loads(row["metadata"])["template"]

    fit = [r["question"] for r in ds["calib"] if template(r) in CHOICE_TEMPLATES]
    profile = OODProfile.fit(fit)
    test = list(ds["test"])
    either_or = [r["question"] for r in test if template(r) in CHOICE_TEMPLATES]
    open_ = [r["question"] for r in test if template(r) in OPEN_TEMPLATES]
    assert len(either_or) >= 20 and len(open_) >= 20
    open_form = np.mean(["question_form" in profile.check_question(q) for q in open_])
    either_or_flagged = np.mean([bool(profile.check_question(q)) for q in either_or])
    assert open_form == 1.0, open_form
    assert either_or_flagged <= 0.1, either_or_flagged
