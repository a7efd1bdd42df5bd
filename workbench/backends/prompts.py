"""Prompt building for causal LMs: chat rendering with a plain fallback, and context-aware truncation.

Two entry points, both pure functions of a tokenizer (no model, no torch import):

* :func:`render_chat` renders a user message (or a list of chat messages) in one of three styles
  (:func:`prompt_style`): ``chat`` — the tokenizer's chat template with ``add_generation_prompt=True``; ``plain`` —
  ``"System: ...\\nUser: ...\\nAssistant:"`` (:func:`render_plain`), the fallback for a tokenizer without a chat
  template; ``completion`` — ``"<system>\\n\\n<user>\\nAnswer:"`` (:func:`render_completion`) for base models, which
  continue text rather than follow chat turns. A generator's ``prompt_format`` (``auto`` | ``chat`` |
  ``completion``) picks the style; ``auto`` takes what the model directory declares (``workbench_model.json``, see
  :func:`workbench.assets.declared_prompt_format`), else ``chat`` when the tokenizer has a template, else ``plain``.
* :func:`build_prompt` fills a template with a question and an optional context, renders it, and — when the result
  is longer than a token budget — truncates **only the context**, dropping its tokens from the left (or the right,
  if asked). The question is never cut.

:class:`PromptRenderer` binds a tokenizer and logs the fallback warning once per renderer (the generator owns one).
Template placeholders are ``{question}`` and ``{context}``, substituted with ``str.replace`` (braces in the text are
safe).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.errors import ConfigError, DataError

log = logging.getLogger(__name__)

Messages = str | Sequence[dict[str, str]]
Style = Literal["chat", "plain", "completion"]

PROMPT_FORMATS = ("auto", "chat", "completion")
"""The values of ``generator.prompt_format``."""
COMPLETION_CUE = "Answer:"
"""The last line of a completion-format prompt: a base model continues after it."""

CONTEXT_TEMPLATE = "Context: {context}\n\nAnswer the question in a few words.\nQuestion: {question}"
CLOSED_BOOK_TEMPLATE = "Answer the question in a few words.\nQuestion: {question}"
ANSWER_SYSTEM = "You answer quiz questions. Reply with the answer only: a name, a date, a number or a short phrase."
"""The system prompt of every answer the workbench scores: the answer stage's, the collected features', SePer's and
the methods' closed-book and RAG answers (one string, so a generation made by one stage is a cache hit for another)."""


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def _as_messages(messages: Messages, system: str | None) -> list[dict[str, str]]:
    """Normalise a user string or a message list to a message list, prepending ``system`` when given."""
    if isinstance(messages, str):
        out = [{"role": "user", "content": messages}]
    else:
        out = [dict(m) for m in messages]
        for message in out:
            if "role" not in message or "content" not in message:
                raise ValueError(f"chat messages need 'role' and 'content' keys, got {sorted(message)}")
    if system is not None:
        if out and out[0]["role"] == "system":
            raise ValueError("system given twice: as argument and as the first message")
        out.insert(0, {"role": "system", "content": system})
    return out


def render_plain(messages: Messages, system: str | None = None) -> str:
    """Plain chat format for tokenizers without a template: ``Role: content`` lines, ending in ``Assistant:``."""
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in _as_messages(messages, system)]
    return "\n".join([*lines, "Assistant:"])


def render_completion(messages: Messages, system: str | None = None) -> str:
    """Completion format for base models, ending in :data:`COMPLETION_CUE` (the model continues after it).

    A single turn (a user message, optionally after a system message) is ``"<system>\\n\\n<user>\\nAnswer:"``
    (``"<user>\\nAnswer:"`` without a system text); several turns are the ``Role: content`` lines of
    :func:`render_plain` followed by ``"Answer:"`` instead of ``"Assistant:"``.
    """
    turns = _as_messages(messages, system)
    roles = [m["role"] for m in turns]
    if roles == ["user"]:
        return f"{turns[0]['content']}\n{COMPLETION_CUE}"
    if roles == ["system", "user"]:
        return f"{turns[0]['content']}\n\n{turns[1]['content']}\n{COMPLETION_CUE}"
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in turns]
    return "\n".join([*lines, COMPLETION_CUE])


def check_prompt_format(prompt_format: Any, key: str = "generator.prompt_format") -> None:
    """Refuse a ``prompt_format`` that is not one of :data:`PROMPT_FORMATS` (one-line :class:`ConfigError` at
    ``key``)."""
    if prompt_format not in PROMPT_FORMATS:
        raise ConfigError(f"unknown prompt format {prompt_format!r} (use {', '.join(PROMPT_FORMATS)})", key)


def prompt_style(prompt_format: str, tokenizer: Any, declared: str | None = None) -> Style:
    """The rendering style for a requested ``prompt_format`` (one of :data:`PROMPT_FORMATS`).

    ``completion`` → ``"completion"``; ``chat`` → ``"chat"`` when the tokenizer has a chat template, else the
    ``"plain"`` fallback; ``auto`` → ``declared`` (what the model directory declares, ``"chat"`` or
    ``"completion"``) when given, else as ``chat``. Anything else is a one-line :class:`ConfigError` naming
    ``generator.prompt_format``.
    """
    check_prompt_format(prompt_format)
    wanted = (declared or "chat") if prompt_format == "auto" else prompt_format
    if wanted == "completion":
        return "completion"
    return "chat" if has_chat_template(tokenizer) else "plain"


def render_chat(tokenizer: Any, messages: Messages, system: str | None = None, *, style: Style | None = None) -> str:
    """Render ``messages`` (a user string or chat messages) as the prompt text the model continues.

    ``style`` (:func:`prompt_style`; None: ``prompt_style("auto", tokenizer)``): ``chat`` uses the tokenizer's chat
    template with ``add_generation_prompt=True``, ``plain`` the format of :func:`render_plain` (the fallback when
    there is no template; this function does not warn — :class:`PromptRenderer` does, once), ``completion`` the
    format of :func:`render_completion`.
    """
    if style is None:
        style = prompt_style("auto", tokenizer)
    if style == "completion":
        return render_completion(messages, system)
    if style == "plain" or not has_chat_template(tokenizer):
        return render_plain(messages, system)
    return tokenizer.apply_chat_template(_as_messages(messages, system), tokenize=False, add_generation_prompt=True)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt, as the generator feeds them.

    Special tokens (e.g. BOS) are added by the tokenizer unless the text already starts with the BOS token's text
    (chat templates often render it), so a rendered prompt never gets a doubled BOS.
    """
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])


@dataclass(frozen=True)
class BuiltPrompt:
    """A rendered prompt: its ``text``, its length in tokens, and whether (and how much) context was cut."""

    text: str
    n_tokens: int
    truncated: bool
    context_tokens_dropped: int = 0


def fill_template(template: str, question: str, context: str | None) -> str:
    """Substitute ``{question}`` and ``{context}`` in ``template`` (missing context → empty string)."""
    if "{question}" not in template:
        raise ValueError("prompt template must contain the {question} placeholder")
    return template.replace("{context}", context or "").replace("{question}", question)


def build_prompt(
    tokenizer: Any,
    question: str,
    context: str | None = None,
    template: str | None = None,
    *,
    system: str | None = None,
    max_tokens: int | None = None,
    chat: bool = True,
    truncate_side: Literal["left", "right"] = "left",
    counter: Any = None,
    style: Style | None = None,
) -> BuiltPrompt:
    """Fill ``template`` with ``question`` and ``context``, render it, and fit it into ``max_tokens`` tokens.

    ``template`` defaults to :data:`CONTEXT_TEMPLATE` when a context is given and :data:`CLOSED_BOOK_TEMPLATE`
    otherwise. With ``chat`` the filled template is the user message of :func:`render_chat` (in ``style``, see
    there); without, it is used as is. When the rendered prompt exceeds ``max_tokens`` (typically
    ``max_context - max_new_tokens``), context tokens are dropped from ``truncate_side`` (default: the left, i.e.
    the start of the context) until it fits, and ``counter.truncated_prompts`` (a
    :class:`~workbench.backends.cost.CostCounter`) is incremented. The question and the template are never cut: if
    they alone exceed the budget a :class:`DataError` is raised.
    """
    if template is None:
        template = CONTEXT_TEMPLATE if context else CLOSED_BOOK_TEMPLATE

    def render(ctx: str | None) -> tuple[str, int]:
        filled = fill_template(template, question, ctx)
        text = render_chat(tokenizer, filled, system, style=style) if chat else filled
        return text, len(encode(tokenizer, text))

    text, n_tokens = render(context)
    if max_tokens is None or n_tokens <= max_tokens:
        return BuiltPrompt(text, n_tokens, truncated=False)
    _, bare_tokens = render("")
    if bare_tokens > max_tokens:
        raise DataError(
            f"the question and template alone need {bare_tokens} tokens, more than the budget of {max_tokens}",
            "prompt",
        )
    ctx_ids = list(tokenizer(context or "", add_special_tokens=False)["input_ids"])
    keep = len(ctx_ids) - (n_tokens - max_tokens)
    while True:
        kept = _keep_tokens(ctx_ids, max(keep, 0), truncate_side)
        text, n_tokens = render(tokenizer.decode(kept).lstrip() if kept else "")
        if n_tokens <= max_tokens or keep <= 0:
            break
        keep -= max(n_tokens - max_tokens, 1)  # re-tokenisation at the seams can add a token or two
    if counter is not None:
        counter.truncated_prompts += 1
    return BuiltPrompt(text, n_tokens, truncated=True, context_tokens_dropped=len(ctx_ids) - len(kept))


def _keep_tokens(ids: list[int], keep: int, side: str) -> list[int]:
    """The ``keep`` ids that survive truncation from ``side`` ("left" drops the first ids)."""
    if keep <= 0:
        return []
    return ids[-keep:] if side == "left" else ids[:keep]


class PromptRenderer:
    """Prompt building bound to one tokenizer and one style; warns once (per renderer) when a chat style falls back
    to the plain format.

    ``prompt_format`` (``auto`` | ``chat`` | ``completion``) and ``declared`` (the model directory's declared format,
    or None) give :attr:`style` through :func:`prompt_style`; every prompt this renderer renders — :meth:`chat` and
    :meth:`build` — uses it.
    """

    def __init__(self, tokenizer: Any, name: str = "model", prompt_format: str = "auto", declared: str | None = None):
        self.tokenizer = tokenizer
        self.name = name
        self.style: Style = prompt_style(prompt_format, tokenizer, declared)
        self.fallback_warnings = 0
        if self.style == "completion":
            log.info("prompts of %s use the completion format ('...\\n%s')", name, COMPLETION_CUE)

    def _warn_fallback(self) -> None:
        """Log the no-chat-template warning the first time only."""
        if self.style == "plain" and self.fallback_warnings == 0:
            self.fallback_warnings += 1
            log.warning(
                "tokenizer of %s has no chat template; using the plain 'System/User/Assistant:' format", self.name
            )

    def chat(self, messages: Messages, system: str | None = None) -> str:
        """:func:`render_chat` with this renderer's tokenizer."""
        self._warn_fallback()
        return render_chat(self.tokenizer, messages, system, style=self.style)

    def build(self, question: str, context: str | None = None, template: str | None = None, **kwargs: Any):
        """:func:`build_prompt` with this renderer's tokenizer (same keyword arguments)."""
        if kwargs.get("chat", True):
            self._warn_fallback()
        return build_prompt(self.tokenizer, question, context, template, style=self.style, **kwargs)


def cut_text(text: str, max_chars: int | None) -> str:
    """``text`` cut to at most ``max_chars`` characters at a word boundary, `` ...`` marking a cut (None: uncut)."""
    if max_chars is not None and len(text) > max_chars:
        return text[:max_chars].rsplit(" ", 1)[0] + " ..."
    return text


def passage_line(title: str, text: str, max_chars: int | None) -> str:
    """One passage as every answering prompt shows it: ``"title: text"``, the text cut by :func:`cut_text`.

    The collection, the methods and the runtime all format passages with this function, so a bundle's decisions
    see exactly the prompts its features were collected with."""
    return f"{title}: {cut_text(text, max_chars)}"


def number_chunks(chunks: Sequence[str]) -> str:
    """The context block: ``[i] chunk`` lines in rank order (DENSE spec §5.5 keeps the retrieval order)."""
    return "\n".join(f"[{i}] {chunk}" for i, chunk in enumerate(chunks, start=1))


def format_passages(titles: list[str], texts: list[str], max_chars: int) -> str:
    """Numbered passages ``[i] title: text`` for a prompt (:func:`passage_line` under :func:`number_chunks`)."""
    return number_chunks([passage_line(t, x, max_chars) for t, x in zip(titles, texts, strict=True)])
