"""Stage ``report``: a Markdown report with PNG plots, written to ``report.dir`` (e.g. ``reports/quickstart/``).

It reads the outputs of the stages the run has (each stage's section is its spec's ``report``, in its package's
``report.py``) and the run's stage markers (for timing), so it is cheap and always re-run. The report directory is
replaced atomically.
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.core.errors import ConfigError
from workbench.reports.findings import findings_section, run_findings
from workbench.reports.section import Section, SectionInput
from workbench.reports.timing import stage_times, time_lines
from workbench.stages.context import StageContext
from workbench.stages.registry import STAGES


def stage_sections(ctx: StageContext, out_dir: Path) -> list[Section]:
    """The sections of the stages this report reads, in the order of its spec's ``optional_inputs``: each such stage
    of the run whose spec has a ``report`` (:attr:`workbench.stages.spec.StageSpec.report`), its plots drawn into
    ``out_dir``."""
    sections = []
    for name in ctx.spec.inputs_in(list(ctx.inputs)):
        writer = STAGES[name].load_report()
        if writer is not None:
            sections.append(writer(SectionInput(ctx.inputs[name], out_dir, ctx.config, ctx.inputs.get)))
    return sections


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and its plots to the report directory; return the report path and total seconds.

    The report opens with the run's findings (:mod:`workbench.reports.findings`: the lines the run ends with, less
    the report's path) and its setup (the ``answer`` stage's settings). The stages' sections follow
    (:func:`stage_sections`): answer quality (``answer``), feature AUROCs (``collect``), calibration (``calibrate``),
    routing and the shipped decision (``classify``), then the out-of-distribution check, calibration transfer
    (``transfer``), retrievers by ΔSePer (``seper_eval``), the utility predictor (``fit_utility``), the distillation
    data and student (``distill_data``, ``distill``), the reader adapter (``tune_reader``), the study (``study``),
    the methods side by side (``evaluate``) and the contrastive-decoding benchmark (``bench_decoding``), the exported
    bundle (``export``); then the time table.
    """
    config = ctx.config
    if not ctx.inputs:
        raise ConfigError("the report stage needs answer, collect, calibrate, classify or evaluate before it", "stages")
    report_dir = config.resolved_report_dir
    times = stage_times(ctx.run_dir, config.stages)
    pipeline_seconds = sum(seconds for _, seconds, *_ in times)
    invocation_seconds = time.perf_counter() - ctx.run_started

    with atomic_directory(report_dir) as tmp:
        sections = stage_sections(ctx, tmp)
        setup = [line for section in sections for line in section.setup]
        lines = [
            f"# {config.name} report",
            "",
            f"Regenerate with `{ctx.rerun}`; written {_dt.datetime.now():%Y-%m-%d %H:%M}.",
            "",
            *findings_section(run_findings(config, ctx.inputs.get)),
            *(["## Setup", ""] if setup else []),
            *setup,
            "",
            *(line for section in sections for line in section.lines),
            *time_lines(times, pipeline_seconds, invocation_seconds, config.report.budget_seconds),
        ]
        (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")
    ctx.log.info("report written to %s", report_dir / "report.md")
    return {"report": str(report_dir / "report.md"), "pipeline_seconds": round(pipeline_seconds, 1)}
