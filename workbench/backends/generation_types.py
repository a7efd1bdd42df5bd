"""The generator's value types: :class:`Generation` (one generated continuation), :class:`Scored` (a teacher-forced
score) and :class:`DecodingParams` (the parameters of one decoding call).

Plain Python / numpy dataclasses with no model code, so the generation cache (:mod:`workbench.backends.gencache`)
and the decoding strategies read them without importing the generator; :mod:`workbench.backends.generator`
re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

FINISH_REASONS = ("stop", "eos", "length")


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
    log-prob of that EOS token and the entropy of its step (None otherwise), so no scoring pass is needed for them.
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


@dataclass(frozen=True)
class DecodingParams:
    """The decoding parameters of one :meth:`Generator.generate` call, normalised for cache keys.

    Greedy decoding (``temperature == 0``) ignores ``top_p``, ``top_k`` and ``seed``, so they are normalised away.
    """

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    seed: int | None = 0
    hidden_layer: int | None = None
    attentions: bool = False

    @property
    def greedy(self) -> bool:
        """Whether this is greedy decoding."""
        return self.temperature == 0.0

    def normalised(self) -> DecodingParams:
        """A copy with the parameters that greedy decoding ignores reset."""
        if self.greedy:
            return replace(self, top_p=1.0, top_k=0, seed=None)
        return self

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
