"""DENSE-RAG: measure whether the model understands its retrieved context (DENSE) and improve the context when it does
not (adaptive semantic chunking + iterative context refinement). Spec: ``specs/seed-000-dense.md``.

Per question (spec §3):

1. ``retrieve`` — the run's retriever finds the documents 𝒟 (those of its top ``max(k, doc_pool_k)`` passages);
   𝒟 is cut into DENSE-RAG's own fixed-size chunks — LangChain-style recursive splitting into 512-character chunks
   with a 64-character overlap (spec §3 step 1, §6.1, A8), whatever chunking the corpus was built with — and the
   chunks are ranked by cosine to the question with the embedder (the paper's per-question dense index, §6.2); the
   top ``k`` form C₀. ``chunking = "corpus"`` takes the retriever's top ``k`` corpus passages as C₀ instead.
2. ``dense`` — DENSE on C₀ (:func:`~workbench.uncertainty.dense_stats.dense_stats`: each chunk rephrased alone,
   k + 1 single-edit contexts, greedy answers R₀, NLI); DSE₀ from the
   :class:`~workbench.uncertainty.features.dense.Dense` feature. DSE₀ ≤ θ → *certain*: the answer is
   SELECT_ANSWER(R₀) and nothing else runs.
3. ``semantic_chunking`` (uncertain only, §6) — the documents of 𝒟 are rebuilt from their corpus chunks (joined by
   ``index``, overlaps removed when the corpus has ``start``/``end`` offsets) and re-split by
   :class:`~workbench.data.chunkers.SemanticChunker` (Alg. 2: consecutive sentences merged while cos > τ and the
   summed sentence length ≤ T_max characters). The semantic chunks are embedded and ranked by cosine to the
   question; the top ``candidates`` form the pool P and its top ``k`` the starting context. ``SemanticChunker``
   already follows Alg. 2 / §6.4 (strict ``>``, consecutive sentences compared, joining spaces not counted, an
   oversize sentence kept whole), so it is used as is; it differs from the authors' code only in its rule-based
   sentence splitter (no NLTK Punkt) and in keeping the document's own white space between merged sentences
   (the code joins them with one space) — neither changes which sentences merge.
4. ``refine`` (one step per iteration, §7.3) — DENSE on the current context (rephrasings are reused: a per-question
   memo answers any deterministic generation it has seen), self-evaluation, best-context update, stop rule; else
   chunks are sorted into certain / necessary / unnecessary (:func:`classify_chunks`, ablation answers for the
   uncertain ones), unnecessary chunks are pruned, the unvisited pool chunk most similar to each necessary chunk is
   added (:func:`refill`) and the context is topped up to ``k`` in pool order (:func:`top_up`).
5. ``select_answer`` — SELECT_ANSWER (§4.8, :func:`select_answer`) over the reply set of the best context: the
   successful one, else the lowest-DSE context seen (sufficiency preferred).

Each chunk's rephrasing may take up to ``rephrase_length_factor`` (1.5) × the chunk's token count new tokens (spec
A7), so a rephrasing is not cut short by a fixed cap.

Recovered failures go to ``trace.fallbacks`` / ``trace.notes``: empty retrieval (closed-book answer), empty
rephrasings (original chunk kept, as ``dense_stats`` does), rephrasings cut at their length cap, an unparseable
self-evaluation reply (counted as "no", i.e. not sufficient: the spec's default 0), and prompts the generator's
prompt builder cut to fit the model window.
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.prompts import number_chunks
from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.data.chunkers import (
    LANGCHAIN_SEPARATORS,
    FixedSizeChunker,
    RecursiveChunker,
    SemanticChunker,
    chunk_documents,
)
from workbench.data.corpus import document_text
from workbench.methods.base import Answer, Method, Passage, Tools, Trace
from workbench.methods.common import ANSWER_SYSTEM, generate_answers
from workbench.metrics.qa import normalize_answer
from workbench.uncertainty.dense_stats import REPHRASE_PROMPT, DenseSettings, dense_stats
from workbench.uncertainty.features.dense import Dense
from workbench.uncertainty.graph_math import ENTAILMENT

CERTAIN, NECESSARY, UNNECESSARY = "certain", "necessary", "unnecessary"
NECESSITY_RULES = ("code_oneway", "alg3_bidirectional", "eq10_both_zero")
STOP_RULES = ("and", "or")
STOP_FLAGS = ("best", "current")
REFILL_FROM = ("necessary", "certain", "none")
ADJACENCY_RULES = ("argmax", "soft")
CHUNKINGS = ("recursive", "fixed", "corpus")
REPHRASE_CAP_STEP = 16  # rephrasing caps are rounded up to a multiple of this (fewer distinct caps per batch)

SELF_EVAL_SYSTEM = "You judge whether reference passages are enough to answer a question. Reply with yes or no only."
SELF_EVAL_TEMPLATE = (
    "Reference passages:\n{context}\n\nQuestion: {question}\n"
    "Could someone answer this question using only the passages above? Reply with one word: yes or no."
)
_YES_NO = re.compile(r"\b(yes|no)\b", flags=re.IGNORECASE)


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
        for name in (
            "k",
            "doc_pool_k",
            "max_chunk_chars",
            "candidates",
            "max_iterations",
            "self_eval_max_new_tokens",
            "chunk_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}", f"{where}.{name}")
        overlap = self.chunk_overlap
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < self.chunk_size:
            raise ConfigError(
                f"chunk_overlap must be an integer in [0, chunk_size), got {overlap!r}", f"{where}.chunk_overlap"
            )
        if self.chunking not in CHUNKINGS:
            raise ConfigError(
                f"chunking must be one of {', '.join(CHUNKINGS)}, got {self.chunking!r}", f"{where}.chunking"
            )
        factor = self.rephrase_length_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor) or factor <= 0:
            raise ConfigError(
                f"rephrase_length_factor must be a number > 0, got {factor!r}", f"{where}.rephrase_length_factor"
            )
        cap = self.rephrase_max_new_tokens
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigError(
                f"rephrase_max_new_tokens must be None or an integer >= 1, got {cap!r}",
                f"{where}.rephrase_max_new_tokens",
            )
        if self.candidates < self.k:
            raise ConfigError(f"candidates ({self.candidates}) must be >= k ({self.k})", f"{where}.candidates")
        if not (isinstance(self.theta, int | float) and math.isfinite(self.theta) and self.theta >= 0):
            raise ConfigError(f"theta must be a finite number >= 0, got {self.theta!r}", f"{where}.theta")
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
        if self.answer_max_new_tokens is not None and self.answer_max_new_tokens < 1:
            raise ConfigError(
                f"answer_max_new_tokens must be >= 1 or None, got {self.answer_max_new_tokens}",
                f"{where}.answer_max_new_tokens",
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


# --------------------------------------------------------------------------------------------- pure decisions


def entailment_verdicts(probs: np.ndarray) -> np.ndarray:
    """Directional verdicts ``E[i, j] = NLI(r_i ⇒ r_j)`` (argmax = entailment) from (n, n, 3) probs; E_ii = True."""
    arr = np.asarray(probs, dtype=float)
    verdicts = arr.argmax(axis=-1) == ENTAILMENT if arr.size else np.zeros(arr.shape[:2], dtype=bool)
    np.fill_diagonal(verdicts, True)
    return verdicts


def is_unchanged(forward: bool, backward: bool, rule: str = "code_oneway") -> bool:
    """Whether masking a chunk left r₀ unchanged (→ the chunk is *unnecessary*), spec §7.3 UNCHANGED.

    ``forward`` = NLI(r₀ ⇒ ar), ``backward`` = NLI(ar ⇒ r₀). ``code_oneway``: backward; ``alg3_bidirectional``: both;
    ``eq10_both_zero``: either (necessary only when neither direction holds, eq. 10).
    """
    if rule == "code_oneway":
        return bool(backward)
    if rule == "alg3_bidirectional":
        return bool(forward and backward)
    if rule == "eq10_both_zero":
        return bool(forward or backward)
    raise ValueError(f"unknown necessity rule {rule!r}; use one of {', '.join(NECESSITY_RULES)}")


def uncertain_positions(verdicts: np.ndarray) -> list[int]:
    """Chunk positions (0-based) whose rephrasing broke mutual entailment with r₀ (eq. 8: w_{i,0} < 1)."""
    e = np.asarray(verdicts, dtype=bool)
    return [i - 1 for i in range(1, len(e)) if not (e[i, 0] and e[0, i])]


def classify_chunks(
    verdicts: np.ndarray, ablation: Mapping[int, tuple[bool, bool]], rule: str = "code_oneway"
) -> list[str]:
    """One class per context chunk (spec §4.7, eqs. 8–10): ``certain`` / ``necessary`` / ``unnecessary``.

    ``verdicts`` is the (m+1, m+1) directional entailment matrix over R (index 0 = r₀, index i = chunk i − 1
    rephrased). A chunk is certain when r_i and r₀ entail each other; otherwise ``ablation[position]`` =
    (NLI(r₀ ⇒ ar), NLI(ar ⇒ r₀)) for the answer without the chunk decides by :func:`is_unchanged` (unchanged →
    unnecessary, else necessary). ``KeyError`` when an uncertain chunk has no ablation verdicts.
    """
    e = np.asarray(verdicts, dtype=bool)
    uncertain = set(uncertain_positions(e))
    classes: list[str] = []
    for position in range(len(e) - 1):
        if position not in uncertain:
            classes.append(CERTAIN)
            continue
        if position not in ablation:
            raise KeyError(f"uncertain chunk {position} has no ablation verdicts")
        forward, backward = ablation[position]
        classes.append(UNNECESSARY if is_unchanged(forward, backward, rule) else NECESSARY)
    return classes


def refill(anchors: Sequence[int], vectors: np.ndarray, candidates: Sequence[int], kept: int, k: int) -> list[int]:
    """Pool indices to add: for each anchor (context order) the candidate with the highest cosine to it (spec §7.3).

    ``vectors`` are the pool's L2-normalised rows; ``candidates`` the unvisited pool indices in rank order (ties go
    to the better-ranked one); a candidate is picked once. ``kept`` is the context size after pruning: after the
    first pick, picking stops once ``kept + picked`` reaches ``k`` (so the context holds at most k + 1 chunks, [R]).
    """
    vectors = np.asarray(vectors, dtype=float)
    added: list[int] = []
    for anchor in anchors:
        if added and kept + len(added) >= k:
            break
        free = [c for c in candidates if c not in added]
        if not free:
            break
        similarity = vectors[free] @ vectors[anchor]
        added.append(free[int(np.argmax(similarity))])
    return added


def top_up(context: Sequence[int], order: Sequence[int], visited: set[int] | frozenset[int], k: int) -> list[int]:
    """``context`` filled up to ``k`` with unvisited indices taken in ``order`` (pool rank order) [C]."""
    out = list(context)
    for index in order:
        if len(out) >= k:
            break
        if index not in visited and index not in out:
            out.append(index)
    return out


def is_better(dse: float, flag: int, dse_min: float, flag_best: int) -> bool:
    """Alg 3's best-context update with ``≤`` (A22): lower-or-equal DSE, unless that would trade a sufficient best
    (``flag_best = 1``) for an insufficient context."""
    return dse <= dse_min and (flag_best == 0 or flag == 1)


def should_stop(dse_min: float, flag: int, theta: float = 0.2, rule: str = "and") -> bool:
    """Refinement success test: ``and`` = DSE_min < θ and the context judged sufficient (Alg 3, default);
    ``or`` = either one (the prose of §5.2). Without self-evaluation pass ``flag = 1`` (DSE alone decides)."""
    low = dse_min < theta
    if rule == "and":
        return bool(low and flag == 1)
    if rule == "or":
        return bool(low or flag == 1)
    raise ValueError(f"unknown stop rule {rule!r}; use 'and' or 'or'")


def select_answer(answers: Sequence[str]) -> str:
    """SELECT_ANSWER (spec §4.8): the unique most frequent normalised answer of R, else r₀ on a tie.

    Returns the first response (in R order) with the winning normalised form, as generated (stripped); ``""`` for
    an empty R.
    """
    if not answers:
        return ""
    normal = [normalize_answer(a) for a in answers]
    counts = Counter(normal).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return answers[0].strip()
    winner = counts[0][0]
    return answers[normal.index(winner)].strip()


def parse_self_evaluation(reply: str) -> int | None:
    """1 for "yes", 0 for "no" (the first of the two whole words in the reply), None when neither occurs."""
    match = _YES_NO.search(reply or "")
    if match is None:
        return None
    return 1 if match.group(1).lower() == "yes" else 0


# --------------------------------------------------------------------------------------------- machinery


def _token_count(generator: Any, text: str) -> int:
    """``text``'s length in the generator's tokens (white-space words when it has no tokenizer)."""
    tokenizer = getattr(generator, "tokenizer", None)
    if tokenizer is None:
        return len(text.split())
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _unit_rows(vectors: Any) -> np.ndarray:
    """``vectors`` as float rows scaled to unit length (zero rows stay zero)."""
    rows = np.asarray(vectors, dtype=float)
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def _cosine_to_question(embedder: Any, question: str, texts: list[str]) -> np.ndarray:
    """Cosine similarity of each text's embedding to the question's (the per-question dense ranking, §6.2)."""
    return _unit_rows(embedder.encode(texts)) @ _unit_rows(embedder.encode([question]))[0]


class _Memo:
    """A per-question memo in front of the generator: a deterministic ``generate`` request (same prompt and
    decoding parameters; the generator seeds samples per prompt) is answered from memory the second time, so a
    chunk is rephrased once per question and a context answered once. Everything else is delegated.

    Rephrasing prompts registered in ``rephrase_caps`` (prompt → new-token cap) are generated with their own cap
    whatever cap the request names (``dense_stats`` asks for all of a context's chunks in one call with one cap):
    the missing ones in one call per distinct cap, remembered without the request's cap. ``cut`` records the
    rephrasings that stopped at their cap (finish reason ``length``).

    Why not the generator's own cache: the evaluation stage turns that cache off (``evaluate.reuse_generations:
    false``), and where it is on, a repeat it answers is counted as a cached LM call (``cached_lm_calls``, and so in
    ``lm_calls_uncached``); a repeat the memo answers is no call at all, as in the paper's algorithm, which rephrases a
    chunk once per question. Measured on the tiny test model (an uncertain question, k = 2, 3 iterations): with the
    memo 4 LM calls; without it 7 with the cache off, or 4 plus 3 cached calls with it on — the same answers."""

    def __init__(self, generator: Any) -> None:
        self._generator = generator
        self._memo: dict[tuple[str, Any], Any] = {}
        self.rephrase_caps: dict[str, int] = {}
        self.cut: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    @staticmethod
    def _params(kwargs: dict[str, Any]) -> Any:
        try:
            params = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
            hash(params)
        except TypeError:
            return None
        return params

    def generate(self, prompts: Sequence[str], **kwargs: Any) -> list[Any]:
        if kwargs.get("n", 1) != 1:
            return self._generator.generate(prompts, **kwargs)
        prompts = list(prompts)
        if prompts and all(p in self.rephrase_caps for p in prompts):
            return self._rephrase(prompts, kwargs)
        params = self._params(kwargs)
        if params is None:
            return self._generator.generate(prompts, **kwargs)
        missing = list(dict.fromkeys(p for p in prompts if (p, params) not in self._memo))
        if missing:
            for prompt, output in zip(missing, self._generator.generate(missing, **kwargs), strict=True):
                self._memo[(prompt, params)] = output
        return [self._memo[(p, params)] for p in prompts]

    def _rephrase(self, prompts: list[str], kwargs: dict[str, Any]) -> list[Any]:
        """Rephrasings, each with its registered cap (see the class docstring)."""
        rest = {k: v for k, v in kwargs.items() if k != "max_new_tokens"}
        params = ("rephrase", self._params(rest))
        missing = list(dict.fromkeys(p for p in prompts if (p, params) not in self._memo))
        for cap in sorted({self.rephrase_caps[p] for p in missing}):
            group = [p for p in missing if self.rephrase_caps[p] == cap]
            for prompt, output in zip(group, self._generator.generate(group, max_new_tokens=cap, **rest), strict=True):
                self._memo[(prompt, params)] = output
                self.cut[prompt] = getattr(output, "finish_reason", None) == "length"
        return [self._memo[(p, params)] for p in prompts]


@dataclass
class _DenseRun:
    """One DENSE evaluation of a context: chunk texts, replies R, directional verdicts, DSE, and how many chunks were
    rephrased for the first time in this question (``new_rephrasings``), came back empty (``fallbacks``) or were cut
    at their length cap (``capped``); ``caps`` are those new rephrasings' caps."""

    texts: list[str]
    answers: list[str]
    verdicts: np.ndarray
    dse: float
    fallbacks: int
    new_rephrasings: int
    capped: int = 0
    caps: list[int] = field(default_factory=list)


@dataclass
class _PoolChunk:
    chunk_id: str
    text: str


@dataclass
class _Best:
    """The best context seen during refinement."""

    ids: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    dse: float = math.inf
    flag: int = 0
    iteration: int = 0


class DenseRAG(Method):
    """DENSE-RAG (spec seed-000): DENSE triage, then adaptive semantic chunking and iterative context refinement for
    uncertain questions. Needs ``tools.judge`` (NLI for DENSE and chunk necessity) and ``tools.embedder`` (semantic
    chunking, pool ranking and refill similarity); the generator also rephrases and self-evaluates."""

    name = "dense_rag"
    requires_gold = False

    def __init__(self, tools: Tools, settings: DenseRAGSettings | None = None) -> None:
        super().__init__(tools)
        self.settings = settings or DenseRAGSettings()
        self.settings.validate()
        if tools.judge is None:
            raise ConfigError("dense_rag needs an NLI judge (tools.judge) for DENSE's answer graph", "dense_rag")
        if tools.embedder is None:
            raise ConfigError("dense_rag needs an embedder (tools.embedder) for semantic chunking", "dense_rag")
        self._docs: dict[str, list[int]] | None = None

    # ------------------------------------------------------------------ the method
    def answer(self, example: dict[str, Any]) -> Answer:
        s, tools = self.settings, self.tools
        question = str(example["question"])
        trace = Trace(self.name)
        memo = _Memo(tools.generator)
        view = copy.copy(tools)
        view.generator = memo
        rephrased: set[str] = set()
        truncated_before = self._truncations()

        with trace.step("retrieve", tools.counter) as step:
            hits = tools.search([question], max(s.k, s.doc_pool_k))[0]
            step["documents"] = list(dict.fromkeys(p.doc_id for p in hits))
            step["chunking"] = s.chunking
            fixed = hits[: s.k] if s.chunking == "corpus" else self._fixed_chunks(question, hits, step)
            step["ids"] = [p.chunk_id for p in fixed]
            step["scores"] = [p.score for p in fixed]
        if not fixed:
            what = "retrieval returned nothing" if not hits else "the retrieved documents gave no chunk"
            trace.fallback(f"{what}: answered closed-book")
            with trace.step("generate", tools.counter) as step:
                out = generate_answers(view, [question], [None], self._answer_tokens())[0]
                step["prompt_tokens"] = out.built.n_tokens
                step["source"] = "closed_book"
            self._note_truncation(trace, truncated_before)
            return Answer(out.text.strip(), trace)

        with trace.step("dense", tools.counter) as step:
            chars = tools.passage_chars if s.chunking == "corpus" else max(tools.passage_chars, s.chunk_size)
            texts = [p.prompt_text(chars) for p in fixed]
            first = self._dense(memo, question, texts, rephrased)
            certain = first.dse <= s.theta
            step.update(
                dse=first.dse,
                answers=first.answers,
                certain=certain,
                theta=s.theta,
                rephrase_fallbacks=first.fallbacks,
                rephrase_caps=first.caps,
                rephrase_capped=first.capped,
            )
        self._note_rephrase_fallbacks(trace, first)
        trace.retrieved = True
        trace.passages = [p.chunk_id for p in fixed]  # replaced below when another context answers
        if certain:
            return self._finish(trace, first.answers, {"source": "fixed_context", "dse": first.dse}, truncated_before)

        with trace.step("semantic_chunking", tools.counter) as step:
            pool, vectors = self._semantic_pool(question, hits, step)
        if not pool:
            trace.fallback("semantic chunking produced no chunks: kept the fixed-chunk answer")
            return self._finish(trace, first.answers, {"source": "fixed_context", "dse": first.dse}, truncated_before)

        if not s.refine:
            with trace.step("generate", tools.counter) as step:
                start = [c.text for c in pool[: s.k]]
                out = generate_answers(view, [question], [number_chunks(start)], self._answer_tokens())[0]
                step["prompt_tokens"] = out.built.n_tokens
                step["ids"] = [c.chunk_id for c in pool[: s.k]]
                step["source"] = "semantic_chunks"
                trace.passages = list(step["ids"])
            self._note_truncation(trace, truncated_before)
            return Answer(out.text.strip(), trace)

        best, reason = self._refine(trace, memo, view, question, pool, vectors, rephrased)
        detail = {
            "source": "refined_context" if reason == "success" else "lowest_dse_context",
            "success": reason == "success",
            "stop": reason,
            "dse": best.dse,
            "flag": best.flag,
            "iteration": best.iteration,
            "ids": best.ids,
        }
        trace.passages = list(best.ids)
        return self._finish(trace, best.answers, detail, truncated_before)

    # ------------------------------------------------------------------ refinement
    def _refine(
        self,
        trace: Trace,
        memo: _Memo,
        view: Tools,
        question: str,
        pool: list[_PoolChunk],
        vectors: np.ndarray,
        rephrased: set[str],
    ) -> tuple[_Best, str]:
        """Spec §7.3 REFINE; returns the best context and why the loop stopped."""
        s = self.settings
        context = list(range(min(s.k, len(pool))))
        visited: set[int] = set(context)
        best = _Best()
        reason = "max_iterations"
        for iteration in range(1, s.max_iterations + 1):
            with trace.step("refine", self.tools.counter) as step:
                step["iteration"] = iteration
                step["ids"] = [pool[i].chunk_id for i in context]
                run = self._dense(memo, question, [pool[i].text for i in context], rephrased)
                step.update(
                    dse=run.dse,
                    answers=run.answers,
                    new_rephrasings=run.new_rephrasings,
                    rephrase_fallbacks=run.fallbacks,
                    rephrase_caps=run.caps,
                    rephrase_capped=run.capped,
                )
                self._note_rephrase_fallbacks(trace, run)
                flag = self._self_evaluate(trace, memo, question, run.texts, step)
                if is_better(run.dse, flag, best.dse, best.flag):
                    best = _Best(step["ids"], run.answers, run.dse, flag, iteration)
                    step["best"] = True
                stop_flag = best.flag if s.stop_flag == "best" else flag
                if should_stop(best.dse, stop_flag, s.theta, s.stop_rule):
                    reason = step["stop"] = "success"
                    break
                if visited >= set(range(len(pool))):
                    reason = step["stop"] = "pool_exhausted"
                    break
                classes = self._classify(view, question, run, step)
                step["classes"] = dict(zip(step["ids"], classes, strict=True))
                unnecessary = {i for i, c in zip(context, classes, strict=True) if c == UNNECESSARY}
                if not unnecessary and len(context) > s.k:
                    reason = step["stop"] = "all_important"
                    break
                kept = [i for i in context if i not in unnecessary]
                step["pruned"] = [pool[i].chunk_id for i in context if i in unnecessary]
                new = kept
                if s.refill_from != "none":
                    wanted = NECESSARY if s.refill_from == "necessary" else CERTAIN
                    anchors = [i for i, c in zip(context, classes, strict=True) if c == wanted]
                    if not anchors and len(kept) >= s.k:
                        reason = step["stop"] = f"no_{wanted}_chunk"
                        break
                    free = [i for i in range(len(pool)) if i not in visited]
                    added = refill(anchors, vectors, free, len(kept), s.k)
                    new = top_up(kept + added, range(len(pool)), visited | set(added), s.k)
                    step["added"] = [pool[i].chunk_id for i in added]
                    step["topped_up"] = [pool[i].chunk_id for i in new[len(kept) + len(added) :]]
                if not new or new == context:
                    reason = step["stop"] = "empty_context" if not new else "unchanged"
                    break
                visited |= set(new)
                context = new
        if reason == "max_iterations":
            trace.steps[-1].detail["stop"] = reason
        return best, reason

    def _classify(self, view: Tools, question: str, run: _DenseRun, step: dict[str, Any]) -> list[str]:
        """Chunk classes of one DENSE run: ablation answers (one batched call) and their NLI against r₀."""
        positions = uncertain_positions(run.verdicts)
        ablation: dict[int, tuple[bool, bool]] = {}
        if positions:
            contexts = [run.texts[:p] + run.texts[p + 1 :] for p in positions]
            blocks = [number_chunks(c) if c else None for c in contexts]
            outs = generate_answers(view, [question] * len(positions), blocks, self._answer_tokens())
            ablated = [o.text.strip() for o in outs]
            step["ablation_answers"] = dict(zip((step["ids"][p] for p in positions), ablated, strict=True))
            r0 = run.answers[0]
            asked = [a for a in ablated if a != r0]  # equal strings entail without a call, as in dense_stats
            judged: dict[str, tuple[bool, bool]] = {}
            if asked:
                distinct = list(dict.fromkeys(asked))
                probs = self.tools.judge.entail(
                    [r0] * len(distinct) + distinct, distinct + [r0] * len(distinct), question
                )
                verdict = np.asarray(probs).argmax(axis=-1) == ENTAILMENT
                n = len(distinct)
                judged = {a: (bool(verdict[i]), bool(verdict[n + i])) for i, a in enumerate(distinct)}
            for p, a in zip(positions, ablated, strict=True):
                ablation[p] = (True, True) if a == r0 else judged[a]
        return classify_chunks(run.verdicts, ablation, self.settings.necessity_rule)

    def _self_evaluate(self, trace: Trace, memo: _Memo, question: str, texts: list[str], step: dict[str, Any]) -> int:
        """Flag_eval: 1 when the generator says the (original, un-rephrased) context suffices (spec §5.3)."""
        if not self.settings.self_evaluation:
            step["self_eval"] = None
            return 1  # the ablation "w/o self-evaluation": DSE alone decides the best context and the stop
        budget = self.settings.self_eval_max_new_tokens
        built = memo.build_prompt(
            question, number_chunks(texts), SELF_EVAL_TEMPLATE, max_new_tokens=budget, system=SELF_EVAL_SYSTEM
        )
        reply = memo.generate([built.text], temperature=0.0, max_new_tokens=budget, stop=("\n",))[0].text.strip()
        parsed = parse_self_evaluation(reply)
        step["self_eval"] = {"reply": reply, "flag": parsed}
        if parsed is None:
            trace.fallback(f"self-evaluation reply unparseable ({reply[:40]!r}): counted as 'no' (not sufficient)")
            return 0
        return parsed

    # ------------------------------------------------------------------ DENSE and chunking
    def _dense(self, memo: _Memo, question: str, texts: list[str], rephrased: set[str]) -> _DenseRun:
        """DENSE on one context via ``dense_stats``; DSE by the ``Dense`` feature (eq. 6). Each chunk's rephrasing
        is capped at :meth:`DenseRAGSettings.rephrase_cap` of its own token count (registered with the memo)."""
        s = self.settings
        chats = {c: memo.render_chat(REPHRASE_PROMPT.format(chunk=c)) for c in dict.fromkeys(texts)}
        caps = {c: s.rephrase_cap(_token_count(self.tools.generator, c)) for c in chats}
        memo.rephrase_caps.update({chats[c]: caps[c] for c in chats})
        row = dense_stats(
            [question],
            [texts],
            generator=memo,
            judge=self.tools.judge,
            system=ANSWER_SYSTEM,
            settings=s.dense_settings(self._answer_tokens(), max(caps.values(), default=1)),
        )[0]
        new = [c for c in dict.fromkeys(texts) if c not in rephrased]
        rephrasing = dict(zip(texts, row["dense_rephrased"], strict=True))
        rephrased.update(texts)
        probs = np.asarray(row["dense_nli_probs"], dtype=float)
        dse = Dense(rule=s.adjacency_rule).raw(row)
        kept_original = sum(1 for c in new if rephrasing[c] == c)  # noted once per chunk and question
        capped = sum(1 for c in new if memo.cut.get(chats[c], False))
        return _DenseRun(
            texts,
            list(row["dense_answers"]),
            entailment_verdicts(probs),
            dse,
            kept_original,
            len(new),
            capped=capped,
            caps=[caps[c] for c in new],
        )

    def _fixed_chunks(self, question: str, hits: list[Passage], step: dict[str, Any]) -> list[Passage]:
        """C₀ from DENSE-RAG's own fixed-size chunks of 𝒟 (spec §3 steps 1–3, §6.1–6.2): the documents of ``hits``
        rebuilt from the corpus, split by ``chunking`` (``chunk_size`` / ``chunk_overlap`` characters), embedded and
        ranked by cosine to the question; the top ``k``, best first. Chunk ids are ``<doc_id>#f<index>``."""
        s, tools = self.settings, self.tools
        doc_ids = list(dict.fromkeys(p.doc_id for p in hits))
        titles = {p.doc_id: p.title for p in hits}
        documents = [(d, text) for d in doc_ids if (text := self._document(d)).strip()]
        if s.chunking == "fixed":
            chunker: Any = FixedSizeChunker(size=s.chunk_size, overlap=s.chunk_overlap, unit="chars")
        else:
            chunker = RecursiveChunker(max_chars=s.chunk_size, separators=LANGCHAIN_SEPARATORS, overlap=s.chunk_overlap)
        chunks = chunk_documents(chunker, documents)
        step.update(chunk_size=s.chunk_size, chunk_overlap=s.chunk_overlap, chunks=len(chunks))
        if not chunks:
            return []
        scores = _cosine_to_question(tools.embedder, question, [c.text for c in chunks])
        order = np.argsort(-scores, kind="stable")[: s.k]
        return [
            Passage(
                -1,
                f"{chunks[i].doc_id}#f{chunks[i].index}",
                chunks[i].doc_id,
                titles[chunks[i].doc_id],
                chunks[i].text,
                float(scores[i]),
            )
            for i in order
        ]

    def _semantic_pool(
        self, question: str, hits: list[Passage], step: dict[str, Any]
    ) -> tuple[list[_PoolChunk], np.ndarray]:
        """Re-chunk the retrieved documents (Alg 2), rank the semantic chunks by cosine to the question, keep the
        top ``candidates``."""
        s, tools = self.settings, self.tools
        doc_ids = list(dict.fromkeys(p.doc_id for p in hits))
        titles = {p.doc_id: p.title for p in hits}
        documents = [(d, self._document(d)) for d in doc_ids]
        documents = [(d, text) for d, text in documents if text.strip()]
        chunker = SemanticChunker(tools.embedder.encode, tau=s.tau, max_len=s.max_chunk_chars)
        chunks = chunker.chunk_many(documents)
        step.update(documents=len(documents), semantic_chunks=len(chunks), tau=s.tau, max_chunk_chars=s.max_chunk_chars)
        if not chunks:
            step["pool"] = []
            return [], np.zeros((0, 1))
        vectors = _unit_rows(tools.embedder.encode([c.text for c in chunks]))
        scores = vectors @ _unit_rows(tools.embedder.encode([question]))[0]
        order = np.argsort(-scores, kind="stable")[: s.candidates]
        prompt_chars = max(tools.passage_chars, s.max_chunk_chars)
        pool = [
            _PoolChunk(
                f"{chunks[i].doc_id}#s{chunks[i].index}",
                Passage(-1, "", chunks[i].doc_id, titles[chunks[i].doc_id], chunks[i].text).prompt_text(prompt_chars),
            )
            for i in order
        ]
        step["pool"] = [c.chunk_id for c in pool]
        step["pool_scores"] = [float(scores[i]) for i in order]
        return pool, vectors[order]

    def _document(self, doc_id: str) -> str:
        """The text of ``doc_id`` rebuilt from its corpus chunks (:func:`document_text`)."""
        tools = self.tools
        if self._docs is None:
            self._docs = {}
            for row, d in enumerate(tools.column("doc_id")):
                self._docs.setdefault(str(d), []).append(row)
        rows = self._docs.get(doc_id, [])
        index = self._optional_column("index")
        start, end = self._optional_column("start"), self._optional_column("end")
        texts = tools.column("text")
        return document_text(
            [
                (
                    int(index[r]) if index is not None else n,
                    str(texts[r]),
                    int(start[r]) if start is not None and end is not None else None,
                    int(end[r]) if start is not None and end is not None else None,
                )
                for n, r in enumerate(rows)
            ]
        )

    def _optional_column(self, name: str) -> list | None:
        try:
            return self.tools.column(name)
        except (KeyError, ValueError, TypeError):
            return None

    # ------------------------------------------------------------------ helpers
    def _answer_tokens(self) -> int:
        return self.settings.answer_max_new_tokens or self.tools.max_new_tokens

    def _truncations(self) -> int:
        counter = getattr(self.tools.generator, "counter", None)
        return int(getattr(counter, "truncated_prompts", 0) or 0)

    def _note_truncation(self, trace: Trace, before: int) -> None:
        cut = self._truncations() - before
        if cut > 0:
            trace.fallback(f"{cut} prompt(s) cut to fit the model window (the prompt builder dropped context tokens)")

    @staticmethod
    def _note_rephrase_fallbacks(trace: Trace, run: _DenseRun) -> None:
        if run.fallbacks:
            trace.fallback(f"{run.fallbacks} rephrasing(s) came back empty or unchanged: the original chunk was kept")
        if run.capped:
            trace.fallback(f"{run.capped} rephrasing(s) cut at their length cap: part of the chunk may be missing")

    def _finish(self, trace: Trace, answers: list[str], detail: dict[str, Any], truncated_before: int) -> Answer:
        with trace.step("select_answer", self.tools.counter) as step:
            text = select_answer(answers)
            step.update(detail)
            step["answer"] = text
            step["r0"] = answers[0] if answers else ""
        self._note_truncation(trace, truncated_before)
        return Answer(text, trace)
