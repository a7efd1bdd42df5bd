"""Stage ``transfer``: how far the calibrators and the shipped retrieval decision travel to another question family.

The run's calibrators (``calibrate``) and the decision D²-RAG ships (``classify``'s router when its search picked
one, else the chosen classifier and its τ: :func:`workbench.bundle.learned.load_learned`, exactly what a bundle
holds) were fitted on the questions of ``data.templates``. This stage measures them twice on the same split's
articles (``transfer.split``, default ``test``):

* **in distribution** — the run's own collected rows of that split (``collect``'s ``<split>/`` dataset);
* **shifted** — questions of the other template family (``transfer.templates``, default the open-answer ``cloze``,
  ``description``, ``two_hop``), built by the wiki-qa builder with the run's seed, fractions and OOD topics (so the
  articles are that split's articles: :func:`shifted_questions`), the first ``transfer.limit`` of them answered and
  featured by the collect stage's own code (:func:`workbench.stages.collect.run.collect_split` under the run's
  ``collect`` settings, labels ``rag`` only; the LARS feature scored by the collection's scorer).

On each it computes (:func:`measure`): per calibrated feature the raw feature's AUROC and the calibrated one's ECE for
calibrate's label; the shipped decision's AUROC, ECE and Brier of P(correct) and its mean P against the accuracy;
routing quality — the routed score (``classify.routed_score``: retrieve iff P < τ) against Always-RAG, No-RAG and
the oracle, the retrieval rate and the share of Always-RAG's lift kept — with paired bootstrap intervals
(``transfer.bootstrap`` resamples of the questions); the OOD flag's rate (:func:`ood_checks`: in distribution its
false-positive rate, shifted its detection rate), with a Wilson interval and the count of each failed check; and the
same per template.

On the shifted questions it also sets every router of classify's routing table fitted in-task (cross-fitted on those
questions) against the same router transferred from ``data.templates`` (:func:`router_table`,
:mod:`workbench.stages.transfer.in_task`): the target task's own routing table and, router by router, in-task −
transferred with paired BCa intervals.

Outputs: ``transfer.json`` (both conditions, the shift Δ = shifted − in distribution, ``routers``, settings) and
``shifted/`` (an HF dataset: the shifted rows as collect writes them, plus ``template`` and ``doc_ids``). Checkpointed
per chunk like collect, so an interrupted stage resumes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.bundle.learned import load_learned as load_shipped
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.ood_features import FeatureNovelty
from workbench.calibration.ood_rates import flag_summary
from workbench.calibration.oof import stratified_folds
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, DataError
from workbench.methods.learned import load_learned
from workbench.metrics.bootstrap import bootstrap_intervals
from workbench.metrics.calibration import brier, ece
from workbench.metrics.ranking import auroc
from workbench.stages.calibrate.run import binary_labels
from workbench.stages.collect.run import LABELS, build_tools, collect_split
from workbench.stages.context import StageContext
from workbench.stages.transfer.in_task import (
    classifier_settings,
    compare_routers,
    in_task_routers,
    threshold_chooser,
    transferred_routers,
)

CONDITIONS = ("in_distribution", "shifted")
"""The two conditions of ``transfer.json``, in report order."""
SHIFTED = "shifted"
"""The scratch folder and output dataset of the shifted rows."""
LEVEL = 0.9
"""Coverage of the bootstrap intervals."""


# --------------------------------------------------------------------------------------------- recipe checks


def check_recipe(config: Any) -> None:
    """The transfer settings a recipe can get wrong, refused at load (one-line ConfigError naming the key): wiki-qa,
    known shifted templates outside data.templates. Its split's agreement with collect.splits and
    calibrate.fit_split is declared in :data:`workbench.stages.agreements.AGREEMENTS` (checked at load)."""
    from workbench.data.wikiqa import TEMPLATES

    section = config.transfer
    if config.data.dataset != "wiki-qa":
        raise ConfigError(
            f"transfer builds its shifted questions from wiki-qa templates; data.dataset is {config.data.dataset!r}",
            "data.dataset",
        )
    unknown = [t for t in section.templates if t not in TEMPLATES]
    if unknown or not section.templates:
        raise ConfigError(
            f"unknown template(s) {unknown or 'none given'} (known: {', '.join(TEMPLATES)})", "transfer.templates"
        )
    if section.in_task_folds == 1:
        raise ConfigError("cross-fitting needs at least 2 folds (0: no in-task routers)", "transfer.in_task_folds")
    shared = [t for t in section.templates if t in config.data.templates]
    if shared:
        raise ConfigError(
            f"{shared} are also data.templates: shifted questions come from templates the calibrators never saw",
            "transfer.templates",
        )


# --------------------------------------------------------------------------------------------- shifted questions


def template_of(row: dict[str, Any]) -> str:
    """The wiki-qa template a QA row came from (its ``metadata`` JSON; ``?`` when it has none)."""
    try:
        return str(json.loads(row.get("metadata") or "{}").get("template", "?"))
    except (TypeError, json.JSONDecodeError):
        return "?"


def shifted_questions(config: Any) -> Any:
    """The ``transfer.split`` split of wiki-qa built with ``transfer.templates`` instead of ``data.templates``: the
    same builder, seed, fractions, per-template cap and OOD topics as build_data, so the articles are that split's
    articles (the article assignment does not depend on the templates). An HF Dataset, in the builder's order."""
    from workbench.data.wikiqa import build_wikiqa, load_articles

    data, section = config.data, config.transfer
    try:
        qa = build_wikiqa(
            load_articles(),
            seed=config.seed,
            templates=tuple(section.templates),
            max_per_template=data.max_per_template,
            fractions=tuple(data.fractions),
            ood_topics=list(data.ood_topics),
        )
    except ValueError as exc:
        raise ConfigError(str(exc).splitlines()[0], "transfer.templates") from None
    return qa[section.split]


def collect_shifted(ctx: StageContext, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Features and labels of ``rows`` by the collect stage's code under the run's ``collect`` settings (stats graph,
    features, passages), with labels ``rag`` (and what ``calibrate.label`` needs) and no shard; checkpointed in this
    stage's scratch directory. The ``lars`` feature is scored by the collection's scorer (NaN without one); each
    record gets its ``template`` and its articles' ``doc_ids``."""

    config = ctx.config
    labels = {"rag", LABELS.get(config.calibrate.label, {}).get("needs")} - {None}  # + what calibrate's label needs
    collect = dataclasses.replace(config.collect, labels=sorted(labels), shard="0/1", limit=None)
    shim = dataclasses.replace(ctx, config=dataclasses.replace(config, collect=collect))
    records = collect_split(shim, SHIFTED, rows, build_tools(shim))
    scorer = _lars_scorer(ctx.inputs["collect"]) if "lars" in collect.features else None
    for record, row in zip(records, rows, strict=True):
        record["template"] = template_of(row)
        record["doc_ids"] = [str(d) for d in json.loads(row.get("metadata") or "{}").get("doc_ids", [])]
        if scorer is not None:
            record["lars"] = float(scorer.predict(record["greedy_logprobs"]))
    return records


def _features_detector(calibrate_dir: Path) -> Any:
    """The calibrate stage's detector on the uncertainty features (``ood_features.json``; None without one)."""

    path = calibrate_dir / "ood_features.json"
    return FeatureNovelty.from_dict(json.loads(path.read_text())) if path.is_file() else None


def _lars_scorer(collect_dir: Path) -> Any:
    path = collect_dir / "lars_scorer.json"
    return load_learned(path, expect={"lars"}) if path.is_file() else None


def in_distribution_rows(collect_dir: Path, qa_split: Any, split: str) -> list[dict[str, Any]]:
    """The run's collected rows of ``split`` (each with its ``template``, read from the build_data row of its id)."""
    import datasets

    path = collect_dir / split
    if not path.exists():
        raise DataError(f"the collection has no rows of split {split!r}", str(collect_dir))
    ids, metadata = qa_split["id"], qa_split["metadata"]
    templates = {str(i): template_of({"metadata": m}) for i, m in zip(ids, metadata, strict=True)}
    rows = datasets.load_from_disk(str(path)).to_list()
    for row in rows:
        row["template"] = templates.get(str(row["id"]), "?")
    return rows


# --------------------------------------------------------------------------------------------- measuring


def ood_checks(profile: Any, rows: Sequence[dict[str, Any]], embedder: Callable[[], Any]) -> list[list[str]] | None:
    """Each row's failed OOD checks under the run's profile (None without one), its embedding check run with the
    run's embedder (``embedder()``, built only when the profile has an embedding check)."""
    if profile is None:
        return None
    embed = profile.embedder_for(embedder()) if profile.embedding is not None else None
    if profile.embedding is not None and embed is None:
        raise DataError("the run's embedder is not the one the OOD profile was fitted with", "transfer")
    return [result.checks for result in profile.check_questions([str(r["question"]) for r in rows], embed)]


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _ece(p: np.ndarray, y: np.ndarray) -> float:
    """ECE (10 equal-width bins), NaN when ``p`` leaves [0, 1] (a raw-input router's values are not probabilities)."""

    finite = p[np.isfinite(p)]
    if finite.size == 0 or finite.min() < 0.0 or finite.max() > 1.0:
        return math.nan
    return ece(p, y)


def paired_intervals(
    statistics: dict[str, Callable[[np.ndarray], float]], n: int, *, draws: int, seed: int
) -> dict[str, list[float | None]]:
    """A ``LEVEL`` interval of each statistic over the same ``draws`` resamples of ``n`` questions (each statistic
    takes the resampled indices): the workbench's one bootstrap helper
    (:func:`workbench.metrics.bootstrap.bootstrap_intervals`: BCa, the percentile interval where BCa is undefined)."""

    if n == 0 or draws < 1:
        return {name: [None, None] for name in statistics}
    names = list(statistics)
    intervals = bootstrap_intervals(
        lambda idx: [statistics[name](idx) for name in names], n, n_resamples=draws, level=LEVEL, seed=seed
    )
    return {
        name: [float(i.low), float(i.high)] if math.isfinite(i.low) and math.isfinite(i.high) else [None, None]
        for name, i in zip(names, intervals, strict=True)
    }


def cleaned_features(calibrators: Any, records: Sequence[dict[str, Any]]) -> np.ndarray:
    """The ``(rows, features)`` matrix of the calibrators' features, imputed as the calibrator set imputes."""
    return np.asarray([calibrators.clean({f: r.get(f, math.nan) for f in calibrators.features})[0] for r in records])


def _routing(closed: np.ndarray, rag: np.ndarray, retrieve: np.ndarray) -> dict[str, float | None]:
    routed = np.where(retrieve, rag, closed)
    no_rag, always = float(closed.mean()), float(rag.mean())
    lift = always - no_rag
    return {
        "routed": float(routed.mean()),
        "always_rag": always,
        "no_rag": no_rag,
        "oracle": float(np.maximum(closed, rag).mean()),
        "retrieval_rate": float(retrieve.mean()),
        "routed_minus_always": float(routed.mean()) - always,
        "lift_kept": (float(routed.mean()) - no_rag) / lift if abs(lift) > 1e-12 else None,
    }


def measure(
    records: Sequence[dict[str, Any]],
    *,
    labels: np.ndarray,
    calibrators: Any,
    policy: Any,
    routed_score: str,
    ood_checks: Sequence[Sequence[str]] | None = None,
    draws: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """One condition's figures: per calibrated feature (``calibrators``, a CalibratorSet) the raw AUROC, the calibrated
    AUROC and ECE and the non-finite count; the shipped ``policy``'s (a DecisionPolicy) AUROC / ECE / Brier of
    P(correct) against the 0/1 ``labels``; routing by ``correct_<routed_score>`` / ``rag_<routed_score>`` at τ; the
    OOD flag (``ood``: :func:`~workbench.calibration.ood_rates.flag_summary` of each row's failed checks
    ``ood_checks``; None without a profile); bootstrap intervals (``draws`` paired resamples); and the same per
    template."""

    n = len(records)
    y = np.asarray(labels, dtype=float)
    if y.size != n:
        raise DataError(f"{n} rows but {y.size} labels", "transfer")
    if n == 0:
        raise DataError("no rows to measure", "transfer")
    features: dict[str, Any] = {}
    cleaned = cleaned_features(calibrators, records)
    calibrated = calibrators.transform(cleaned)
    for j, name in enumerate(calibrators.features):
        raw = np.asarray([r.get(name, math.nan) for r in records], dtype=float)
        features[name] = {
            "auroc": _finite(auroc(raw, y)),
            "auroc_calibrated": _finite(auroc(calibrated[:, j], y)),
            "ece": _finite(_ece(calibrated[:, j], y)),
            "non_finite": int((~np.isfinite(raw)).sum()),
        }
    p = policy.p_correct([{f: r.get(f, math.nan) for f in policy.features} for r in records])
    retrieve = p < policy.tau
    closed = np.asarray([r[f"correct_{routed_score}"] for r in records], dtype=float)
    rag = np.asarray([r[f"rag_{routed_score}"] for r in records], dtype=float)
    decision = {
        "auroc": _finite(auroc(p, y)),
        "ece": _finite(_ece(p, y)),
        "brier": _finite(brier(p, y)),
        "mean_p_correct": float(p.mean()),
        "accuracy": float(y.mean()),
    }
    routing = _routing(closed, rag, retrieve)
    intervals = paired_intervals(
        {
            "decision_auroc": lambda i: auroc(p[i], y[i]),
            "decision_ece": lambda i: _ece(p[i], y[i]),
            "routed": lambda i: float(np.where(retrieve[i], rag[i], closed[i]).mean()),
            "routed_minus_always": lambda i: float((np.where(retrieve[i], rag[i], closed[i]) - rag[i]).mean()),
        },
        n,
        draws=draws,
        seed=seed,
    )
    if ood_checks is not None and len(ood_checks) != n:
        raise DataError(f"{n} rows but {len(ood_checks)} OOD checks", "transfer")
    templates = [str(r.get("template", "?")) for r in records]
    by_template = {}
    for template in sorted(set(templates)):
        mask = np.asarray([t == template for t in templates])
        by_template[template] = {
            "rows": int(mask.sum()),
            **_routing(closed[mask], rag[mask], retrieve[mask]),
            "decision_auroc": _finite(auroc(p[mask], y[mask])),
            "decision_ece": _finite(_ece(p[mask], y[mask])),
        }
    return {
        "rows": n,
        "templates": {t: templates.count(t) for t in sorted(set(templates))},
        "features": features,
        "decision": decision,
        "routing": routing,
        "intervals": intervals,
        "ood": None if ood_checks is None else flag_summary(ood_checks),
        "by_template": by_template,
        "p_correct": [float(v) for v in p],
        "labels": [float(v) for v in y],
    }


def shift(in_dist: dict[str, Any], shifted: dict[str, Any]) -> dict[str, Any]:
    """Shifted − in distribution for the headline figures and each feature's AUROC / ECE (None where undefined)."""

    def delta(a: Any, b: Any) -> float | None:
        return None if a is None or b is None else float(b) - float(a)

    return {
        "decision_auroc": delta(in_dist["decision"]["auroc"], shifted["decision"]["auroc"]),
        "decision_ece": delta(in_dist["decision"]["ece"], shifted["decision"]["ece"]),
        **{
            key: delta(in_dist["routing"][key], shifted["routing"][key])
            for key in ("routed", "routed_minus_always", "retrieval_rate", "lift_kept")
        },
        "ood_flag_rate": delta(*(None if c["ood"] is None else c["ood"]["rate"] for c in (in_dist, shifted))),
        "features": {
            name: {
                "auroc": delta(m["auroc"], shifted["features"][name]["auroc"]),
                "ece": delta(m["ece"], shifted["features"][name]["ece"]),
            }
            for name, m in in_dist["features"].items()
        },
    }


# --------------------------------------------------------------------------------------------- the stage


def _decision_record(classify_dir: Path, parts: Any) -> dict[str, Any]:
    """What the shipped decision is: the router (its label) or the chosen classifier, its features, τ and rule."""
    selection = json.loads((classify_dir / "selection.json").read_text())
    router = selection.get("router")
    name = router["label"] if router is not None else f"{selection['chosen']} (all calibrated features)"
    return {
        "kind": "router" if router is not None else "classifier",
        "name": name,
        "features": list(parts.features),
        "tau": float(parts.tau),
        "rule": parts.tau_rule,
    }


def router_table(ctx: StageContext, rows: list[dict[str, Any]], calibrators: Any, labels: np.ndarray) -> dict:
    """``transfer.json``'s ``routers``: every classify router fitted in-task on the shifted ``rows`` (cross-fitted,
    ``transfer.in_task_folds``, fewer when the rarer class has fewer questions: ``folds``) against the run's own on
    the same rows (:mod:`workbench.stages.transfer.in_task`); ``unfit``: the in-task classifiers that could not be
    fitted, and why; ``skipped`` says why there are no rows (folds 0, or fewer than 2 questions of a class)."""
    config, folds_wanted = ctx.config, ctx.config.transfer.in_task_folds
    section = config.classify
    smallest = int(min((labels > 0.5).sum(), (labels <= 0.5).sum()))
    folds = min(folds_wanted, smallest)  # every fold holds a question of each class
    record: dict[str, Any] = {"folds": folds, "seed": section.seeds[0], "rows": [], "unfit": {}, "skipped": None}
    if folds_wanted == 0:
        return record | {"skipped": "transfer.in_task_folds is 0"}
    if folds < 2:
        return record | {
            "skipped": f"the shifted questions hold {smallest} of their rarer class: no in-task router can be "
            "cross-fitted (2 folds need 2)"
        }
    features = json.loads((ctx.inputs["classify"] / "selection.json").read_text())["features"]
    order = [list(calibrators.features).index(f) for f in features]
    X = calibrators.transform(cleaned_features(calibrators, rows))[:, order]
    score = section.routed_score
    closed = np.asarray([r[f"correct_{score}"] for r in rows], dtype=float)
    rag = np.asarray([r[f"rag_{score}"] for r in rows], dtype=float)
    in_task, record["unfit"] = in_task_routers(
        X,
        labels,
        features,
        kinds=section.kinds,
        grid_kinds=section.single_feature_kinds,
        folds=stratified_folds(labels, folds, config.seed),
        choose=threshold_chooser(section, closed, rag),
        seed=section.seeds[0],
        val_fraction=section.val_fraction,
        settings=classifier_settings(section),
    )
    inputs = ctx.inputs
    transferred = transferred_routers(X, features, inputs["classify"], inputs["calibrate"], section, config.seed)
    draws = config.transfer.bootstrap
    record["rows"] = compare_routers(in_task, transferred, closed, rag, draws=draws, seed=config.seed)
    return record


def run(ctx: StageContext) -> dict[str, Any]:
    """Build and collect the shifted questions, measure both conditions, write ``transfer.json`` and ``shifted/``."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    config, section = ctx.config, ctx.config.transfer
    check_recipe(config)
    inputs = ctx.inputs
    parts = load_shipped(inputs["calibrate"], inputs["classify"], None, inputs["collect"], inputs.get("study"))
    policy = parts.policy()
    calibrators = load_learned(inputs["calibrate"] / "calibrators.json", expect={"calibrator_set"})
    if not isinstance(calibrators, CalibratorSet):
        raise DataError("calibrators.json is not a calibrator set", str(inputs["calibrate"]))
    meta = json.loads((inputs["calibrate"] / "summary.json").read_text())
    label, threshold = str(meta["label"]), float(meta["label_threshold"])

    qa = load_saved_dataset_dict(inputs["build_data"] / "qa")
    in_rows = in_distribution_rows(inputs["collect"], qa[section.split], section.split)
    questions = shifted_questions(config)
    if section.limit is not None:
        questions = questions.select(range(min(section.limit, len(questions))))
    if len(questions) == 0:
        raise DataError(f"no {section.split} questions of templates {section.templates}", "transfer.templates")
    ctx.log.info("transfer: %d shifted questions (%s) on the %s articles", len(questions), section.split, section.split)
    shifted_rows = collect_shifted(ctx, list(questions))

    score = config.classify.routed_score
    features_detector = _features_detector(inputs["calibrate"])
    conditions, labels = {}, {}
    for name, rows in zip(CONDITIONS, (in_rows, shifted_rows), strict=True):
        labels[name] = binary_labels(rows, label, threshold, f"transfer ({name})")
        conditions[name] = measure(
            rows,
            labels=labels[name],
            calibrators=calibrators,
            policy=policy,
            routed_score=score,
            ood_checks=ood_checks(parts.ood, rows, ctx.resources.embedder),
            draws=section.bootstrap,
            seed=config.seed,
        )
        if features_detector is not None:  # measured only: the OOD flag does not use the features
            checks = features_detector.checks(cleaned_features(calibrators, rows))
            conditions[name]["ood_features"] = flag_summary(checks, names=("features",))
    record = {
        "split": section.split,
        "in_templates": list(config.data.templates),
        "shifted_templates": list(section.templates),
        "label": label,
        "label_threshold": threshold,
        "routed_score": score,
        "bootstrap": {"draws": section.bootstrap, "level": LEVEL},
        "decision": _decision_record(inputs["classify"], parts),
        "ood": None if parts.ood is None else {**parts.ood.calibration, "profile": parts.ood.describe()},
        "conditions": conditions,
        "shift": shift(conditions["in_distribution"], conditions["shifted"]),
        "routers": router_table(
            ctx, shifted_rows, calibrators, binary_labels(shifted_rows, label, threshold, "transfer")
        ),
    }
    atomic_write_json(ctx.out_dir / "transfer.json", record)
    datasets.Dataset.from_list(shifted_rows).save_to_disk(str(ctx.out_dir / SHIFTED))
    in_dist, shifted = conditions["in_distribution"], conditions["shifted"]
    return {
        "in_rows": in_dist["rows"],
        "shifted_rows": shifted["rows"],
        "in_decision_auroc": in_dist["decision"]["auroc"],
        "shifted_decision_auroc": shifted["decision"]["auroc"],
        "in_decision_ece": in_dist["decision"]["ece"],
        "shifted_decision_ece": shifted["decision"]["ece"],
        "in_routed_minus_always": round(in_dist["routing"]["routed_minus_always"], 4),
        "shifted_routed_minus_always": round(shifted["routing"]["routed_minus_always"], 4),
    }
