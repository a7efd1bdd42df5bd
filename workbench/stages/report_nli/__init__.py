"""Stage ``report_nli``: the NLI judges report (accuracy table, training record, plot).

Its spec; the run code (:mod:`workbench.stages.report_nli.run`) is imported only when the stage runs."""

from __future__ import annotations

from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "report_nli",
        "write the NLI judges report (accuracy table, training record, plot)",
        f"{__name__}.run:run",
        sections=("report",),
        inputs=("eval_nli",),
        cacheable=False,
    ),
)
