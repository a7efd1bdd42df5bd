"""The prompted controller's prompts: the system prompt, one user prompt per decision, the query intents of the
weights prompt (with their answer letters and channel-weight templates) and the verdict tokens of the yes / no
prompts. The distilled controller is trained on exactly these prompts."""

from __future__ import annotations

__all__ = [
    "COMPLETENESS_PROMPT",
    "COMPRESS_PROMPT",
    "CONTROLLER_SYSTEM",
    "ELEMENTS_PROMPT",
    "ENRICH_PROMPT",
    "ENTAIL_PROMPT",
    "FOLLOW_UP_PROMPT",
    "INTENTS",
    "INTENT_LETTERS",
    "INTENT_TEMPLATES",
    "NO_TOKENS",
    "RELEVANCE_PROMPT",
    "WEIGHTS_PROMPT",
    "YES_TOKENS",
]

INTENTS: tuple[str, ...] = ("entity", "explanatory", "multihop")
"""The three query intents of the paper's appendix A.3 (used by the prompted controller's weighting)."""

INTENT_LETTERS: tuple[str, ...] = ("A", "B", "C")
"""The answer letter of each of :data:`INTENTS` in :data:`WEIGHTS_PROMPT`."""

INTENT_TEMPLATES: dict[str, dict[str, float]] = {
    "entity": {"dense": 0.25, "sparse": 0.50, "extended": 0.25},
    "explanatory": {"dense": 0.50, "sparse": 0.15, "extended": 0.35},
    "multihop": {"dense": 0.34, "sparse": 0.33, "extended": 0.33},
}
"""Per-intent channel weights (spec §6.2 Option B starting templates; tune on a dev split)."""

YES_TOKENS: tuple[str, ...] = ("Yes", "yes")
"""Next tokens read as a Yes verdict (their probabilities are summed)."""

NO_TOKENS: tuple[str, ...] = ("No", "no")
"""Next tokens read as a No verdict."""

CONTROLLER_SYSTEM = "You are a careful assistant inside a search engine. Follow the output format exactly."

ENRICH_PROMPT = (
    "Search request: {query}\n\n"
    "Prepare this request for two search engines.\n"
    '1. "dense": restate the request as one complete, explicit sentence. Keep every name, date and number; '
    "add no facts of your own.\n"
    '2. "keywords": the terms an index should match: names of people, places and things, key nouns and verbs, '
    "rare or technical words, numbers and dates.\n"
    'Reply with a JSON object only, for example {{"dense": "...", "keywords": ["...", "..."]}}.'
)
WEIGHTS_PROMPT = (
    "Search request: {query}\n\n"
    "What kind of request is this?\n"
    "A) a lookup about a specific, named person, place, organisation, work or event\n"
    "B) a request for an explanation, a cause or a general description of a concept\n"
    "C) a question that needs several facts, possibly from different sources, to be combined\n"
    "Reply with the letter only."
)
RELEVANCE_PROMPT = (
    "Question: {query}\n\nPassage: {passage}\n\n"
    "Does this passage contain information that helps answer the question? Reply Yes or No."
)
COMPLETENESS_PROMPT = (
    "Question: {query}\n\nPassage: {passage}\n\n"
    "Can this passage be read and used on its own to support an answer? Reply No if it begins or ends in the "
    "middle of a sentence, uses a pronoun or a reference such as 'this' or 'the former' whose meaning is not in "
    "the passage, opens with a connective such as 'As a result' or 'Therefore' whose premise is missing, or "
    "announces a list it does not finish. Otherwise reply Yes."
)
COMPRESS_PROMPT = (
    "Three consecutive pieces of one document:\n"
    "BEFORE: {previous}\n"
    "MIDDLE: {center}\n"
    "AFTER: {following}\n\n"
    "Rewrite MIDDLE as one self-contained passage of at most {max_words} words. Replace its pronouns and vague "
    "references with the names they stand for and restore any premise or cause it depends on, taking them only "
    "from BEFORE and AFTER. Keep every fact of MIDDLE; add facts from BEFORE and AFTER only where they are needed "
    "to understand it, preferring those that bear on: {query}\n"
    "Use no outside knowledge. Reply with the passage only."
)
ELEMENTS_PROMPT = (
    "Question: {question}\n\n"
    "List the separate pieces of information someone must find to answer or verify this question: between 1 "
    "and {max_elements} short statements, one fact each. Reply with a JSON list of strings only."
)
ENTAIL_PROMPT = (
    "Information needed: {element}\n\nPassage: {passage}\n\nDoes the passage state this information? Reply Yes or No."
)
FOLLOW_UP_PROMPT = (
    "Original question: {question}\n"
    "Still missing: {element}\n"
    "Found so far:\n{found}\n\n"
    "Write one standalone search query that would find the missing information. Use the names found so far "
    "instead of pronouns. Reply with the query only."
)
