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
        (["dtr"], {"dtr": {"tauu": 1.0}}, "evaluate.options.dtr.tauu", "unknown option(s) ['tauu']"),
        (["dtr"], {"dtr": 3}, "evaluate.options.dtr", "must be a mapping"),
        (["no_rag"], {"no_rag": {"k": 3}}, "evaluate.options.no_rag.k", "known: none"),
        (["oracle"], {"oracle": {"k": 0}}, "evaluate.options.oracle.k", "k must be an integer >= 1"),
        (["insemrag"], {"insemrag": {"controller": "big"}}, "evaluate.options.insemrag.controller", "or distilled"),
        (["insemrag"], {"insemrag": {"max_rounds": 0}}, "evaluate.options.insemrag.max_rounds", "max_rounds"),
        (["insemrag"], {"insemrag": {"enrich_tokens": 0}}, "evaluate.options.insemrag.enrich_tokens", "must be"),
        (
            ["insemrag"],
            {"insemrag": {"controller": "heuristic", "elements_tokens": 9}},
            "evaluate.options.insemrag.elements_tokens",
            "prompted controller's caps only",
        ),
        (
            ["dense_rag"],
            {"dense_rag": {"candidates": 1}},
            "evaluate.options.dense_rag.candidates",
            "candidates (1) must be >= k",
        ),
        (["dense_rag"], {"dense_rag": {"stop_rule": "x"}}, "evaluate.options.dense_rag.stop_rule", "stop_rule must"),
        (["dtr"], {"dtr": {"tau": "high"}}, "evaluate.options.dtr.tau", "tau must be a number"),
        (["dtr"], {"dtr": {"n_per_path": 1}}, "evaluate.options.dtr", "dtr.k: k must be <= 2"),  # k not given
        (["d2rag"], {"d2rag": {"alpha_neg": -1.0}}, "evaluate.options.d2rag.alpha_neg", "alphas must be >= 0"),
        (["insemrag"], {"insemrag": {"k": 60}}, "evaluate.options.insemrag.k", "k must be <= k1"),
        (["d2rag"], {"d2rag": {"tau_pos": 2.0}}, "evaluate.options.d2rag.tau_pos", "tau_pos must be in [-1, 1]"),
        (["d2rag"], {"d2rag": {"tau_pos": -0.5}}, "evaluate.options.d2rag", "tau_neg < tau_pos"),
        (["standard_rag"], {"standard_rag": {"k": 10**6}}, "evaluate.options.standard_rag.k", "k must be at most"),
        (["dtr"], {"dtr": {"tau": -1e308}}, "evaluate.options.dtr.tau", "tau must be in [-100, 100]"),
        (["d2rag"], {"d2rag": {"utility_label": "x"}}, "evaluate.options.d2rag.utility_label", "utility_label"),
        (
            ["d2rag_oracle"],
            {"d2rag_oracle": {"seper_samples": 0}},
            "evaluate.options.d2rag_oracle.seper_samples",
            "must",
        ),
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
    assert caught.value.where == f"{recipe}:6" and "evaluate.options.dtr.tauu: unknown option(s) ['tauu']" in str(
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


def test_the_recipe_loader_names_the_line_of_the_bad_key_itself(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nstages: [build_data, evaluate]\nevaluate:\n  methods: [dtr, insemrag]\n  options:\n"
        "    dtr:\n      k: 2\n      tau: high\n    insemrag:\n      k1: 8\n      controller: big\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe))
    assert caught.value.where == f"{recipe}:8" and caught.value.what.startswith("evaluate.options.dtr.tau: tau must")
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe), ["evaluate.options.dtr.tau=1.0"])
    assert caught.value.where == f"{recipe}:11" and "evaluate.options.insemrag.controller:" in caught.value.what


def test_every_method_option_is_in_the_table_with_a_type_default_and_meaning():
    from workbench.methods.registry import METHOD_TABLE, METHODS, option_fields, options_template
    from workbench.recipe import recipe_template

    assert tuple(METHOD_TABLE) == METHODS
    template = options_template()
    for name, entry in METHOD_TABLE.items():
        assert f"# {name}:" in template
        for f in option_fields(entry):
            assert f.metadata.get("doc"), f"{name}.{f.name} has no doc"
            assert f"#   {f.name}: " in template
    lines = template.splitlines()
    # the variant's own default is shown: insemrag_distilled's controller is distilled
    distilled = lines[lines.index(next(x for x in lines if x.startswith("# insemrag_distilled:"))) :]
    assert any(x.startswith("#   controller: distilled  # str — ") for x in distilled)
    assert "#   tau: 0.001  # float — threshold on the closed-book answer's normalised NLL" in template
    assert "#   controller_model: null  # str | null — " in template
    # workbench config prints them under evaluate.options (as comments: the template stays loadable YAML)
    full = recipe_template()
    assert "\n  options: {}" in full and "\n    #   k1: 50  # int — size of the fused candidate pool" in full
    import yaml

    assert yaml.safe_load(full)["evaluate"]["options"] == {}


def test_the_controller_options_defaults_are_the_prompted_controllers():
    import inspect

    from workbench.methods.controller import PromptedLMController
    from workbench.methods.registry import CONTROLLER_TOKENS, ControllerOptions

    own = inspect.signature(PromptedLMController.__init__).parameters
    assert {k: getattr(ControllerOptions(), k) for k in CONTROLLER_TOKENS} == {
        k: own[k].default for k in CONTROLLER_TOKENS
    }


def test_a_new_method_is_one_table_entry(tools, monkeypatch):
    from dataclasses import dataclass

    from workbench.core.config import doc
    from workbench.methods.baselines import NoRAG
    from workbench.methods.registry import METHOD_TABLE, MethodEntry, RetrievalOptions, options_template

    @dataclass(frozen=True)
    class Echo(RetrievalOptions):
        loud: bool = doc("shout the answer", False)

    built = []

    def build(req):
        built.append((req.name, req.options.k, req.options.loud, req.settings()))
        return NoRAG(req.tools)

    entry = MethodEntry("echo", "a test method", build, options=Echo, requires=("tau",), requires_stages=("classify",))
    monkeypatch.setitem(METHOD_TABLE, "echo", entry)
    with pytest.raises(ConfigError) as caught:
        check_options(["echo"], {"echo": {"k": 0}})
    assert caught.value.where == "evaluate.options.echo.k"
    with pytest.raises(ConfigError, match="echo needs the classify stages"):
        build_method("echo", tools, {"loud": True}, None)
    from workbench.methods.learned import LearnedParts

    build_method("echo", tools, {"loud": True, "k": 2}, LearnedParts(tau=0.5))
    assert built == [("echo", 2, True, None)]
    assert "#   loud: false  # bool — shout the answer" in options_template()
