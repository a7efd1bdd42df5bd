"""Split provenance: which questions each shipped part and parameter was fitted or tuned on, which questions each
held-out figure was measured on — the manifest's ``provenance`` block (docs/bundles.md) — and the export's refusal
when the two overlap.

A shipped value is fitted on questions (the calibrators and the classifier on the calibration split's, a study's τ
on its split's), or on none (a value the recipe or a parameters file gives by hand, a method's default). Each is
recorded with who set it (:class:`~workbench.bundle.learned.Setter`), its split, how many questions and the sha256
of their sorted ids (:func:`workbench.data.article_splits.ids_sha256`); a reader adapter trained by ``tune_reader``
is recorded by its training articles, as its ``adapter.json`` records them. The held-out figures of the manifest's
``metrics`` (the routing table, the features' AUROC, the shipped decision's row, the methods end to end) name the
questions they were measured on the same way; the utility's figures are out of fold on its own training questions
and say so.

:func:`check_held_out` refuses (one line naming the part, the figure and both splits) a bundle whose held-out
figures share a question with anything it ships: the agreements table refuses the same recipes at load
(:data:`workbench.stages.agreements.SPLIT_AGREEMENTS`), this is the check on the ids themselves, for runs made
before it, recipes built in code and parameters files from other runs.

Reads stage outputs as files and imports no stage (it sits below the stages, with the bundle).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.assets import adapter_reference
from workbench.bundle.learned import Setter, option_setters, read_params, tau_setter
from workbench.core.errors import AssetError, ConfigError, DataError
from workbench.data.article_splits import ids_sha256
from workbench.methods.registry import METHOD_TABLE, uses_decision_policy
from workbench.tuning.space import default_spaces


@dataclass(frozen=True)
class Questions:
    """What a shipped value was fitted on, or what a held-out figure was measured on: ``by`` (the stage or setter),
    ``split`` (None: fitted on nothing — a user's choice or a default), the question ``ids`` (None when not known
    one by one: a reader adapter's articles, then ``digest`` and ``count`` stand for them), ``unit`` (``questions``
    or ``articles``), ``source`` (the file or rule it came from) and ``out_of_fold`` (a figure measured out of fold
    on the very questions its predictor was fitted on)."""

    by: str
    split: str | None = None
    ids: frozenset[str] | None = None
    source: str | None = None
    unit: str = "questions"
    digest: str | None = None
    count: int | None = None
    out_of_fold: bool = False

    def record(self, by_key: str) -> dict[str, Any]:
        """The manifest's record: ``{<by_key>, split, questions, ids_sha256[, unit][, source][, out_of_fold]}``."""
        count = len(self.ids) if self.ids is not None else self.count
        digest = ids_sha256(self.ids) if self.ids is not None else self.digest
        out: dict[str, Any] = {by_key: self.by, "split": self.split, "questions": count, "ids_sha256": digest}
        if self.unit != "questions":
            out["unit"] = self.unit
        if self.source is not None:
            out["source"] = self.source
        if self.out_of_fold:
            out["out_of_fold"] = True
        return out


def question_record(split: str, ids: Sequence[str]) -> dict[str, Any]:
    """What a study writes of the questions it tuned on (``fitted_on`` in ``best_params.json`` and each
    ``params/<method>.json``): the split, how many, their sha256 and the ids themselves (so a parameters file read
    by another run can still be checked against that run's held-out questions)."""
    ordered = sorted(str(i) for i in ids)
    return {"split": split, "questions": len(ordered), "ids_sha256": ids_sha256(ordered), "ids": ordered}


def recorded_questions(by: str, record: Any, source: str | None, where: str) -> Questions:
    """A :func:`question_record` read back (from a study's output or a parameters file); DataError naming ``where``
    when it is malformed or its ids do not hash to its digest."""
    ids = record.get("ids") if isinstance(record, dict) else None
    split = record.get("split") if isinstance(record, dict) else None
    if not isinstance(split, str) or not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DataError("'fitted_on' must hold a split and the list of question ids", where)
    if record.get("ids_sha256") != ids_sha256(ids):
        raise DataError("'fitted_on.ids_sha256' is not the digest of its ids (the record was edited)", where)
    return Questions(by, split, frozenset(ids), source)


class RunQuestions:
    """The question ids of a finished run's stage outputs, read once each: ``stage_dir(name)`` is a stage's output
    directory or None."""

    def __init__(self, stage_dir: Callable[[str], Path | None]) -> None:
        self.stage_dir = stage_dir
        self._qa: Any = None
        self._calibrated: dict[str, Any] | None = None

    def first(self, split: str, limit: int | None) -> frozenset[str] | None:
        """The ids of the first ``limit`` questions of ``split`` (all when None) as build_data made them — the
        questions every stage that reads a split with a limit takes; None without a build_data output."""
        build = self.stage_dir("build_data")
        if build is None or not (build / "qa").is_dir():
            return None
        if self._qa is None:
            from workbench.data.dataset_store import load_saved_dataset_dict

            self._qa = load_saved_dataset_dict(build / "qa")
        if split not in self._qa:
            return None
        ids = self._qa[split]["id"]
        return frozenset(str(i) for i in (ids if limit is None else ids[:limit]))

    def calibrated(self, split: str) -> frozenset[str] | None:
        """The ids of ``split`` in the calibrate stage's ``calibrated.json`` (the rows classify reads)."""
        if self._calibrated is None:
            calibrate = self.stage_dir("calibrate")
            path = calibrate / "calibrated.json" if calibrate is not None else None
            self._calibrated = json.loads(path.read_text()) if path is not None and path.is_file() else {}
        rows = self._calibrated.get(split)
        return frozenset(str(i) for i in rows["id"]) if rows else None

    def evaluated(self) -> frozenset[str] | None:
        """The ids of the questions the evaluate stage answered (its traces)."""
        evaluate = self.stage_dir("evaluate")
        if evaluate is None or not (evaluate / "traces").is_dir():
            return None
        import datasets

        return frozenset(str(i) for i in datasets.load_from_disk(str(evaluate / "traces"))["id"])

    def collected(self, split: str) -> frozenset[str] | None:
        """The ids of ``split`` in the collect stage's output (every collected row, before any drop)."""
        collect = self.stage_dir("collect")
        if collect is None or not (collect / split).is_dir():
            return None
        import datasets

        return frozenset(str(i) for i in datasets.load_from_disk(str(collect / split))["id"])


def reader_training_record(ref: str) -> dict[str, Any] | None:
    """The ``training_data`` record (:mod:`workbench.data.article_splits`) of the adapter the model reference ``ref``
    names (an embedded adapter, an ``adapter.json`` or its directory), or None: no adapter, or one recording none."""

    try:
        file = adapter_reference(str(ref))
        payload = json.loads(file.read_text(encoding="utf-8")) if file is not None else None
    except (AssetError, OSError, ValueError):
        return None
    record = payload.get("training_data") if isinstance(payload, dict) else None
    return record if isinstance(record, dict) and isinstance(record.get("split"), str) else None


def reader_adapter(ref: str) -> Questions | None:
    """The training articles of the answer-reader adapter ``ref`` names (:func:`reader_training_record`, written by
    ``tune_reader``), or None when ``ref`` is no adapter or records none."""
    record = reader_training_record(ref)
    if record is None:
        return None
    count, digest = record.get("articles"), record.get("articles_sha256")
    return Questions(
        "tune_reader",
        record["split"],
        source=str(ref),
        unit="articles" if isinstance(digest, str) else "questions",
        digest=digest if isinstance(digest, str) else None,
        count=count if isinstance(count, int) and not isinstance(count, bool) else None,
    )


def check_held_out(fitted: dict[str, Questions], held_out: dict[str, Questions]) -> None:
    """ConfigError (one line) when a held-out figure was measured on a question a shipped part or parameter was
    fitted on: it names the part, its split, the figure, its split and how many questions they share. Figures
    measured out of fold on their own fit questions are not held-out in that sense and are skipped."""
    for part, fit in fitted.items():
        if fit.ids is None:
            continue
        for figure, measured in held_out.items():
            if measured.out_of_fold or measured.ids is None:
                continue
            shared = fit.ids & measured.ids
            if shared:
                raise ConfigError(
                    f"{part} was fitted on {len(shared)} of the {len(measured.ids)} questions the {figure} figures "
                    f"report as held-out (fitted on split {fit.split!r}, measured on {measured.split!r}): fit it "
                    "on another split, or report another one",
                    "export",
                )


def check_reader_articles(
    fitted: dict[str, Questions], held_out: dict[str, Questions], leak: Callable[[], str | None]
) -> None:
    """ConfigError when a reader adapter's training articles reach a held-out figure: a figure measured on the
    adapter's training split, or (``leak()``, :func:`workbench.data.article_splits.training_data_leak` for the run's
    data) training articles this run's data puts outside ``train``."""
    for part, fit in fitted.items():
        if fit.unit != "articles":
            continue
        for figure, measured in held_out.items():
            if measured.split == fit.split:
                raise ConfigError(
                    f"{part} was trained on the articles of split {fit.split!r}, which the {figure} figures report "
                    "as held-out",
                    "export",
                )
        reason = leak()
        if reason is not None:
            raise ConfigError(f"{part}: {reason}, so held-out figures may read its training articles", "export")


def records(entries: dict[str, Questions], by_key: str) -> dict[str, dict[str, Any]]:
    """The manifest's records of ``entries`` (:meth:`Questions.record`), by name."""
    return {name: entry.record(by_key) for name, entry in entries.items()}


def splits_of(entries: Iterable[dict[str, Any]]) -> list[str]:
    """The distinct splits of manifest records, in order of first appearance (None left out)."""
    return list(dict.fromkeys(e["split"] for e in entries if isinstance(e, dict) and isinstance(e.get("split"), str)))


def _setter_questions(setter: Any, study: Questions | None, fit: Questions) -> Questions:
    """The questions behind a value set by ``setter`` (:class:`~workbench.bundle.learned.Setter`): classify's fit
    questions, the study's, a parameters file's own record (a file written by hand, recording none: the user's choice,
    fitted on nothing), or none for the recipe and a default."""

    if setter.stage == "classify":
        return Questions("classify", fit.split, fit.ids, setter.source)
    if setter.stage == "study":
        # no source: the run's own study (a path under the run directory would tie the content digest to where
        # the run lies)
        return Questions("study", study.split, study.ids) if study is not None else Questions("study")
    if setter.stage == "params":
        params = read_params(Path(setter.source))
        if "fitted_on" in params:
            return recorded_questions("params", params["fitted_on"], setter.source, setter.source)
        if "study" in params or "trial" in params:
            raise ConfigError(
                f"{setter.source} was written by a study that did not record the questions it tuned on, so the "
                "bundle cannot show they are not its held-out ones: rerun the study",
                "export",
            )
        return Questions("params", source=setter.source)
    return Questions(setter.stage, source=setter.source)


def run_fitted(run: Any, methods: Sequence[str], learned: Any, questions: RunQuestions) -> dict[str, Questions]:
    """What each part and parameter a bundle of ``methods`` ships was fitted or tuned on, by name
    (``decision.calibrators``, ``decision.classifier``, ``decision.tau``, ``decision.lars``, ``decision.ood`` (the
    OOD profile) and ``decision.ood_threshold`` (its flag's threshold), ``utility``, ``<method>.<parameter>`` for the
    study's parameters and every parameter a study or a parameters file set, ``controller_adapter``,
    ``models.generator`` for a reader adapter). ``run``: the finished run (``config``, ``stage(name)``,
    ``json(stage, file)``); ``learned``: D²-RAG's parts as exported (None without)."""

    config = run.config
    out: dict[str, Questions] = {}
    fit_split = (run.json("calibrate", "summary.json") or {}).get("fit_split", config.calibrate.fit_split)
    fit = Questions("calibrate", fit_split, questions.calibrated(fit_split))
    study = _study_questions(run, questions)
    if any(uses_decision_policy(m) for m in methods) and learned is not None:
        router = (run.json("classify", "selection.json") or {}).get("router")
        out["decision.calibrators"] = Questions("classify" if router else "calibrate", fit.split, fit.ids)
        out["decision.classifier"] = Questions("classify", fit.split, fit.ids)
        out["decision.tau"] = _setter_questions(tau_setter(config, run.stage("study"), learned), study, fit)
        if "lars" in learned.features:
            lars_split = (run.json("collect", "metadata.json") or {}).get(
                "lars_fit_split", config.collect.lars_fit_split
            )
            out["decision.lars"] = Questions("collect", lars_split, questions.collected(lars_split))
        if learned.ood is not None:  # the profile on the fit split's questions, its threshold on calibrate.ood_split
            section = config.calibrate
            out["decision.ood"] = Questions("calibrate", fit.split, questions.first(fit.split, section.ood_limit))
            if section.ood_split is not None:
                threshold = questions.first(section.ood_split, section.ood_limit)
                out["decision.ood_threshold"] = Questions("calibrate", section.ood_split, threshold)
        if learned.utility is not None:
            section = config.fit_utility
            out["utility"] = Questions("fit_utility", section.split, questions.first(section.split, section.limit))
    for method in methods:
        setters = option_setters(config, method, run.stage("study"))
        learned_params = METHOD_TABLE[method].learned_params if method in METHOD_TABLE else {}
        names = [p for p in default_spaces().get(method, {}) if p not in learned_params]
        names += [k for k, s in setters.items() if s.stage in ("study", "params") and k not in names]
        for name in names:
            setter = setters.get(name, Setter("default"))
            out[f"{method}.{name}"] = _setter_questions(setter, study, fit)
    if run.stage("distill") is not None and (run.stage("distill") / "adapter.json").is_file():
        section = config.distill_data
        out["controller_adapter"] = Questions("distill", section.split, questions.first(section.split, section.limit))
    reader = reader_adapter(config.generator.model)
    if reader is not None:
        out["models.generator"] = reader
    return out


def _study_questions(run: Any, questions: RunQuestions) -> Questions | None:
    """The questions the run's study tuned on: its ``best_params.json``'s record, else (a study made before it was
    recorded) the first ``study.limit`` of ``study.split``; None without a study."""
    study_dir = run.stage("study")
    if study_dir is None:
        return None
    best = run.json("study", "best_params.json") or {}
    if "fitted_on" in best:
        return recorded_questions("study", best["fitted_on"], None, str(study_dir / "best_params.json"))
    section = run.config.study
    return Questions("study", section.split, questions.first(section.split, section.limit))


def run_held_out(run: Any, metrics: dict[str, Any], questions: RunQuestions) -> dict[str, Questions]:
    """What each held-out figure of the manifest's ``metrics`` was measured on, by name (``routing``,
    ``feature_auroc``, ``decision`` — the shipped decision's row —, ``evaluate``, ``utility``: out of fold)."""
    out: dict[str, Questions] = {}
    routing = metrics.get("routing")
    if routing:
        ids = questions.calibrated(routing["split"])
        out["routing"] = Questions("classify", routing["split"], ids)
        # the shipped decision's row: classify's, or classify's predictions routed again at a moved τ by the export
        replayed = routing.get("shipped_by", "classify") != "classify"
        out["decision"] = Questions("export" if replayed else "classify", routing["split"], ids)
        if "feature_auroc" in metrics:
            out["feature_auroc"] = Questions("calibrate", routing["split"], ids)
    evaluate = metrics.get("evaluate")
    if evaluate:
        out["evaluate"] = Questions("evaluate", evaluate["split"], questions.evaluated())
    if "utility" in metrics:
        section = run.config.fit_utility
        ids = questions.first(section.split, section.limit)
        out["utility"] = Questions("fit_utility", section.split, ids, out_of_fold=True)
    return out
