"""DTR's settings: every knob, its bounds and checks, and the paper's defaults where ours depart (the docstring of
:class:`DTRSettings`). Light to import: the registry and the recipe loader read it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from workbench.core.bounds import NEW_TOKENS, PASSAGES, POOL, check_counts, check_int, check_number
from workbench.core.config import doc
from workbench.core.errors import ConfigError

__all__ = ["COUNT_BOUNDS", "PSEUDO_CONTEXT_PROMPT", "RETRIEVERS", "RULES", "TAU_BOUND", "DTRSettings"]

RULES: tuple[str, ...] = ("cos_sum", "score_sum")
"""Selection rules: ``cos_sum`` = cos(θ1 + θ2) (paper, eq. 7); ``score_sum`` = s1 + s2 (authors' released code)."""

TAU_BOUND = 100.0
"""|τ| of DTR at most (nats per token; u ≥ 0, so any τ ≤ 0 always retrieves), or τ = .inf: never retrieve."""

COUNT_BOUNDS = {"pseudo_max_tokens": NEW_TOKENS, "n_per_path": POOL, "k": PASSAGES, "dense_pool": POOL}
"""The largest value of each integer setting (all from 1)."""

RETRIEVERS: tuple[str, ...] = ("dense", "run")
"""What the two paths search: ``dense`` = a dense index over the corpus (paper); ``run`` = the run's retriever."""

PSEUDO_CONTEXT_PROMPT = (
    "Question: {question}\n\n"
    "Write one short factual paragraph, in the style of an encyclopedia entry, that answers this question. "
    "State the answer and the key facts around it."
)
"""The pseudo-context request (one user turn through the model's chat template; our own wording, spec §10.7)."""


@dataclass(frozen=True)
class DTRSettings:
    """Every knob of DTR, with the spec's recommended defaults.

    * ``tau`` = 0.001 — threshold on the normalised NLL u (nats per token): retrieve iff ``u ≥ tau``. Paper Table 2
      default and the code's ``--uncertainty_threshold`` (spec §4); the ``≥`` boundary is the code's (§10.4).
      Any ``tau ≤ 0`` always retrieves (u ≥ 0); ``tau = inf`` never retrieves, not even for an empty answer (so
      DTR(τ = ∞) equals No Retrieval, spec §12). Otherwise |τ| ≤ :data:`TAU_BOUND`.
    * ``include_eos`` = False — u averages the answer tokens WITHOUT the EOS token (code; spec §10.3). The other
      variant is logged in the trace either way.
    * ``pseudo_max_tokens`` = 256 — cap on the pseudo-context. The code uses 1024; spec §10.8 recommends 256 for
      small-scale runs (the encoder sees at most 512 tokens anyway). A recorded deviation from the code.
    * ``n_per_path`` = 5 — passages retrieved per path (paper §5.1, code ``--topn``).
    * ``k`` = 3 — passages kept for the answer (paper main results, code ``--topk``; 5 in App. F.1). Must be
      ``≤ 2 * n_per_path``.
    * ``rule`` = ``"cos_sum"`` — the paper's eq. 7 (spec §10.1 default); ``"score_sum"`` is the released code's
      s1 + s2.
    * ``answer_max_tokens`` = None — token budget of the closed-book and the final answers (None: the tools'
      ``max_new_tokens``). The code uses 1024 with short answers; our answers stop at a newline.
    * ``embed_titles`` = False — candidates are embedded by their text only, as in the code (spec §10.9); True
      embeds ``"title: text"``.
    * ``retriever`` = ``"dense"`` — what both paths search: ``"dense"`` is the paper's dense index over the corpus
      with ``tools.embedder`` (§3.4, §6.2), ``"run"`` the run's own retriever (``tools.retriever``, BM25 unless the
      recipe's ``retrieval.backend`` says otherwise).
    * ``dense_index`` = ``"full"`` — the dense index: ``"full"`` is exact inner-product search over every passage
      (the paper's FAISS flat index; built once, cached on disk by corpus and embedder — embedding a 10,000-passage
      corpus takes minutes on a CPU the first time); ``"pooled"`` ranks the top ``dense_pool`` BM25 passages of each
      query by embedding similarity (a cheaper substitute whose recall is bounded by BM25's recall@pool).
    * ``dense_pool`` = 50 — the pool of ``dense_index = "pooled"``.
    """

    tau: float = doc(
        "threshold on the closed-book answer's normalised NLL (nats per token): retrieve iff u >= tau"
        " (<= 0: always, .inf: never)",
        0.001,
    )
    include_eos: bool = doc("average the NLL over the EOS token too (the code leaves it out)", False)
    pseudo_max_tokens: int = doc("token cap of the pseudo-context (the closed-book answer used as a second query)", 256)
    n_per_path: int = doc("passages retrieved per path (query path and pseudo-context path)", 5)
    k: int = doc("passages kept for the answer (at most 2 * n_per_path)", 3)
    rule: str = doc(
        "candidate score: cos_sum (the paper's eq. 7) or score_sum (the released code's s1 + s2)", "cos_sum"
    )
    answer_max_tokens: int | None = doc(
        "token budget of the closed-book and final answers (null: evaluate.max_new_tokens)", None
    )
    embed_titles: bool = doc("embed candidates as 'title: text' (false: text only, as the code)", False)
    retriever: str = doc(
        "what both paths search: dense (the paper's dense index over the corpus) or run (the run's retriever)", "dense"
    )
    dense_index: str = doc(
        "dense index: full (exact search over every passage, cached on disk) or pooled (top dense_pool BM25"
        " passages re-ranked by embedding)",
        "full",
    )
    dense_pool: int = doc("BM25 pool size of dense_index: pooled", 50)

    def validate(self) -> DTRSettings:
        """Raise :class:`ConfigError` on a bad value; return ``self`` for chaining."""

        def bad(name: str, what: str) -> ConfigError:
            return ConfigError(f"{what}, got {getattr(self, name)!r}", f"dtr.{name}")

        if self.tau != math.inf:  # .inf: never retrieve (a recipe's YAML; JSON has no infinity)
            check_number(self.tau, "tau", "dtr.tau", -TAU_BOUND, TAU_BOUND)
        for name in ("include_eos", "embed_titles"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, f"{name} must be true or false")
        check_counts(self, COUNT_BOUNDS, "dtr")
        if self.k > 2 * self.n_per_path:
            raise bad("k", f"k must be <= 2 * n_per_path = {2 * self.n_per_path} (the size of the candidate pool)")
        if self.rule not in RULES:
            raise bad("rule", f"rule must be one of {', '.join(RULES)}")
        if self.retriever not in RETRIEVERS:
            raise bad("retriever", f"retriever must be one of {', '.join(RETRIEVERS)}")
        if self.dense_index not in ("full", "pooled"):
            raise bad("dense_index", "dense_index must be full or pooled")
        check_int(self.answer_max_tokens, "answer_max_tokens", "dtr.answer_max_tokens", NEW_TOKENS, optional=True)
        return self

    def engine_channels(self) -> frozenset[str]:
        """The channels of the user's engine both paths search when ``retrieval.backend`` is external: the dense
        one for ``dense_index = "full"``, the lexical one for ``"pooled"`` (its pool, re-ranked by the embedder
        here), none of their own for ``retriever = "run"`` (the run's retriever, whatever channel it searches)."""
        if self.retriever == "run":
            return frozenset()
        return frozenset({"dense" if self.dense_index == "full" else "lexical"})

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)
