"""Study settings that would tune something other than what they say, refused when the recipe loads (one line naming
the key): D²-RAG's τ replay with collect's stats budget unlike D²-RAG's answer budget, and InSemRAG's keep_threshold
under the heuristic controller, which has no relevance score to filter."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_recipe("study", list(overrides))
    text = str(info.value)
    assert "\n" not in text
    return text


def test_d2rag_tau_replay_needs_the_stats_budget_to_equal_the_answer_budget():
    config = load_recipe("study").config  # the built-in study: equal budgets
    assert config.collect.max_new_tokens == config.evaluate.max_new_tokens
    text = refused("collect.max_new_tokens=12")
    assert "collect.max_new_tokens" in text and "tau" in text and "12" in text
    text = refused("evaluate.options.d2rag.max_new_tokens=24")
    assert "24" in text
    # equal again, or τ not tuned: fine
    load_recipe("study", ["collect.max_new_tokens=12", "evaluate.options.d2rag.max_new_tokens=12"])
    alphas = "study.space={d2rag: {alpha_pos: {low: 0, high: 2}}}"
    load_recipe("study", ["collect.max_new_tokens=12", "study.methods=[d2rag]", alphas])
    load_recipe("study", ["collect.max_new_tokens=12", "study.methods=[dtr]", "study.space={}"])


def test_keep_threshold_is_refused_in_a_study_of_the_heuristic_controller():
    space = "study.space={insemrag: {keep_threshold: {low: 0.2, high: 0.8}}}"
    text = refused("study.methods=[insemrag]", space, "evaluate.options.insemrag.controller=heuristic")
    assert "study.space.insemrag.keep_threshold" in text and "heuristic" in text
    load_recipe("study", ["study.methods=[insemrag]", space])  # the prompted controller filters by it
    other = "study.space={insemrag: {tau: {low: 0.2, high: 0.8}}}"
    load_recipe("study", ["study.methods=[insemrag]", other, "evaluate.options.insemrag.controller=heuristic"])
