"""fit_utility says why it drops pairs (issue 42): one log line with the count and each reason — a question that
retrieved no passage, a pair whose ΔSePer label is not finite — and the summary records both counts. The stage runs
for real (its loop, fit and writes) on hand-made retrieval results, labels and features."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from workbench.stages.fit_utility.run import dropped_line


class _Log:
    """Records what the stage logs (independent of how the workbench's loggers are configured)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args if args else message)

    def info(self, message: str, *args: object) -> None:
        pass

    debug = info


class _Passage:
    chunk_id = "doc#0"
    score = 1.0


def test_the_line_counts_each_reason_and_is_absent_when_nothing_is_dropped():
    assert dropped_line(20, 0, 0, "delta_seper_s") is None
    assert dropped_line(20, 2, 0, "delta_seper_s") == (
        "fit_utility: 2 of 20 question(s) dropped, 18 pair(s) kept: 2 question(s) retrieved no passage (no context "
        "to judge)"
    )
    line = dropped_line(20, 2, 3, "delta_seper_h")
    assert line.startswith("fit_utility: 5 of 20 question(s) dropped, 15 pair(s) kept: 2 question(s) retrieved")
    assert line.endswith(
        "; 3 pair(s) have a delta_seper_h that is not a finite number (a SePer term could not be computed)"
    )


def test_the_stage_logs_why_it_dropped_pairs(tmp_path, monkeypatch):
    import datasets

    from workbench.methods.seper.utility import UTILITY_FEATURES, UtilityInputs
    from workbench.stages.fit_utility import run as fit_utility
    from workbench.stages.fit_utility.settings import FitUtilitySection

    rows = [{"id": str(i), "question": f"question {i}", "answers": [f"answer {i}"]} for i in range(20)]
    empty, nan_label = {"question 0", "question 7"}, {"question 3"}
    rng = np.random.default_rng(0)
    split = datasets.Dataset.from_list(rows)
    monkeypatch.setattr("workbench.data.dataset_store.load_saved_dataset_dict", lambda path: {"calib": split})
    monkeypatch.setattr(datasets, "load_from_disk", lambda path: None)
    tools = SimpleNamespace(
        search=lambda questions, k: [[] if q in empty else [_Passage()] for q in questions],
        passage_chars=100,
        generator=None,
        judge=None,
    )
    # the stage binds these at its top: patch them there
    monkeypatch.setattr(fit_utility, "build_tools", lambda ctx, corpus, **kwargs: tools)
    monkeypatch.setattr(fit_utility, "context_block", lambda passages, chars: "[1] a passage")

    def labels(examples, contexts, **kwargs):
        out = []
        for example in examples:
            value = float("nan") if example["question"] in nan_label else float(rng.uniform(-0.5, 0.5))
            out.append({"delta_seper_s": value, "delta_seper_h": 0.0})
        return out

    def features(tools, questions, contexts, scores):
        n = len(questions)
        return UtilityInputs(rng.normal(size=(n, len(UTILITY_FEATURES))), ["a"] * n, ["b"] * n, [None] * n)

    monkeypatch.setattr(fit_utility, "delta_seper", labels)
    monkeypatch.setattr(fit_utility, "utility_inputs", features)
    section = FitUtilitySection(limit=20, folds=2, model="ridge", batch_questions=6)
    log = _Log()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    ctx = SimpleNamespace(
        config=SimpleNamespace(fit_utility=section, seed=0), inputs={"build_data": tmp_path}, out_dir=out_dir, log=log
    )

    fit_utility.run(ctx)

    assert log.warnings == [
        "fit_utility: 3 of 20 question(s) dropped, 17 pair(s) kept: 2 question(s) retrieved no passage (no context "
        "to judge); 1 pair(s) have a delta_seper_s that is not a finite number (a SePer term could not be computed)"
    ]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert (summary["pairs"], summary["usable"]) == (18, 17)
    assert (summary["skipped_no_passages"], summary["dropped_not_finite"]) == (2, 1)
