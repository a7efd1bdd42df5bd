"""The bundle section of the run report: where the exported bundle went and how to use it (from the ``export``
stage's ``bundle.json``), its decision and what each of its parts was fitted on (from its ``manifest.json``, rendered
as its model card renders them)."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.bundle.shipped import decision_line, provenance_lines, shipped_decision
from workbench.reports.section import Section, SectionInput


def bundle_section(export_dir: Path) -> list[str]:
    """Where the run's bundle went and how to use it (the ``export`` stage's ``bundle.json``); its decision and
    provenance (its manifest)."""
    record = json.loads((export_dir / "bundle.json").read_text())
    state = "unchanged since the last export (identical files)" if record["unchanged"] else "written"
    lines = [
        "## Bundle",
        "",
        f"**{record['name']} {record['version']}** {state}: `{record['path']}`"
        + (f" and `{record['archive']}`" if record.get("archive") else "")
        + f"; methods {', '.join(f'`{m}`' for m in record['methods'])}. Its model card is `README.md` in that "
        "directory; `workbench bundles` lists every bundle.",
        "",
        "```bash",
        f'workbench infer --bundle {record["path"]} --method {record["methods"][0]} "Who painted the Mona Lisa?"',
        f"workbench serve --bundle {record['path']}",
        "```",
        "",
    ]
    lines += [f"- {note}" for note in record.get("notes", [])]
    lines = [*lines, ""] if record.get("notes") else lines
    manifest_path = Path(record["path"]) / "manifest.json"
    if not manifest_path.is_file():
        return lines
    manifest = json.loads(manifest_path.read_text())
    shipped = shipped_decision(manifest)
    if shipped is not None:
        lines += [f"Its decision (`manifest.json`, as its card shows it): {decision_line(shipped)}.", ""]
    return lines + provenance_lines(manifest)


def section(view: SectionInput) -> Section:
    """The ``export`` stage's section of the run's report (:func:`bundle_section`)."""
    return Section(bundle_section(view.stage_dir))
