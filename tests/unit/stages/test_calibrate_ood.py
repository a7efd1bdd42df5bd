"""The calibrate stage fits the OOD profile on its fit split (ood.json, each row's checks, a summary line), the report's
"Out of distribution" section measures it, and the export writes it into the bundle's decision block."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.recipe import RecipeConfig
from workbench.reports.ood import ood_section
from workbench.stages import calibrate

EITHER_OR = [
    "Was {} German or American? Reply with one word.",
    "Is {} in Azerbaijan or in Ukraine? Reply with the country only.",
    "Which name fills the blank, {} or Sailing? Reply with the name only.",
]
OPEN = ["Who has the most catches in {} history?", "What is the capital of {}?"]


def _rows(n: int, seed: int, templates: list[str], shift: float = 0.0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        good = rng.normal() + shift
        correct = float(rng.random() < 1 / (1 + np.exp(-2.5 * good)))
        rows.append(
            {
                "position": i,
                "id": f"s{seed}-{i}",
                "question": templates[i % len(templates)].format(f"Name{i}"),
                "greedy_answer": "German" if i % 7 else "Ukraine",
                "good": float(good),
                "noise": float(rng.normal()),
                "correct_contains": correct,
                "rag_contains": float(correct or rng.random() < 0.5),
            }
        )
    return rows


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[Path, dict]:
    import datasets

    tmp = tmp_path_factory.mktemp("calib-ood")
    collect = tmp / "collect"
    splits = {
        "calib": _rows(120, 0, EITHER_OR),
        "test": _rows(60, 1, EITHER_OR),
        "ood": _rows(60, 2, OPEN, shift=8.0),  # open questions whose confidence is far off the fit range
    }
    for split, rows in splits.items():
        datasets.Dataset.from_list(rows).save_to_disk(str(collect / split))
    (collect / "summary.json").write_text(json.dumps({"features": ["good", "noise"], "splits": dict.fromkeys(splits)}))
    config = RecipeConfig(name="t", stages=["build_data"])
    config.calibrate.label = "correct_contains"
    out = tmp / "calibrate"
    out.mkdir()
    ctx = SimpleNamespace(config=config, inputs={"collect": collect}, out_dir=out, log=logging.getLogger("test"))
    return out, calibrate.run(ctx)


def test_calibrate_writes_the_profile_and_each_rows_checks(calibrated):
    from workbench.methods.learned import load_learned

    out, summary = calibrated
    profile = load_learned(out / "ood.json", expect={"ood_profile"})
    assert set(profile.features) == {"good", "noise"} and profile.rows == 120
    assert set(profile.shapes) == {"aux|options", "wh|options"} and profile.answer_words is not None
    assert summary["ood"] == profile.describe() == json.loads((out / "summary.json").read_text())["ood"]
    checks = json.loads((out / "ood_checks.json").read_text())
    data = json.loads((out / "calibrated.json").read_text())
    assert all(checks[s]["id"] == data[s]["id"] for s in ("calib", "test", "ood"))
    flagged = {s: np.mean([bool(c) for c in checks[s]["checks"]]) for s in checks}
    assert flagged["test"] <= 0.1 and flagged["ood"] == 1.0
    assert all("question_form" in c and "feature:good" in c for c in checks["ood"]["checks"])


def test_the_report_section_gives_flag_rates_and_metrics_on_unflagged_rows(calibrated):
    out, _ = calibrated
    text = "\n".join(ood_section(out))
    assert text.startswith("## Out of distribution") and "fitted on `calib`" in text
    assert "**ood**: 60 of 60 questions flagged (100.0 %)" in text and "`question_form` 60" in text
    assert "**test**:" in text and "| good |" in text and "(the fit split itself: in-sample)" in text
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
    assert (tmp_path / "learned" / "ood.json").read_bytes() == (out / "ood.json").read_bytes()
