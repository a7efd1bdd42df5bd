"""Report section "Calibration transfer": the calibrators and the shipped decision in distribution vs on another
template family, from the ``transfer`` stage's ``transfer.json`` (:mod:`workbench.stages.transfer.run`).

One headline sentence, a table of the decision's ranking, calibration and routing quality in both conditions with
their shift, a per-feature table, a per-template table, and ``transfer.png`` (per-feature AUROC side by side and the
decision's reliability diagram in both conditions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt
from workbench.reports.section import Section, SectionInput

TITLES = {"in_distribution": "in distribution", "shifted": "shifted"}


def _signed(value: float | None, digits: int = 3) -> str:
    return fmt(value) if value is None else f"{value:+.{digits}f}"


def _bounds(interval: list[float | None] | None) -> tuple[float, float] | None:
    """A stored ``[low, high]`` as an error bar's bounds; None when either end is missing."""
    if not interval or interval[0] is None or interval[1] is None:
        return None
    return float(interval[0]), float(interval[1])


def _with_interval(value: float | None, interval: list[float | None] | None, signed: bool = False) -> str:
    text = _signed(value) if signed else fmt(value)
    bounds = _bounds(interval)
    return text if bounds is None else f"{text} [{fmt(bounds[0])}, {fmt(bounds[1])}]"


def headline(record: dict[str, Any]) -> str:
    """One sentence: what happens to the decision's AUROC, ECE and routed score against Always-RAG under the shift."""
    a, b = (record["conditions"][c] for c in ("in_distribution", "shifted"))
    return (
        f"On {', '.join(record['shifted_templates'])} questions the shipped decision's AUROC goes "
        f"{fmt(a['decision']['auroc'])} → {fmt(b['decision']['auroc'])} and its ECE "
        f"{fmt(a['decision']['ece'])} → {fmt(b['decision']['ece'])}; its routed {record['routed_score']} is "
        f"{_signed(a['routing']['routed_minus_always'])} against Always-RAG in distribution and "
        f"{_signed(b['routing']['routed_minus_always'])} shifted, retrieving for "
        f"{fmt(100 * a['routing']['retrieval_rate'], 0)} % → {fmt(100 * b['routing']['retrieval_rate'], 0)} % of "
        "the questions."
    )


def summary_table(record: dict[str, Any]) -> list[str]:
    """Markdown rows: questions, accuracies, the decision's figures and routing quality per condition, and the shift."""
    a, b = (record["conditions"][c] for c in ("in_distribution", "shifted"))
    delta = record["shift"]
    score = record["routed_score"]

    def row(name: str, left: str, right: str, change: str = "") -> str:
        return f"| {name} | {left} | {right} | {change} |"

    def pct(value: float | None) -> str:
        return fmt(None if value is None else 100 * value, 1, suffix=" %")

    def points(value: float | None) -> str:
        return fmt(value) if value is None else f"{100 * value:+.1f} pts"

    lines = ["| | in distribution | shifted | shift |", "|---|---:|---:|---:|"]
    lines.append(row("questions", str(a["rows"]), str(b["rows"])))
    lines.append(row("closed-book accuracy (label)", fmt(a["decision"]["accuracy"]), fmt(b["decision"]["accuracy"])))
    lines.append(
        row(
            "mean P(correct)",
            fmt(a["decision"]["mean_p_correct"]),
            fmt(b["decision"]["mean_p_correct"]),
        )
    )
    for key, name in (("auroc", "decision AUROC"), ("ece", "decision ECE")):
        lines.append(
            row(
                name,
                _with_interval(a["decision"][key], a["intervals"][f"decision_{key}"]),
                _with_interval(b["decision"][key], b["intervals"][f"decision_{key}"]),
                _signed(delta[f"decision_{key}"]),
            )
        )
    lines.append(row("decision Brier", fmt(a["decision"]["brier"]), fmt(b["decision"]["brier"])))
    for key, name in (("no_rag", "No-RAG"), ("always_rag", "Always-RAG"), ("oracle", "oracle routing")):
        lines.append(row(f"{name} {score}", fmt(a["routing"][key]), fmt(b["routing"][key])))
    lines.append(
        row(
            f"routed {score} (shipped decision)",
            _with_interval(a["routing"]["routed"], a["intervals"]["routed"]),
            _with_interval(b["routing"]["routed"], b["intervals"]["routed"]),
            _signed(delta["routed"]),
        )
    )
    lines.append(
        row(
            "routed − Always-RAG",
            _with_interval(a["routing"]["routed_minus_always"], a["intervals"]["routed_minus_always"], signed=True),
            _with_interval(b["routing"]["routed_minus_always"], b["intervals"]["routed_minus_always"], signed=True),
            _signed(delta["routed_minus_always"]),
        )
    )
    lines.append(
        row(
            "share of Always-RAG's lift kept",
            fmt(a["routing"]["lift_kept"]),
            fmt(b["routing"]["lift_kept"]),
            _signed(delta["lift_kept"]),
        )
    )
    lines.append(
        row(
            "retrieval rate",
            pct(a["routing"]["retrieval_rate"]),
            pct(b["routing"]["retrieval_rate"]),
            points(delta["retrieval_rate"]),
        )
    )
    flags = (_flag_rate(a.get("ood")), _flag_rate(b.get("ood")), points(delta["ood_flag_rate"]))
    lines.append(row("OOD flag rate (in: false positives; shifted: detected)", *flags))
    return lines


def _flag_rate(summary: dict[str, Any] | None) -> str:
    """A condition's OOD flag rate in percent with its Wilson interval (— without a profile)."""
    if summary is None or not summary["questions"]:
        return fmt(None)
    low, high = (100 * v for v in summary["interval"])
    return f"{100 * summary['rate']:.1f} % [{low:.1f}, {high:.1f}]"


def ood_lines(record: dict[str, Any]) -> list[str]:
    """The OOD flag under the shift, in words: its target, its false-positive rate on the in-distribution questions,
    its detection rate on the shifted ones and the checks that fired ([] without a profile)."""
    from workbench.calibration.ood_rates import describe_rate

    calibration = record.get("ood")
    a, b = (record["conditions"][c].get("ood") for c in ("in_distribution", "shifted"))
    if calibration is None or a is None or b is None:
        return []
    where = calibration["split"] or "the fit split cross-fitted"
    level = round(100 * a["level"])

    def fired(summary: dict[str, Any]) -> str:
        return ", ".join(f"`{name}` {count}" for name, count in summary["checks"].items() if count) or "none"

    lines = [
        f"**OOD flag** (docs/ood.md; set for {100 * calibration['target_fpr']:g} % false positives on "
        f"{calibration['questions']} `{where}` questions): it flags {describe_rate(a)} in-distribution questions — "
        f"its false-positive rate — and {describe_rate(b)} shifted ones — its detection rate of this shift "
        f"({level} % Wilson intervals). Checks that fired: in distribution {fired(a)}; shifted {fired(b)}.",
        "",
    ]
    fa, fb = (record["conditions"][c].get("ood_features") for c in ("in_distribution", "shifted"))
    if fa is not None and fb is not None:
        lines += [
            "The same detector on the uncertainty features instead (measured only; the flag does not use them) flags "
            f"{describe_rate(fa)} in distribution and {describe_rate(fb)} shifted.",
            "",
        ]
    return lines


def feature_table(record: dict[str, Any]) -> list[str]:
    """Markdown rows per calibrated feature: raw AUROC and calibrated ECE in both conditions, and their shift."""
    a, b = (record["conditions"][c] for c in ("in_distribution", "shifted"))
    lines = [
        "| feature | AUROC in | AUROC shifted | Δ AUROC | ECE in | ECE shifted | Δ ECE |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in a["features"].items():
        s, d = b["features"][name], record["shift"]["features"][name]
        lines.append(
            f"| {name} | {fmt(m['auroc'])} | {fmt(s['auroc'])} | {_signed(d['auroc'])} | {fmt(m['ece'])} "
            f"| {fmt(s['ece'])} | {_signed(d['ece'])} |"
        )
    return lines


def template_table(record: dict[str, Any]) -> list[str]:
    """Markdown rows per template of either condition: questions, No-RAG / Always-RAG / routed score, retrieval rate
    and the decision's AUROC / ECE."""
    score = record["routed_score"]
    lines = [
        f"| condition | template | questions | No-RAG {score} | Always-RAG {score} | routed {score} | retrieval rate "
        "| decision AUROC | decision ECE |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for condition, data in record["conditions"].items():
        for template, m in data["by_template"].items():
            lines.append(
                f"| {TITLES.get(condition, condition)} | {template} | {m['rows']} | {fmt(m['no_rag'])} "
                f"| {fmt(m['always_rag'])} | {fmt(m['routed'])} | {fmt(m['retrieval_rate'])} "
                f"| {fmt(m['decision_auroc'])} | {fmt(m['decision_ece'])} |"
            )
    return lines


def router_lines(record: dict[str, Any]) -> list[str]:
    """The in-task vs transferred router table (``record["routers"]``) in Markdown, with its heading and how to
    read it; a sentence saying why there is none when it was skipped; [] for a record written before it existed."""
    table = record.get("routers")
    if table is None:
        return []
    family = ", ".join(record["shifted_templates"])
    heading = [f"### Routers on {family} questions: fitted in-task vs transferred", ""]
    if table["skipped"]:
        return [*heading, f"No in-task routers: {table['skipped']}.", ""]
    score = record["routed_score"]
    lines = [
        *heading,
        f"Every router of the routing table on the {record['conditions']['shifted']['rows']} shifted questions: "
        f"*in-task* fitted on these questions ({table['folds']}-fold cross-fitted: each fold decided by a classifier "
        "and a τ fitted on the other folds), *transferred* fitted by classify on "
        f"{', '.join(record['in_templates'])}. Δ = in-task − transferred, with its "
        f"{int(100 * record['bootstrap']['level'])} % paired BCa interval: how much routing quality the transfer "
        "loses (Δ > 0) against fitting on the task itself.",
        "",
        f"| router | decision accuracy in-task | transferred | Δ decision accuracy | routed {score} in-task "
        "| transferred | Δ routed | retrieval rate in-task | transferred |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in table["rows"]:
        a, b = row["in_task"], row["transferred"] or {}
        delta, bounds = row.get("difference") or {}, row.get("intervals") or {}
        lines.append(
            f"| {row['router']} | {fmt(a['decision_accuracy'])} | {fmt(b.get('decision_accuracy'))} "
            f"| {_delta_cell(delta, bounds, 'decision_accuracy')} | {fmt(a['routed'])} | {fmt(b.get('routed'))} "
            f"| {_delta_cell(delta, bounds, 'routed')} | {fmt(a['retrieval_rate'])} "
            f"| {fmt(b.get('retrieval_rate'))} |"
        )
    unfit = table.get("unfit") or {}
    if unfit:
        lines += ["", "Not fitted in-task: " + "; ".join(f"{name} ({why})" for name, why in unfit.items()) + "."]
    return [*lines, ""]


def _delta_cell(delta: dict[str, Any], bounds: dict[str, Any], key: str) -> str:
    """A Δ cell: the signed difference with its interval; empty for a row with nothing to compare (the baselines)."""
    return _with_interval(delta[key], bounds.get(key), signed=True) if key in delta else ""


def transfer_section(transfer_dir: Path, out_dir: Path) -> list[str]:
    """Markdown for the "Calibration transfer" section, with ``transfer.png`` written to ``out_dir``."""
    from workbench.plots import transfer_panels

    record = json.loads((transfer_dir / "transfer.json").read_text())
    conditions = record["conditions"]
    decision = record["decision"]
    features = list(conditions["in_distribution"]["features"])
    groups = [*features, "decision"]
    transfer_panels(
        out_dir / "transfer.png",
        groups,
        {
            TITLES[c]: [*(conditions[c]["features"][f]["auroc"] for f in features), conditions[c]["decision"]["auroc"]]
            for c in conditions
        },
        {TITLES[c]: (conditions[c]["p_correct"], conditions[c]["labels"]) for c in conditions},
        title=f"calibration transfer: {', '.join(record['in_templates'])} → {', '.join(record['shifted_templates'])}",
        intervals={  # the decision's AUROC has a paired bootstrap interval per condition; the features' have none
            TITLES[c]: [None] * len(features) + [_bounds(conditions[c]["intervals"]["decision_auroc"])]
            for c in conditions
        },
    )
    boot = record["bootstrap"]
    return [
        "## Calibration transfer",
        "",
        f"The calibrators and the shipped decision ({decision['kind']} `{decision['name']}`, τ = "
        f"{fmt(decision['tau'])}) were fitted on {', '.join(record['in_templates'])} questions. *In distribution*: "
        f"the run's collected `{record['split']}` questions; *shifted*: questions of "
        f"{', '.join(record['shifted_templates'])} on the same `{record['split']}` articles, answered and featured by "
        f"the collect stage's code with the run's settings. Label: `{record['label']}`; routed score: "
        f"`{record['routed_score']}`; intervals: {int(100 * boot['level'])} % paired bootstrap over the questions "
        f"({boot['draws']} resamples).",
        "",
        headline(record),
        "",
        *summary_table(record),
        "",
        *ood_lines(record),
        "![calibration transfer](transfer.png)",
        "",
        "Per calibrated feature (raw feature's AUROC; ECE of the calibrated probability):",
        "",
        *feature_table(record),
        "",
        *template_table(record),
        "",
        *router_lines(record),
        "A bundle travels as far as its decision's AUROC stays above 0.5 and its routed score near Always-RAG's: an "
        "ECE that grows under the shift means P(correct) can no longer be read as a probability there, even when the "
        "ranking survives; the OOD flag's detection rate says how many shifted questions a runtime would flag, and "
        "its false-positive rate how many of its own (docs/transfer.md).",
        "",
    ]


def section(view: SectionInput) -> Section:
    """The ``transfer`` stage's section of the run's report (:func:`transfer_section`)."""
    return Section(transfer_section(view.stage_dir, view.out_dir))
