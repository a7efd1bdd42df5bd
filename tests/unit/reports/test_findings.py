"""The run's findings: a few lines at the end of every run and at the top of its report, from whichever stages ran
(never a crash for a stage that did not run or outputs that cannot be read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.reports.test_features import write_collect
from workbench.reports.findings import (
    answer_line,
    decision_lines,
    end_of_run_lines,
    feature_line,
    findings_section,
    run_findings,
)

HELPDESK = {  # the help-desk case: company questions need retrieval, general ones are hurt by it
    "split": "test",
    "n_questions": 19,
    "modes": {"closed_book": {"contains": 6 / 19}, "rag": {"contains": 14 / 19}},
    "by_template": {
        "closed_book": {"company": {"n": 10, "contains": 0.0}, "general": {"n": 9, "contains": 6 / 9}},
        "rag": {"company": {"n": 10, "contains": 0.9}, "general": {"n": 9, "contains": 5 / 9}},
    },
}


def _write_answer(folder: Path, summary: dict = HELPDESK) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _dirs(**dirs: Path):
    return lambda name: dirs.get(name)


def test_the_answer_line_says_where_retrieval_helps_and_where_it_hurts(tmp_path):
    assert answer_line(_write_answer(tmp_path)) == (
        "Answers (test, 19 questions): closed-book 0.316 → RAG 0.737 containment; retrieval helps company most "
        "(0.00 → 0.90) and hurts general (0.67 → 0.56)."
    )
    helps_everywhere = json.loads(json.dumps(HELPDESK))
    helps_everywhere["by_template"]["rag"]["general"]["contains"] = 1.0
    line = answer_line(_write_answer(tmp_path / "b", helps_everywhere))
    assert line.endswith("retrieval helps company most (0.00 → 0.90).") and "hurts" not in line
    closed_only = {**HELPDESK, "modes": {"closed_book": {"contains": 0.5}}}
    assert answer_line(_write_answer(tmp_path / "c", closed_only)) is None


@pytest.mark.parametrize(("positives", "interval"), [(20, True), (2, False)])
def test_the_best_feature_comes_with_its_interval_when_the_split_allows_one(tmp_path, positives, interval):
    write_collect(tmp_path, positives)
    line = feature_line(tmp_path, "test")
    assert line.startswith("Best feature: good, AUROC ") and "on test" in line and line.endswith("; 40 questions).")
    if interval:
        low, high = (float(v) for v in line.split("90% interval ")[1].split(";")[0].split(" – "))
        assert 0.0 <= low <= high <= 1.0
    else:
        assert "too few correct or wrong answers for an interval" in line


def _manifest(tmp_path: Path, *, tau_record: dict | None) -> Path:
    """An exported run: ``export/bundle.json`` naming a bundle whose manifest records the decision."""
    bundle = tmp_path / "bundles" / "helpdesk" / "1.0.0"
    bundle.mkdir(parents=True)
    routing_rows = [
        {"router": "No-RAG", "retrieval_rate": 0.0, "contains": 0.556},
        {"router": "Always-RAG", "retrieval_rate": 1.0, "contains": 0.722},
        {"router": "Oracle", "retrieval_rate": 0.4, "contains": 0.9},
        {"router": "Router", "retrieval_rate": 0.5, "contains": 0.778, "tokens": 150.0},
    ]
    fitted = {"decision.tau": tau_record} if tau_record else {}
    manifest = {
        "decision": {
            "features": ["entropy"],
            "classifier": "logistic",
            "calibrator": "platt",
            "tau": 0.55,
            "rule": "router pick (max_quality_under retrieval rate 0.6)",
        },
        "methods": {"d2rag": {"options": {"alpha_pos": 0.5, "alpha_neg": 0.5}}},
        "metrics": {"routing": {"split": "test", "chosen": "Router", "shipped_by": "classify", "rows": routing_rows}},
        "provenance": {"fitted": fitted, "held_out": {"decision": {"split": "test", "questions": 18}}},
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    export = tmp_path / "export"
    export.mkdir()
    (export / "bundle.json").write_text(json.dumps({"path": str(bundle)}))
    return export


def test_an_exported_run_reports_the_bundle_s_decision_and_its_held_out_figures(tmp_path):
    export = _manifest(tmp_path, tau_record={"set_by": "classify", "split": "calib", "questions": 30})
    ships, held = decision_lines(None, _dirs(export=export, classify=tmp_path))
    assert ships == (
        "Ships: D²-RAG router LR(entropy; platt); τ = 0.550, set by classify on calib, 30 questions; "
        "pick rule: router pick (max_quality_under retrieval rate 0.6)."
    )
    assert held == (
        "Held out (test, 18 questions): retrieval rate 0.50; routed containment 0.778 vs Always-RAG 0.722 and "
        "No-RAG 0.556."
    )


def test_a_tau_moved_after_classify_measured_gets_no_held_out_figure(tmp_path):
    export = _manifest(tmp_path, tau_record={"set_by": "study", "split": "val", "questions": 6})
    manifest_path = tmp_path / "bundles" / "helpdesk" / "1.0.0" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["metrics"]["routing"]["shipped_by"]  # a bundle from before the record: its row is classify's τ
    manifest.pop("provenance")
    manifest["decision"]["rule"] = "study"
    manifest_path.write_text(json.dumps(manifest))
    ships, held = decision_lines(None, _dirs(export=export, classify=tmp_path))
    assert "τ = 0.550, set by study" in ships
    assert held == "Held out (test): no figure at the shipped τ (the study set it after classify measured the routing)."


@pytest.fixture(scope="module")
def classified(tmp_path_factory):
    """Real calibrate and classify outputs on a synthetic collection (no model), as the calibrate tests make them."""
    from tests.unit.core.test_calibrate_classify import _collection, _ctx, _rows
    from workbench.stages.calibrate import run as calibrate
    from workbench.stages.classify import run as classify

    tmp = tmp_path_factory.mktemp("findings")
    collect_dir = _collection(tmp, _rows(160, 0), _rows(100, 1))
    cal = _ctx(tmp, "calibrate", {"collect": collect_dir})
    calibrate.run(cal)
    settings = {"kinds": ["logistic"], "seeds": [0], "router_search": "none"}  # no MLP to train: a second
    cls = _ctx(tmp, "classify", {"calibrate": cal.out_dir}, classify=settings)
    classify.run(cls)
    return cls.config, cal.out_dir, cls.out_dir


def test_a_run_without_export_reports_classify_s_pick_and_its_routing_row(classified):
    config, cal_dir, cls_dir = classified
    ships, held = decision_lines(config, _dirs(calibrate=cal_dir, classify=cls_dir))
    selection = json.loads((cls_dir / "selection.json").read_text())
    kind = {"logistic": "LR", "mlp": "MLP"}[selection["chosen"]]
    assert ships.startswith(f"Ships: D²-RAG router {kind}(good + noise; ") and "set by classify" in ships
    rows = {r["router"]: r for r in json.loads((cls_dir / "routing.json").read_text())["rows"]}
    assert held == (
        f"Held out (test): retrieval rate {rows[kind]['retrieval_rate']:.2f}; routed containment "
        f"{rows[kind]['contains']:.3f} vs Always-RAG {rows['Always-RAG']['contains']:.3f} and No-RAG "
        f"{rows['No-RAG']['contains']:.3f}."
    )


def test_findings_say_less_for_stages_that_did_not_run_or_cannot_be_read(classified, tmp_path, caplog):
    config, cal_dir, cls_dir = classified
    answer = _write_answer(tmp_path / "answer")
    collect_dir = _made(tmp_path / "collect")
    write_collect(collect_dir, 20)
    everything = run_findings(config, _dirs(answer=answer, collect=collect_dir, calibrate=cal_dir, classify=cls_dir))
    assert [line.split(" ")[0] for line in everything] == ["Answers", "Best", "Ships:", "Held"]
    assert run_findings(config, _dirs(answer=answer)) == [answer_line(answer)]
    assert run_findings(config, _dirs()) == []
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text("{not json")
    (broken / "routing.json").write_text("[]")
    caplog.set_level("DEBUG", logger="workbench.reports.findings")
    assert run_findings(config, _dirs(answer=broken, collect=broken, classify=broken, calibrate=broken)) == []
    assert any("no finding from answer" in r.getMessage() for r in caplog.records)


def test_the_report_s_top_and_the_run_s_end_carry_the_same_lines(tmp_path):
    assert findings_section([]) == []
    assert findings_section(["a.", "b."]) == ["## Findings", "", "- a.", "- b.", ""]

    class Config:
        stages = ("answer", "collect")

    run_dir = tmp_path / "run"
    answer = _write_answer(run_dir / "stages" / "answer")
    (answer / "_stage.json").write_text("{}")
    write_collect(_made(run_dir / "stages" / "collect"), 20)  # no _stage.json: an unfinished stage says nothing
    assert end_of_run_lines(Config, run_dir, "reports/helpdesk/report.md") == [
        answer_line(answer),
        "Report: reports/helpdesk/report.md",
    ]
    assert end_of_run_lines(Config, run_dir, None) == [answer_line(answer)]


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True)
    return folder


# ---- the runner and the CLI ---------------------------------------------------------------------------------------

MODULE = "tests.unit.reports.test_findings"


def fake_answer(ctx):
    (ctx.out_dir / "summary.json").write_text(json.dumps(HELPDESK))
    return {"n_questions": 19}


def fake_report(ctx):
    return {"report": str(ctx.run_dir / "report.md")}


@pytest.fixture
def fake_run(tmp_path, monkeypatch):
    """A recipe of a fake ``answer`` stage (the help-desk summary) and a fake ``report`` stage."""
    from workbench.stages import registry
    from workbench.stages.registry import StageSpec

    monkeypatch.setitem(registry.STAGES, "answer", StageSpec("answer", "a", f"{MODULE}:fake_answer"))
    monkeypatch.setitem(registry.STAGES, "report", StageSpec("report", "r", f"{MODULE}:fake_report", cacheable=False))
    path = tmp_path / "r.yaml"
    path.write_text(f"name: helpdesk\nstages: [answer, report]\ntracker: none\nrun_dir: {tmp_path}/run\n")
    return path


def test_a_run_ends_with_its_findings_in_the_log_file_and_the_result(fake_run, tmp_path, capsys):
    from workbench.recipe import load_recipe
    from workbench.stages.runner import run_recipe

    result = run_recipe(load_recipe(str(fake_run)))
    assert result.findings == [answer_line(tmp_path / "run" / "stages" / "answer"), f"Report: {tmp_path}/run/report.md"]
    log = (tmp_path / "run" / "logs" / "run.log").read_text()
    assert log.rstrip().splitlines()[-1].endswith(f"finding: Report: {tmp_path}/run/report.md")
    assert "finding: Answers (test, 19 questions)" in log
    assert "finding:" not in capsys.readouterr().out  # the console gets them from the CLI, after its table


def test_the_run_command_prints_the_findings_last(fake_run, tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    done = CliRunner().invoke(app, ["run", str(fake_run)])
    assert done.exit_code == 0, done.output
    tail = done.output.rstrip().splitlines()[-3:]
    assert tail == [
        "findings:",
        f"  {answer_line(tmp_path / 'run' / 'stages' / 'answer')}",
        f"  Report: {tmp_path}/run/report.md",
    ]
    assert done.output.index("run 'helpdesk' done") < done.output.index("findings:")
