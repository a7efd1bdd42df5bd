"""DENSE-RAG's settings: every knob of the method, its default's source and its range checks (spec
``specs/seed-000-dense.md``; the rephrasing cap is spec A7)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.core.bounds import (
    CHARS,
    NEW_TOKENS,
    PASSAGES,
    POOL,
    ROUNDS,
    SEED,
    TEMPERATURE,
    check_counts,
    check_int,
    check_number,
)
from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.uncertainty.dense_stats import DenseSettings

__all__ = [
    "ADJACENCY_RULES",
    "CHUNKINGS",
    "NECESSITY_RULES",
    "REFILL_FROM",
    "REPHRASE_CAP_STEP",
    "STOP_FLAGS",
    "STOP_RULES",
    "DenseRAGSettings",
]

NECESSITY_RULES = ("code_oneway", "alg3_bidirectional", "eq10_both_zero")
STOP_RULES = ("and", "or")
STOP_FLAGS = ("best", "current")
REFILL_FROM = ("necessary", "certain", "none")
ADJACENCY_RULES = ("argmax", "soft")
CHUNKINGS = ("recursive", "fixed", "corpus")
REPHRASE_CAP_STEP = 16  # rephrasing caps are rounded up to a multiple of this (fewer distinct caps per batch)
THETA_BOUND = 100.0  # θ at most: DSE over k + 1 answers is at most ln(k + 1), under 5 for k ≤ 100
LENGTH_FACTOR_BOUND = 100.0  # a rephrasing may run to this many times its chunk's tokens at most
COUNT_BOUNDS = {
    "k": PASSAGES,
    "doc_pool_k": POOL,
    "max_chunk_chars": CHARS,
    "candidates": POOL,
    "max_iterations": ROUNDS,
    "self_eval_max_new_tokens": NEW_TOKENS,
    "chunk_size": CHARS,
}
"""The largest value of each integer setting (all from 1)."""


@dataclass(frozen=True)
class DenseRAGSettings:
    """DENSE-RAG's settings; each default's source (spec tags: [P] paper, [App] appendix, [C] authors' code,
    [R] the spec's recommendation, [W] a workbench choice).

    * ``k = 5`` chunks per context [P §6.1, App H]; ``theta = 0.2`` certain threshold on DSE [P §5]: triage uses
      ``DSE ≤ θ``, the refinement success test ``DSE < θ`` (A9; the same split for k ≤ 10).
    * ``chunking = "recursive"``, ``chunk_size = 512``, ``chunk_overlap = 64`` — C₀'s fixed-size chunks [P §6.1,
      App H, C]: the documents of 𝒟 split like LangChain's ``RecursiveCharacterTextSplitter`` (separators "\\n\\n",
      "\\n", " ", sizes in characters [C; A8]) and ranked by cosine to the question. ``"fixed"`` cuts plain
      character windows of the same size and overlap; ``"corpus"`` uses the run's corpus passages as they are
      (the top ``k`` of the run's retriever), e.g. when the corpus is already chunked the paper's way.
    * ``doc_pool_k = 10`` [W]: 𝒟 = documents of the top-10 fixed chunks (the paper re-chunks each question's own
      document set — 2Wiki gives 10 paragraphs; the workbench corpus is shared, so the retrieved documents stand in).
    * ``tau = 0.6`` sentence-merge cosine, strict ``>`` [App H, Alg 2]; ``max_chunk_chars = 512`` T_max in
      characters [App H, C; A8].
    * ``candidates = 30`` pool size N_cand [C; A11]; ``max_iterations = 10`` I_max safety cap [R; A21].
    * ``stop_rule = "and"``: stop when DSE_min < θ **and** the context is judged sufficient [Alg 3, C; A18];
      ``"or"`` is the prose of §5.2. ``stop_flag = "best"``: the sufficiency flag of the best context [Alg 3; A23];
      ``"current"`` is [C].
    * ``necessity_rule = "code_oneway"`` [C; A17]: a chunk is unnecessary when the ablated answer entails r₀;
      ``"alg3_bidirectional"`` (both directions) and ``"eq10_both_zero"`` (necessary only if neither direction).
    * ``adjacency_rule = "argmax"``: w ∈ {0, ½, 1} from argmax verdicts [P eq. 5]; ``"soft"`` uses P_entail for
      DSE only (chunk classes always use argmax verdicts).
    * Switches (ablations, spec §7.4): ``refine = False`` is "chunking only" (one greedy answer on the top-k
      semantic chunks); ``self_evaluation = False`` drops the flag (stop and best by DSE alone);
      ``refill_from = "certain"`` refills around certain chunks; ``"none"`` only removes chunks (no refill, no
      top-up, [R]).
    * Decoding: ``rephrase_temperature = 0`` greedy rephrasing [R §4.2 "or greedy for full determinism";
      ``DenseSettings`` default; C samples at 0.5]; each rephrasing may run to ``rephrase_length_factor = 1.5`` ×
      its chunk's token count (generator tokens), rounded up to a multiple of 16 [R A7: "rephrase ≥ 1.5× the
      chunk's token count"; C: as many tokens as the prompt has characters]; ``rephrase_max_new_tokens = None``
      caps that (a quick-run knob below the spec's budget; every rephrasing cut at its cap is counted);
      ``seed`` for sampled rephrasings; ``self_eval_max_new_tokens = 8`` [R; A7], greedy [C];
      ``answer_max_new_tokens = None`` → the run's ``tools.max_new_tokens``, so r₀ is Standard RAG's answer.
    """

    k: int = doc("chunks per context", 5)
    theta: float = doc("certainty threshold on DSE (degree-based semantic entropy): certain iff DSE <= theta", 0.2)
    doc_pool_k: int = doc("the documents of the top-N retrieved chunks form the question's document set", 10)
    tau: float = doc("sentence-merge cosine threshold of semantic chunking (strict >), in [-1, 1]", 0.6)
    max_chunk_chars: int = doc("maximum semantic chunk length in characters", 512)
    candidates: int = doc("candidate pool size for refinement (>= k)", 30)
    max_iterations: int = doc("refinement iterations at most", 10)
    stop_rule: str = doc("stop refining when DSE < theta and (and) / or (or) the context is judged sufficient", "and")
    stop_flag: str = doc("sufficiency flag of the best context (best) or of the current one (current)", "best")
    necessity_rule: str = doc(
        "when a chunk is unnecessary: code_oneway, alg3_bidirectional or eq10_both_zero", "code_oneway"
    )
    adjacency_rule: str = doc(
        "graph weights from argmax verdicts (argmax) or entailment probabilities (soft, DSE only)", "argmax"
    )
    refine: bool = doc(
        "run the iterative refinement (false: chunking only, one answer on the top-k semantic chunks)", True
    )
    self_evaluation: bool = doc(
        "ask the model whether the context suffices (false: stop and pick the best by DSE alone)", True
    )
    refill_from: str = doc("refill around necessary chunks, certain chunks, or none (only remove chunks)", "necessary")
    rephrase_temperature: float = doc("temperature of the context rephrasings (0: greedy)", 0.0)
    rephrase_length_factor: float = doc(
        "each rephrasing may run to this many times its chunk's token count (rounded up to 16)", 1.5
    )
    rephrase_max_new_tokens: int | None = doc(
        "cap on every rephrasing's new tokens (null: no cap beyond the length factor)", None
    )
    seed: int | None = doc("seed of sampled rephrasings (null: the run's)", None)
    self_eval_max_new_tokens: int = doc("token budget of the sufficiency self-evaluation", 8)
    answer_max_new_tokens: int | None = doc("token budget of the answers (null: evaluate.max_new_tokens)", None)
    chunking: str = doc(
        "initial chunks: recursive or fixed character windows of the retrieved documents, or corpus"
        " (the run's passages)",
        "recursive",
    )
    chunk_size: int = doc("initial chunk length in characters", 512)
    chunk_overlap: int = doc("overlap of neighbouring initial chunks in characters (< chunk_size)", 64)

    def validate(self) -> None:
        """Raise :class:`ConfigError` (naming the field) on an out-of-range value or an unknown rule."""
        where = "dense_rag"  # errors name dense_rag.<setting>
        check_counts(self, COUNT_BOUNDS, where)
        check_int(
            self.rephrase_max_new_tokens,
            "rephrase_max_new_tokens",
            f"{where}.rephrase_max_new_tokens",
            NEW_TOKENS,
            optional=True,
        )
        check_int(
            self.answer_max_new_tokens,
            "answer_max_new_tokens",
            f"{where}.answer_max_new_tokens",
            NEW_TOKENS,
            optional=True,
        )
        check_int(self.seed, "seed", f"{where}.seed", SEED, low=0, optional=True)
        for name in ("refine", "self_evaluation"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}", f"{where}.{name}")
        check_number(
            self.rephrase_temperature, "rephrase_temperature", f"{where}.rephrase_temperature", 0.0, TEMPERATURE
        )
        check_number(self.theta, "theta", f"{where}.theta", 0.0, THETA_BOUND)
        overlap = self.chunk_overlap
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < self.chunk_size:
            raise ConfigError(
                f"chunk_overlap must be an integer in [0, chunk_size), got {overlap!r}", f"{where}.chunk_overlap"
            )
        if self.chunking not in CHUNKINGS:
            raise ConfigError(
                f"chunking must be one of {', '.join(CHUNKINGS)}, got {self.chunking!r}", f"{where}.chunking"
            )
        check_number(
            self.rephrase_length_factor,
            "rephrase_length_factor",
            f"{where}.rephrase_length_factor",
            0.0,
            LENGTH_FACTOR_BOUND,
            above=True,
        )
        if self.candidates < self.k:
            raise ConfigError(f"candidates ({self.candidates}) must be >= k ({self.k})", f"{where}.candidates")
        if not (isinstance(self.tau, int | float) and -1.0 <= self.tau <= 1.0):
            raise ConfigError(f"tau must be a cosine in [-1, 1], got {self.tau!r}", f"{where}.tau")
        for name, allowed in (
            ("stop_rule", STOP_RULES),
            ("stop_flag", STOP_FLAGS),
            ("necessity_rule", NECESSITY_RULES),
            ("adjacency_rule", ADJACENCY_RULES),
            ("refill_from", REFILL_FROM),
        ):
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}", f"{where}.{name}"
                )
        self.dense_settings(1).validate()

    def dense_settings(self, answer_tokens: int, rephrase_tokens: int = 1) -> DenseSettings:
        """The :class:`DenseSettings` of a DENSE call: answers capped at ``answer_tokens``; ``rephrase_tokens`` is the
        nominal rephrasing cap (DENSE-RAG's memo gives each chunk its own, :meth:`rephrase_cap`)."""
        return DenseSettings(
            rephrase_temperature=self.rephrase_temperature,
            rephrase_max_new_tokens=rephrase_tokens,
            answer_max_new_tokens=answer_tokens,
            seed=self.seed,
        )

    def rephrase_cap(self, chunk_tokens: int) -> int:
        """The new-token cap of the rephrasing of a chunk of ``chunk_tokens`` tokens: ⌈factor × chunk_tokens⌉
        rounded up to a multiple of 16 (spec A7: at least 1.5× the chunk), then ``rephrase_max_new_tokens`` if
        set."""
        cap = math.ceil(self.rephrase_length_factor * max(int(chunk_tokens), 1))
        cap = REPHRASE_CAP_STEP * math.ceil(cap / REPHRASE_CAP_STEP)
        if self.rephrase_max_new_tokens is not None:
            cap = min(cap, self.rephrase_max_new_tokens)
        return max(cap, 1)
