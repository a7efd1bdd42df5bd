"""The generator backend: any HF causal LM behind ``generate`` and ``score``, returning plain numpy dataclasses.

Decoding is a hand-written loop over ``model(input_ids, attention_mask, position_ids, cache)``:

* prompts are batched with **left padding** (positions count from each row's first real token);
* ``temperature == 0`` is greedy (arg-max of the raw logits); otherwise temperature, then top-k, then top-p, then one
  draw per step from a **per-sample** ``torch.Generator`` seeded from ``(seed, prompt, sample_index)`` — so a sample
  depends on its prompt, parameters and seed only, never on the batch it ran in, and the first n samples of an
  ``n=10`` request are exactly the samples of an ``n=5`` request;
* the ``n`` samples of a prompt **share one prefill**: the prompt batch is encoded once, then the KV cache and the
  last logits are repeated per sample along the batch dimension (``share_prefill=False`` re-encodes each sample,
  for comparison);
* prompts of one batch that **share a token prefix** (the chat template's system prompt, an instruction header)
  encode it once: :meth:`Generator.prefill` runs the prefix at batch 1 and forwards only each row's suffix over a
  copy of its KV cache (:mod:`workbench.backends.prefix_reuse`; ``Generator.prefix_reuse`` switches it off, and so
  does ``share_prefill=False``); rows that begin with tokens another decoding state holds continue it
  (:meth:`Generator.prefill_continuing`);
* sequences stop at EOS, at the first stop string (the text is cut before it) or after ``max_new_tokens``; finished
  rows are dropped from the batch (and the KV cache) at once.

Per generated token it records the token id, its log-prob under the raw (T=1) distribution, its log-prob under the
processed (temperature/top-k/top-p) distribution — 0 for greedy, a point mass — and the entropy of the full raw
distribution. Optional: the ids and raw log-probs of the k most likely tokens per step (``top_logprobs=k``), one
layer's hidden states and the attention diagonal (see :class:`Generation`).

A prompt is rendered text or a list of **token ids**. Ids are decoded to the text they stand for
(:meth:`Generator.decode_prompt`); when that text encodes back to the same ids the prompt *is* that text — same
sampling seeds, same cache keys, the same generations as the text prompt — else it keeps its ids (and its cache key
holds them). :meth:`Generator.prompt_logprobs` reads a token sequence's own teacher-forced log-probs (``echo``).

Costs go to a :class:`~workbench.backends.cost.CostCounter`: ``lm_calls`` +1 per prompt run through the model (its
``n`` samples count once; one per scored pair of :meth:`Generator.score`), ``lm_batches`` +1 per forward batch (one
prefill and its decoding loop, or one teacher-forced pass); ``prefill_tokens``
prompt tokens encoded (once per prompt with a shared prefill; padding excluded); ``decoded_tokens`` tokens generated;
``scored_tokens`` continuation tokens scored (:meth:`Generator.prompt_logprobs`: every token but the first; its
sequences' tokens all count as ``prefill_tokens``); ``truncated_prompts``; ``cache_hits``/``cache_misses`` one per
requested sample (a :class:`Generation`). What the generation cache saved goes to ``cached_lm_calls`` (+1 per prompt
whose samples all came from the cache), ``cached_prefill_tokens`` (that prompt's tokens after truncation) and
``cached_decoded_tokens`` (each cached sample's answer tokens).

The package is split by job: :mod:`~workbench.backends.generator.loading` (resolving and loading the model),
:mod:`~workbench.backends.generator.jobs` (prompts to jobs: token-id prompts, truncation, cache keys),
:mod:`~workbench.backends.generator.prefill` (the engine's forwards: prefill with prefix reuse, one decoding step),
:mod:`~workbench.backends.generator.decode_loop` (batching and the decoding loop),
:mod:`~workbench.backends.generator.next_token` (greedy or seeded sampling of each row's next token),
:mod:`~workbench.backends.generator.recording` (ending rows, building :class:`Generation` records),
:mod:`~workbench.backends.generator.scoring` (teacher-forced reads) and :mod:`~workbench.backends.generator.model`
(the :class:`Generator` assembled from them). The sampling math is in :mod:`workbench.backends.sampling`, the
decoding state's model-free helpers (batch layout, row selection, joining states, :class:`DecodingRow`) in
:mod:`workbench.backends.decoding_state`; their public names are importable from here as well.
"""

from __future__ import annotations

from workbench.backends.decoding_state import DecodingRow, join_states, joinable, left_padded_batch, select_rows
from workbench.backends.generation_types import FINISH_REASONS, DecodingParams, Generation, PromptLogprobs, Scored
from workbench.backends.generator.jobs import Prompt
from workbench.backends.generator.model import BATCH_ROWS, Generator
from workbench.backends.generator.prefill import CPU_PREFILL_TOKENS
from workbench.backends.generator.scoring import SCORE_POSITIONS
from workbench.backends.sampling import process_logits, sample_from_logprobs, sample_seed

__all__ = [
    "BATCH_ROWS",
    "CPU_PREFILL_TOKENS",
    "FINISH_REASONS",
    "SCORE_POSITIONS",
    "DecodingParams",
    "DecodingRow",
    "Generation",
    "Generator",
    "Prompt",
    "PromptLogprobs",
    "Scored",
    "join_states",
    "joinable",
    "left_padded_batch",
    "process_logits",
    "sample_from_logprobs",
    "sample_seed",
    "select_rows",
]
