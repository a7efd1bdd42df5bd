"""The bundle's model card (``README.md``): what it decides, how well it did on held-out data, how to load it.

Written from the manifest alone, so the card never says anything the manifest does not hold: the decision through
:mod:`workbench.bundle.shipped` (the record every reader renders), what each part was fitted on from its
``provenance``.
"""

from __future__ import annotations

from typing import Any

from workbench.bundle.shipped import (
    SETTER_WORDS,
    Recalibrated,
    decision_line,
    provenance_lines,
    shipped_decision,
)
from workbench.core.formatting import fmt

EMBEDDED_CAVEAT = (
    "The embedded generator is SmolLM2-135M-Instruct, a 135M-parameter model that answers few closed-book questions "
    "correctly: the features, calibrators and thresholds learned here describe *that* model on *this* data. They do "
    "not transfer to another generator — export a bundle from a run with your own model (`generator.model=...`) "
    "before relying on its decisions."
)


def model_card(manifest: dict[str, Any]) -> str:
    """The Markdown model card of ``manifest`` (see the module docstring)."""
    name, version = manifest["name"], manifest["version"]
    models = manifest["models"]
    decision = manifest.get("decision")
    metrics = manifest.get("metrics", {})
    lines = [
        f"# {name} {version}",
        "",
        f"A workbench bundle: the decision logic of {len(manifest['methods'])} adaptive-RAG method(s) learned by the "
        f"`{manifest['recipe']['name']}` recipe (seed {manifest['seed']}), exported {manifest['created']} by workbench "
        f"{manifest['workbench']['version']}. Loading it runs no code: JSON, ONNX and safetensors only, every file "
        "checked against the sha256 in `manifest.json`.",
        "",
        "## What it contains",
        "",
        f"- **Methods:** {', '.join(f'`{m}`' for m in manifest['methods'])}.",
        f"- **Generator:** `{models['generator']['ref']}` ({models['generator']['source']}, "
        f"{models['generator']['dtype']}); **embedder:** `{models['embedder']['ref']}`; "
        f"**NLI judge:** `{models['nli']['kind']}`.",
        f"- **Corpus:** `{manifest['corpus']['source']}`, chunking `{manifest['corpus']['chunking']}`"
        + (f", {manifest['corpus']['passages']} passages" if manifest["corpus"].get("passages") else "")
        + f"; retrieval `{manifest['answering']['retriever']}` top-{manifest['answering']['k']}.",
    ]
    shipped = shipped_decision(manifest)
    if decision and shipped is not None:
        lines += [
            f"- **Retrieval decision:** {decision_line(shipped)}. {len(shipped.features)} feature(s), "
            f"{shipped.calibrator} calibrators, a `{shipped.classifier}` classifier (JSON weights and ONNX; rule "
            f"`{shipped.rule}`).",
        ]
        utility = manifest.get("utility") or {}
        if utility.get("kind") == "learned":
            if utility.get("model") == "logistic_utility":
                lines.append(
                    "- **D²-RAG utility:** a gold-free classifier of the utility class (relevant / neutral / noisy; "
                    "`learned/utility.json`)."
                )
            else:
                lines.append("- **D²-RAG utility:** a gold-free predictor of ΔSePer (`learned/utility.json`).")
        else:
            lines.append(f"- **D²-RAG utility:** none — {utility.get('meaning', '')}.")
    stats = manifest.get("stats")
    if stats:
        settings = stats["settings"]
        lines.append(
            f"- **Features computed with:** {settings['samples']} samples at T = {settings['temperature']}, "
            f"{settings['max_new_tokens']} new tokens, {settings['paraphrases']} paraphrases, judge "
            f"`{stats['nli_judge']}`, prompts `{stats['prompts']}` (the runtime uses exactly these)."
        )
    lines += ["", "## Intended use", "", EMBEDDED_CAVEAT, ""]
    recalibrated = shipped.recalibrated if shipped is not None else None
    if recalibrated is not None:
        lines += feedback_section(recalibrated)
    routing = metrics.get("routing")
    if routing:
        # a recalibrated version shows the parent's row as the parent's: new calibrators change the router's inputs
        parents = recalibrated is not None
        whose = f"{recalibrated.parent}'s run" if recalibrated is not None else "the run"
        chosen = f"{recalibrated.parent}'s decision, not this version's" if parents else "this bundle"
        lines += [
            f"## Held-out results ({routing['split']} split of {whose})",
            "",
            "| router | retrieval rate | EM | token F1 | containment | LM calls / q | tokens / q |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        pick = routing.get("classify_pick")
        for row in routing["rows"]:
            router = f"**{row['router']}** ({chosen})" if row["router"] == routing["chosen"] else row["router"]
            if row["router"] == pick and pick != routing["chosen"]:
                setter = routing.get("shipped_by")
                router += f" (classify's τ; {SETTER_WORDS.get(setter, f'the {setter}')} replaced it)"
            lines.append(
                f"| {router} | {fmt(row['retrieval_rate'], 2)} | {fmt(row['em'])} | {fmt(row['f1'])} | "
                f"{fmt(row['contains'])} | {fmt(row['lm_calls'], 1)} | {fmt(row['tokens'], 0)} |"
            )
        lines += ["", "Oracle retrieves exactly when the closed-book answer is wrong (it reads the gold answer).", ""]
        if recalibrated is not None:
            lines += [
                f"Measured by {recalibrated.parent} with its calibrators"
                + (f" and {recalibrated.parent}'s τ / router, which this version refitted." if parents else ".")
                + " This version's figures on held-out feedback are above.",
                "",
            ]
        lines += ["![routing](plots/routing.png)", ""]
    evaluate = metrics.get("evaluate")
    if evaluate:
        lines += [
            f"## Methods end to end ({evaluate['split']} split, {_first_n(evaluate)} questions)",
            "",
            "| method | containment | retrieval rate | LM calls / q | tokens / q | p50 latency (s) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for method in evaluate.get("order") or list(evaluate["methods"]):
            row = evaluate["methods"][method]
            label = method if method in manifest["methods"] else f"{method} (reads the gold answer: not in the bundle)"
            lines.append(
                f"| {label} | {fmt(row['contains'])} | {fmt(row['retrieval_rate'], 2)} | "
                f"{fmt(row['lm_calls'], 1)} | {fmt(row['tokens'], 0)} | {fmt(row['latency_p50'], 2)} |"
            )
        lines += ["", "![methods](plots/methods.png)", ""]
    utility = metrics.get("utility")
    if utility:
        figures = [f"R² {fmt(utility.get('r2'))}, Spearman ρ {fmt(utility.get('spearman'))}"] if "r2" in utility else []
        figures.append(
            f"utility-class agreement {fmt(utility.get('class_agreement'))} against "
            f"{fmt(utility.get('majority_agreement'))} for always predicting the commonest class"
        )
        if "macro_f1" in utility:
            figures.append(f"macro-F1 {fmt(utility.get('macro_f1'))} against {fmt(utility.get('majority_macro_f1'))}")
        lines += ["## Utility predictor (out of fold)", "", "; ".join(figures) + ".", ""]
    provenance = provenance_lines(manifest)
    if provenance:
        lines += ["## What was fitted on what", "", *provenance]
    from workbench.methods.registry import default_method

    default = default_method(list(manifest["methods"]))
    lines += [
        "## How to load it",
        "",
        "```bash",
        f'workbench infer --bundle artifacts/bundles/{name}/{version} --method {default} "Who painted the Mona Lisa?"',
        f"workbench serve --bundle artifacts/bundles/{name}/{version}   # JSON API on 127.0.0.1:8000",
        "```",
        "",
        "```python",
        "from workbench import load_bundle",
        "",
        f'rt = load_bundle("artifacts/bundles/{name}/{name}-{version}.tar.gz")  # or the directory',
        f'answer = rt.answer("Who painted the Mona Lisa?", method="{default}")',
        "print(answer.text, answer.retrieved, answer.p_correct)",
        "```",
        "",
        "The field-by-field format is documented in the workbench's `docs/bundles.md`.",
    ]
    return "\n".join(lines) + "\n"


def feedback_section(recalibrated: Recalibrated) -> list[str]:
    """The card's section of a recalibrated version: its parent's decision and its own on the held-out feedback
    (τ, retrieval rate, the routing comparison's quality figure with this version's interval, mean ECE)."""
    before, after, parent = recalibrated.before, recalibrated.after, recalibrated.parent
    rows = recalibrated.rows if recalibrated.rows is not None else "the"
    fitted = f" {recalibrated.fit_rows}" if recalibrated.fit_rows is not None else ""
    lines = [
        "## Held-out feedback (this version)",
        "",
        f"Recalibrated from {parent} by `workbench recalibrate`: {', '.join(recalibrated.refitted)} refitted on"
        f"{fitted} feedback rows, both decisions measured on {rows} held-out ones — what this version ships was "
        "measured here."
        + f" The run's routing table below measured {parent}'s decision: new calibrators change what the router reads,"
        " so it is not this version's.",
        "",
    ]
    if recalibrated.metric is None:
        return [*lines, f"Mean ECE {fmt(before['mean_ece'])} ({parent}) → {fmt(after['mean_ece'])} (this version).", ""]
    low, high = recalibrated.quality_ci
    quality = recalibrated.metric.replace("_", " ")
    return [
        *lines,
        f"| decision | τ | retrieval rate | {quality} | mean ECE |",
        "|---|---:|---:|---:|---:|",
        f"| {parent} | {fmt(before['tau'])} | {fmt(before['retrieval_rate'], 2)} | {fmt(before['quality'])} | "
        f"{fmt(before['mean_ece'])} |",
        f"| **this version** | {fmt(after['tau'])} | {fmt(after['retrieval_rate'], 2)} | {fmt(after['quality'])} "
        f"[{fmt(low)}, {fmt(high)}] | {fmt(after['mean_ece'])} |",
        "",
        f"{quality.capitalize()}: {recalibrated.definition or recalibrated.metric}; "
        f"{recalibrated.intervals or 'bootstrap intervals'}.",
        "",
    ]


def _first_n(evaluate: dict[str, Any]) -> str:
    sizes = {row.get("n") for row in evaluate["methods"].values()}
    return str(next(iter(sizes))) if len(sizes) == 1 else "several"
