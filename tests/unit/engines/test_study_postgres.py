"""Optuna's RDB storage on the session's real PostgreSQL (``study.storage: postgresql+psycopg://...``): two study
workers on one study, one killed with kill -9 inside a trial, the other finishing it — every trial number once, the
killed trial failed by the heartbeat and retried, the study holding its complete trials. The workers run
``run_study`` (what ``workbench study`` runs) on a made-up score (tests/unit/tuning/worker.py), not a model."""

from __future__ import annotations

import os
import signal
import time

from tests.engine_servers import fresh_database
from tests.unit.tuning.test_study import _worker
from workbench.core.errors import ConfigError
from workbench.tuning.storage import open_storage

N_TRIALS = 24  # the survivor runs past the heartbeat's 20 s grace period, so it fails the dead trial


def _trials(url: str) -> list:
    import optuna

    try:
        return optuna.load_study(study_name="pg", storage=open_storage(url)).trials
    except (KeyError, ConfigError):
        return []


def _running_on(trials: list, pid: int) -> list:
    """The RUNNING trials of worker process ``pid`` (its ``host:pid`` in the trial's worker attribute)."""
    from optuna.trial import TrialState

    mine = [t for t in trials if str(t.user_attrs.get("worker", "")).endswith(f":{pid}")]
    return [t for t in mine if t.state == TrialState.RUNNING]


def test_two_workers_one_killed_mid_trial_the_other_finishes(pg_server):
    from optuna.trial import TrialState

    url = fresh_database(pg_server, "studies").replace("postgresql://", "postgresql+psycopg://", 1)
    victim, survivor = _worker(url, "pg", N_TRIALS, 1.5), _worker(url, "pg", N_TRIALS, 1.5)
    deadline = time.time() + 240
    while time.time() < deadline:  # both are working: one trial done, the victim inside another with its parameters
        trials = _trials(url)  # (a kill before the suggestion leaves a dead trial without any: its retry samples anew)
        running = _running_on(trials, victim.pid)
        if any(t.state == TrialState.COMPLETE for t in trials) and running and running[0].params:
            break
        time.sleep(0.2)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    killed = _running_on(_trials(url), victim.pid)
    assert len(killed) == 1
    assert survivor.wait(timeout=300) == 0
    trials = _trials(url)
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers)) == max(numbers) + 1  # none lost, none twice
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states and N_TRIALS <= states.count(TrialState.COMPLETE) <= N_TRIALS + 1
    dead = trials[killed[0].number]
    retry = [  # queued again by this host's dead-worker check or by Optuna's heartbeat callback
        t
        for t in trials
        if t.user_attrs.get("retry_of") == dead.number or t.system_attrs.get("failed_trial") == dead.number
    ]
    assert dead.state == TrialState.FAIL and len(retry) == 1 and retry[0].params == dead.params
