"""One method's Optuna study: sample parameters, score them on the study split, respect constraints, pick the best.

:func:`run_study` is storage- and worker-agnostic: it creates or joins ``study_name`` in ``storage`` (refusing a study
of that name made with other directions or another search space), fails the trials of dead workers on this host,
then runs trials until the study holds ``n_trials`` finished ones — so N processes given the same storage and name
share the work, and a re-run after ``kill -9`` completes what is missing.

A trial's parameters go to a ``score(params) -> (metrics, kind)`` callable (:class:`~workbench.tuning.objective.
MethodObjective`); its metrics are stored as the trial's user attributes, so constraints, reports and the pick of the
best trial read them back from the storage alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.core.errors import ConfigError
from workbench.tuning.objective import Pruned
from workbench.tuning.space import ParamSpec
from workbench.tuning.storage import WORKER_ATTR, fail_dead_workers, worker_id

__all__ = ["CONSTRAINT_METRICS", "StudyOutcome", "StudySettings", "pick_best", "run_study", "suggest"]

CONSTRAINT_METRICS = ("retrieval_rate", "tokens", "latency", "lm_calls", "nli_pairs")
"""Metrics a constraint (``metric <= limit``) may name: per-question means of a trial on the study split."""

Scorer = Callable[..., tuple[dict[str, float], str]]
"""``score(params, report) -> (metrics, kind)``; ``report(step, value) -> prune?`` may be ignored; a scorer that
stops a trial raises :class:`workbench.tuning.objective.Pruned`."""


@dataclass(frozen=True)
class StudySettings:
    """How to search: the quality ``objective`` (em / f1 / contains), ``multi_objective`` (quality vs tokens per
    question, NSGA-II), ``constraints`` (``{metric: upper limit}``), ``token_budget`` (multi-objective pick: the
    best quality at most this many tokens per question), the sampler ``seed`` and ``n_trials`` finished trials."""

    objective: str = "contains"
    multi_objective: bool = False
    constraints: dict[str, float] = field(default_factory=dict)
    token_budget: float | None = None
    n_trials: int = 30
    seed: int = 0
    sampler: str = "auto"

    @property
    def directions(self) -> list[str]:
        """Optuna directions: maximise quality (and minimise tokens per question when multi-objective)."""
        return ["maximize", "minimize"] if self.multi_objective else ["maximize"]


@dataclass
class StudyOutcome:
    """A finished study: its name, the best trial's parameters and val metrics, the Pareto front (multi-objective),
    the trials by kind with their wall time (every worker's, read from the storage), and the number of trials this
    run failed because their worker had died."""

    name: str
    best_params: dict[str, Any]
    best_metrics: dict[str, float]
    feasible: bool
    pareto: list[dict[str, Any]]
    kinds: dict[str, dict[str, float]]
    recovered: int
    trials: list[dict[str, Any]]


def suggest(trial: Any, spec: ParamSpec, breakpoints: list[float] | None = None) -> Any:
    """Draw ``spec``'s value for ``trial`` (``breakpoints``: the categorical choices of a breakpoint spec)."""
    if spec.breakpoints:
        if not breakpoints:
            raise ConfigError(f"no breakpoints for {spec.name}", "study.space")
        return trial.suggest_categorical(spec.name, [float(b) for b in breakpoints])
    if spec.kind == "categorical":
        return trial.suggest_categorical(spec.name, list(spec.choices))
    if spec.kind == "int":
        return trial.suggest_int(spec.name, int(spec.low), int(spec.high), log=spec.log)
    return trial.suggest_float(spec.name, float(spec.low), float(spec.high), log=spec.log)


def _sampler(settings: StudySettings) -> Any:
    """The seeded sampler; constraints reach it through ``trial.set_constraint`` (see :func:`run_study`)."""
    import optuna

    kind = settings.sampler
    if kind == "auto":
        kind = "nsga2" if settings.multi_objective else "tpe"
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=settings.seed)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=settings.seed)
    return optuna.samplers.TPESampler(seed=settings.seed, multivariate=True)


def _pruner() -> Any:
    """Median pruning of long trials: stop one whose running score is below the median of earlier trials at the same
    step, once three trials have finished."""
    import optuna

    return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0)


def _signature(specs: tuple[ParamSpec, ...], breakpoints: list[float] | None, settings: StudySettings) -> dict:
    """What a joined study must agree on: directions, objective and the search space."""
    return {
        "directions": settings.directions,
        "objective": settings.objective,
        "space": {s.name: s.to_dict() for s in specs},
        "breakpoints": [float(b) for b in breakpoints] if breakpoints else None,
    }


def open_study(
    storage: Any, name: str, specs: tuple[ParamSpec, ...], settings: StudySettings, breakpoints: list[float] | None
) -> Any:
    """Create ``name`` in ``storage`` or join it; ConfigError when it exists with other directions, objective or
    search space (the existing study is left untouched)."""
    import optuna

    signature = _signature(specs, breakpoints, settings)
    for _attempt in range(20):
        try:
            existing = optuna.load_study(study_name=name, storage=storage, sampler=_sampler(settings), pruner=_pruner())
        except KeyError:
            try:
                study = optuna.create_study(
                    study_name=name,
                    storage=storage,
                    directions=settings.directions,
                    sampler=_sampler(settings),
                    pruner=_pruner(),
                )
            except optuna.exceptions.DuplicatedStudyError:  # another worker created it a moment ago
                continue
            study.set_user_attr("signature", signature)
            return study
        theirs = existing.user_attrs.get("signature")
        if theirs is None:  # created by a worker that has not written its signature yet
            time.sleep(0.25)
            continue
        if theirs != signature:
            diff = sorted(k for k in signature if theirs.get(k) != signature[k])
            raise ConfigError(
                f"study {name!r} exists with another {', '.join(diff)}: give another --study-name", "study"
            )
        return existing
    raise ConfigError(f"study {name!r} exists but was never finished being created (no signature)", "study")


def _finished(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def run_study(
    storage: Any,
    name: str,
    specs: tuple[ParamSpec, ...],
    score: Scorer,
    settings: StudySettings,
    *,
    breakpoints: list[float] | None = None,
    fixed: dict[str, Any] | None = None,
    progress: bool = True,
) -> StudyOutcome:
    """Run (or join, or resume) study ``name`` until it has ``settings.n_trials`` complete trials; the outcome.

    ``fixed`` parameters are enqueued as the first trial when the study is new (the paper defaults, so the study
    always compares against them)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = open_study(storage, name, specs, settings, breakpoints)
    recovered = fail_dead_workers(study)
    if fixed and not study.trials:
        study.enqueue_trial(fixed, user_attrs={"defaults": True})

    def objective(trial: Any) -> Any:
        trial.set_user_attr(WORKER_ATTR, worker_id())
        params = {spec.name: suggest(trial, spec, breakpoints) for spec in specs}
        began = time.perf_counter()

        def report(step: int, value: float) -> bool:
            if settings.multi_objective:  # Optuna prunes single-objective studies only
                return False
            trial.report(value, step)
            return trial.should_prune()

        try:
            metrics, kind = score(params, report)
        except Pruned as exc:
            trial.set_user_attr("seconds", time.perf_counter() - began)
            raise optuna.TrialPruned(str(exc)) from None
        spent = time.perf_counter() - began
        trial.set_user_attr("metrics", metrics)
        trial.set_user_attr("kind", kind)
        trial.set_user_attr("seconds", spent)
        for metric, limit in settings.constraints.items():  # feasible when every value is <= 0
            trial.set_constraint(metric, float(metrics.get(metric, math.inf)) - limit)
        quality = metrics[settings.objective]
        return (quality, metrics["tokens"]) if settings.multi_objective else quality

    def enough(study: Any, trial: Any) -> None:
        if _finished(study) >= settings.n_trials:
            study.stop()

    idle_rounds = 0
    while (missing := settings.n_trials - _finished(study)) > 0 and idle_rounds < 5:
        before = _finished(study)
        study.optimize(  # pruned and failed trials do not count: go on until n_trials are complete
            objective,
            n_trials=missing,
            callbacks=[enough],
            show_progress_bar=progress and _has_tty(),
            catch=(),
        )
        idle_rounds = idle_rounds + 1 if _finished(study) == before else 0
    return _outcome(study, settings, recovered)


def _has_tty() -> bool:
    import sys

    return sys.stderr.isatty()


def _feasible(metrics: dict[str, float], constraints: dict[str, float]) -> bool:
    return all(float(metrics.get(name, math.inf)) <= limit + 1e-12 for name, limit in constraints.items())


def pick_best(trials: list[dict[str, Any]], settings: StudySettings) -> tuple[dict[str, Any] | None, bool]:
    """The chosen trial (a row of :func:`trial_rows`) and whether it meets the constraints.

    Among feasible trials (every constraint met; and, when multi-objective with a ``token_budget``, at most that
    many tokens per question): the highest quality, ties broken by fewer tokens, then the earlier trial. With no
    feasible trial: the one that breaks the constraints least (then by quality)."""
    if not trials:
        return None, False
    key = settings.objective

    def ok(row: dict[str, Any]) -> bool:
        m = row["metrics"]
        budget = settings.token_budget if settings.multi_objective else None
        return _feasible(m, settings.constraints) and (budget is None or m["tokens"] <= budget)

    feasible = [t for t in trials if ok(t)]
    if feasible:
        return min(feasible, key=lambda t: (-t["metrics"][key], t["metrics"]["tokens"], t["number"])), True

    def violation(row: dict[str, Any]) -> float:
        m = row["metrics"]
        return sum(max(0.0, float(m.get(n, math.inf)) - lim) for n, lim in settings.constraints.items())

    return min(trials, key=lambda t: (violation(t), -t["metrics"][key], t["number"])), False


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """Every complete trial as ``{number, params, metrics, kind, seconds, defaults}``, in trial order."""
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        rows.append(
            {
                "number": t.number,
                "params": dict(t.params),
                "metrics": dict(t.user_attrs.get("metrics", {})),
                "kind": t.user_attrs.get("kind", ""),
                "seconds": float(t.user_attrs.get("seconds", 0.0)),
                "defaults": bool(t.user_attrs.get("defaults", False)),
            }
        )
    return rows


def _outcome(study: Any, settings: StudySettings, recovered: int) -> StudyOutcome:
    rows = trial_rows(study)
    best, feasible = pick_best(rows, settings)
    pareto = []
    if settings.multi_objective:
        numbers = {t.number for t in study.best_trials}
        pareto = [r for r in rows if r["number"] in numbers]
    spent_by_kind: dict[str, list[float]] = {}
    for row in rows:  # every worker's trials, from the storage: the table does not depend on who ran them
        spent_by_kind.setdefault(row["kind"] or "unknown", []).append(row["seconds"])
    from optuna.trial import TrialState

    pruned = study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
    if pruned:
        spent_by_kind["pruned"] = [float(t.user_attrs.get("seconds", 0.0)) for t in pruned]
    kinds = {
        kind: {"trials": len(spent), "seconds": float(sum(spent)), "per_second": len(spent) / max(sum(spent), 1e-9)}
        for kind, spent in spent_by_kind.items()
    }
    return StudyOutcome(
        name=study.study_name,
        best_params=dict(best["params"]) if best else {},
        best_metrics=dict(best["metrics"]) if best else {},
        feasible=feasible,
        pareto=pareto,
        kinds=kinds,
        recovered=recovered,
        trials=rows,
    )
