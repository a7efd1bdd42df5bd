"""One method's Optuna study: sample parameters, score them on the study split, respect constraints, pick the best.

:func:`run_study` is storage- and worker-agnostic: it creates or joins ``study_name`` in ``storage`` (refusing a study
of that name made with other directions or another search space), fails the trials of dead workers on this host,
then runs trials until the study holds ``n_trials`` finished ones — so N processes given the same storage and name
share the work, and a re-run after ``kill -9`` completes what is missing.

A trial's parameters go to a ``score(params) -> (metrics, kind)`` callable (:class:`~workbench.tuning.objective.
MethodObjective`); its metrics are stored as the trial's user attributes, so constraints, reports and the pick of the
best trial read them back from the storage alone.

**The study's pick is Optuna's pick.** A single-objective trial's value is :func:`objective_value` — the quality
rounded to 6 decimals, less ``tokens × 1e-13`` — so among trials of equal quality the one with fewer tokens has the
higher value, and the constraints are Optuna's own (``trial.set_constraint``): ``study.best_trial`` (and so Optuna's
CLI and optuna-dashboard) names the trial the workbench ships. The rule and the chosen trial are written as the
study's user attributes ``pick_rule``, ``pick_trial`` and ``pick_feasible``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.core.errors import ConfigError
from workbench.core.logs import progress as show_progress
from workbench.tuning.objective import Pruned
from workbench.tuning.space import ParamSpec
from workbench.tuning.storage import WORKER_ATTR, fail_dead_workers, worker_id

__all__ = [
    "CONSTRAINT_METRICS",
    "PICK_RULE",
    "StudyOutcome",
    "StudySettings",
    "objective_value",
    "pick_best",
    "run_study",
    "suggest",
]

CONSTRAINT_METRICS = ("retrieval_rate", "tokens", "latency", "lm_calls", "nli_pairs")
"""Metrics a constraint (``metric <= limit``) may name: per-question means of a trial on the study split."""

QUALITY_DECIMALS = 6
"""A single-objective trial's quality is compared to this many decimals (exact for em / contains means of up to
500,000 questions); below that, fewer tokens wins."""
TOKEN_WEIGHT = 1e-13
"""What one token per question takes off a single-objective trial's value: at most ``TOKEN_CAP × TOKEN_WEIGHT`` =
1e-7 in all, under half a quality step (5e-7), so it only orders trials of equal rounded quality."""
TOKEN_CAP = 1e6
"""Tokens per question above this all weigh the same in the value."""
VALUE_RULE = f"round(quality, {QUALITY_DECIMALS}) - {TOKEN_WEIGHT:g} * min(tokens, {TOKEN_CAP:g})"
"""The single-objective trial value, as written in the study's signature and ``pick_rule``."""

PICK_RULE = {
    "single": (
        f"Optuna's best trial: trial value = {VALUE_RULE} (quality first, then fewer tokens per question), among the "
        "trials that meet every constraint (Optuna's constraints); trials of equal value (the same quality and "
        "tokens) are one to the storage, which names the earliest; with no feasible trial, the one that breaks the "
        "constraints least (then the better quality, then the earlier): Optuna then has no best trial"
    ),
    "multi": (
        "on Optuna's Pareto front (quality up, tokens down), among the trials that meet every constraint and the "
        "token budget: the highest quality, then fewer tokens, then the earlier trial; with none, the one that "
        "breaks the constraints least"
    ),
}
"""How a study's trial is chosen, recorded as the study's ``pick_rule`` user attribute."""


def objective_value(metrics: dict[str, float], objective: str) -> float:
    """A single-objective trial's value: the quality ``metrics[objective]`` rounded to :data:`QUALITY_DECIMALS`, less
    :data:`TOKEN_WEIGHT` per token per question (capped at :data:`TOKEN_CAP`) — a lexicographic order (quality, then
    fewer tokens) in one number, so Optuna's ``best_trial`` is the workbench's pick. Missing tokens count as none."""
    quality = round(float(metrics[objective]), QUALITY_DECIMALS)
    tokens = float(metrics.get("tokens", 0.0))
    tokens = min(max(tokens, 0.0), TOKEN_CAP) if math.isfinite(tokens) else TOKEN_CAP
    return quality - TOKEN_WEIGHT * tokens


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
    the trials by kind with their wall time (every worker's, read from the storage), the number of trials this
    run failed because their worker had died, and the chosen trial's number (``best_number``: Optuna's
    ``study.best_trial`` in a single-objective study with a feasible trial; None for an empty study)."""

    name: str
    best_params: dict[str, Any]
    best_metrics: dict[str, float]
    feasible: bool
    pareto: list[dict[str, Any]]
    kinds: dict[str, dict[str, float]]
    recovered: int
    trials: list[dict[str, Any]]
    best_number: int | None = None


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
        "value": "quality, tokens" if settings.multi_objective else VALUE_RULE,
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
            why = (
                " (its trial values are quality alone: made before ties were broken by tokens)"
                if diff == ["value"] and "value" not in theirs
                else ""
            )
            raise ConfigError(
                f"study {name!r} exists with another {', '.join(diff)}{why}: give another --study-name", "study"
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
        if settings.multi_objective:
            return metrics[settings.objective], metrics["tokens"]
        return objective_value(metrics, settings.objective)

    def enough(study: Any, trial: Any) -> None:
        if _finished(study) >= settings.n_trials:
            study.stop()

    idle_rounds = 0
    with show_progress(
        f"study {name} (complete trials)", settings.n_trials, completed=_finished(study), shown=progress
    ) as shown:

        def count(study: Any, trial: Any) -> None:  # complete trials of every worker sharing the study
            shown.update(_finished(study))

        while (missing := settings.n_trials - _finished(study)) > 0 and idle_rounds < 5:
            before = _finished(study)
            study.optimize(  # pruned and failed trials do not count: go on until n_trials are complete
                objective,
                n_trials=missing,
                callbacks=[enough, count],
                show_progress_bar=False,  # the workbench's progress: a bar on a terminal, log lines elsewhere
                catch=(),
            )
            idle_rounds = idle_rounds + 1 if _finished(study) == before else 0
    return _outcome(study, settings, recovered)


def _feasible(metrics: dict[str, float], constraints: dict[str, float]) -> bool:
    return all(float(metrics.get(name, math.inf)) <= limit + 1e-12 for name, limit in constraints.items())


def pick_best(trials: list[dict[str, Any]], settings: StudySettings) -> tuple[dict[str, Any] | None, bool]:
    """The chosen trial (a row of :func:`trial_rows`) and whether it meets the constraints.

    Among feasible trials (every constraint met; and, when multi-objective with a ``token_budget``, at most that
    many tokens per question): the highest quality, ties broken by fewer tokens, then the earlier trial (single
    objective: the highest :func:`objective_value`, i.e. quality to 6 decimals, then fewer tokens, then the earlier
    trial). With no feasible trial: the one that breaks the constraints least (then by quality)."""
    if not trials:
        return None, False
    key = settings.objective

    def ok(row: dict[str, Any]) -> bool:
        m = row["metrics"]
        budget = settings.token_budget if settings.multi_objective else None
        return _feasible(m, settings.constraints) and (budget is None or m["tokens"] <= budget)

    feasible = [t for t in trials if ok(t)]
    if feasible:
        if not settings.multi_objective:  # the order of the trial values Optuna stores (objective_value)
            return min(feasible, key=lambda t: (-objective_value(t["metrics"], key), t["number"])), True
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


def optuna_best(study: Any, rows: list[dict[str, Any]], best: dict[str, Any] | None, feasible: bool) -> Any:
    """The row of Optuna's own ``study.best_trial`` where it has one (single objective, a feasible trial), else
    ``best``. It equals :func:`pick_best`'s row but for trials of exactly equal value (the same quality and tokens),
    which are interchangeable by the rule: then Optuna's choice is the one shipped, so the two never differ."""
    if best is None or not feasible or len(study.directions) > 1:
        return best
    try:
        number = study.best_trial.number
    except ValueError:  # no feasible trial by Optuna's account
        return best
    return next((r for r in rows if r["number"] == number), best)


def record_pick(study: Any, settings: StudySettings, best: dict[str, Any] | None, feasible: bool) -> None:
    """Write the pick to the storage as study user attributes: ``pick_rule`` (:data:`PICK_RULE`), ``pick_trial``
    (the chosen trial's number), ``pick_feasible`` and ``pick_objective`` — what Optuna's CLI and dashboard show."""
    if best is None:
        return
    study.set_user_attr("pick_rule", PICK_RULE["multi" if settings.multi_objective else "single"])
    study.set_user_attr("pick_objective", settings.objective)
    study.set_user_attr("pick_trial", int(best["number"]))
    study.set_user_attr("pick_feasible", bool(feasible))


def _outcome(study: Any, settings: StudySettings, recovered: int) -> StudyOutcome:
    rows = trial_rows(study)
    best, feasible = pick_best(rows, settings)
    best = optuna_best(study, rows, best, feasible)
    record_pick(study, settings, best, feasible)
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
        best_number=int(best["number"]) if best else None,
    )
