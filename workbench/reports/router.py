"""Report sections: the router classify picks on a cost–quality front (classify's ``router.json``), and what the run
ships (:func:`shipped_lines`: the bundle's record of the decision, τ and α with who set them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt, markdown_table

UNIT_WORDS = {"tokens": "LM tokens", "seconds": "seconds", "lm_calls": "LM calls"}


def _cost(value: float, unit: str) -> str:
    return fmt(value, 3 if unit == "seconds" else (2 if unit == "lm_calls" else 0))


def headline(record: dict[str, Any]) -> list[str]:
    """The answer to "which router is cheapest within Δ of Always-RAG, and what does it save?" on the evaluation
    split, with the paired BCa bootstrap intervals — or, honestly, that no router pays for itself here."""
    ev, unit = record["evaluation"], record["unit"]
    words = UNIT_WORDS[unit]
    spec = record["spec"]
    kind = {"logistic": "LR", "mlp": "MLP"}[spec["kind"]]
    name = f"{kind}({' + '.join(spec['features'])}; {spec['calibrator']})"
    d_lo, d_hi = ev["difference_interval"]
    s_lo, s_hi = ev["saving_interval"]
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
            f" The cheapest router that decides (τ ≤ 1) within {100 * record['delta']:.0f} point(s): "
            f"`{deciding['name']}`, {_cost(deciding['scalar'], unit)} {words} per question on the fit split against "
            f"Always-RAG's {_cost(record['fit_references'][1]['scalar'], unit)}."
            if deciding and deciding["quality"] >= record["fit_references"][1]["quality"] - record["delta"] - 1e-12
            else ""
        )
        lead = (
            "**No router pays for itself here:** retrieving for every question is within "
            f"{100 * record['delta']:.0f} point(s) of Always-RAG and the cheapest, so classify's pick has τ > 1 "
            f"and retrieves without computing any feature — it costs exactly Always-RAG.{cheapest} (What the run "
            "ships — a study or a parameters file may move τ — is under *What ships* below.)"
        )
        return [lead, ""]
    if record["pays_for_itself"]:
        lead = f"**The picked router pays for itself here.** {facts}"
    elif record["picked"]["within_delta"] and ev["cost"] < ev["always_cost"] and not ev.get("within_delta", True):
        lead = (
            f"**No router pays for itself here:** the pick was within {100 * record['delta']:.0f} point(s) of "
            f"Always-RAG on the fit split and is cheaper, but on the evaluation split it loses more than that. {facts}"
        )
    elif not record["picked"]["within_delta"]:
        lead = (
            f"**No router pays for itself here:** none came within {100 * record['delta']:.0f} point(s) of "
            f"Always-RAG on the fit split; the best-quality router is shipped. {facts}"
        )
    else:
        lead = (
            "**No router pays for itself here:** the cheapest router within "
            f"{100 * record['delta']:.0f} point(s) of Always-RAG costs more than retrieving every time. {facts}"
        )
    return [lead, ""]


def shipped_lines(export_dir: Path | None, config: Any, stage_dir: Callable[[str], Path | None]) -> list[str]:
    """The *What ships* section: D²-RAG's decision as the run's bundle records it (the export's manifest, rendered
    by :mod:`workbench.bundle.shipped` as the model card, ``workbench bundles``, ``GET /methods`` and ``workbench
    infer`` render it), or, for a run that exports nothing, as it would ship; and whether that is classify's pick or
    who replaced its τ. [] when the run has no D²-RAG decision."""
    from workbench.bundle.shipped import decision_line, run_decision, shipped_decision

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
        else f"classify's router with the τ the {decision.tau.set_by} set, replacing classify's"
    )
    tables = " What each part was fitted on is under *Bundle*." if manifest is not None else ""
    return ["### What ships", "", f"From {source}: {who}.{tables}", "", f"**{decision_line(decision)}.**", ""]


def router_lines(classify_dir: Path, out_dir: Path) -> list[str]:
    """Markdown (+ ``router_front.png`` in ``out_dir``) for the router search; [] when the run had none."""
    from workbench.plots import cost_quality_front

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
        f"retrieves. Pick rule: the cheapest single-step router within {100 * record['delta']:.0f} point(s) of "
        "Always-RAG's score on the fit split; it is then refitted on the whole fit split and measured once on the "
        "evaluation split (above).",
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
