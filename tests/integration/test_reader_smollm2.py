"""The embedded ``smollm2-reader``: SmolLM2 + the reader adapter committed in the package (trained by the
tune-reader recipe) resolves over the installed SmolLM2 and reads its passages."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_the_embedded_reader_adapter_fits_the_installed_smollm2_and_answers_from_the_gold_passage(smollm2_dir):
    from workbench.assets import embedded_adapter_path, resolve_generator
    from workbench.backends.factory import build_generator
    from workbench.backends.lora import read_adapter, resolve_model
    from workbench.backends.prompts import ANSWER_SYSTEM, format_passages
    from workbench.data.wikiqa import build_wikiqa, load_articles
    from workbench.metrics.qa import score_answer

    payload, tensors = read_adapter(embedded_adapter_path("smollm2-reader"))
    assert payload["format"] == "answer-reader-v1" and payload["base_model"] == "smollm2"
    assert payload["base_fingerprint"] == resolve_generator("smollm2").fingerprint  # the installed base
    reader = resolve_model("smollm2-reader")
    assert reader.source == "embedded:smollm2-reader" and reader.path != smollm2_dir
    assert json.loads((embedded_adapter_path("smollm2-reader")).read_text())["kind"] == "lora_adapter" and tensors

    # twelve val questions (never trained on), each with its gold passage: the reader names the gold option
    data = build_wikiqa(load_articles(), templates=["choice_cloze"], max_per_template=40, ood_topics=["Arts"])
    questions = [data["val"][i] for i in range(12)]
    generator = build_generator(reader, cache=False)
    prompts = []
    for q in questions:
        golds = q["gold_passages"]
        context = format_passages([p["title"] for p in golds], [p["text"] for p in golds], 400)
        prompts.append(generator.build_prompt(q["question"], context, max_new_tokens=16, system=ANSWER_SYSTEM).text)
    outputs = generator.generate(prompts, max_new_tokens=16, temperature=0.0, stop=("\n",))
    right = [
        score_answer(o.text, q["answers"], q["options"])["contains"] for o, q in zip(outputs, questions, strict=True)
    ]
    assert sum(right) >= 9, [o.text for o in outputs]  # untuned SmolLM2: about half (docs/task.md)


def test_the_embedded_reader_opens_with_peft_over_the_real_smollm2(smollm2_dir, tmp_path):
    """issue 29: ``PeftModel.from_pretrained(SmolLM2, workbench/embedded/smollm2-reader)`` gives the workbench's
    merged reader (logits within 1e-4), and the shipped peft files are what the workbench writes from the adapter
    today (byte for byte but peft's version: regenerated from the same weights, never retrained)."""
    import numpy as np
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workbench.assets import embedded_adapter_path
    from workbench.backends.lora import read_adapter, resolve_model
    from workbench.backends.peft_dir import PEFT_FILES, base_reference, write_peft_files

    directory = embedded_adapter_path("smollm2-reader").parent
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    texts = ["Question: Which river flows through Paris?\nAnswer:", "The capital of Japan is", "Hamlet was written by"]
    merged = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-reader").path, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    with_peft = PeftModel.from_pretrained(base, directory).eval()
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids
            np.testing.assert_allclose(
                with_peft(input_ids=ids).logits.numpy(), merged(input_ids=ids).logits.numpy(), atol=1e-4
            )

    payload, tensors = read_adapter(directory)
    base_ref = payload["base_model"]
    write_peft_files(tmp_path, payload, tensors, base_reference(base_ref, resolve_model(base_ref)))
    for name in PEFT_FILES[1:]:  # the tensors and the model card
        assert (tmp_path / name).read_bytes() == (directory / name).read_bytes(), name
    shipped = json.loads((directory / PEFT_FILES[0]).read_text())  # the config, up to the installed peft's version
    now = json.loads((tmp_path / PEFT_FILES[0]).read_text())
    assert {k: now.get(k) for k in shipped if k != "peft_version"} == {
        k: v for k, v in shipped.items() if k != "peft_version"
    }
