"""The student's rows (tokenisation, loss mask, truncation), its sampler and its settings' checks."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def tokenizer(tiny_lm_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_lm_dir)


def _prompt(tokenizer, text="Is the capital of France Paris?"):
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def test_the_loss_covers_the_target_only_with_eos_after_generative_targets(tokenizer):
    from workbench.backends.prompts import encode
    from workbench.distill.student import IGNORE_INDEX, encode_row

    prompt = _prompt(tokenizer)
    prompt_ids = encode(tokenizer, prompt)
    target_ids = tokenizer("The capital of France is Paris.", add_special_tokens=False)["input_ids"]
    row = encode_row(tokenizer, prompt, "The capital of France is Paris.", single_token=False, max_length=512)
    assert list(row.input_ids) == prompt_ids + target_ids + [tokenizer.eos_token_id]
    assert list(row.labels) == [IGNORE_INDEX] * len(prompt_ids) + target_ids + [tokenizer.eos_token_id]
    assert row.target_tokens == len(target_ids) + 1 and not row.truncated

    # a scoring decision: the first answer token only, nothing after it (the controller reads one next token)
    first = tokenizer("Yes", add_special_tokens=False)["input_ids"][0]
    row = encode_row(tokenizer, prompt, "Yes", single_token=True, max_length=512)
    assert list(row.input_ids) == [*prompt_ids, first]
    assert list(row.labels) == [IGNORE_INDEX] * len(prompt_ids) + [first]


def test_long_rows_lose_prompt_tokens_from_the_left_and_keep_the_target(tokenizer):
    from workbench.backends.prompts import encode
    from workbench.distill.student import IGNORE_INDEX, encode_row

    prompt = _prompt(tokenizer, "Paris is a city on the Seine. " * 20)
    prompt_ids = encode(tokenizer, prompt)
    row = encode_row(tokenizer, prompt, "No", single_token=True, max_length=30)
    assert len(row.input_ids) == 30 and row.truncated
    assert list(row.input_ids[:-1]) == prompt_ids[-29:]  # the end of the prompt (the assistant opener) survives
    assert list(row.labels[:-1]) == [IGNORE_INDEX] * 29 and row.labels[-1] == row.input_ids[-1]
    long_target = encode_row(tokenizer, prompt, "Paris is a city on the Seine. " * 20, single_token=False, max_length=8)
    assert len(long_target.input_ids) == 8 and long_target.target_tokens == 7 and long_target.labels[0] == IGNORE_INDEX


def test_collate_pads_right_and_masks_the_padding(tokenizer):
    from workbench.distill.student import IGNORE_INDEX, EncodedRow, collate

    rows = [EncodedRow((1, 2, 3), (IGNORE_INDEX, 2, 3), "refine", 2, False), EncodedRow((4,), (4,), "enrich", 1, False)]
    batch = collate(rows, pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE_INDEX, 2, 3], [4, IGNORE_INDEX, IGNORE_INDEX]]


def test_the_row_order_depends_on_seed_and_epoch_only_and_a_resume_skips_what_was_seen():
    from workbench.distill.student import EpochShuffle

    a, b = EpochShuffle(10, seed=3), EpochShuffle(10, seed=3)
    first = list(a)
    assert first == list(b) and sorted(first) == list(range(10))
    a.set_epoch(1)
    second = list(a)
    assert second != first and sorted(second) == list(range(10))
    b.set_epoch(1)
    b.skip_rows = 4
    assert list(b) == second[4:]
    assert list(b) == second  # the skip applies to one pass only


def test_settings_are_checked_with_the_recipe_key():
    from workbench.distill.student import LoraSettings
    from workbench.distill.train import TrainSettings

    with pytest.raises(ConfigError, match=r"distill\.lora_dropout"):
        LoraSettings(dropout=1.0)
    with pytest.raises(ConfigError, match=r"distill\.target_modules"):
        LoraSettings(target_modules=())
    with pytest.raises(ConfigError, match=r"distill\.strategy.*deepspeed_stage_3"):
        TrainSettings(strategy="fsdp")
    with pytest.raises(ConfigError, match=r"distill\.precision"):
        TrainSettings(precision="8-bit")


def test_target_modules_absent_from_the_base_are_a_config_error(tiny_lm_dir):
    from workbench.distill.student import LoraSettings, load_student

    with pytest.raises(ConfigError) as err:
        load_student(str(tiny_lm_dir), LoraSettings(target_modules=("q_proj", "query_key_value")))
    assert err.value.where == "distill.target_modules"
    assert "['query_key_value'] not in the base model" in err.value.what and "q_proj" in err.value.what
    assert "\n" not in str(err.value)
    model, _ = load_student(str(tiny_lm_dir), LoraSettings(r=2, target_modules=("self_attn.q_proj",)))
    assert any("lora_A" in name for name, _ in model.named_parameters())


def test_a_row_without_tokens_is_a_data_error(tokenizer):
    from workbench.distill.student import encode_row

    with pytest.raises(DataError, match="target encodes to no token"):
        encode_row(tokenizer, _prompt(tokenizer), "", single_token=True, max_length=64)


def test_the_target_loss_equals_transformers_loss_and_reads_only_the_target_positions(tiny_lm_dir):
    import torch

    from workbench.distill.student import IGNORE_INDEX, EncodedRow, LoraSettings, collate, load_student, target_loss

    torch.manual_seed(0)
    model, _ = load_student(str(tiny_lm_dir), LoraSettings(r=4, alpha=8, dropout=0.0))
    rows = [  # a long prompt and a short one, targets of 3 and 1 tokens, right-padded together
        EncodedRow(tuple(range(5, 29)), (IGNORE_INDEX,) * 21 + (26, 27, 28), "refine", 3, False),
        EncodedRow(tuple(range(40, 49)), (IGNORE_INDEX,) * 8 + (48,), "enrich", 1, False),
    ]
    batch = collate(rows, pad_id=0)
    widths = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, i, o: widths.append(o.shape[1]))
    ours = target_loss(model, batch)
    hook.remove()
    theirs = model(**batch).loss
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-6, abs=1e-7)
    # the output layer ran at 4 positions (20..22 predict row 0's target, 7 row 1's), not at all 24
    assert widths == [4]
    ours_grad = torch.autograd.grad(ours, [p for p in model.parameters() if p.requires_grad])
    theirs_grad = torch.autograd.grad(model(**batch).loss, [p for p in model.parameters() if p.requires_grad])
    for a, b in zip(ours_grad, theirs_grad, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_lm_dir):
    import torch

    from workbench.distill.student import (
        IGNORE_INDEX,
        EncodedRow,
        LoraSettings,
        collate,
        load_student,
        target_loss,
        use_gradient_checkpointing,
    )

    batch = collate([EncodedRow(tuple(range(5, 25)), (IGNORE_INDEX,) * 17 + (22, 23, 24), "refine", 3, False)], 0)
    results = []
    for checkpointing in (False, True):
        torch.manual_seed(0)  # the same LoRA initialisation
        model, _ = load_student(str(tiny_lm_dir), LoraSettings(r=4, alpha=8, dropout=0.0))
        model.train()
        if checkpointing:
            use_gradient_checkpointing(model)
        loss = target_loss(model, batch)
        trainable = [p for p in model.parameters() if p.requires_grad]
        results.append((float(loss.detach()), torch.autograd.grad(loss, trainable)))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-6)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
