"""The calibrate stage fits the OOD flag on the fit split's questions with its threshold set on ``val`` (ood.json +
ood.safetensors), measures it on the other splits (ood_rates.json: a false-positive rate on test, a detection rate on
the held-out topics, Wilson intervals), writes each collected row's checks and a summary line; the report's "Out of
distribution" section shows both rates; the export writes the profile into the bundle's decision block; and a
threshold split that would leak is refused at recipe load."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig, load_recipe
from workbench.stages.calibrate import run as calibrate
from workbench.stages.calibrate.ood_report import ood_section

TEMPLATES = [
    "Was {} {} German or American? Reply with one word.",
    "Is {} {} in Azerbaijan or in Ukraine? Reply with the country only.",
    "Which name fills the blank, {} or {}? Reply with the name only.",
]
SEEN = [f"alpha{i}" for i in range(10)]  # the in-distribution topic's names
UNSEEN = [f"omega{i}" for i in range(60)]  # the held-out topic's


class WordEmbedder:
    """A deterministic stand-in for the run's embedder: the normalised sum of a fixed random vector per word."""

    fingerprint = "word-vectors"

    def encode(self, texts):
        rows = []
        for text in texts:
            vector = np.zeros(48)
            for word in text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split():
                seed = int(hashlib.sha256(word.encode()).hexdigest()[:8], 16)
                vector += np.random.default_rng(seed).normal(size=48)
            rows.append(vector / np.linalg.norm(vector))
        return np.asarray(rows, dtype=np.float32)


def _questions(n: int, seed: int, names: list[str]) -> list[str]:
    rng = np.random.default_rng(seed)
    return [TEMPLATES[i % 3].format(*rng.choice(names, 2, replace=False)) for i in range(n)]


def _rows(questions: list[str], seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i, question in enumerate(questions):
        good = rng.normal()
        correct = float(rng.random() < 1 / (1 + np.exp(-2.5 * good)))
        rows.append(
            {
                "position": i,
                "id": f"s{seed}-{i}",
                "question": question,
                "good": float(good),
                "noise": float(rng.normal()),
                "correct_contains": correct,
                "rag_contains": float(correct or rng.random() < 0.5),
            }
        )
    return rows


def _calibrate(tmp: Path, sizes: dict[str, int], collected: dict[str, int], **settings) -> tuple[Path, dict]:
    """Run the calibrate stage on build_data splits of ``sizes`` questions (``ood`` about the unseen topic), the first
    ``collected`` of each collected with synthetic features, under calibrate ``settings``."""
    import datasets

    from workbench.data.dataset_store import save_dataset_dict
    from workbench.data.schema import rows_to_dataset, validate_qa_row

    questions = {s: _questions(n, seed, UNSEEN if s == "ood" else SEEN) for seed, (s, n) in enumerate(sizes.items())}
    qa = {
        split: rows_to_dataset(
            [validate_qa_row({"id": f"{split}{i}", "question": q, "answers": ["x"]}, split) for i, q in enumerate(qs)],
            split,
        )
        for split, qs in questions.items()
    }
    save_dataset_dict(datasets.DatasetDict(qa), tmp / "build_data" / "qa")
    collect = tmp / "collect"
    for seed, (split, n) in enumerate(collected.items()):  # the first questions of each split, as collect takes them
        datasets.Dataset.from_list(_rows(questions[split][:n], seed)).save_to_disk(str(collect / split))
    summary = {"features": ["good", "noise"], "splits": dict.fromkeys(collected)}
    (collect / "summary.json").write_text(json.dumps(summary))
    config = RecipeConfig(name="t", stages=["build_data"])
    config.calibrate.label = "correct_contains"
    for key, value in settings.items():
        setattr(config.calibrate, key, value)
    out = tmp / "calibrate"
    out.mkdir()
    ctx = SimpleNamespace(
        config=config,
        inputs={"collect": collect, "build_data": tmp / "build_data"},
        out_dir=out,
        log=logging.getLogger("test"),
        resources=SimpleNamespace(embedder=WordEmbedder),
    )
    return out, calibrate.run(ctx)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[Path, dict]:
    sizes = {"calib": 200, "val": 200, "test": 200, "ood": 100}
    collected = {"calib": 120, "test": 60, "ood": 60}
    return _calibrate(tmp_path_factory.mktemp("calib-ood"), sizes, collected, ood_neighbours=5)


def test_calibrate_fits_the_flag_on_the_fit_split_and_sets_its_threshold_on_val(calibrated):
    from workbench.methods.learned import load_learned

    out, summary = calibrated
    profile = load_learned(out / "ood.json", expect={"ood_profile"})
    assert (out / "ood.safetensors").is_file() and profile.rows == 200  # every calib question, not the 120 collected
    assert profile.embedding.embedder == "word-vectors" and profile.embedding.neighbours == 5
    assert profile.calibration["split"] == "val" and profile.calibration["questions"] == 200
    assert profile.calibration["target_fpr"] == 0.05 and profile.calibration["flag_rate"] <= 0.05
    assert set(profile.shapes) == {"aux|options", "wh|options"}
    assert summary["ood"] == profile.describe() == json.loads((out / "summary.json").read_text())["ood"]


def test_calibrate_measures_the_false_positive_and_detection_rates(calibrated):
    out, _ = calibrated
    rates = json.loads((out / "ood_rates.json").read_text())
    # the threshold split, and the collected splits but the fit split
    assert {s: rates[s]["role"] for s in rates} == {"val": "threshold", "test": "in_distribution", "ood": "shift"}
    assert rates["test"]["questions"] == 200 and rates["ood"]["questions"] == 100  # all of each split, not collected
    assert rates["test"]["rate"] <= 0.12 and rates["ood"]["rate"] >= 0.8
    assert rates["ood"]["checks"]["question_embedding"] == rates["ood"]["flagged"]
    low, high = rates["ood"]["interval"]
    assert low < rates["ood"]["rate"] < high and rates["ood"]["level"] == 0.9
    # the detector on the uncertainty features, measured on each collected split's rows beside the flag
    assert rates["test"]["features"]["questions"] == 60 and rates["ood"]["features"]["questions"] == 60
    assert "features" not in rates["val"] and (out / "ood_features.json").is_file()
    checks = json.loads((out / "ood_checks.json").read_text())
    data = json.loads((out / "calibrated.json").read_text())
    assert all(checks[s]["id"] == data[s]["id"] for s in ("calib", "test", "ood"))
    assert np.mean([bool(c) for c in checks["ood"]["checks"]]) >= 0.8


def test_the_held_out_topics_are_measured_even_when_not_collected(tmp_path):
    # the quickstart collects calib and test only: the flag reads questions alone, so build_data's ood split still
    # gets its detection rate (and no features-only rate: nothing was collected there)
    sizes = {"calib": 200, "val": 200, "test": 200, "ood": 100}
    out, _ = _calibrate(tmp_path, sizes, {"calib": 120, "test": 60}, ood_neighbours=5)
    rates = json.loads((out / "ood_rates.json").read_text())
    assert {s: rates[s]["role"] for s in rates} == {"val": "threshold", "test": "in_distribution", "ood": "shift"}
    assert rates["ood"]["questions"] == 100 and rates["ood"]["rate"] >= 0.8 and "features" not in rates["ood"]
    assert "features" in rates["test"]


def test_the_report_section_gives_both_rates_with_intervals(calibrated):
    out, _ = calibrated
    text = "\n".join(ood_section(out))
    assert text.startswith("## Out of distribution") and "fitted on `calib`" in text
    assert "**5 % false positives** on 200 questions of `val`" in text
    assert "| test | false-positive rate (held out, in distribution) |" in text
    assert "| ood | detection rate (held-out topics): detected beyond chance |" in text
    assert "[90 % Wilson]" in text and "| ood | good |" in text
    assert "the same detector on the collected uncertainty features" in text and "`ood` " in text
    assert text.index("| val |") < text.index("| test |") < text.index("| ood | detection")
    assert ood_section(None) == [] and ood_section(out.parent / "nowhere") == []


def test_export_names_the_profile_in_the_decision_block(calibrated, tmp_path):
    from workbench.bundle.export import _write_ood
    from workbench.methods.learned import LearnedParts, load_learned

    out, _ = calibrated
    decision: dict = {"files": {"calibrators": "learned/calibrators.json"}}
    (tmp_path / "learned").mkdir()
    _write_ood(LearnedParts(), tmp_path, decision)  # a run made before the profile: nothing written
    assert "ood" not in decision["files"] and not (tmp_path / "learned" / "ood.json").exists()
    profile = load_learned(out / "ood.json", expect={"ood_profile"})
    _write_ood(LearnedParts(ood=profile), tmp_path, decision)
    assert decision["files"]["ood"] == "learned/ood.json"
    for name in ("ood.json", "ood.safetensors"):
        assert (tmp_path / "learned" / name).read_bytes() == (out / name).read_bytes()


def test_too_few_threshold_questions_name_the_split_and_too_few_fit_rows_skip_the_feature_detector(tmp_path):
    from workbench.core.errors import DataError

    sizes = {"calib": 60, "val": 12, "test": 30}
    with pytest.raises(DataError) as info:
        _calibrate(tmp_path / "a", sizes, {"calib": 40, "test": 20}, ood_neighbours=5)
    message = str(info.value)
    assert message.startswith("calibrate.ood_split: 12 in-distribution questions cannot set a threshold")
    assert "at least 19 are needed" in message and "null cross-fits the fit split" in message
    with pytest.raises(DataError, match=r"calibrate\.ood_neighbours: must be below the 60 questions"):
        _calibrate(tmp_path / "b", sizes, {"calib": 40, "test": 20}, ood_neighbours=60)
    # cross-fitted on the 60 calib questions; only 16 collected fit rows: no features-only detector (measured only)
    out, _ = _calibrate(tmp_path / "c", sizes, {"calib": 16, "test": 20}, ood_neighbours=5, ood_split=None)
    rates = json.loads((out / "ood_rates.json").read_text())
    assert set(rates) == {"test"} and "features" not in rates["test"] and not (out / "ood_features.json").exists()
    assert json.loads((out / "ood.json").read_text())["calibration"]["split"] is None


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["calibrate.ood_split=calib"], "calibrate.ood_split", "also calibrate.fit_split"),
        (["calibrate.ood_split=test"], "calibrate.ood_split", "also evaluate.split"),
        (["calibrate.ood_split=ood"], "calibrate.ood_split", "held-out topics"),
        (["calibrate.ood_fpr=1.5"], "calibrate.ood_fpr", "(0, 1)"),
        (["calibrate.ood_neighbours=50", "calibrate.ood_limit=50"], "calibrate.ood_neighbours", "below"),
        (["calibrate.ood_fpr=0.01", "calibrate.ood_limit=50"], "calibrate.ood_limit", "(needs 99)"),
        (
            ["stages=[build_data,collect,calibrate,classify]", "data.fractions=[0.6,0.2,0.0,0.2]"],
            "calibrate.ood_split",
            "gets no questions (data.fractions gives it 0); null cross-fits the fit split instead",
        ),
    ],
)
def test_a_threshold_split_that_would_leak_is_refused_at_load(overrides, key, words):
    with pytest.raises(ConfigError) as info:
        load_recipe("quickstart", overrides)
    message = str(info.value)
    assert key in message and words in message and "\n" not in message


def test_the_default_and_a_cross_fitted_threshold_load():
    assert load_recipe("quickstart").config.calibrate.ood_split == "val"
    assert load_recipe("quickstart", ["calibrate.ood_split=null"]).config.calibrate.ood_split is None
    stages = "stages=[build_data,collect,calibrate,classify]"
    crossed = load_recipe("quickstart", [stages, "data.fractions=[0.6,0.2,0.0,0.2]", "calibrate.ood_split=null"])
    assert crossed.config.calibrate.ood_split is None


def test_the_fit_splits_rows_are_checked_leave_one_out_as_new_questions_of_its_distribution(calibrated):
    # export's drift reference of the flag is these checks: in-sample, each fit question meets itself at distance 0
    # and is flagged less often than in-distribution traffic is, which made the window's ood series alarm on traffic
    from workbench.methods.learned import load_learned

    out, _ = calibrated
    profile = load_learned(out / "ood.json", expect={"ood_profile"})
    checks = json.loads((out / "ood_checks.json").read_text())
    data = json.loads((out / "calibrated.json").read_text())
    questions = _questions(200, 0, SEEN)[:120]  # calib's collected rows are its first 120 questions, in order
    assert [r["question"] for r in _rows(questions, 0)] == questions and len(checks["calib"]["id"]) == 120
    embed = WordEmbedder().encode
    crossed = [r.checks for r in profile.check_questions(questions, embed, own=range(120))]
    in_sample = [r.checks for r in profile.check_questions(questions, embed)]
    assert checks["calib"]["checks"] == crossed != in_sample
    rate = np.mean([bool(c) for c in crossed])
    assert sum(map(bool, in_sample)) < sum(map(bool, crossed)) and 0.0 < rate <= 0.12
    assert len(data["calib"]["id"]) == 120  # every collected calib row was kept, so the row order is the questions'
    # the drift reference: every one of the 200 fit questions the profile holds, each checked leave-one-out
    fit = _questions(200, 0, SEEN)
    whole = json.loads((out / "ood_reference.json").read_text())
    every = [r.checks for r in profile.check_questions(fit, embed, own=range(200))]
    assert whole["split"] == "calib" and whole["questions"] == 200 and whole["flagged"] == sum(map(bool, every))
    assert whole["flagged"] > sum(r.ood for r in profile.check_questions(fit, embed))
