"""``serve-model``'s text offsets in linear time (openai_engine.prefix_lengths) equal the decoding of every prefix, for
a byte-level BPE (GPT-2, SmolLM2) and a SentencePiece-style metaspace BPE with byte fallback (Llama, Gemma), on text
whose characters span several tokens; a decoder that is not local falls back to decoding every prefix."""

from __future__ import annotations

import pytest

from tests.tiny_models import build_tiny_tokenizer
from workbench.core.interrupt import Interrupted, interruptible
from workbench.serve.openai_engine import OFFSET_CHECK_EVERY, prefix_lengths

TEXT = (
    "The capital of France is Paris. Ünïcödé café — naïve façade; 東京は日本の首都です。 Emoji: 😀👍🏽 🇫🇷, "
    "e\u0301t\u00e9 and Hamlet was written by William Shakespeare around 1600. " * 3
)


def _metaspace_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    specials = ["<unk>", *(f"<0x{byte:02X}>" for byte in range(256))]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials)
    tokenizer.train_from_iterator(["The capital of France is Paris.", "William Shakespeare wrote Hamlet."], trainer)
    return tokenizer


def _exact(decode, ids: list[int]) -> list[int]:
    return [len(decode(ids[:t])) for t in range(len(ids))]


@pytest.mark.parametrize("kind", ["byte-level", "metaspace-byte-fallback"])
def test_prefix_lengths_equal_the_decoding_of_every_prefix(kind):
    if kind == "byte-level":
        tokenizer = build_tiny_tokenizer()

        def decode(ids: list[int]) -> str:
            return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

        ids = list(tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    else:
        metaspace = _metaspace_tokenizer()

        def decode(ids: list[int]) -> str:
            return metaspace.decode(ids, skip_special_tokens=False)  # the byte tokens are registered as special

        ids = metaspace.encode(TEXT).ids
        assert any(metaspace.id_to_token(i).startswith("<0x") for i in ids)  # characters split into bytes
    assert len(ids) > 3 * OFFSET_CHECK_EVERY
    assert decode(ids) == TEXT
    exact = _exact(decode, ids)
    assert len(set(exact)) < len(exact)  # some tokens add no character on their own (a split character)
    assert prefix_lengths(decode, ids) == exact


def test_a_decoder_that_is_not_local_falls_back_to_every_prefix():
    calls = []

    def decode(ids: list[int]) -> str:  # a length that depends on the whole prefix, not on its last tokens
        calls.append(len(ids))
        return "x" * (len(ids) + sum(ids) % 3)

    ids = [1] * 200
    assert prefix_lengths(decode, ids) == _exact(decode, ids)
    assert max(calls) == 199  # the fallback decoded the longest prefix too


def test_prefix_lengths_stop_for_an_interruption():
    with interruptible(lambda: True), pytest.raises(Interrupted):
        prefix_lengths(lambda ids: "a" * len(ids), list(range(100)))
