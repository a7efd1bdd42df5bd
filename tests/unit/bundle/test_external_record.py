"""The pieces of a bundle on an external retriever that need no engine: the URI a manifest may record (no password
in the user-info part or the query string), the fingerprint comparison, and the manifest's ``external_retriever``
block checked like every other block (a crafted value is one line naming the field)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.bundle_run import FIXTURE
from workbench.backends.retrieval_engines import EngineError, public_uri
from workbench.bundle.external import fingerprint_differences
from workbench.bundle.manifest import check_manifest
from workbench.core.errors import DataError


def test_a_recorded_uri_keeps_the_address_and_drops_every_secret():
    assert public_uri("postgresql://rag:s3cret@db:5432/corpus") == "postgresql://rag@db:5432/corpus"
    kept = public_uri("postgresql://rag@/corpus?host=/run/pg&password=s3cret&sslmode=require&api_key=k")
    assert kept == "postgresql://rag@/corpus?host=/run/pg&sslmode=require"
    assert public_uri("http://root:tok@milvus:19530") == "http://root@milvus:19530"
    assert public_uri("/data/milvus.db") == "/data/milvus.db"
    with pytest.raises(EngineError, match="malformed"):
        public_uri("http://[::1")


def _fingerprint(documents=10, ids=("a", "b"), scores=(0.9, 0.5)):
    return {"documents": documents, "k": 2, "probes": [{"query": "q", "ids": list(ids), "scores": list(scores)}]}


def test_fingerprints_differ_by_count_ids_or_scores_beyond_the_tolerance():
    same = _fingerprint(scores=(0.90001, 0.5))
    assert fingerprint_differences(_fingerprint(), same) is None
    assert "holds 9 documents, the bundle's index held 10" in fingerprint_differences(_fingerprint(), _fingerprint(9))
    assert (
        fingerprint_differences(_fingerprint(), _fingerprint(ids=("a", "c"))) == "probe query 1 returns other passages"
    )
    assert "other scores" in fingerprint_differences(_fingerprint(), _fingerprint(scores=(0.8, 0.5)))


def _external_manifest() -> dict:
    manifest = json.loads((FIXTURE / "manifest.json").read_text())
    manifest["answering"]["retriever"] = "pgvector"
    connection = {"uri": "postgresql://rag@db/corpus", "index": "passages", "channel": "dense", "fields": {}}
    connection.update(credentials_env="RAG_DB_PASSWORD", timeout_s=10.0, retries=2, backoff_s=0.5, max_concurrency=4)
    manifest["external_retriever"] = {
        "backend": "pgvector",
        "connection": connection,
        "on_failure": "closed_book",
        "fingerprint": _fingerprint(),
    }
    return manifest


def test_the_manifest_block_is_checked_like_every_other():
    check_manifest(_external_manifest(), "m.json")
    for change, message in [
        (lambda m: m.pop("external_retriever"), "'answering.retriever' pgvector needs its 'external_retriever'"),
        (lambda m: m["external_retriever"].update(backend="bm25"), "'external_retriever.backend' must be one of"),
        (lambda m: m["external_retriever"]["connection"].update(retries=10**9), "connection.retries' must be a num"),
        (lambda m: m["external_retriever"]["connection"].update(timeout_s="1"), "connection.timeout_s' must be a"),
        (lambda m: m["external_retriever"]["connection"].update(channel="sparse"), "pgvector has no sparse channel"),
        (lambda m: m["external_retriever"].update(on_failure="ignore"), "on_failure"),
        (lambda m: m["external_retriever"]["connection"].update(fields={"body": "text"}), "unknown role 'body'"),
        (lambda m: m["external_retriever"]["fingerprint"]["probes"][0].update(scores=[1.0]), "one finite score per id"),
        (lambda m: m["answering"].update(retriever="bm25"), "'external_retriever' with an in-process"),
    ]:
        manifest = copy.deepcopy(_external_manifest())
        change(manifest)
        with pytest.raises(DataError, match=message) as caught:
            check_manifest(manifest, "m.json")
        assert "\n" not in str(caught.value)
