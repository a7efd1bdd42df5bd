"""docs/architecture.md's stage table is the stage table of the tree (:data:`workbench.stages.registry.STAGES`)."""

from __future__ import annotations

from pathlib import Path

from workbench.stages.registry import STAGES

DOC = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"


def _path(module: str) -> str:
    """``"workbench.stages.x"`` → ``"stages/x.py"`` (as the doc names modules)."""
    return module.removeprefix("workbench.").replace(".", "/") + ".py"


def doc_rows(text: str) -> list[tuple[str, str, str, str]]:
    """``(stage, module, settings, inputs)`` of each row between the doc's stage-table markers."""
    body = text.split("<!-- stage-table:start -->")[1].split("<!-- stage-table:end -->")[0]
    rows = []
    for line in body.strip().splitlines()[2:]:  # after the header and the rule
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        rows.append((cells[0], cells[1], cells[2], cells[3]))
    return rows


def expected_rows() -> list[tuple[str, str, str, str]]:
    """The rows the doc must hold, from :data:`STAGES` in its order."""
    return [
        (
            spec.name,
            _path(spec.entry_module),
            _path(spec.settings_module) if spec.settings_module else "—",
            ", ".join(spec.inputs) or "—",
        )
        for spec in STAGES.values()
    ]


def test_the_doc_lists_every_stage_with_its_module_settings_and_inputs():
    assert doc_rows(DOC.read_text(encoding="utf-8")) == expected_rows()


def test_a_drifted_row_is_caught():
    text = DOC.read_text(encoding="utf-8").replace("`stages/collect/run.py`", "`stages/gather.py`", 1)
    assert ("collect", "stages/gather.py") in [row[:2] for row in doc_rows(text)]
    assert doc_rows(text) != expected_rows()
