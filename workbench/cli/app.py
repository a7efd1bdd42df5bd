"""The Typer app: the root options and every verb, registered here in the order ``workbench --help`` lists them.

Each verb lives in the module of its group (:mod:`~workbench.cli.recipes`, :mod:`~workbench.cli.evaluate`,
:mod:`~workbench.cli.bundles`, :mod:`~workbench.cli.answering`, :mod:`~workbench.cli.model_server`,
:mod:`~workbench.cli.retrieval`, :mod:`~workbench.cli.score`, :mod:`~workbench.cli.monitoring`,
:mod:`~workbench.cli.recalibrate`, :mod:`~workbench.cli.doctor`); those modules import only typer and the
workbench's light core at import time, so ``workbench --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.cli.answering import infer_command, serve_command
from workbench.cli.bundles import bundles_command, decide_command, export_command
from workbench.cli.doctor import doctor_command
from workbench.cli.evaluate import evaluate_command, study_command
from workbench.cli.model_server import serve_model_command
from workbench.cli.monitoring import monitor_command
from workbench.cli.recalibrate import recalibrate_command
from workbench.cli.recipes import (
    config_command,
    cp_command,
    ls_command,
    merge_command,
    run_command,
    stages_command,
    validate_command,
)
from workbench.cli.retrieval import index_command, serve_retriever_command
from workbench.cli.score import score_command, score_merge_command

app = typer.Typer(
    name="workbench",
    help="Calibrate, tune, distil and ship uncertainty-aware adaptive-RAG decision logic.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _root(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Hide progress bars and info messages.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    from workbench.core.logs import set_quiet

    set_quiet(quiet)
    if version:
        from workbench import __version__

        typer.echo(f"workbench {__version__}")
        raise typer.Exit(0)


VERBS = (
    ("ls", ls_command),
    ("cp", cp_command),
    ("validate", validate_command),
    ("index", index_command),
    ("config", config_command),
    ("stages", stages_command),
    ("run", run_command),
    ("evaluate", evaluate_command),
    ("study", study_command),
    ("merge", merge_command),
    ("export", export_command),
    ("decide", decide_command),
    ("bundles", bundles_command),
    ("score", score_command),
    ("score-merge", score_merge_command),
    ("infer", infer_command),
    ("serve", serve_command),
    ("monitor", monitor_command),
    ("recalibrate", recalibrate_command),
    ("serve-model", serve_model_command),
    ("serve-retriever", serve_retriever_command),
    ("doctor", doctor_command),
)
"""Every verb and its function, in the order ``workbench --help`` lists them."""

app.callback()(_root)
for _name, _command in VERBS:
    app.command(_name)(_command)
