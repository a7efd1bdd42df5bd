"""Method options are checked when the recipe loads (file:line, one line), and build_method applies them."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.methods.registry import build_method, check_options
from workbench.recipe import load_recipe


@pytest.mark.parametrize(
    ("methods", "options", "where", "message"),
    [
        (["dtr", "nope"], {}, "evaluate.methods", "unknown or no method"),
        ([], {}, "evaluate.methods", "unknown or no method"),
        (["dtr"], {"nope": {}}, "evaluate.options", "options for unknown method"),
        (["dtr"], {"dtr": {"tauu": 1.0}}, "evaluate.options.dtr", "unknown option(s) ['tauu']"),
        (["dtr"], {"dtr": 3}, "evaluate.options.dtr", "must be a mapping"),
        (["no_rag"], {"no_rag": {"k": 3}}, "evaluate.options.no_rag", "known: none"),
        (["oracle"], {"oracle": {"k": 0}}, "evaluate.options.oracle", "k must be an integer >= 1"),
        (["insemrag"], {"insemrag": {"controller": "big"}}, "evaluate.options.insemrag", "heuristic or distilled"),
        (["insemrag"], {"insemrag": {"max_rounds": 0}}, "evaluate.options.insemrag", "max_rounds"),
        (["insemrag"], {"insemrag": {"enrich_tokens": 0}}, "evaluate.options.insemrag", "enrich_tokens must be"),
        (
            ["insemrag"],
            {"insemrag": {"controller": "heuristic", "elements_tokens": 9}},
            "evaluate.options.insemrag",
            "prompted controller's caps only",
        ),
        (["dense_rag"], {"dense_rag": {"candidates": 1}}, "evaluate.options.dense_rag", "candidates (1) must be >= k"),
        (["d2rag"], {"d2rag": {"tau_pos": 2.0}}, "evaluate.options.d2rag", "tau_neg < tau_pos"),
        (["d2rag"], {"d2rag": {"utility_label": "x"}}, "evaluate.options.d2rag", "utility_label"),
    ],
)
def test_bad_methods_and_options_are_refused(methods, options, where, message):
    with pytest.raises(ConfigError) as caught:
        check_options(methods, options)
    assert caught.value.where == where and message in caught.value.what and "\n" not in str(caught.value)


def test_good_options_pass_and_d2rag_features_wait_for_the_classifier():
    check_options(
        ["standard_rag", "dtr", "insemrag", "d2rag"],
        {
            "standard_rag": {"k": 3},
            "dtr": {"tau": 1.2, "rule": "score_sum"},
            "insemrag": {"controller": "heuristic", "k1": 10, "k": 3},
            "d2rag": {"features": ["not", "yet", "known"], "alpha_pos": 0.5, "seper_samples": 4},
        },
    )


def test_the_recipe_loader_names_the_line_of_a_bad_option(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nstages: [build_data, evaluate]\nevaluate:\n  methods: [dtr]\n  options:\n    dtr: {tauu: 1}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe))
    assert caught.value.where == f"{recipe}:6" and "evaluate.options.dtr: unknown option(s) ['tauu']" in str(
        caught.value
    )
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe), ["evaluate.options={dtr: {tau: -1, k: 0}}"])
    assert caught.value.where == "command line" and "k must be" in caught.value.what
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe), ["evaluate.options.dtr.tauu=2"])  # still wrong in the file, and said so
    assert caught.value.where == "command line"
    assert load_recipe(str(recipe), ["stages=[build_data]"]).config.evaluate.options == {"dtr": {"tauu": 1}}


def test_build_method_uses_the_extras(tools):
    rag = build_method("standard_rag", tools, {"k": 2}, None)
    assert rag.k == 2
    tools.embedder = object()  # InSemRAG's dense channel needs one; nothing is embedded here
    insemrag = build_method("insemrag", tools, {"enrich_tokens": 40, "follow_up_tokens": 12, "k1": 8, "k": 3}, None)
    assert (insemrag.controller.enrich_tokens, insemrag.controller.follow_up_tokens) == (40, 12)
    assert insemrag.controller.elements_tokens == 128 and insemrag.settings.k1 == 8
    with pytest.raises(ConfigError, match="needs the calibrate and classify"):
        build_method("d2rag", tools, {}, None)
    with pytest.raises(ConfigError, match="unknown method"):
        build_method("nope", tools, {}, None)
