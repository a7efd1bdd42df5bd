"""The prompted controller: the paper's semantic controller, a small instruction LM prompted for every decision
(also the distilled controller: the same code over a distilled student)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workbench.backends.prompts import cut_text
from workbench.methods.controller.base import Controller, normalise_weights, uniform_weights
from workbench.methods.controller.decisions import (
    ChannelWeights,
    Completeness,
    Compression,
    Coverage,
    Elements,
    Enrichment,
    FollowUp,
    Relevance,
)
from workbench.methods.controller.prompts import (
    COMPLETENESS_PROMPT,
    COMPRESS_PROMPT,
    CONTROLLER_SYSTEM,
    ELEMENTS_PROMPT,
    ENRICH_PROMPT,
    ENTAIL_PROMPT,
    FOLLOW_UP_PROMPT,
    INTENT_LETTERS,
    INTENT_TEMPLATES,
    INTENTS,
    NO_TOKENS,
    RELEVANCE_PROMPT,
    WEIGHTS_PROMPT,
    YES_TOKENS,
)
from workbench.methods.controller.replies import clean_reply, json_value, keyword_list, parse_intent, parse_verdict
from workbench.methods.controller.text import content_words, cut_words, extractive_stitch, words

__all__ = ["PromptedLMController"]


class PromptedLMController(Controller):
    """The paper's controller: a small instruction LM prompted for every decision (module doc; own prompts).

    ``generator``: anything with ``render_chat(message, system=...)`` and ``generate(prompts, max_new_tokens=...,
    temperature=..., stop=...)`` returning objects with ``.text``; for ``score_mode="logprobs"`` also
    ``next_token_logprobs(prompts, options)``. ``score_mode``: ``"auto"`` (log-probs when the generator offers
    them), ``"logprobs"`` or ``"generate"``. ``keep_threshold`` in [0, 1]: keep a candidate iff its relevance ≥
    it (0.5 = the model prefers Yes; not in the paper, which re-ranks and keeps the top k2 — InSemRAG's
    ``keep_threshold`` setting). ``templates``: per-intent channel weights (:data:`INTENT_TEMPLATES`).
    ``max_elements``: cap on S6. ``passage_chars``: passages are cut to this many characters in prompts. Generative
    decisions decode greedily. ``name``: how the trace names the controller (``"distilled"`` for the same code over a
    distilled student: the student is read exactly like the prompted model).
    """

    name = "prompted"

    def __init__(
        self,
        generator: Any,
        *,
        score_mode: str = "auto",
        keep_threshold: float = 0.5,
        templates: Mapping[str, Mapping[str, float]] | None = None,
        max_elements: int = 4,
        passage_chars: int = 2000,
        enrich_tokens: int = 128,
        elements_tokens: int = 128,
        follow_up_tokens: int = 48,
        name: str = "prompted",
    ) -> None:
        if score_mode not in ("auto", "logprobs", "generate"):
            raise ValueError(f"score_mode must be auto, logprobs or generate, got {score_mode!r}")
        threshold_ok = isinstance(keep_threshold, int | float) and not isinstance(keep_threshold, bool)
        if not threshold_ok or not 0.0 <= float(keep_threshold) <= 1.0:
            raise ValueError(f"keep_threshold must be a number in [0, 1], got {keep_threshold!r}")
        self.name = name
        if score_mode == "auto":
            score_mode = "logprobs" if hasattr(generator, "next_token_logprobs") else "generate"
        self.generator = generator
        self.score_mode = score_mode
        self.keep_threshold = float(keep_threshold)
        self.templates = {k: dict(v) for k, v in (templates or INTENT_TEMPLATES).items()}
        missing = set(INTENTS) - set(self.templates)
        if missing:
            raise ValueError(f"templates miss intent(s) {sorted(missing)}")
        self.max_elements = max_elements
        self.passage_chars = passage_chars
        self.enrich_tokens = enrich_tokens
        self.elements_tokens = elements_tokens
        self.follow_up_tokens = follow_up_tokens

    # ------------------------------------------------------------------ plumbing
    def _chat(self, message: str) -> str:
        return self.generator.render_chat(message, system=CONTROLLER_SYSTEM)

    def _generate(self, messages: Sequence[str], max_new_tokens: int, stop: tuple[str, ...] = ()) -> list[Any]:
        prompts = [self._chat(m) for m in messages]
        if not prompts:
            return []
        return list(self.generator.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0, stop=stop))

    def _passage(self, text: str) -> str:
        return cut_text(" ".join(text.split()), self.passage_chars)

    def _scores(self, messages: Sequence[str]) -> list[tuple[float | None, Any]]:
        """p(Yes) / (p(Yes) + p(No)) per message, with the raw reply; None where the reply is unusable."""
        if not messages:
            return []
        if self.score_mode == "logprobs":
            prompts = [self._chat(m) for m in messages]
            logprobs = np.asarray(
                self.generator.next_token_logprobs(prompts, [*YES_TOKENS, *NO_TOKENS]), dtype=np.float64
            )
            out = []
            for row in logprobs:
                yes, no = np.logaddexp.reduce(row[: len(YES_TOKENS)]), np.logaddexp.reduce(row[len(YES_TOKENS) :])
                raw = {"yes": float(yes), "no": float(no)}
                if not (np.isfinite(yes) or np.isfinite(no)) or np.isnan(yes) or np.isnan(no):
                    out.append((None, raw))
                    continue
                out.append((float(np.exp(yes - np.logaddexp(yes, no))), raw))
            return out
        replies = self._generate(messages, max_new_tokens=6, stop=("\n",))
        return [(parse_verdict(r.text), r.text) for r in replies]

    # ------------------------------------------------------------------ S1
    def enrich(self, query: str) -> Enrichment:
        reply = self._generate([ENRICH_PROMPT.format(query=query)], self.enrich_tokens)[0].text
        parsed = json_value(reply, "{")
        dense = keywords = None
        if isinstance(parsed, dict):
            value = parsed.get("dense")
            dense = value.strip() if isinstance(value, str) and value.strip() else None
            keywords = keyword_list(parsed.get("keywords"))
        else:  # tolerate "dense: ..." / "keywords: ..." lines
            match = re.search(r"dense\W*[:=]\s*(.+)", reply, re.IGNORECASE)
            dense = clean_reply(match.group(1)) if match else None
            match = re.search(r"keywords\W*[:=]\s*(.+)", reply, re.IGNORECASE)
            keywords = keyword_list(match.group(1).strip("[] ")) if match else None
        missing = [name for name, value in (("dense", dense), ("keywords", keywords)) if not value]
        note = f"unusable {' and '.join(missing)} in the reply: used the fallback" if missing else ""
        return Enrichment(
            dense=dense or query.strip(),
            keywords=keywords or content_words(query),
            raw=reply,
            fallback=bool(missing),
            note=note,
        )

    # ------------------------------------------------------------------ S2
    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        message = WEIGHTS_PROMPT.format(query=query)
        probs: dict[str, float] | None = None
        if self.score_mode == "logprobs":
            row = np.asarray(
                self.generator.next_token_logprobs([self._chat(message)], list(INTENT_LETTERS))[0], np.float64
            )
            raw: Any = {letter: float(v) for letter, v in zip(INTENT_LETTERS, row, strict=True)}
            if np.isfinite(row).any() and not np.isnan(row).any():
                exp = np.exp(row - row.max())
                probs = {intent: float(p) for intent, p in zip(INTENTS, exp / exp.sum(), strict=True)}
        else:
            raw = self._generate([message], max_new_tokens=8, stop=("\n",))[0].text
            intent = parse_intent(raw)
            if intent is not None:
                probs = {name: float(name == intent) for name in INTENTS}
        if probs is None:
            return ChannelWeights(
                weights=uniform_weights(channels),
                raw=raw,
                fallback=True,
                note="no intent could be read from the reply: uniform weights",
            )
        mixed = {c: sum(probs[i] * self.templates[i].get(c, 0.0) for i in INTENTS) for c in channels}
        return ChannelWeights(weights=normalise_weights(mixed, channels), intents=probs, raw=raw)

    # ------------------------------------------------------------------ S3
    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        messages = [RELEVANCE_PROMPT.format(query=query, passage=self._passage(p)) for p in passages]
        out = []
        for score, raw in self._scores(messages):
            if score is None:
                out.append(Relevance(score=0.5, keep=True, raw=raw, fallback=True, note="unreadable verdict: kept"))
            else:
                out.append(Relevance(score=score, keep=score >= self.keep_threshold, raw=raw))
        return out

    # ------------------------------------------------------------------ S4
    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        messages = [COMPLETENESS_PROMPT.format(query=query, passage=self._passage(p)) for p in passages]
        out = []
        for score, raw in self._scores(messages):
            if score is None:
                out.append(Completeness(score=1.0, raw=raw, fallback=True, note="unreadable verdict: intact"))
            else:
                out.append(Completeness(score=score, raw=raw))
        return out

    # ------------------------------------------------------------------ S5
    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        message = COMPRESS_PROMPT.format(
            previous=self._passage(previous) if previous else "(start of the document)",
            center=self._passage(center),
            following=self._passage(following) if following else "(end of the document)",
            max_words=max(1, int(max_tokens * 0.75)),
            query=query,
        )
        reply = self._generate([message], max_new_tokens=max_tokens)[0]
        text = clean_reply(reply.text)
        if getattr(reply, "finish_reason", "") == "length":  # cut mid-sentence: end at the last full sentence
            ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
            text = text[: ends[-1]] if ends else text
        if len(words(text)) < 3:
            return Compression(
                text=extractive_stitch(previous, center, following, max_tokens),
                raw=reply.text,
                fallback=True,
                note="empty or too short compression: extractive stitch used",
            )
        return Compression(text=cut_words(text, max_tokens), raw=reply.text)

    # ------------------------------------------------------------------ S6
    def elements(self, question: str) -> Elements:
        message = ELEMENTS_PROMPT.format(question=question, max_elements=self.max_elements)
        reply = self._generate([message], self.elements_tokens)[0].text
        parsed = json_value(reply, "[")
        items: list[str] = []
        if isinstance(parsed, list):
            items = [str(v).strip() for v in parsed if isinstance(v, str | int | float) and str(v).strip()]
        else:  # tolerate a bulleted or numbered list
            items = [m.strip() for m in re.findall(r"^\s*(?:[-*•]|\d+[.)])\s+(.+)$", reply, re.MULTILINE)]
        items = list(dict.fromkeys(items))[: self.max_elements]
        if not items:
            return Elements(elements=[question.strip()], raw=reply, fallback=True, note="no element list in the reply")
        return Elements(elements=items, raw=reply)

    # ------------------------------------------------------------------ S7
    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        elements = list(elements)
        if not passages:
            return Coverage(elements=elements, scores=[0.0] * len(elements), best=[None] * len(elements), raw=[])
        pairs = [(e, p) for e in elements for p in passages]
        messages = [ENTAIL_PROMPT.format(element=e, passage=self._passage(p)) for e, p in pairs]
        results = self._scores(messages)
        scores, best, raws, unreadable = [], [], [], 0
        for i, _ in enumerate(elements):
            row = results[i * len(passages) : (i + 1) * len(passages)]
            raws.append([raw for _, raw in row])
            values = [1.0 if s is None else s for s, _ in row]  # unreadable → covered (spec fallback e = 1)
            unreadable += sum(s is None for s, _ in row)
            scores.append(float(max(values)))
            best.append(int(np.argmax(values)))
        note = f"{unreadable} of {len(pairs)} verdicts unreadable: counted as covered" if unreadable else ""
        return Coverage(elements=elements, scores=scores, best=best, raw=raws, fallback=bool(unreadable), note=note)

    # ------------------------------------------------------------------ S8
    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        found = "\n".join(f"- {self._passage(p)[:160]}" for p in passages[:10]) or "- nothing yet"
        message = FOLLOW_UP_PROMPT.format(question=question, element=element, found=found)
        reply = self._generate([message], self.follow_up_tokens, stop=("\n",))[0].text
        query = clean_reply(reply)
        if len(words(query)) < 2:
            return FollowUp(query=element.strip(), raw=reply, fallback=True, note="no query in the reply: element used")
        return FollowUp(query=query, raw=reply)
