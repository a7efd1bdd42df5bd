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

This module holds the model and its calls (generate with its cache lookup and batching, the step API, scoring). The
sampling math is in :mod:`workbench.backends.sampling`, the decoding state's model-free helpers (batch layout, row
selection, joining states, :class:`DecodingRow`) in :mod:`workbench.backends.decoding_state`; their public names are
importable from here as well.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.decoding_state import DecodingRow as DecodingRow
from workbench.backends.decoding_state import cache_argument, forward_outputs, record_extras, returned_cache
from workbench.backends.decoding_state import join_states as join_states
from workbench.backends.decoding_state import joinable as joinable
from workbench.backends.decoding_state import left_padded_batch as left_padded_batch
from workbench.backends.decoding_state import select_rows as select_rows
from workbench.backends.generation_lookup import CachedGenerations, decoding_params
from workbench.backends.generation_types import FINISH_REASONS as FINISH_REASONS
from workbench.backends.generation_types import DecodingParams as DecodingParams
from workbench.backends.generation_types import Generation as Generation
from workbench.backends.generation_types import PromptLogprobs as PromptLogprobs
from workbench.backends.generation_types import Scored as Scored
from workbench.backends.prefix_reuse import (
    PREFIX_MIN_TOKENS,
    REUSE_ATTENTION,
    PrefixGroup,
    continued_layout,
    expand_cache,
    plan_prefix_groups,
)
from workbench.backends.prompts import BuiltPrompt, Messages, PromptRenderer, check_prompt_format, encode
from workbench.backends.sampling import process_logits as process_logits
from workbench.backends.sampling import sample_from_logprobs as sample_from_logprobs
from workbench.backends.sampling import sample_seed as sample_seed
from workbench.core.errors import AssetError
from workbench.core.hashing import stable_hash
from workbench.core.interrupt import check_interrupt

if TYPE_CHECKING:
    from workbench.assets import ResolvedModel
    from workbench.backends.gencache import GenerationCache

log = logging.getLogger(__name__)


Prompt = str | Sequence[int]
"""A prompt for :meth:`Generator.generate`: rendered text, or its token ids."""

SCORE_POSITIONS = 2048
""":meth:`Generator.prompt_logprobs` puts sequences in one forward while rows × the widest stays within this many
positions (the full-vocabulary logits of every position are held: 2048 × 49k float32 is about 400 MB)."""

BATCH_ROWS = 64
"""Default ``Generator.batch_rows``: a decoding batch grows past ``batch_size`` prompts while its rows (prompts ×
missing samples) stay within this many, so short greedy calls fill a batch as a sampling call does."""


@dataclass(frozen=True)
class _IdsPrompt:
    """The key of a token-id prompt whose decoded ``text`` does not encode back to its ``ids``."""

    text: str
    ids: tuple[int, ...]


@dataclass
class _Job:
    """One prompt to run, with the sample indices still missing for it; ``key`` identifies it among the prompts of
    one call (its text, or an :class:`_IdsPrompt`)."""

    prompt: str
    ids: list[int]
    samples: list[int]
    key: Hashable = None

    def __post_init__(self) -> None:
        if self.key is None:
            self.key = self.prompt


class Generator(CachedGenerations):
    """A causal LM loaded from a local path (or an embedded name), with batched, seeded, cached generation.

    ``model`` is a :class:`~workbench.assets.ResolvedModel`, a local directory, or a reference that
    :func:`workbench.backends.lora.resolve_model` accepts (default: the embedded ``"smollm2"``); an unknown path raises
    :class:`AssetError`. ``dtype`` is a torch dtype name; ``max_context`` defaults to the model's
    ``max_position_embeddings``; ``cache`` (optional) stores every generation; ``counter`` receives the costs
    (a fresh one if omitted); ``seed`` is the default sampling seed; ``batch_size`` is the number of prompts per
    model batch (each expanded to its ``n`` samples), and more while the batch's decoding rows stay within
    ``batch_rows`` (default :data:`BATCH_ROWS`; see :meth:`_batches`). ``prompt_format`` (``auto`` | ``chat`` |
    ``completion``) sets how every prompt is rendered (:func:`~workbench.backends.prompts.prompt_style`): ``auto``
    follows the model directory's declared format (:func:`~workbench.assets.declared_prompt_format`; the embedded
    base model ``gemma3`` declares ``completion``), else its chat template, else the plain format. The rendered text
    is the generation cache's key, so a different format never reuses another format's generations.

    ``prefix_reuse`` (default on; the attribute of the same name switches it later) lets rows of one forward that
    share a token prefix of at least ``prefix_min_tokens`` tokens (:data:`PREFIX_MIN_TOKENS`) encode it once
    (:mod:`workbench.backends.prefix_reuse`; see :meth:`prefill`). It changes no output beyond float rounding: not
    the generations, not their cache keys (the switch is no decoding parameter), not the counted ``prefill_tokens``;
    what it saved is counted in ``counter.prefix_reused_tokens``.
    """

    records_answer_attention = True
    """:meth:`generate` takes ``return_answer_attention`` (a served generator does not: it has no attention)."""

    def __init__(
        self,
        model: str | Path | ResolvedModel = "smollm2",
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_context: int | None = None,
        cache: GenerationCache | None = None,
        counter: CostCounter | None = None,
        seed: int = 0,
        batch_size: int = 8,
        prompt_format: str = "auto",
        prefix_reuse: bool = True,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        from workbench.assets import declared_prompt_format

        check_prompt_format(prompt_format)  # before the (slow) load
        resolved = _resolve(model)
        self.resolved = resolved
        self.device = device
        self.dtype = dtype
        self.cache = cache
        self.counter = counter if counter is not None else CostCounter()
        self.seed = seed
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        self.batch_rows = batch_rows
        self.model, self.tokenizer = _load(resolved.path, device, dtype)
        config_limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_context = int(max_context or config_limit or 2048)
        self.fingerprint = stable_hash(["generator", resolved.fingerprint, dtype])
        self.prompts = PromptRenderer(
            self.tokenizer, resolved.ref, prompt_format, declared_prompt_format(resolved.path)
        )
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        self._cache_arg = cache_argument(self.model)
        self.joinable_cache: bool | None = None  # learned by the first split prefill (decoding.contrastive)
        self._warned_truncation = False
        self.prefix_reuse = prefix_reuse
        self.prefix_min_tokens = PREFIX_MIN_TOKENS

    # ------------------------------------------------------------------ prompts
    def render_chat(self, messages: Messages, system: str | None = None) -> str:
        """Render a user message (or chat messages) with the chat template; plain fallback warns once."""
        return self.prompts.chat(messages, system)

    def build_prompt(
        self,
        question: str,
        context: str | None = None,
        template: str | None = None,
        *,
        max_new_tokens: int,
        system: str | None = None,
        chat: bool = True,
        truncate_side: str = "left",
    ) -> BuiltPrompt:
        """A rendered prompt that fits ``max_context - max_new_tokens`` tokens by cutting only the context.

        See :func:`workbench.backends.prompts.build_prompt`; truncations are counted in
        ``counter.truncated_prompts``.
        """
        return self.prompts.build(
            question,
            context,
            template,
            system=system,
            max_tokens=self.max_context - max_new_tokens,
            chat=chat,
            truncate_side=truncate_side,
            counter=self.counter,
        )

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        n: int = 1,
        stop: Sequence[str] | None = ("\n",),
        seed: int | None = None,
        return_hidden_layer: int | None = None,
        return_attentions: bool = False,
        share_prefill: bool = True,
        top_logprobs: int = 0,
        return_answer_attention: bool = False,
    ) -> list[Generation]:
        """Generate ``n`` continuations for each rendered prompt; returns a flat, prompt-major list.

        ``result[i * n + j]`` is sample ``j`` of ``prompts[i]`` (``len(result) == len(prompts) * n``; use
        :meth:`sample` for a list of per-prompt lists). Greedy when ``temperature == 0`` (then the ``n`` samples
        are identical copies). ``stop`` strings cut the text and end the sequence; ``None`` or ``()`` disables
        them. ``seed`` defaults to the generator's seed. Prompts longer than ``max_context - max_new_tokens`` tokens
        lose their leftmost tokens (counted in ``counter.truncated_prompts``; use :meth:`build_prompt` to cut only
        the context). With a cache, every (prompt, sample) is looked up first and only misses are generated.

        A prompt may be a list of token ids (see the module docstring: ids that encode a text give that text's
        generations; ``ValueError`` for an empty list or an id outside the vocabulary); ``Generation.prompt`` is then
        the decoded text. ``top_logprobs=k`` records the k most likely tokens of every step (``Generation.top_ids`` /
        ``top_logprobs``; changes nothing else). ``return_answer_attention`` records the last layer's log attention
        diagonal at each answer token (``Generation.attention_logdiag``, read while decoding; one extra forward of
        the rows that end at ``max_new_tokens``, whose last token is otherwise never fed; changes no token).
        """
        params = decoding_params(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop=stop,
            seed=self.seed if seed is None else seed,
            n=n,
            hidden_layer=return_hidden_layer,
            attentions=return_attentions,
            top_logprobs=top_logprobs,
            answer_attention=return_answer_attention,
        )
        keys = [self._prompt_key(p) for p in prompts]
        if not keys:
            return []
        needed = 1 if params.greedy else n
        found = self._lookup(keys, needed, params)
        jobs = self._missing_jobs(keys, needed, params, found)
        if jobs:
            fresh = self._generate_jobs(jobs, params, share_prefill)
            found.update(fresh)
            self._store(fresh, params)
        return self._assemble(keys, n, found, params.greedy)

    def sample(self, prompts: Sequence[Prompt], n: int, **kwargs: Any) -> list[list[Generation]]:
        """:meth:`generate` grouped per prompt: ``result[i]`` holds the ``n`` samples of ``prompts[i]``."""
        flat = self.generate(prompts, n=n, **kwargs)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    # ------------------------------------------------------------------ token-id prompts
    def decode_prompt(self, ids: Sequence[int]) -> tuple[str, bool]:
        """The text that token ids stand for, and whether it encodes back to exactly those ids (as :meth:`generate`
        encodes a text prompt). A leading BOS the tokenizer adds by itself is left out of the text when that makes
        it encode back. ``ValueError`` for no ids or an id outside the model's vocabulary."""
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("a token-id prompt needs at least one token id")
        vocab = self.vocab_size
        bad = next((i for i in ids if not 0 <= i < vocab), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})")
        candidates = []
        bos = self.tokenizer.bos_token_id
        if bos is not None and ids[0] == bos and len(ids) > 1:
            candidates.append(ids[1:])
        candidates.append(ids)
        texts = [
            self.tokenizer.decode(c, skip_special_tokens=False, clean_up_tokenization_spaces=False) for c in candidates
        ]
        for text in texts:
            if text and encode(self.tokenizer, text) == ids:
                return text, True
        return texts[-1], False

    @property
    def vocab_size(self) -> int:
        """The number of token ids the model takes (its embedding rows; may exceed the tokenizer's)."""
        return int(self.model.get_input_embeddings().num_embeddings)

    def _prompt_key(self, prompt: Prompt) -> Hashable:
        """A text prompt's key is itself; a token-id prompt's is the text it encodes (see :meth:`decode_prompt`), else
        an :class:`_IdsPrompt`."""
        if isinstance(prompt, str):
            return prompt
        text, same = self.decode_prompt(prompt)
        return text if same else _IdsPrompt(text, tuple(int(i) for i in prompt))

    @staticmethod
    def _key_text(key: Hashable) -> str:
        return key.text if isinstance(key, _IdsPrompt) else str(key)

    def _key_extra(self, prompt: Hashable) -> dict[str, Any]:
        """A token-id prompt that is not its text's encoding adds its ids to the cache key."""
        return {"prompt_ids": list(prompt.ids)} if isinstance(prompt, _IdsPrompt) else {}

    def _cached_prompt_tokens(self, prompt: Hashable, first: Generation, params: DecodingParams) -> int:
        """The prompt's tokens after truncation (recorded on the generation; counted again for older cache blobs)."""
        if first.prompt_tokens:
            return int(first.prompt_tokens)
        full = len(prompt.ids) if isinstance(prompt, _IdsPrompt) else len(encode(self.tokenizer, prompt))
        return min(full, max(self.max_context - params.max_new_tokens, 1))

    def _missing_jobs(
        self,
        prompts: list[Hashable],
        needed: int,
        params: DecodingParams,
        found: dict[tuple[Hashable, int], Generation],
    ) -> list[_Job]:
        """One job per distinct prompt with missing samples, prompt ids truncated to the context budget."""
        budget = self.max_context - params.max_new_tokens
        if budget < 1:
            raise ValueError(f"max_new_tokens={params.max_new_tokens} leaves no room in max_context={self.max_context}")
        jobs = []
        for key in dict.fromkeys(prompts):
            missing = [j for j in range(needed) if (key, j) not in found]
            if not missing:
                continue
            if isinstance(key, _IdsPrompt):
                jobs.append(_Job(key.text, self._fit(list(key.ids), budget), missing, key))
            else:
                jobs.append(_Job(key, self.encode_prompt(key, budget), missing))
        return jobs

    # ------------------------------------------------------------------ the step API (decode loops use it)
    # A decoding *state* is a dict: "cache" (the KV cache), "mask" (attention mask [rows, width]), "next_pos" (the
    # position of each row's next token [rows, 1]) and "logits" (the last position's logits [rows, V]), plus "hidden"
    # / "attn" when the params ask for them. This loop and workbench.decoding.contrastive both drive one with
    # prefill → (choose tokens, finish_row, select_rows) → step, and turn finished rows into answers with answer().
    # What works on a state without the model (select_rows, join_states, the batch layout) is in decoding_state.py.
    def encode_prompt(self, prompt: str, budget: int) -> list[int]:
        """Prompt token ids, left-truncated to ``budget`` tokens (counted in ``truncated_prompts``, warned once);
        ``ValueError`` for a prompt that encodes to no tokens."""
        ids = encode(self.tokenizer, prompt)
        if not ids:
            raise ValueError(f"prompt {prompt!r} encodes to no tokens")
        return self._fit(ids, budget)

    def _fit(self, ids: list[int], budget: int) -> list[int]:
        """``ids`` left-truncated to ``budget`` tokens (counted and warned once, see :meth:`encode_prompt`)."""
        if len(ids) <= budget:
            return ids
        self.counter.truncated_prompts += 1
        if not self._warned_truncation:
            self._warned_truncation = True
            log.warning(
                "prompt of %d tokens cut from the left to %d; use build_prompt to cut the context only",
                len(ids),
                budget,
            )
        return ids[-budget:]

    _encode_prompt = encode_prompt  # the former private name, kept for callers that still use it

    def _generate_jobs(
        self, jobs: list[_Job], params: DecodingParams, share_prefill: bool
    ) -> dict[tuple[Hashable, int], Generation]:
        """Run the jobs in batches (:meth:`_batches`, sorted by length to limit padding)."""
        import torch

        order = sorted(range(len(jobs)), key=lambda i: len(jobs[i].ids))
        out: dict[tuple[Hashable, int], Generation] = {}
        restore = self._attention_mode(params.attentions)
        try:
            with torch.inference_mode():
                for batch in self._batches([jobs[i] for i in order], params):
                    with self.counter.timed("generate"):
                        out.update(self._decode_batch(batch, params, share_prefill))
        finally:
            if restore is not None:
                self.model.set_attn_implementation(restore)
        return out

    def _batches(self, jobs: list[_Job], params: DecodingParams) -> list[list[_Job]]:
        """Consecutive batches of ``jobs``: a batch takes the next job while it holds fewer than ``batch_size``
        prompts, or while its decoding rows (each job's missing samples) stay within ``batch_rows`` with it — so 40
        greedy answers go in one batch of 40 rows, as 8 prompts of 5 samples would, instead of five batches of 8 rows
        (on a CPU the larger batch took 0.58x the time: SmolLM2, 2 threads, 16 tokens). Requests for attentions (their
        weights grow with the batch) and models whose cache cannot be joined (their prefill is one forward of the
        whole batch) keep ``batch_size`` prompts."""
        batches: list[list[_Job]] = []
        rows = 0
        grows = not params.attentions and self.joinable_cache is not False  # else a prefill is one forward
        for job in jobs:
            batch = batches[-1] if batches else None
            fits = batch is not None and (
                len(batch) < self.batch_size or (grows and rows + len(job.samples) <= self.batch_rows)
            )
            if fits:
                batch.append(job)
                rows += len(job.samples)
            else:
                batches.append([job])
                rows = len(job.samples)
        return batches

    def _attention_mode(self, need_attentions: bool) -> str | None:
        """Switch to eager attention when attention weights are requested; returns the mode to restore."""
        current = getattr(self.model.config, "_attn_implementation", None)
        if not need_attentions or current == "eager":
            return None
        self.model.set_attn_implementation("eager")
        return current

    def _decode_batch(
        self, jobs: list[_Job], params: DecodingParams, share_prefill: bool
    ) -> dict[tuple[Hashable, int], Generation]:
        """Prefill one batch of prompts, expand to samples, and decode until every row finishes; with
        ``params.answer_attention``, under :func:`~workbench.backends.attention_diag.last_layer_logdiag`."""
        if not params.answer_attention:
            return self._decode_rows(jobs, params, share_prefill, None)
        from workbench.backends.attention_diag import last_layer_logdiag

        # a step feeds one token per row: its last query is all a step's forward records (the prefill's is dropped)
        with last_layer_logdiag(self.model, queries=1) as recorder:
            return self._decode_rows(jobs, params, share_prefill, recorder if recorder.active else None)

    def _decode_rows(
        self, jobs: list[_Job], params: DecodingParams, share_prefill: bool, recorder: Any
    ) -> dict[tuple[Hashable, int], Generation]:
        """:meth:`_decode_batch`'s loop; ``recorder`` (or None) holds the last layer's log diagonal of each forward:
        the prefill's is dropped (prompt positions), each step's goes to the rows whose tokens it fed."""
        import torch

        rows = [
            DecodingRow(job=i, sample=j, generator=None if params.greedy else self._rng(job.prompt, j, params.seed))
            for i, job in enumerate(jobs)
            for j in job.samples
        ]
        row_to_job = torch.tensor([r.job for r in rows], dtype=torch.long)
        if share_prefill:
            state = self.prefill([job.ids for job in jobs], params)
            if len(rows) > len(jobs):  # expand each prompt's cache, logits and extras to its samples
                state = select_rows(state, row_to_job)
        else:  # the comparison path: every sample re-encodes its whole prompt (no prefix reuse either)
            state = self._prefill_rows([jobs[r.job].ids for r in rows], params)
        self.counter.lm_calls += len(jobs)  # prompts, not batches (CostCounter)
        self.counter.lm_batches += 1
        if recorder is not None:
            recorder.take()  # the prompt's positions: not answer tokens
        active = list(range(len(rows)))
        for step in range(params.max_new_tokens):
            record_extras(rows, active, state, params)
            tokens = self._choose_tokens(rows, active, state["logits"], params)
            self.counter.decoded_tokens += len(active)
            keep = [k for k, r in enumerate(active) if not self.finish_row(rows[r], tokens[k], step, params)]
            if not keep:
                if recorder is not None:
                    self._feed_last_tokens(rows, active, state, params, recorder)
                break
            if len(keep) < len(active):
                state = select_rows(state, torch.tensor(keep, dtype=torch.long))
                tokens = [tokens[k] for k in keep]
                active = [active[k] for k in keep]
            state = self.step(state, tokens, params)
            if recorder is not None:
                _record_own_attention(rows, active, recorder)
        return {(jobs[r.job].key, r.sample): self._finalise(r, jobs[r.job], params) for r in rows}

    def _feed_last_tokens(
        self, rows: list[DecodingRow], active: list[int], state: dict[str, Any], params: DecodingParams, recorder: Any
    ) -> None:
        """After the last step, feed the final token of the ``active`` rows whose answer keeps it (they ended at
        ``max_new_tokens``, or a stop string cut inside that token) in one forward, to read its attention diagonal.
        Nothing decodes after it, so ``state`` is free to narrow."""
        import torch

        need = [k for k, r in enumerate(active) if len(self.answer(rows[r])[0]) > len(rows[r].own_attention)]
        if not need:
            return
        if len(need) < len(active):
            state = select_rows(state, torch.tensor(need, dtype=torch.long))
        self.step(state, [rows[active[k]].tokens[-1] for k in need], params)
        _record_own_attention(rows, [active[k] for k in need], recorder)

    def _rng(self, prompt: str, sample: int, seed: int | None) -> Any:
        """The per-sample torch.Generator: seeded from (seed, prompt, sample index) only."""
        import torch

        return torch.Generator().manual_seed(sample_seed(int(seed or 0), prompt, sample))

    def prefill(self, id_lists: list[list[int]], params: DecodingParams) -> dict[str, Any]:
        """Encode token-id lists (positions from each row's first real token); returns the decoding state of all the
        rows, in order (see above). Counts ``prefill_tokens`` (every row's tokens, padding excluded; a reused prefix
        counts in every row, as if encoded there) and ``prefix_reused_tokens`` (the tokens reuse did not forward)
        only: callers count their calls and batches.

        **Prefix reuse** (``prefix_reuse``, on by default): rows sharing a prefix of at least ``prefix_min_tokens``
        tokens (:func:`~workbench.backends.prefix_reuse.plan_prefix_groups`) have it encoded once, at batch 1; its KV
        cache is copied to the rows and only their suffixes are forwarded, positions and mask continuing the prefix
        (the padding between prefix and suffix is masked out); the other rows are encoded as below and the states are
        joined (:func:`join_states`) and put back in order. Every row then holds the keys, values and logits of its
        whole prompt (equal to a whole-row encoding up to float rounding), so decoding is unchanged. Reuse is off
        when attentions are requested (``params.attentions``: the weights of the prompt's own forward), when the
        model's cache cannot be joined (sliding-window or other special layers, ``joinable_cache`` False; learned
        on the first prefix) and under an attention implementation other than
        :data:`~workbench.backends.prefix_reuse.REUSE_ATTENTION` (flash kernels take no hole in a padding mask).

        On a GPU the rows (or a group's suffixes) go through left-padded forwards of ``batch_size`` rows (a batch can
        hold more prompts, up to ``batch_rows``: its prefill stays within the activations of ``batch_size``), joined
        (:func:`join_states`). On a CPU a forward is compute-bound, and a padded batch of long prompts costs more than
        its rows one by one (padding, and attention under a padding mask: 8 prompts of ~550 tokens took 1.3× as long
        padded as split, measured with SmolLM2 on 2 cores), so the rows are cut, in order, into groups whose padded size
        stays within :data:`CPU_PREFILL_TOKENS` (short prompts still share a forward), each group is encoded by a
        forward of its own and the KV caches are joined (:func:`join_states`). Every row's keys, values and next-token
        logits are those of its own forward, so decoding is unchanged. A model whose cache cannot be joined
        (sliding-window layers), or a request for attentions, takes one forward."""
        check_interrupt()  # a server stops here for a client that left (core.interrupt)
        if self.reuses_prefixes(params):
            groups = plan_prefix_groups(id_lists, self.prefix_min_tokens)
            if groups:
                state = self._prefill_reusing(id_lists, params, groups)
                if state is not None:
                    return state
        return self._prefill_rows(id_lists, params)

    def reuses_prefixes(self, params: DecodingParams | None = None) -> bool:
        """Whether a forward with ``params`` (None: a teacher-forced read) may reuse shared prefixes: the
        ``prefix_reuse`` switch is on, no attentions are requested, the cache is not known to be unjoinable and the
        attention implementation takes any padding mask (:data:`~workbench.backends.prefix_reuse.REUSE_ATTENTION`)."""
        if not self.prefix_reuse or self.joinable_cache is False:
            return False
        if params is not None and params.attentions:
            return False
        return getattr(self.model.config, "_attn_implementation", None) in REUSE_ATTENTION

    def _prefill_rows(self, id_lists: list[list[int]], params: DecodingParams) -> dict[str, Any]:
        """:meth:`prefill` without prefix reuse: one forward, or on a CPU consecutive groups joined."""
        groups = self._prefill_groups(id_lists, params)
        if len(groups) == 1:
            return self._prefill_forward(id_lists, params)
        first = self._prefill_forward(groups[0], params)
        if self.joinable_cache is None:
            self.joinable_cache = joinable(first)
        if not self.joinable_cache:  # found out on this first split: encode all the rows together after all
            self.counter.prefill_tokens -= sum(len(ids) for ids in groups[0])
            return self._prefill_forward(id_lists, params)
        return join_states(first, *(self._prefill_forward(group, params) for group in groups[1:]))

    def _prefill_reusing(
        self, id_lists: list[list[int]], params: DecodingParams, groups: list[PrefixGroup]
    ) -> dict[str, Any] | None:
        """:meth:`prefill` with the planned prefix ``groups``; None (nothing counted) when the model's cache turns
        out not to be joinable."""
        states: list[dict[str, Any]] = []
        order: list[int] = []
        for group in groups:
            head = self._encode_prefix(id_lists[group.rows[0]][: group.length])
            if head is None:
                return None
            order.extend(self._continue_group(head, id_lists, group, params, states))
        grouped = {r for group in groups for r in group.rows}
        plain = [r for r in range(len(id_lists)) if r not in grouped]
        if plain:
            states.append(self._prefill_rows([id_lists[r] for r in plain], params))
            order.extend(plain)
        self.counter.prefill_tokens += sum(len(id_lists[r]) for r in grouped)
        self.counter.prefix_reused_tokens += sum(group.saved for group in groups)
        return _rows_in_order(states, order)

    def prefill_continuing(
        self, head: Any, length: int, id_lists: list[list[int]], params: DecodingParams
    ) -> dict[str, Any]:
        """The decoding state of rows whose first ``length`` tokens are encoded already, in order: ``head`` is the KV
        cache of those tokens (one row, positions 0 … ``length`` − 1; e.g. cut from another state's row by
        :func:`~workbench.backends.prefix_reuse.row_prefix_cache`) and every row of ``id_lists`` starts with them
        and has at least one token more. Only the rows' suffixes are forwarded, over copies of ``head``, exactly as
        :meth:`prefill` forwards a prefix group's (on a CPU in chunks whose padded size stays within
        :data:`CPU_PREFILL_TOKENS`, joined); every row then holds the keys, values and logits of its whole prompt.
        Counts ``prefill_tokens`` (every row's tokens, as :meth:`prefill` does) and ``prefix_reused_tokens``
        (``length`` per row). For plain full-attention caches under :meth:`reuses_prefixes` (the caller checks)."""
        short = [len(ids) for ids in id_lists if len(ids) <= length]
        if not id_lists or short or length < 1:
            raise ValueError(f"every row needs more than the {length} prefix tokens (rows of {short} tokens)")
        states: list[dict[str, Any]] = []
        order = self._continue_group(head, id_lists, PrefixGroup(tuple(range(len(id_lists))), length), params, states)
        self.counter.prefill_tokens += sum(len(ids) for ids in id_lists)
        self.counter.prefix_reused_tokens += length * len(id_lists)
        return _rows_in_order(states, order)

    def _continue_group(
        self, head: Any, id_lists: list[list[int]], group: PrefixGroup, params: DecodingParams, states: list
    ) -> list[int]:
        """Forward the suffixes of ``group``'s rows over copies of the prefix cache ``head``, chunk by chunk
        (:meth:`_suffix_chunks`); appends one decoding state per chunk to ``states`` and returns the rows in the
        order their states hold them. Counts nothing."""
        order: list[int] = []
        for chunk in self._suffix_chunks(id_lists, group):
            out, mask, positions = self._continue_prefix(
                head, group.length, [id_lists[r][group.length :] for r in chunk], 1, params
            )
            state = {"cache": returned_cache(out), "mask": mask, "next_pos": positions[:, -1:] + 1}
            state.update(forward_outputs(out, params))
            states.append(state)
            order.extend(chunk)
        return order

    def _encode_prefix(self, prefix: list[int]) -> Any:
        """The KV cache of one prefix (batch 1, positions from 0), or None when it cannot be copied and joined
        (learned once into ``joinable_cache``). Counts nothing (the caller counts the rows' tokens)."""
        import torch

        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            position_ids=torch.arange(len(prefix), device=self.device)[None],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = returned_cache(out)
        if self.joinable_cache is None:
            self.joinable_cache = joinable({"cache": cache, "mask": ids})
        return cache if self.joinable_cache else None

    def _suffix_chunks(self, id_lists: list[list[int]], group: PrefixGroup) -> list[list[int]]:
        """The rows of ``group``, shortest suffix first, in chunks forwarded together: on a GPU ``batch_size`` rows a
        chunk; on a CPU consecutive chunks whose padded suffixes stay within :data:`CPU_PREFILL_TOKENS` (as
        :meth:`prefill`)."""
        rows = sorted(group.rows, key=lambda r: len(id_lists[r]))
        if self._device_type() != "cpu":
            return [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        chunks: list[list[int]] = [[]]
        for r in rows:
            width = len(id_lists[r]) - group.length  # the widest so far: rows are sorted by length
            if chunks[-1] and width * (len(chunks[-1]) + 1) > CPU_PREFILL_TOKENS:
                chunks.append([])
            chunks[-1].append(r)
        return chunks

    def _continue_prefix(
        self, head: Any, length: int, suffixes: list[list[int]], keep: int, params: DecodingParams | None
    ) -> tuple[Any, Any, Any]:
        """One forward of ``suffixes`` over copies of the prefix cache ``head`` (``length`` tokens): the model
        output (logits of the last ``keep`` positions), the attention mask (on the model's device) and the suffixes'
        positions (on the CPU, as :meth:`_prefill_forward` keeps them)."""
        input_ids, mask, positions = continued_layout(suffixes, length, self.tokenizer.pad_token_id)
        mask = mask.to(self.device)
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask,
            position_ids=positions.to(self.device),
            use_cache=True,
            **{self._cache_arg: expand_cache(head, len(suffixes))},
            logits_to_keep=keep,
            output_hidden_states=params is not None and params.hidden_layer is not None,
        )
        return out, mask, positions

    def _prefill_groups(self, id_lists: list[list[int]], params: DecodingParams) -> list[list[list[int]]]:
        """Consecutive groups of rows for :meth:`prefill` (one group: a single forward): on a GPU ``batch_size`` rows a
        group (a batch may hold up to ``batch_rows`` prompts; the prefill's activations stay those of ``batch_size``),
        on a CPU groups within :data:`CPU_PREFILL_TOKENS`."""
        if len(id_lists) == 1 or params.attentions or self.joinable_cache is False:
            return [id_lists]
        if self._device_type() != "cpu":
            return [id_lists[i : i + self.batch_size] for i in range(0, len(id_lists), self.batch_size)]
        groups: list[list[list[int]]] = [[]]
        for ids in id_lists:
            width = max([len(ids), *map(len, groups[-1])])
            if groups[-1] and width * (len(groups[-1]) + 1) > CPU_PREFILL_TOKENS:
                groups.append([])
            groups[-1].append(ids)
        return groups

    def _device_type(self) -> str:
        return next(self.model.parameters()).device.type

    def _prefill_forward(self, id_lists: list[list[int]], params: DecodingParams) -> dict[str, Any]:
        """One left-padded forward over ``id_lists``: their decoding state."""
        input_ids, mask, positions = left_padded_batch(id_lists, self.tokenizer.pad_token_id)
        self.counter.prefill_tokens += int(mask.sum())
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            logits_to_keep=1,
            output_hidden_states=params.hidden_layer is not None,
            output_attentions=params.attentions,
        )
        state = {"cache": returned_cache(out), "mask": mask.to(self.device), "next_pos": positions[:, -1:] + 1}
        state.update(forward_outputs(out, params))
        return state

    def step(self, state: dict[str, Any], tokens: list[int], params: DecodingParams) -> dict[str, Any]:
        """Feed ``tokens`` (one per row of ``state``, in row order) in one forward; returns the advanced state (the
        KV cache object is reused)."""
        import torch

        check_interrupt()  # between decoding steps (core.interrupt)
        mask = torch.cat([state["mask"], state["mask"].new_ones((len(tokens), 1))], dim=1)
        positions = state["next_pos"].to(self.device)
        out = self.model(
            input_ids=torch.tensor(tokens, dtype=torch.long, device=self.device)[:, None],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_arg: state["cache"]},
            output_hidden_states=params.hidden_layer is not None,
            output_attentions=params.attentions,
        )
        new = {"cache": returned_cache(out), "mask": mask, "next_pos": state["next_pos"] + 1}
        new.update(forward_outputs(out, params))
        return new

    def _choose_tokens(
        self, rows: list[DecodingRow], active: list[int], logits: Any, params: DecodingParams
    ) -> list[int]:
        """Pick the next token of every active row and record its log-probs and entropy."""
        import torch

        logits = logits.float()
        raw = torch.log_softmax(logits, dim=-1)
        entropy = -(raw.exp() * raw).nan_to_num().sum(-1)
        if params.greedy:
            chosen = raw.argmax(-1)
            processed = torch.zeros(len(active))
        else:
            proc = process_logits(logits, params.temperature, params.top_k, params.top_p)
            uniforms = torch.stack([torch.rand((), generator=rows[r].generator) for r in active])
            chosen = sample_from_logprobs(proc, uniforms)
            processed = proc.gather(-1, chosen[:, None])[:, 0]
        columns = (
            chosen.tolist(),
            raw.gather(-1, chosen[:, None])[:, 0].tolist(),
            processed.tolist(),
            entropy.tolist(),
        )
        for r, token, raw_lp, proc_lp, ent in zip(active, *columns, strict=True):
            row = rows[r]
            row.tokens.append(token)
            row.raw.append(raw_lp)
            row.processed.append(proc_lp)
            row.entropy.append(ent)
        if params.top_logprobs:
            top = raw.topk(min(params.top_logprobs, raw.shape[-1]), dim=-1)
            top_ids, top_lps = top.indices.cpu().numpy(), top.values.cpu().numpy().astype(np.float32)
            for k, r in enumerate(active):
                rows[r].top_ids.append(top_ids[k])
                rows[r].top_lps.append(top_lps[k])
        return columns[0]

    def finish_row(self, row: DecodingRow, token: int, step: int, params: DecodingParams) -> bool:
        """Whether ``row`` ends after ``token`` (already appended to ``row.tokens``), chosen at decoding step ``step``:
        at an EOS id (``eos_ids``), when the decoded text holds a stop string (``row.text`` = the text before it) or
        at the ``max_new_tokens``-th step; sets ``row.finish`` accordingly."""
        if token in self.eos_ids:
            row.finish = "eos"
            return True
        if params.stop:
            text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
            cuts = [text.find(s) for s in params.stop if s in text]
            if cuts:
                row.finish, row.text = "stop", text[: min(cuts)]
                return True
        if step + 1 >= params.max_new_tokens:
            row.finish = "length"
            return True
        return False

    def answer(self, row: DecodingRow) -> tuple[list[int], str]:
        """The answer of a finished row: its tokens without a final EOS and, when a stop string ended it, only the
        shortest prefix whose decoding covers the text before the stop string; and the answer text."""
        tokens = row.tokens[:-1] if row.finish == "eos" else row.tokens
        if row.finish == "stop":
            return tokens[: self._covering_prefix(tokens, row.text)], row.text
        return tokens, self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _finalise(self, row: DecodingRow, job: _Job, params: DecodingParams) -> Generation:
        """Turn a finished row into a :class:`Generation` (answer tokens, text, optional hidden/attentions)."""
        tokens, text = self.answer(row)
        kept = len(tokens)
        gen = Generation(
            prompt=job.prompt,
            text=text,
            token_ids=np.asarray(tokens[:kept], dtype=np.int64),
            logprobs=np.asarray(row.raw[:kept], dtype=np.float32),
            logprobs_processed=np.asarray(row.processed[:kept], dtype=np.float32),
            entropies=np.asarray(row.entropy[:kept], dtype=np.float32),
            finish_reason=row.finish or "length",
            sample_index=row.sample,
            prompt_tokens=len(job.ids),
            decode_steps=len(row.tokens),
        )
        eos = row.finish == "eos" and len(row.raw) > kept  # EOS ends the answer: no stop cut, the EOS step is `kept`
        if eos:
            gen.eos_logprob = float(row.raw[kept])
            gen.eos_entropy = float(row.entropy[kept])
            gen.eos_token_id = int(row.tokens[kept])
        if params.top_logprobs and row.top_ids:
            width = len(row.top_ids[0])
            gen.top_ids = np.asarray(row.top_ids[:kept], dtype=np.int64).reshape(kept, width)
            gen.top_logprobs = np.asarray(row.top_lps[:kept], dtype=np.float32).reshape(kept, width)
            if eos:
                gen.eos_top_ids = np.asarray(row.top_ids[kept], dtype=np.int64)
                gen.eos_top_logprobs = np.asarray(row.top_lps[kept], dtype=np.float32)
        if params.hidden_layer is not None:
            states = np.stack(row.hidden)
            gen.hidden_mean = states[: max(kept, 1)].mean(axis=0)
            gen.hidden_last = states[min(kept, len(states) - 1)]
        if params.attentions:
            gen.attentions = np.stack(row.attn[:kept], axis=-1) if kept else np.zeros((*row.attn[0].shape, 0))
            gen.attentions = gen.attentions.astype(np.float32)
        own = row.own_attention[:kept]
        if params.answer_attention and len(own) == kept and all(a is not None for a in own):
            heads = int(self.model.config.num_attention_heads)
            diag = np.stack(own, axis=-1) if kept else np.zeros((heads, 0))
            gen.attention_logdiag = diag.astype(np.float32)
        return gen

    def _covering_prefix(self, tokens: list[int], text: str) -> int:
        """Length of the shortest token prefix whose decoding is at least as long as ``text``."""
        for k in range(len(tokens) + 1):
            if len(self.tokenizer.decode(tokens[:k], skip_special_tokens=True)) >= len(text):
                return k
        return len(tokens)

    # ------------------------------------------------------------------ scoring
    def score(
        self,
        prompts: Sequence[str],
        continuations: Sequence[str],
        *,
        add_eos: bool = False,
    ) -> list[Scored]:
        """Teacher-forced log-likelihood of ``continuations[i]`` after ``prompts[i]``, in batches of ``batch_size``.

        Prompt and continuation are tokenised separately (the prompt as in :meth:`generate`, the continuation
        without special tokens) and concatenated, so the scored tokens are exactly the continuation's; ``add_eos``
        appends the EOS token to it. Prompts are left-truncated to fit ``max_context``. Counts: ``lm_calls`` +1 per
        pair, ``lm_batches`` +1 per batch, prompt tokens in ``prefill_tokens``, continuation tokens in
        ``scored_tokens``.
        """
        import torch

        prompts, continuations = list(prompts), list(continuations)
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        out: list[Scored] = []
        with torch.inference_mode():
            for start in range(0, len(prompts), self.batch_size):
                stop = start + self.batch_size
                batch = list(zip(prompts[start:stop], continuations[start:stop], strict=True))
                with self.counter.timed("score"):
                    out.extend(self._score_batch(batch, add_eos))
        return out

    def _score_batch(self, batch: list[tuple[str, str]], add_eos: bool) -> list[Scored]:
        """One teacher-forced forward pass over a left-padded batch of prompt + continuation."""
        import torch

        conts = [list(self.tokenizer(c, add_special_tokens=False)["input_ids"]) for _, c in batch]
        if add_eos:
            eos = self.tokenizer.eos_token_id
            conts = [[*c, eos] for c in conts]
        prompt_ids = [
            self.encode_prompt(prompt, max(self.max_context - len(c), 1))
            for (prompt, _), c in zip(batch, conts, strict=True)
        ]
        seqs = [p + c for p, c in zip(prompt_ids, conts, strict=True)]
        keep = max(len(c) for c in conts) + 1
        logits = self.tail_logits(seqs, keep)
        self.counter.lm_calls += len(batch)
        self.counter.lm_batches += 1
        self.counter.prefill_tokens += sum(len(p) for p in prompt_ids)
        self.counter.scored_tokens += sum(len(c) for c in conts)
        results = []
        for b, ((prompt, cont), ids) in enumerate(zip(batch, conts, strict=True)):
            # the logits at offset o (of the kept tail) predict token keep - o - 1 from the end; the last is unused
            preds = torch.log_softmax(logits[b, keep - 1 - len(ids) : keep - 1], dim=-1)
            target = torch.tensor(ids, dtype=torch.long, device=preds.device)
            lp = preds.gather(-1, target[:, None])[:, 0].cpu().numpy().astype(np.float32)
            ent = (-(preds.exp() * preds).nan_to_num().sum(-1)).cpu().numpy().astype(np.float32)
            mean = float(lp.mean()) if len(lp) else float("nan")
            results.append(Scored(prompt, cont, np.asarray(ids, dtype=np.int64), lp, ent, float(lp.sum()), mean))
        return results

    def prompt_logprobs(self, id_lists: Sequence[Sequence[int]], *, top_logprobs: int = 0) -> list[PromptLogprobs]:
        """Teacher-forced log-probs of each token-id sequence's own tokens (what ``echo`` reports), in order.

        Per sequence, for every token after the first: its raw (T=1) log-prob given the tokens before it, the entropy
        there and the ``top_logprobs`` most likely tokens (see :class:`PromptLogprobs`). The same forward as
        :meth:`score` (positions from each row's first real token), so a sequence's log-probs equal ``score``'s on the
        same ids. Sequences share a left-padded forward while rows × the widest stays within
        :data:`SCORE_POSITIONS`. ``ValueError`` for an empty sequence or one longer than ``max_context``. Counts:
        ``lm_calls`` +1 per sequence, ``lm_batches`` +1 per forward, all tokens in ``prefill_tokens``, all but the
        first in ``scored_tokens``.
        """
        import torch

        seqs = [[int(i) for i in ids] for ids in id_lists]
        for ids in seqs:
            if not ids:
                raise ValueError("cannot score an empty token sequence")
            if len(ids) > self.max_context:
                raise ValueError(f"a sequence of {len(ids)} tokens is longer than max_context={self.max_context}")
        if top_logprobs < 0:
            raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
        groups: list[list[int]] = []
        for b in range(len(seqs)):
            group = groups[-1] if groups else None
            if group and len(group) < self.batch_size:
                width = max(len(seqs[i]) for i in [*group, b])
                if width * (len(group) + 1) <= SCORE_POSITIONS:
                    group.append(b)
                    continue
            groups.append([b])
        out: list[PromptLogprobs | None] = [None] * len(seqs)
        with torch.inference_mode():
            for group in groups:
                batch = [seqs[b] for b in group]
                width = max(len(ids) for ids in batch)
                with self.counter.timed("score"):
                    logits = self._forward_tail(batch, width)
                self.counter.lm_calls += len(batch)
                self.counter.lm_batches += 1
                self.counter.prefill_tokens += sum(len(ids) for ids in batch)
                self.counter.scored_tokens += sum(len(ids) - 1 for ids in batch)
                for row, b in enumerate(group):
                    out[b] = _own_logprobs(logits[row, width - len(seqs[b]) : width - 1], seqs[b], top_logprobs)
        return [item for item in out if item is not None]

    def tail_logits(self, seqs: Sequence[Sequence[int]], keep: int) -> Any:
        """Logits (float32 tensor [rows, keep, V]) of the last ``keep`` positions of each token-id sequence, as one
        left-padded forward computes them (positions from each row's first real token; a row shorter than ``keep``
        has padding logits in front). Rows sharing a prefix that leaves each at least ``keep`` tokens of its own reuse
        it (see :meth:`prefill`; the same conditions, the saved tokens in ``counter.prefix_reused_tokens``): the
        prefix is encoded once, then the suffixes over copies of its cache. Counts nothing else: the callers count
        their calls and tokens."""
        import torch

        seqs = [[int(i) for i in ids] for ids in seqs]
        groups = plan_prefix_groups(seqs, self.prefix_min_tokens, keep) if self.reuses_prefixes() else []
        parts: list[tuple[list[int], Any]] = []
        for group in groups:
            head = self._encode_prefix(seqs[group.rows[0]][: group.length])
            if head is None:
                return self._forward_tail(seqs, keep)
            suffixes = [seqs[r][group.length :] for r in group.rows]
            out, _, _ = self._continue_prefix(head, group.length, suffixes, keep, None)
            parts.append((list(group.rows), out.logits.float()))
        if not parts:
            return self._forward_tail(seqs, keep)
        grouped = {r for rows, _ in parts for r in rows}
        plain = [r for r in range(len(seqs)) if r not in grouped]
        if plain:
            parts.append((plain, self._forward_tail([seqs[r] for r in plain], keep)))
        self.counter.prefix_reused_tokens += sum(group.saved for group in groups)
        logits = parts[0][1].new_empty((len(seqs), keep, parts[0][1].shape[-1]))
        for rows, part in parts:
            logits[torch.tensor(rows, dtype=torch.long, device=logits.device)] = part
        return logits

    def _forward_tail(self, seqs: list[list[int]], keep: int) -> Any:
        """Logits (float32) of the last ``keep`` positions of each sequence, in one left-padded forward pass (no
        prefix reuse)."""
        check_interrupt()  # between teacher-forced batches (core.interrupt)
        input_ids, mask, positions = left_padded_batch(seqs, self.tokenizer.pad_token_id)
        return self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            logits_to_keep=keep,
        ).logits.float()

    def next_token_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> np.ndarray:
        """Log-probability (raw, T=1) of the first token of each option as the token following each prompt.

        Returns an ``(len(prompts), len(options))`` float32 array from one forward pass per batch of prompts: the
        cheap way to read a one-word verdict ("yes" / "no" / "maybe") or a multiple-choice letter. Counts
        ``lm_calls`` (one per prompt), ``lm_batches`` and ``prefill_tokens``.
        """
        import torch

        prompts = list(prompts)
        first = []
        for option in options:
            ids = self.tokenizer(option, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"option {option!r} encodes to no token")
            first.append(ids[0])
        out = np.zeros((len(prompts), len(first)), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(prompts), self.batch_size):
                ids = [self.encode_prompt(p, self.max_context) for p in prompts[start : start + self.batch_size]]
                with self.counter.timed("score"):
                    logits = self.tail_logits(ids, 1)[:, -1]
                self.counter.lm_calls += len(ids)
                self.counter.lm_batches += 1
                self.counter.prefill_tokens += sum(len(i) for i in ids)
                out[start : start + len(ids)] = torch.log_softmax(logits, -1)[:, first].cpu().numpy()
        return out


# ---------------------------------------------------------------------- helpers (module level, torch passed in)
def _record_own_attention(rows: list[DecodingRow], fed: list[int], recorder: Any) -> None:
    """Give each row of ``fed`` (in the order its token was fed) the last layer's log diagonal of that token's
    position, from the one forward ``recorder`` holds; None when it holds another count of forwards (a model that
    runs its last attention layer more or less than once a step: its answers then take the teacher-forced pass)."""
    forwards = recorder.take()
    if len(forwards) != 1 or forwards[0].shape[0] != len(fed):
        for r in fed:
            rows[r].own_attention.append(None)
        return
    for k, r in enumerate(fed):
        rows[r].own_attention.append(forwards[0][k, :, -1])  # (rows, heads, 1): one query per row


def _rows_in_order(states: list[dict[str, Any]], order: list[int]) -> dict[str, Any]:
    """One decoding state from ``states`` (joined) whose rows are ``order`` (a permutation of 0 … n − 1), put back
    in order 0 … n − 1."""
    import torch

    state = join_states(*states) if len(states) > 1 else states[0]
    if order != list(range(len(order))):
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
        state = select_rows(state, inverse)
    return state


def _own_logprobs(logits: Any, ids: list[int], k: int) -> PromptLogprobs:
    """:class:`PromptLogprobs` of ``ids`` from the logits of its positions ``0 .. L-2`` (each predicting the next)."""
    import torch

    preds = torch.log_softmax(logits.float(), dim=-1)
    target = torch.tensor(ids[1:], dtype=torch.long, device=preds.device)
    lp = preds.gather(-1, target[:, None])[:, 0].cpu().numpy().astype(np.float32)
    ent = (-(preds.exp() * preds).nan_to_num().sum(-1)).cpu().numpy().astype(np.float32)
    width = min(k, preds.shape[-1])
    if width:
        top = preds.topk(width, dim=-1)
        top_ids = top.indices.cpu().numpy().astype(np.int64)
        top_lps = top.values.cpu().numpy().astype(np.float32)
    else:
        top_ids = np.zeros((len(ids) - 1, 0), dtype=np.int64)
        top_lps = np.zeros((len(ids) - 1, 0), dtype=np.float32)
    return PromptLogprobs(np.asarray(ids, dtype=np.int64), lp, ent, top_ids, top_lps)


CPU_PREFILL_TOKENS = 512
"""On a CPU, rows are encoded together while their padded size (rows × the widest) stays within this many tokens: a
budget that kept short prompts batched and split long ones, the fastest of 512 / 1024 / 2048 / one forward for
closed-book, 2-passage and 5-passage prompts (SmolLM2, 2 cores)."""


def _resolve(model: Any) -> ResolvedModel:
    """A ResolvedModel from a ResolvedModel, a path or a generator reference (AssetError if unknown)."""
    from workbench.assets import ResolvedModel
    from workbench.backends.lora import resolve_model

    if isinstance(model, ResolvedModel):
        return model
    return resolve_model(str(model))


def _load(path: str, device: str, dtype: str) -> tuple[Any, Any]:
    """Load model (eval mode) and tokenizer (left padding, a pad token); failures become one-line AssetErrors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{dtype}' (use e.g. float32, bfloat16, float16)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AssetError(f"cannot load a causal LM: {first}", str(path)) from None
    model.to(device).eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every token id that ends a sequence: the tokenizer's EOS and the generation config's EOS id(s)."""
    from workbench.backends.generation_types import eos_token_ids

    return eos_token_ids(tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None))
