"""Recipes naming the lucene, elasticsearch and opensearch backends: what validate refuses (lucene's missing dense
channel, a URI scheme the engine does not speak, an index name Elasticsearch needs) and accepts (a Lucene index
directory without an index name); ``workbench index`` building a Lucene index from the recipe's corpus with no
embedder at all, and the retriever the stages build from the same recipe."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from tests.toy_corpus import PASSAGES, corpus_dataset
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe

BASE = "name: demo\nstages: [build_data]\n"


def load(tmp_path, retrieval: str):
    path = tmp_path / "r.yaml"
    path.write_text(BASE + "retrieval:\n" + "".join(f"  {line}\n" for line in retrieval.strip().splitlines()))
    return load_recipe(str(path)).config


def test_lucene_has_only_the_lexical_channel_and_no_index_name(tmp_path):
    with pytest.raises(ConfigError, match=r"retrieval.connection.channel: backend lucene has no dense channel"):
        load(tmp_path, "backend: lucene\nconnection: {uri: ./idx}")
    config = load(tmp_path, "backend: lucene\nconnection: {uri: ./idx, channel: lexical}")
    assert (config.retrieval.backend, config.retrieval.connection.index) == ("lucene", None)
    with pytest.raises(ConfigError, match=r"retrieval.connection.uri: backend lucene speaks file URIs, got a http"):
        load(tmp_path, "backend: lucene\nconnection: {uri: 'http://h:9200', channel: lexical}")


@pytest.mark.parametrize("backend", ["elasticsearch", "opensearch"])
def test_search_engines_need_an_http_uri_and_an_index(tmp_path, backend):
    with pytest.raises(ConfigError, match=r"retrieval.connection.index: .*table / collection / index name"):
        load(tmp_path, f"backend: {backend}\nconnection: {{uri: 'https://es:9200'}}")
    with pytest.raises(ConfigError, match=rf"backend {backend} speaks http, https URIs, got a postgresql"):
        load(tmp_path, f"backend: {backend}\nconnection: {{uri: 'postgresql://h/db', index: p}}")
    config = load(tmp_path, f"backend: {backend}\nconnection: {{uri: 'https://es:9200', index: p, channel: lexical}}")
    assert config.retrieval.connection.channel == "lexical"


def test_workbench_index_builds_a_lucene_index_without_an_embedder(tmp_path, lucene_jvm, monkeypatch):
    from workbench.backends.factory import build_retriever
    from workbench.backends.retrieval_engines import Connection
    from workbench.stages import index_engine

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"doc_id": d, "title": t, "text": x}) + "\n" for d, t, x in PASSAGES))
    index = tmp_path / "lucene-index"
    path = tmp_path / "index.yaml"
    path.write_text(
        f"name: index-test\nstages: [build_data]\ndata: {{corpus: {corpus}}}\nembedder: {{model: /no/such/model}}\n"
        f"retrieval:\n  backend: lucene\n  connection: {{uri: '{index}', channel: lexical, batch_size: 4}}\n"
    )
    config = load_recipe(str(path)).config

    def no_embedder(config):
        raise AssertionError("a lexical-only engine needs no embedder")

    monkeypatch.setattr(index_engine, "recipe_embedder", no_embedder)
    first = index_engine.run_index(config).line()
    assert "6 passages: 6 written" in first and "the index holds 6" in first
    assert "0 written" in index_engine.run_index(config).line()
    assert index_engine.run_index(config, adopt=True).line().startswith("adopted: the index holds 6")
    connection = Connection(**asdict(config.retrieval.connection))
    retriever = build_retriever("lucene", corpus_dataset(), connection=connection)
    assert retriever.search(["tragedy Hamlet"], k=1)[0].ids == ["d2#0"]
    retriever.close()


def test_the_index_command_words_engine_faults_in_one_line_with_exit_2(tmp_path, tiny_encoder_dir, monkeypatch):
    """``workbench index --adopt`` of a missing Lucene directory: exit status 2 and one line naming it; a push into
    an unreachable Elasticsearch whose URI carries a password: one line naming the URI, the password redacted."""
    import subprocess
    import sys

    from workbench.backends.retrieval_engines import EngineError
    from workbench.stages.index_engine import run_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"doc_id": d, "title": t, "text": x}) + "\n" for d, t, x in PASSAGES))

    def recipe(retrieval: str) -> str:
        path = tmp_path / "r.yaml"
        path.write_text(
            f"name: t\nstages: [build_data]\ndata: {{corpus: {corpus}}}\nembedder: {{model: {tiny_encoder_dir}}}\n"
            f"retrieval: {retrieval}\n"
        )
        return str(path)

    none = tmp_path / "none"
    path = recipe(f"{{backend: lucene, connection: {{uri: '{none}', channel: lexical}}}}")
    missing = subprocess.run(
        [sys.executable, "-m", "workbench", "index", path, "--adopt"], capture_output=True, text=True, timeout=300
    )
    assert missing.returncode == 2, missing.stderr
    assert f"{none}: no such index to adopt" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    secret = "pw-not-printed-4417"
    uri = f"http://bob:{secret}@127.0.0.1:9"
    config = load_recipe(recipe(f"{{backend: elasticsearch, connection: {{uri: '{uri}', index: p, timeout_s: 1}}}}"))
    with pytest.raises(EngineError, match=r"^http://bob:\*\*\*@127\.0\.0\.1:9 \(p\): checking the index failed") as err:
        run_index(config.config)
    assert secret not in str(err.value) and len(str(err.value).splitlines()) == 1
