"""Option scoring on a served model is exact or absent: an option outside the top k is teacher-forced with echo, and
NaN with a reason where the server has no echo — never the k-th log-prob, never P(True) = 0.5. Options are matched
by id, or by their text with its leading space where a server keys its top k by text (a SentencePiece tokenizer's
``decode([id])`` drops that space). What a server does not give exactly is listed, and a bundle refuses to score it
with calibrators fitted on exact values unless its recipe allowed it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tests.unit.backends.test_served_faults import FaultPeer
from workbench.backends.capabilities import Capabilities
from workbench.backends.factory import build_served_generator
from workbench.backends.prompts import ANSWER_SYSTEM
from workbench.backends.served import ABSENT_WITHOUT_ECHO, ServedGenerator, surfaces
from workbench.backends.served_client import ServedSettings
from workbench.backends.served_probe import ProbeRecord
from workbench.core.errors import ConfigError
from workbench.methods.backend_needs import check_served_departures, served_departures
from workbench.uncertainty.self_check_stats import self_check_stats

QUESTIONS = ["Who wrote Hamlet?", "Which river flows through Paris?", "What is the capital of France?"]


@pytest.fixture(scope="module")
def no_echo(server, tiny_lm_dir):
    """A served generator asking 3 alternatives per position of a server it takes to have no echo (serve-model,
    with the probe's finding replaced: every other capability is the server's)."""
    probed = build_served_generator(base_url=server.base_url, model="tiny", tokenizer=str(tiny_lm_dir), cache=False)
    probed.close()
    generator = build_served_generator(
        base_url=server.base_url,
        model="tiny",
        tokenizer=str(tiny_lm_dir),
        top_logprobs=3,
        cache=False,
        capabilities=dataclasses.replace(probed.capabilities, echo=False),
        probe_record=probed.probe_record,
    )
    yield generator
    generator.close()


def _chats(generator):
    return [generator.build_prompt(q, None, max_new_tokens=8, system=ANSWER_SYSTEM).text for q in QUESTIONS]


def test_without_echo_an_option_outside_the_top_k_is_nan_with_a_reason_never_a_floor(no_echo, local):
    prompts = _chats(local)
    options = [" the", " Paris", " river", " of", "a", "in", "true", "false"]
    tok = local.tokenizer  # and each prompt's greedy first token (its top 1): read from the top k
    firsts = {tok.decode(g.token_ids[:1]): int(g.token_ids[0]) for g in local.generate(prompts, max_new_tokens=1)}
    options += [t for t, i in firsts.items() if t and tok(t, add_special_tokens=False)["input_ids"][:1] == [i]]
    exact = local.next_token_logprobs(prompts, options)
    read = no_echo.next_token_logprobs(prompts, options)
    absent = np.isnan(read)
    assert absent.any() and (~absent).any()
    np.testing.assert_allclose(read[~absent], exact[~absent], atol=1e-4)  # what is read is exact
    option_ids = [tok(o, add_special_tokens=False)["input_ids"][0] for o in options]
    tops = [set(g.top_ids[0].tolist()) for g in local.generate(prompts, max_new_tokens=1, top_logprobs=3)]
    for row, top in zip(absent, tops, strict=True):  # NaN exactly where the option is outside the top 3
        assert (~row).tolist() == [i in top for i in option_ids]
    assert no_echo.option_reads["absent"] == int(absent.sum())
    assert no_echo.absent_reads[ABSENT_WITHOUT_ECHO] == int(absent.sum())


def test_without_echo_ptrue_and_verbalized_confidence_are_absent_not_one_half(no_echo, local):
    greedy = [g.text for g in local.generate(_chats(local), max_new_tokens=6)]
    samples = [[g] * 3 for g in greedy]
    checks = self_check_stats(no_echo, QUESTIONS, greedy, samples, 3)
    wanted = self_check_stats(local, QUESTIONS, greedy, samples, 3)
    values = np.asarray(checks, dtype=np.float64)
    assert np.isnan(values).any()  # the tiny model's verdict / digit tokens are not all in its top 3
    assert not np.any(values == 0.5)
    finite = np.isfinite(values)
    np.testing.assert_allclose(values[finite], np.asarray(wanted)[finite], atol=1e-4)


def test_with_echo_every_option_is_read_exactly(server, tiny_lm_dir, local):
    narrow = build_served_generator(
        base_url=server.base_url, model="tiny", tokenizer=str(tiny_lm_dir), top_logprobs=3, cache=False
    )
    try:
        greedy = [g.text for g in local.generate(_chats(local), max_new_tokens=6)]
        samples = [[g] * 3 for g in greedy]
        got = self_check_stats(narrow, QUESTIONS, greedy, samples, 3)
        want = self_check_stats(local, QUESTIONS, greedy, samples, 3)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
        assert narrow.option_reads["teacher_forced"] > 0 and not narrow.absent_reads
    finally:
        narrow.close()


def _sentencepiece_like(folder: Path) -> Path:
    """A tiny BPE tokenizer with SentencePiece's Metaspace: ``▁`` marks a word start, and decoding strips the space
    of the text's first token (so ``decode([id('▁yes')]) == 'yes'``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    core.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"])
    core.train_from_iterator(["a yes or no, yes no maybe, a true or false answer"] * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(folder)
    return folder


def test_options_are_matched_by_their_text_with_its_leading_space(tmp_path):
    folder = _sentencepiece_like(tmp_path / "sp")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    yes, no = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (" yes", " no"))
    assert tokenizer.convert_ids_to_tokens([yes, no]) == ["▁yes", "▁no"]
    assert tokenizer.decode([yes]) == "yes"  # what the client used to look the option up by
    assert surfaces(tokenizer, [yes, no]) == [" yes", " no"]
    # a server keying its top k by text (llama.cpp): " yes" is the option, "yes" another token
    top = {" yes": -0.2, "yes": -2.0, " maybe": -2.5}
    choice = {
        "text": " yes",
        "finish_reason": "length",
        "logprobs": {"tokens": [" yes"], "token_logprobs": [-0.2], "top_logprobs": [top], "text_offset": [0]},
    }
    caps = Capabilities(logprobs=True, top_logprobs=3, token_prompts=True, completions=True)
    record = ProbeRecord("tiny", context=64, texts=["x"], logprobs=[[-1.0]])
    with FaultPeer(choice=choice) as peer:
        generator = ServedGenerator(
            ServedSettings(peer.base_url, "tiny"), tokenizer=str(folder), capabilities=caps, probe_record=record
        )
        try:
            read = generator.read_next([[yes, no]], [yes, no])
        finally:
            generator.close()
    assert read[0, 0] == pytest.approx(-0.2)  # " yes", not the -2.0 of "yes"
    assert np.isnan(read[0, 1])  # " no" is not in the top 3 and this server has no echo: absent
    assert generator.absent_reads[ABSENT_WITHOUT_ECHO] == 1


def test_what_a_server_does_not_give_exactly_is_listed_and_refused_unless_allowed():
    echo = Capabilities(logprobs=True, top_logprobs=20, echo=True, token_prompts=True)
    no_echo = dataclasses.replace(echo, echo=False)
    features = ["confidence", "ptrue", "verbalized_confidence"]
    assert served_departures(features, echo) == {}
    departures = served_departures(features, no_echo)
    assert set(departures) == {"ptrue", "verbalized_confidence"} and "no echo" in departures["ptrue"]
    in_process_bundle: dict = {"ref": "tiny"}  # fitted on exact values (no served record)
    assert check_served_departures(features, echo, in_process_bundle, "http://x/v1") is None
    with pytest.raises(ConfigError) as err:
        check_served_departures(features, no_echo, in_process_bundle, "http://x/v1")
    assert "export.allow_approximate_features" in str(err.value) and "ptrue" in str(err.value)
    assert "\n" not in str(err.value)
    note = check_served_departures(features, no_echo, {**in_process_bundle, "allow_approximate_features": True}, "u")
    assert note is not None and "ptrue" in note and "allowed by the bundle's recipe" in note
    # a bundle whose own collection got these values the same way was fitted on them: nothing departs
    served_bundle = {"ref": "tiny", "served": {"approximate_features": departures}}
    assert check_served_departures(features, no_echo, served_bundle, "u") is None
