"""A bundle on an external retriever: what its manifest records of the engine, and the check that it is the same one.

A bundle never holds the index nor the credentials. The ``external_retriever`` block (schema 1.5) records how to
reach the engine — backend, URI without credentials (:func:`~workbench.backends.retrieval_engines.public_uri`),
index, channel, field mapping, the NAME of the credentials variable and the request limits — what to do when it
fails at run time (``on_failure``), and a fingerprint of the index taken at export: its document count and, for each
of the fixed :data:`PROBE_QUERIES`, the ids and scores of its top :data:`PROBE_K` hits. The loader takes the same
fingerprint (:func:`engine_fingerprint`, with the queries the manifest records) and compares
(:func:`fingerprint_differences`): another index — rows deleted or added, another table, re-embedded vectors — is
refused unless overridden on purpose.

The probe queries are fixed strings, not the run's questions: they hold no data of the run, and short common words
match something in any English corpus on the lexical channel (the dense channel always returns ``k`` hits).
"""

from __future__ import annotations

import math
from typing import Any

from workbench.bundle.manifest import RECORDED_CONNECTION

PROBE_QUERIES: tuple[str, ...] = (
    "Which river flows through the capital city?",
    "Who wrote the novel and when was it published?",
    "In which year was the president born?",
    "What is the largest country in the world?",
)
"""The queries whose hits fingerprint an index (recorded in the manifest: a loader runs the recorded ones)."""

PROBE_K = 5
"""Hits per probe query."""

SCORE_TOLERANCE = 1e-4
"""Largest difference between a probe hit's score at export and at load still taken as the same (engines compute in
float32; an HNSW graph may differ in the last bits between processes)."""

ON_FAILURE = ("error", "closed_book")
"""What a bundle does when its retriever fails at run time: ``error`` (the caller gets the one-line engine error;
``workbench serve`` answers HTTP 503) or ``closed_book`` (the question is answered without retrieval, a note says
why)."""


def engine_fingerprint(retriever: Any, queries: list[str] | tuple[str, ...], k: int) -> dict[str, Any]:
    """``{"documents", "k", "probes": [{"query", "ids", "scores"}]}`` of an external ``retriever``: the engine's
    document count (None when the engine cannot say: a retriever server other than ``serve-retriever``; the probes
    alone then fingerprint it) and the top-``k`` hits of each of ``queries``."""
    results = retriever.search(list(queries), k=k)
    documents = retriever.count()
    return {
        "documents": None if documents is None else int(documents),
        "k": int(k),
        "probes": [
            {"query": query, "ids": list(result.ids), "scores": [float(s) for s in result.scores]}
            for query, result in zip(queries, results, strict=True)
        ],
    }


def fingerprint_differences(expected: dict[str, Any], actual: dict[str, Any]) -> str | None:
    """What differs between two fingerprints, in a few words (None: the same index). Counts and ids are compared
    exactly, scores within :data:`SCORE_TOLERANCE`; the words never quote an id or a score (the engine's bytes)."""
    if expected["documents"] != actual["documents"]:
        return f"it holds {actual['documents']} documents, the bundle's index held {expected['documents']}"
    for n, (want, got) in enumerate(zip(expected["probes"], actual["probes"], strict=True)):
        if want["ids"] != got["ids"]:
            return f"probe query {n + 1} returns other passages"
        if any(
            not math.isclose(a, b, abs_tol=SCORE_TOLERANCE) for a, b in zip(want["scores"], got["scores"], strict=True)
        ):
            return f"probe query {n + 1} returns its passages with other scores"
    return None


def external_record(backend: str, connection: Any, retriever: Any, on_failure: str) -> dict[str, Any]:
    """The manifest's ``external_retriever`` block for ``retriever`` (an
    :class:`~workbench.backends.retrieval_engines.ExternalRetriever` reached through ``connection``): how to reach
    it without its credentials, ``on_failure`` and its fingerprint over :data:`PROBE_QUERIES`."""
    from workbench.backends.retrieval_engines import public_uri

    recorded = {name: getattr(connection, name) for name in RECORDED_CONNECTION}
    recorded.update(uri=public_uri(connection.uri), fields=dict(connection.fields))
    return {
        "backend": backend,
        "connection": recorded,
        "on_failure": on_failure,
        "fingerprint": engine_fingerprint(retriever, PROBE_QUERIES, PROBE_K),
    }


def record_connection(record: dict[str, Any], uri: str | None = None) -> Any:
    """The :class:`~workbench.backends.retrieval_engines.Connection` an ``external_retriever`` block describes (``uri``:
    another address of the same index, e.g. the engine seen from the serving host)."""
    from workbench.backends.retrieval_engines import Connection

    recorded = {name: record["connection"][name] for name in RECORDED_CONNECTION if name in record["connection"]}
    return Connection(**{**recorded, "uri": uri or recorded["uri"]})
