"""Each stage's report section lives in its package (``report.py``, named by its spec's ``report``), and the ``report``
stage composes the sections by walking the stage table: a stage the report reads without a section, a section
outside its stage's package, or a section the report leaves out or misplaces fails here."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from workbench.reports.section import Section, SectionInput
from workbench.stages.registry import STAGES
from workbench.stages.report.run import stage_sections

SHOWN = STAGES["report"].optional_inputs
seen: dict[str, SectionInput] = {}  # what each marking section writer was given, by stage


def test_every_stage_the_report_reads_has_a_section_in_its_own_package():
    assert len(SHOWN) == 14
    for name in SHOWN:
        spec = STAGES[name]
        writer = spec.load_report()
        assert callable(writer), name
        package = spec.entry_module.rpartition(".")[0]
        assert writer.__module__ == f"{package}.report", name


def test_a_stage_without_a_section_has_none():
    assert STAGES["build_data"].report is None and STAGES["build_data"].load_report() is None


def _marking(name: str):
    """A section writer that records what it was given and returns one line naming its stage (the answer stage's also
    gives a setup line)."""

    def writer(view: SectionInput) -> Section:
        seen[name] = view
        return Section([f"section of {name}"], [f"- setup of {name}"] if name == "answer" else [])

    return writer


def test_the_report_places_each_run_stage_section_in_its_order(monkeypatch, tmp_path):
    for name in SHOWN:
        monkeypatch.setitem(STAGES, name, dataclasses.replace(STAGES[name], report=_marking(name)))
    seen.clear()
    # the run has every stage the report reads but transfer and study, listed in another order
    ran = [name for name in reversed(SHOWN) if name not in ("transfer", "study")]
    inputs = {name: tmp_path / name for name in ran}
    config = SimpleNamespace(name="toy")
    ctx = SimpleNamespace(spec=STAGES["report"], inputs=inputs, config=config)

    sections = stage_sections(ctx, tmp_path / "out")

    order = [name for name in SHOWN if name in inputs]
    assert [line for section in sections for line in section.lines] == [f"section of {name}" for name in order]
    assert [line for section in sections for line in section.setup] == ["- setup of answer"]
    assert set(seen) == set(inputs)
    view = seen["classify"]
    assert view.stage_dir == tmp_path / "classify" and view.out_dir == tmp_path / "out" and view.config is config
    assert view.stage_output("export") == tmp_path / "export" and view.stage_output("transfer") is None


def test_the_ood_check_closes_calibration_and_routing(monkeypatch, tmp_path):
    """The calibrate stage's out-of-distribution check follows the routing when the run routes, else calibration."""
    from workbench.stages.calibrate import report as calibrate_report
    from workbench.stages.classify import report as classify_report

    monkeypatch.setattr(calibrate_report, "calibration_lines", lambda stage_dir, out: (["calibration"], "test"))
    monkeypatch.setattr(calibrate_report, "ood_section", lambda stage_dir: [f"ood of {stage_dir.name}"])
    monkeypatch.setattr(classify_report, "ood_section", lambda stage_dir: [f"ood of {stage_dir.name}"])
    monkeypatch.setattr(classify_report, "routing_lines", lambda stage_dir, out: ["routing"])
    monkeypatch.setattr(classify_report, "shipped_lines", lambda export, config, get, out: [f"shipped {export}"])
    both = {"calibrate": tmp_path / "calibrate", "classify": tmp_path / "classify"}
    alone = {"calibrate": tmp_path / "calibrate"}

    def lines(inputs: dict[str, Path]) -> list[str]:
        ctx = SimpleNamespace(spec=STAGES["report"], inputs=inputs, config=None)
        return [line for section in stage_sections(ctx, tmp_path) for line in section.lines]

    assert lines(both) == ["calibration", "routing", "shipped None", "ood of calibrate"]
    assert lines(alone) == ["calibration", "ood of calibrate"]


def test_the_stage_table_imports_no_section_writer():
    code = (
        "import sys; import workbench.stages.registry;"
        "print(sorted(m for m in sys.modules if m.endswith('.report') and m != 'workbench.stages.report'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
