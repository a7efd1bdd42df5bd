"""The retrieval section: ``backend`` with the older ``retriever`` still accepted (both, disagreeing: refused), the
connection an external backend needs, channels a backend lacks refused at load, and the backend table agreeing
with the schema and the factory."""

from __future__ import annotations

import typing

import pytest

from workbench.backends.factory import RETRIEVER_KINDS
from workbench.backends.retrieval_engines import BACKENDS, ENGINES, EngineSpec, redact_uri
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.settings.shared import RetrievalSection

BASE = "name: demo\nstages: [build_data]\n"


def load(tmp_path, retrieval: str, overrides=None):
    path = tmp_path / "r.yaml"
    path.write_text(BASE + "retrieval:\n" + "".join(f"  {line}\n" for line in retrieval.strip().splitlines()))
    return load_recipe(str(path), overrides or []).config


def test_the_older_retriever_key_is_read_as_backend(tmp_path):
    section = load(tmp_path, "retriever: dense").retrieval
    assert (section.backend, section.retriever) == ("dense", None)
    assert load(tmp_path, "retriever: hybrid\nbackend: hybrid").retrieval.backend == "hybrid"
    assert load(tmp_path, "k: 3").retrieval.backend == "bm25"


def test_backend_and_retriever_disagreeing_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"r.yaml:\d+: retrieval.retriever: .*\(dense\) and .*\(bm25\) disagree"):
        load(tmp_path, "retriever: dense\nbackend: bm25")
    with pytest.raises(ConfigError, match="disagree"):
        load(tmp_path, "retriever: dense", ["retrieval.backend=hybrid"])


def test_an_external_backend_needs_its_connection(tmp_path):
    with pytest.raises(ConfigError, match=r"retrieval.connection.uri: backend pgvector needs the engine's URI"):
        load(tmp_path, "backend: pgvector")
    with pytest.raises(ConfigError, match=r"retrieval.connection.index: .*table / collection"):
        load(tmp_path, "backend: pgvector\nconnection: {uri: 'postgresql://h/db'}")
    with pytest.raises(ConfigError, match=r"retrieval.connection.uri: backend pgvector speaks postgresql"):
        load(tmp_path, "backend: pgvector\nconnection: {uri: 'http://h:19530', index: t}")
    with pytest.raises(ConfigError, match=r"retrieval.connection.fields: unknown role 'body'"):
        load(tmp_path, "backend: milvus\nconnection: {uri: 'http://h:19530', index: t, fields: {body: x}}")
    with pytest.raises(ConfigError, match=r"credentials_env: must be the NAME"):
        load(tmp_path, "backend: milvus\nconnection: {uri: 'm.db', index: t, credentials_env: 'p@ss w0rd'}")
    config = load(tmp_path, "backend: milvus\nconnection: {uri: 'm.db', index: t, channel: lexical}")
    assert config.retrieval.connection.channel == "lexical"


def test_a_channel_the_backend_lacks_is_refused_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, "milvus", EngineSpec("milvus", True, frozenset({"dense"}), ("file",)))
    with pytest.raises(ConfigError, match=r"retrieval.connection.channel: backend milvus has no lexical channel"):
        load(tmp_path, "backend: milvus\nconnection: {uri: 'm.db', index: t, channel: lexical}")


def test_the_backend_table_the_schema_and_the_factory_agree():
    hints = typing.get_type_hints(RetrievalSection)
    assert set(typing.get_args(hints["backend"])) == set(BACKENDS) == set(RETRIEVER_KINDS)


def test_uris_lose_their_credentials():
    assert redact_uri("postgresql://u:secret@h:5432/db?password=x") == "postgresql://u:***@h:5432/db"
    assert redact_uri("http://h:19530") == "http://h:19530"
    assert redact_uri("/tmp/m.db") == "/tmp/m.db"
