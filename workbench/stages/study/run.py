"""Stage ``study``: tune each method's thresholds and decoding coefficients with Optuna on the ``val`` split.

For every method in ``study.methods`` the stage opens (or joins) the Optuna study ``<study_name>-<method>`` in
``study.storage`` (a SQLite file in the run directory by default; any Optuna storage URL otherwise), and runs trials
until it holds ``study.n_trials`` complete ones. Each trial scores its parameters on the first ``study.limit``
questions of ``study.split`` through the evaluate stage's own function (:class:`~workbench.tuning.objective.
MethodObjective`); threshold parameters are replays of traces computed once, so most trials generate nothing. The
paper's defaults are the first trial (when they lie inside the space) and are scored in any case. The chosen
parameters (:func:`~workbench.tuning.study.pick_best`: constraints first, then quality, then tokens — the order of the
trial values Optuna stores, so ``study.best_trial`` is this trial, and the rule and the trial number are the study's
``pick_rule`` / ``pick_trial`` user attributes) and the defaults are then scored **once** on ``study.test_split``,
which no trial reads.

What is method-specific comes from the method's spec (:class:`~workbench.methods.spec.MethodSpec`): its space, its
replay rule, and its hooks — ``study_prepare`` refuses what cannot be studied and records how the trials ran the
method (D²-RAG is tuned as its bundle runs it, with the run's fitted gold-free utility, never the gold-using oracle),
``check_study_space`` refuses a parameter that would change nothing (D²-RAG's ``tau_pos`` / ``tau_neg`` under a
utility classifier).

**A learned part's threshold** (a spec's ``learned_params``: D²-RAG's τ, which classify chose) replaces the stage's
only when the study says so (:func:`tau_verdict`): ``study.ship_tau`` is true (default false) and the study separated
its trials — at most half of them tie with the chosen one and it beats the stage's value on the study split.
Otherwise the stage's value is kept, and the log, ``summary.json`` and the report say why.

Outputs: ``best_params.json`` — ``{"methods": {method: options}, "<method>_<param>": the learned threshold (only
when shipped), "<method>_<param>_verdict": the verdict, "<method>_<prepared_key>": what the method's preparation
recorded (D²-RAG's utility), "fitted_on": the questions the trials were scored on}``, what the evaluate stage and the
bundle export lay over the recipe's ``evaluate.options`` (and over the learned threshold); ``params/<method>.json`` —
one method's chosen parameters (``trial``: its number in the study) with their val and test metrics next to the
defaults' (``workbench evaluate --params FILE`` reads one; a learned threshold ``<param>`` is there only when the
study separated its trials, ``<param>_found`` always; the method's preparation record too: export refuses a file or
a study that does not say its utility was gold-free) and ``fitted_on`` (split, count, sha256 and ids of the
questions it was tuned on: a bundle's provenance names them, and its export refuses them among its held-out
questions).
``summary.json`` — per method: the search space, trials by kind with trials / s, every complete trial (history),
the Pareto front (multi-objective), and the storage to open in optuna-dashboard.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from workbench.bundle.learned import read_params
from workbench.bundle.provenance import question_record
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.methods.registry import method_spec
from workbench.stages.context import StageContext
from workbench.tuning.space import parse_spaces
from workbench.tuning.storage import describe_storage, open_storage, storage_url

__all__ = ["default_params", "read_params", "run", "tau_verdict"]


def default_params(method: str, specs: Any, learned: Any) -> dict[str, Any]:
    """The paper defaults of the parameters in ``specs`` (a learned part's parameter, D²-RAG's ``tau``: the value
    the run's stages chose)."""

    method_facts = method_spec(method, "study.methods")
    cls = method_facts.settings_class()
    defaults = {f.name: f.default for f in fields(cls)} if cls is not None else {}
    out = {}
    for spec in specs:
        if spec.name in method_facts.learned_params:
            value = getattr(learned, method_facts.learned_params[spec.name], None) if learned is not None else None
            if value is not None:
                out[spec.name] = float(value)
        elif spec.name in defaults:
            out[spec.name] = defaults[spec.name]
    return out


def tau_verdict(trials: list[dict[str, Any]], scores: dict[str, Any], objective: str, *, ship: bool) -> dict[str, Any]:
    """Whether a studied learned threshold (D²-RAG's τ) replaces the stage's (``study.ship_tau``). The study
    *separates* its trials when at most half of the complete ``trials`` tie with the chosen one on the study split's
    ``objective`` (to 6 decimals) and the chosen parameters score above the defaults (classify's τ) there
    (``scores``: the stage's best / defaults × val / test metrics); a split too small to tell trials apart ties most
    of them, and its pick among the tied is arbitrary. The τ ships only when ``ship`` and separated; ``reason`` says
    why, or why not, in words."""
    best = round(float(scores["best"]["val"][objective]), 6)
    defaults = round(float(scores["defaults"]["val"][objective]), 6)
    tied = sum(round(float(t["metrics"][objective]), 6) == best for t in trials)
    total = len(trials)
    separated = 2 * tied <= total and best > defaults
    if not separated:
        why = (
            f"{tied} of {total} trials tie with the chosen one on the study split"
            if 2 * tied > total
            else f"the chosen parameters score {best:.3f} on the study split, no better than classify's τ "
            f"({defaults:.3f})"
        )
        reason = f"is not shipped: the study cannot separate its trials ({why}); classify's τ is kept"
    elif not ship:
        reason = "is not shipped: study.ship_tau is false (classify's τ is kept; set it to true to ship the study's)"
    else:
        reason = f"replaces classify's τ (study.ship_tau; {tied} of {total} trials tie with the chosen one)"
    return {
        "ship": bool(ship and separated),
        "separated": bool(separated),
        "ship_tau": bool(ship),
        "tied": int(tied),
        "trials": int(total),
        "best_val": best,
        "defaults_val": defaults,
        "reason": reason,
    }


def _inside(spec: Any, value: Any) -> bool:
    """Whether ``value`` can be enqueued as a trial of ``spec``."""
    if spec.breakpoints:
        return False
    if spec.kind == "categorical":
        return value in spec.choices
    return isinstance(value, int | float) and spec.low <= value <= spec.high


def run(ctx: StageContext) -> dict[str, Any]:
    """Run every method's study; write the parameter files and the summary."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.stages.evaluate.run import build_tools, run_learned
    from workbench.tuning.objective import MethodObjective
    from workbench.tuning.study import StudySettings, run_study

    config, section = ctx.config, ctx.config.study
    specs_by_method = parse_spaces(section.methods, section.space, "study.space")
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    rows = {}
    for key in ("split", "test_split"):
        split = getattr(section, key)
        if split not in qa:
            raise ConfigError(f"split {split!r} not in the dataset (has: {', '.join(qa)})", f"study.{key}")
        data = qa[split]
        limit = len(data) if section.limit is None else min(section.limit, len(data))
        rows[key] = list(data.select(range(limit)))
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    tools = build_tools(ctx, corpus)
    learned = run_learned(ctx, with_study=False)  # the study starts from classify's τ, never from its own output
    facts = {method: method_spec(method, "study.methods") for method in section.methods}
    # each method's own preparation (D²-RAG: how its utility is made; it refuses the gold-using oracle)
    prepared = {m: f.hooks.study_prepare(learned) for m, f in facts.items() if f.hooks.study_prepare is not None}
    url = storage_url(section.storage, ctx.run_dir)
    storage = open_storage(url)
    settings = StudySettings(
        objective=section.objective,
        multi_objective=section.multi_objective,
        constraints=dict(section.constraints),
        token_budget=section.token_budget,
        n_trials=section.n_trials,
        seed=config.seed,
        sampler=section.sampler,
    )
    fitted_on = question_record(section.split, [str(row["id"]) for row in rows["split"]])  # what the picks saw
    base_name = section.study_name.format(name=config.name)
    params_dir = ctx.out_dir / "params"
    params_dir.mkdir(parents=True, exist_ok=True)
    methods_out: dict[str, Any] = {}
    flat: dict[str, Any] = {}
    for method in section.methods:
        specs, spec_of_method = specs_by_method[method], facts[method]
        if spec_of_method.hooks.check_study_space is not None:
            spec_of_method.hooks.check_study_space([spec.name for spec in specs], prepared.get(method))
        # the recipe's options as configured at load: a trial configures only the values it changes
        common = {
            "options": config.evaluate.method_config(method),
            "learned": learned,
            "batch_questions": section.batch_questions,
        }
        on_val = MethodObjective(tools, method, rows["split"], specs, **common)
        defaults = default_params(method, specs, learned)
        breakpoints = None
        if any(s.breakpoints for s in specs) and spec_of_method.breakpoints is not None:
            breakpoints = spec_of_method.breakpoints(on_val.run({}))
            if not breakpoints:
                what = f"{method}: no values on the study split to place its breakpoints between"
                raise ConfigError(what, "study.space")
        fixed = defaults if all(_inside(s, defaults.get(s.name)) for s in specs) else None
        ctx.log.info(
            "study %s-%s: %d trials on %d %s questions",
            base_name,
            method,
            section.n_trials,
            len(on_val.rows),
            section.split,
        )
        outcome = run_study(
            storage, f"{base_name}-{method}", specs, on_val, settings, breakpoints=breakpoints, fixed=fixed
        )
        on_test = MethodObjective(tools, method, rows["test_split"], specs, **common)
        scores = {
            "best": {"val": outcome.best_metrics, "test": on_test(outcome.best_params)[0]},
            "defaults": {"val": on_val(defaults)[0], "test": on_test(defaults)[0]},
        }
        chosen_options = {k: v for k, v in outcome.best_params.items() if k not in spec_of_method.learned_params}
        record = {
            "method": method,
            "options": chosen_options,
            "study": outcome.name,
            "storage": describe_storage(url),
            "objective": section.objective,
            "trial": outcome.best_number,  # Optuna's study.best_trial (single objective): the study's pick_trial
            "feasible": outcome.feasible,
            "defaults": defaults,
            "scores": scores,
            "fitted_on": fitted_on,  # the questions every trial was scored on (a bundle's provenance names them)
        }
        for param in spec_of_method.learned_params:  # a learned part's threshold (D²-RAG's τ): shipped on a verdict
            if param not in outcome.best_params:
                continue
            verdict = tau_verdict(outcome.trials, scores, section.objective, ship=section.ship_tau)
            record[f"{param}_found"], record[f"{param}_verdict"] = float(outcome.best_params[param]), verdict
            if verdict["separated"]:  # a parameters file may carry it to another run (the user asks there)
                record[param] = record[f"{param}_found"]
            log = ctx.log.info if verdict["ship"] else ctx.log.warning
            log("study %s-%s: %s = %.4g %s", base_name, method, param, record[f"{param}_found"], verdict["reason"])
        if method in prepared:  # how the trials ran the method (D²-RAG: its utility; export refuses a gold-using one)
            record[spec_of_method.hooks.prepared_key] = prepared[method]
        atomic_write_json(params_dir / f"{method}.json", record)
        importances = _importances(storage, outcome.name, config.seed) if len(specs) > 1 else {specs[0].name: 1.0}
        methods_out[method] = {
            "importances": importances,
            **record,
            "params": outcome.best_params,
            "space": {s.name: s.to_dict() for s in specs},
            "breakpoints": breakpoints,
            "kinds": outcome.kinds,
            "recovered": outcome.recovered,
            "trials": outcome.trials,
            "pareto": [t["number"] for t in outcome.pareto],
        }
        objective = section.objective
        flat[f"{method}_val_{objective}"] = round(scores["best"]["val"][objective], 4)
        flat[f"{method}_test_{objective}"] = round(scores["best"]["test"][objective], 4)
        flat[f"{method}_trials"] = len(outcome.trials)
        for param in spec_of_method.learned_params:
            if f"{param}_verdict" in record:
                flat[f"{method}_{param}_shipped"] = record[f"{param}_verdict"]["ship"]
    best = {"methods": {m: row["options"] for m, row in methods_out.items()}, "fitted_on": fitted_on}
    for method, row in methods_out.items():
        for param in facts[method].learned_params:
            verdict = row.get(f"{param}_verdict")
            if verdict is not None:
                best[f"{method}_{param}_verdict"] = verdict
                if verdict["ship"]:  # only then does the study's value replace the stage's (evaluate, export)
                    best[f"{method}_{param}"] = row[param]
        if method in prepared:
            best[f"{method}_{facts[method].hooks.prepared_key}"] = prepared[method]
    atomic_write_json(ctx.out_dir / "best_params.json", best)  # what evaluate and export overlay on the recipe's
    atomic_write_json(
        ctx.out_dir / "summary.json",
        {
            "split": section.split,
            "test_split": section.test_split,
            "questions": {"val": len(rows["split"]), "test": len(rows["test_split"])},
            "objective": section.objective,
            "multi_objective": section.multi_objective,
            "constraints": dict(section.constraints),
            "token_budget": section.token_budget,
            "storage": describe_storage(url),
            "methods": methods_out,
        },
    )
    return flat


def _importances(storage: Any, name: str, seed: int = 0) -> dict[str, float]:
    """Optuna's fANOVA parameter importances of the study's first objective ({} when too few distinct trials).

    fANOVA (the share of the objective's variance each parameter explains) is named explicitly: Optuna 5's default,
    PED-ANOVA, ranks parameters by how they reach *low* values of a custom target, which for a maximised quality
    would explain the worst trials."""
    import optuna

    try:
        study = optuna.load_study(study_name=name, storage=storage)
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
        found = optuna.importance.get_param_importances(study, evaluator=evaluator, target=lambda t: t.values[0])
        return {k: float(v) for k, v in found.items()}
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}
