"""``workbench decide RUN``: choose D²-RAG's retrieval decision after the run, from its stored scores, and ship it.

A finished run holds everything needed to move the decision without generating anything: the calibrate stage's
``calibrated.json`` (every question's raw features, closed-book label and routed QA scores, per split), classify's
router search (``router.json``: every router at every τ, out of fold on the fit split) and the router it shipped.
``decide`` takes one of:

* ``--tau T`` — τ by hand (say, read off the report's τ sweep). Chosen on nothing the workbench knows of: the
  manifest records it as the user's choice and notes that a τ read off the held-out sweep was not chosen blind to
  the held-out questions;
* ``--retrieval-rate R`` — the largest τ at which the shipped router retrieves for at most R of the fit split's
  questions, out of fold (each routed by a router fitted on the other folds, as classify chose its τ);
* ``--pick RULE`` (with ``--epsilon`` / ``--max-retrieval-rate`` / ``--max-tokens`` / ``--max-seconds``) — the pick
  rule (:mod:`workbench.routing.pick`) applied again to every router classify's search found; a router other than
  the shipped one is refitted on the fit split, as classify fits its pick.

The new operating point is measured once on the held-out evaluation split (the routed score and the cost against
Always-RAG, paired intervals) and exported as a new bundle version (:func:`~workbench.bundle.export.export_run` with
a :class:`~workbench.bundle.decided.DecidedPoint`): the manifest says τ was set by ``decide``, on which split and
questions (the fit split, never the held-out one — the export checks), and how (``decision.rule``,
``metrics.decide``). The run itself is left as it was.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.bundle.decided import DecidedPoint
from workbench.bundle.export import export_run, finished_run
from workbench.bundle.provenance import Questions
from workbench.classify.threshold import ABOVE_ONE
from workbench.core.errors import ConfigError, DataError
from workbench.methods.learned import load_learned
from workbench.methods.registry import METHOD_TABLE, uses_decision_policy
from workbench.routing.candidates import RouterSpec, fit_router
from workbench.routing.choose import measure_point
from workbench.routing.front import RoutePoint, tau_sweep
from workbench.routing.pick import BUDGETS, pick_router, pick_rule
from workbench.stages.classify.router import ROUTER_FILES, cost_model, routing_data, write_router
from workbench.uncertainty.stat_costs import load_stat_costs

PICK_FLAGS = {
    "rule": "--pick",
    "epsilon": "--epsilon",
    "max_retrieval_rate": "--max-retrieval-rate",
    "max_tokens": "--max-tokens",
    "max_seconds": "--max-seconds",
}
"""The pick rule's parameters as ``workbench decide`` flags (what its errors name)."""


@dataclass(frozen=True)
class DecideRequest:
    """What the user asked for: exactly one of ``tau``, ``retrieval_rate`` or ``pick`` (a rule of
    :data:`~workbench.routing.pick.PICK_RULES`, with its parameters; ``epsilon`` None: the run's
    ``classify.router_delta``). ConfigError naming the flag otherwise."""

    tau: float | None = None
    retrieval_rate: float | None = None
    pick: str | None = None
    epsilon: float | None = None
    max_retrieval_rate: float | None = None
    max_tokens: float | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        given = [name for name in ("tau", "retrieval_rate", "pick") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ConfigError("give exactly one of --tau, --retrieval-rate or --pick", "decide")
        for name, flag in (("tau", "--tau"), ("retrieval_rate", "--retrieval-rate")):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ConfigError(f"must be a number in [0, 1], got {value!r}", flag)
        if self.pick is None:
            extra = [PICK_FLAGS[n] for n in ("epsilon", *BUDGETS) if getattr(self, n) is not None]
            if extra:
                raise ConfigError(f"{extra[0]} is a parameter of --pick", extra[0])
        else:
            self.rule(0.01)  # refuses a bad rule or parameter now, naming its flag

    def rule(self, default_epsilon: float) -> Any:
        """The checked :class:`~workbench.routing.pick.PickRule` of ``--pick`` (``default_epsilon`` when no
        ``--epsilon``)."""

        return pick_rule(
            str(self.pick),
            epsilon=default_epsilon if self.epsilon is None else self.epsilon,
            max_retrieval_rate=self.max_retrieval_rate,
            max_tokens=self.max_tokens,
            max_seconds=self.max_seconds,
            names=PICK_FLAGS,
        )

    def source(self, rule: Any = None) -> str:
        """How τ is chosen, in the words of the command line (the manifest's ``provenance`` source)."""
        if self.tau is not None:
            return f"--tau {self.tau:g}, by hand"
        if self.retrieval_rate is not None:
            return f"--retrieval-rate {self.retrieval_rate:g}"
        return f"--pick {self.pick}: {rule.describe()}" if rule is not None else f"--pick {self.pick}"


@dataclass(frozen=True)
class DecideResult:
    """The exported bundle (:class:`~workbench.bundle.export.ExportResult`) and the decision's record
    (``metrics.decide`` of its manifest)."""

    export: Any
    record: dict[str, Any]


def decide_run(
    run_dir: str | Path,
    request: DecideRequest,
    *,
    name: str | None = None,
    version: str = "auto",
    root: str | Path | None = None,
    archive: bool = True,
) -> DecideResult:
    """Re-decide the finished run at ``run_dir`` by ``request`` (module docstring) and export the bundle (``name``
    and ``root`` default to the run's ``export`` section). ConfigError / DataError (one line, nothing written) for a
    run without calibrate and classify outputs or without a router search, or a collection without per-stat
    costs."""

    run = finished_run(run_dir)
    config, section = run.config, run.config.classify
    selection = run.json("classify", "selection.json")
    calibrated = run.json("calibrate", "calibrated.json")
    summary = run.json("calibrate", "summary.json")
    if not selection or calibrated is None or summary is None:
        raise DataError("decide needs the run's calibrate and classify outputs: run them first", str(run_dir))
    router = selection.get("router")
    if router is None:
        raise ConfigError(
            "decide moves the router classify's search picked, and this run has none (classify.router_search: "
            "none): re-run classify with a router search",
            "decide",
        )

    exported = config.export.methods or config.evaluate.methods
    deciders = [m for m in exported if uses_decision_policy(m)]
    if not deciders:
        raise ConfigError(
            "the run exports no method that decides with the fitted policy, whose decision decide moves",
            "export.methods",
        )
    fit_split, eval_split = summary["fit_split"], selection["eval_split"]
    fit, evaluation, eval_model = _routing_inputs(run, calibrated, summary["features"], fit_split, eval_split)
    shipped = RouterSpec.from_dict(router["spec"])
    fit_ids = frozenset(str(i) for i in calibrated[fit_split]["id"])
    choice = _choose(run, request, fit, shipped, fit_split, fit_ids)
    spec, tau, how, record, refit_router = choice.spec, choice.tau, choice.how, choice.record, choice.refit
    record["classify"] = {"router": router["label"], "tau": float(router["tau"])}
    record["router"] = spec.label
    record["tau"] = tau
    record["rule"] = how
    with tempfile.TemporaryDirectory(prefix="workbench-decide-") as scratch:
        if refit_router is None:
            router_dir = run.stage("classify")
            p_eval = np.asarray(run.json("classify", "predictions.json")["Router"], dtype=float)
            block = dict(router)
        else:
            router_dir, p_eval, block = _write_refit(run, refit_router, evaluation, Path(scratch))
        held = measure_point(
            evaluation,
            p_eval,
            tau,
            spec.features,
            eval_model,
            delta=section.router_delta,
            draws=section.router_bootstrap,
            seed=config.seed,
        )
        record["held_out"] = {"split": eval_split, "unit": eval_model.unit, **_finite(held)}
        decided = DecidedPoint(
            tau=tau,
            rule=how,
            router={**block, "tau": tau},
            router_dir=router_dir,
            p_eval=tuple(float(v) for v in p_eval),
            tau_questions=choice.chosen_on,
            refit=Questions("decide", fit_split, fit_ids) if refit_router is not None else None,
            record=record,
            note=_note(record, eval_split),
        )
        section_export = config.export
        result = export_run(
            run.dir,
            name=name or section_export.name.format(name=config.name),
            version=version,
            root=root if root is not None else section_export.dir,
            methods=section_export.methods,
            archive=archive,
            decided=decided,
        )
    return DecideResult(result, record)


@dataclass(frozen=True)
class _Choice:
    """An operating point chosen by a request: the router ``spec``, ``tau``, ``how`` (the manifest's rule),
    ``chosen_on`` (the questions τ was chosen on), the ``record`` so far, and the ``refit`` router (None:
    classify's)."""

    spec: Any
    tau: float
    how: str
    chosen_on: Any
    record: dict[str, Any]
    refit: Any = None


def _choose(run: Any, request: DecideRequest, fit: Any, shipped: Any, fit_split: str, fit_ids: frozenset) -> _Choice:
    """The operating point ``request`` asks for (module docstring): τ by hand, the shipped router's τ at a retrieval
    rate on the fit split (out of fold), or the pick rule over classify's stored routers (a different one refitted on
    the fit split)."""

    section, seed = run.config.classify, run.config.seed
    if request.tau is not None:
        caution = (
            "τ was given by hand: if it was read off the report's τ sweep on the held-out split, the held-out figures "
            "at it were in view when it was chosen"
        )
        record = {"request": request.source(), "chosen_on": None, "caution": caution}
        tau = float(request.tau)
        return _Choice(
            shipped, tau, f"decide: τ = {tau:g} by hand", Questions("decide", source=record["request"]), record
        )
    chosen = {"split": fit_split, "questions": len(fit_ids)}
    if request.retrieval_rate is not None:
        tau, rate = tau_for_rate(fit.oof_proba(shipped), request.retrieval_rate)
        record = {"request": request.source(), "chosen_on": {**chosen, "out_of_fold_rate": rate}}
        how = f"decide: retrieval rate ≤ {request.retrieval_rate:g} on {fit_split} (out of fold: {rate:.2f})"
        return _Choice(shipped, tau, how, Questions("decide", fit_split, fit_ids, record["request"]), record)
    rule = request.rule(section.router_delta)
    picked = _repick(run, fit, rule, draws=section.router_bootstrap, seed=seed)
    spec, tau = RouterSpec.from_dict(picked.point.spec or {}), float(picked.point.tau)
    record = {
        "request": request.source(rule),
        "pick": picked.to_dict(),
        "chosen_on": {**chosen, "out_of_fold_quality": picked.point.quality},
    }
    refit = fit_router(spec, fit, tau) if spec != shipped else None
    how = f"decide: router pick ({rule.describe()})"
    return _Choice(spec, tau, how, Questions("decide", fit_split, fit_ids, record["request"]), record, refit)


def tau_for_rate(p_correct: np.ndarray, rate: float) -> tuple[float, float]:
    """``(τ, achieved rate)``: the largest τ among those that change the retrieval set of ``p_correct``
    (:func:`~workbench.routing.front.tau_sweep`) whose retrieval rate (share with P(correct) < τ) is at most
    ``rate``; τ = 0 (never retrieve) when even the smallest non-empty set is larger."""

    p = np.asarray(p_correct, dtype=float)
    best = (0.0, 0.0)
    for tau in tau_sweep(p):
        achieved = float((p < tau).mean()) if p.size else 0.0
        if achieved <= rate + 1e-12:
            best = (float(tau), achieved)
    return best


def _routing_inputs(
    run: Any, calibrated: dict[str, Any], features: list[str], fit_split: str, eval_split: str
) -> tuple[Any, Any, Any]:
    """The fit split (with classify's folds, so out-of-fold predictions replay classify's), the evaluation split and
    its cost model, as classify built them."""

    config, section = run.config, run.config.classify
    collect = run.stage("collect")
    costs = load_stat_costs(collect) if collect is not None else None
    if costs is None:
        raise DataError("decide prices routers with the collection's per-stat costs (stat_costs.json)", "collect")
    fit = routing_data(calibrated[fit_split], features, section, config.seed, folds=True)
    evaluation = routing_data(calibrated[eval_split], features, section, config.seed, folds=False)
    return fit, evaluation, cost_model(costs, eval_split, calibrated[eval_split]["columns"], section)


def _repick(run: Any, fit: Any, rule: Any, *, draws: int, seed: int) -> Any:
    """The pick rule applied again to classify's stored router points (``router.json``), guarded by the fit split's
    out-of-fold routed scores, replayed."""

    record = run.json("classify", "router.json")
    if record is None:
        raise DataError("the run's classify output has no router.json", "classify")
    points = [_point(p) for p in record["points"]]
    always = _point(record["fit_references"][1])

    def paired(point: RoutePoint) -> np.ndarray:
        spec = RouterSpec.from_dict(point.spec or {})
        return fit.routed_scores(fit.oof_proba(spec) < float(point.tau)) - fit.qa_rag

    return pick_router(points, always, rule, paired=paired, draws=draws, seed=seed, unit=record["unit"])


def _point(d: dict[str, Any]) -> Any:
    """A :class:`~workbench.routing.front.RoutePoint` read back from ``router.json``."""

    def number(value: Any) -> float:
        return math.nan if value is None else float(value)

    tau = None if d.get("tau") is None else float(d["tau"])
    if tau is not None and tau >= 1.0 and number(d["rate"]) >= 1.0:  # an older router.json rounded 1 + ε to 1
        tau = ABOVE_ONE
    return RoutePoint(
        str(d["name"]),
        number(d["quality"]),
        number(d["rate"]),
        number(d["scalar"]),
        {k: number(v) for k, v in d["cost"].items()},
        tau,
        d.get("spec"),
        d.get("kind", "single"),
        d.get("origin", "forward"),
        dict(d.get("extra") or {}),
    )


def _write_refit(run: Any, router: Any, evaluation: Any, directory: Path) -> tuple[Path, np.ndarray, dict]:
    """A refitted router's files in ``directory`` (as classify writes its pick), its P(correct) on the evaluation
    split and its ``selection.json``-style block."""

    calibrate_set = load_learned(run.stage("calibrate") / "calibrators.json", expect={"calibrator_set"})
    write_router(directory, router, calibrate_set, evaluation)
    p_eval = router.proba(evaluation.columns(list(router.spec.features)))
    block = {"spec": router.spec.to_dict(), "label": router.spec.label, "files": dict(ROUTER_FILES)}
    return directory, p_eval, block


def _note(record: dict[str, Any], eval_split: str) -> str:
    """The manifest note: who moved the decision, from what to what, and what the held-out figures are."""

    held = record["held_out"]
    before = record["classify"]
    users = [m for m in METHOD_TABLE if uses_decision_policy(m)]  # the methods that decide with the moved policy
    also = f" (and {', '.join(users[1:])})" if len(users) > 1 else ""
    line = (
        f"{users[0]}: decision re-chosen after the run by `workbench decide {record['request']}`: "
        f"{record['router']} at τ = {record['tau']:.4g} (classify shipped {before['router']} at "
        f"τ = {before['tau']:.4g}); held out on "
        f"`{eval_split}`: retrieval rate {_text(held.get('rate'), 2)}, routed score {_text(held.get('quality'))} vs "
        f"Always-RAG {_text(held.get('always_quality'))}; the end-to-end evaluate figures of {users[0]}{also} were "
        "measured at classify's τ and are left out"
    )
    if record.get("caution"):
        line += f"; {record['caution']}"
    return line


def summary_lines(record: dict[str, Any]) -> list[str]:
    """What ``workbench decide`` prints: the decision, why (a pick), and its held-out figures with their 90%
    paired intervals."""
    held = record["held_out"]
    unit = held.get("unit") or "cost"
    tau = "> 1 (always retrieve)" if record["tau"] > 1.0 else f"= {record['tau']:.4f}"
    lines = [f"decided: {record['router']} at τ {tau} ({record['rule']})"]
    if record.get("pick"):
        lines.append(f"why: {record['pick']['reason']}")
    lines.append(
        f"held out ({held['split']}, {held['questions']} questions): retrieval rate {_text(held.get('rate'), 2)}, "
        f"routed score {_text(held.get('quality'))} vs Always-RAG {_text(held.get('always_quality'))} (difference "
        f"{_text(held.get('difference'), 1, 100, '+')} points {_pair(held.get('difference_interval'), 1, 100, '+')}"
        f"), {_text(held.get('cost'), 1)} vs {_text(held.get('always_cost'), 1)} {unit} per question (saving "
        f"{_text(held.get('saving'), 0, 100)} % {_pair(held.get('saving_interval'), 0, 100)})"
    )
    if record.get("caution"):
        lines.append(f"note: {record['caution']}")
    return lines


def _text(value: Any, digits: int = 3, scale: float = 1.0, sign: str = "") -> str:
    return "—" if value is None else f"{scale * value:{sign}.{digits}f}"


def _pair(values: Any, digits: int, scale: float = 1.0, sign: str = "") -> str:
    if not values or any(v is None for v in values):
        return "[no interval]"
    return f"[{_text(values[0], digits, scale, sign)}, {_text(values[1], digits, scale, sign)}]"


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN interval ends) as None, numpy scalars as Python's: strict JSON."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
