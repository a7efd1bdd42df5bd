"""Loading QA datasets into the QA schema from local files, saved dataset dicts, the built-in wiki-qa, or the hub.

``load_qa_dataset(source)`` accepts:

* a local ``.jsonl`` / ``.json`` / ``.parquet`` file whose rows are in the schema (validated row by row; other columns
  are kept in ``metadata``; build_data reads user files through the field mapping, :mod:`workbench.data.user_dataset`);
* a directory written by :func:`workbench.data.dataset_store.save_dataset_dict` (pick the split);
* ``wiki-qa``: the built-in dataset built from the embedded Wikipedia summaries (default seed and settings);
* ``hub:<name>`` or a bare known name (``nq_open``, ``trivia_qa``, ``hotpot_qa``, ``medmcqa``, ``pubmed_qa``,
  ``fever``; their hub paths work too): fetched with ``datasets.load_dataset`` and mapped by
  :mod:`workbench.data.hub_formats`. This needs hub access (or the local datasets cache); with
  ``HF_HUB_OFFLINE=1`` and no cache it fails at once with a :class:`DataError` saying so.

``load_raw_local(name, path)`` reads a local file in a hub dataset's *raw* format and maps it the same way.
"""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets

from workbench.core.errors import DataError
from workbench.data.dataset_store import load_saved_dataset_dict
from workbench.data.field_mapping import USER_FILE_SUFFIXES
from workbench.data.hub_formats import HubFormat, get_format, known_names
from workbench.data.record_files import read_rows
from workbench.data.schema import rows_to_dataset
from workbench.data.user_dataset import read_user_dataset

__all__ = ["load_hub", "load_local_qa", "load_qa_dataset", "load_raw_local", "read_rows", "source_kind"]

if TYPE_CHECKING:
    import datasets

LOCAL_SUFFIXES: tuple[str, ...] = USER_FILE_SUFFIXES
WIKIQA_SOURCE = "wiki-qa"


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")


# --------------------------------------------------------------------------------------------- sources


def load_local_qa(path: str | Path, *, limit: int | None = None) -> datasets.Dataset:
    """A local file whose rows are in the QA schema, validated row by row (first ``limit`` rows); columns that are no
    schema field are kept in ``metadata`` (:func:`workbench.data.user_dataset.read_user_dataset`, no field mapping).

    A bad row raises :class:`DataError` naming the file and the row number (1-based, counting records).
    """

    _check_limit(limit)
    return rows_to_dataset(read_user_dataset(path, limit=limit).rows, str(path))


def load_raw_local(
    name: str, path: str | Path, split: str | None = None, *, limit: int | None = None
) -> datasets.Dataset:
    """A local file in the raw hub format of dataset ``name``, mapped to the QA schema by that dataset's mapper.

    ``split`` only labels ids and metadata (default: the dataset's default split). Errors name the file and row.
    """
    _check_limit(limit)
    fmt = get_format(name, str(path))
    return _map(fmt, read_rows(path), split or fmt.default_split, str(path), limit)


def _map(fmt: HubFormat, rows: Any, split: str, where: str, limit: int | None) -> datasets.Dataset:
    examples = list(islice(fmt.mapper(rows, split, where), limit))
    if not examples:
        raise DataError(f"no usable {fmt.name} examples", where)
    return rows_to_dataset([example.to_row() for example in examples], where)


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``) is set to a true value."""
    values = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("HF_DATASETS_OFFLINE", ""))
    return any(v.strip().lower() in ("1", "true", "yes", "on") for v in values)


def load_hub(name: str, split: str | None = None, *, limit: int | None = None) -> datasets.Dataset:
    """Fetch a known dataset with ``datasets.load_dataset(path, config, split=...)`` and map it to the schema.

    Fails with a :class:`DataError` (never a network traceback) when the hub cannot be reached; when
    ``HF_HUB_OFFLINE`` is set the message says so (the local datasets cache is still tried first).
    """
    _check_limit(limit)
    fmt = get_format(name)
    split = split or fmt.default_split
    where = f"hub:{fmt.name} {fmt.describe()} [{split}]"

    try:
        raw = datasets.load_dataset(fmt.path, fmt.config, split=split)
    except Exception as exc:  # ConnectionError, DatasetNotFoundError, ValueError (bad split), ...
        detail = f"{exc.__class__.__name__}: {exc}".splitlines()[0][:200]
        if hub_offline():
            what = (
                "HF_HUB_OFFLINE is set and the dataset is not in the local datasets cache, so the hub is not "
                f"reachable; unset HF_HUB_OFFLINE on a machine with hub access, or pass a local file ({detail})"
            )
        else:
            what = f"could not load from the hub (unreachable, or wrong split?): {detail}"
        raise DataError(what, where) from exc
    return _map(fmt, raw, split, where, limit)


def _load_saved(path: Path, split: str | None) -> datasets.Dataset:
    dd = load_saved_dataset_dict(path)
    if split is None and len(dd) == 1:
        split = next(iter(dd))
    if split not in dd:
        raise DataError(f"choose a split: {split!r} is not one of {', '.join(dd)}", str(path))
    return dd[split]


def _load_wikiqa(split: str | None) -> datasets.Dataset:
    from workbench.data.wikiqa import build_wikiqa, load_articles

    dd = build_wikiqa(load_articles())
    split = split or "test"
    if split not in dd:
        raise DataError(f"unknown split {split!r}; wiki-qa has {', '.join(dd)}", WIKIQA_SOURCE)
    return dd[split]


def source_kind(source: str) -> str:
    """How :func:`load_qa_dataset` reads ``source``: ``"hub"`` (``hub:<name>`` or a known name), ``"file"`` (a local
    .jsonl / .json / .parquet path, not opened here), ``"saved"`` (a directory) or ``"wiki-qa"``. A one-line
    :class:`DataError` for anything else."""
    source = str(source).strip()
    path = Path(source).expanduser()
    if source.startswith("hub:"):
        return "hub"
    if path.suffix.lower() in LOCAL_SUFFIXES:
        return "file"
    if path.is_dir():
        return "saved"
    if source == WIKIQA_SOURCE:
        return "wiki-qa"
    try:
        get_format(source)
    except DataError:
        raise DataError(
            f"unknown dataset source {source!r}: not a local {'/'.join(LOCAL_SUFFIXES)} file, not a saved "
            f"dataset directory, not '{WIKIQA_SOURCE}', not a known hub dataset ({', '.join(known_names())})",
            "dataset source",
        ) from None
    return "hub"


def load_qa_dataset(source: str, split: str | None = None, *, limit: int | None = None) -> datasets.Dataset:
    """Load ``source`` as a dataset with :data:`~workbench.data.schema.QA_FEATURES` (see the module docstring and
    :func:`source_kind`).

    ``split``: for the hub, the hub split (default: the dataset's evaluation split); for a saved directory or
    ``wiki-qa``, the split name (``wiki-qa`` default: ``test``); ignored for a single local file. ``limit`` keeps
    the first rows. Every failure is a one-line :class:`DataError` naming the source.
    """
    _check_limit(limit)
    source = str(source).strip()
    kind = source_kind(source)
    if kind == "hub":
        return load_hub(source.removeprefix("hub:"), split, limit=limit)
    if kind == "file":
        return load_local_qa(Path(source).expanduser(), limit=limit)
    ds = _load_saved(Path(source).expanduser(), split) if kind == "saved" else _load_wikiqa(split)
    return ds.select(range(min(limit, ds.num_rows))) if limit else ds
