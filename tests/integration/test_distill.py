"""The ``distill`` stage end to end on the tiny model (train, adapter, held-out scoring of base and student, the
report section), its errors, and a training run killed with SIGKILL that resumes from its checkpoint."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.core.errors import ConfigError, DataError

DECISION_PROMPTS = {
    "enrich": (
        "ENRICH_PROMPT",
        {"query": "capital of France {i}"},
        '{{"dense": "the capital city of France {i}", "keywords": ["France", "capital"]}}',
    ),
    "channel_weights": ("WEIGHTS_PROMPT", {"query": "who wrote Hamlet {i}"}, "B"),
    "refine": ("RELEVANCE_PROMPT", {"query": "capital of France {i}", "passage": "Paris is the capital."}, "Yes"),
    "completeness": ("COMPLETENESS_PROMPT", {"query": "Nile {i}", "passage": "The Nile flows north."}, "Yes"),
    "compress": (
        "COMPRESS_PROMPT",
        {"previous": "Paris.", "center": "It is big {i}.", "following": "The end.", "max_words": 12, "query": "Paris"},
        "Paris is big.",
    ),
    "elements": ("ELEMENTS_PROMPT", {"question": "who wrote Hamlet {i}", "max_elements": 4}, '["author of Hamlet"]'),
    "coverage": ("ENTAIL_PROMPT", {"element": "capital of France {i}", "passage": "Paris is the capital."}, "Yes"),
    "follow_up": (
        "FOLLOW_UP_PROMPT",
        {"question": "who wrote Hamlet {i}", "element": "author", "found": "- Hamlet"},
        "author of Hamlet",
    ),
}


def _rows(model_dir, n: int, offset: int = 0):
    """``n`` rows per decision from the teacher, and as many gold rows for the scoring decisions, rendered with the
    tiny model's chat template and the controller's own prompts."""
    from transformers import AutoTokenizer

    from workbench.distill.traces import SCORING_DECISIONS, TraceRow
    from workbench.methods import controller

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    for decision, (prompt_name, fields, target) in DECISION_PROMPTS.items():
        for i in range(offset, offset + n):
            values = {k: v.format(i=i) if isinstance(v, str) else v for k, v in fields.items()}
            message = getattr(controller, prompt_name).format(**values)
            rendered = tokenizer.apply_chat_template(
                [{"role": "system", "content": controller.CONTROLLER_SYSTEM}, {"role": "user", "content": message}],
                tokenize=False,
                add_generation_prompt=True,
            )
            scoring = decision in SCORING_DECISIONS
            yes_no = scoring and decision != "channel_weights"
            for source in ("teacher", "gold") if scoring else ("teacher",):
                rows.append(
                    TraceRow(
                        decision=decision,
                        source=source,
                        question_id=f"q{i}",
                        input=rendered,
                        target=target.format(i=i),
                        single_token=scoring,
                        score=(0.9 if source == "teacher" else 1.0) if yes_no else math.nan,
                    )
                )
    return rows


def _config(model_dir, **distill):
    from workbench.recipe import DistillSection, RecipeConfig

    settings = {
        "base_model": str(model_dir),
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_dropout": 0.0,
        "learning_rate": 0.01,
        "epochs": 2,
        "batch_size": 8,
        "max_length": 512,
        "checkpoint_every": 0,
        "eval_limit": 2,
        **distill,
    }
    return RecipeConfig(
        name="distill-test", stages=["distill_data", "distill"], tracker="none", distill=DistillSection(**settings)
    )


def _run_stage(config, run_dir: Path, traces_parent: Path):
    """Run the distill stage function as the runner does (into a temporary directory committed on success)."""
    from workbench.backends.cost import CostCounter
    from workbench.core.atomic import atomic_directory
    from workbench.core.tracking import NullTracker
    from workbench.stages.context import Resources, StageContext
    from workbench.stages.distill.run import run
    from workbench.stages.registry import STAGES

    counter = CostCounter()
    out = run_dir / "stages" / "distill"
    with atomic_directory(out) as tmp:
        ctx = StageContext(
            config=config,
            spec=STAGES["distill"],
            out_dir=tmp,
            run_dir=run_dir,
            inputs={"distill_data": traces_parent},
            resources=Resources(config, counter),
            tracker=NullTracker(),
            counter=counter,
            key="testkey",
        )
        summary = run(ctx)
    return out, summary


@pytest.fixture(scope="module")
def traces(tiny_lm_long_dir, tmp_path_factory):
    from workbench.distill.traces import save_traces

    parent = tmp_path_factory.mktemp("distill_data")
    save_traces(
        {"train": _rows(tiny_lm_long_dir, 4), "heldout": _rows(tiny_lm_long_dir, 2, offset=100)}, parent / "traces"
    )
    return parent


def test_the_distill_stage_trains_writes_the_adapter_and_scores_base_and_student(
    tiny_lm_long_dir, traces, tmp_path, monkeypatch
):
    from workbench.backends.lora import resolve_adapter_model
    from workbench.stages.distill.report import distill_lines

    run_dir = tmp_path / "run"
    config = _config(tiny_lm_long_dir, merge=True)
    # first attempt: interrupted after training (the adapter write fails); its checkpoints stay in the scratch dir
    import workbench.stages.distill.run as distill_run  # binds lora's save_lora_adapter at its top

    original = distill_run.save_lora_adapter

    def broken(*args, **kwargs):
        raise KeyboardInterrupt("simulated interruption after training")

    monkeypatch.setattr(distill_run, "save_lora_adapter", broken)
    with pytest.raises(KeyboardInterrupt):
        _run_stage(config, run_dir, traces)
    assert not (run_dir / "stages" / "distill").exists()  # nothing half-written
    checkpoints = sorted(p.name for p in (run_dir / "scratch" / "distill-testkey" / "checkpoints").iterdir())
    assert checkpoints == ["step-00000006.ckpt", "step-00000012.ckpt"]  # 48 rows / 8 per batch: 6 steps an epoch
    monkeypatch.setattr(distill_run, "save_lora_adapter", original)

    out, flat = _run_stage(config, run_dir, traces)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == 12 and summary["steps_this_run"] == 0  # the finished run was reused
    assert summary["rows_trained"] == 48 and summary["rows_by_decision"]["refine"] == 8
    assert summary["rows_by_decision"]["enrich"] == 4 and len(summary["loss_curve"]) == summary["steps"] == 12
    assert len(summary["epoch_losses"]) == 2 and summary["epoch_losses"][1] < summary["epoch_losses"][0]
    assert flat["rows_trained"] == 48 and flat["strategy"] == "auto"

    payload = json.loads((out / "adapter.json").read_text())
    assert payload["base_model"] == str(tiny_lm_long_dir) and payload["r"] == 4
    assert payload["decisions"] == sorted(DECISION_PROMPTS) and payload["training"]["sources"] == ["teacher", "gold"]
    assert (out / "adapter.safetensors").is_file() and (out / "adapter_config.json").is_file()
    assert (out / "merged" / "config.json").is_file()
    assert resolve_adapter_model(out).path != str(tiny_lm_long_dir)

    heldout = json.loads((out / "heldout.json").read_text())
    assert heldout["rows"]["refine"] == {"teacher": 2, "gold": 2} and heldout["rows"]["enrich"]["gold"] == 0
    for model in ("base", "student"):
        assert set(heldout[model]) == set(DECISION_PROMPTS)
        for decision, figures in heldout[model].items():
            assert figures["tokens_per_decision"] > 0 and figures["seconds_per_decision"] > 0, decision
            if figures["kind"] == "single_token":
                assert 0.0 <= figures["teacher"]["accuracy"] <= 1.0
                assert figures["generated_tokens_per_decision"] == 0
            else:
                assert decision not in ("refine", "coverage", "completeness", "channel_weights")
                assert 0.0 <= figures["parse_failure_rate"] <= 1.0 and figures["teacher"]["token_f1"] is not None
                assert figures["generated_tokens_per_decision"] > 0
    # every yes / no target is Yes and every intent B: the student learnt them
    for decision in ("refine", "completeness", "coverage", "channel_weights"):
        assert heldout["student"][decision]["teacher"]["accuracy"] == 1.0, decision

    report = tmp_path / "report"
    lines = distill_lines(out, report)
    assert (report / "distill_loss.png").is_file() and lines[0] == "## Distilled controller"
    text = "\n".join(lines)
    assert "| refine | 8 | 2 / 2 |" in text and "| enrich | 4 | 2 / 0 |" in text
    assert "resumed from the step-12 checkpoint" in text and "Mean loss per epoch: " in text


def test_an_empty_training_set_and_bad_target_modules_are_refused(tiny_lm_long_dir, tmp_path):
    from workbench.distill.traces import save_traces

    parent = tmp_path / "distill_data"
    teacher_only = [r for r in _rows(tiny_lm_long_dir, 1) if r.source == "teacher"]
    save_traces({"train": teacher_only, "heldout": teacher_only}, parent / "traces")
    with pytest.raises(DataError, match="no training rows from source\\(s\\) gold"):
        _run_stage(_config(tiny_lm_long_dir, sources=["gold"]), tmp_path / "run", parent)
    with pytest.raises(ConfigError) as err:
        _run_stage(_config(tiny_lm_long_dir, target_modules=["c_attn"]), tmp_path / "run", parent)
    assert err.value.where == "distill.target_modules" and "q_proj" in err.value.what
    assert not (tmp_path / "run" / "stages" / "distill").exists()


def test_several_processes_without_a_launcher_are_refused(tiny_lm_long_dir, tmp_path, monkeypatch):
    from workbench.stages.distill.run import LAUNCHER_VARIABLES, check_launch

    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="need a launcher: start the run with torchrun or srun") as err:
        _run_stage(_config(tiny_lm_long_dir, devices=2, accelerator="cpu"), tmp_path / "run", tmp_path)
    assert err.value.where == "distill.devices"
    check_launch(1)  # one process needs none
    check_launch(8, {"WORLD_SIZE": "8"})  # torchrun's environment


def test_a_recipe_with_a_bad_distill_section_fails_at_load(tmp_path):
    from workbench.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nstages: [build_data, distill_data, distill]\ndistill:\n  lora_dropout: 1.5\n")
    with pytest.raises(ConfigError, match=r"distill\.lora_dropout"):
        load_recipe(str(recipe))
    recipe.write_text("name: r\nstages: [build_data, distill_data, distill]\ndistill:\n  sources: []\n")
    with pytest.raises(ConfigError, match=r"distill\.sources"):
        load_recipe(str(recipe))


KILLED_RUN = """
import os, signal, sys
sys.path.insert(0, {root!r})
import lightning
from tests.unit.distill.test_student_train import _train

class Kill(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            os.kill(os.getpid(), signal.SIGKILL)

_train({model!r}, {ckpt!r}, callbacks=[Kill()])
"""


def test_a_run_killed_with_sigkill_resumes_from_its_last_checkpoint(tiny_lm_dir, tmp_path):
    from tests.unit.distill.test_student_train import STEPS_PER_EPOCH, _train

    root = str(Path(__file__).resolve().parents[2])
    script = textwrap.dedent(KILLED_RUN).format(root=root, model=str(tiny_lm_dir), ckpt=str(tmp_path))
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004.ckpt", "step-00000006.ckpt"]
    result = _train(tiny_lm_dir, tmp_path)
    assert result.resumed_from == STEPS_PER_EPOCH and result.steps_this_run == STEPS_PER_EPOCH
    assert len(result.loss_curve) == 2 * STEPS_PER_EPOCH
