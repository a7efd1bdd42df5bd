"""Training the LoRA student with Lightning on the tiny model: the loss falls, the adapter round-trips, DeepSpeed
ZeRO-2 runs on CPU in one process, an interrupted run resumes from its checkpoint, bad settings fail first."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from workbench.core.errors import AssetError, ConfigError, DataError

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ("q_proj", "v_proj")}
TRAIN = {"learning_rate": 1e-2, "epochs": 2, "batch_size": 8, "checkpoint_every": 4, "seed": 0}
STEPS_PER_EPOCH = 6  # 48 rows / 8


def _rows():
    rows = []
    for i in range(24):
        rows.append(
            {
                "input": f"<|user|>Is {i} even?<|end|>\n<|assistant|>",
                "target": "Yes" if i % 2 == 0 else "No",
                "single_token": True,
                "decision": "refine",
            }
        )
        rows.append(
            {
                "input": f"<|user|>Name {i}<|end|>\n<|assistant|>",
                "target": "The capital of France is Paris.",
                "single_token": False,
                "decision": "follow_up",
            }
        )
    return rows


def _train(model_dir, checkpoint_dir, *, callbacks=(), tracker=None, progress=False, **overrides):
    from workbench.distill.student import LoraSettings
    from workbench.distill.train import TrainSettings, train_student

    return train_student(
        model_dir,
        _rows(),
        lora=LoraSettings(**LORA),
        settings=TrainSettings(**{**TRAIN, **overrides}),
        checkpoint_dir=checkpoint_dir,
        tracker=tracker,
        callbacks=callbacks,
        progress=progress,
    )


class _Tracker:
    def __init__(self):
        self.logged = []
        self.progress_lines = []  # what the run's progress wrote

    def log(self, metrics, step=None):
        self.logged.append(metrics)


@pytest.fixture(scope="module")
def baseline(tiny_lm_dir, tmp_path_factory):
    """An uninterrupted two-epoch run with the default strategy (and a tracker)."""
    import workbench.core.logs as logs

    tracker = _Tracker()
    with pytest.MonkeyPatch.context() as patch:  # output to a log file, not a terminal: progress as lines
        patch.setattr(logs, "is_terminal", lambda: False)
        patch.setattr(logs, "_emit_line", tracker.progress_lines.append)
        result = _train(tiny_lm_dir, tmp_path_factory.mktemp("ckpt-baseline"), tracker=tracker, progress=None)
    return result, tracker


def _assert_same_weights(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_training_lowers_the_loss_and_logs_every_step(baseline):
    result, tracker = baseline
    losses = [p["loss"] for p in result.loss_curve]
    assert result.steps == len(losses) == 2 * STEPS_PER_EPOCH and result.resumed_from is None
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.05
    assert [p["epoch"] for p in result.loss_curve] == [0] * STEPS_PER_EPOCH + [1] * STEPS_PER_EPOCH
    assert [m["distill/loss"] for m in tracker.logged] == losses
    assert result.rows.rows == {"refine": 24, "follow_up": 24} and result.rows.truncated == 0
    assert all("lora_" in name for name in result.state) and len(result.state) == 8  # 2 layers x (q, v) x (A, B)


def test_progress_off_a_terminal_is_a_line_of_optimizer_steps_with_the_loss(baseline):
    _, tracker = baseline
    (line,) = tracker.progress_lines  # a fast run: only the last line (the rate limit holds the others)
    assert line.startswith(f"train (optimizer steps): {2 * STEPS_PER_EPOCH} of {2 * STEPS_PER_EPOCH} (100%) in ")
    assert ", loss " in line


def test_the_trained_adapter_round_trips_to_peft_s_merged_model(baseline, tiny_lm_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from workbench.assets import resolve_generator
    from workbench.backends.lora import resolve_adapter_model, save_lora_adapter

    result, _ = baseline
    save_lora_adapter(
        result.model,
        tmp_path,
        base_model=str(tiny_lm_dir),
        base_fingerprint=resolve_generator(str(tiny_lm_dir)).fingerprint,
        settings={**LORA, "target_modules": list(LORA["target_modules"])},
        decisions=["follow_up", "refine"],
        state=result.state,
    )
    merged = AutoModelForCausalLM.from_pretrained(resolve_adapter_model(tmp_path).path).eval()
    expected = copy.deepcopy(result.model).merge_and_unload().eval()
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        np.testing.assert_allclose(
            merged(input_ids=ids).logits.numpy(), expected(input_ids=ids).logits.numpy(), atol=1e-5
        )


def test_checkpoints_hold_the_trainable_weights_only(baseline, tiny_lm_dir, tmp_path):
    import torch

    from workbench.distill.train import latest_checkpoint

    _train(tiny_lm_dir, tmp_path, epochs=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step-00000004.ckpt", "step-00000006.ckpt"]  # every 4 steps and at the epoch's end
    checkpoint = torch.load(latest_checkpoint(tmp_path), weights_only=True)
    assert checkpoint["state_dict"] and all("lora_" in k for k in checkpoint["state_dict"])


def test_deepspeed_stage_2_runs_on_cpu_in_one_process(baseline, tiny_lm_dir, tmp_path):
    import lightning

    strategies = []

    class Spy(lightning.Callback):
        def on_train_start(self, trainer, pl_module):
            strategies.append([c.__name__ for c in type(trainer.strategy).__mro__])

    result = _train(tiny_lm_dir, tmp_path, strategy="deepspeed_stage_2", callbacks=[Spy()])
    assert "DeepSpeedStrategy" in strategies[0] and result.world_size == 1
    assert (tmp_path / "step-00000012.ckpt" / "latest").is_file()  # a DeepSpeed checkpoint directory
    # ZeRO-2 on one process is plain AdamW with the same batches: the same weights as the default strategy
    _assert_same_weights(result.state, baseline[0].state)
    assert result.loss_curve[-1]["loss"] < result.loss_curve[0]["loss"]


def test_an_interrupted_run_resumes_from_its_last_checkpoint(baseline, tiny_lm_dir, tmp_path):
    import lightning

    class Interrupt(lightning.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                raise RuntimeError("simulated interruption")

    with pytest.raises(RuntimeError, match="simulated interruption"):
        _train(tiny_lm_dir, tmp_path, callbacks=[Interrupt()])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004.ckpt", "step-00000006.ckpt"]
    result = _train(tiny_lm_dir, tmp_path)
    assert result.resumed_from == STEPS_PER_EPOCH and result.checkpoint.endswith("step-00000006.ckpt")
    assert result.steps_this_run == STEPS_PER_EPOCH and result.steps == 2 * STEPS_PER_EPOCH
    # the curve before the interruption came back with the checkpoint; the whole run equals an uninterrupted one
    assert [round(p["loss"], 5) for p in result.loss_curve] == [round(p["loss"], 5) for p in baseline[0].loss_curve]
    _assert_same_weights(result.state, baseline[0].state)


def test_bad_input_fails_before_any_model_is_loaded(tmp_path, monkeypatch):
    import shutil

    from workbench.distill import train

    missing_model = tmp_path / "no-model"  # reaching the model would be an AssetError, not these errors
    from workbench.distill.student import LoraSettings
    from workbench.distill.train import TrainSettings, train_student

    with pytest.raises(DataError, match="no training rows"):
        train_student(missing_model, [], lora=LoraSettings(), settings=TrainSettings(), checkpoint_dir=tmp_path)
    with pytest.raises(ConfigError, match="fp16") as err:
        _train(missing_model, tmp_path, precision="16-mixed", accelerator="cpu")
    assert err.value.where == "distill.precision"
    with pytest.raises(ConfigError, match="no CUDA GPU") as err:
        _train(missing_model, tmp_path, accelerator="gpu")
    assert err.value.where == "distill.accelerator"

    real_find_spec = train.importlib.util.find_spec
    monkeypatch.setattr(
        train.importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real_find_spec(name, *a)
    )
    with pytest.raises(ConfigError, match="needs the deepspeed package, which is not installed") as err:
        _train(missing_model, tmp_path, strategy="deepspeed_stage_2")
    assert err.value.where == "distill.strategy" and "\n" not in str(err.value)
    monkeypatch.undo()

    real_which = shutil.which
    monkeypatch.setattr(train.shutil, "which", lambda cmd, *a, **k: None if cmd in ("c++", "g++") else real_which(cmd))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ConfigError, match="needs a C\\+\\+ compiler") as err:
        _train(missing_model, tmp_path, strategy="deepspeed_stage_3", accelerator="cpu", devices=2)
    assert err.value.where == "distill.strategy"
    # one process builds no communication op, so it needs no compiler: the missing model is what stops it
    with pytest.raises(AssetError):
        _train(missing_model, tmp_path, strategy="deepspeed_stage_3", accelerator="cpu")


def test_a_one_process_cpu_run_marks_deepspeeds_shared_memory_collective_unbuildable(monkeypatch):
    """DeepSpeed compiles its shared-memory collective when its backend starts on CPU (57 s on 2 cores, a C++
    compiler needed); a one-process run has nothing to reduce across processes, so the strategy marks it unbuildable
    first — and leaves it alone when several processes share the node."""
    pytest.importorskip("deepspeed")
    import deepspeed.ops
    import torch
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
    from lightning.pytorch.strategies import DDPStrategy

    from workbench.distill.train import TrainSettings, build_strategy

    flags = deepspeed.ops.__compatible_ops__
    monkeypatch.setitem(flags, ShareMemCommBuilder.NAME, True)
    monkeypatch.setattr(DDPStrategy, "setup_environment", lambda self: None)  # no process group in this test
    two = build_strategy(TrainSettings(strategy="deepspeed_stage_2", devices=2), "cpu")
    assert two.parallel_devices == [torch.device("cpu", 0), torch.device("cpu", 1)]
    two.setup_environment()
    assert flags[ShareMemCommBuilder.NAME] is True
    build_strategy(TrainSettings(strategy="deepspeed_stage_2"), "cpu").setup_environment()
    assert flags[ShareMemCommBuilder.NAME] is False
