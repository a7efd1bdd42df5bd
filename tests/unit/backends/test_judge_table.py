"""NLI judges are a table: a new kind is one entry in backends.factory.JUDGES, and an unknown kind is one line."""

from __future__ import annotations

import pytest

from workbench.backends import factory
from workbench.core.errors import ConfigError


def test_a_judge_kind_added_to_the_table_is_built_with_the_request(monkeypatch):
    seen = {}

    def build(request):
        seen["request"] = request
        return ("judge", request.embedder())

    monkeypatch.setitem(factory.JUDGES, "exact_match", build)
    judge = factory.build_judge("exact_match", embedder=lambda: "the shared embedder", batch_size=7)
    assert judge == ("judge", "the shared embedder")
    assert seen["request"].kind == "exact_match" and seen["request"].batch_size == 7


def test_an_unknown_judge_names_the_known_ones():
    with pytest.raises(
        ConfigError, match=r"unknown NLI judge 'mnli' \(known: answer_equivalence, cross_encoder, hf, llm\)"
    ):
        factory.build_judge("mnli")
