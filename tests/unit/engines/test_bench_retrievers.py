"""The bench-retrievers recipe shrunk to a few hundred passages: every backend measured against the real engines it
starts (a throw-away PostgreSQL + pgvector, Milvus Lite 2.5), an absent backend listed with its reason, the report's
tables; and the stage's parts (synthetic vectors, agreement, the section's checks, `workbench index` over columns)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from workbench.backends.retrieval_engines import ENGINES
from workbench.bench.retrievers.run import SyntheticVectors, agreement, bench_queries, unavailable
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.index_engine import push_corpus


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """bench-retrievers at 300 passages (and a 400-vector scale tier), its bench.json and report."""
    from workbench.stages.runner import run_recipe

    tmp = tmp_path_factory.mktemp("bench-retrievers")
    overrides = [
        f"run_dir={tmp}/run",
        f"report.dir={tmp}/report",
        "data.max_per_template=10",
        "bench_retrievers.passages=300",
        "bench_retrievers.queries=12",
        "bench_retrievers.repeats=2",
        "bench_retrievers.concurrency=[1, 3]",
        "bench_retrievers.large_passages=400",
        "bench_retrievers.large_backends=[dense, milvus]",
        "bench_retrievers.batch_size=128",
    ]
    run_recipe(load_recipe("bench-retrievers", overrides))
    bench = json.loads((tmp / "run" / "stages" / "bench_retrievers" / "bench.json").read_text())
    return bench, (tmp / "report" / "report.md").read_text(), tmp / "report"


def test_every_backend_is_measured_on_its_channels(bench_run):
    bench, _, _ = bench_run
    rows = bench["backends"]
    assert bench["corpus"]["passages"] == 300 and bench["queries"]["count"] == 12
    expected = {
        "bm25": {"lexical"},
        "dense": {"dense"},
        "pgvector": {"dense", "lexical"},
        "milvus": {"dense", "lexical"},
    }
    for name, channels in expected.items():
        assert set(rows[name]["channels"]) == channels, name
        assert rows[name]["passages"] == 300 and rows[name]["docs_per_s"] > 0 and rows[name]["disk_bytes"] > 0
        for measured in rows[name]["channels"].values():
            for level in ("1", "3"):
                figures = measured["latency"][level]
                assert figures["calls"] == 2 * 12  # two timed passes over the questions
                assert 0 < figures["p50_ms"] <= figures["p95_ms"] and figures["queries_per_s"] > 0
    # the engines' own processes: PostgreSQL's server and Milvus Lite's, grown by what they were given
    assert rows["pgvector"]["memory"]["what"].startswith("PostgreSQL")
    assert rows["milvus"]["memory"]["what"].startswith("Milvus Lite")
    for name in expected:
        memory = rows[name]["memory"]
        assert memory["peak_bytes"] >= memory["baseline_bytes"] and memory["peak_bytes"] > 0
    # lucene is measured when this build has the backend and pyserini, else listed with the reason; never both
    assert ("lucene" in rows) != ("lucene" in bench["not_run"])
    if "lucene" in ENGINES and importlib.util.find_spec("pyserini") is not None:
        assert rows["lucene"]["channels"]["lexical"]["agreement_with_bm25"] > 0.0


def test_agreement_with_the_references(bench_run):
    rows = bench_run[0]["backends"]
    # Milvus Lite scans its few hundred vectors exactly: the same top 10 as faiss flat on the same vectors
    assert rows["milvus"]["channels"]["dense"]["agreement_with_dense"] == pytest.approx(1.0)
    assert rows["pgvector"]["channels"]["dense"]["agreement_with_dense"] > 0.5
    for name in ("milvus", "pgvector"):
        lexical = rows[name]["channels"]["lexical"]
        assert 0.0 < lexical["agreement_with_bm25"] <= 1.0
        assert "agreement_with_bm25" not in rows["bm25"]["channels"]["lexical"]  # the reference itself
    assert "k1 1.2" in rows["milvus"]["channels"]["lexical"]["ranking"]


def test_the_scale_tier_and_the_report(bench_run):
    bench, report, report_dir = bench_run
    large = bench["large"]
    assert large["passages"] == 400 and set(large["backends"]) == {"dense", "milvus"}
    assert set(large["backends"]["milvus"]["channels"]) == {"dense"}
    assert large["backends"]["milvus"]["channels"]["dense"]["agreement_with_dense"] == pytest.approx(1.0)
    assert "| pgvector | lexical |" in report and "| milvus | dense |" in report
    assert "21,015,324" in report and "FlashRAG" in report and "synthetic" in report
    assert "milvus (dense, from the scale tier) | 400 |" in report
    if "lucene" in bench["backends"]:  # a JVM heap is not a cost per passage: the 21M table does not scale it
        assert "| lucene | 300 | not extrapolated (JVM heap) | not extrapolated (JVM heap) |" in report
    assert report.count("| milvus | dense | 1.00 | faiss flat (exact) |") == 2  # the main size and the scale tier
    assert (report_dir / "latency.png").stat().st_size > 0 and (report_dir / "indexing.png").stat().st_size > 0


def test_an_absent_backend_is_named_with_its_reason(monkeypatch):
    from workbench.backends import retrieval_engines

    monkeypatch.delitem(retrieval_engines.ENGINES, "milvus")
    assert "no `milvus` retrieval backend" in unavailable("milvus", ["dense", "lexical"])
    assert "has no dense channel" in unavailable("bm25", ["dense"])
    assert unavailable("dense", ["dense"]) is None


def test_synthetic_vectors_are_seeded_unit_vectors():
    vectors = SyntheticVectors(["a", "b", "a", "c"], dim=16, seed=3)
    again = SyntheticVectors(["a", "b", "c"], dim=16, seed=3)
    out = vectors.encode(["c", "a"])
    assert out.shape == (2, 16) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out, again.encode(["c", "a"]))
    assert not np.allclose(out, SyntheticVectors(["a", "b", "c"], dim=16, seed=4).encode(["c", "a"]))
    with pytest.raises(ValueError, match="not built with"):
        vectors.encode(["d"])


def test_agreement_is_the_mean_share_of_the_reference_found():
    assert agreement([["a", "b"], ["x", "y"]], [["a", "c"], ["x", "y"]]) == pytest.approx(0.75)
    assert agreement([["a"], []], [[], ["b"]]) == pytest.approx(0.0)  # a query with no reference hit is left out
    assert agreement([["a"]], [[]]) is None


def test_bench_queries_draws_distinct_questions_from_every_split():
    splits = {"train": {"question": ["q1", "q2", "q2"]}, "test": {"question": ["q3"]}}
    drawn = bench_queries(splits, 10, seed=0)
    assert sorted(drawn) == ["q1", "q2", "q3"]
    assert bench_queries(splits, 2, seed=0) == drawn[:2]


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("bench_retrievers.backends=[bm25, bm25]", "bench_retrievers.backends"),
        ("bench_retrievers.backends=[bm25, elastic]", "bench_retrievers.backends"),
        ("bench_retrievers.large_backends=[bm25]", "bench_retrievers.large_backends"),
        ("bench_retrievers.concurrency=[0]", "bench_retrievers.concurrency"),
    ],
)
def test_the_section_refuses_bad_settings_at_load(override, where):
    with pytest.raises(ConfigError) as caught:
        load_recipe("bench-retrievers", [override])
    assert where in str(caught.value)  # one line naming the key


class _ListWriter:
    """An in-memory IndexWriter: what `workbench index` writes, kept in a dict."""

    connection = type("C", (), {"where": "memory"})()

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def prepare(self, dim: int) -> None:
        self.dim = dim

    def present(self, ids):
        return {i for i in ids if i in self.rows}

    def write(self, rows, vectors):
        self.rows.update({r["chunk_id"]: r for r in rows})

    def count(self) -> int:
        return len(self.rows)


def test_push_corpus_takes_columns_as_well_as_a_dataset():
    columns = {
        "chunk_id": ["p0", "p1", "p2", "p3", "p4"],
        "doc_id": ["d0", "d0", "d1", "d1", "d2"],
        "title": ["A", "A", "B", "B", "C"],
        "text": ["one", "two", "three", "four", "five"],
    }
    writer = _ListWriter()
    report = push_corpus(columns, writer, SyntheticVectors(columns["text"], 8, 0), batch_size=2)
    assert (report.passages, report.written, report.engine_count) == (5, 5, 5)
    assert writer.rows["p3"] == {"chunk_id": "p3", "doc_id": "d1", "title": "B", "text": "four"}


def test_the_report_says_when_a_server_elsewhere_was_not_measured():
    from workbench.bench.retrievers.report import report_lines

    latency = {"1": {"p50_ms": 1.0, "p95_ms": 2.0, "queries_per_s": 900.0, "calls": 4}}
    row = {
        "passages": 1000,
        "docs_per_s": 500.0,
        "index_seconds": 2.0,
        "disk_bytes": 4_000_000,
        "memory": None,
        "channels": {"dense": {"ranking": "cosine", "latency": latency, "agreement_with_dense": 0.5}},
        "notes": [],
    }
    bench = {
        "settings": {"concurrency": [1], "k": 10, "repeats": 2, "dim": 384},
        "corpus": {
            "passages": 1000,
            "of": 1000,
            "documents": 10,
            "mean_chars": 88.0,
            "chunking": "fixed",
            "source": "wiki",
        },
        "queries": {"count": 2, "examples": ["q"]},
        "backends": {"pgvector": row},
        "not_run": {"lucene": "no lucene here"},
    }
    text = "\n".join(report_lines(bench))
    assert "| pgvector | dense | 500 | 2.0 | — | — | not measured (a server elsewhere) | 4 MB |" in text
    assert "| pgvector | 1,000 | — | — | 84.1 GB | 11.7 h | — |" in text  # disk and build time still extrapolate
    assert "- lucene: no lucene here" in text
