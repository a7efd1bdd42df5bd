"""What the verbs print with: tables, record blocks, a run's findings; and ``--verbose`` for the libraries' noise."""

from __future__ import annotations

import logging
import warnings
from typing import Annotated

import typer


def echo_table(rows: list[list[str]], header: list[str], *, unbounded: bool = False) -> None:
    """``rows`` under ``header`` as a table fitted to the terminal (cells wrap); ``unbounded``: never wrapped or cut,
    one line per row however wide (the terminal folds long lines). Cells are printed literally (no rich markup)."""
    # rich's console and table load here, not at import: a verb that prints no table never pays for them
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(*header, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console(width=100_000 if unbounded else None).print(table)


def echo_records(rows: list[list[str]], header: list[str]) -> None:
    """Each row as a block of ``key: value`` lines (a blank line between rows): readable at any terminal width,
    nothing truncated, values printed literally."""
    width = max(len(h) for h in header)
    blocks = ["\n".join(f"{h.rjust(width)}: {value}" for h, value in zip(header, row, strict=True)) for row in rows]
    typer.echo("\n\n".join(blocks))


def echo_findings(lines: list[str]) -> None:
    """The run's findings (what it found and ships, its report's path) after the verb's own table: the last thing
    a run prints, on a terminal or in a log file."""
    if lines:
        typer.echo("findings:\n" + "\n".join(f"  {line}" for line in lines))


def peak_mb(summary: dict) -> str:
    """A stage's peak resident memory as the run table prints it ("-" when the stage did not record one)."""
    peak = summary.get("peak_rss_mb")
    return "-" if peak is None else f"{peak:.0f}"


def silence_third_party(verbose: bool) -> None:
    """Hide the libraries' warnings and log lines (DeepSpeed's accelerator notice, FutureWarning and
    DeprecationWarning lines, transformers / torch / peft notices) unless ``verbose``; the workbench's own errors and
    notes still print."""
    if verbose:
        return

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=_THIRD_PARTY_MODULES)
    for name in ("DeepSpeed", "deepspeed", "accelerate", "torch", "transformers", "peft", "huggingface_hub", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)


_THIRD_PARTY_MODULES = r"(torch|transformers|peft|accelerate|deepspeed|huggingface_hub|onnxruntime|faiss|bm25s)(\.|$)"


VerboseOption = Annotated[
    bool, typer.Option("--verbose", help="Show the libraries' warnings (DeepSpeed, FutureWarning, ...) too.")
]
