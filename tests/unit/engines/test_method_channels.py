"""What the methods ask of an external engine, checked when the recipe loads (no engine needed): InSemRAG's own token
windows refused over an engine, a channel the backend lacks refused naming the method's options, the run's-retriever
options accepted, and the in-process backends untouched by the check."""

from __future__ import annotations

import pytest

from workbench.backends.retrieval_engines import ENGINES, EngineSpec
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe

ENGINE = "retrieval:\n  backend: milvus\n  connection: {uri: 'm.db', index: passages}\n"


def load(tmp_path, methods: str, options: str = "{}", retrieval: str = ENGINE, stages: str = "build_data, evaluate"):
    path = tmp_path / "r.yaml"
    path.write_text(
        f"name: demo\nstages: [{stages}]\n{retrieval}evaluate:\n  methods: [{methods}]\n  options: {options}\n"
    )
    return load_recipe(str(path)).config


def test_insemrag_token_windows_are_refused_over_an_engine_and_corpus_rows_accepted(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"evaluate.options.insemrag.chunking: insemrag over backend milvus: .*"
        r"token windows .* set chunking: corpus",
    ):
        load(tmp_path, "insemrag")
    config = load(tmp_path, "insemrag, dtr, dense_rag", "{insemrag: {chunking: corpus}}")
    assert config.evaluate.methods == ["insemrag", "dtr", "dense_rag"]
    # in this process InSemRAG builds its windows as before
    assert load(tmp_path, "insemrag", retrieval="").retrieval.backend == "bm25"


def test_a_channel_the_engine_lacks_is_refused_naming_the_method(tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, "milvus", EngineSpec("milvus", True, frozenset({"lexical"}), ("file",)))
    lexical = "retrieval:\n  backend: milvus\n  connection: {uri: 'm.db', index: passages, channel: lexical}\n"
    with pytest.raises(
        ConfigError,
        match=r"evaluate.options.dtr: dtr searches the dense channel, which backend"
        r" milvus lacks \(it offers lexical\)",
    ):
        load(tmp_path, "dtr", retrieval=lexical)
    # DTR on the run's retriever or on a pooled index, InSemRAG without a full dense index: lexical suffices
    load(tmp_path, "dtr", "{dtr: {retriever: run}}", retrieval=lexical)
    load(tmp_path, "dtr", "{dtr: {dense_index: pooled}}", retrieval=lexical)
    load(tmp_path, "insemrag", "{insemrag: {chunking: corpus}}", retrieval=lexical)
    with pytest.raises(ConfigError, match=r"evaluate.options.insemrag: insemrag searches the dense channel"):
        load(tmp_path, "insemrag", "{insemrag: {chunking: corpus, dense_index: full}}", retrieval=lexical)


def test_distill_data_insemrag_is_checked_too(tmp_path):
    with pytest.raises(ConfigError, match=r"distill_data.insemrag.chunking: insemrag over backend milvus"):
        load(tmp_path, "no_rag", stages="build_data, distill_data")


def test_a_seper_eval_corpus_sample_is_refused_over_an_engine(tmp_path):
    with pytest.raises(ConfigError, match=r"seper_eval.corpus_size: backend milvus holds the whole corpus"):
        load(tmp_path, "no_rag", stages="build_data, seper_eval")
    path = tmp_path / "r.yaml"
    path.write_text(f"name: demo\nstages: [build_data, seper_eval]\n{ENGINE}seper_eval: {{corpus_size: null}}\n")
    assert load_recipe(str(path)).config.seper_eval.corpus_size is None


def test_the_retrievers_recipe_loads_for_milvus_and_with_its_pgvector_override():
    """recipes/retrievers.yaml: Milvus Lite as written, pgvector by the override its header documents; every
    method it runs passes the engine checks (InSemRAG on the corpus rows)."""
    config = load_recipe("retrievers").config
    connection = config.retrieval.connection
    assert config.retrieval.backend == "milvus" and connection.uri.endswith(".db") and "://" not in connection.uri
    assert {"dtr", "dense_rag", "d2rag", "insemrag"} <= set(config.evaluate.methods)
    assert config.evaluate.options["insemrag"]["chunking"] == "corpus"
    override = ["retrieval.backend=pgvector", "retrieval.connection.uri=postgresql://rag@/corpus?host=/tmp/pg"]
    pg = load_recipe("retrievers", override).config
    assert (pg.retrieval.backend, pg.retrieval.connection.index) == ("pgvector", connection.index)


def test_the_recipe_postgres_helper_starts_a_server_with_pgvector_and_stops_it():
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import psycopg

    from workbench.core.paths import PROJECT_ROOT

    parent = Path(tempfile.mkdtemp(prefix="wb-pg-helper-"))
    parent.chmod(0o755)  # the server runs as its own user when the tests run as root
    helper = [sys.executable, str(PROJECT_ROOT / "recipes" / "start_postgres.py"), "--dir", str(parent / "pg")]
    try:
        started = subprocess.run(helper, capture_output=True, text=True, timeout=120)
        uri = started.stdout.strip()
        assert started.returncode == 0 and uri.startswith("postgresql://") and "/corpus?" in uri, started.stderr
        with psycopg.connect(uri) as conn:
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        again = subprocess.run(helper, capture_output=True, text=True, timeout=120)  # running already: same URI
        assert again.returncode == 0 and again.stdout.strip() == uri
    finally:
        stopped = subprocess.run([*helper, "--stop"], capture_output=True, text=True, timeout=120)
        shutil.rmtree(parent, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stderr


def test_tools_route_a_method_s_own_indexes_to_the_engine_s_channels(monkeypatch):
    """``Tools.bm25_retriever`` / ``dense_retriever`` over an external run retriever: the retriever itself on its own
    channel, one sibling on the same connection for the other (built once), the pooled index over the lexical
    channel; a channel the backend lacks is a one-line ConfigError."""
    from tests.toy_corpus import corpus_dataset
    from tests.unit.engines.conftest import HashingEmbedder
    from workbench.backends.retrieval_engines import Connection, ExternalRetriever
    from workbench.backends.retrievers import PooledDenseRetriever
    from workbench.methods.base import Tools

    class Engine(ExternalRetriever):  # no server: only what Tools reads
        backend = "milvus"

    corpus = corpus_dataset()
    own = Engine(corpus, Connection("m.db", "passages", channel="lexical"))
    tools = Tools(generator=None, retriever=own, corpus=corpus, counter=own.counter, embedder=HashingEmbedder())
    assert tools.on_engine and tools.bm25_retriever() is own
    dense = tools.dense_retriever()
    assert type(dense) is Engine and dense.connection.channel == "dense" and dense.connection.uri == "m.db"
    assert dense.embedder is tools.embedder and dense.counter is tools.counter and tools.dense_retriever() is dense
    assert dense.passages is own.passages  # one table: a passage either channel adds has one row for both
    pooled = tools.dense_retriever("pooled", 3)
    assert isinstance(pooled, PooledDenseRetriever) and pooled.base is own
    lexical_only = Tools(generator=None, retriever=own, corpus=corpus, counter=own.counter, embedder=HashingEmbedder())
    monkeypatch.setitem(ENGINES, "milvus", EngineSpec("milvus", True, frozenset({"lexical"}), ("file",)))
    with pytest.raises(ConfigError, match=r"retrieval.backend: backend milvus has no dense channel"):
        lexical_only.dense_retriever()
    in_process = Tools(generator=None, retriever=None, corpus=corpus, counter=own.counter)
    assert not in_process.on_engine and in_process.engine_channel("dense") is None
