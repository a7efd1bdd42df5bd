"""The recipe overrides every end-to-end test starts from: the model, the run and report directories under the
test's ``tmp_path``, no tracker, the torch thread count and how many questions the data keeps."""

from __future__ import annotations

from pathlib import Path


def run_overrides(
    tmp_path: Path, model: str | Path, *extra: str, per_template: int | None = None, threads: int = 0
) -> list[str]:
    """``generator.model=<model>``, ``run_dir=<tmp_path>/run``, ``report.dir=<tmp_path>/report``, ``tracker=none``,
    ``threads=<threads>`` (0: torch's default) and, unless None, ``data.max_per_template=<per_template>``; then
    ``extra`` in order."""
    overrides = [
        f"generator.model={model}",
        f"run_dir={tmp_path}/run",
        f"report.dir={tmp_path}/report",
        "tracker=none",
        f"threads={threads}",
    ]
    if per_template is not None:
        overrides.append(f"data.max_per_template={per_template}")
    return [*overrides, *extra]
