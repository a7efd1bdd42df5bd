"""The ``workbench`` command: ls, cp, validate, config, stages, run, evaluate, merge, export, decide, bundles, score,
score-merge, infer, serve, monitor, serve-model, serve-retriever, doctor.

The Typer app is assembled in :mod:`workbench.cli.app` from one module per verb group; this module holds the console
entry point (:func:`main`).

Heavy libraries are imported inside the commands, so ``workbench --help`` stays fast. User errors
(:class:`WorkbenchError`, including what torch or transformers raised while a model was built) print one line and
exit with status 2; set ``WORKBENCH_TRACEBACK=1`` to see the traceback behind that line as well.
"""

from __future__ import annotations

import os
import sys
import traceback

from workbench.cli.app import app
from workbench.core.errors import EXIT_USER_ERROR, STORAGE_ERRNOS, WorkbenchError, one_line, os_error_words


def _quiet_third_party_progress() -> None:
    """The workbench draws its own progress bars; silence the libraries' per-file ones (before they are imported)."""
    for var in (
        "HF_DATASETS_DISABLE_PROGRESS_BARS",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS",
    ):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def missing_training_dependency(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` when it is a missing module of the ``train`` extra
    (:data:`workbench.stages.needs.TRAINING_MODULES`), else None. Recipes are refused before their first stage
    (:func:`workbench.stages.needs.check_stage_needs`); this catches what any other command imports."""
    from workbench.stages.needs import TRAINING_MODULES

    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    dist = TRAINING_MODULES.get(exc.name.split(".")[0])
    if dist is None:
        return None
    return f"this command needs the training dependencies ({dist} is not installed): pip install 'workbench[train]'"


def main() -> None:
    """Console entry point: run the CLI, turning user errors into one line and exit status 2 (a missing module of
    the ``train`` extra too: the core install runs ``infer`` and ``serve``, the rest needs ``workbench[train]``; and a
    write the machine refused, :data:`~workbench.core.errors.STORAGE_ERRNOS`: a full disk, a read-only file system)."""
    _quiet_third_party_progress()
    try:
        app()
    except ModuleNotFoundError as exc:
        message = missing_training_dependency(exc)
        if message is None:
            raise
        if os.environ.get("WORKBENCH_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        print(f"error: {message}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except WorkbenchError as exc:
        if os.environ.get("WORKBENCH_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        # the machine refused a write no workbench layer turned into its own error (a log file, a lock, a library's
        # output): one line naming the file when the error carries it
        if os.environ.get("WORKBENCH_TRACEBACK", "").strip() not in ("", "0"):
            traceback.print_exc()
        place = f"{one_line(os.fsdecode(exc.filename))}: " if isinstance(exc.filename, str | bytes) else ""
        print(f"error: {place}{os_error_words(exc)}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:
        print("interrupted: finished stages are kept; run the same command again to resume", file=sys.stderr)
        sys.exit(130)
