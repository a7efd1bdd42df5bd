"""InSemRAG's controller plumbing (issue 14): ``controller: prompted | heuristic | distilled`` and
``controller_model`` — a second generator (from the run's Resources, cached per reference, the answering generator
when it names the same weights) whose LM calls count in the run's counter; a distilled adapter read through
``workbench.backends.lora``; the ``insemrag_distilled`` variant; the errors, at recipe load where possible."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.methods.test_insemrag import FAST, QUESTION
from workbench.core.errors import AssetError, ConfigError
from workbench.methods.registry import build_method, check_options
from workbench.recipe import load_recipe

SMALL = {**FAST, "max_rounds": 1, "enrich_tokens": 4, "elements_tokens": 4, "follow_up_tokens": 4}
"""One round, short generations: enough to see which model each decision runs on."""


@pytest.fixture(scope="module")
def other_lm_dir(tmp_path_factory):
    """A second tiny Llama, different weights from the answering one (seed 1), with a long window."""
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-controller"), seed=1, max_positions=4096)


def spy(monkeypatch, generator) -> dict[str, int]:
    """Count the prompts ``generator`` generates from and scores."""
    seen = {"generate": 0, "logprobs": 0}
    generate, logprobs = generator.generate, generator.next_token_logprobs

    def counted_generate(prompts, **kwargs):
        seen["generate"] += len(prompts)
        return generate(prompts, **kwargs)

    def counted_logprobs(prompts, options, **kwargs):
        seen["logprobs"] += len(prompts)
        return logprobs(prompts, options, **kwargs)

    monkeypatch.setattr(generator, "generate", counted_generate)
    monkeypatch.setattr(generator, "next_token_logprobs", counted_logprobs)
    return seen


# ------------------------------------------------------------------------------------------------------ second model
def test_controller_model_runs_every_decision_on_a_second_model_counted_in_the_same_counter(
    ctools, other_lm_dir, monkeypatch
):
    method = build_method("insemrag", ctools, {**SMALL, "controller_model": str(other_lm_dir)}, None)
    controller = method.controller
    student = controller.generator
    assert student is not ctools.generator and controller.name == "prompted"
    assert Path(student.resolved.path) == Path(other_lm_dir).resolve() != Path(ctools.generator.resolved.path)
    assert student.counter is ctools.counter
    # one generator per reference and Tools
    assert (
        build_method("insemrag", ctools, {"controller_model": str(other_lm_dir)}, None).controller.generator is student
    )

    answering, second = spy(monkeypatch, ctools.generator), spy(monkeypatch, student)
    before = ctools.counter.lm_calls
    trace = method.answer(QUESTION).trace
    assert answering == {"generate": 1, "logprobs": 0}  # the final answer only
    assert second["generate"] >= 2 and second["logprobs"] >= len(trace.find("refine").detail["decisions"])
    assert ctools.counter.lm_calls - before == 1 + second["generate"] + second["logprobs"]
    assert trace.totals()["lm_calls"] == ctools.counter.lm_calls - before
    assert trace.find("elements").detail["controller"] == {
        "name": "prompted",
        "model": str(other_lm_dir),
        "answering_model": False,
    }


def test_a_controller_model_naming_the_answering_weights_reuses_the_answering_generator(ctools, tiny_lm_long_dir):
    method = build_method("insemrag", ctools, {**FAST, "controller_model": str(tiny_lm_long_dir)}, None)
    assert method.controller.generator is ctools.generator
    assert build_method("insemrag", ctools, FAST, None).controller.generator is ctools.generator
    assert method.controller_info["answering_model"] is True


def test_resources_build_the_controller_generator_once_per_reference(tiny_lm_long_dir, other_lm_dir, ctools):
    from workbench.backends.cost import CostCounter
    from workbench.recipe import GeneratorSection, RecipeConfig
    from workbench.stages.context import Resources

    config = RecipeConfig(name="t", stages=["build_data"])
    config.generator = GeneratorSection(model=str(tiny_lm_long_dir), cache=False)
    resources = Resources(config, CostCounter())
    run = resources.generator()
    assert resources.controller_generator(str(tiny_lm_long_dir)) is run  # the recipe's generator.model
    assert resources.controller_generator(f"{tiny_lm_long_dir}/") is run  # another spelling of the same weights
    other = resources.controller_generator(other_lm_dir)
    assert other is not run and other.counter is resources.counter and other.cache is None
    assert resources.controller_generator(str(other_lm_dir)) is other

    ctools.generator = run
    loaded: list[str] = []

    def loader(spec):
        loaded.append(spec)
        return resources.controller_generator(spec)

    method = build_method(
        "insemrag", ctools, {**FAST, "controller_model": str(other_lm_dir)}, None, controller_generator=loader
    )
    assert method.controller.generator is other and loaded == [str(other_lm_dir)]


def test_a_controller_model_that_cannot_load_names_the_option(ctools, tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(AssetError) as caught:
        build_method("insemrag", ctools, {**FAST, "controller_model": str(empty)}, None)
    assert caught.value.where == "evaluate.options.insemrag.controller_model" and "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------------------ distilled
def fake_lora(monkeypatch, model_dir, seen):
    """Stand in for ``workbench.backends.lora`` where the controller options use it (no adapter to train or merge
    here): resolve any adapter to ``model_dir``, recording the path asked for; the real module is tested with its own
    tests."""
    from workbench.assets import ResolvedModel
    from workbench.methods.insemrag import controller_options  # binds lora's resolvers at its top

    def resolve_adapter_model(path):
        seen.append(Path(path))
        return ResolvedModel(str(path), str(Path(model_dir).resolve()), "merged-adapter-fingerprint", "adapter")

    def resolve_model(ref):  # not an adapter: a model reference, resolved as the real module does
        from workbench.assets import resolve_generator

        return resolve_generator(str(ref))

    monkeypatch.setattr(controller_options, "resolve_adapter_model", resolve_adapter_model)
    monkeypatch.setattr(controller_options, "resolve_model", resolve_model)


def test_insemrag_distilled_reads_the_runs_distill_output_through_the_lora_module(
    ctools, other_lm_dir, tmp_path, monkeypatch
):
    distill = tmp_path / "distill"
    distill.mkdir()
    (distill / "adapter.json").write_text("{}")
    seen: list[Path] = []
    fake_lora(monkeypatch, other_lm_dir, seen)

    method = build_method("insemrag_distilled", ctools, SMALL, None, distilled_adapter=distill)
    controller = method.controller
    assert seen == [distill / "adapter.json"] and method.name == "insemrag_distilled"
    assert controller.name == "distilled" and controller.score_mode == "logprobs"
    assert controller.generator is not ctools.generator
    assert controller.generator.resolved.fingerprint == "merged-adapter-fingerprint"
    trace = method.answer(QUESTION).trace
    assert trace.method == "insemrag_distilled" and trace.find("elements").detail["controller"]["name"] == "distilled"

    # an explicit adapter file wins over the run's output; insemrag with controller: distilled is the same thing
    options = {**SMALL, "controller": "distilled", "controller_model": str(distill / "adapter.json")}
    other = build_method("insemrag", ctools, options, None, distilled_adapter=tmp_path / "unused")
    assert other.controller.name == "distilled" and other.controller.generator is controller.generator
    # a plain model directory is a student too (e.g. a merged model)
    plain = build_method("insemrag_distilled", ctools, {**FAST, "controller_model": str(other_lm_dir)}, None)
    assert plain.controller.name == "distilled" and plain.controller.generator.resolved.source == "local"


def test_distilled_without_an_adapter_is_refused(ctools, tmp_path):
    with pytest.raises(ConfigError) as caught:
        build_method("insemrag_distilled", ctools, FAST, None)
    assert caught.value.where == "evaluate.options.insemrag_distilled.controller"
    with pytest.raises(ConfigError) as caught:
        build_method("insemrag", ctools, {**FAST, "controller": "distilled"}, None)
    assert caught.value.where == "evaluate.options.insemrag.controller"
    empty = tmp_path / "distill"  # a distill output without an adapter: the error names the controller option
    empty.mkdir()
    with pytest.raises(AssetError) as caught:
        build_method("insemrag_distilled", ctools, FAST, None, distilled_adapter=empty)
    assert caught.value.where == "evaluate.options.insemrag_distilled.controller" and "\n" not in str(caught.value)


def test_distilled_without_an_adapter_is_refused_when_the_recipe_loads(tmp_path, other_lm_dir):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nstages: [build_data, evaluate]\nevaluate:\n  methods: [insemrag, insemrag_distilled]\n"
        "  options:\n    insemrag:\n      controller: distilled\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe))
    message = str(caught.value)
    assert "evaluate.options.insemrag.controller" in message and f"{recipe}:7" in message
    assert "add the distill stage before evaluate" in message and "\n" not in message
    with pytest.raises(ConfigError, match=r"evaluate\.options\.insemrag_distilled\.controller"):
        load_recipe(str(recipe), ["evaluate.options.insemrag.controller=prompted"])
    # a controller_model stands in for the distill stage
    override = f"evaluate.options={{insemrag_distilled: {{controller_model: {other_lm_dir}}}}}"
    assert load_recipe(str(recipe), [override]).config.evaluate.methods == ["insemrag", "insemrag_distilled"]
    # the study never reads the distill output
    study = tmp_path / "s.yaml"
    study.write_text(
        "name: s\nstages: [build_data, study]\nstudy:\n  methods: [insemrag]\n  space:\n"
        "    insemrag: {keep_threshold: {low: 0.1, high: 0.9}}\nevaluate:\n  options:\n"
        "    insemrag: {controller: distilled}\n"
    )
    with pytest.raises(ConfigError, match="the study does not read the distill stage"):
        load_recipe(str(study))


# ------------------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize(
    ("method", "options", "key", "message"),
    [
        (
            "insemrag",
            {"controller": "big"},
            "controller",
            "controller must be prompted, heuristic or distilled, got 'big'",
        ),
        (
            "insemrag_distilled",
            {"controller": None},
            "controller",
            "controller must be prompted, heuristic or distilled",
        ),
        (
            "insemrag",
            {"controller": "heuristic", "controller_model": "smollm2"},
            "controller_model",
            "heuristic controller has none",
        ),
        ("insemrag", {"controller_model": "/no/such/model"}, "controller_model", "no such model directory or adapter"),
        ("insemrag", {"controller_model": "./relative/missing"}, "controller_model", "no such model directory"),
        ("insemrag", {"controller_model": ""}, "controller_model", "controller_model must be"),
        ("insemrag", {"controller_model": 3}, "controller_model", "controller_model must be"),
        ("insemrag", {"keep_threshold": 1.5}, "keep_threshold", "keep_threshold must be a number in [0, 1]"),
        ("insemrag_distilled", {"keep_threshold": "high"}, "keep_threshold", "keep_threshold must be"),
        (
            "insemrag_distilled",
            {"controller": "heuristic", "enrich_tokens": 8},
            "enrich_tokens",
            "prompted controller's caps only",
        ),
    ],
)
def test_bad_controller_options_are_refused_naming_the_option(method, options, key, message):
    with pytest.raises(ConfigError) as caught:
        check_options([method], {method: options})
    assert caught.value.where == f"evaluate.options.{method}.{key}" and message in caught.value.what


def test_good_controller_options_pass(tmp_path):
    (tmp_path / "adapter.json").write_text("{}")
    check_options(
        ["insemrag", "insemrag_distilled"],
        {
            "insemrag": {"controller": "prompted", "controller_model": "smollm2", "keep_threshold": 0.2},
            "insemrag_distilled": {"controller_model": str(tmp_path), "enrich_tokens": 16},
        },
    )
    check_options(["insemrag"], {"insemrag": {"controller_model": "HuggingFaceTB/SmolLM2-360M-Instruct"}})
    check_options(["insemrag"], {"insemrag": {"controller": "distilled", "controller_model": str(tmp_path)}})


def test_the_recipe_loader_names_the_line_of_a_bad_controller(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nstages: [build_data, evaluate]\nevaluate:\n  methods: [insemrag]\n  options:\n"
        "    insemrag: {controller: teacher}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_recipe(str(recipe))
    assert caught.value.where == f"{recipe}:6"
    assert (
        "evaluate.options.insemrag.controller: controller must be prompted, heuristic or distilled" in caught.value.what
    )


# ------------------------------------------------------------------------------------------------------ evaluate
def test_the_evaluate_stage_sees_every_controller_generator_and_notes_the_controller(ctools, other_lm_dir):
    from workbench.stages.evaluate.run import _generators, _notes

    methods = {
        "insemrag": build_method("insemrag", ctools, {**FAST, "controller_model": str(other_lm_dir)}, None),
        "heuristic": build_method("insemrag", ctools, {**FAST, "controller": "heuristic"}, None),
        "same": build_method("insemrag", ctools, FAST, None),
        "no_rag": build_method("no_rag", ctools, {}, None),
    }
    assert _generators(ctools, methods) == [ctools.generator, methods["insemrag"].controller.generator]
    notes = _notes(methods)
    assert notes["insemrag"] == f"prompted controller, model {other_lm_dir}"
    assert notes["heuristic"] == "heuristic controller, no model"
    assert notes["same"] == "prompted controller, the answering model" and "no_rag" not in notes
