"""generator.prompt_format: the completion format for base models, `auto`'s choice, and that it reaches every prompt
the generator renders (and the generation cache's key)."""

from __future__ import annotations

import json
import shutil

import pytest

from workbench.backends.prompts import (
    ANSWER_SYSTEM,
    CLOSED_BOOK_TEMPLATE,
    PromptRenderer,
    prompt_style,
    render_chat,
    render_completion,
)
from workbench.core.errors import AssetError, ConfigError

pytest.importorskip("torch")


class _Tokenizer:
    """A tokenizer stand-in: only ``chat_template`` matters to the style choice."""

    def __init__(self, template: str | None) -> None:
        self.chat_template = template


# ---------------------------------------------------------------------- rendering (exact strings)
def test_completion_single_turn_with_and_without_system():
    assert render_completion("Question: Is Paris in France?", "Be brief.") == (
        "Be brief.\n\nQuestion: Is Paris in France?\nAnswer:"
    )
    assert render_completion("Question: Is Paris in France?") == "Question: Is Paris in France?\nAnswer:"
    # a system message given as the first message is the same single turn
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render_completion(messages) == "S\n\nU\nAnswer:"


def test_completion_multi_turn_is_the_plain_format_ending_in_answer():
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert render_completion(messages, "S") == (
        "System: S\nUser: Hi\nAssistant: Hello\nUser: Capital of France?\nAnswer:"
    )


def test_render_chat_dispatches_on_style():
    plain_tok = _Tokenizer(None)
    assert render_chat(plain_tok, "Q", "S") == "System: S\nUser: Q\nAssistant:"  # unchanged default
    assert render_chat(plain_tok, "Q", "S", style="completion") == "S\n\nQ\nAnswer:"


# ---------------------------------------------------------------------- choosing the style
def test_prompt_style_auto_chat_and_completion():
    with_template, without = _Tokenizer("{{ messages }}"), _Tokenizer(None)
    assert prompt_style("auto", with_template) == "chat"
    assert prompt_style("auto", without) == "plain"
    assert prompt_style("auto", with_template, declared="completion") == "completion"
    assert prompt_style("chat", with_template, declared="completion") == "chat"  # explicit beats declared
    assert prompt_style("chat", without) == "plain"
    assert prompt_style("completion", with_template) == "completion"
    with pytest.raises(ConfigError, match=r"generator\.prompt_format"):
        prompt_style("instruct", with_template)


def test_renderer_builds_answer_prompts_in_its_style():
    renderer = PromptRenderer(_Tokenizer(None), prompt_format="completion")
    assert renderer.chat("Q", system="S") == "S\n\nQ\nAnswer:"
    assert PromptRenderer(_Tokenizer(None)).chat("Q", system="S") == "System: S\nUser: Q\nAssistant:"


# ---------------------------------------------------------------------- through the Generator
@pytest.fixture(scope="module")
def base_lm_dir(tiny_lm_dir, tmp_path_factory):
    """The tiny Llama (it has a chat template) declared a base model by the workbench's model metadata file."""
    from workbench.assets import MODEL_META_FILE

    target = tmp_path_factory.mktemp("tiny-base") / "model"
    shutil.copytree(tiny_lm_dir, target)
    (target / MODEL_META_FILE).write_text(json.dumps({"prompt_format": "completion"}))
    return target


def test_auto_picks_completion_for_a_declared_base_model_and_chat_otherwise(tiny_lm_dir, base_lm_dir):
    from workbench.backends.generator import Generator

    question = "Is Paris in France or Spain?"
    base = Generator(base_lm_dir, max_context=256)
    assert base.prompts.style == "completion"
    built = base.build_prompt(question, None, max_new_tokens=8, system=ANSWER_SYSTEM)
    user = CLOSED_BOOK_TEMPLATE.replace("{question}", question)
    assert built.text == f"{ANSWER_SYSTEM}\n\n{user}\nAnswer:"
    assert base.render_chat("Reword this.") == "Reword this.\nAnswer:"

    chat = Generator(tiny_lm_dir, max_context=256)
    assert chat.prompts.style == "chat"
    expected = chat.tokenizer.apply_chat_template(
        [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert chat.build_prompt(question, None, max_new_tokens=8, system=ANSWER_SYSTEM).text == expected


def test_explicit_format_overrides_and_is_checked_before_loading(tiny_lm_dir, base_lm_dir, tmp_path):
    from workbench.backends.factory import build_generator
    from workbench.backends.generator import Generator

    assert Generator(tiny_lm_dir, max_context=256, prompt_format="completion").render_chat("Q") == "Q\nAnswer:"
    assert Generator(base_lm_dir, max_context=256, prompt_format="chat").prompts.style == "chat"
    # a missing model would be an AssetError: the format is refused first, as one line naming the key
    with pytest.raises(ConfigError, match=r"^generator\.prompt_format: unknown prompt format 'base'") as err:
        build_generator(tmp_path / "missing-model", cache=False, prompt_format="base")
    assert "\n" not in str(err.value)


def test_a_bad_declared_format_is_one_asset_error(base_lm_dir, tmp_path):
    from workbench.assets import MODEL_META_FILE, declared_prompt_format

    assert declared_prompt_format(base_lm_dir) == "completion"
    assert declared_prompt_format(tmp_path) is None
    (tmp_path / MODEL_META_FILE).write_text(json.dumps({"prompt_format": "instruct"}))
    with pytest.raises(AssetError, match="prompt_format must be one of chat, completion"):
        declared_prompt_format(tmp_path)


def test_the_format_changes_the_generation_cache_key(tiny_lm_dir, tmp_path):
    """Same weights, same question: the chat and completion prompts are different cache entries (the rendered text
    is the key), and each format hits its own entry the second time."""
    from workbench.backends.gencache import GenerationCache
    from workbench.backends.generator import Generator

    cache = GenerationCache(tmp_path / "gen.sqlite")
    chat = Generator(tiny_lm_dir, max_context=256, cache=cache)
    completion = Generator(tiny_lm_dir, max_context=256, cache=cache, prompt_format="completion")
    assert chat.fingerprint == completion.fingerprint

    def answer(gen):
        prompt = gen.build_prompt("Is Paris in France?", None, max_new_tokens=4, system=ANSWER_SYSTEM).text
        gen.generate([prompt], max_new_tokens=4)
        return prompt

    chat_prompt = answer(chat)
    completion_prompt = answer(completion)
    assert chat_prompt != completion_prompt
    assert completion.counter.cached_lm_calls == 0  # not served by the chat prompt's entry
    answer(completion)
    assert completion.counter.cached_lm_calls == 1


# ---------------------------------------------------------------------- wiring: run, second models, bundles
def test_the_run_generator_gets_the_sections_format_and_a_second_model_auto(monkeypatch, tiny_lm_dir):
    import workbench.stages.context as context  # binds the factory's build_generator at its top
    from workbench.assets import resolve_generator
    from workbench.backends.cost import CostCounter
    from workbench.recipe import load_recipe
    from workbench.stages.context import Resources

    seen: list[str] = []
    monkeypatch.setattr(context, "build_generator", lambda *a, **k: seen.append(k["prompt_format"]) or object())
    config = load_recipe("quickstart", [f"generator.model={tiny_lm_dir}", "generator.prompt_format=completion"]).config
    resources = Resources(config, CostCounter())
    resources.generator()
    resources._build_generator(resolve_generator(str(tiny_lm_dir)), None)  # how a second (controller) model is built
    assert seen == ["completion", "auto"]


def test_a_bundle_runtime_uses_the_recorded_format(monkeypatch):
    from types import SimpleNamespace

    from workbench.backends.cost import CostCounter
    from workbench.runtime import tools
    from workbench.runtime.options import runtime_options

    seen: list[str] = []

    def stop(*args, **kwargs):
        seen.append(kwargs["prompt_format"])
        raise RuntimeError("built")

    monkeypatch.setattr(tools, "build_generator", stop)  # the runtime's tools bind the factory's builders
    monkeypatch.setattr(tools, "_checked_model", lambda *a, **k: SimpleNamespace())
    for record in ({"ref": "x", "prompt_format": "completion"}, {"ref": "x"}):  # the second: an older bundle
        manifest = {"models": {"generator": record, "embedder": {"ref": "y"}}, "answering": {}}
        with pytest.raises(RuntimeError, match="built"):
            tools.build_runtime_tools(manifest, runtime_options({}), CostCounter(), [])
    assert seen == ["completion", "auto"]
