"""InSemRAG's settings: every knob, its bounds and checks, and where they come from (paper, its tables, the spec:
the docstring of :class:`InSemRAGSettings`). Light to import: the registry and the recipe loader read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from workbench.core.bounds import NEW_TOKENS, PASSAGES, POOL, ROUNDS, check_counts, check_int, check_number
from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.methods.controller.base import CHANNELS

__all__ = ["CHUNKINGS", "COUNT_BOUNDS", "THRESHOLD_BOUND", "InSemRAGSettings"]

CHUNKINGS = ("fixed", "corpus")
THRESHOLD_BOUND = 10.0
"""τ and γ at most (the controller's scores are in [0, 1]: any value above 1 acts as 1 + ε)."""
COUNT_BOUNDS = {
    "max_rounds": ROUNDS,
    "candidates_per_channel": POOL,
    "k1": POOL,
    "k": PASSAGES,
    "max_follow_ups": ROUNDS,
    "chunk_tokens": NEW_TOKENS,
    "max_final_chunks": PASSAGES,
    "dense_pool": POOL,
}
"""The largest value of each integer setting (all from 1)."""
"""InSemRAG's corpus: ``fixed`` = its own token windows of the documents (default); ``corpus`` = the rows as built."""


# ------------------------------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class InSemRAGSettings:
    """Every knob of InSemRAG. Tags: [P] paper, [I] inferred from the paper's tables, [D] spec recommendation.

    * ``tau`` = 0.5 — completeness threshold τ: a kept chunk is damaged iff its score < τ. The paper's value is
      lost [D: spec §19, calibrate on the controller's scores]. Values > 1 call every chunk damaged.
    * ``gamma`` = 0.5 — coverage threshold γ: an element is uncovered iff its score < γ [D: spec §19, calibrate
      so that ~72% of questions stop after round 1]. 0 never continues; values > 1 always run ``max_rounds``.
    * ``max_rounds`` = 3 — rounds of retrieve → refine → repair → audit [P].
    * ``candidates_per_channel`` = 50 — each channel's own top-N before fusion [D: N = k1].
    * ``k1`` = 50 — size of the fused candidate pool E0 the controller refines [D; the paper's value is lost].
    * ``k`` = 10 — chunks kept per active query after refinement (k2) [I].
    * ``keep_threshold`` = 0.5 — the relevance filter of an LM controller (prompted, distilled): keep a candidate iff
      p(Yes) / (p(Yes) + p(No)) ≥ it [not in the paper, which re-ranks E0 and keeps the top k2 (spec §7.1): 0.5 =
      the model prefers Yes]. The heuristic controller keeps any candidate sharing a keyword with the query. A round
      whose filter drops every candidate keeps the top ``k`` by score instead (a counted fallback).
    * ``chunking`` = ``"fixed"`` — search InSemRAG's own view of the corpus: the documents cut into consecutive,
      non-overlapping windows of ``chunk_tokens`` tokens of the dense encoder's tokenizer (white-space words when it
      has none) [D: spec §5, D16], whatever ``data.chunking`` is; ``"corpus"`` searches the corpus rows as built.
    * ``chunk_tokens`` = 64 — the window length L [P: the sweep 512 / 256 / 128 / 64; D §12.3: 64–128 on short
      documents "so fragmentation actually occurs" — the default corpus's summaries average ~100 encoder tokens].
    * ``compression_length`` = None — length budget of a repaired chunk, in tokens; None = ``chunk_tokens``
      ["rewriting it to meet the chunk length requirement", spec §7.3: ≤ L].
    * ``max_follow_ups`` = 3 — follow-up queries per round [D].
    * ``max_final_chunks`` = 30 — cap on the evidence in the final prompt [D: k2 · max_rounds].
    * ``channels`` = ("dense", "sparse") — channels of the retriever built when none is given; add ``"extended"``
      for the paper's third channel (a second dense search with q ⊕ q_d ⊕ keywords, spec D3).
    * ``enrich`` / ``dynamic_weights`` / ``refine`` / ``repair`` = True — the paper's ablations when False:
      w/o QE-IAR (every channel searches the raw query), w/o DW-IAR (uniform weights), w/o ER-SPC (Er = the top
      ``k`` by fused score), no damage detection and repair.
    * ``answer_max_tokens`` = None — token budget of the final answer (None: the tools' ``max_new_tokens``).
    * ``dense_index`` = "pooled" — how the dense channel is built when no retriever is given: ``"full"`` embeds the
      whole corpus into a FAISS index (the paper's setting; cached on disk, but tens of minutes for the 10,033
      embedded passages on two CPU cores), ``"pooled"`` ranks the top ``dense_pool`` BM25 passages of each query by
      embedding similarity (a substitute: recall bounded by BM25's recall@pool; see
      :class:`~workbench.backends.retrievers.PooledDenseRetriever`).
    * ``dense_pool`` = 50 — the pool size of the pooled dense channel.
    """

    tau: float = doc("completeness threshold: a kept chunk is damaged (and repaired) iff its score < tau", 0.5)
    gamma: float = doc("coverage threshold: an element is uncovered (and followed up) iff its score < gamma", 0.5)
    max_rounds: int = doc("rounds of retrieve, refine, repair and audit at most", 3)
    candidates_per_channel: int = doc("each channel's own top-N before fusion", 50)
    k1: int = doc("size of the fused candidate pool the controller refines", 50)
    k: int = doc("chunks kept per active query after refinement (<= k1)", 10)
    keep_threshold: float = doc(
        "an LM controller keeps a candidate iff p(Yes) / (p(Yes) + p(No)) >= this, in [0, 1]", 0.5
    )
    compression_length: int | None = doc("token budget of a repaired chunk (null: chunk_tokens)", None)
    max_follow_ups: int = doc("follow-up queries per round at most", 3)
    max_final_chunks: int = doc("chunks in the final prompt at most", 30)
    channels: tuple[str, ...] = doc(
        "retrieval channels: distinct names from dense, sparse, extended", ("dense", "sparse")
    )
    enrich: bool = doc("enrich the query (false: every channel searches the raw query; the paper's w/o QE-IAR)", True)
    dynamic_weights: bool = doc("weight the channels per query (false: uniform weights; w/o DW-IAR)", True)
    refine: bool = doc("let the controller refine the candidates (false: the top k by fused score; w/o ER-SPC)", True)
    repair: bool = doc("detect and repair damaged chunks", True)
    answer_max_tokens: int | None = doc("token budget of the final answer (null: evaluate.max_new_tokens)", None)
    dense_index: str = doc(
        "dense channel: full (every passage embedded, cached on disk) or pooled (top dense_pool BM25 passages"
        " re-ranked by embedding)",
        "pooled",
    )
    dense_pool: int = doc("BM25 pool size of dense_index: pooled", 50)
    chunking: str = doc(
        "what is searched: fixed (the documents cut into chunk_tokens windows) or corpus (the corpus rows as built)",
        "fixed",
    )
    chunk_tokens: int = doc("window length in tokens of chunking: fixed", 64)

    @property
    def repair_length(self) -> int:
        """L, the token budget of a repaired chunk: ``compression_length``, else ``chunk_tokens``."""
        return self.compression_length if self.compression_length is not None else self.chunk_tokens

    def __post_init__(self) -> None:
        if isinstance(self.channels, list):
            object.__setattr__(self, "channels", tuple(self.channels))

    def validate(self) -> InSemRAGSettings:
        """Raise :class:`ConfigError` on a bad value; return ``self`` for chaining."""

        def bad(name: str, what: str) -> ConfigError:
            return ConfigError(f"{what}, got {getattr(self, name)!r}", f"insemrag.{name}")

        for name in ("tau", "gamma"):
            check_number(getattr(self, name), name, f"insemrag.{name}", 0.0, THRESHOLD_BOUND)
        keep = self.keep_threshold
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0.0 <= keep <= 1.0:
            raise bad("keep_threshold", "keep_threshold must be a number in [0, 1]")
        check_counts(self, COUNT_BOUNDS, "insemrag")
        for name in ("compression_length", "answer_max_tokens"):
            check_int(getattr(self, name), name, f"insemrag.{name}", NEW_TOKENS, optional=True)
        if self.chunking not in CHUNKINGS:
            raise bad("chunking", f"chunking must be one of {', '.join(CHUNKINGS)}")
        if self.dense_index not in ("full", "pooled"):
            raise bad("dense_index", "dense_index must be full or pooled")
        if self.k > self.k1:
            raise bad("k", f"k must be <= k1 = {self.k1} (it is picked from the k1 candidates)")
        channels = self.channels
        if (
            not isinstance(channels, tuple)
            or not channels
            or len(set(channels)) != len(channels)
            or not set(channels) <= set(CHANNELS)
        ):
            raise bad("channels", f"channels must be distinct names from {', '.join(CHANNELS)}")
        for name in ("enrich", "dynamic_weights", "refine", "repair"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, f"{name} must be true or false")
        return self

    def engine_channels(self) -> frozenset[str]:
        """The channels of the user's engine InSemRAG searches when ``retrieval.backend`` is external: ``sparse``
        the lexical one; ``dense`` / ``extended`` the dense one with ``dense_index = "full"``, the lexical one (the
        pool re-ranked here) with ``"pooled"``."""
        dense = "dense" if self.dense_index == "full" else "lexical"
        return frozenset(dense if name in ("dense", "extended") else "lexical" for name in self.channels)

    def engine_refusal(self) -> tuple[str, str] | None:
        """Why these settings cannot search the user's engine, and the key at fault (None: they can). The engine
        holds the corpus rows ``workbench index`` pushed, not InSemRAG's own token windows (``chunking = fixed``)."""
        if self.chunking == "fixed":
            return (
                "InSemRAG's token windows (chunking: fixed) are built in this process, and the engine holds the"
                " corpus rows: set chunking: corpus",
                "chunking",
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        out = asdict(self)
        out["channels"] = list(self.channels)
        return out
