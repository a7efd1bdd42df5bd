"""The distill_data stage's option handling (InSemRAG settings vs the teacher controller's options, refusals) and its
report section on a hand-made summary."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from workbench.core.errors import ConfigError
from workbench.stages.distill_data.run import insemrag_parts, validate_section


def test_insemrag_options_split_into_settings_and_controller_options():
    settings, options = insemrag_parts(
        {"k1": 8, "k": 2, "max_rounds": 1, "enrich_tokens": 16, "controller": "prompted"}
    )
    assert (settings.k1, settings.k, settings.max_rounds) == (8, 2, 1)
    assert options["enrich_tokens"] == 16 and "k1" not in options
    if hasattr(settings, "keep_threshold"):  # the teacher filters at InSemRAG's own threshold
        assert options["keep_threshold"] == settings.keep_threshold


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"bogus": 1}, "distill_data.insemrag"),
        ({"k": 20, "k1": 4}, "distill_data.insemrag"),
        ({"controller": "heuristic"}, "distill_data.insemrag.controller"),
        ({"enrich_tokens": 0}, "distill_data.insemrag"),
        ([1, 2], "distill_data.insemrag"),
    ],
)
def test_bad_insemrag_options_name_the_key(options, where):
    with pytest.raises(ConfigError) as info:
        insemrag_parts(options)
    assert info.value.where == where


def section(**changes):
    base = dict(split="train", heldout_split="val", sources=["teacher", "gold"], teacher=None, insemrag={})
    return SimpleNamespace(**{**base, **changes})


def test_section_checks():
    validate_section(section())
    validate_section(section(sources=["gold"], teacher="smollm2"))
    for changes, where in (
        ({"sources": []}, "distill_data.sources"),
        ({"sources": ["teacher", "teacher"]}, "distill_data.sources"),
        ({"heldout_split": "train"}, "distill_data.heldout_split"),
        ({"teacher": " "}, "distill_data.teacher"),
        ({"insemrag": {"chunking": "sentences"}}, "distill_data.insemrag"),
    ):
        with pytest.raises(ConfigError) as info:
            validate_section(section(**changes))
        assert info.value.where == where


def test_report_section_tables(tmp_path):
    from workbench.distill.traces import DECISIONS
    from workbench.stages.distill_data.report import distill_data_lines

    def split(name, replies, skipped):
        return {
            "from": name,
            "questions": 2,
            "rows": 9,
            "by_decision": {
                d: {"teacher": 2 if d == "refine" else 0, "gold": 3 if d == "refine" else 0} for d in DECISIONS
            },
            "labels": {
                "refine": {"teacher": {"No": 2}, "gold": {"No": 2, "Yes": 1}},
                "channel_weights": {"teacher": {"A": 3, "C": 1}},
            },
            "teacher_replies": {d: replies.get(d, 0) for d in DECISIONS},
            "skipped": {d: skipped.get(d, 0) for d in DECISIONS},
        }

    summary = {
        "sources": ["teacher", "gold"],
        "splits": {"train": split("train", {"refine": 2, "enrich": 4}, {"enrich": 3}), "heldout": split("val", {}, {})},
        "teacher": {"spec": "smollm2", "fingerprint": "abcdef0123456789", "score_mode": "logprobs"},
        "teacher_cost_per_question": {"refine": {"prompts": 1.0, "lm_calls": 1.0, "prompt_tokens": 300.0}},
        "seed": 0,
        "seconds": 12.0,
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    lines = distill_data_lines(tmp_path, tmp_path / "report")
    assert "| refine | 2 | 3 | 2 | 3 |" in lines and "| **total** | **2** | **3** | **2** | **3** |" in lines
    assert "| enrich | 4 | 3 | 75.0% |" in lines and "| **all** | **6** | **3** | **50.0%** |" in lines
    assert "| refine | gold | train | No 2 / Yes 1 | Yes 0.33 |" in lines
    assert "| refine | teacher | heldout | No 2 | Yes 0.00 |" in lines
    assert "| channel_weights | teacher | train | A 3 / C 1 | majority 0.75 |" in lines
    assert "| refine | 1.0 | 300 | – | – |" in lines
    assert any("Teacher: `smollm2`" in line for line in lines)
    assert (tmp_path / "report" / "distill_data_rows.png").is_file()
