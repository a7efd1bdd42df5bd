"""Studies on Optuna storages: best pick under constraints, joining, two workers on one journal, kill -9 recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.core.errors import ConfigError
from workbench.tuning.space import parse_space
from workbench.tuning.storage import WORKER_ATTR, open_storage
from workbench.tuning.study import StudySettings, pick_best, run_study

ROOT = Path(__file__).resolve().parents[3]
SPACE = {"tau": {"low": 0.01, "high": 10.0, "log": True}}


def _score(params, report=None):
    tau = float(params["tau"])
    return {"contains": 1.0 / (1.0 + (tau - 1.0) ** 2), "tokens": 100.0 * tau, "retrieval_rate": min(1.0, tau / 2)}, (
        "replay"
    )


def _specs():
    return parse_space("dtr", SPACE, "test")


def test_study_finds_the_peak_and_starts_from_the_defaults(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    out = run_study(storage, "a", _specs(), _score, StudySettings(n_trials=25), fixed={"tau": 0.001 + 0.01})
    assert len(out.trials) == 25 and out.trials[0]["defaults"] and out.trials[0]["params"] == {"tau": 0.011}
    assert abs(out.best_params["tau"] - 1.0) < 0.3 and out.feasible
    assert out.kinds["replay"]["trials"] == 25 and out.kinds["replay"]["per_second"] > 0
    again = run_study(storage, "a", _specs(), _score, StudySettings(n_trials=25))  # already complete: no new trial
    assert len(again.trials) == 25 and again.kinds["replay"]["trials"] == 25  # read back from the storage


def test_study_progress_reads_in_a_log(tmp_path, monkeypatch, caplog):
    """Output that is not a terminal gets the study's progress in complete trials as log lines (Optuna's own bar is
    drawn only on a terminal); a resumed study counts from the trials it already has."""
    import logging

    import workbench.core.logs as logs

    monkeypatch.setattr(logs, "is_terminal", lambda: False)
    caplog.set_level(logging.INFO, logger="workbench.progress")
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    run_study(storage, "p", _specs(), _score, StudySettings(n_trials=3))
    run_study(storage, "p", _specs(), _score, StudySettings(n_trials=5))
    lines = [r.getMessage() for r in caplog.records if r.name == "workbench.progress"]
    assert [line.split(" in ")[0] for line in lines] == [
        "study p (complete trials): 3 of 3 (100%)",
        "study p (complete trials): 5 of 5 (100%)",
    ]


def test_constraints_steer_the_pick(tmp_path):
    settings = StudySettings(n_trials=25, constraints={"retrieval_rate": 0.25})
    out = run_study(open_storage(f"sqlite:///{tmp_path}/s.db"), "c", _specs(), _score, settings)
    assert out.feasible and out.best_metrics["retrieval_rate"] <= 0.25 and out.best_params["tau"] <= 0.5 + 1e-9


def test_pick_best_rules():
    rows = [
        {"number": 0, "params": {}, "metrics": {"contains": 0.5, "tokens": 10.0, "retrieval_rate": 0.9}},
        {"number": 1, "params": {}, "metrics": {"contains": 0.5, "tokens": 5.0, "retrieval_rate": 0.2}},
        {"number": 2, "params": {}, "metrics": {"contains": 0.7, "tokens": 50.0, "retrieval_rate": 0.8}},
    ]
    assert pick_best(rows, StudySettings())[0]["number"] == 2
    assert pick_best(rows, StudySettings(constraints={"retrieval_rate": 0.5}))[0]["number"] == 1
    multi = StudySettings(multi_objective=True, token_budget=20.0)
    assert pick_best(rows, multi)[0]["number"] == 1  # quality tie inside the budget: fewer tokens
    best, feasible = pick_best(rows, StudySettings(constraints={"retrieval_rate": 0.1}))
    assert not feasible and best["number"] == 1  # least violation


def test_multi_objective_reports_a_pareto_front(tmp_path):
    settings = StudySettings(n_trials=20, multi_objective=True, token_budget=150.0)
    out = run_study(open_storage(f"sqlite:///{tmp_path}/s.db"), "m", _specs(), _score, settings)
    assert out.pareto and out.best_metrics["tokens"] <= 150.0
    front = [(t["metrics"]["contains"], t["metrics"]["tokens"]) for t in out.pareto]
    for q, tok in front:  # no front point is dominated by any trial
        assert not any(
            t["metrics"]["contains"] >= q
            and t["metrics"]["tokens"] <= tok
            and (t["metrics"]["contains"], t["metrics"]["tokens"]) != (q, tok)
            for t in out.trials
        )


def test_joining_with_another_space_or_direction_is_refused_and_leaves_the_study(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    run_study(storage, "j", _specs(), _score, StudySettings(n_trials=3))
    other = parse_space("dtr", {"tau": {"low": 0.1, "high": 5.0}}, "test")
    with pytest.raises(ConfigError, match="exists with another space"):
        run_study(storage, "j", other, _score, StudySettings(n_trials=5))
    with pytest.raises(ConfigError, match="exists with another directions"):
        run_study(storage, "j", _specs(), _score, StudySettings(n_trials=5, multi_objective=True))
    import optuna

    assert len(optuna.load_study(study_name="j", storage=storage).trials) == 3


def test_unreachable_storage_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        open_storage("postgresql://user:secret@127.0.0.1:1/db")
    assert "secret" not in info.value.what and "\n" not in info.value.what


def _worker(url: str, name: str, n: int, sleep: float, hold: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.unit.tuning.worker", url, name, str(n), str(sleep)]
    cmd += [str(hold)] if hold is not None else []
    return subprocess.Popen(cmd, cwd=ROOT, env=env)


def test_two_workers_on_one_journal_share_the_trials(tmp_path):
    import optuna
    from optuna.trial import TrialState

    url = f"journal:{tmp_path}/study.journal"
    workers = [_worker(url, "shared", 12, 0.2) for _ in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    trials = optuna.load_study(study_name="shared", storage=open_storage(url)).trials
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert 12 <= len(complete) <= 13  # a worker busy when the 12th finished completes its trial
    assert len({t.number for t in trials}) == len(trials) and not [t for t in trials if t.state != TrialState.COMPLETE]
    assert len({t.user_attrs["worker"] for t in complete}) == 2  # both worked


def test_kill_9_mid_study_then_rerun_completes_without_counting_the_dead_trial(tmp_path):
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path}/s.db"
    hold = tmp_path / "inside-a-trial"
    # The worker creates the file inside its second trial — RUNNING, stamped with its worker, past its parameter
    # suggestions, one trial complete — and stays there: the kill lands there however loaded the machine is.
    worker = _worker(url, "killed", 8, 0.1, hold)
    deadline = time.monotonic() + 300
    while not hold.exists() and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not hold.exists():
        worker.kill()
        pytest.fail(f"the study worker never reached its second trial (exit code {worker.poll()})")
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    running = [
        t
        for t in optuna.load_study(study_name="killed", storage=open_storage(url)).trials
        if t.state == TrialState.RUNNING
    ]
    assert len(running) == 1 and WORKER_ATTR in running[0].user_attrs and running[0].params
    rerun = _worker(url, "killed", 8, 0.0)
    assert rerun.wait(timeout=300) == 0
    trials = optuna.load_study(study_name="killed", storage=open_storage(url)).trials
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) == 8 and states.count(TrialState.FAIL) == 1
    assert TrialState.RUNNING not in states
    dead = trials[running[0].number]
    retry = [t for t in trials if t.user_attrs.get("retry_of") == dead.number]
    assert dead.state == TrialState.FAIL and len(retry) == 1 and retry[0].params == dead.params


def test_long_trials_below_the_median_are_pruned_and_not_counted(tmp_path):
    from workbench.tuning.objective import Pruned

    def score(params, report):
        tau = float(params["tau"])
        quality = 1.0 / (1.0 + (tau - 1.0) ** 2)
        for step in range(4):  # four batches; the running score is the final one from the start
            if report(step, quality):
                raise Pruned(f"stopped at batch {step}")
        return {"contains": quality, "tokens": 1.0}, "decode"

    import optuna
    from optuna.trial import TrialState

    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    out = run_study(storage, "p", _specs(), score, StudySettings(n_trials=12, sampler="random"))
    trials = optuna.load_study(study_name="p", storage=storage).trials
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned and len(out.trials) == 12 and out.kinds["pruned"]["trials"] == len(pruned)
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)


def test_storage_descriptions_hide_passwords_and_shorten_local_paths(monkeypatch, tmp_path):
    from workbench.tuning.storage import describe_storage

    assert describe_storage("postgresql://me:secret@db:5432/optuna") == "postgresql://me:***@db:5432/optuna"
    monkeypatch.chdir(tmp_path)
    assert describe_storage(f"sqlite:///{tmp_path}/run/studies.db") == "sqlite:///run/studies.db"
    assert describe_storage("sqlite:////elsewhere/s.db") == "sqlite:////elsewhere/s.db"


def _tied(params, report=None):
    """The quickstart's shape: quality 0.75 on a wide band of τ (ties), tokens falling in steps as τ grows (so trials
    of one step tie on tokens as well)."""
    tau = float(params["tau"])
    tokens = 400.0 - 50.0 * min(int(tau * 2), 6)
    return {"contains": 0.75 if tau < 3.0 else 0.5, "tokens": tokens, "retrieval_rate": min(1.0, 1 / tau)}, "replay"


@pytest.mark.parametrize("url", ["sqlite:///{tmp}/s.db", "journal:{tmp}/s.journal"])
def test_a_tied_study_ships_optunas_best_trial_and_records_the_pick(tmp_path, url):
    import optuna

    storage = open_storage(url.format(tmp=tmp_path))
    out = run_study(storage, "tie", _specs(), _tied, StudySettings(n_trials=20), fixed={"tau": 0.443}, progress=False)
    tied = [t for t in out.trials if t["metrics"]["contains"] == 0.75]
    assert len(tied) >= 5 and out.trials[0]["params"] == {"tau": 0.443}  # the defaults tie, with more tokens
    fewest = min(t["metrics"]["tokens"] for t in tied)
    earliest = min(t["number"] for t in tied if t["metrics"]["tokens"] == fewest)
    study = optuna.load_study(study_name="tie", storage=storage)  # as Optuna's CLI and dashboard open it
    assert study.best_trial.number == out.best_number == earliest != 0
    assert study.best_trial.params == out.best_params and out.best_metrics["tokens"] == fewest
    attrs = study.user_attrs
    assert attrs["pick_trial"] == earliest and attrs["pick_feasible"] is True and attrs["pick_objective"] == "contains"
    assert "fewer tokens" in attrs["pick_rule"] and "best trial" in attrs["pick_rule"]
    assert abs(study.best_value - 0.75) < 1e-6  # the value is the quality, less a tie-break below its 6th decimal


def test_constraints_and_pareto_picks_are_recorded(tmp_path):
    import optuna

    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    settings = StudySettings(n_trials=12, constraints={"retrieval_rate": 0.5})
    out = run_study(storage, "c", _specs(), _tied, settings, progress=False)
    study = optuna.load_study(study_name="c", storage=storage)
    assert out.feasible and study.best_trial.number == out.best_number == study.user_attrs["pick_trial"]
    none = StudySettings(n_trials=6, constraints={"retrieval_rate": 0.01})  # nothing feasible: Optuna has no best
    out = run_study(storage, "n", _specs(), _tied, none, progress=False)
    study = optuna.load_study(study_name="n", storage=storage)
    assert not out.feasible and study.user_attrs == {**study.user_attrs, "pick_trial": out.best_number}
    assert study.user_attrs["pick_feasible"] is False
    multi = StudySettings(n_trials=10, multi_objective=True, token_budget=350.0)
    out = run_study(storage, "m", _specs(), _tied, multi, progress=False)
    study = optuna.load_study(study_name="m", storage=storage)
    assert study.user_attrs["pick_trial"] == out.best_number in {t.number for t in study.best_trials}
    assert "Pareto" in study.user_attrs["pick_rule"]


def test_a_study_made_with_plain_quality_values_is_refused(tmp_path):
    import optuna

    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    run_study(storage, "old", _specs(), _tied, StudySettings(n_trials=2), progress=False)
    study = optuna.load_study(study_name="old", storage=storage)
    signature = dict(study.user_attrs["signature"])
    del signature["value"]  # what an older workbench wrote
    study.set_user_attr("signature", signature)
    with pytest.raises(ConfigError, match=r"another value .*quality alone"):
        run_study(storage, "old", _specs(), _tied, StudySettings(n_trials=3), progress=False)
