"""Self-Detection: the paraphrase a chat model wraps in preambles, labels, quotes or lists is what gets answered."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from workbench.backends.generator import Generation
from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.uncertainty.calculators import StatSettings, clean_paraphrase, compute_stats

Q = "Who wrote Hamlet?"

REPLIES = [
    # (model reply, the paraphrase that must be answered)
    ("Which playwright wrote Hamlet?", "Which playwright wrote Hamlet?"),
    ("Sure! Here is a paraphrase:\n\nWhich playwright wrote Hamlet?", "Which playwright wrote Hamlet?"),
    ('Sure, here\'s the reworded question:\n"Who is the author of Hamlet?"', "Who is the author of Hamlet?"),
    ("Here's a reworded version of the question: Who is the author of Hamlet?", "Who is the author of Hamlet?"),
    ("Here is a paraphrased version of your question:\nWho penned Hamlet?", "Who penned Hamlet?"),
    ("Certainly! Here is the question in different words:\n\nWho penned Hamlet?", "Who penned Hamlet?"),
    ("Paraphrased question: Which playwright wrote Hamlet?", "Which playwright wrote Hamlet?"),
    ("Reworded question: Who authored Hamlet?", "Who authored Hamlet?"),
    ("New question: Who is credited with writing Hamlet?", "Who is credited with writing Hamlet?"),
    ("Rephrased: 'Who penned Hamlet?'", "Who penned Hamlet?"),
    ("Paraphrase 1: Who authored Hamlet?", "Who authored Hamlet?"),
    ("Q: Who penned Hamlet?", "Who penned Hamlet?"),
    ("**Reworded question:** Who penned Hamlet?", "Who penned Hamlet?"),
    ("### Paraphrased question\nWho authored Hamlet?", "Who authored Hamlet?"),
    ('"Which playwright wrote Hamlet?"', "Which playwright wrote Hamlet?"),
    ("“Who is Hamlet's author?”", "Who is Hamlet's author?"),
    ("'Who is Hamlet's author?'", "Who is Hamlet's author?"),
    ('Certainly! "Who authored Hamlet?"', "Who authored Hamlet?"),
    ('Here is the reworded question: "Who penned Hamlet?" I hope this helps!', "Who penned Hamlet?"),
    ("1. Which playwright wrote Hamlet?\n2. Who is the author of Hamlet?", "Which playwright wrote Hamlet?"),
    ("- Who penned Hamlet?\n- Who authored Hamlet?", "Who penned Hamlet?"),
    ("Who penned Hamlet?\nAnswer: William Shakespeare", "Who penned Hamlet?"),
    ("Who penned Hamlet? The answer is William Shakespeare.", "Who penned Hamlet?"),
    ("Sure, I can help with that.\nWho is the author of Hamlet?", "Who is the author of Hamlet?"),
    (
        'The question "Who wrote Hamlet?" can be reworded as: "Which playwright wrote Hamlet?"',
        "Which playwright wrote Hamlet?",
    ),
    ("Who wrote Hamlet?\nWhich playwright wrote Hamlet?", "Which playwright wrote Hamlet?"),  # echo, then rewording
    ("who wrote  Hamlet?", "who wrote Hamlet?"),  # an echo alone is still a (trivial) paraphrase
    (
        "Great Britain's best-known playwright wrote Hamlet: who was he?",
        "Great Britain's best-known playwright wrote Hamlet: who was he?",
    ),  # a question that starts like a lead-in word keeps it
    ("Name the author of the play Hamlet.", "Name the author of the play Hamlet."),  # no '?': the first line
]


@pytest.mark.parametrize(("reply", "expected"), REPLIES)
def test_clean_paraphrase_keeps_only_the_question(reply, expected):
    assert clean_paraphrase(reply, Q) == expected


@pytest.mark.parametrize(
    "reply", ["", "   \n ", "Sure!", "Sure! Here is a paraphrase:", "Here is a paraphrased version of the question"]
)
def test_a_reply_with_no_paraphrase_cleans_to_nothing(reply):
    assert clean_paraphrase(reply, Q) == ""


class ParaphrasingGenerator:
    """Replies to the paraphrase prompt with scripted text; answers every answering prompt with its question."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.paraphrase_calls: list[dict] = []
        self.answered: list[str] = []
        self.greedy_calls = 0
        self.tokenizer = lambda text, add_special_tokens=True: {"input_ids": text.split()}  # one token a word

    def build_prompt(self, question, context=None, *, max_new_tokens, system=None):
        return SimpleNamespace(text=f"[answer] {question}")

    def render_chat(self, message, system=None):
        return f"[chat] {message}"

    def generate(self, prompts, *, max_new_tokens, temperature=0.0, n=1, stop=None, seed=None, **_):
        def gen(prompt: str, text: str, j: int = 0) -> Generation:
            empty = np.zeros(0, dtype=np.float32)
            return Generation(prompt, text, np.zeros(0, dtype=np.int64), empty, empty, empty, "eos", sample_index=j)

        if prompts and prompts[0].startswith("[chat]"):
            self.paraphrase_calls.append(
                {"n": n, "stop": stop, "temperature": temperature, "max_new_tokens": max_new_tokens}
            )
            return [gen(p, self.replies[j], j) for p in prompts for j in range(n)]
        self.greedy_calls += 1
        self.answered.extend(p.removeprefix("[answer] ") for p in prompts)
        return [gen(p, f"answer to {p.removeprefix('[answer] ')}") for p in prompts]


def test_self_detection_answers_the_cleaned_paraphrases():
    replies = [
        "Sure! Here is a paraphrase:\n\nWhich playwright wrote Hamlet?",
        "Paraphrased question: Who is the author of Hamlet?",
        "Sure!",  # nothing left: the question itself is asked again
    ]
    fake = ParaphrasingGenerator(replies)
    settings = StatSettings(paraphrases=4)
    (stats,) = compute_stats(
        [{"question": Q}], {"paraphrase_answers"}, generator=fake, judge=AnswerEquivalenceJudge(), settings=settings
    )
    # one line each, capped at ⌈1.5 × 3 words⌉ + 4 = 9 tokens (Q is 3 "tokens" for the fake tokenizer)
    assert fake.paraphrase_calls == [
        {"n": 3, "stop": ("\n",), "temperature": settings.paraphrase_temperature, "max_new_tokens": 9}
    ]
    # ONE greedy call: the answer to q, then one answer per cleaned paraphrase
    assert fake.greedy_calls == 1
    assert fake.answered == [Q, "Which playwright wrote Hamlet?", "Who is the author of Hamlet?", Q]
    assert stats["paraphrase_answers"] == [f"answer to {q}" for q in fake.answered]
