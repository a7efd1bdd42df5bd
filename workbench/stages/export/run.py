"""Stage ``export``: the run's decision logic as a versioned bundle (:func:`workbench.bundle.export.export_run`).

Not cached (its output lives outside the run directory); exporting an unchanged run rewrites identical bytes under
the same version. ``bundle.json`` in the stage directory records where the bundle went, for the report.
"""

from __future__ import annotations

from typing import Any

from workbench.bundle.export import export_run
from workbench.core.atomic import atomic_write_json
from workbench.stages.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    """Export the run (the stages before this one) to ``export.dir``; return name, version and path."""

    section = ctx.config.export
    result = export_run(
        ctx.run_dir,
        name=section.name.format(name=ctx.config.name),
        version=section.version,
        root=section.dir,
        methods=section.methods,
        archive=section.archive,
    )
    record = {
        "name": result.name,
        "version": result.version,
        "path": str(result.path),
        "archive": str(result.archive) if result.archive else None,
        "unchanged": result.unchanged,
        "methods": list(result.manifest["methods"]),
        "notes": result.manifest.get("notes", []),
    }
    atomic_write_json(ctx.out_dir / "bundle.json", record)
    state = "unchanged" if result.unchanged else "written"
    ctx.log.info("bundle %s %s %s → %s", result.name, result.version, state, result.path)
    return {"bundle": f"{result.name} {result.version}", "path": str(result.path), "unchanged": result.unchanged}
