"""A user's QA file (.jsonl / .json / .parquet) read through the field mapping, with each row's split when the file
has a split column (:mod:`workbench.data.field_mapping` says what reading a row does; docs/data.md for users)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core.errors import DataError
from workbench.data.field_mapping import map_qa_row, row_split
from workbench.data.record_files import read_rows

if TYPE_CHECKING:
    import datasets


@dataclass
class UserDataset:
    """A user's QA file as read: ``rows`` the schema rows of its first records (all of them unless a limit was given),
    ``splits`` every record's split (None without a split column), ``kept_in_metadata`` the columns that are no
    schema field, kept in each row's metadata (first-seen order), ``records`` how many records the file holds."""

    rows: list[dict[str, Any]]
    splits: list[str] | None
    kept_in_metadata: list[str]
    records: int

    def split_sizes(self) -> dict[str, int]:
        """Records per split named in the split column (empty without one), in first-seen order."""
        sizes: dict[str, int] = {}
        for split in self.splits or []:
            sizes[split] = sizes.get(split, 0) + 1
        return sizes


def read_user_dataset(
    path: str | Path,
    *,
    fields: Mapping[str, str] | None = None,
    split_column: str | None = None,
    split_names: Mapping[str, str] | None = None,
    documents: Mapping[str, tuple[str, str]] | None = None,
    limit: int | None = None,
) -> UserDataset:
    """Read ``path``: map and check its first ``limit`` records (None: all) with ``fields`` (``data.fields``; gold
    passages given by id resolved in ``documents``, doc id → ``(title, text)``), and read every record's split from
    ``split_column`` (values mapped by ``split_names``). DataError naming the file and the row (1-based, counting
    records) for the first bad one, or for a file with no records."""
    records = read_rows(path)
    if not records:
        raise DataError("file holds no rows", str(path))
    skip = (split_column,) if split_column else ()
    rows, kept = [], {}
    for number, record in enumerate(records[:limit] if limit else records, start=1):
        row, extra = map_qa_row(record, fields or {}, f"{path}, row {number}", documents=documents, skip=skip)
        rows.append(row)
        kept.update(dict.fromkeys(extra))
    splits = None
    if split_column:
        names = split_names or {}
        splits = [row_split(r, split_column, names, f"{path}, row {n}") for n, r in enumerate(records, start=1)]
    return UserDataset(rows, splits, [str(column) for column in kept], len(records))


def split_by_column(dataset: datasets.Dataset, splits: list[str], names: tuple[str, ...], seed: int):
    """A DatasetDict with one split per name of ``names`` (in that order; empty when no row names it) holding the rows
    whose entry of ``splits`` names it, shuffled by ``seed`` as fraction splits are."""
    import datasets
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(dataset))
    by_split: dict[str, list[int]] = {name: [] for name in names}
    for index in order.tolist():
        by_split[splits[index]].append(index)
    return datasets.DatasetDict({name: dataset.select(indices) for name, indices in by_split.items()})
