"""Report details from issue 29 items 5 and 7: methods_cost.png draws LM calls and seconds on two panels with their
own units, and the study report prints an absolute SQLite storage URL (a relative one fails outside the repo root)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest


def test_unit_panels_give_each_quantity_its_own_axis(tmp_path):
    from workbench.plots import unit_panels

    path = unit_panels(
        tmp_path / "cost.png",
        ["no_rag", "d2rag", "dtr"],
        {"LM calls per question": ([1.0, 2.5, None], "LM calls"), "p50 latency": ([0.2, 1.4, 3.0], "seconds")},
        title="Cost per question",
    )
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no panels"):
        unit_panels(tmp_path / "none.png", ["a"], {}, title="x")


def test_the_evaluate_report_draws_cost_as_two_unit_panels(tmp_path, monkeypatch):
    import workbench.plots as plots
    from workbench.stages.evaluate.report import evaluate_section

    drawn = {}
    monkeypatch.setattr(plots, "unit_panels", lambda path, groups, panels, **kw: drawn.update({path.name: panels}))
    monkeypatch.setattr(plots, "grouped_bars", lambda path, *a, **kw: path)
    row = {"em": 0.5, "f1": 0.5, "contains": 0.5, "lm_calls": 2.0, "latency_p50": 0.7}
    summary = {"questions": 4, "split": "test", "order": ["no_rag"], "methods": {"no_rag": row}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with contextlib.suppress(KeyError, TypeError):  # the rest needs a full summary; the plots are drawn first
        evaluate_section(tmp_path, tmp_path / "out")
    units = [unit for _, unit in drawn["methods_cost.png"].values()]
    assert units == ["LM calls", "seconds"]


def test_the_study_report_prints_an_absolute_sqlite_url(tmp_path, monkeypatch):
    import workbench.stages.study.report as report_study

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(report_study, "history_plot", lambda path, *a: path)
    summary = {
        "methods": {},
        "objective": "contains",
        "questions": {"val": 1, "test": 1},
        "split": "val",
        "test_split": "test",
        "multi_objective": False,
        "constraints": None,
        "storage": "sqlite:///artifacts/runs/q/studies/studies.db",
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    text = "\n".join(report_study.study_section(tmp_path, tmp_path / "out"))
    absolute = f"sqlite:///{Path(os.getcwd()).resolve() / 'artifacts/runs/q/studies/studies.db'}"
    assert f"`{absolute}`" in text and f"optuna-dashboard {absolute}" in text
    assert "sqlite:///artifacts" not in text
