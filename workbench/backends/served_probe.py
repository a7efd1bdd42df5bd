"""Find out once what an OpenAI-compatible server gives (docs/served-models.md), and fingerprint the model it serves.

:func:`probe` sends a handful of tiny requests — ``GET /models``, then completions with ``logprobs``, with a token-id
prompt, with ``echo``, with ``n = 2`` and a seed (twice) — and returns :class:`~workbench.backends.capabilities
.Capabilities` plus a :class:`ProbeRecord`: the greedy tokens and log-probabilities of :data:`PROBE_PROMPTS`, which
identify the served weights well enough to tell another model apart (a bundle keeps them and refuses a server whose
probe disagrees, see :func:`compare_probes`). A server that answers the completions route with 404 is probed through
the chat route only (its own chat template renders the prompts).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from workbench.backends.capabilities import Capabilities
from workbench.backends.served_answers import InvalidAnswer, LogprobBlock, chat_logprobs, choices, completion_logprobs
from workbench.backends.served_client import ServedClient, ServedModelError

PROBE_PROMPTS = (
    "The capital of France is",
    "Question: who wrote Hamlet?\nAnswer:",
    "1, 2, 3, 4,",
)
"""Fixed prompts whose greedy continuations fingerprint a served model (plain text, no chat template)."""
PROBE_TOKENS = 6
"""Greedy tokens per probe prompt."""
ASKED_TOP_LOGPROBS = (1000, 100, 20, 5, 1)
"""Top-logprob counts tried in turn, largest first: a server refuses more than it allows (vLLM: 400)."""


@dataclass
class ProbeRecord:
    """What the probe saw: the served ``model`` name, the ``context`` window in tokens (the probe sets the one the
    server states, ``max_model_len`` in its ``/v1/models`` entry, None when it states none;
    :func:`fingerprint_probe` then records the window the generator runs with, whatever its source), and per probe
    prompt the greedy ``texts`` and their token log-probs (``logprobs``)."""

    model: str
    context: int | None = None
    texts: list[str] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the run manifest and the bundle manifest keep it)."""
        return asdict(self)


def _is_status(exc: ServedModelError, *codes: int) -> bool:
    return any(f"HTTP {code}" in str(exc) for code in codes)


def _try(client: ServedClient, prompt: Any, **params: Any) -> dict[str, Any] | None:
    """A completion sent once, or None when the server refuses it (4xx, or a 500 from a server that reports a
    request it cannot validate that way, as llama.cpp's does: not supported)."""
    try:
        return client.completion(prompt, retry=False, **params)
    except ServedModelError as exc:
        if _is_status(exc, 400, 404, 405, 413, 422, 500, 501):
            return None
        raise


def _choices(answer: dict[str, Any] | None, count: int) -> list[dict[str, Any]] | None:
    """The answer's ``count`` choices, or None when it holds another number of them (or none)."""
    try:
        return choices(answer, count) if answer is not None else None
    except InvalidAnswer:
        return None


def _block(answer: dict[str, Any] | None, width: int, *, echo: bool = False) -> LogprobBlock | None:
    """The first choice's log-prob block when it is there and well formed, else None (not given)."""
    found = _choices(answer, 1)
    if not found:
        return None
    try:
        return completion_logprobs(found[0], "probe", width=width, echo=echo)
    except InvalidAnswer:
        return None


def _top_logprobs(client: ServedClient, prompt: str, token_ids: bool) -> tuple[bool, int]:
    """(chosen-token log-probs given, the most alternatives per position the server returns)."""
    extra = {"return_tokens_as_token_ids": True} if token_ids else None
    for asked in ASKED_TOP_LOGPROBS:
        answer = _try(client, prompt, max_tokens=2, temperature=0.0, logprobs=asked, extra_body=extra)
        if answer is None:
            continue
        block = _block(answer, 0)
        if block is None or not block.tokens:
            return False, 0
        width = min((len(t) for t in block.tops if t), default=0)
        return True, min(width, asked)
    if _try(client, prompt, max_tokens=2, temperature=0.0) is None:
        raise client.fail("the completions route refused a plain 2-token greedy request")
    return False, 0


def _stated_context(entry: dict[str, Any]) -> int | None:
    """The context window a ``/v1/models`` entry states (``max_model_len``: vLLM, ``serve-model``), else None."""
    value = entry.get("max_model_len")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _stated_eos(entry: dict[str, Any]) -> tuple[int, ...]:
    """The token ids a ``/v1/models`` entry states end a sequence (``eos_token_id``: an id or a list of ids, as in
    a model's generation config), else none."""
    value = entry.get("eos_token_id")
    values = value if isinstance(value, list) else [value]
    return tuple(sorted({v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0}))


def probe(client: ServedClient, tokenizer: Any = None) -> tuple[Capabilities, ProbeRecord]:
    """Probe the server behind ``client`` (a few tiny requests); ``tokenizer`` (the model's, optional) gives the token
    ids of the token-id prompt test. One-line :class:`ServedModelError` when the server is unreachable, refuses the
    key, or does not serve ``client.settings.model``. The record holds the model name and the context window the
    server states: the generator fills in its probe answers with :func:`fingerprint_probe`."""
    entries = client.models()
    model = client.settings.model
    entry = next((m for m in entries if m["id"] == model), None)
    if entry is None:
        shown = ", ".join(repr(m["id"][:80]) for m in entries[:10]) or "none"
        raise client.fail(f"the server does not serve model {model!r} (it serves: {shown})")
    record = ProbeRecord(model=model, context=_stated_context(entry))
    eos = _stated_eos(entry)
    try:
        client.completion(PROBE_PROMPTS[0], max_tokens=1, temperature=0.0)
    except ServedModelError as exc:
        if not _is_status(exc, 404, 405):
            raise
        return replace(_probe_chat(client), eos_token_ids=eos), record
    ids_answer = _try(
        client,
        PROBE_PROMPTS[0],
        max_tokens=1,
        temperature=0.0,
        logprobs=1,
        extra_body={"return_tokens_as_token_ids": True},
    )
    ids_block = _block(ids_answer, 0)
    token_ids = ids_block is not None and all(str(t).startswith("token_id:") for t in ids_block.tokens or ["x"])
    # with ids as keys, tokens that decode to the same text do not collapse into one entry
    logprobs, width = _top_logprobs(client, PROBE_PROMPTS[0], token_ids)
    token_prompts = False
    if tokenizer is not None:
        ids = list(tokenizer(PROBE_PROMPTS[0], add_special_tokens=False)["input_ids"])
        token_prompts = _choices(_try(client, ids, max_tokens=1, temperature=0.0), 1) is not None
    echo = logprobs and _echo_agrees(client)
    prompt_lists = _choices(_try(client, list(PROBE_PROMPTS[:2]), max_tokens=1, temperature=0.0), 2) is not None
    first = _choices(_try(client, PROBE_PROMPTS[2], max_tokens=4, temperature=1.0, n=2, seed=1234), 2)
    second = (
        _choices(_try(client, PROBE_PROMPTS[2], max_tokens=4, temperature=1.0, n=2, seed=1234), 2) if first else None
    )
    seed = bool(first and second) and [c.get("text") for c in first] == [c.get("text") for c in second]
    capabilities = Capabilities(
        logprobs=logprobs,
        top_logprobs=width,
        echo=echo,
        token_prompts=token_prompts,
        prompt_lists=prompt_lists,
        token_ids=token_ids,
        n=first is not None,
        seed=seed,
        completions=True,
        chat_template="local" if tokenizer is not None else "server",
        eos_token_ids=eos,
    )
    return capabilities, record


def _echo_agrees(client: ServedClient) -> bool:
    """Whether ``echo`` gives prompt log-probs that agree with generation: the greedy first token of a prompt, read
    back as the last prompt token of ``prompt + token`` with ``echo``, must carry the same log-prob (within 0.05
    nats). A server that aligns prompt log-probs one position off (llama.cpp on a model without BOS) fails this."""
    prompt = PROBE_PROMPTS[1]
    first = _block(_try(client, prompt, max_tokens=1, temperature=0.0, logprobs=1), 1)
    if first is None or not first.tokens:
        return False
    echoed_answer = _try(client, prompt + first.tokens[0], max_tokens=1, echo=True, logprobs=1, temperature=0.0)
    echoed = _block(echoed_answer, 1, echo=True)
    if echoed is None or not echoed.values or not math.isnan(echoed.values[0]):
        return False
    offsets = ((echoed_answer or {}).get("choices") or [{}])[0].get("logprobs", {}).get("text_offset") or []
    for offset, value in zip(offsets, echoed.values, strict=False):
        if offset == len(prompt):
            return math.isfinite(value) and abs(value - first.values[0]) <= 0.05
    return False


def _probe_chat(client: ServedClient) -> Capabilities:
    """Capabilities of a chat-only server (the completions route answered 404)."""
    width, logprobs = 0, False
    for asked in (20, 5, 1):
        try:
            answer = client.chat(
                [{"role": "user", "content": PROBE_PROMPTS[0]}],
                retry=False,
                max_tokens=2,
                temperature=0.0,
                logprobs=True,
                top_logprobs=asked,
            )
        except ServedModelError as exc:
            if _is_status(exc, 400, 422):
                continue
            raise
        found = _choices(answer, 1)
        try:
            block = chat_logprobs(found[0], "probe", width=0) if found else None
        except InvalidAnswer:
            block = None
        logprobs = block is not None and bool(block.tokens)
        width = min((len(t or {}) for t in block.tops), default=0) if block is not None else 0
        break
    return Capabilities(logprobs=logprobs, top_logprobs=width, completions=False, chat_template="server")


def fingerprint_probe(generator: Any, model: str) -> ProbeRecord:
    """The greedy answers (:data:`PROBE_TOKENS` tokens, no stop string) of :data:`PROBE_PROMPTS` and their token
    log-probs, by any generator — in-process or served, through the same :class:`~workbench.backends.generation_types
    .Generation` alignment — bypassing the generation cache, with the context window the generator runs with. A
    chat-only served model gets the prompts as chat
    messages (its server renders them), so its probe is comparable only with another chat-only one."""
    prompts = list(PROBE_PROMPTS)
    capabilities = getattr(generator, "capabilities", None)
    if capabilities is not None and not capabilities.completions:
        prompts = [generator.render_chat(p) for p in prompts]
    cache, generator.cache = generator.cache, None
    try:
        answers = generator.generate(prompts, max_new_tokens=PROBE_TOKENS, temperature=0.0, stop=())
    finally:
        generator.cache = cache
    return ProbeRecord(
        model=model,
        context=int(generator.max_context),
        texts=[a.text for a in answers],
        logprobs=[[round(float(v), 6) for v in a.logprobs] for a in answers],
    )


def compare_probes(expected: dict[str, Any], seen: dict[str, Any], tolerance: float = 0.05) -> str | None:
    """None when two probe records (:meth:`ProbeRecord.to_dict`) show the same model: the same greedy texts and
    token log-probs within ``tolerance`` nats (float formats and kernels differ a little); else what differs."""
    if expected.get("texts") != seen.get("texts"):
        return f"greedy probe answers differ ({expected.get('texts')!r} vs {seen.get('texts')!r})"
    for a, b in zip(expected.get("logprobs") or [], seen.get("logprobs") or [], strict=False):
        if len(a) != len(b):
            return "greedy probe answers have different token counts"
        worst = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
        if not math.isfinite(worst) or worst > tolerance:
            return f"greedy probe log-probs differ by {worst:.3g} nats (tolerance {tolerance})"
    return None
