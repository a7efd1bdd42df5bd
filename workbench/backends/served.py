"""A generator reached through the OpenAI protocol: the same interface as the in-process generator, served weights.

:class:`ServedGenerator` answers :meth:`generate` / :meth:`sample`, :meth:`score`, :meth:`next_token_logprobs`,
:meth:`build_prompt` and :meth:`render_chat` as :class:`~workbench.backends.generator.Generator` does, so stages,
methods, studies and the runtime do not know which one runs. It talks to any OpenAI-compatible server
(docs/served-models.md) through :class:`~workbench.backends.served_client.ServedClient` and probes it once
(:func:`~workbench.backends.served_probe.probe`).

Prompts: with the model's tokenizer (``tokenizer``: an embedded name, a directory or a hub id) they are rendered here
exactly as in-process — same chat template, same text, same generation-cache keys and prompt fingerprints — and sent
as token ids where the server takes them (else as text). Without one, the model is reached by chat only and the
server's own chat template renders the messages (recorded as ``capabilities.chat_template == "server"``).

What a served answer holds, and how it departs from the in-process one:

* text, finish reason, the chosen tokens' raw log-probs: the same (servers report raw, T = 1 log-probs);
* ``entropies``: **approximated** from the top-k log-probs at each position as
  −Σ_top-k p log p − r log r, with r the probability mass outside the top k (a lower bound of the entropy; exact when
  the top k cover the distribution) — see :func:`topk_entropy`;
* :meth:`next_token_logprobs`: an option outside the top k is given the k-th log-prob (an upper bound) and counted
  in :attr:`floored_reads`;
* ``token_ids``: the server's ids where it returns them (``return_tokens_as_token_ids``), else -1;
* EOS: a sequence that ended with EOS carries its log-prob when the server lists the EOS token last (vLLM and
  ``serve-model`` do); otherwise it ends as a stop and its EOS term is absent;
* ``logprobs_processed``: 0 for greedy, the raw log-probs at temperature 1 with no top-k / top-p, NaN otherwise
  (servers do not report the processed distribution).

Hidden states, attention weights and per-step logits (INSIDE, Attention Score, contrastive decoding) are not in the
protocol: asking for them is a one-line error naming the capability.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from workbench.backends.capabilities import Capabilities
from workbench.backends.cost import CostCounter
from workbench.backends.generation_lookup import CachedGenerations, decoding_params
from workbench.backends.generation_types import DecodingParams, Generation, Scored
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
from workbench.backends.served_client import ServedClient, ServedModelError, ServedSettings
from workbench.core.errors import AssetError
from workbench.core.hashing import stable_hash

log = logging.getLogger(__name__)

CHAT_MARK = "\x00chat\x00"
"""Prefix of a prompt that is a JSON list of chat messages (chat-only mode: the server renders them)."""
CHARS_PER_TOKEN = 4
"""Token estimate of a text in chat-only mode (no tokenizer here): about four characters per token."""
DEFAULT_TOP_LOGPROBS = 20
"""Alternatives asked per position (OpenAI's own maximum; vLLM's default ``max_logprobs``)."""


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


def _token_id(token: str) -> int:
    """The id in a ``"token_id:<id>"`` token (vLLM's ``return_tokens_as_token_ids``), else -1."""
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[9:])
        except ValueError:
            return -1
    return -1


class ServedGenerator(CachedGenerations):
    """A served causal LM behind the in-process generator's interface (see the module docstring).

    ``settings`` say where it is; ``tokenizer`` is the model's tokenizer reference (None: chat-only, the server's
    template); ``capabilities`` / ``probe_record`` skip the probe when given (a run that probed already).
    ``max_context`` defaults to the tokenizer's ``model_max_length`` when sensible, else 2048; ``top_logprobs`` is how
    many alternatives to ask per position (at most what the server gives). Costs go to ``counter`` as in-process:
    ``lm_calls`` one per prompt sent, ``lm_batches`` one per call of this object, ``prefill_tokens`` /
    ``decoded_tokens`` from the server's ``usage``, ``scored_tokens`` for :meth:`score`.
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
        from workbench.assets import ResolvedModel
        from workbench.backends.served_probe import fingerprint_probe, probe

        self.settings = settings
        self.client = ServedClient(settings)
        self.cache = cache
        self.counter = counter if counter is not None else CostCounter()
        self.seed = seed
        self.batch_size = batch_size
        self.dtype = "served"
        self.device = "served"
        self.joinable_cache = None
        self.floored_reads = 0
        self.tokenizer, tokenizer_fp, tokenizer_path = _load_tokenizer(tokenizer)
        if capabilities is None:
            capabilities, probe_record = probe(self.client, self.tokenizer)
        self.capabilities = capabilities
        self.top_logprobs = min(int(top_logprobs), capabilities.top_logprobs) if capabilities.logprobs else 0
        limit = getattr(self.tokenizer, "model_max_length", None)
        self.max_context = int(max_context or (limit if isinstance(limit, int) and limit < 1_000_000 else 2048))
        self.eos_ids = frozenset({self.tokenizer.eos_token_id} if self.tokenizer is not None else ())
        self.prompts = None
        if self.tokenizer is not None:
            from workbench.assets import declared_prompt_format

            declared = declared_prompt_format(tokenizer_path)
            self.prompts = PromptRenderer(self.tokenizer, settings.model, prompt_format, declared)
        else:
            log.info("no tokenizer for %s: prompts go through the server's chat template", settings.model)
        self.fingerprint = stable_hash(["served", settings.model, tokenizer_fp])  # until the probe answers
        if probe_record is None or not getattr(probe_record, "texts", None):
            probe_record = fingerprint_probe(self, settings.model)
        self.probe_record = probe_record
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
        if self.capabilities.logprobs:
            out["logprobs"] = self.top_logprobs
        if self.capabilities.token_ids:
            extra["return_tokens_as_token_ids"] = True
        if extra:
            out["extra_body"] = extra
        return out

    def _prompt_payload(self, prompt: str, params: DecodingParams) -> str | list[int]:
        """Token ids (exactly the in-process ids, left-truncated) where the server takes them, else the text."""
        if self.tokenizer is not None and self.capabilities.token_prompts:
            return self.encode_prompt(prompt, self.max_context - params.max_new_tokens)
        return prompt

    def _generate_missing(self, prompts: list[str], needed: int, params: DecodingParams) -> list[list[Generation]]:
        """The ``needed`` samples of each prompt: ``batch_size`` prompts per request where the server takes prompt
        lists and ``n`` (so the engine batches them as in-process), else one request per prompt (or per sample)."""
        if any(p.startswith(CHAT_MARK) for p in prompts) or not (needed == 1 or self.capabilities.n):
            return self.client.map(lambda p: self._request(p, needed, params), prompts)
        payloads = [self._prompt_payload(p, params) for p in prompts]
        answers = self._batched(payloads, needed, **self._request_params(params))
        out = []
        for prompt, (choices, prompt_tokens) in zip(prompts, answers, strict=True):
            try:
                out.append([self._parse_choice(c, prompt, j, prompt_tokens, params) for j, c in enumerate(choices)])
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise self.client.fail("a completion answer was malformed", exc) from None
        return out

    def _batched(self, payloads: list[Any], n: int, **params: Any) -> list[tuple[list[dict[str, Any]], int]]:
        """``(choices, prompt tokens)`` of each payload (a text or a token-id list), ``batch_size`` payloads per
        request where the server takes prompt lists (``capabilities.prompt_lists``), ``max_concurrency`` requests in
        flight. Costs: one LM call per payload, the server's token counts."""
        size = self.batch_size if self.capabilities.prompt_lists else 1
        chunks = [payloads[i : i + size] for i in range(0, len(payloads), size)]

        def call(chunk: list[Any]) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
            answer = self.client.completion(chunk if len(chunk) > 1 else chunk[0], n=n, **params)
            try:
                choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
            except (KeyError, TypeError, AttributeError) as exc:
                raise self.client.fail("a completion answer was malformed", exc) from None
            if len(choices) != len(chunk) * n:
                raise self.client.fail(f"asked for {len(chunk) * n} choices, the server answered {len(choices)}")
            return [choices[i * n : (i + 1) * n] for i in range(len(chunk))], answer.get("usage") or {}

        out: list[tuple[list[dict[str, Any]], int]] = []
        for chunk, (groups, usage) in zip(chunks, self.client.map(call, chunks), strict=True):
            total = int(usage.get("prompt_tokens") or 0)
            self.counter.lm_calls += len(chunk)
            self.counter.prefill_tokens += total
            self.counter.decoded_tokens += int(usage.get("completion_tokens") or 0)
            for payload, group in zip(chunk, groups, strict=True):
                out.append((group, len(payload) if isinstance(payload, list) else total // len(chunk)))
        return out

    def _request(self, prompt: str, needed: int, params: DecodingParams) -> list[Generation]:
        """The ``needed`` samples of one prompt (one request with ``n``, or one per sample)."""
        if prompt.startswith(CHAT_MARK):
            return self._chat_request(prompt, needed, params)
        payload = self._prompt_payload(prompt, params)
        base = self._request_params(params)
        if needed == 1 or self.capabilities.n:
            answers = [self.client.completion(payload, n=needed, **base)]
        else:  # one request per sample, each with its own seed
            answers = [
                self.client.completion(payload, n=1, **{**base, "seed": int(params.seed or 0) * 1000 + j})
                for j in range(needed)
            ]
        gens: list[Generation] = []
        for answer in answers:
            try:
                choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
                usage = answer.get("usage") or {}
                self.counter.lm_calls += 1
                self.counter.prefill_tokens += int(usage.get("prompt_tokens") or 0)
                self.counter.decoded_tokens += int(usage.get("completion_tokens") or 0)
                prompt_tokens = int(usage.get("prompt_tokens") or 0)
                gens.extend(self._parse_choice(c, prompt, len(gens), prompt_tokens, params) for c in choices)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise self.client.fail("a completion answer was malformed", exc) from None
        if len(gens) < needed:
            raise self.client.fail(f"asked for {needed} samples, the server answered {len(gens)}")
        return gens[:needed]

    def _parse_choice(
        self, choice: dict[str, Any], prompt: str, index: int, prompt_tokens: int, params: DecodingParams
    ) -> Generation:
        text = str(choice.get("text") or "")
        block = choice.get("logprobs") or {}
        tokens = [str(t) for t in block.get("tokens") or []]
        values = [float("nan") if v is None else float(v) for v in block.get("token_logprobs") or []]
        tops = list(block.get("top_logprobs") or [None] * len(tokens))
        return self._generation(
            text, tokens, values, tops, choice.get("finish_reason"), prompt, index, prompt_tokens, params
        )

    def _generation(
        self,
        text: str,
        tokens: list[str],
        values: list[float],
        tops: list[Any],
        finish: str | None,
        prompt: str,
        index: int,
        prompt_tokens: int,
        params: DecodingParams,
    ) -> Generation:
        """One :class:`Generation` from a served answer (tokens, their log-probs and top-k), aligned as in-process."""
        ids = [_token_id(t) for t in tokens]
        eos_logprob = eos_entropy = None
        reason, keep = "length", len(tokens)
        if tokens and self._is_eos(ids[-1], tokens[-1]):
            eos_logprob, eos_entropy = values[-1], topk_entropy(tops[-1])
            tokens, values, tops, ids = tokens[:-1], values[:-1], tops[:-1], ids[:-1]
            reason, keep = "eos", len(tokens)
        elif finish != "length":
            # a stop string (the tokens past the text are cut, as in-process), or EOS the server did not list
            keep = self._covering(tokens, ids, text)
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
            prompt_tokens=prompt_tokens,
            eos_logprob=eos_logprob,
            eos_entropy=eos_entropy,
        )

    def _is_eos(self, token_id: int, token: str) -> bool:
        if token_id >= 0:
            return token_id in self.eos_ids
        eos = getattr(self.tokenizer, "eos_token", None)
        return bool(eos) and token == eos

    def _covering(self, tokens: list[str], ids: list[int], text: str) -> int:
        """The shortest token prefix whose text covers ``text`` (ids decoded as in-process where known)."""
        if self.tokenizer is not None and ids and all(i >= 0 for i in ids):
            for k in range(len(ids) + 1):
                if len(self.tokenizer.decode(ids[:k], skip_special_tokens=True)) >= len(text):
                    return k
            return len(ids)
        length = 0
        for k, token in enumerate(tokens):
            if length >= len(text):
                return k
            length += len(token)
        return len(tokens)

    def _chat_request(self, prompt: str, needed: int, params: DecodingParams) -> list[Generation]:
        """Chat-only mode: the messages go to the chat route, the server's template renders them."""
        messages = json.loads(prompt[len(CHAT_MARK) :])
        base = self._request_params(params)
        base.pop("logprobs", None)
        base.get("extra_body", {}).pop("return_tokens_as_token_ids", None)
        if self.capabilities.logprobs:
            base["logprobs"] = True
            base["top_logprobs"] = self.top_logprobs
        answer = self.client.chat(messages, n=needed if self.capabilities.n else 1, **base)
        self.counter.lm_calls += 1
        usage = answer.get("usage") or {}
        self.counter.prefill_tokens += int(usage.get("prompt_tokens") or 0)
        self.counter.decoded_tokens += int(usage.get("completion_tokens") or 0)
        gens = []
        for j, choice in enumerate(sorted(answer["choices"], key=lambda c: c.get("index", 0))):
            content = (choice.get("logprobs") or {}).get("content") or []
            tokens = [str(item["token"]) for item in content]
            values = [float(item["logprob"]) for item in content]
            tops = [{t["token"]: float(t["logprob"]) for t in item.get("top_logprobs") or []} for item in content]
            text = str((choice.get("message") or {}).get("content") or "")
            gens.append(
                self._generation(
                    text,
                    tokens,
                    values,
                    tops,
                    choice.get("finish_reason"),
                    prompt,
                    j,
                    int(usage.get("prompt_tokens") or 0),
                    params,
                )
            )
        if len(gens) < needed:
            gens.extend(self._chat_request(prompt, needed - len(gens), replace(params, seed=(params.seed or 0) + 1)))
        return gens[:needed]

    # ------------------------------------------------------------------ scoring and next-token reads
    def _need(self, *names: str, what: str) -> None:
        lacking = [n for n in names if not self.capabilities.has(n)]
        if self.tokenizer is None:
            lacking.append("a local tokenizer (generator.tokenizer)")
        if lacking:
            raise ServedModelError(
                f"{what} needs {', '.join(lacking)}, which this server does not give", self.settings.base_url
            )

    def score(self, prompts: Sequence[str], continuations: Sequence[str], *, add_eos: bool = False) -> list[Scored]:
        """As :meth:`Generator.score`: the prompt's and the continuation's token ids (tokenised apart, as
        in-process) sent with ``echo`` (and one generated token, ignored: not every server takes ``max_tokens = 0``);
        entropies from the top-k (see :func:`topk_entropy`)."""
        self._need("echo", "token_prompts", what="scoring a continuation (echo)")
        prompts, continuations = list(prompts), list(continuations)
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        assert self.tokenizer is not None
        jobs = []
        for prompt, cont in zip(prompts, continuations, strict=True):
            ids = list(self.tokenizer(cont, add_special_tokens=False)["input_ids"])
            if add_eos:
                ids.append(self.tokenizer.eos_token_id)
            jobs.append((prompt, cont, self.encode_prompt(prompt, max(self.max_context - len(ids), 1)), ids))
        with self.counter.timed("score"):
            answers = self._echo([job[2] + job[3] for job in jobs])
        self.counter.lm_batches += 1
        out = []
        for (prompt, cont, p_ids, c_ids), (values, tops) in zip(jobs, answers, strict=True):
            span = slice(len(p_ids), len(p_ids) + len(c_ids))
            lp = np.asarray(values[span], dtype=np.float32)
            ent = np.asarray([topk_entropy(t) for t in tops[span]], dtype=np.float32)
            self.counter.scored_tokens += len(c_ids)
            mean = float(lp.mean()) if len(lp) else float("nan")
            out.append(Scored(prompt, cont, np.asarray(c_ids, dtype=np.int64), lp, ent, float(lp.sum()), mean))
        return out

    def _echo(self, id_lists: list[list[int]]) -> list[tuple[list[float], list[Any]]]:
        """Per position of each id list: the raw log-prob of the token there and the top-k there (position 0: NaN);
        one token is generated and ignored (not every server takes ``max_tokens = 0``)."""
        extra = {"return_tokens_as_token_ids": True} if self.capabilities.token_ids else None
        params = {"max_tokens": 1, "echo": True, "logprobs": max(self.top_logprobs, 1), "temperature": 0.0}
        out = []
        for ids, (choices, _) in zip(id_lists, self._batched(id_lists, 1, extra_body=extra, **params), strict=True):
            block = choices[0].get("logprobs") or {}
            values = [float("nan") if v is None else float(v) for v in block.get("token_logprobs") or []]
            tops = list(block.get("top_logprobs") or [])
            if len(values) < len(ids):
                raise self.client.fail(f"echo returned {len(values)} log-probs for a {len(ids)}-token prompt")
            out.append((values[: len(ids)], tops[: len(ids)]))
        return out

    def read_next(self, id_lists: Sequence[list[int]], option_ids: Sequence[int]) -> np.ndarray:
        """``(len(id_lists), len(option_ids))`` raw log-probs of each option token as the token after each id list,
        read from the top-k of a one-token greedy completion; an option outside the top k gets the k-th log-prob
        (an upper bound; counted in :attr:`floored_reads`)."""
        self._need("top_logprobs", "token_prompts", what="reading next-token log-probabilities")
        extra = {"return_tokens_as_token_ids": True} if self.capabilities.token_ids else None
        params = {"max_tokens": 1, "temperature": 0.0, "logprobs": self.top_logprobs, "extra_body": extra}
        with self.counter.timed("score"):
            answers = self._batched([list(ids) for ids in id_lists], 1, **params)
        self.counter.lm_batches += 1
        tops = []
        for choices, _ in answers:
            first = ((choices[0].get("logprobs") or {}).get("top_logprobs") or [None])[0]
            tops.append(dict(first or {}))
        assert self.tokenizer is not None
        names = [f"token_id:{i}" if self.capabilities.token_ids else self.tokenizer.decode([i]) for i in option_ids]
        out = np.zeros((len(tops), len(option_ids)), dtype=np.float32)
        for row, top in enumerate(tops):
            floor = min(top.values()) if top else float("-inf")
            for col, name in enumerate(names):
                if name in top:
                    out[row, col] = top[name]
                else:
                    out[row, col] = floor
                    self.floored_reads += 1
        return out

    def next_token_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> np.ndarray:
        """As :meth:`Generator.next_token_logprobs`, through :meth:`read_next` (top-k: see there)."""
        self._need("top_logprobs", "token_prompts", what="reading next-token log-probabilities")
        assert self.tokenizer is not None
        first = []
        for option in options:
            ids = self.tokenizer(option, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"option {option!r} encodes to no token")
            first.append(int(ids[0]))
        return self.read_next([self.encode_prompt(p, self.max_context) for p in prompts], first)


def _load_tokenizer(ref: str | None) -> tuple[Any, str, str]:
    """The tokenizer of a model reference (embedded name, directory, hub id), its fingerprint and its directory."""
    if ref is None:
        return None, "", ""
    from transformers import AutoTokenizer

    from workbench.backends.lora import resolve_model

    resolved = resolve_model(ref)
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.path)
    except (OSError, ValueError) as exc:  # a directory without a tokenizer, an unreadable file
        raise AssetError(f"cannot load the tokenizer: {type(exc).__name__}: {exc}", str(resolved.path)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, resolved.fingerprint, str(resolved.path)
