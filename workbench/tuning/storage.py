"""Where a study lives: Optuna's own storages, chosen by a URL.

* ``None`` — a SQLite file in the run directory (``<run_dir>/studies/studies.db``): one machine, resumable;
* ``journal:PATH`` (or a path ending in ``.journal`` / ``.log``) — :class:`optuna.storages.JournalStorage` on a
  :class:`~optuna.storages.journal.JournalFileBackend`: several worker processes sharing a disk;
* anything else — an SQLAlchemy URL for :class:`optuna.storages.RDBStorage` (``sqlite:///…``,
  ``postgresql://user:pw@host/db``, ``mysql+pymysql://…``): many machines.

RDB storages get Optuna's heartbeat (a trial whose worker stops beating for ``grace_period`` seconds is failed and
retried by :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`). :func:`fail_dead_workers` adds what a heartbeat
cannot do at once after a ``kill -9`` on the same machine, for every storage kind: a RUNNING trial whose worker
process no longer exists is failed and its parameters queued again, so a re-run finishes the study without counting
it.
"""

from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path
from typing import Any

from workbench.core.errors import ConfigError

__all__ = ["HEARTBEAT_SECONDS", "WORKER_ATTR", "describe_storage", "fail_dead_workers", "open_storage", "worker_id"]

HEARTBEAT_SECONDS = 5
"""RDB heartbeat interval; a trial silent for 4× this long is failed and retried."""

WORKER_ATTR = "worker"
"""Trial user attribute holding ``host:pid`` of the process that runs it."""


def storage_url(storage: str | None, run_dir: Path) -> str:
    """The URL a study opens: ``storage`` as given, or the run directory's SQLite file."""
    if storage is None:
        return f"sqlite:///{(run_dir / 'studies' / 'studies.db').resolve()}"
    return storage


def _journal_path(url: str) -> Path | None:
    if url.startswith("journal:"):
        return Path(url[len("journal:") :].removeprefix("//"))
    if "://" not in url and url.endswith((".journal", ".log")):
        return Path(url)
    return None


def open_storage(url: str, where: str = "study.storage") -> Any:
    """An Optuna storage for ``url`` (see the module docstring); one-line ConfigError when it cannot be opened."""

    import optuna
    from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend

    journal = _journal_path(url)
    try:
        if journal is not None:
            journal.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(journal)))
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():  # the heartbeat arguments are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_SECONDS,
                grace_period=4 * HEARTBEAT_SECONDS,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
            )
    except Exception as exc:  # SQLAlchemy, a driver or the file system: one line naming the storage
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot open study storage {describe_storage(url)!r}: {first}", where) from None


def describe_storage(url: str) -> str:
    """``url`` without a password, and a SQLite file below the working directory as a relative path (for logs and
    reports)."""
    if url.startswith("sqlite:////"):
        path = Path(url[len("sqlite:///") :])
        if path.is_relative_to(Path.cwd()):
            return f"sqlite:///{path.relative_to(Path.cwd())}"
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def worker_id() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def fail_dead_workers(study: Any) -> int:
    """Fail every RUNNING trial of ``study`` whose worker (``host:pid`` on this host) is gone, queue its parameters
    again, and return how many were failed. Trials of other hosts are left to the RDB heartbeat."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = str(trial.user_attrs.get(WORKER_ATTR, ""))
        name, _, pid = worker.rpartition(":")
        if name != host or not pid.isdigit() or _alive(int(pid)):
            continue
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        study.enqueue_trial(dict(trial.params), user_attrs={"retry_of": trial.number}, skip_if_exists=False)
        failed += 1
    return failed
