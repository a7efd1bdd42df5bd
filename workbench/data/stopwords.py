"""English stop words: one base list and the two documented extensions the workbench's callers use.

The two callers drop different words on purpose, so each keeps its own set, built from the one base list:

* :data:`KEYWORD_STOP_WORDS` — keyword extraction from a request (InSemRAG's controller, the distilled controller's
  gold labels): the base list, further function words (``above``, ``between``, reflexive pronouns, …) and the words
  of a request that are no search terms (``tell``, ``give``, ``list``, ``explain``, ``please``, ``called``, …).
* :data:`TOKEN_STOP_WORDS` — low-importance answer tokens (the offline MARS importance of
  :mod:`workbench.uncertainty.features.probability`): the base list and the modal verbs plus ``it's``, ``us``,
  ``onto``, which appear as single tokens of a generated answer.

Every word is lower case; callers normalise before looking a word up.
"""

from __future__ import annotations

__all__ = ["BASE_STOP_WORDS", "KEYWORD_STOP_WORDS", "TOKEN_STOP_WORDS"]

BASE_STOP_WORDS: frozenset[str] = frozenset(
    """a about all am an and any are as at be been being both but by can could did do does each few for from had has
    have he her here him his how i if in into is it its just me more most my no nor not of on only or other our own same
    she should so some such than that the their them then there these they this those to too under very was we were
    what when where which who whom whose why will with would you your also over""".split()  # noqa: SIM905
)
"""English function words every stop-word list of the workbench drops (articles, pronouns, auxiliaries,
prepositions, conjunctions, question words)."""

KEYWORD_STOP_WORDS: frozenset[str] = BASE_STOP_WORDS | frozenset(
    """above after again against because before below between doing down during further having hers herself himself
    itself myself off once ours ourselves out theirs themselves through until up while yours yourself yourselves
    many much tell give name list describe explain please known called""".split()  # noqa: SIM905
)
"""The base list plus further function words and the words of a request that name no search term: what keyword
extraction drops."""

TOKEN_STOP_WORDS: frozenset[str] = BASE_STOP_WORDS | frozenset(["may", "might", "must", "shall", "it's", "us", "onto"])
"""The base list plus the modal verbs, ``it's``, ``us`` and ``onto``: answer tokens of low importance."""
