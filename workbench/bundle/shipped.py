"""What a bundle decides, read from its manifest alone — the one record every reader renders.

The export writes D²-RAG's retrieval decision once: the rule (``decision``: the router or classifier, its features,
τ), who set τ and the deciding method's decision settings (its spec's ``decision_settings``: D²-RAG's α) and on
which questions (``provenance.fitted``: classify, a study, a parameters file, or
``workbench decide`` after the run), and *their* held-out figures (the row of ``metrics.routing`` that ``chosen``
names: classify's routing table, or the predictions routed again at the shipped τ when a study, a parameters file or
``decide`` moved it). The model card, the run report's bundle and routing
sections, ``workbench bundles``, serve's ``GET /methods`` and ``workbench infer`` all render it through
:func:`shipped_decision` / :func:`decision_line`, so they cannot disagree with each other or with the manifest.

A bundle exported before the record existed (schema < 1.3) has no ``provenance``: τ's setter is read off
``decision.rule`` (``study`` or classify's rule), and when a study set τ its routing row was measured at classify's τ,
not the shipped one — no held-out figure is shown for it rather than the wrong one.

A version written by ``workbench recalibrate`` keeps its parent's ``metrics`` and adds a ``recalibration`` block with
the held-out feedback's figures of the parent's decision and of its own (:class:`Recalibrated`). Its decision is no
longer the one the parent's routing row measured — new calibrators change what the router reads even when τ and the
router are the parent's — so that row is the parent's, never this version's ``held_out``, and the feedback's figures
are what was measured for it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.bundle.learned import (
    evaluated_learned,
    evaluated_options,
    option_setters,
    read_params,
    study_params,
    tau_setter,
)
from workbench.core.formatting import fmt, markdown_table
from workbench.methods.learned import ROUTER_NAMES

KINDS = ROUTER_NAMES
"""Classifier kind → its name on the card and in the report (LR, MLP, kNN, Tree)."""
GREEK_LETTERS = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "theta": "θ", "lambda": "λ", "tau": "τ"}
"""A setting whose name starts with a Greek letter's is printed with the letter (``alpha_pos`` as ``α_pos``)."""
SETTER_WORDS = {"study": "the study", "params": "a parameters file", "decide": "`workbench decide`"}
"""Who moved τ from classify's, in words (the card, the report)."""


@dataclass(frozen=True)
class Setting:
    """One shipped value and where it comes from: ``set_by`` (``classify``, ``study``, ``params``, ``recipe``,
    ``default``), the ``split`` and number of ``questions`` it was fitted on (None: fitted on nothing), ``source``."""

    value: Any
    set_by: str
    split: str | None = None
    questions: int | None = None
    source: str | None = None

    def origin(self, quote: str = "`") -> str:
        """Who set it and on what, in words: ``study on `val`, 24 questions``, ``default``, ``decide (--tau 0.4, by
        hand)`` (the split between ``quote`` marks: Markdown's backticks, or none for a terminal)."""
        if self.split is None:
            return f"{self.set_by} ({self.source})" if self.set_by == "decide" and self.source else self.set_by
        count = f", {self.questions} questions" if self.questions is not None else ""
        return f"{self.set_by} on {quote}{self.split}{quote}{count}"

    def value_text(self) -> str:
        """The value as printed (``0.549``, ``1``, ``None``)."""
        return f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)


@dataclass(frozen=True)
class HeldOut:
    """The shipped decision's held-out figures: its routing row on ``split`` (``questions`` of them)."""

    split: str
    questions: int | None
    retrieval_rate: float | None
    contains: float | None
    em: float | None
    f1: float | None
    lm_calls: float | None
    tokens: float | None
    row: str


@dataclass(frozen=True)
class Recalibrated:
    """A version written by ``workbench recalibrate`` (the manifest's ``recalibration`` block): its ``parent``
    version, what was ``refitted``, the feedback rows fitted on (``fit_rows``) and held out (``rows``), and on the
    held-out rows the ``before`` (the parent's decision) and ``after`` (this version's) values of τ, the retrieval
    rate, the quality figure named by ``metric`` (``routed_quality`` or ``selective_accuracy``; None without a routing
    comparison) and the mean ECE, by those keys; ``quality_ci``: the interval of this version's quality
    (``low``, ``high``), ``intervals`` how the intervals were made and ``definition`` what the quality figure means
    (the manifest's words). Values the manifest does not hold as finite numbers (or strings) are None."""

    parent: str
    refitted: tuple[str, ...]
    fit_rows: int | None
    rows: int | None
    metric: str | None
    definition: str | None
    intervals: str | None
    before: dict[str, float | None]
    after: dict[str, float | None]
    quality_ci: tuple[float | None, float | None]


@dataclass(frozen=True)
class ShippedDecision:
    """D²-RAG's retrieval decision as a bundle ships it: the router (``name``: kind and features, its
    ``calibrator``), τ (``always_retrieve`` when it is above 1: no feature is computed), the deciding method's
    decision settings (``alphas``: D²-RAG's α, by setting name), the held-out figures measured at that τ (None
    when the manifest holds none at it) and, for a version written by ``workbench recalibrate``, its record
    (``recalibrated``; module docstring)."""

    name: str
    features: list[str]
    classifier: str
    calibrator: str | None
    rule: str
    tau: Setting
    alphas: dict[str, Setting]
    always_retrieve: bool
    held_out: HeldOut | None
    recalibrated: Recalibrated | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON of every field (:func:`decision_view` builds serve's from it)."""
        return asdict(self)


def _fitted(manifest: dict[str, Any]) -> dict[str, Any]:
    provenance = manifest.get("provenance")
    fitted = provenance.get("fitted") if isinstance(provenance, dict) else None
    return fitted if isinstance(fitted, dict) else {}


def _setting(value: Any, record: Any, fallback: str) -> Setting:
    if not isinstance(record, dict):
        return Setting(value, fallback)
    set_by = str(record.get("set_by") or fallback)
    # decide's source says how τ was chosen (`--tau 0.4, by hand`); others' name files and stay out of the view
    source = record.get("source") if set_by == "decide" and isinstance(record.get("source"), str) else None
    return Setting(value, set_by, record.get("split"), record.get("questions"), source)


def symbol(name: str) -> str:
    """A setting's name as printed: its leading Greek letter's name as the letter (``alpha_pos`` → ``α_pos``)."""
    head, sep, rest = name.partition("_")
    return GREEK_LETTERS.get(head, head) + sep + rest


def _decider(methods: Any) -> tuple[str | None, tuple[str, ...]]:
    """The method whose decision settings go with the decision (the registry's
    :func:`~workbench.methods.registry.decision_method` of ``methods``, else of every known method) and those
    settings (its spec's ``decision_settings``); ``(None, ())`` when no method decides with the policy."""
    from workbench.methods.registry import METHOD_TABLE, decision_method

    names = [str(m) for m in methods] if isinstance(methods, list | tuple | dict) else []
    method = decision_method(names) or decision_method()
    return method, (METHOD_TABLE[method].decision_settings if method is not None else ())


def _default(method: str, name: str) -> Any:
    """Method ``method``'s own default of setting ``name`` (imported only when a bundle ships the default)."""
    from workbench.methods.registry import settings_class

    return getattr(settings_class(method)(), name)


def _number(value: Any) -> float | None:
    """``value`` as a finite float, else None (``metrics`` is free-form: a reader never trusts its types)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _held_out(manifest: dict[str, Any], measured_at_tau: bool) -> HeldOut | None:
    routing = (manifest.get("metrics") or {}).get("routing")
    if not isinstance(routing, dict) or not measured_at_tau:
        return None
    rows = routing.get("rows") if isinstance(routing.get("rows"), list) else []
    row = next((r for r in rows if isinstance(r, dict) and r.get("router") == routing.get("chosen")), None)
    if row is None:
        return None
    held = ((manifest.get("provenance") or {}).get("held_out") or {}).get("decision") or {}
    return HeldOut(
        split=str(routing.get("split")),
        questions=_count(held.get("questions")) if isinstance(held, dict) else None,
        retrieval_rate=_number(row.get("retrieval_rate")),
        contains=_number(row.get("contains")),
        em=_number(row.get("em")),
        f1=_number(row.get("f1")),
        lm_calls=_number(row.get("lm_calls")),
        tokens=_number(row.get("tokens")),
        row=str(row.get("router")),
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _recalibrated(manifest: dict[str, Any]) -> Recalibrated | None:
    """The manifest's ``recalibration`` block as :class:`Recalibrated` (None without one)."""
    block = manifest.get("recalibration")
    if not isinstance(block, dict):
        return None
    refitted = block.get("refitted")
    parts = tuple(str(p) for p in refitted) if isinstance(refitted, list) and refitted else ("calibrators",)
    metrics = block.get("metrics") if isinstance(block.get("metrics"), dict) else {}
    routing = metrics.get("routing") if isinstance(metrics.get("routing"), dict) else {}

    def pair(record: Any) -> tuple[float | None, float | None]:
        record = record if isinstance(record, dict) else {}
        return _number(record.get("before")), _number(record.get("after"))

    figures = {
        "tau": pair(routing.get("tau")),
        "retrieval_rate": pair(routing.get("retrieval_rate")),
        "quality": pair(routing.get("quality")),
        "mean_ece": pair(metrics.get("mean_ece")),
    }
    quality = routing.get("quality") if isinstance(routing.get("quality"), dict) else {}
    ci = quality.get("after_ci") if isinstance(quality.get("after_ci"), dict) else {}

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) else None

    return Recalibrated(
        parent=str(block.get("parent")),
        refitted=parts,
        fit_rows=_count(block.get("fit_rows")),
        rows=_count(block.get("holdout_rows")),
        metric=text(routing.get("metric")),
        definition=text(routing.get("definition")),
        intervals=text(routing.get("intervals")),
        before={key: values[0] for key, values in figures.items()},
        after={key: values[1] for key, values in figures.items()},
        quality_ci=(_number(ci.get("low")), _number(ci.get("high"))),
    )


def shipped_decision(manifest: dict[str, Any], *, with_defaults: bool = True) -> ShippedDecision | None:
    """The decision a bundle ships (module docstring), or None for a bundle without D²-RAG. ``with_defaults``: read
    the deciding method and the value of a decision setting the bundle leaves at its default from the method
    registry (imports it); else no decision setting is read (``alphas`` is empty)."""
    decision = manifest.get("decision")
    if not isinstance(decision, dict):
        return None
    fitted = _fitted(manifest)
    rule = str(decision.get("rule") or "")
    tau_record = fitted.get("decision.tau")
    tau = _setting(decision.get("tau"), tau_record, "study" if rule == "study" else "classify")
    methods = manifest.get("methods") or {}
    method, shown = _decider(methods) if with_defaults else (None, ())
    options = ((methods.get(method) if isinstance(methods, dict) else None) or {}).get("options") or {}
    alphas = {}
    for name in shown:
        value = options.get(name, _default(str(method), name))
        alphas[name] = _setting(value, fitted.get(f"{method}.{name}"), "recipe" if name in options else "default")
    routing = (manifest.get("metrics") or {}).get("routing") or {}
    recalibrated = _recalibrated(manifest)
    # a bundle without the record, whose τ a study moved, holds its routing row at classify's τ: not this decision's;
    # nor is the parent's row for a recalibrated version: even a calibrators-only refit changes the router's inputs,
    # so which questions retrieve
    measured = ("shipped_by" in routing or tau.set_by == "classify") and recalibrated is None
    features = [str(f) for f in decision.get("features") or []]
    kind = KINDS.get(str(decision.get("classifier")), str(decision.get("classifier")))
    calibrator = decision.get("calibrator")
    name = f"{kind}({' + '.join(features)}" + (f"; {calibrator})" if calibrator else ")")
    return ShippedDecision(
        name=name,
        features=features,
        classifier=str(decision.get("classifier")),
        calibrator=calibrator,
        rule=rule,
        tau=tau,
        alphas=alphas,
        always_retrieve=bool(decision.get("always_retrieve", float(decision.get("tau", 0.0)) > 1.0)),
        held_out=_held_out(manifest, measured),
        recalibrated=recalibrated,
    )


def tau_text(decision: ShippedDecision) -> str:
    """τ as every reader prints it: ``0.549`` or ``1 + ε (always retrieve)``."""
    return "1 + ε (always retrieve)" if decision.always_retrieve else fmt(decision.tau.value, 3)


def decision_line(decision: ShippedDecision) -> str:
    """The decision in one line (what the card, the report, ``workbench infer`` and ``GET /methods`` print)."""
    if decision.always_retrieve:
        what = f"D²-RAG retrieves for every question: τ = {tau_text(decision)}, so `{decision.name}` is never computed"
    else:
        what = f"D²-RAG retrieves iff P(correct) < τ = {tau_text(decision)} under `{decision.name}`"
    shown = [f"{symbol(name)} = {s.value_text()} ({s.origin()})" for name, s in decision.alphas.items()]
    line = "; ".join([what, f"τ set by {decision.tau.origin()}", *([", ".join(shown)] if shown else [])])
    held, recalibrated = decision.held_out, decision.recalibrated
    if recalibrated is not None:
        return f"{line}; {feedback_text(recalibrated)}"
    if held is None:
        return line + "; no held-out figure at this τ"
    count = f", {held.questions} questions" if held.questions is not None else ""
    return (
        f"{line}; held out (`{held.split}`{count}): retrieval rate {fmt(held.retrieval_rate, 2)}, routed "
        f"containment {fmt(held.contains)}, {fmt(held.tokens, 0)} tokens per question"
    )


def feedback_text(recalibrated: Recalibrated) -> str:
    """What a recalibration measured for its version on the held-out feedback, in words (the card, ``workbench
    bundles``): ``measured on held-out feedback (60 rows; 140 fitted on, recalibrated from 1.0.0): retrieval rate
    0.35, routed quality 0.71 (1.0.0's decision on them: 0.50, 0.66), mean ECE 0.052 (1.0.0's: 0.210)``."""
    before, after = recalibrated.before, recalibrated.after
    rows = f"{recalibrated.rows} rows" if recalibrated.rows is not None else "rows"
    fitted = f"; {recalibrated.fit_rows} fitted on" if recalibrated.fit_rows is not None else ""
    head = f"measured on held-out feedback ({rows}{fitted}, recalibrated from {recalibrated.parent}): "
    ece = f"mean ECE {fmt(after['mean_ece'])} ({recalibrated.parent}'s: {fmt(before['mean_ece'])})"
    if recalibrated.metric is None:
        return head + ece
    quality = recalibrated.metric.replace("_", " ")
    return (
        f"{head}retrieval rate {fmt(after['retrieval_rate'], 2)}, {quality} {fmt(after['quality'])} "
        f"({recalibrated.parent}'s decision on them: {fmt(before['retrieval_rate'], 2)}, {fmt(before['quality'])}), "
        f"{ece}"
    )


def measured_on(decision: ShippedDecision) -> str:
    """Where the figures shown as this decision's were measured, in a few words (``workbench bundles``): the run's
    held-out split, the held-out feedback for a recalibrated version, or ``-`` (none)."""
    held, recalibrated = decision.held_out, decision.recalibrated
    if recalibrated is not None:
        rows = f", {recalibrated.rows} rows" if recalibrated.rows is not None else ""
        return f"held-out feedback{rows} (recalibrated from {recalibrated.parent})"
    return "-" if held is None else f"{held.split} of the run"


def decision_view(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The decision as JSON (serve's ``GET /methods``): the manifest ``decision`` block's keys the endpoint always
    returned (``features``, ``classifier``, ``tau`` as a number, ``rule``), the rest of :class:`ShippedDecision`
    (``tau_origin``: who set τ and on what) and the one-line ``summary``."""
    decision = shipped_decision(manifest)
    if decision is None:
        return None
    view = decision.as_dict()
    view["tau_origin"] = view.pop("tau")
    return {**view, "tau": decision.tau.value, "summary": decision_line(decision)}


def run_decision(config: Any, stage_dir: Any) -> ShippedDecision | None:
    """The decision a finished run would ship, before any export (what its report shows when the run exports
    nothing): D²-RAG's parts as evaluate runs them (:func:`~workbench.bundle.learned.evaluated_learned`), who set τ
    and the deciding method's decision settings (that of ``evaluate.methods``' gold-free ones, else of every known
    method), and the held-out figure where classify set τ: its routing table's row of the pick on the evaluation split
    (the export's figure too); a τ that a study or a parameters file moved has none here (only the export routes the
    evaluation split again at a moved τ). None without classify's outputs."""

    learned = evaluated_learned(config, stage_dir)
    if learned is None:
        return None
    chosen = json.loads((stage_dir("classify") / "selection.json").read_text())
    router = chosen.get("router")
    classifier = router["spec"]["kind"] if router else chosen["chosen"]
    calibrator = router["spec"]["calibrator"] if router else config.calibrate.kind
    setter = tau_setter(config, stage_dir("study"), learned)
    from workbench.methods.registry import GOLD_METHODS

    held_out = None
    routing_file = stage_dir("classify") / "routing.json"
    if setter.stage == "classify" and routing_file.exists():  # τ unmoved: classify's own row is the figure at τ
        routing = json.loads(routing_file.read_text())
        pick = {"split": routing.get("split"), "chosen": classify_pick_name(chosen), "rows": routing.get("rows")}
        held_out = _held_out({"metrics": {"routing": pick}}, True)
    method, shown = _decider([m for m in config.evaluate.methods if m not in GOLD_METHODS])
    options = evaluated_options(config, str(method), stage_dir("study"))
    setters = option_setters(config, str(method), stage_dir("study"))
    alphas = {
        name: _run_setting(options.get(name, _default(str(method), name)), setters.get(name), stage_dir("study"))
        for name in shown
    }
    features = list(learned.features)
    return ShippedDecision(
        name=f"{KINDS[classifier]}({' + '.join(features)}; {calibrator})",
        features=features,
        classifier=classifier,
        calibrator=calibrator,
        rule=learned.tau_rule,
        tau=_run_setting(learned.tau, setter, stage_dir("study")),
        alphas=alphas,
        always_retrieve=learned.tau > 1.0,
        held_out=held_out,
    )


def classify_pick_name(selection: dict[str, Any]) -> str:
    """The routing table's row of classify's pick (``selection.json``): ``Router`` for a router search's pick, else the
    chosen classifier kind's short name (``LR``, ``MLP``, ...)."""
    return "Router" if selection.get("router") else ROUTER_NAMES[selection["chosen"]]


def _run_setting(value: Any, setter: Any, study_dir: Any) -> Setting:
    """A value of a run before export, with the split and count of the questions its study recorded (a study's or a
    parameters file's ``fitted_on``; none for classify, the recipe or a default — the export records those)."""

    if setter is None:
        return Setting(value, "default")
    record: Any = None
    if setter.stage == "study":
        record = study_params(study_dir).get("fitted_on")
    elif setter.stage == "params":
        record = read_params(Path(setter.source)).get("fitted_on")
    if not isinstance(record, dict):
        return Setting(value, setter.stage)
    return Setting(value, setter.stage, record.get("split"), record.get("questions"))


def provenance_lines(manifest: dict[str, Any]) -> list[str]:
    """Markdown tables of the manifest's ``provenance``: what each shipped part and parameter was fitted on, and
    what each held-out figure was measured on ([] for a bundle exported before the record)."""
    provenance = manifest.get("provenance")
    if not isinstance(provenance, dict):
        return []

    def rows(records: Any, by: str) -> list[list[str]]:
        out = []
        for name, record in sorted((records or {}).items()):
            if not isinstance(record, dict):
                continue
            unit, n = record.get("unit", "questions"), record.get("questions")
            count = "—" if n is None else f"{n} {unit.removesuffix('s') if n == 1 else unit}"
            digest = record.get("ids_sha256")
            where = f"`{record['split']}`" if record.get("split") else "—"
            if record.get("out_of_fold"):
                where += " (out of fold)"
            out.append([f"`{name}`", str(record.get(by)), where, count, f"`{digest[:12]}`" if digest else "—"])
        return out

    lines = [
        "What each shipped part and parameter was fitted or tuned on (— : fitted on nothing, a user's choice or a "
        "default; the digest is the sha256 of the sorted question ids):",
        "",
        *markdown_table(
            ["part", "set by", "split", "fitted on", "ids sha256"], rows(provenance.get("fitted"), "set_by"), "lllrl"
        ),
        "",
        "What each held-out figure was measured on (the export refuses a bundle whose held-out questions include any "
        "it was fitted on):",
        "",
        *markdown_table(
            ["figure", "measured by", "split", "measured on", "ids sha256"],
            rows(provenance.get("held_out"), "measured_by"),
            "lllrl",
        ),
        "",
    ]
    return lines
