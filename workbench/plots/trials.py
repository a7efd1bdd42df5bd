"""An Optuna study's trials: the optimisation history and the quality–tokens Pareto front, per method."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import workbench.plots.figure as figure


def history_plot(path: Path, methods: dict[str, Any], objective: str) -> Path:
    """One panel per method: each trial's val score (dots, coloured by kind) and the best so far (line)."""
    plt = figure.pyplot()
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.0), dpi=110, squeeze=False)
    colours = {"replay": "tab:blue", "decode": "tab:orange", "memo": "tab:grey"}
    for ax, (name, row) in zip(axes[0], methods.items(), strict=True):
        trials = row["trials"]
        xs = [t["number"] for t in trials]
        ys = [t["metrics"][objective] for t in trials]
        for kind, colour in colours.items():
            pts = [(x, y) for x, y, t in zip(xs, ys, trials, strict=True) if t["kind"] == kind]
            if pts:
                ax.scatter(*zip(*pts, strict=True), s=14, color=colour, label=kind)
        best, running = [], float("-inf")
        for y in ys:
            running = max(running, y)
            best.append(running)
        ax.step(xs, best, where="post", color="black", linewidth=1, label="best so far")
        ax.set_title(f"{name}: {objective} on val", fontsize=9)
        ax.set_xlabel("trial")
        ax.legend(fontsize=7, frameon=False)
    return figure.finish(plt, fig, list(axes[0]), path)


def pareto_plot(path: Path, methods: dict[str, Any], objective: str) -> Path:
    """Quality vs tokens per question for every trial; the Pareto front's trials ringed."""
    plt = figure.pyplot()
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.0), dpi=110, squeeze=False)
    for ax, (name, row) in zip(axes[0], methods.items(), strict=True):
        front = set(row.get("pareto") or [])
        for t in row["trials"]:
            on = t["number"] in front
            ax.scatter(
                t["metrics"]["tokens"],
                t["metrics"][objective],
                s=30 if on else 12,
                facecolors="none" if on else "tab:blue",
                edgecolors="tab:red" if on else "tab:blue",
            )
        ax.set_title(f"{name}: Pareto front (ringed)", fontsize=9)
        ax.set_xlabel("tokens / question")
        ax.set_ylabel(objective)
    return figure.finish(plt, fig, list(axes[0]), path)
