"""The generator's value types: :class:`Generation` (one generated continuation), :class:`Scored` (a teacher-forced
score), :class:`PromptLogprobs` (a prompt's own teacher-forced log-probs) and :class:`DecodingParams` (the parameters
of one decoding call).

Plain Python / numpy dataclasses with no model code, so the generation cache (:mod:`workbench.backends.gencache`)
and the decoding strategies read them without importing the generator; :mod:`workbench.backends.generator`
re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

FINISH_REASONS = ("stop", "eos", "length")


def eos_token_ids(*values: Any) -> frozenset[int]:
    """Every token id that ends a sequence, from any number of EOS declarations — the tokenizer's
    ``eos_token_id``, a generation config's ``eos_token_id`` (an id or a list of ids: a Llama-3-style model ends a
    turn with ``<|eot_id|>`` beside ``<|end_of_text|>``), a server's stated ids; None and non-integers are skipped.
    The in-process and the served generator both stop at this union."""
    ids: set[int] = set()
    for value in values:
        for item in value if isinstance(value, list | tuple | set | frozenset) else [value]:
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                ids.add(int(item))
    return frozenset(ids)


@dataclass
class Generation:
    """One generated continuation of one prompt (plain Python / numpy, no HF objects).

    ``text`` is the decoded continuation (special tokens skipped), cut before the first stop string.
    ``token_ids`` are the answer tokens: the shortest prefix of the generated tokens whose decoding covers ``text``
    (so neither EOS nor a token that holds only the stop string is included). ``logprobs`` (raw T=1 distribution),
    ``logprobs_processed`` (the distribution actually sampled from; 0 for greedy) and ``entropies`` (nats, full raw
    distribution) are float32 arrays aligned with ``token_ids``. ``finish_reason`` is ``"stop"``, ``"eos"`` or
    ``"length"``.

    Decoding step ``s`` is the forward position whose output predicts generated token ``s`` (step 0 is the last
    prompt token). With ``return_hidden_layer=L`` (an index into HF ``hidden_states``, 0 = embeddings, negative
    allowed): ``hidden_mean`` is the mean of layer L over the steps that predicted the answer tokens (step 0 alone
    for an empty answer); ``hidden_last`` is layer L at the step whose input is the last answer token (the "last
    decoding step kept", computed when a terminator followed), else at the last step computed. With
    ``return_attentions``: ``attentions`` is a float32 array ``(n_layers, n_heads, len(token_ids))`` holding, for
    each answer token, the attention weight its predicting step puts on its own position (the diagonal A_jj used
    by attention-score features). When the answer ended with EOS, ``eos_logprob`` / ``eos_entropy`` hold the raw
    log-prob of that EOS token and the entropy of its step (None otherwise), so no scoring pass is needed for them;
    ``eos_token_id`` is which EOS id it was (None in generations cached before the field existed).

    With ``top_logprobs=k`` (:meth:`Generator.generate`): ``top_ids`` (int64) and ``top_logprobs`` (float32), both
    ``(len(token_ids), k)``, hold per answer token the ids and raw (T=1) log-probs of the k most likely tokens at its
    step, most likely first (k is capped at the vocabulary size); ``eos_top_ids`` / ``eos_top_logprobs`` (``(k,)``)
    the same for the EOS step when the answer ended with EOS. All None without ``top_logprobs``.

    With ``return_answer_attention`` (:meth:`Generator.generate`): ``attention_logdiag`` is a float32 array
    ``(n_heads, len(token_ids))``, log A^h_pp of the LAST layer at each answer token's own position p (the weight the
    query at p puts on its own key; LLM-Check's attention score, the ``attention_logdiag`` stat), read while decoding
    (:mod:`workbench.backends.attention_diag`); None when the loop could not read every answer token's (a stop string
    inside the last token, a model it cannot wrap) or the generation came from a cache that lacked it.

    ``decode_steps`` is what this sample cost the decoding loop that made it: the decoding steps it ran (its answer
    tokens plus a terminating EOS or stop-string token) — what ``CostCounter.decoded_tokens`` counted for it — so a
    method can charge each question its own share of a batched call. It is never stored in the generation cache: a
    generation served by the cache (or by a server) has None.
    """

    prompt: str
    text: str
    token_ids: np.ndarray
    logprobs: np.ndarray
    logprobs_processed: np.ndarray
    entropies: np.ndarray
    finish_reason: str
    sample_index: int = 0
    prompt_tokens: int = 0
    hidden_last: np.ndarray | None = None
    hidden_mean: np.ndarray | None = None
    attentions: np.ndarray | None = None
    eos_logprob: float | None = None
    eos_entropy: float | None = None
    eos_token_id: int | None = None
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None
    eos_top_ids: np.ndarray | None = None
    eos_top_logprobs: np.ndarray | None = None
    decode_steps: int | None = field(default=None, compare=False)
    attention_logdiag: np.ndarray | None = field(default=None, compare=False)

    @property
    def sum_logprob(self) -> float:
        """Sum of the raw token log-probs (0 for an empty answer)."""
        return float(self.logprobs.sum())

    @property
    def mean_logprob(self) -> float:
        """Mean raw token log-prob (NaN for an empty answer)."""
        return float(self.logprobs.mean()) if len(self.logprobs) else float("nan")


@dataclass
class Scored:
    """Teacher-forced log-likelihood of ``continuation`` after ``prompt``.

    ``token_ids`` are the continuation tokens (plus EOS when asked), ``logprobs`` their raw log-probs and
    ``entropies`` the full-vocabulary entropies at those positions (float32). ``mean_logprob`` is NaN when the
    continuation has no tokens.
    """

    prompt: str
    continuation: str
    token_ids: np.ndarray
    logprobs: np.ndarray
    entropies: np.ndarray
    sum_logprob: float
    mean_logprob: float


@dataclass
class PromptLogprobs:
    """Teacher-forced log-probs of a token sequence's own tokens (:meth:`Generator.prompt_logprobs`).

    ``token_ids`` (int64, length L) is the sequence; ``logprobs`` and ``entropies`` (float32, length L - 1) are the
    raw (T=1) log-prob of token ``t`` given tokens ``0..t-1`` and the entropy of that distribution, for
    ``t = 1 .. L-1`` (nothing predicts token 0); ``top_ids`` (int64) / ``top_logprobs`` (float32), ``(L - 1, k)``,
    the k most likely tokens at those positions, most likely first (``k = 0``: empty columns).
    """

    token_ids: np.ndarray
    logprobs: np.ndarray
    entropies: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray


@dataclass(frozen=True)
class DecodingParams:
    """The decoding parameters of one :meth:`Generator.generate` call, normalised for cache keys.

    Greedy decoding (``temperature == 0``) ignores ``top_p``, ``top_k`` and ``seed``, so they are normalised away.
    ``top_logprobs`` (k > 0) records the k most likely tokens per step; it changes nothing else, and
    :meth:`key_fields` leaves it out when 0 so cache keys made before it existed stay valid. ``answer_attention``
    records the last layer's attention diagonal at the answer tokens (``Generation.attention_logdiag``); it changes
    nothing the cache stores under a key, so :meth:`key_fields` always leaves it out.
    """

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    seed: int | None = 0
    hidden_layer: int | None = None
    attentions: bool = False
    top_logprobs: int = 0
    answer_attention: bool = False

    @property
    def greedy(self) -> bool:
        """Whether this is greedy decoding."""
        return self.temperature == 0.0

    def normalised(self) -> DecodingParams:
        """A copy with the parameters that greedy decoding ignores reset."""
        if self.greedy:
            return replace(self, top_p=1.0, top_k=0, seed=None)
        return self

    def key_fields(self) -> dict[str, object]:
        """The parameters as a JSON-ready dict for cache keys (``stop`` a list; ``top_logprobs`` only when > 0)."""
        fields = {**self.__dict__, "stop": list(self.stop)}
        del fields["answer_attention"]
        if not self.top_logprobs:
            del fields["top_logprobs"]
        return fields

    def validate(self) -> None:
        """Raise ``ValueError`` on out-of-range parameters."""
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if self.top_logprobs < 0:
            raise ValueError(f"top_logprobs must be >= 0, got {self.top_logprobs}")
