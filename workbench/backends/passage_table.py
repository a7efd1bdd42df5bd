"""The passages an external retriever and its consumers share: the run's corpus, grown by the passages the engine
returns that the corpus lacks (layer 3).

Consumers (the methods' :class:`~workbench.methods.base.Tools`, the collect and answer stages, the runtime) read a
retrieved passage's title and text by its row in a table of columns. An external engine may hold passages the run's
corpus does not (a production index, a served retriever): when it returns such a passage with its text, the
retriever appends a row for it (:meth:`PassageTable.add`), so every index it hands out stays a valid row and the
consumers need not know where the passage came from. Rows are only ever appended, so indices never move.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from workbench.core.errors import DataError

REQUIRED: tuple[str, ...] = ("chunk_id", "doc_id", "title", "text", "index")
"""The columns every table holds (a row the engine added has ``index`` 0: its position in its document is unknown)."""


class PassageTable:
    """An append-only table of passage columns keyed by ``chunk_id``.

    ``table[name]`` is the live column (a list: rows appended later appear in it; callers must not modify it),
    ``len(table)`` the row count, :meth:`row` a chunk id's row, :meth:`add` appends a passage the table lacks.
    Columns of the source beyond :data:`REQUIRED` are kept; added rows hold None there.
    """

    def __init__(self, columns: Mapping[str, list[Any]]) -> None:
        lengths = {len(values) for values in columns.values()}
        if len(lengths) > 1:
            raise DataError("passage columns differ in length", "corpus")
        n = lengths.pop() if lengths else 0
        self._columns: dict[str, list[Any]] = {name: list(values) for name, values in columns.items()}
        for name in REQUIRED:
            if name not in self._columns:
                self._columns[name] = [0 if name == "index" else "" for _ in range(n)]
        self._columns["chunk_id"] = [str(pid) for pid in self._columns["chunk_id"]]
        self._rows = {pid: i for i, pid in enumerate(self._columns["chunk_id"])}
        if len(self._rows) != n:
            raise DataError("passage ids must be unique", "corpus")
        self._lock = threading.Lock()

    @classmethod
    def of(cls, passages: Any) -> PassageTable:
        """A table over ``passages``: a PassageTable (itself), None (an empty table: every passage will come from the
        engine), an HF ``datasets.Dataset`` or a mapping of columns holding at least ``chunk_id`` and ``text``."""
        if isinstance(passages, PassageTable):
            return passages
        if passages is None:
            return cls({})
        names = list(passages.column_names) if hasattr(passages, "column_names") else list(passages)
        missing = [name for name in ("chunk_id", "text") if name not in names]
        if missing:
            raise DataError(f"missing column(s) {missing}; found {names}", "corpus")
        return cls({name: list(passages[name]) for name in names})

    @property
    def column_names(self) -> list[str]:
        """The table's columns (as ``datasets.Dataset.column_names``)."""
        return list(self._columns)

    def __getitem__(self, name: str) -> list[Any]:
        return self._columns[name]

    def __len__(self) -> int:
        return len(self._columns["chunk_id"])

    def row(self, chunk_id: str) -> int | None:
        """The row of ``chunk_id``, or None when the table lacks it."""
        return self._rows.get(chunk_id)

    def add(self, chunk_id: str, text: str, *, title: str = "", doc_id: str | None = None) -> int:
        """The row of ``chunk_id``, appended with ``text``, ``title`` and ``doc_id`` (default: the chunk id's part
        before ``#``, the workbench's ``<doc_id>#<i>`` convention) when the table lacks it."""
        with self._lock:
            found = self._rows.get(chunk_id)
            if found is not None:
                return found
            values = {
                "chunk_id": chunk_id,
                "doc_id": doc_id if doc_id is not None else chunk_id.split("#", 1)[0],
                "title": title,
                "text": text,
                "index": 0,
            }
            for name, column in self._columns.items():
                column.append(values.get(name))
            row = len(self._columns["chunk_id"]) - 1
            self._rows[chunk_id] = row
            return row


def passages_of(retriever: Any, corpus: Any) -> Any:
    """What a consumer of ``retriever``'s results reads passages from: the retriever's :class:`PassageTable` when it
    keeps one (an external engine may return passages ``corpus`` lacks), else ``corpus`` itself."""
    table = getattr(retriever, "passages", None)
    return table if isinstance(table, PassageTable) else corpus
