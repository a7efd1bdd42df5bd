"""Stage ``report``: the run's Markdown + PNG report in the report directory.

Its spec; the run code (:mod:`workbench.stages.report.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.report.settings import check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "report",
        "write the Markdown + PNG report of the run to the report directory",
        f"{__name__}.run:run",
        sections=("report",),
        # the stages whose sections the report shows, in the order it shows them
        optional_inputs=(
            "answer",
            "collect",
            "calibrate",
            "classify",
            "transfer",
            "seper_eval",
            "fit_utility",
            "distill_data",
            "distill",
            "tune_reader",
            "study",
            "evaluate",
            "bench_decoding",
            "export",
        ),
        cacheable=False,
        check=check,
    ),
)
