"""Stage ``report``: a Markdown report with PNG plots, written to ``report.dir`` (e.g. ``reports/quickstart/``).

It reads the ``answer`` stage's ``summary.json`` and ``examples.json`` and the run's stage markers (for timing), so
it is cheap and always re-run. The report directory is replaced atomically.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.reports.answer import answer_section
from workbench.reports.bundle import bundle_section
from workbench.reports.findings import findings_section, run_findings
from workbench.reports.timing import stage_times, time_lines
from workbench.stages.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and its plots to the report directory; return the report path and total seconds.

    The report opens with the run's findings (:mod:`workbench.reports.findings`: the lines the run ends with, less
    the report's path) and its setup. Sections follow the stages the run has: answer quality (``answer``), feature
    AUROCs (``collect``), calibration (``calibrate``), routing (``classify``), calibration transfer (``transfer``),
    retrievers by ΔSePer (``seper_eval``), the utility predictor (``fit_utility``), the methods side by side
    (``evaluate``) and the contrastive-decoding benchmark (``bench_decoding``), the exported bundle (``export``),
    then the time table.
    """
    from workbench.core.errors import ConfigError

    config = ctx.config
    if not ctx.inputs:
        raise ConfigError("the report stage needs answer, collect, calibrate, classify or evaluate before it", "stages")
    report_dir = config.resolved_report_dir
    times = stage_times(ctx.run_dir, config.stages)
    pipeline_seconds = sum(seconds for _, seconds, *_ in times)
    invocation_seconds = time.perf_counter() - ctx.run_started

    with atomic_directory(report_dir) as tmp:
        settings: list[str] = []
        body: list[str] = []
        if "answer" in ctx.inputs:
            settings, section = answer_section(ctx.inputs["answer"], tmp, config)
            body += section
        if "collect" in ctx.inputs:
            from workbench.reports.features import feature_section

            body += feature_section(ctx.inputs["collect"], tmp)
        if "calibrate" in ctx.inputs or "classify" in ctx.inputs:
            from workbench.reports.calibration import calibration_sections

            body += calibration_sections(ctx.inputs.get("calibrate"), ctx.inputs.get("classify"), tmp)
            if "classify" in ctx.inputs:  # the decision the run ships, as its bundle records it
                from workbench.reports.router import shipped_lines

                body += shipped_lines(ctx.inputs.get("export"), config, ctx.inputs.get, tmp)
            from workbench.reports.ood import ood_section

            body += ood_section(ctx.inputs.get("calibrate"))
        if "transfer" in ctx.inputs:
            from workbench.reports.transfer import transfer_section

            body += transfer_section(ctx.inputs["transfer"], tmp)
        if "seper_eval" in ctx.inputs:
            from workbench.reports.seper import seper_section

            body += seper_section(ctx.inputs["seper_eval"], tmp)
        if "fit_utility" in ctx.inputs:
            from workbench.reports.evaluate import utility_section

            body += utility_section(ctx.inputs["fit_utility"], tmp)
        if "distill_data" in ctx.inputs:
            from workbench.reports.distill import distill_data_lines

            body += distill_data_lines(ctx.inputs["distill_data"], tmp)
        if "distill" in ctx.inputs:
            from workbench.reports.distill import distill_lines

            body += distill_lines(ctx.inputs["distill"], tmp)
        if "tune_reader" in ctx.inputs:
            from workbench.reports.reader import reader_lines

            body += reader_lines(ctx.inputs["tune_reader"], tmp)
        if "study" in ctx.inputs:
            from workbench.reports.study import study_section

            body += study_section(ctx.inputs["study"], tmp)
        if "evaluate" in ctx.inputs:
            from workbench.reports.evaluate import evaluate_section

            body += evaluate_section(ctx.inputs["evaluate"], tmp)
        if "bench_decoding" in ctx.inputs:
            from workbench.bench.decoding.report import decoding_section

            body += decoding_section(ctx.inputs["bench_decoding"], tmp, config.name)
        if "export" in ctx.inputs:
            body += bundle_section(ctx.inputs["export"])
        lines = [
            f"# {config.name} report",
            "",
            f"Regenerate with `{ctx.rerun}`; written {_dt.datetime.now():%Y-%m-%d %H:%M}.",
            "",
            *findings_section(run_findings(config, ctx.inputs.get)),
            *(["## Setup", ""] if settings else []),
            *settings,
            "",
            *body,
            *time_lines(times, pipeline_seconds, invocation_seconds, config.report.budget_seconds),
        ]
        (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")
    ctx.log.info("report written to %s", report_dir / "report.md")
    return {"report": str(report_dir / "report.md"), "pipeline_seconds": round(pipeline_seconds, 1)}
