"""Self-Detection's question paraphrases (TTLM; the ``paraphrase_answers`` stat): the rewording prompt and its forced
reply opening, the length cap of a paraphrase, one sampling call for every question's P − 1 paraphrases, and the
cleaning of a small chat model's reply down to the one reworded question (:func:`clean_paraphrase`)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from workbench.uncertainty.stat_settings import StatSettings

__all__ = [
    "PARAPHRASE_PROMPT",
    "PARAPHRASE_REPLY_PREFIX",
    "clean_paraphrase",
    "paraphrase_token_cap",
    "sample_paraphrases",
]

PARAPHRASE_PROMPT = (
    "Reword this question so that it asks exactly the same thing in different words. "
    "Reply with the new question only.\nQuestion: {question}"
)
PARAPHRASE_REPLY_PREFIX = "Reworded question:"
"""Appended after the rendered paraphrase chat: the reply then starts with the reworded question, not a preamble,
so a length cap near the question's length is enough."""


_LEAD_IN = re.compile(
    r"^(?:(?:sure|certainly|of course|okay|ok|absolutely|alright|no problem|here you go)\b[\s!.,:;-]*"
    r"|(?:great|good question|happy to help)[!.,:;-]+\s*)",
    flags=re.IGNORECASE,
)
_HERE_IS = re.compile(r"^(?:here\s+is|here's|here\s+are)\b[^:?\n]{0,80}(?::\s*|$)", flags=re.IGNORECASE)
_LABEL = re.compile(
    r"^(?:(?:the|a|an|my|your|one)\s+)?"
    r"(?:(?:new|reworded|rephrased|paraphrased|rewritten|restated|reformulated|revised|alternative|alternate|"
    r"different|possible)\s+)*"
    r"(?:question|version|paraphrase|rephrasing|rewording|reformulation|rewrite|query|wording|q"
    r"|reworded|rephrased|paraphrased|rewritten|restated)"
    r"\s*(?:#?\d{1,2})?\s*[:：]\s*",
    flags=re.IGNORECASE,
)
_SAID_AS = re.compile(
    r"^.{0,120}?\b(?:reworded|rephrased|paraphrased|rewritten|restated|reformulated|asked|phrased)\s+as"
    r"(?:\s+follows)?\s*(?::\s*|(?=[\"“'‘]))",
    flags=re.IGNORECASE,
)
_NUMBERING = re.compile(r"^(?:\(?\d{1,2}[.)]|[-*•]|#{1,6})\s+")
_OPENING_QUOTES = {'"': '"', "“": "”", "‘": "’", "'": "'", "«": "»", "`": "`"}


def _strip_quotes(text: str) -> str:
    """The text inside a leading quote and its closing quote (anything after the closing quote dropped); a closing
    quote is one followed by white space, punctuation or the end, so "'Who is Hamlet's author?'" keeps its
    apostrophe."""
    if text and text[0] in _OPENING_QUOTES:
        close = re.search(re.escape(_OPENING_QUOTES[text[0]]) + r"(?=\s|$|[.,;:!?)])", text[1:])
        inner = text[1 : 1 + close.start()] if close else text[1:]
        if inner.strip():
            return inner.strip()
    return text


def _paraphrase_line(line: str) -> str:
    """One line with its preamble, label, numbering, markdown emphasis and wrapping quotes removed ('' if none
    is left). A line that ends with ':' and asks nothing ("Sure! Here is a paraphrase:") is all preamble."""
    text = line.strip()
    for _ in range(6):  # the wrappers nest: '1. **Reworded question:** "..."'
        before = text
        text = _LEAD_IN.sub("", text, count=1).strip()
        text = text.replace("**", "").replace("__", "").strip()
        text = _NUMBERING.sub("", text, count=1).strip()
        text = _HERE_IS.sub("", text, count=1).strip()
        text = _SAID_AS.sub("", text, count=1).strip()
        text = _LABEL.sub("", text, count=1).strip()
        text = _strip_quotes(text)
        if text == before:
            break
    if text.endswith(":") and "?" not in text:
        return ""
    return " ".join(text.split())


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def clean_paraphrase(text: str, question: str | None = None) -> str:
    """The paraphrased question in a model's reply, without preambles: '' when the reply holds none.

    Small chat models wrap the one question they were asked for: "Sure! Here is a paraphrase:\n\nWhat is ...?",
    "Paraphrased question: ...", "**Reworded question:** ...", '"What is ...?"', numbered or bulleted lists
    ("1. ...\n2. ..."), a closing remark or an answer after the question. Rules, line by line:

    * remove a lead-in ("Sure!", "Certainly,"), a "Here is ...:" preamble, a "... can be rephrased as:" lead, a
      label ("Question:", "Rephrased:", "New question 2:"), list numbering or bullets, markdown emphasis and
      wrapping quotes (text after the closing quote is dropped); a line ending in ':' without a '?' is preamble;
    * when some line asks a question ('?'), the paraphrase is the first such line, cut after its first '?' (the
      closing remark or answer that follows is dropped); otherwise it is the first non-empty line;
    * with ``question`` given, a question line that merely repeats it (case and spacing ignored) is skipped when a
      later question line differs (the model echoed the question before rewording it).
    """
    lines = [c for c in (_paraphrase_line(line) for line in (text or "").splitlines()) if c]
    asking = [line[: line.index("?") + 1] for line in lines if "?" in line]
    if not asking:
        return lines[0] if lines else ""
    if question is not None:
        for line in asking:
            if not _same_text(line, question):
                return line
    return asking[0]


def paraphrase_token_cap(generator: Any, questions: Sequence[str], settings: StatSettings) -> int:
    """The token cap of one paraphrasing call: ⌈``paraphrase_length_ratio`` × the longest question's tokens⌉ +
    ``paraphrase_length_margin``, at most ``paraphrase_max_new_tokens`` (a paraphrase is about as long as its
    question; the forced reply opening leaves no preamble to pay for)."""

    longest = max((len(generator.tokenizer(q, add_special_tokens=False)["input_ids"]) for q in questions), default=0)
    cap = math.ceil(settings.paraphrase_length_ratio * longest) + settings.paraphrase_length_margin
    return max(1, min(settings.paraphrase_max_new_tokens, cap))


def sample_paraphrases(questions: list[str], generator: Any, settings: StatSettings) -> list[str]:
    """The P − 1 paraphrases of every question (question-major), from ONE sampling call.

    ``n = P − 1`` per question (shared prefill, T = ``paraphrase_temperature``), the reply started with
    :data:`PARAPHRASE_REPLY_PREFIX`, one line each (stop at a newline), at most :func:`paraphrase_token_cap`
    tokens; each reply is cleaned by :func:`clean_paraphrase`, and one with no paraphrase left falls back to the
    question itself (its answer is then the greedy answer again).
    """
    extra = settings.paraphrases - 1
    if extra == 0:
        return []
    chats = [generator.render_chat(PARAPHRASE_PROMPT.format(question=q)) + PARAPHRASE_REPLY_PREFIX for q in questions]
    flat = generator.generate(
        chats,
        n=extra,
        temperature=settings.paraphrase_temperature,
        max_new_tokens=paraphrase_token_cap(generator, questions, settings),
        stop=("\n",),
        seed=settings.seed,
    )
    return [clean_paraphrase(g.text, questions[i // extra]) or questions[i // extra] for i, g in enumerate(flat)]
