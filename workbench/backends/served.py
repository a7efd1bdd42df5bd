"""A generator reached through the OpenAI protocol: the same interface as the in-process generator, served weights.

:class:`ServedGenerator` answers :meth:`generate` / :meth:`sample`, :meth:`score`, :meth:`next_token_logprobs`,
:meth:`build_prompt` and :meth:`render_chat` as :class:`~workbench.backends.generator.Generator` does, so stages,
methods, studies and the runtime do not know which one runs. It talks to any OpenAI-compatible server
(docs/served-models.md) through :class:`~workbench.backends.served_client.ServedClient`, probes it once
(:func:`~workbench.backends.served_probe.probe`) and checks every answer
(:mod:`~workbench.backends.served_answers`): an answer that breaks the protocol is asked again, then fails.

Prompts: with the model's tokenizer (``tokenizer``: an embedded name, a directory or a hub id) they are rendered here
exactly as in-process — same chat template, same text, same prompt fingerprints — and sent as token ids where the
server takes them (else as text). Without one, the model is reached by chat only and the server's own chat template
renders the messages (recorded as ``capabilities.chat_template == "server"``).

The model's facts, as in-process:

* **EOS**: a sequence ends at any id of the tokenizer's EOS ∪ the model's generation config ``eos_token_id`` (an id
  or a list, read from the tokenizer reference's ``generation_config.json``, else its model config) ∪ the ids the
  server states (its ``/v1/models`` entry's ``eos_token_id``). The extra ids go to the server as ``stop_token_ids``
  (vLLM); an answer that runs past one anyway is cut there, as in-process decoding stops there.
* **Context window**: ``max_context`` when set (at most what the server states), else the server's
  (``max_model_len`` in ``/v1/models``: vLLM, ``serve-model``), else the model config's ``max_position_embeddings``;
  neither known and none set is a one-line error, never a guess.

What a served answer holds, and how it departs from the in-process one:

* text, finish reason, the chosen tokens' raw log-probs: the same (servers report raw, T = 1 log-probs);
* ``entropies``: **approximated** from the top-k log-probs at each position as
  −Σ_top-k p log p − r log r, with r the probability mass outside the top k (a lower bound of the entropy; exact when
  the top k cover the distribution) — see :func:`topk_entropy`;
* :meth:`read_next` / :meth:`next_token_logprobs`: **exact or absent** — an option's log-prob is read from the top
  k where it is there, teacher-forced with ``echo`` (prompt + option) where it is not, and NaN where the server
  has no echo (counted in :attr:`absent_reads` with the reason); never a floor;
* ``token_ids``: the server's ids where it returns them (``return_tokens_as_token_ids``), else -1;
* EOS: a sequence that ended with EOS carries its log-prob when the server lists the EOS token (vLLM and
  ``serve-model`` do); otherwise it ends as a stop and its EOS term is absent;
* ``logprobs_processed``: 0 for greedy, the raw log-probs at temperature 1 with no top-k / top-p, NaN otherwise
  (servers do not report the processed distribution).

Hidden states, attention weights and per-step logits (INSIDE, Attention Score, contrastive decoding) are not in the
protocol: asking for them is a one-line error naming the capability.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.assets import ResolvedModel, declared_prompt_format
from workbench.backends.capabilities import Capabilities
from workbench.backends.cost import CostCounter
from workbench.backends.generation_lookup import CachedGenerations, decoding_params
from workbench.backends.generation_types import DecodingParams, Generation, Scored, eos_token_ids
from workbench.backends.lora import resolve_model
from workbench.backends.prompts import (
    CLOSED_BOOK_TEMPLATE,
    CONTEXT_TEMPLATE,
    BuiltPrompt,
    Messages,
    PromptRenderer,
    _as_messages,
    encode,
    fill_template,
)
from workbench.backends.served_answers import (
    InvalidAnswer,
    LogprobBlock,
    chat_logprobs,
    chat_text,
    choices,
    completion_logprobs,
    completion_text,
    finish_reason,
    usage_tokens,
)
from workbench.backends.served_client import ServedClient, ServedModelError, ServedSettings, answer_size_cap
from workbench.backends.served_probe import fingerprint_probe, probe
from workbench.core.errors import AssetError
from workbench.core.hashing import stable_hash

log = logging.getLogger(__name__)

CHAT_MARK = "\x00chat\x00"
"""Prefix of a prompt that is a JSON list of chat messages (chat-only mode: the server renders them)."""
CHARS_PER_TOKEN = 4
"""Token estimate of a text in chat-only mode (no tokenizer here): about four characters per token."""
DEFAULT_TOP_LOGPROBS = 20
"""Alternatives asked per position (OpenAI's own maximum; vLLM's default ``max_logprobs``)."""
ANSWER_BYTES_PER_REQUEST = 64 << 20
"""Requests are grouped so that each one's answer may take at most this many bytes (see
:func:`~workbench.backends.served_client.answer_size_cap`): long echoed prompts with many alternatives go fewer to
a request."""
ABSENT_WITHOUT_ECHO = "an option token outside the server's top-k log-probs, and no echo to teacher-force it"
"""Why a next-token read is NaN on a server without echo (:attr:`ServedGenerator.absent_reads`)."""
SAMPLE_SEED_BASE = 1 << 31
"""Seeds of samples asked for one at a time start here (:func:`sample_seed`): above any seed the workbench passes."""


def topk_entropy(top: dict[str, float] | Sequence[float] | None) -> float:
    """Entropy (nats) approximated from the top-k log-probs of one position: −Σ p log p over the top k, minus
    r log r for the mass r outside them, as one outcome (a lower bound; exact when r = 0). NaN without data."""
    if not top:
        return float("nan")
    values = np.asarray(list(top.values()) if isinstance(top, dict) else list(top), dtype=np.float64)
    p = np.exp(values[np.isfinite(values)])
    rest = max(0.0, 1.0 - float(p.sum()))
    h = float(-(p * np.log(np.maximum(p, 1e-300))).sum())
    return h - (rest * math.log(rest) if rest > 1e-12 else 0.0)


def sample_seed(seed: int | None, sample: int) -> int:
    """The seed of sample ``sample`` of a sampled call with seed ``seed``, when that sample is asked for on its own
    (a server without ``n``, or one that answered fewer choices than asked).

    ``SAMPLE_SEED_BASE + seed · 1024 + sample`` for seeds below 2**21 and samples below 1024 — one seed per
    (seed, sample) pair, none shared with another call's samples nor with a seed the workbench passes itself (all
    below :data:`SAMPLE_SEED_BASE`); other pairs get a 31-bit digest above the base. Every value fits 32 bits
    (llama.cpp's seeds are unsigned 32-bit)."""
    seed = int(seed or 0)
    if 0 <= seed < 1 << 21 and 0 <= sample < 1 << 10:
        return SAMPLE_SEED_BASE + (seed << 10) + sample
    digest = hashlib.sha256(f"{seed}:{sample}".encode()).digest()
    return SAMPLE_SEED_BASE + int.from_bytes(digest[:4], "little") % SAMPLE_SEED_BASE


def _token_id(token: str) -> int:
    """The id in a ``"token_id:<id>"`` token (vLLM's ``return_tokens_as_token_ids``), else -1."""
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[9:])
        except ValueError:
            return -1
    return -1


@dataclass(frozen=True)
class ModelFacts:
    """What the model's own files say, without loading weights: ``eos_ids`` (its generation config's EOS ids) and
    ``max_positions`` (its config's ``max_position_embeddings``; None when not stated)."""

    eos_ids: frozenset[int] = frozenset()
    max_positions: int | None = None


def model_facts(path: str) -> ModelFacts:
    """The :class:`ModelFacts` of the model directory ``path`` (the tokenizer reference's): the EOS ids of its
    ``generation_config.json`` (without one, the generation config transformers builds from ``config.json``, as the
    in-process generator's model has) and ``config.json``'s ``max_position_embeddings`` (the text config's, for a
    model that nests one). Files that are missing or unreadable give nothing."""
    from transformers import AutoConfig, GenerationConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError):
        config = None
    try:
        generation = GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):
        generation = GenerationConfig.from_model_config(config) if config is not None else None
    positions = None
    if config is not None:
        value = getattr(config.get_text_config(), "max_position_embeddings", None)
        positions = value if isinstance(value, int) and value > 0 else None
    return ModelFacts(eos_token_ids(getattr(generation, "eos_token_id", None)), positions)


def context_window(setting: int | None, stated: int | None, config: int | None, model: str) -> int:
    """The context window a served model runs with: ``setting`` (``generator.max_context``) when given — refused when
    the server ``stated`` a smaller one —, else the server's, else the model ``config``'s; a one-line error when none
    is known (never a guess)."""
    if setting is not None:
        if stated is not None and setting > stated:
            raise ServedModelError(
                f"generator.max_context {setting} is larger than the context window the server states for "
                f"{model!r} ({stated})",
                "generator.max_context",
            )
        return int(setting)
    if stated is not None:
        return int(stated)
    if config is not None:
        return int(config)
    raise ServedModelError(
        f"the context window of {model!r} is unknown: the server states no max_model_len and there is no model config"
        " (generator.tokenizer) with max_position_embeddings; set generator.max_context",
        "generator.max_context",
    )


@dataclass(frozen=True)
class _Round:
    """One round of a batched call: ``n`` choices asked per payload, the request fields ``params``, and ``read``,
    which turns one payload's choices (and its index) into a value."""

    n: int
    read: Callable[[list[dict[str, Any]], int], Any]
    params: dict[str, Any]


class ServedGenerator(CachedGenerations):
    """A served causal LM behind the in-process generator's interface (see the module docstring).

    ``settings`` say where it is; ``tokenizer`` is the model's tokenizer reference (None: chat-only, the server's
    template); ``capabilities`` / ``probe_record`` skip the probe when given (a run that probed already; the record's
    ``context`` is then the server's window). ``max_context``: see :func:`context_window`; ``top_logprobs`` is how
    many alternatives to ask per position (at most what the server gives). Costs go to ``counter`` as in-process:
    ``lm_calls`` one per prompt sent, ``lm_batches`` one per call of this object, ``prefill_tokens`` /
    ``decoded_tokens`` from the server's ``usage``, ``scored_tokens`` for :meth:`score`. How next-token reads were
    answered is counted in :attr:`option_reads` (``top_k``, ``teacher_forced``, ``absent``) and the absent ones by
    reason in :attr:`absent_reads`.
    """

    served = True
    model = None  # no in-process model: features that need one are refused before they run

    def __init__(
        self,
        settings: ServedSettings,
        *,
        tokenizer: str | None = None,
        max_context: int | None = None,
        cache: Any = None,
        counter: CostCounter | None = None,
        seed: int = 0,
        batch_size: int = 8,
        prompt_format: str = "auto",
        top_logprobs: int = DEFAULT_TOP_LOGPROBS,
        capabilities: Capabilities | None = None,
        probe_record: Any = None,
    ) -> None:
        self.settings = settings
        self.client = ServedClient(settings)
        self.cache = cache
        self.counter = counter if counter is not None else CostCounter()
        self.seed = seed
        self.batch_size = batch_size
        self.dtype = "served"
        self.device = "served"
        self.joinable_cache = None
        self.option_reads: Counter[str] = Counter(top_k=0, teacher_forced=0, absent=0)
        self.absent_reads: Counter[str] = Counter()
        self._surfaces: dict[int, str | None] | None = None
        try:
            self._start(tokenizer, max_context, prompt_format, top_logprobs, capabilities, probe_record)
        except BaseException:  # a refused server or setting: no thread or connection outlives the error
            self.client.close()
            raise

    def _start(
        self,
        tokenizer: str | None,
        max_context: int | None,
        prompt_format: str,
        top_logprobs: int,
        capabilities: Capabilities | None,
        probe_record: Any,
    ) -> None:
        """Load the tokenizer and the model's facts, probe the server (unless ``capabilities`` are given), settle the
        context window and the EOS ids, and record the probe answers (see the class docstring)."""

        settings = self.settings
        self.tokenizer, tokenizer_fp, tokenizer_path = _load_tokenizer(tokenizer)
        facts = model_facts(tokenizer_path) if tokenizer_path else ModelFacts()
        if capabilities is None:
            capabilities, probe_record = probe(self.client, self.tokenizer)
        self.capabilities = capabilities
        self.top_logprobs = min(int(top_logprobs), capabilities.top_logprobs) if capabilities.logprobs else 0
        stated = getattr(probe_record, "context", None)
        self.max_context = context_window(max_context, stated, facts.max_positions, settings.model)
        own_eos = self.tokenizer.eos_token_id if self.tokenizer is not None else None
        self.eos_ids = eos_token_ids(own_eos, sorted(facts.eos_ids), list(capabilities.eos_token_ids))
        self._stop_token_ids = sorted(self.eos_ids - {own_eos})
        eos = sorted(self.eos_ids)  # how a server writing token texts may write them
        texts = (
            [*self.tokenizer.convert_ids_to_tokens(eos), *surfaces(self.tokenizer, eos)]
            if self.tokenizer is not None
            else []
        )
        self._eos_texts = frozenset(t for t in texts if t)
        self.prompts = None
        if self.tokenizer is not None:
            declared = declared_prompt_format(tokenizer_path)
            self.prompts = PromptRenderer(self.tokenizer, settings.model, prompt_format, declared)
        else:
            log.info("no tokenizer for %s: prompts go through the server's chat template", settings.model)
        self.fingerprint = stable_hash(["served", settings.model, tokenizer_fp])  # until the probe answers
        if probe_record is None or not getattr(probe_record, "texts", None):
            probe_record = fingerprint_probe(self, settings.model)
        self.probe_record = probe_record
        self.probe_record.context = self.max_context
        self.fingerprint = stable_hash(["served", settings.model, tokenizer_fp, list(probe_record.texts)])
        self.resolved = ResolvedModel(f"served:{settings.model}", settings.base_url, self.fingerprint, "served")

    def close(self) -> None:
        """Close the HTTP client and its threads."""
        self.client.close()

    # ------------------------------------------------------------------ prompts
    def render_chat(self, messages: Messages, system: str | None = None) -> str:
        """The rendered prompt (with the tokenizer), or a chat-mode prompt the server renders."""
        if self.prompts is not None:
            return self.prompts.chat(messages, system)
        return CHAT_MARK + json.dumps(_as_messages(messages, system), ensure_ascii=False)

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
        """As :meth:`Generator.build_prompt`; in chat-only mode the context is cut by characters
        (:data:`CHARS_PER_TOKEN` per token), since no tokenizer is at hand."""
        budget = self.max_context - max_new_tokens
        if self.prompts is not None:
            return self.prompts.build(
                question,
                context,
                template,
                system=system,
                max_tokens=budget,
                chat=chat,
                truncate_side=truncate_side,
                counter=self.counter,
            )
        template = template or (CONTEXT_TEMPLATE if context else CLOSED_BOOK_TEMPLATE)
        filled = fill_template(template, question, context)
        room = budget * CHARS_PER_TOKEN - len(fill_template(template, question, ""))
        cut = 0
        if context and len(context) > max(room, 0):
            cut = len(context) - max(room, 0)
            context = context[cut:] if truncate_side == "left" else context[: len(context) - cut]
            filled = fill_template(template, question, context)
            self.counter.truncated_prompts += 1
        text = (
            self.render_chat(filled, system) if chat else CHAT_MARK + json.dumps([{"role": "user", "content": filled}])
        )
        return BuiltPrompt(text, len(text) // CHARS_PER_TOKEN, cut > 0, cut // CHARS_PER_TOKEN)

    def encode_prompt(self, prompt: str, budget: int) -> list[int]:
        """Prompt token ids left-truncated to ``budget`` (as in-process); needs the tokenizer."""
        if self.tokenizer is None:
            raise ServedModelError("token ids need the model's tokenizer (set generator.tokenizer)", "generator")
        ids = encode(self.tokenizer, prompt)
        if not ids:
            raise ValueError(f"prompt {prompt!r} encodes to no tokens")
        if len(ids) > budget:
            self.counter.truncated_prompts += 1
            ids = ids[-budget:]
        return ids

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompts: Sequence[str],
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
    ) -> list[Generation]:
        """As :meth:`Generator.generate` (flat, prompt-major, cached): ``batch_size`` distinct prompts per request
        where the server takes prompt lists and ``n`` (else one request per prompt, or per sample without ``n``),
        ``max_concurrency`` requests in flight (:meth:`_generate_missing`)."""
        if return_hidden_layer is not None or return_attentions:
            what = "hidden states" if return_hidden_layer is not None else "attention weights"
            raise ServedModelError(f"{what} need the in-process backend (generator.backend: hf)", "generator.backend")
        params = decoding_params(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop=stop,
            seed=self.seed if seed is None else seed,
            n=n,
        )
        prompts = list(prompts)
        if not prompts:
            return []
        needed = 1 if params.greedy else n
        found = self._lookup(prompts, needed, params)
        missing = [p for p in dict.fromkeys(prompts) if any((p, j) not in found for j in range(needed))]
        if missing:
            with self.counter.timed("generate"):
                answers = self._generate_missing(missing, needed, params)
            fresh = {(p, j): gen for p, gens in zip(missing, answers, strict=True) for j, gen in enumerate(gens)}
            self.counter.lm_batches += 1
            found.update(fresh)
            self._store(fresh, params)
        return self._assemble(prompts, n, found, params.greedy)

    def sample(self, prompts: Sequence[str], n: int, **kwargs: Any) -> list[list[Generation]]:
        """:meth:`generate` grouped per prompt."""
        flat = self.generate(prompts, n=n, **kwargs)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _request_params(self, params: DecodingParams) -> dict[str, Any]:
        out: dict[str, Any] = {"max_tokens": params.max_new_tokens, "temperature": params.temperature}
        # samplers some engines turn on by default, off as in-process (llama.cpp: repeat_penalty 1.1, top_k 40,
        # min_p 0.05); an engine that does not know a field ignores it
        extra: dict[str, Any] = {"repeat_penalty": 1.0}
        if not params.greedy:
            out["top_p"] = params.top_p
            if params.seed is not None:
                out["seed"] = int(params.seed)
            extra.update(top_k=params.top_k, min_p=0.0)
        if params.stop:
            out["stop"] = list(params.stop)
        if self._stop_token_ids:  # the generation config's other EOS ids (vLLM stops at them)
            extra["stop_token_ids"] = list(self._stop_token_ids)
        if self.capabilities.logprobs:
            out["logprobs"] = self.top_logprobs
        if self.capabilities.token_ids:
            extra["return_tokens_as_token_ids"] = True
        out["extra_body"] = extra
        return out

    def _prompt_payload(self, prompt: str, params: DecodingParams) -> str | list[int]:
        """Token ids (exactly the in-process ids, left-truncated) where the server takes them, else the text."""
        if self.tokenizer is not None and self.capabilities.token_prompts:
            return self.encode_prompt(prompt, self.max_context - params.max_new_tokens)
        return prompt

    def _generate_missing(self, prompts: list[str], needed: int, params: DecodingParams) -> list[list[Generation]]:
        """The ``needed`` samples of each prompt, every request of the call in flight together (up to
        ``max_concurrency``): ``batch_size`` prompts per request where the server takes prompt lists, each asking
        ``n = needed`` where the server honours ``n`` (so the engine batches them as in-process). Without ``n``, each
        sample ``j`` is its own choice with its own seed :func:`sample_seed` (``seed``, ``j``) — still sent as prompt
        lists where the server takes them (one list per sample index) — so a server without ``n`` still sees every
        sample of the call at once. Chat-only prompts: :meth:`_chat_missing`."""
        if any(p.startswith(CHAT_MARK) for p in prompts):
            return self._chat_missing(prompts, needed, params)
        payloads = [self._prompt_payload(p, params) for p in prompts]
        base = self._request_params(params)

        def reader(first: int) -> Callable[[list[dict[str, Any]], int], list[Generation]]:
            def read(group: list[dict[str, Any]], index: int) -> list[Generation]:
                return [
                    self._parse_choice(c, prompts[index], first + k, params, f"choice {k}") for k, c in enumerate(group)
                ]

            return read

        if needed == 1 or self.capabilities.n:
            rounds = [_Round(needed, reader(0), base)]
        else:  # one choice per sample index, each index with its own seed
            rounds = [_Round(1, reader(j), {**base, "seed": sample_seed(params.seed, j)}) for j in range(needed)]
        answered = self._batched_rounds(payloads, rounds, 0, params.max_new_tokens)
        out: list[list[Generation]] = [[] for _ in prompts]
        for answers in answered:  # sample-index order: the samples of each prompt in order
            for i, (gens, prompt_tokens) in enumerate(answers):
                for gen in gens:
                    gen.prompt_tokens = prompt_tokens
                out[i].extend(gens)
        return out

    def _batched(
        self,
        payloads: list[Any],
        n: int,
        read: Callable[[list[dict[str, Any]], int], Any],
        echoed: int,
        new_tokens: int,
        **params: Any,
    ) -> list[tuple[Any, int]]:
        """:meth:`_batched_rounds` with one round: ``(read(choices, i), prompt tokens)`` of each payload ``i``."""
        return self._batched_rounds(payloads, [_Round(n, read, params)], echoed, new_tokens)[0]

    def _batched_rounds(
        self, payloads: list[Any], rounds: Sequence[_Round], echoed: int, new_tokens: int
    ) -> list[list[tuple[Any, int]]]:
        """Per round, ``(round.read(choices, i), prompt tokens)`` of each payload ``i`` (a text or a token-id list),
        asking ``round.n`` choices per payload with the round's request fields. ``batch_size`` payloads per request
        where the server takes prompt lists (``capabilities.prompt_lists``), fewer when their answers could pass
        :data:`ANSWER_BYTES_PER_REQUEST` (``echoed`` prompt positions per token of the payload, ``new_tokens`` per
        choice); the requests of every round go out together, ``max_concurrency`` in flight, in order; each answer
        checked by its ``read`` inside the client's retry loop; the first request that fails after its retries
        fails the call (:meth:`ServedClient.map`). Costs: one LM call per payload and round, the server's token
        counts."""
        size = self.batch_size if self.capabilities.prompt_lists else 1
        jobs: list[tuple[int, list[int], int]] = []  # (round, payload indices, answer size cap)
        for r, round_ in enumerate(rounds):
            width = int(round_.params.get("logprobs") or 0)

            def positions(payload: Any, n: int = round_.n) -> int:
                return echoed * len(payload) + n * (new_tokens + 1)

            chunks: list[list[int]] = []
            for i, payload in enumerate(payloads):
                last = chunks[-1] if chunks else None
                grown = sum(positions(payloads[j]) for j in last or []) + positions(payload)
                if last and len(last) < size and answer_size_cap(grown, width) <= ANSWER_BYTES_PER_REQUEST:
                    last.append(i)
                else:
                    chunks.append([i])
            jobs.extend(
                (r, chunk, answer_size_cap(sum(positions(payloads[i]) for i in chunk), width)) for chunk in chunks
            )

        def call(job: tuple[int, list[int], int]) -> tuple[list[Any], tuple[int, int]]:
            r, chunk, cap = job
            round_ = rounds[r]

            def read_all(answer: dict[str, Any]) -> tuple[list[Any], tuple[int, int]]:
                found = choices(answer, len(chunk) * round_.n)
                values = [round_.read(found[k * round_.n : (k + 1) * round_.n], i) for k, i in enumerate(chunk)]
                return values, usage_tokens(answer)

            prompt = [payloads[i] for i in chunk] if len(chunk) > 1 else payloads[chunk[0]]
            return self.client.completion(prompt, n=round_.n, read=read_all, cap=cap, **round_.params)

        out: list[list[tuple[Any, int]]] = [[None] * len(payloads) for _ in rounds]  # type: ignore[list-item]
        for (r, chunk, _), (values, (prompt_total, completion_total)) in zip(
            jobs, self.client.map(call, jobs), strict=True
        ):
            self.counter.lm_calls += len(chunk)
            self.counter.prefill_tokens += prompt_total
            self.counter.decoded_tokens += completion_total
            for i, value in zip(chunk, values, strict=True):
                payload = payloads[i]
                out[r][i] = (value, len(payload) if isinstance(payload, list) else prompt_total // len(chunk))
        return out

    def _parse_choice(
        self, choice: dict[str, Any], prompt: str, index: int, params: DecodingParams, where: str
    ) -> Generation:
        """One completion choice as a :class:`Generation` (checked: see :mod:`~workbench.backends.served_answers`)."""
        text = completion_text(choice, where)
        block = LogprobBlock([], [], [])
        if self.capabilities.logprobs:
            block = completion_logprobs(choice, where, width=self.top_logprobs)
        return self._generation(text, block, finish_reason(choice, where), prompt, index, params, where)

    def _generation(
        self,
        text: str,
        block: LogprobBlock,
        finish: str | None,
        prompt: str,
        index: int,
        params: DecodingParams,
        where: str,
    ) -> Generation:
        """One :class:`Generation` from a served answer (tokens, their log-probs and top-k), aligned as in-process:
        the answer ends at the first EOS id (:attr:`eos_ids`) among the tokens that make its text, as in-process
        decoding stops there — a server that does not stop at an id of the model's generation config runs past it,
        and the text is then cut there too. :class:`InvalidAnswer` for more tokens than asked, or tokens that do not
        make up the text."""
        tokens, values, tops = block.tokens, block.values, block.tops
        if len(tokens) > params.max_new_tokens + 1:  # the answer's tokens and one EOS at most
            raise InvalidAnswer(f"{where}: {len(tokens)} tokens for max_tokens {params.max_new_tokens}")
        ids = [_token_id(t) for t in tokens]
        ends_on_eos = bool(tokens) and self._is_eos(ids[-1], tokens[-1])
        if ends_on_eos:
            keep = len(tokens) - 1
        elif finish == "length" or not self.capabilities.logprobs:
            keep = len(tokens)
        else:  # a stop string (the tokens past the text are cut, as in-process), or EOS the server did not list
            keep = self._covering(tokens, ids, text)
        # a server that writes token texts may write a token holding part of a character as "" (llama.cpp): each such
        # token may stand for one character of the text; tokens read by id are decoded here, whole
        slack = sum(1 for t, i in zip(tokens, ids, strict=True) if i < 0 and not t)
        if tokens and _visible(self._text_of(tokens, ids)) + slack < _visible(text):
            raise InvalidAnswer(f"{where}: the tokens do not make up the text (a shortened token list)")
        first_eos = next((t for t in range(keep) if self._is_eos(ids[t], tokens[t])), None)
        eos_logprob = eos_entropy = eos_id = None
        if first_eos is not None or ends_on_eos:
            end = first_eos if first_eos is not None else keep
            if end < len(tokens) - 1:  # the server ran past an EOS id: the answer ends there
                text = self._text_of(tokens[:end], ids[:end])
            eos_logprob, eos_entropy = values[end], topk_entropy(tops[end])
            eos_id = ids[end] if ids[end] >= 0 else None
            keep, reason = end, "eos"
        elif finish == "length":
            reason = "length"
        else:
            reason = "stop" if keep < len(tokens) or params.stop else "eos"
        logprobs = np.asarray(values[:keep], dtype=np.float32)
        if params.greedy:
            processed = np.zeros_like(logprobs)
        elif params.temperature == 1.0 and params.top_p == 1.0 and params.top_k == 0:
            processed = logprobs.copy()
        else:
            processed = np.full_like(logprobs, np.nan)
        return Generation(
            prompt=prompt,
            text=text,
            token_ids=np.asarray(ids[:keep], dtype=np.int64),
            logprobs=logprobs,
            logprobs_processed=processed,
            entropies=np.asarray([topk_entropy(t) for t in tops[:keep]], dtype=np.float32),
            finish_reason=reason,
            sample_index=index,
            eos_logprob=eos_logprob,
            eos_entropy=eos_entropy,
            eos_token_id=eos_id,
        )

    def _is_eos(self, token_id: int, token: str) -> bool:
        if token_id >= 0:
            return token_id in self.eos_ids
        return token in self._eos_texts or token == getattr(self.tokenizer, "eos_token", None)

    def _text_of(self, tokens: list[str], ids: list[int]) -> str:
        """The text of answer tokens: their ids decoded as in-process (special tokens skipped) where known, else the
        tokens' own texts joined."""
        if self.tokenizer is not None and ids and all(i >= 0 for i in ids):
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        return "".join(t for t in tokens if t not in self._eos_texts)

    def _covering(self, tokens: list[str], ids: list[int], text: str) -> int:
        """The shortest token prefix whose text covers ``text`` (ids decoded as in-process where known)."""
        for k in range(len(tokens) + 1):
            if len(self._text_of(tokens[:k], ids[:k])) >= len(text):
                return k
        return len(tokens)

    def _chat_missing(self, prompts: list[str], needed: int, params: DecodingParams) -> list[list[Generation]]:
        """Chat-only mode: the messages go to the chat route, the server's template renders them, one request per
        prompt with ``n`` where the server takes it; the samples the server left out (or every sample, without
        ``n``) are then asked for each on its own with its :func:`sample_seed`. Each round's requests are in flight
        together (``max_concurrency``)."""
        base = self._request_params(params)
        base.pop("logprobs", None)
        base["extra_body"].pop("return_tokens_as_token_ids", None)
        if self.capabilities.logprobs:
            base["logprobs"] = True
            base["top_logprobs"] = self.top_logprobs
        count = 1 if needed == 1 or params.greedy else needed
        if count == 1 or self.capabilities.n:
            out = self.client.map(lambda p: self._chat_ask(p, count, 0, base, params), prompts)
        else:
            out = [[] for _ in prompts]
        refills = [(i, j) for i, gens in enumerate(out) for j in range(len(gens), count)]
        asked = self.client.map(
            lambda job: self._chat_ask(
                prompts[job[0]], 1, job[1], {**base, "seed": sample_seed(params.seed, job[1])}, params
            ),
            refills,
        )
        for (i, _), gens in zip(refills, asked, strict=True):  # sample-index order within each prompt
            out[i].extend(gens)
        return [gens[:count] for gens in out]

    def _chat_ask(
        self, prompt: str, count: int, first: int, fields: dict[str, Any], params: DecodingParams
    ) -> list[Generation]:
        """One chat request for ``count`` samples of the chat-mode ``prompt`` (numbered from ``first``); the server
        may answer fewer than ``count`` (the caller asks for the rest)."""
        messages = json.loads(prompt[len(CHAT_MARK) :])
        cap = answer_size_cap(count * (params.max_new_tokens + 1), self.top_logprobs)

        def read(answer: dict[str, Any]) -> tuple[list[Generation], tuple[int, int]]:
            items = answer.get("choices") if isinstance(answer, dict) else None
            got = min(len(items), count) if isinstance(items, list) and items else count
            found = choices({**answer, "choices": items[:got]} if got < count else answer, got)
            gens = []
            for j, choice in enumerate(found):
                where = f"choice {j}"
                block = LogprobBlock([], [], [])
                if self.capabilities.logprobs:
                    block = chat_logprobs(choice, where, width=self.top_logprobs)
                gens.append(
                    self._generation(
                        chat_text(choice, where), block, finish_reason(choice, where), prompt, first + j, params, where
                    )
                )
            return gens, usage_tokens(answer)

        gens, (prompt_tokens, completion_tokens) = self.client.chat(messages, n=count, read=read, cap=cap, **fields)
        self.counter.lm_calls += 1
        self.counter.prefill_tokens += prompt_tokens
        self.counter.decoded_tokens += completion_tokens
        for gen in gens:
            gen.prompt_tokens = prompt_tokens
        return gens

    # ------------------------------------------------------------------ scoring and next-token reads
    def _need(self, *names: str, what: str) -> None:
        lacking = [n for n in names if not self.capabilities.has(n)]
        if self.tokenizer is None:
            lacking.append("a local tokenizer (generator.tokenizer)")
        if lacking:
            raise ServedModelError(
                f"{what} needs {', '.join(lacking)}, which this server does not give", self.settings.base_url
            )

    def score(
        self,
        prompts: Sequence[str],
        continuations: Sequence[str],
        *,
        add_eos: bool = False,
        continuation_ids: Sequence[Sequence[int] | None] | None = None,
    ) -> list[Scored]:
        """As :meth:`Generator.score`: the prompt's and the continuation's token ids (tokenised apart, as
        in-process) sent with ``echo`` (and one generated token, ignored: not every server takes ``max_tokens = 0``);
        entropies from the top-k (see :func:`topk_entropy`). ``continuation_ids[i]``, when given (not None), are the
        ids scored for continuation ``i`` instead of the tokenizer's split of its text (a generation's own tokens)."""
        self._need("echo", "token_prompts", what="scoring a continuation (echo)")
        prompts, continuations = list(prompts), list(continuations)
        given = list(continuation_ids) if continuation_ids is not None else [None] * len(prompts)
        if not len(prompts) == len(continuations) == len(given):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations / {len(given)} id lists")
        assert self.tokenizer is not None
        jobs = []
        for prompt, cont, own in zip(prompts, continuations, given, strict=True):
            ids = (
                [int(t) for t in own]
                if own is not None
                else list(self.tokenizer(cont, add_special_tokens=False)["input_ids"])
            )
            if add_eos:
                ids.append(self.tokenizer.eos_token_id)
            jobs.append((prompt, cont, self.encode_prompt(prompt, max(self.max_context - len(ids), 1)), ids))
        with self.counter.timed("score"):
            answers = self._echo([job[2] + job[3] for job in jobs], max(self.top_logprobs, 1))
        self.counter.lm_batches += 1
        out = []
        for (prompt, cont, p_ids, c_ids), block in zip(jobs, answers, strict=True):
            span = slice(len(p_ids), len(p_ids) + len(c_ids))
            lp = np.asarray(block.values[span], dtype=np.float32)
            ent = np.asarray([topk_entropy(t) for t in block.tops[span]], dtype=np.float32)
            self.counter.scored_tokens += len(c_ids)
            mean = float(lp.mean()) if len(lp) else float("nan")
            out.append(Scored(prompt, cont, np.asarray(c_ids, dtype=np.int64), lp, ent, float(lp.sum()), mean))
        return out

    def _echo(self, id_lists: list[list[int]], width: int, *, with_next: bool = False) -> list[LogprobBlock]:
        """Per id list, its tokens' raw log-probs and top-``width`` entries (position 0: NaN / None), read back with
        ``echo``; one greedy token is generated (not every server takes ``max_tokens = 0``) and dropped, or, with
        ``with_next``, kept as the block's last entry when the answer lists it (its top-``width`` entries are the
        distribution after the whole list). The echoed tokens must be the ids sent where the server names tokens by
        id."""
        extra = {"return_tokens_as_token_ids": True} if self.capabilities.token_ids else None
        params = {"max_tokens": 1, "echo": True, "logprobs": width, "temperature": 0.0, "extra_body": extra}

        def read(group: list[dict[str, Any]], index: int) -> LogprobBlock:
            ids = id_lists[index]
            block = completion_logprobs(group[0], "choice 0", width=width, echo=True)
            if len(block.values) < len(ids):
                raise InvalidAnswer(f"echo gave {len(block.values)} log-probs for a {len(ids)}-token prompt")
            if self.capabilities.token_ids and [_token_id(t) for t in block.tokens[: len(ids)]] != ids:
                raise InvalidAnswer("the echoed prompt tokens are not the ids sent")
            if any(math.isnan(v) for v in block.values[1 : len(ids)]):
                raise InvalidAnswer("an echoed prompt token after the first has no log-prob")
            kept = len(ids) + 1 if with_next else len(ids)
            return LogprobBlock(block.tokens[:kept], block.values[:kept], block.tops[:kept])

        return [block for block, _ in self._batched(id_lists, 1, read, 1, 1, **params)]

    def _option_names(self, option_ids: Sequence[int]) -> list[str | None]:
        """How the server names each option in a top-k mapping: ``token_id:<id>`` where it names tokens by id, else
        the token's text with its leading space (:func:`surfaces`) — None for a text another token of the
        vocabulary shares (a mapping keyed by text cannot tell them apart: that option is teacher-forced or
        absent)."""
        if self.capabilities.token_ids:
            return [f"token_id:{int(i)}" for i in option_ids]
        assert self.tokenizer is not None
        if self._surfaces is None:
            texts = surfaces(self.tokenizer)
            counts = Counter(texts)
            self._surfaces = {i: (t if counts[t] == 1 else None) for i, t in enumerate(texts)}
        return [self._surfaces.get(int(i)) for i in option_ids]

    def read_next(self, id_lists: Sequence[list[int]], option_ids: Sequence[int]) -> np.ndarray:
        """``(len(id_lists), len(option_ids))`` raw log-probs of each option token as the token after each id list:
        exact or NaN, never a floor. An option in the top k of a one-token greedy completion is read there (by its
        id, or by its text with its leading space); the others are teacher-forced with ``echo`` (id list + option:
        the option's log-prob at its position); without echo they are NaN, counted in :attr:`absent_reads` with the
        reason. :attr:`option_reads` counts the reads by source (``top_k``, ``teacher_forced``, ``absent``)."""
        self._need("token_prompts", what="reading next-token log-probabilities")
        if not (self.top_logprobs or self.capabilities.echo):
            self._need("top_logprobs", what="reading next-token log-probabilities")
        rows = [list(ids) for ids in id_lists]
        out = np.full((len(rows), len(option_ids)), np.nan, dtype=np.float64)
        with self.counter.timed("score"):
            if self.top_logprobs and rows:
                extra = {"return_tokens_as_token_ids": True} if self.capabilities.token_ids else None
                params = {"max_tokens": 1, "temperature": 0.0, "logprobs": self.top_logprobs, "extra_body": extra}

                def read(group: list[dict[str, Any]], index: int) -> dict[str, float]:
                    block = completion_logprobs(group[0], "choice 0", width=self.top_logprobs)
                    if not block.tops or block.tops[0] is None:
                        raise InvalidAnswer("choice 0 has no top-k entry for its first token")
                    return block.tops[0]

                self._from_tops(out, [top for top, _ in self._batched(rows, 1, read, 0, 1, **params)], option_ids)
            self._teacher_force(out, rows, option_ids)
        self.counter.lm_batches += 1
        return out

    def read_next_pair(
        self, heads: Sequence[list[int]], tail: Sequence[int], first_ids: Sequence[int], second_ids: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(first, second)``: :meth:`read_next` of ``first_ids`` after each head and of ``second_ids`` after each
        head + ``tail`` — exact or NaN, as there — from ONE echoed request per batch where the server echoes: head +
        tail with ``echo``, the top k at every position and one greedy token, so the top k at the tail's first
        position is the distribution after the head and the generated token's is the one after head + tail (one
        prefill instead of two). The options outside those top k are teacher-forced as in :meth:`read_next`. Without
        echo or top-k log-probs (or an empty ``tail``): two :meth:`read_next` calls."""
        heads, tail = [list(h) for h in heads], [int(t) for t in tail]
        rows = [h + tail for h in heads]
        if not (self.capabilities.echo and self.top_logprobs and tail and heads):
            return self.read_next(heads, first_ids), self.read_next(rows, second_ids)
        self._need("token_prompts", what="reading next-token log-probabilities")
        first = np.full((len(rows), len(first_ids)), np.nan, dtype=np.float64)
        second = np.full((len(rows), len(second_ids)), np.nan, dtype=np.float64)
        with self.counter.timed("score"):
            blocks = self._echo(rows, self.top_logprobs, with_next=True)
            self._from_tops(first, [b.tops[len(h)] for b, h in zip(blocks, heads, strict=True)], first_ids)
            after = [b.tops[len(r)] if len(b.tops) > len(r) else None for b, r in zip(blocks, rows, strict=True)]
            self._from_tops(second, after, second_ids)
            self._teacher_force(first, heads, first_ids)
            self._teacher_force(second, rows, second_ids)
        self.counter.lm_batches += 1
        return first, second

    def _from_tops(self, out: np.ndarray, tops: Sequence[dict[str, float] | None], option_ids: Sequence[int]) -> None:
        """Fill ``out[r, c]`` with option ``c``'s log-prob where row ``r``'s top-k mapping ``tops[r]`` lists it."""
        names = self._option_names(option_ids)
        for r, top in enumerate(tops):
            for c, name in enumerate(names):
                if top is not None and name is not None and name in top:
                    out[r, c] = top[name]

    def _teacher_force(self, out: np.ndarray, rows: list[list[int]], option_ids: Sequence[int]) -> None:
        """Fill the NaN cells of ``out`` by teacher forcing (row + option, with ``echo``), or count them absent
        without echo; :attr:`option_reads` counts every cell by source."""
        missing = [(int(r), int(c)) for r, c in np.argwhere(np.isnan(out))]
        self.option_reads["top_k"] += out.size - len(missing)
        if missing and self.capabilities.echo:
            forced = self._echo([rows[r] + [int(option_ids[c])] for r, c in missing], 1)
            for (r, c), block in zip(missing, forced, strict=True):
                out[r, c] = block.values[-1]
            self.option_reads["teacher_forced"] += len(missing)
        elif missing:
            self.option_reads["absent"] += len(missing)
            self.absent_reads[ABSENT_WITHOUT_ECHO] += len(missing)

    def next_token_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> np.ndarray:
        """As :meth:`Generator.next_token_logprobs`, through :meth:`read_next` (exact or NaN: see there); a prompt
        loses its leftmost tokens past ``max_context − 2`` (room for the option and one generated token)."""
        self._need("token_prompts", what="reading next-token log-probabilities")
        assert self.tokenizer is not None
        first = []
        for option in options:
            ids = self.tokenizer(option, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"option {option!r} encodes to no token")
            first.append(int(ids[0]))
        return self.read_next([self.encode_prompt(p, self.max_context - 2) for p in prompts], first)


def _visible(text: str) -> int:
    """How many non-space characters a text has (decoders differ in the spaces they clean up, not in the rest)."""
    return sum(1 for ch in text if not ch.isspace())


def surfaces(tokenizer: Any, ids: Sequence[int] | None = None) -> list[str]:
    """Each token's text as it reads inside a text, its leading space kept (default: every id of the vocabulary, in
    id order) — how servers that key top-k log-probs by text write it (" true"). A SentencePiece tokenizer's
    ``decode([id])`` drops the leading space of ``▁true`` (the token starts the decoded text); decoded after an
    anchor token (the first token of ``"a"``) and stripped of the anchor's text, it keeps it."""
    anchor = int(tokenizer("a", add_special_tokens=False)["input_ids"][0])
    wanted = range(len(tokenizer)) if ids is None else [int(i) for i in ids]
    plain = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
    head = tokenizer.decode([anchor], **plain)
    pairs = tokenizer.batch_decode([[anchor, i] for i in wanted], **plain)
    return [text[len(head) :] if text.startswith(head) else text for text in pairs]


def _load_tokenizer(ref: str | None) -> tuple[Any, str, str]:
    """The tokenizer of a model reference (embedded name, directory, hub id), its fingerprint and its directory."""
    if ref is None:
        return None, "", ""
    from transformers import AutoTokenizer

    resolved = resolve_model(ref)
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.path)
    except (OSError, ValueError) as exc:  # a directory without a tokenizer, an unreadable file
        raise AssetError(f"cannot load the tokenizer: {type(exc).__name__}: {exc}", str(resolved.path)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, resolved.fingerprint, str(resolved.path)
