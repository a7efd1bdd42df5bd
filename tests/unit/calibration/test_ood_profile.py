"""The OOD profile: its threshold hits the target false-positive rate on synthetic in-distribution questions (set on
held-out questions or cross-fitted), a synthetic shift is detected, the form and length checks, the embedder guard,
the learned-artifact round trip (JSON + safetensors) and malformed files, and the question form separating
either-or wiki-qa questions from open ones."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from workbench.calibration.ood import (
    CHECKS,
    OODProfile,
    OODResult,
    calibrated_threshold,
    question_form,
)
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
DIM = 16


def _topics(rng: np.random.Generator, n: int, centres: np.ndarray) -> np.ndarray:
    """``n`` unit vectors drawn around random rows of ``centres`` (a mixture of topics)."""
    picked = centres[rng.integers(0, len(centres), n)]
    vectors = picked + 0.35 * rng.normal(size=(n, centres.shape[1]))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class _Embedder:
    """A stand-in embedder: a question ``"q<i>"`` → row ``i`` of a table, with a fingerprint."""

    def __init__(self, table: np.ndarray, fingerprint: str = "synthetic") -> None:
        self.table, self.fingerprint = table, fingerprint

    def encode(self, questions):
        return self.table[[int(q.split()[-1].rstrip("?")) for q in questions]]


def _questions(start: int, n: int) -> list[str]:
    return [f"Was it red or blue, item {i}?" for i in range(start, start + n)]


@pytest.fixture(scope="module")
def world():
    """In-distribution questions from 6 topics (fit 400, threshold 400, fresh 2,000) and a shift: 400 questions from
    2 topics the fit split never saw; one embedding table for all."""
    rng = np.random.default_rng(0)
    seen, unseen = rng.normal(size=(6, DIM)), rng.normal(size=(2, DIM))
    table = np.vstack([_topics(rng, 2800, seen), _topics(rng, 400, unseen)]).astype(np.float32)
    return _Embedder(table), {"fit": (0, 400), "held": (400, 400), "fresh": (800, 2000), "shift": (2800, 400)}


def _fit(world, *, held_out: bool = True, target: float = 0.05, **kwargs) -> OODProfile:
    embedder, parts = world
    fit = _questions(*parts["fit"])
    held = _questions(*parts["held"]) if held_out else None
    return OODProfile.fit(
        fit,
        embedder.encode(fit),
        embedder="synthetic",
        target_fpr=target,
        held_out=held,
        held_out_embeddings=None if held is None else embedder.encode(held),
        split="val" if held_out else None,
        **kwargs,
    )


def _rate(profile: OODProfile, world, part: str) -> float:
    embedder, parts = world
    results = profile.check_questions(_questions(*parts[part]), profile.embedder_for(embedder))
    return float(np.mean([r.ood for r in results]))


@pytest.mark.parametrize("held_out", [True, False], ids=["held-out split", "cross-fitted"])
@pytest.mark.parametrize("target", [0.05, 0.2])
def test_the_threshold_hits_the_target_false_positive_rate_on_fresh_in_distribution_questions(world, held_out, target):
    profile = _fit(world, held_out=held_out, target=target)
    assert profile.embedding is not None and profile.embedding.threshold is not None
    assert profile.calibration["target_fpr"] == target and profile.calibration["questions"] == 400
    assert profile.calibration["split"] == ("val" if held_out else None)
    # in-sample at most the target; on 2,000 fresh questions within binomial noise of it (sd ~0.5-0.9 points)
    assert profile.calibration["flag_rate"] <= target
    assert abs(_rate(profile, world, "fresh") - target) < 0.025


def test_a_shift_to_unseen_topics_is_detected(world):
    profile = _fit(world)
    assert _rate(profile, world, "shift") > 0.9
    embedder, parts = world
    (result,) = profile.check_questions(_questions(parts["shift"][0], 1), embedder.encode)
    assert result == OODResult(True, ["question_embedding"])


def test_novelty_is_the_same_whatever_the_block_and_leave_one_out_skips_only_the_row_itself(world, monkeypatch):
    from workbench.calibration import ood

    embedder, parts = world
    check = _fit(world).embedding
    fit = embedder.encode(_questions(*parts["fit"]))  # the reference's own questions, as the fit scores them
    whole, crossed = check.novelty(fit), check.novelty(fit, leave_one_out=True)
    monkeypatch.setattr(ood, "BLOCK", 7)  # blocks that split the rows unevenly
    assert np.allclose(check.novelty(fit), whole) and np.allclose(check.novelty(fit, leave_one_out=True), crossed)
    distance = 1.0 - check.reference.astype(float) @ check.reference.astype(float).T
    np.fill_diagonal(distance, np.inf)
    assert np.allclose(crossed, np.sort(distance, axis=1)[:, :10].mean(axis=1), atol=1e-6)
    assert (whole < crossed).all()  # scored against all the reference, a fit question meets itself at distance 0
    with pytest.raises(DataError, match="leave-one-out"):
        check.novelty(fit[:30], leave_one_out=True)
    # `own` names each row's reference row (-1: none): all of them is leave-one-out, none is the plain novelty, and
    # a few reordered rows skip exactly their own
    n = len(fit)
    assert np.allclose(check.novelty(fit, own=range(n)), crossed) and np.allclose(
        check.novelty(fit, own=[-1] * n), whole
    )
    picked = [5, 0, 17, 3]
    mixed = check.novelty(fit[picked], own=[5, -1, 17, -1])
    assert np.allclose(mixed, [crossed[5], whole[0], crossed[17], whole[3]])
    for bad in ([0] * (n - 1), [n] * n, [-2] * n):
        with pytest.raises(DataError, match="'own' must give each"):
            check.novelty(fit, own=bad)


def test_the_conformal_rank_and_its_limits():
    novelty = np.arange(1.0, 20.0)  # 19 questions: ⌈20 × 0.95⌉ = 19th smallest
    assert calibrated_threshold(novelty, np.zeros(19, bool), 0.05) == 19.0
    flags = np.zeros(19, bool)
    flags[0] = True  # a rule-flagged question counts as +inf: the threshold moves up one rank
    assert calibrated_threshold(novelty, flags, 0.05) is None
    assert calibrated_threshold(np.arange(1.0, 41.0), np.zeros(40, bool), 0.1) == 37.0  # ⌈41 × 0.9⌉
    with pytest.raises(DataError, match="at least 19 are needed"):
        calibrated_threshold(novelty[:18], np.zeros(18, bool), 0.05)


def test_when_the_rule_checks_alone_miss_the_target_the_embedding_check_is_off_and_says_so(world):
    embedder, parts = world
    fit = _questions(*parts["fit"])
    held = [*_questions(400, 360), *(f"who answers this, item {i}?" for i in range(760, 800))]  # 10 % open form
    profile = OODProfile.fit(
        fit, embedder.encode(fit), embedder="synthetic", held_out=held, held_out_embeddings=embedder.encode(held)
    )
    assert profile.embedding.threshold is None and profile.calibration["rule_rate"] == pytest.approx(0.1)
    assert profile.calibration["flag_rate"] == pytest.approx(0.1) and "never" in profile.describe()
    assert _rate(profile, world, "shift") == 0.0  # no embedding flag any more
    assert "about 10 %" in profile.note(["question_form"])


def test_the_embedding_check_needs_the_profiles_own_embedder(world):
    embedder, _ = world
    profile = _fit(world)
    assert profile.embedder_for(embedder) == embedder.encode
    assert profile.embedder_for(_Embedder(embedder.table, "another")) is None and profile.embedder_for(None) is None
    # without an embedder only the form and length checks run
    assert profile.check_questions(_questions(2800, 3)) == [OODResult(False, [])] * 3


def test_the_form_and_length_checks():
    profile = OODProfile.fit(EITHER_OR)
    assert profile.embedding is None and profile.calibration["split"] is None
    assert question_form("Was X born in France or Italy?").shape == "aux|options"
    assert question_form("who has the most catches in NFL history").shape == "wh|open"
    assert question_form('Which subject, described as "a or b", fits this clue: it is red or blue.').shape == "wh|open"
    assert profile.check_rules("Was Ovid Roman or Greek? Reply with one word.") == []
    assert profile.check_rules("who has the most catches in NFL history")[0] == "question_form"
    assert "question_length" in profile.check_rules("Was it red or blue? " + "word " * 200)
    (flagged, fine) = profile.check_questions(["Who won the most medals at the Olympics?", EITHER_OR[0]])
    assert flagged.to_dict() == {"flag": True, "checks": ["question_form"]} and not fine.ood
    assert CHECKS == ("question_embedding", "question_form", "question_length")


def test_the_note_names_the_checks_and_the_rate(world):
    note = _fit(world).note(["question_embedding", "question_form"])
    assert note.startswith("out of distribution for this bundle (question_embedding, question_form)")
    assert "never measured" in note and "about 5 % of in-distribution questions" in note


def test_the_profile_round_trips_through_json_and_safetensors(world, tmp_path):
    profile = _fit(world)
    written = save_learned(profile, tmp_path / "ood.json")
    assert sorted(p.name for p in written) == ["ood.json", "ood.safetensors"]
    again = load_learned(tmp_path / "ood.json", expect={"ood_profile"})
    assert again.to_dict() == profile.to_dict()
    assert np.array_equal(again.embedding.reference, profile.embedding.reference)
    embedder, parts = world
    questions = _questions(parts["shift"][0] - 50, 100)
    assert again.check_questions(questions, embedder.encode) == profile.check_questions(questions, embedder.encode)
    assert "from 400 questions" in profile.describe() and "400 questions of val" in profile.describe()


def _payload(profile: OODProfile) -> tuple[dict, dict]:
    return json.loads(json.dumps(profile.to_dict())), {k: v.copy() for k, v in profile.tensors().items()}


@pytest.mark.parametrize(
    "edit",
    [
        lambda d, t: d.update(version=3),
        lambda d, t: d.update(extra=1),
        lambda d, t: d.pop("shapes"),
        lambda d, t: d.update(rows=0),
        lambda d, t: d.update(margin=-1),
        lambda d, t: d.update(quantiles=[0.9, 0.1]),
        lambda d, t: d["shapes"].update({"how|maybe": 1}),
        lambda d, t: d["shapes"].update({"wh|open": -1}),
        lambda d, t: d.update(question_words=[1, 2]),
        lambda d, t: d["calibration"].update(target_fpr=1.5),
        lambda d, t: d["calibration"].pop("split"),
        lambda d, t: d["embedding"].update(threshold="high"),
        lambda d, t: d["embedding"].update(neighbours=400),
        lambda d, t: d["embedding"].update(dim=8),
        lambda d, t: t.update(reference=t["reference"][:10]),
        lambda d, t: t.update(center=t["center"].astype(np.float64)),
        lambda d, t: t["reference"].__setitem__((0, 0), np.nan),
        lambda d, t: t.pop("center"),
    ],
)
def test_a_malformed_profile_is_a_data_error(world, edit):
    d, tensors = _payload(_fit(world))
    edit(d, tensors)
    with pytest.raises(DataError):
        OODProfile.from_dict(d, tensors=tensors)


def test_an_uncalibrated_version_1_profile_is_refused_by_name():
    with pytest.raises(DataError, match="uncalibrated OOD profile of version 1"):
        learned_from_dict({"kind": "ood_profile", "version": 1}, expect={"ood_profile"})
    d = OODProfile.fit(EITHER_OR).to_dict()
    assert OODProfile.from_dict(d).to_dict() == d  # no embedding check: no tensors
    with pytest.raises(DataError, match="tensors without an embedding check"):
        OODProfile.from_dict(d, tensors={"center": np.zeros(2, np.float32)})


def test_fitting_refuses_what_it_cannot_describe(world):
    embedder, _ = world
    with pytest.raises(DataError, match="at least one question"):
        OODProfile.fit([])
    with pytest.raises(DataError, match="2 embeddings for 1"):
        OODProfile.fit(["a or b?"], np.zeros((2, 4)))
    with pytest.raises(DataError, match="neighbours"):
        OODProfile.fit(_questions(0, 5), embedder.encode(_questions(0, 5)), neighbours=5)
    with pytest.raises(DataError, match="non-finite"):
        OODProfile.fit(_questions(0, 30), np.full((30, 4), math.nan))
    with pytest.raises(DataError, match="target_fpr"):
        OODProfile.fit(_questions(0, 30), target_fpr=0.0)
    with pytest.raises(DataError, match="one embedding each"):
        OODProfile.fit(_questions(0, 30), embedder.encode(_questions(0, 30)), held_out=_questions(30, 30))


def test_open_wikiqa_templates_fail_the_form_check_and_either_or_test_questions_pass():
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
    open_form = np.mean(["question_form" in profile.check_rules(q) for q in open_])
    either_or_flagged = np.mean([bool(profile.check_rules(q)) for q in either_or])
    assert open_form == 1.0, open_form
    assert either_or_flagged <= 0.1, either_or_flagged
