"""What a finished run learned, read from its stage outputs: D²-RAG's learned parts (calibrators, the chosen
classifier or router and its τ, the utility predictor, the LARS scorer, the stats settings, the OOD profile), the
study's chosen parameters and the ``evaluate.params`` files.

The evaluate stage runs its methods with these and the bundle export ships the same (:func:`evaluated_config`,
:func:`evaluated_options`, :func:`evaluated_learned`), so a bundle runs what evaluate measured: evaluate records
their digest (:func:`parameters_digests`) and the export checks it. Who set each value — classify, the study, a
parameters file, the recipe, a method default — is told by the same layering (:func:`option_setters`,
:func:`tau_setter`), for the bundle's provenance. Everything here reads files (JSON and the learned-artifact protocol
of :mod:`workbench.methods.learned`) and imports no stage: it sits below the stages, with the bundle.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.core.errors import ConfigError
from workbench.core.hashing import stable_hash
from workbench.methods.learned import CLASSIFIER_KINDS, UTILITY_KINDS, LearnedParts
from workbench.methods.learned import load_learned as load_artifact


def load_learned(
    calibrate_dir: Path | None,
    classify_dir: Path | None,
    utility_dir: Path | None,
    collect_dir: Path | None = None,
    study_dir: Path | None = None,
) -> Any:
    """D²-RAG's learned parts from the stage outputs that exist (None when classify did not run), each read through
    the learned-artifact protocol (:func:`workbench.methods.learned.load_learned`). When classify's router search
    picked a router (``selection.json``'s ``router``), D²-RAG's Stage 1 is that router — its own features,
    calibrators, classifier and τ — else the chosen classifier over every calibrated feature.

    ``collect_dir`` supplies the LARS scorer the collection fitted (``lars_scorer.json``), which the ``lars`` feature
    needs at answer time, and the stats settings the features were collected with (``metadata.json``). A ``study``
    output whose ``best_params.json`` holds a shipped τ (:func:`recorded_tau`) replaces classify's (rule
    ``study``). The calibrate output's ``ood.json``, when there is one, is the OOD profile D²-RAG checks its
    questions against."""

    if calibrate_dir is None or classify_dir is None:
        return None
    selection = json.loads((classify_dir / "selection.json").read_text())
    router = selection.get("router")
    if router is not None:  # the router the search picked: its own features, calibrators, classifier and τ
        files = router["files"]
        calibrators = load_artifact(classify_dir / files["calibrators"], expect={"calibrator_set"})
        classifier = load_artifact(classify_dir / files["classifier"], expect=CLASSIFIER_KINDS)
        threshold = {"rule": router["rule"], "tau": router["tau"]}
    else:
        calibrators = load_artifact(calibrate_dir / "calibrators.json", expect={"calibrator_set"})
        chosen = selection["chosen"]
        classifier = load_artifact(classify_dir / f"{chosen}.json", expect=CLASSIFIER_KINDS)
        threshold = selection["thresholds"]["LR" if chosen == "logistic" else "MLP"]
    utility = None
    if utility_dir is not None:
        utility = load_artifact(utility_dir / "utility.json", expect=UTILITY_KINDS)
    lars, stats = None, None
    if collect_dir is not None:
        if (collect_dir / "lars_scorer.json").is_file():
            lars = load_artifact(collect_dir / "lars_scorer.json", expect={"lars"})
        stats = collected_stats(collect_dir)
    rule, tau = str(threshold.get("rule", "")), threshold["tau"]
    studied = recorded_tau(study_params(study_dir))
    if studied is not None:
        rule, tau = "study", float(studied)
    ood_file = calibrate_dir / "ood.json"  # absent from calibrate outputs made before the OOD profile
    ood = load_artifact(ood_file, expect={"ood_profile"}) if ood_file.is_file() else None
    return LearnedParts.assemble(
        calibrators, classifier, tau, utility=utility, lars_scorer=lars, stats=stats, tau_rule=rule, ood=ood
    )


def collected_stats(collect_dir: Path) -> Any:
    """The :class:`~workbench.uncertainty.calculators.StatSettings` a ``collect`` output was made with."""
    from workbench.uncertainty.calculators import StatSettings

    meta = json.loads((collect_dir / "metadata.json").read_text())
    return StatSettings.from_dict(meta["settings"], f"{collect_dir / 'metadata.json'}: settings")


def study_params(study_dir: Path | None) -> dict[str, Any]:
    """A study stage's ``best_params.json`` (``{"methods": {method: options}, "<method>_<param>": a learned part's
    value, ...}``; {} without one)."""
    if study_dir is None or not (study_dir / "best_params.json").is_file():
        return {}
    return json.loads((study_dir / "best_params.json").read_text())


def recorded_tau(record: dict[str, Any]) -> Any:
    """The decision policy's τ a run's record holds (a study's ``best_params.json``, evaluate's ``summary.json``):
    under the first of the registry's :func:`~workbench.methods.registry.learned_keys` for ``tau`` it gives
    (``<method>_<param>`` of a method's study parameter that sets τ, D²-RAG's ``tau``), as recorded; None when it
    gives none."""
    from workbench.methods.registry import learned_keys

    return next((record[key] for key in learned_keys("tau") if record.get(key) is not None), None)


def read_params(path: Path) -> dict[str, Any]:
    """A ``params/<method>.json`` file: ``{method, options, tau?}``; ConfigError naming the file when malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read study parameters: {exc}", str(path)) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("method"), str)
        or not isinstance(data.get("options"), dict)
    ):
        raise ConfigError("not a study parameters file (needs 'method' and 'options')", str(path))
    return data


@dataclasses.dataclass(frozen=True)
class Setter:
    """Who set a shipped value: ``stage`` is ``classify``, ``study``, ``params`` (an ``evaluate.params`` file: a study
    of this or another run, or the user's own file), ``recipe`` (the user's choice in the recipe) or ``default`` (the
    method's own default); ``source`` names the file or key it came from (None for a default)."""

    stage: str
    source: str | None = None


def option_layers(config: Any, name: str, study_dir: Path | None) -> list[tuple[Setter, dict[str, Any]]]:
    """The layers method ``name``'s options are built from, first to last (a later one wins): the retriever's k
    (baselines), the recipe's ``evaluate.options``, the run's study, each ``evaluate.params`` file naming the method;
    each with who set it."""
    layers: list[tuple[Setter, dict[str, Any]]] = []
    if name in ("standard_rag", "oracle"):
        layers.append((Setter("recipe", "retrieval.k"), {"k": config.retrieval.k}))
    layers.append((Setter("recipe", f"evaluate.options.{name}"), dict(config.evaluate.options.get(name, {}) or {})))
    if study_dir is not None:
        studied = study_params(study_dir).get("methods", {}).get(name, {}) or {}
        layers.append((Setter("study", str(study_dir / "best_params.json")), dict(studied)))
    for path in config.evaluate.params:
        params = read_params(Path(path))
        if params["method"] == name:
            layers.append((Setter("params", str(path)), dict(params["options"])))
    return layers


def evaluated_options(config: Any, name: str, study_dir: Path | None) -> dict[str, Any]:
    """Method ``name``'s options as the evaluate stage runs it: the recipe's ``evaluate.options``, overlaid by the
    run's study (``study_dir``, when it has one) and then by the ``evaluate.params`` files (``workbench evaluate
    --params FILE``) that name this method (:func:`option_layers`). The bundle export calls it too, so a bundle runs
    what evaluate ran."""
    options: dict[str, Any] = {}
    for _, layer in option_layers(config, name, study_dir):
        options.update(layer)
    return options


def evaluated_config(config: Any, name: str, study_dir: Path | None) -> Any:
    """Method ``name``'s :class:`~workbench.methods.registry.MethodConfig` as the evaluate stage runs it: the
    recipe's, configured when the recipe was loaded (``config.evaluate.method_config``), with the layers of
    :func:`evaluated_options` over it — configured again only when a layer sets a value the recipe did not give
    (the run's study, an ``evaluate.params`` file, the retriever's k of a baseline: a new source). The bundle export
    calls it too."""
    return config.evaluate.method_config(name).updated(evaluated_options(config, name, study_dir))


def option_setters(config: Any, name: str, study_dir: Path | None) -> dict[str, Setter]:
    """Who set each option of :func:`evaluated_options` (the last layer holding it)."""
    return {key: setter for setter, layer in option_layers(config, name, study_dir) for key in layer}


def _params_tau(config: Any) -> tuple[float, str] | None:
    """``(τ, file)`` of the last of ``config.evaluate.params`` that gives the decision policy's τ (None: none
    does)."""
    found = [(read_params(Path(p)).get("tau"), str(p)) for p in config.evaluate.params]
    found = [(float(tau), path) for tau, path in found if tau is not None]
    return found[-1] if found else None


def config_params_tau(config: Any) -> float | None:
    """The decision policy's τ from the last of ``config.evaluate.params`` that gives one (None: none does)."""
    found = _params_tau(config)
    return None if found is None else found[0]


def tau_setter(config: Any, study_dir: Path | None, learned: Any) -> Setter:
    """Who set the decision policy's τ as :func:`evaluated_learned` resolves it (``learned``: what it returned): the
    last ``evaluate.params`` file giving one, else the run's study (its ``best_params.json``'s
    :func:`recorded_tau`), else classify (``source``: the rule it chose τ by)."""
    found = _params_tau(config)
    if found is not None:
        return Setter("params", found[1])
    if recorded_tau(study_params(study_dir)) is not None:
        return Setter("study", str(study_dir / "best_params.json"))
    return Setter("classify", getattr(learned, "tau_rule", None) or None)


def parameters_digests(options: dict[str, dict[str, Any]], tau: float | None) -> dict[str, str]:
    """``{method: sha256}`` of the decision parameters each method runs with: its options and, for a method that
    decides with the fitted decision policy (D²-RAG and its oracle variant), the policy's ``tau``. The evaluate
    stage records them (``summary.json``'s
    ``parameters_sha256``) and the export recomputes them for what it ships: a difference is refused, so a bundle
    never ships a parameter evaluate did not run (an ``evaluate.params`` file edited after the run)."""
    from workbench.methods.registry import uses_decision_policy

    return {
        method: stable_hash({"options": values, **({"tau": tau} if uses_decision_policy(method) else {})}, length=64)
        for method, values in options.items()
    }


def evaluated_learned(config: Any, stage_dir: Callable[[str], Path | None]) -> Any:
    """D²-RAG's learned parts as the evaluate stage runs them: :func:`load_learned` over the run's outputs
    (``stage_dir(name)``: a stage's output directory or None; a study's τ included), then the τ of
    ``evaluate.params`` (rule ``study``). The bundle export calls it too."""
    learned = load_learned(
        stage_dir("calibrate"),
        stage_dir("classify"),
        stage_dir("fit_utility"),
        stage_dir("collect"),
        stage_dir("study"),
    )
    tau = config_params_tau(config)
    if tau is not None and learned is not None:
        learned = dataclasses.replace(learned, tau=tau, tau_rule="study")
    return learned
