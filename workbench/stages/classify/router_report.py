"""Report sections: the router classify picks on a cost–quality front (classify's ``router.json``), and what the run
ships (:func:`shipped_lines`: the bundle's record of the decision, τ and α with who set them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.bundle.shipped import SETTER_WORDS, decision_line, run_decision, shipped_decision
from workbench.core.formatting import fmt, markdown_table
from workbench.methods.learned import ROUTER_NAMES
from workbench.plots import cost_quality_front, tau_sweep_plot
from workbench.routing.pick import points_text
from workbench.routing.sweep import row_at

UNIT_WORDS = {"tokens": "LM tokens", "seconds": "seconds", "lm_calls": "LM calls"}


def _cost(value: float, unit: str) -> str:
    return fmt(value, 3 if unit == "seconds" else (2 if unit == "lm_calls" else 0))


def headline(record: dict[str, Any]) -> list[str]:
    """The pick on the evaluation split: the rule, why the router won, and what it does against Always-RAG (the
    quality difference and the cost saving with their paired BCa bootstrap intervals) — whether it beats Always-RAG,
    pays for itself, or, honestly, neither."""
    ev, unit = record["evaluation"], record["unit"]
    words = UNIT_WORDS[unit]
    spec = record["spec"]
    kind = ROUTER_NAMES[spec["kind"]]
    name = f"{kind}({' + '.join(spec['features'])}; {spec['calibrator']})"
    d_lo, d_hi = ev["difference_interval"]
    s_lo, s_hi = ev["saving_interval"]
    delta = points_text(record["delta"])
    why = _why(record)
    facts = (
        f"`{name}` at τ = {record['tau']:.3f} retrieves for {ev['rate']:.0%} of {ev['questions']} evaluation "
        f"questions: routed score {ev['quality']:.3f} vs Always-RAG {ev['always_quality']:.3f} (difference "
        f"{100 * ev['difference']:+.1f} points, 90% interval {100 * d_lo:+.1f} – {100 * d_hi:+.1f}), at "
        f"{_cost(ev['cost'], unit)} vs {_cost(ev['always_cost'], unit)} {words} per question (saving "
        f"{ev['saving']:.0%}, 90% interval {s_lo:.0%} – {s_hi:.0%}; {ev['draws']:,} paired resamples, BCa bootstrap)."
    )
    if record["tau"] > 1.0:
        deciding = record.get("best_deciding")
        cheapest = (
            f" The cheapest router that decides (τ ≤ 1) within {delta}: `{deciding['name']}`, "
            f"{_cost(deciding['scalar'], unit)} {words} per question on the fit split against Always-RAG's "
            f"{_cost(record['fit_references'][1]['scalar'], unit)}."
            if deciding and deciding["quality"] >= record["fit_references"][1]["quality"] - record["delta"] - 1e-12
            else ""
        )
        cheapest_rule = record.get("pick", {}).get("rule", "cheapest_within") == "cheapest_within"
        verdict = " — no router pays for itself here" if cheapest_rule else ""
        lead = (
            f"**The pick is Always-RAG{verdict}.** {why} So the shipped router has τ > 1: it "
            f"retrieves for every question without computing any feature and costs exactly Always-RAG.{cheapest} "
            "(To ship a router that decides, pick with `classify.pick: max_quality_under` and a "
            "`classify.pick_max_retrieval_rate`, or re-decide this run with `workbench decide`; what the run ships — "
            "a study or a parameters file may move τ — is under *What ships* below.)"
        )
        return [lead, ""]
    if ev.get("beats_always"):
        lead = f"**The picked router beats Always-RAG here** (its paired interval lies above 0). {facts}"
    elif record["pays_for_itself"]:
        lead = f"**The picked router pays for itself here.** {facts}"
    elif record["picked"]["within_delta"] and ev["cost"] < ev["always_cost"] and not ev.get("within_delta", True):
        lead = (
            f"**No router pays for itself here:** the pick was within {delta} of Always-RAG on the fit split and is "
            f"cheaper, but on the evaluation split it loses more than that. {facts}"
        )
    elif not record["picked"]["within_delta"]:
        lead = (
            f"**No router pays for itself here:** the pick is more than {delta} below Always-RAG on the fit split "
            f"({record['pick']['describe'] if 'pick' in record else 'the best-quality router'}). {facts}"
        )
    else:
        lead = (
            f"**No router pays for itself here:** the pick within {delta} of Always-RAG costs more than retrieving "
            f"every time. {facts}"
        )
    return [lead, "", f"Why this router: {why}", ""]


def _why(record: dict[str, Any]) -> str:
    """The pick rule and why the router won it, in one sentence (older records: the cheapest-within rule)."""
    pick = record.get("pick")
    if not pick:
        return f"Pick rule: the cheapest single-step router within {points_text(record['delta'])} of Always-RAG."
    reason = str(pick["reason"])
    return f"Pick rule `{pick['rule']}` ({pick['describe']}): {reason}."


def shipped_lines(
    export_dir: Path | None, config: Any, stage_dir: Callable[[str], Path | None], out_dir: Path | None = None
) -> list[str]:
    """The *What ships* section: D²-RAG's decision as the run's bundle records it (the export's manifest, rendered
    by :mod:`workbench.bundle.shipped` as the model card, ``workbench bundles``, ``GET /methods`` and ``workbench
    infer`` render it), or, for a run that exports nothing, as it would ship; and whether that is classify's pick or
    who replaced its τ; then, with ``out_dir``, the τ sweep of the shipped router with the shipped τ marked
    (:func:`tau_sweep_lines`). [] when the run has no D²-RAG decision."""

    manifest = None
    if export_dir is not None and (export_dir / "bundle.json").is_file():
        bundle = Path(json.loads((export_dir / "bundle.json").read_text())["path"])
        manifest = json.loads((bundle / "manifest.json").read_text()) if (bundle / "manifest.json").is_file() else None
    decision = shipped_decision(manifest) if manifest is not None else run_decision(config, stage_dir)
    if decision is None:
        return []
    source = f"the bundle's manifest (`{bundle / 'manifest.json'}`)" if manifest is not None else "the run (no export)"
    who = (
        "classify's pick, as above"
        if decision.tau.set_by == "classify"
        else f"classify's router with the τ {SETTER_WORDS.get(decision.tau.set_by, decision.tau.set_by)} set, "
        "replacing classify's"
    )
    tables = " What each part was fitted on is under *Bundle*." if manifest is not None else ""
    lines = ["### What ships", "", f"From {source}: {who}.{tables}", "", f"**{decision_line(decision)}.**", ""]
    classify_dir = stage_dir("classify")
    if out_dir is not None and classify_dir is not None:
        lines += tau_sweep_lines(classify_dir, out_dir, float(decision.tau.value), decision.tau.set_by)
    return lines


SWEEP_RATES = tuple(i / 10 for i in range(11))
"""The retrieval rates the sweep's table shows a row near (every row is in the plot and in ``tau_sweep.json``)."""


def tau_sweep_lines(classify_dir: Path, out_dir: Path, shipped_tau: float, set_by: str) -> list[str]:
    """The τ sweep of the shipped router on the evaluation split (classify's ``tau_sweep.json``): a table of the
    rows nearest each retrieval-rate decile plus the shipped τ's (and classify's, when τ was moved) and
    ``tau_sweep.png``, both with the shipped τ marked. [] for a classify output made before the sweep."""

    path = classify_dir / "tau_sweep.json"
    predictions = classify_dir / "predictions.json"
    if not path.is_file() or not predictions.is_file():
        return []
    sweep = json.loads(path.read_text())
    rows, unit = sweep["rows"], sweep.get("unit")
    p = json.loads(predictions.read_text())[sweep["router"]]
    marks = {"shipped": shipped_tau}
    if set_by != "classify" and abs(float(sweep["tau"]) - shipped_tau) > 1e-12:
        marks["classify's pick"] = float(sweep["tau"])
    marked = {label: row_at(rows, p, tau) for label, tau in marks.items()}
    shown = {id(min(rows, key=lambda r, rate=rate: abs(r["retrieval_rate"] - rate))) for rate in SWEEP_RATES}
    shown |= {id(r) for r in marked.values() if r is not None}
    refs = {"Always-RAG": sweep["always_rag"], "No-RAG": sweep["no_rag"]}
    score = {"em": "EM", "f1": "F1", "contains": "containment"}.get(sweep["score"], sweep["score"])
    tau_sweep_plot(
        out_dir / "tau_sweep.png",
        rows,
        marks=marks,
        references={k: v for k, v in refs.items() if v is not None},
        title=f"τ sweep of {sweep['label']} on {sweep['split']} ({sweep['questions']} questions)",
        score=f"routed {score}",
    )
    table = []
    for row in rows:
        if id(row) not in shown:
            continue
        labels = [label for label, r in marked.items() if r is row]
        # a marked row shows the marked τ (the sweep's own τ of that retrieval set may differ)
        value = marks[labels[0]] if labels else row["tau"]
        tau = "τ > 1 (always)" if value > 1.0 else fmt(value, 3)
        low, high = row.get("tau_range") or [None, None]
        table.append(
            [
                f"**{tau}** ← {', '.join(labels)}" if labels else tau,
                "—" if low is None else f"({fmt(low, 3)}, " + ("∞)" if high is None else f"{fmt(high, 3)}]"),
                _with_interval(row["retrieval_rate"], row["rate_interval"], 2),
                _with_interval(row["quality"], row["quality_interval"], 3),
                _with_interval(row["difference"], row["difference_interval"], 1, scale=100, sign=True),
                _cost(row["cost"], unit) if row.get("cost") is not None and unit else "—",
            ]
        )
    words = f"{UNIT_WORDS[unit]} / q" if unit else "cost / q"
    return [
        "### Choosing τ after the run",
        "",
        f"The shipped router `{sweep['label']}` at every τ on the held-out `{sweep['split']}` split "
        f"({sweep['questions']} questions; it retrieves iff P(correct) < τ): the retrieval rate (Wilson interval), the "
        f"routed {score} and its difference from Always-RAG ({fmt(sweep['always_rag'])}; No-RAG "
        f"{fmt(sweep['no_rag'])}) in points, with 90% BCa bootstrap intervals over the questions (the same resamples "
        "for every row). The table shows the rows nearest each tenth of retrieval and the marked τ; the plot and "
        "`tau_sweep.json` have every τ. To ship another operating point without re-running anything: `workbench "
        "decide RUN --retrieval-rate R` (τ chosen on the fit split, out of fold), `--pick RULE`, or `--tau T` — "
        "a τ read off this held-out table is no longer chosen blind to it, and the new bundle says so.",
        "",
        *markdown_table(
            ["τ", "same decisions for τ in", "retrieval rate", f"routed {score}", "Δ vs Always-RAG (points)", words],
            table,
        ),
        "",
        "![τ sweep](tau_sweep.png)",
        "",
    ]


def _with_interval(
    value: float, interval: list[float] | None, digits: int, *, scale: float = 1.0, sign: bool = False
) -> str:
    """``0.812 [0.74, 0.88]``; the value alone without an interval."""
    spec = f"{'+' if sign else ''}.{digits}f"
    text = format(scale * value, spec)
    if interval is None:
        return text
    return f"{text} [{format(scale * interval[0], spec)}, {format(scale * interval[1], spec)}]"


def _rule_text(record: dict[str, Any]) -> str:
    pick = record.get("pick")
    if not pick:
        return f"the cheapest within {points_text(record['delta'])} of Always-RAG"
    guard = (
        "; a router preferred to Always-RAG for a higher score must have its 90% paired interval above 0"
        if pick["rule"] != "cheapest_within"
        else ""
    )
    return f"`classify.pick: {pick['rule']}`, {pick['describe']}{guard}"


def router_lines(classify_dir: Path, out_dir: Path) -> list[str]:
    """Markdown (+ ``router_front.png`` in ``out_dir``) for the router search; [] when the run had none."""

    path = classify_dir / "router.json"
    if not path.is_file():
        return []
    record = json.loads(path.read_text())
    unit = record["unit"]
    words = UNIT_WORDS[unit]
    search = {
        "forward": "greedy forward selection by AUROC gain per cost",
        "study": "greedy forward selection and an Optuna multi-objective study",
    }.get(record["search"], record["search"])
    lines = [
        "### Choosing a router: cost against quality",
        "",
        *headline(record),
        f"Search: {search}, replayed from the collected features (nothing regenerated). Each router's quality is "
        "its routed score out of fold on the fit split (each question routed by calibrators and a classifier fitted "
        f"on the other folds); its cost is {words} per question — its features' stats plus the retrieval where it "
        f"retrieves. The pick rule chooses among the single-step routers on the fit split ({_rule_text(record)}); "
        "the pick is then refitted on the whole fit split and measured once on the evaluation split (above).",
        "",
    ]
    refs = record["fit_references"]
    picked = record["picked"]
    cost_quality_front(
        out_dir / "router_front.png",
        record["points"],
        record["front"],
        refs,
        picked,
        title="Routers on the fit split (out of fold)",
        xlabel=f"cost per question ({words})",
        ylabel="routed score",
    )
    lines += ["![cost-quality front](router_front.png)", ""]
    rows = [[r["name"], fmt(r["quality"]), fmt(r["rate"], 2), _cost(r["scalar"], unit)] for r in refs]
    rows.append(
        [f"picked: {picked['name']}", fmt(picked["quality"]), fmt(picked["rate"], 2), _cost(picked["scalar"], unit)]
    )
    deciding = record.get("best_deciding")
    if deciding and deciding["name"] != picked["name"]:
        rows.append(
            [
                f"cheapest deciding router (τ ≤ 1) within Δ, else the best: {deciding['name']}",
                fmt(deciding["quality"]),
                fmt(deciding["rate"], 2),
                _cost(deciding["scalar"], unit),
            ]
        )
    cascade = record.get("best_cascade")
    if cascade:
        band = cascade.get("extra", {}).get("band", [None, None])
        rows.append(
            [
                f"best cascade: {cascade['name']} (band {fmt(band[0], 2)} – {fmt(band[1], 2)}, "
                f"{fmt(cascade.get('extra', {}).get('band_rate'), 2)} of questions in it)",
                fmt(cascade["quality"]),
                fmt(cascade["rate"], 2),
                _cost(cascade["scalar"], unit),
            ]
        )
    lines += [
        "On the fit split (out of fold):",
        "",
        *markdown_table(["router", "routed score", "retrieval rate", f"{words} / q"], rows),
        "",
    ]
    if record.get("forward_path"):
        path_rows = [
            [
                str(i + 1),
                " + ".join(s["features"]),
                fmt(s["auroc"]),
                _cost(s["features_scalar"], unit),
                fmt(s["gain_per_cost"], 3, style="g"),
            ]
            for i, s in enumerate(record["forward_path"])
        ]
        lines += [
            "Forward selection (each step adds the feature with the largest out-of-fold AUROC gain per added cost; "
            "a feature whose stats are already paid for costs nothing more):",
            "",
            *markdown_table(["step", "features", "AUROC (oof)", f"feature {words} / q", "gain per cost"], path_rows),
            "",
        ]
    study = record.get("study")
    if study:
        lines += [
            f"Study: {study['trials']} Optuna trials ({study['sampler']}, {study['completed']} completed, "
            f"{len(study['pareto_trials'])} on Optuna's Pareto front); open it with "
            f"`optuna trials --storage {study['storage']} --study-name {study['study_name']}`.",
            "",
        ]
    comp = record["cost_model"]["fit"]
    comp_rows = [
        [
            name,
            fmt(c.get("lm_calls"), 2),
            fmt(c.get("prefill_tokens", 0) + c.get("decoded_tokens", 0) + c.get("scored_tokens", 0), 0),
            fmt(c.get("nli_pairs"), 1),
            fmt(c.get("seconds"), 3),
        ]
        for name, c in comp["components"].items()
    ]
    retrieval = comp["retrieval"]
    comp_rows.append(
        [
            "retrieval (per retrieved question)",
            "1.00",
            fmt(retrieval["answer_prompt_tokens"] + retrieval["answer_new_tokens"], 0),
            "0.0",
            fmt(retrieval["retriever_seconds"] + retrieval["answer_seconds"], 3),
        ]
    )
    sources = ", ".join(f"{k} {v}" for k, v in retrieval.get("source", {}).items())
    cached = float(comp.get("cached_share", 0.0))
    warm = (
        f" {cached:.0%} of these LM tokens were served by the generation cache: LM calls and tokens are counted as "
        "a cold run would pay them, but measured seconds understate it."
        if cached > 0.01
        else ""
    )
    lines += [
        "Cost model (per question, fit split; cold-cache figures): each stats component once, and the retrieval "
        f"({sources}).{warm} Set `classify.retrieval_seconds` for a slower retriever (e.g. a web search) and "
        "`classify.cost_unit: seconds` to pick by latency.",
        "",
        *markdown_table(["component", "LM calls", "LM tokens", "NLI pairs", "seconds"], comp_rows),
        "",
    ]
    return lines
