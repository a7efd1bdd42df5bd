"""Saving and loading QA :class:`datasets.DatasetDict` directories with a content fingerprint.

A saved directory holds what ``DatasetDict.save_to_disk`` writes for the splits that have rows, plus
``fingerprint.json``: the content fingerprint, the row count of every split (empty ones included, with 0), the
split order and the sha256 of every file. ``datasets`` cannot save or load a zero-row split, so empty splits are
not written; loading recreates them as empty datasets with :data:`~workbench.data.schema.QA_FEATURES`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import DatasetDict, load_from_disk
from datasets import utils as hf_utils

from workbench.core.atomic import atomic_directory, atomic_write_json
from workbench.core.errors import DataError
from workbench.core.hashing import canonical_json, tree_sha256
from workbench.data.schema import examples_to_dataset, validate_qa_dataset

if TYPE_CHECKING:
    import datasets

FINGERPRINT_FILE = "fingerprint.json"


def dataset_dict_fingerprint(dd: datasets.DatasetDict) -> str:
    """A content hash of every split's rows (in order) and features; independent of Arrow file layout."""
    digest = hashlib.sha256()
    for split in sorted(dd):
        digest.update(f"\x1esplit:{split}:{canonical_json(dd[split].features.to_dict())}".encode())
        for row in dd[split]:
            digest.update(canonical_json(row).encode("utf-8"))
            digest.update(b"\x1f")
    return digest.hexdigest()[:16]


def save_dataset_dict(dd: datasets.DatasetDict, path: str | Path) -> str:
    """Write ``dd`` to ``path`` atomically (``save_to_disk`` in a temp dir, then one swap) with a ``fingerprint.json``.

    Splits with no rows are not written (``datasets`` cannot load them back) but are recorded with 0 rows, so
    :func:`load_saved_dataset_dict` recreates them. Returns the fingerprint.
    """

    fingerprint = dataset_dict_fingerprint(dd)
    filled = DatasetDict({split: dd[split] for split in dd if dd[split].num_rows > 0})
    bars_were_on = not hf_utils.are_progress_bars_disabled()
    hf_utils.disable_progress_bars()  # one bar per split is noise in logs
    try:
        with atomic_directory(path) as tmp:
            if filled:
                filled.save_to_disk(str(tmp))
            record = {
                "fingerprint": fingerprint,
                "splits": {split: dd[split].num_rows for split in dd},
                "order": list(dd),
                "files": tree_sha256(tmp),
            }
            atomic_write_json(Path(tmp) / FINGERPRINT_FILE, record)
    finally:
        if bars_were_on:
            hf_utils.enable_progress_bars()
    return fingerprint


def read_fingerprint(path: str | Path) -> str:
    """The fingerprint recorded in a directory written by :func:`save_dataset_dict` (DataError if absent)."""
    return _read_record(Path(path))["fingerprint"]


def _read_record(path: Path) -> dict[str, Any]:
    """The parsed ``fingerprint.json`` of ``path``; DataError when the directory or the record is missing or bad."""
    if not path.is_dir():
        raise DataError("no saved dataset here (directory missing)", str(path))
    try:
        record = json.loads((path / FINGERPRINT_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"missing or unreadable {FINGERPRINT_FILE}: {exc.__class__.__name__}", str(path)) from exc
    if not isinstance(record, dict) or not {"fingerprint", "files"} <= record.keys():
        raise DataError(f"{FINGERPRINT_FILE} lacks 'fingerprint' or 'files'", str(path))
    return record


def _verify_files(path: Path, record: dict[str, Any]) -> None:
    """DataError naming the first differing files when ``path``'s files differ from the record's sha256s."""
    actual = {k: v for k, v in tree_sha256(path).items() if k != FINGERPRINT_FILE}
    if actual != record["files"]:
        changed = sorted(set(actual.items()) ^ set(record["files"].items()))
        names = sorted({name for name, _ in changed})
        listed = ", ".join(names[:5])
        raise DataError(f"files differ from {FINGERPRINT_FILE} (corrupt or edited): {listed}", str(path))


def _empty_splits(record: dict[str, Any], path: Path) -> list[str]:
    """The splits the record lists with 0 rows (they have no files); DataError when ``splits`` is malformed."""
    splits = record.get("splits", {})
    if not isinstance(splits, dict) or not all(isinstance(n, int) and n >= 0 for n in splits.values()):
        raise DataError(f"{FINGERPRINT_FILE} has a malformed 'splits' entry", str(path))
    return [split for split, rows in splits.items() if rows == 0]


def _load_filled(path: Path, expect_files: bool) -> dict[str, datasets.Dataset]:
    """The splits ``save_to_disk`` wrote under ``path`` (none when only empty splits were saved)."""

    if not expect_files:
        return {}
    try:
        dd = load_from_disk(str(path))
    except Exception as exc:  # datasets raises several types for a damaged directory
        detail = f"{exc.__class__.__name__}: {exc}".splitlines()[0]
        raise DataError(f"cannot load saved dataset: {detail}", str(path)) from exc
    if not isinstance(dd, DatasetDict):
        raise DataError("holds a single dataset, not a dataset dict with splits", str(path))
    return dict(dd)


def load_saved_dataset_dict(path: str | Path, *, verify: bool = True) -> datasets.DatasetDict:
    """Load a directory written by :func:`save_dataset_dict`; each split is schema-checked.

    With ``verify`` (default) every file's sha256 is compared with ``fingerprint.json`` first. Splits recorded with
    0 rows come back as empty datasets with the QA features, in the saved split order. Raises :class:`DataError`
    naming ``path`` when the directory is missing, incomplete, altered or unreadable.
    """

    path = Path(path)
    record = _read_record(path)
    if verify:
        _verify_files(path, record)
    empty = _empty_splits(record, path)
    splits = _load_filled(path, expect_files=bool(record["files"]))
    for split in empty:
        splits.setdefault(split, examples_to_dataset([]))
    order = [s for s in record.get("order", []) if s in splits]
    dd = DatasetDict({split: splits[split] for split in [*order, *(s for s in splits if s not in order)]})
    for split in dd:
        validate_qa_dataset(dd[split], f"{path} [{split}]")
    return dd
