"""The :class:`Generator`: construction (model loading), prompt rendering and ``generate``, assembled from the parts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.assets import declared_prompt_format
from workbench.backends.cost import CostCounter
from workbench.backends.decoding_state import DecodingRow, cache_argument
from workbench.backends.generation_lookup import decoding_params
from workbench.backends.generation_types import Generation, PromptLogprobs
from workbench.backends.generator.decode_loop import DecodeLoop
from workbench.backends.generator.jobs import Prompt
from workbench.backends.generator.loading import load_causal_lm, model_eos_ids, resolve_generator_model
from workbench.backends.generator.scoring import Scoring
from workbench.backends.prefix_reuse import PREFIX_MIN_TOKENS
from workbench.backends.prompts import BuiltPrompt, Messages, PromptRenderer, check_prompt_format
from workbench.core.hashing import stable_hash

if TYPE_CHECKING:
    from workbench.assets import ResolvedModel
    from workbench.backends.gencache import GenerationCache


BATCH_ROWS = 64
"""Default ``Generator.batch_rows``: a decoding batch grows past ``batch_size`` prompts while its rows (prompts ×
missing samples) stay within this many, so short greedy calls fill a batch as a sampling call does."""


class Generator(DecodeLoop, Scoring):
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

        check_prompt_format(prompt_format)  # before the (slow) load
        resolved = resolve_generator_model(model)
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
        self.model, self.tokenizer = load_causal_lm(resolved.path, device, dtype)
        config_limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_context = int(max_context or config_limit or 2048)
        self.fingerprint = stable_hash(["generator", resolved.fingerprint, dtype])
        self.prompts = PromptRenderer(
            self.tokenizer, resolved.ref, prompt_format, declared_prompt_format(resolved.path)
        )
        self.eos_ids = model_eos_ids(self.model, self.tokenizer)
        self._cache_arg = cache_argument(self.model)
        self.joinable_cache: bool | None = None  # learned by the first split prefill (decoding.contrastive)
        self._warned_truncation = False
        self.prefix_reuse = prefix_reuse
        self.prefix_min_tokens = PREFIX_MIN_TOKENS

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

    def prompt_logprobs_and_step(
        self,
        prompts: Sequence[Prompt],
        *,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
        echo_cache: Any = None,
    ) -> tuple[list[PromptLogprobs], list[Generation]]:
        """Each prompt's own log-probs (:meth:`prompt_logprobs`) and its greedy one-token continuation, from ONE
        teacher-forced forward: what a server answers to ``echo`` with log-probs and ``max_tokens: 1`` at temperature
        0 (lm-eval's log-likelihood requests, the served backend's teacher-forced reads), with one prefill instead of
        an echo pass and then a generation pass.

        The continuation is chosen and recorded by the decoding loop's own code (``_choose_tokens``, ``finish_row``,
        ``_finalise``) from the logits at the prompt's last position, so it is
        ``generate(prompts, max_new_tokens=1, temperature=0, stop=stop, top_logprobs=top_logprobs)``'s up to the float
        rounding of a differently batched forward (the same token unless two are tied to that rounding). Prompts are
        as :meth:`generate` takes them; the generation cache is neither read nor written; ``echo_cache`` as in
        :meth:`prompt_logprobs`. Counts as :meth:`prompt_logprobs` does, plus one ``decoded_tokens`` per prompt."""
        import torch

        params = decoding_params(
            max_new_tokens=1, temperature=0.0, top_p=1.0, top_k=0, stop=stop, seed=self.seed, n=1,
            top_logprobs=top_logprobs,
        )  # fmt: skip
        keys = [self._prompt_key(p) for p in prompts]
        jobs = {job.key: job for job in self._missing_jobs(keys, 1, params, {})}
        ordered = [jobs[key] for key in keys]
        last: list[Any] = []
        ids = [job.ids for job in ordered]
        own = self.prompt_logprobs(ids, top_logprobs=top_logprobs, next_logits=last, echo_cache=echo_cache)
        if not ordered:
            return own, []
        rows = [DecodingRow(job=i, sample=0, generator=None) for i in range(len(ordered))]
        with torch.inference_mode():
            self._choose_tokens(rows, list(range(len(rows))), torch.stack(last), params)
        self.counter.decoded_tokens += len(rows)
        gens = []
        for row, job in zip(rows, ordered, strict=True):
            self.finish_row(row, row.tokens[-1], 0, params)
            gens.append(self._finalise(row, job, params))
        return own, gens

    def sample(self, prompts: Sequence[Prompt], n: int, **kwargs: Any) -> list[list[Generation]]:
        """:meth:`generate` grouped per prompt: ``result[i]`` holds the ``n`` samples of ``prompts[i]``."""
        flat = self.generate(prompts, n=n, **kwargs)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]
