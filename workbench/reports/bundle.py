"""The bundle section of the run report: where the exported bundle went and how to use it (from the ``export``
stage's ``bundle.json``)."""

from __future__ import annotations

import json
from pathlib import Path


def bundle_section(export_dir: Path) -> list[str]:
    """Where the run's bundle went and how to use it (the ``export`` stage's ``bundle.json``)."""
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
    return [*lines, ""] if record.get("notes") else lines
