"""One stop-word module: the base list and the two callers' extensions, each caller's set exactly what it was."""

from __future__ import annotations

import hashlib

from workbench.data.stopwords import BASE_STOP_WORDS, KEYWORD_STOP_WORDS, TOKEN_STOP_WORDS


def _digest(words: frozenset[str]) -> str:
    return hashlib.sha256(" ".join(sorted(words)).encode()).hexdigest()[:16]


def test_each_callers_set_is_the_one_it_had_before_the_merge():
    # digests of the two lists as written in methods/controller.py and features/probability.py before the merge
    assert (len(KEYWORD_STOP_WORDS), _digest(KEYWORD_STOP_WORDS)) == (138, "18e0aaa6aed2a1f2")
    assert (len(TOKEN_STOP_WORDS), _digest(TOKEN_STOP_WORDS)) == (102, "a266cf10c5b8b2da")
    assert KEYWORD_STOP_WORDS & TOKEN_STOP_WORDS == BASE_STOP_WORDS  # the base is what both drop
    assert all(w == w.lower() for w in KEYWORD_STOP_WORDS | TOKEN_STOP_WORDS)


def test_both_callers_read_the_one_module():
    from workbench.methods.controller import STOP_WORDS, content_words
    from workbench.uncertainty.features.probability import STOP_WORDS as TOKEN_WORDS
    from workbench.uncertainty.features.probability import heuristic_token_importance

    assert STOP_WORDS is KEYWORD_STOP_WORDS and TOKEN_WORDS is TOKEN_STOP_WORDS
    # a request word is no keyword; a modal verb is a keyword but an unimportant answer token
    assert content_words("Please tell me who might have designed the Eiffel Tower") == [
        "might",
        "designed",
        "Eiffel",
        "Tower",
    ]
    assert list(heuristic_token_importance(["Ġmight", "Ġtell", "ĠParis"], low=0.1)) == [0.1, 1.0, 1.0]
