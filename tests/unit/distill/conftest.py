"""Fakes shared by the distillation-data tests: a stand-in controller model and a tiny chunked corpus."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


class FakeLM:
    """A stand-in controller model: ``render_chat`` marks the system message and the assistant turn (so a test can
    see the exact rendering), ``reply(prompt)`` gives the generated text and, when given, ``logprobs(prompt,
    options)`` the next-token log-probs. ``counter`` counts calls and tokens like a generator's."""

    def __init__(self, reply, logprobs=None):
        from workbench.backends.cost import CostCounter

        self.reply, self.counter = reply, CostCounter()
        if logprobs is not None:

            def next_token_logprobs(prompts, options):
                self.counter.lm_calls += len(prompts)
                self.counter.prefill_tokens += sum(len(p.split()) for p in prompts)
                return np.array([logprobs(p, options) for p in prompts], dtype=np.float32)

            self.next_token_logprobs = next_token_logprobs

    def render_chat(self, message, system=None):
        return f"<sys>{system}</sys><user>{message}</user><assistant>"

    def generate(self, prompts, *, max_new_tokens, temperature=0.0, stop=("\n",)):
        self.counter.lm_calls += len(prompts)
        self.counter.prefill_tokens += sum(len(p.split()) for p in prompts)
        replies = [self.reply(p) for p in prompts]
        self.counter.decoded_tokens += sum(len(r.split()) for r in replies)
        return [SimpleNamespace(text=r, finish_reason="stop") for r in replies]


# rows interleave documents; "paris" has two chunks, the gold document of the test question
CHUNKS = [
    ("paris", 0, "Paris", "Paris is the capital and largest city of France. It lies on the river Seine."),
    ("lyon", 0, "Lyon", "Lyon is a city in France at the confluence of the Rhône and the Saône."),
    ("paris", 1, "Paris", "The city is known for the Eiffel Tower and the Louvre museum."),
    ("hamlet", 0, "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    ("seine", 0, "Seine", "The Seine is a river in northern France that flows to the English Channel."),
    ("rhone", 0, "Rhône", "The Rhône is a river that rises in the Alps and flows through Lyon in France."),
    ("oslo", 0, "Oslo", "Oslo is the capital of Norway and its most populous city."),
]


def chunked_corpus():
    """This package's chunks as a corpus dataset (the InSemRAG tests' builder)."""
    from tests.unit.methods.test_insemrag import chunked_corpus as build

    return build(CHUNKS)
