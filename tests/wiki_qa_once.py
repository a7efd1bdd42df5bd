"""wiki-qa over the embedded articles, built once per test process for each set of settings.

Most end-to-end tests run ``build_data`` on the built-in wiki-qa dataset with the same settings, and each run builds
its questions again from the ~10,000 embedded articles (about 10 s of cloze and choice generation, the largest part
of a tiny run). The builder is deterministic — the same articles, seed and settings give identical rows — so
tests/conftest.py puts :class:`BuiltOnce` in its place for the session: the first build over the embedded articles
with given settings runs the real builder, later ones get the same splits. A build over any other articles (the
builder's own tests in tests/unit/data, which check that determinism on their own articles) always runs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any


class BuiltOnce:
    """``build(articles, **settings)`` that runs ``build`` once per ``settings`` when ``articles`` equal
    ``reference()`` (read at the first call), and every time otherwise. Each call returns a new mapping of the same
    splits (what :func:`workbench.data.wikiqa.build_wikiqa` returns: a ``DatasetDict``), so a caller that adds or
    drops a split changes no other caller's."""

    def __init__(self, build: Callable[..., Any], reference: Callable[[], Sequence[Any]]) -> None:
        self.build = build
        self.reference = reference
        self.built: dict[str, Any] = {}
        self.calls = 0
        """How many times the real builder ran (what the tests of this class count)."""
        self._articles: Sequence[Any] | None = None

    def __call__(self, articles: Sequence[Any], **settings: Any) -> Any:
        if self._articles is None:
            self._articles = list(self.reference())
        if len(articles) != len(self._articles) or list(articles) != self._articles:
            self.calls += 1
            return self.build(articles, **settings)
        key = json.dumps(settings, sort_keys=True, default=list)  # a tuple and a list of the same names are one key
        if key not in self.built:
            self.calls += 1
            self.built[key] = self.build(articles, **settings)
        splits = self.built[key]
        return type(splits)(splits)
