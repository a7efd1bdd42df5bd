"""The ``tune_reader`` stage end to end on the tiny model: training rows rendered as the answer stage renders them,
the reader adapter, base vs tuned scoring, the report section, the adapter as a generator reference, and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.recipe_overrides import run_overrides
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def _overrides(tmp_path, model, *extra):
    return run_overrides(
        tmp_path,
        model,
        "tune_reader.per_template=4",
        "tune_reader.eval_per_template=2",
        "tune_reader.learning_rate=0.01",
        "tune_reader.checkpoint_every=0",
        *extra,
        per_template=30,
    )


@pytest.fixture(scope="module")
def reader_run(tiny_lm_long_dir, tmp_path_factory):
    """One tune-reader run on the tiny model; the training rows it handed to train_student are recorded."""
    import workbench.distill.train as train

    tmp_path = tmp_path_factory.mktemp("tune_reader")
    seen: dict[str, list] = {}
    real = train.train_student

    def recording(model_dir, rows, **kwargs):
        seen["rows"] = list(rows)
        return real(model_dir, rows, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(train, "train_student", recording)
    try:
        result = run_recipe(load_recipe("tune-reader", _overrides(tmp_path, tiny_lm_long_dir)))
    finally:
        patch.undo()
    return tmp_path, result, seen["rows"]


def test_the_training_rows_are_the_answer_stage_prompts_with_the_gold_answer(reader_run, tiny_lm_long_dir):
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.distill.reader import reader_target
    from workbench.stages.answer.run import select_rows

    tmp_path, result, rows = reader_run
    assert [s.name for s in result.stages] == ["build_data", "tune_reader", "report"]
    data = tmp_path / "run" / "stages" / "build_data"
    questions = list(select_rows(load_saved_dataset_dict(data / "qa")["train"], None, 4))
    assert len(questions) == 12 and len(rows) == 36  # 4 of each of the three templates, in three modes
    by_mode = {m: [r for r in rows if r["decision"] == m] for m in ("closed_book", "rag", "gold")}
    assert [len(v) for v in by_mode.values()] == [12, 12, 12]
    for mode_rows in by_mode.values():
        assert [r["target"] for r in mode_rows] == [reader_target(q) for q in questions]
        assert [r["question_id"] for r in mode_rows] == [q["id"] for q in questions]
    # the gold rows hold each question's own gold passage, cut to answer.passage_chars; closed-book rows none
    corpus = datasets.load_from_disk(str(data / "corpus"))
    for question, gold, closed, rag in zip(
        questions, by_mode["gold"], by_mode["closed_book"], by_mode["rag"], strict=True
    ):
        passage = question["gold_passages"][0]["text"][:300]
        assert passage[:60] in gold["input"] and passage[:60] not in closed["input"]
        assert question["question"] in closed["input"] and len(rag["input"]) > len(closed["input"])
    assert len(corpus) > 100


def test_the_stage_writes_a_reader_adapter_that_loads_as_a_generator(reader_run, tiny_lm_long_dir):
    from transformers import AutoModelForCausalLM

    from workbench.assets import resolve_generator
    from workbench.backends.lora import read_adapter, resolve_model

    tmp_path, _, _ = reader_run
    stage = tmp_path / "run" / "stages" / "tune_reader"
    payload, tensors = read_adapter(stage)
    assert payload["format"] == "answer-reader-v1" and payload["decisions"] == ["closed_book", "rag", "gold"]
    assert (payload["r"], payload["target_modules"]) == (8, ["q_proj", "v_proj"]) and tensors
    summary = json.loads((stage / "summary.json").read_text())
    assert summary["rows_by_mode"] == {"closed_book": 12, "rag": 12, "gold": 12} and summary["steps"] == 5
    assert summary["questions_by_template"] == {"choice_cloze": 4, "choice_country": 4, "choice_nationality": 4}
    # trained: the merged model's logits are not the base's (LoRA's B starts at zero)
    tuned = resolve_model(str(stage))
    assert tuned.source == "adapter" and tuned.fingerprint != resolve_generator(str(tiny_lm_long_dir)).fingerprint
    import torch

    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(tuned.path)(input_ids=ids).logits.numpy()
        b = AutoModelForCausalLM.from_pretrained(tiny_lm_long_dir)(input_ids=ids).logits.numpy()
    assert np.abs(a - b).max() > 1e-4
    # a standard peft adapter directory too (issue 29): peft opens it over the base and gives the merged model
    from peft import PeftModel

    with torch.no_grad():
        c = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_lm_long_dir), stage)(input_ids=ids)
    np.testing.assert_allclose(c.logits.numpy(), a, atol=1e-4)
    config = json.loads((stage / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"].startswith("local:") and str(tmp_path) not in json.dumps(config)
    assert "The `train` split of `wiki-qa`" in (stage / "README.md").read_text()

    heldout = json.loads((stage / "heldout.json").read_text())
    assert heldout["split"] == "val" and heldout["questions"] == 6
    for name in ("base", "tuned"):
        assert set(heldout[name]["modes"]) == {"closed_book", "rag", "gold"}
        assert all(m["n"] == 6 for m in heldout[name]["modes"].values())
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Reader adapter" in report and "| **all** | 6 |" in report
    assert (tmp_path / "report" / "reader_accuracy.png").is_file() and (
        tmp_path / "report" / "reader_loss.png"
    ).is_file()


def test_the_adapter_records_its_training_data_and_a_reshuffled_recipe_is_refused(reader_run, tiny_lm_long_dir):
    from workbench.backends.lora import read_adapter
    from workbench.stages.tune_reader.run import training_data

    tmp_path, _, _ = reader_run
    stage = tmp_path / "run" / "stages" / "tune_reader"
    payload, _ = read_adapter(stage)
    config = load_recipe("tune-reader", _overrides(tmp_path, tiny_lm_long_dir)).config
    assert payload["training_data"] == training_data(config, "train")
    assert payload["training_data"]["seed"] == 0 and payload["training_data"]["articles"] > 1000
    load_recipe("quickstart", [f"generator.model={stage}"])  # the same data configuration
    with pytest.raises(ConfigError) as info:
        load_recipe("quickstart", [f"generator.model={stage}", "seed=1"])
    assert info.value.where == "command line: seed" and "outside train" in info.value.what


def test_the_answer_stage_runs_on_the_adapter(reader_run, tmp_path):
    run_dir, _, _ = reader_run
    stage = run_dir / "run" / "stages" / "tune_reader"
    overrides = run_overrides(
        tmp_path,
        stage,
        "answer.limit=2",
        "answer.max_new_tokens=4",
        "stages=[build_data,answer]",
        per_template=30,
    )
    run_recipe(load_recipe("quickstart", overrides))
    summary = json.loads((tmp_path / "run" / "stages" / "answer" / "summary.json").read_text())
    assert summary["generator_source"] == "adapter" and summary["n_questions"] == 2


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("tune_reader.split=nosuch", "tune_reader.split"),
        ("tune_reader.eval_split=nosuch", "tune_reader.eval_split"),
        ("tune_reader.target_modules=[nope]", "tune_reader.target_modules"),
        ("tune_reader.lora_dropout=1.5", "tune_reader.lora_dropout"),
        ("tune_reader.modes=[]", "tune_reader.modes"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(tiny_lm_long_dir, tmp_path, override, key):
    with pytest.raises(ConfigError) as info:
        run_recipe(
            load_recipe("tune-reader", _overrides(tmp_path, tiny_lm_long_dir, override, "tune_reader.per_template=1"))
        )
    assert info.value.where == key and "\n" not in str(info.value)
