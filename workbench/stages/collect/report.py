"""Report section for the ``collect`` stage: how well each uncertainty feature predicts closed-book correctness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from workbench.metrics.bootstrap import N_RESAMPLES
from workbench.plots import grouped_bars
from workbench.reports.auroc import MIN_PER_CLASS, auroc_interval, minority, split_rows
from workbench.reports.section import Section, SectionInput


def feature_section(collect_dir: Path, out_dir: Path, split: str = "test") -> list[str]:
    """Markdown lines (and ``feature_auroc.png`` in ``out_dir``): per-feature AUROC on every collected split.

    The table shows each split's AUROC for ``correct_contains`` with a 90% BCa bootstrap interval on ``split``, the
    share of correct answers, and the features' collection cost per question.
    """

    summary = json.loads((collect_dir / "summary.json").read_text())
    meta = json.loads((collect_dir / "metadata.json").read_text())
    features: list[str] = summary["features"]
    splits = list(summary["splits"])
    data = {s: split_rows(collect_dir, s) for s in splits}
    lines = [
        "## Uncertainty features: do they predict closed-book correctness?",
        "",
        f"{', '.join(f'{len(data[s])} `{s}`' for s in splits)} questions; label `correct_contains` of the greedy "
        "closed-book answer; features oriented so that higher = more certain (AUROC 0.5 = no signal). NLI judge "
        f"`{meta.get('nli_judge')}`, N = {meta['settings']['samples']} samples at T = "
        f"{meta['settings']['temperature']}.",
        "",
    ]
    for s in splits:
        rows = data[s]
        positives = int(sum(r["correct_contains"] for r in rows))
        lines.append(f"- `{s}`: {positives} of {len(rows)} closed-book answers correct")
    scarce = minority(data.get(split, [])) < MIN_PER_CLASS
    if scarce:
        lines.append(
            f"- `{split}` has fewer than {MIN_PER_CLASS} correct (or wrong) answers: its AUROCs rank a handful of "
            "answers against the rest and are anecdotal, so no interval is shown"
        )
    head = " | ".join(f"AUROC `{s}`" for s in splits)
    lines += [
        "",
        f"| feature | {head} | 90% interval on `{split}` (BCa bootstrap, {N_RESAMPLES:,} resamples) | NaN rows |",
        "|---|" + "---:|" * len(splits) + "---|---:|",
    ]
    bounds: list[tuple[float, float] | None] = []  # the error bars of the plot's `split` series
    for name in features:
        cells = []
        for s in splits:
            value = summary["splits"][s]["auroc_correct_contains"].get(name)
            cells.append("–" if value is None else f"{value:.3f}")
        bound = auroc_interval(data.get(split, []), name)
        interval = "–" if bound is None else f"{bound[0]:.2f} – {bound[1]:.2f}"
        bounds.append(bound)
        nans = sum(summary["splits"][s]["nan_count"].get(name, 0) for s in splits)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {interval} | {nans} |")
    series = {s: [summary["splits"][s]["auroc_correct_contains"].get(n) for n in features] for s in splits}
    shown = split in splits and any(b is not None for b in bounds)
    grouped_bars(
        out_dir / "feature_auroc.png",
        features,
        series,
        title="AUROC of each feature for closed-book correctness"
        + (f" (error bars: 90% BCa interval on {split})" if shown else ""),
        ylabel="AUROC",
        rotate=45,
        intervals={split: bounds} if shown else None,
        reference=(0.5, "chance"),
    )
    lines += ["", "![feature AUROC](feature_auroc.png)", ""]
    if data.get(split):
        rows = data[split]
        keys = ("lm_calls", "prefill_tokens", "decoded_tokens", "cached_lm_calls", "cached_prefill_tokens")
        cost = {k: float(np.mean([r.get(k, 0.0) for r in rows])) for k in (*keys, "cached_decoded_tokens", "seconds")}
        cached = ""
        if cost["cached_lm_calls"] > 0:  # earlier runs made these generations: their cost, had they been made here
            cached = (
                f" The generation cache served {cost['cached_lm_calls']:.2f} more LM calls per question "
                f"({cost['cached_prefill_tokens']:.0f} prefill + {cost['cached_decoded_tokens']:.0f} decoded tokens) "
                "that earlier runs had made."
            )
        lines += [
            f"Collecting all {len(features)} features cost, per `{split}` question: {cost['lm_calls']:.2f} LM calls, "
            f"{cost['prefill_tokens']:.0f} prefill + {cost['decoded_tokens']:.0f} decoded tokens, "
            f"{cost['seconds']:.2f} s.{cached}",
            "",
        ]
        if "delta_seper_s" in rows[0]:
            delta = np.asarray([r["delta_seper_s"] for r in rows])
            gain = (
                np.asarray([r["rag_contains"] - r["correct_contains"] for r in rows])
                if "rag_contains" in rows[0]
                else None
            )
            text = (
                f"Retrieval utility (SePer-S): mean ΔSePer {delta.mean():+.3f}; the passages raise the model's belief "
                f"in the gold answer for {int((delta > 0).sum())} questions and lower it for {int((delta < 0).sum())}."
            )
            if gain is not None:
                text += f" Mean change in containment from closed-book to RAG: {gain.mean():+.3f}."
            lines += [text, ""]
    return lines


def section(view: SectionInput) -> Section:
    """The ``collect`` stage's section of the run's report (:func:`feature_section`)."""
    return Section(feature_section(view.stage_dir, view.out_dir))
