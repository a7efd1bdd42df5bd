"""Every method end to end over the user's engine: Milvus Lite 2.5 and PostgreSQL + pgvector, the run's corpus pushed
with ``workbench index``'s own code, then the real runner (build_data, a synthetic collection, calibrate, classify,
evaluate) on the tiny random models. DTR's dual path, DENSE-RAG's candidates, InSemRAG's channels and D²-RAG's
contexts must all come from the engine — its dense and lexical channels, logged where the client sends its queries —
and no index be built in this process."""

from __future__ import annotations

import json

from tests.bundle_run import FEATURES, run_with_synthetic_collect, write_corpus
from tests.engine_servers import fresh_database, milvus_lite_uri
from tests.recipe_overrides import run_overrides
from workbench.backends import retrievers
from workbench.recipe import load_recipe
from workbench.stages.index_engine import run_index

METHODS = ("dtr", "dense_rag", "d2rag", "insemrag")

SMALL = (
    "dense_rag: {k: 2, candidates: 3, max_iterations: 1, rephrase_max_new_tokens: 4, self_eval_max_new_tokens: 2}, "
    "d2rag: {seper_samples: 2}, "
    "insemrag: {controller: heuristic, chunking: corpus, k1: 4, candidates_per_channel: 4, k: 2, max_rounds: 1"
)
VARIANTS = {
    # DTR's paper dense index and InSemRAG's dense + sparse channels: the engine's dense and lexical channels
    "full": "dtr: {pseudo_max_tokens: 4, n_per_path: 2, k: 2}, " + SMALL + ", dense_index: full}",
    # a pooled dense index: the engine's lexical pool, re-ranked by the embedder here; InSemRAG's extended channel
    "pooled": "dtr: {pseudo_max_tokens: 4, n_per_path: 2, k: 2, dense_index: pooled, dense_pool: 4}, "
    + SMALL
    + ", dense_index: pooled, dense_pool: 4, channels: [dense, sparse, extended]}",
}


def overrides(tmp_path, lm_dir, encoder_dir, backend: str, uri: str, variant: str) -> list[str]:
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=40)
    return run_overrides(
        tmp_path,
        lm_dir,
        f"embedder.model={encoder_dir}",
        f"data.corpus={corpus}",
        "stages=[build_data,collect,calibrate,classify,evaluate]",
        "collect.limit=40",
        f"collect.features=[{','.join(FEATURES)}]",
        "classify.seeds=[0]",
        "classify.kinds=[logistic]",  # D²-RAG ships the router (an LR); the MLP would only cost Lightning fits
        "classify.threshold_rule=target_rate",
        "classify.target_rate=1.0",  # D²-RAG retrieves for every question
        "retrieval.k=2",
        f"retrieval.backend={backend}",
        f"retrieval.connection={{uri: '{uri}', index: passages, batch_size: 64, retries: 0}}",
        "evaluate.limit=2",
        "evaluate.max_new_tokens=4",
        f"evaluate.methods=[{','.join(METHODS)}]",
        "evaluate.options={" + VARIANTS[variant] + "}",
        per_template=20,
    )


def engine_queries(monkeypatch, retriever_cls) -> list[tuple[str, str]]:
    """``(channel, query)`` of every query the engine's client sends (both channels' retrievers are this class)."""
    sent: list[tuple[str, str]] = []
    real = retriever_cls._engine_search

    def logged(self, queries, k):
        sent.extend((self.connection.channel, q) for q in queries)
        return real(self, queries, k)

    monkeypatch.setattr(retriever_cls, "_engine_search", logged)
    return sent


def no_index_here(monkeypatch) -> None:
    """Building a BM25 or dense index in this process fails the test."""

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} built in this process over an engine run")

    for cls in (retrievers.BM25Retriever, retrievers.DenseRetriever):
        monkeypatch.setattr(cls, "__init__", refuse)


def run_methods(tmp_path, monkeypatch, args: list[str], retriever_cls) -> tuple[list[dict], list[tuple[str, str]]]:
    import datasets

    run_index(load_recipe("quickstart", args).config)  # the corpus build_data builds, pushed into the engine
    sent = engine_queries(monkeypatch, retriever_cls)
    no_index_here(monkeypatch)
    run_with_synthetic_collect("quickstart", args)
    traces = datasets.load_from_disk(str(tmp_path / "run" / "stages" / "evaluate" / "traces")).to_list()
    return traces, sent


def check_answers_from_the_engine(traces: list[dict], sent: list[tuple[str, str]], channels: set[str]) -> None:
    assert sorted({r["method"] for r in traces}) == sorted(METHODS) and len(traces) == 2 * len(METHODS)
    corpus_ids = set()
    for row in traces:
        trace = json.loads(row["trace"])
        assert isinstance(row["prediction"], str) and row["retrieval_calls"] >= 1, row["method"]
        corpus_ids.update(trace["passages"])
    assert corpus_ids and all("#" in pid for pid in corpus_ids)  # chunk ids the engine returned
    assert {channel for channel, _ in sent} == channels
    questions = {r["question"] for r in traces}
    assert questions <= {query for _, query in sent}  # every method's question reached the engine


def test_every_method_runs_on_milvus_lite(tmp_path, monkeypatch, tiny_lm_long_dir, tiny_encoder_dir):
    from workbench.backends.retrieval_milvus import MilvusRetriever

    uri = milvus_lite_uri(tmp_path / "engines")  # a folder `workbench index` creates
    args = overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, "milvus", uri, "full")
    traces, sent = run_methods(tmp_path, monkeypatch, args, MilvusRetriever)
    check_answers_from_the_engine(traces, sent, {"dense", "lexical"})


def test_every_method_runs_on_pgvector(tmp_path, monkeypatch, pg_server, tiny_lm_long_dir, tiny_encoder_dir):
    """The pooled variant (the full one runs on Milvus): DTR's and InSemRAG's pools from the lexical channel, the
    run's own retriever (DENSE-RAG, D²-RAG) on the dense one."""
    from workbench.backends.retrieval_pgvector import PgvectorRetriever

    uri = fresh_database(pg_server, "methods_pooled")
    args = overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, "pgvector", uri, "pooled")
    traces, sent = run_methods(tmp_path, monkeypatch, args, PgvectorRetriever)
    check_answers_from_the_engine(traces, sent, {"dense", "lexical"})


def test_seper_eval_and_distill_data_search_the_engine(tmp_path, monkeypatch, tiny_lm_long_dir, tiny_encoder_dir):
    """The two stages that built their own indexes: seper_eval's bm25 / dense / hybrid / DTR rows and distill_data's
    InSemRAG teacher search the engine's lexical and dense channels."""
    import datasets

    from workbench.backends.retrieval_milvus import MilvusRetriever

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=40)
    uri = milvus_lite_uri(tmp_path)
    args = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        f"embedder.model={tiny_encoder_dir}",
        f"data.corpus={corpus}",
        "stages=[build_data,seper_eval,distill_data]",
        "retrieval.backend=milvus",
        f"retrieval.connection={{uri: '{uri}', index: passages, batch_size: 64, retries: 0}}",
        "seper_eval.limit=2",
        "seper_eval.samples=2",
        "seper_eval.k=2",
        "seper_eval.max_new_tokens=4",
        "seper_eval.corpus_size=null",
        "distill_data.limit=2",
        "distill_data.heldout_limit=1",
        "distill_data.sources=[gold]",
        "distill_data.insemrag={chunking: corpus, k1: 4, candidates_per_channel: 4, k: 2, max_rounds: 1}",
        per_template=10,
    )
    run_index(load_recipe("seper-eval", args).config)
    sent = engine_queries(monkeypatch, MilvusRetriever)
    no_index_here(monkeypatch)
    from workbench.stages.runner import run_recipe

    run_recipe(load_recipe("seper-eval", args))
    summary = json.loads((tmp_path / "run" / "stages" / "seper_eval" / "summary.json").read_text())
    assert sorted(summary["ranking"]) == ["bm25", "dense", "dtr", "gold", "hybrid", "random"]
    traces = datasets.load_from_disk(str(tmp_path / "run" / "stages" / "distill_data" / "traces" / "train"))
    assert len(traces) > 0
    assert {channel for channel, _ in sent} == {"dense", "lexical"}
