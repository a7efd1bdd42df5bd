"""Served parity on a model whose generation config ends sequences at a second EOS id (as a Llama-3-style model ends
a turn with ``<|eot_id|>`` beside the tokenizer's ``<|end_of_text|>``): through a live ``serve-model``, the served
generator answers exactly as in-process — same texts, finish reasons, EOS ids and log-probs — and the token-level
features (and P(True) / verbalized confidence, read exactly: top k or teacher-forced) agree to 1e-5 (float rounding:
the server's continuous batch is shaped otherwise than the in-process one, which moves the last bits — 2e-6 seen on a
sample-based entropy). Also when the server does not know that EOS id and runs past it: the client cuts the answer
there, as in-process decoding stops."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.tiny_models import build_tiny_llama
from workbench.backends.factory import build_served_generator
from workbench.backends.generator import Generator
from workbench.backends.prompts import ANSWER_SYSTEM
from workbench.serve.openai_server import start_in_thread
from workbench.uncertainty.calculators import StatSettings, compute_stats
from workbench.uncertainty.features import compute_features, required_stats

QUESTIONS = ["Who wrote Hamlet?", "Which river flows through Paris?", "What is the capital of France?"]
FEATURES = ["confidence", "dtr_nll", "mars", "entropy", "ptrue", "verbalized_confidence"]
SETTINGS = StatSettings(samples=3, max_new_tokens=12)
TOLERANCE = 1e-5


def _prompts(generator) -> list[str]:
    return [generator.build_prompt(q, None, max_new_tokens=12, system=ANSWER_SYSTEM).text for q in QUESTIONS]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``(plain, two_eos, extra)``: a tiny Llama with varied greedy answers; the same model whose
    generation_config.json adds ``extra`` — a token the first greedy answer produces and the others do not — as a
    second EOS id; that id."""
    root = tmp_path_factory.mktemp("two-eos")
    plain = build_tiny_llama(root / "plain", seed=3, initializer_range=1.0, tie_embeddings=False, max_positions=1024)
    probe = Generator(str(plain), cache=None, batch_size=4)
    answers = probe.generate(_prompts(probe), max_new_tokens=12)
    eos = probe.tokenizer.eos_token_id
    others = {t for a in answers[1:] for t in a.token_ids.tolist()}
    extra = next(t for t in answers[0].token_ids.tolist()[2:] if t not in others and t != eos)
    two = shutil.copytree(plain, root / "two")
    config_file = two / "generation_config.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    config_file.write_text(json.dumps({**config, "eos_token_id": [eos, extra]}))
    return plain, two, extra


@pytest.fixture(scope="module")
def in_process(models):
    return Generator(str(models[1]), cache=None, batch_size=4)


def _served(server, tokenizer_dir):
    return build_served_generator(
        base_url=server.base_url, model="tiny", tokenizer=str(tokenizer_dir), top_logprobs=5, batch_size=4, cache=False
    )


def _features(generator) -> list[dict[str, float]]:
    stats = compute_stats(
        [{"question": q} for q in QUESTIONS], required_stats(FEATURES), generator=generator, settings=SETTINGS
    )
    return [compute_features(row, FEATURES) for row in stats]


def _assert_same(local, served, extra) -> None:
    prompts = _prompts(local)
    want = local.generate(prompts, max_new_tokens=12)
    got = served.generate(prompts, max_new_tokens=12)
    assert want[0].finish_reason == "eos" and want[0].eos_token_id == extra  # the second EOS id ended it
    for a, b in zip(want, got, strict=True):
        assert (b.text, b.finish_reason, b.token_ids.tolist()) == (a.text, a.finish_reason, a.token_ids.tolist())
        assert b.eos_token_id == a.eos_token_id
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=TOLERANCE)
        assert (a.eos_logprob is None) == (b.eos_logprob is None)
        if a.eos_logprob is not None:
            assert b.eos_logprob == pytest.approx(a.eos_logprob, abs=TOLERANCE)
    for a, b in zip(_features(local), _features(served), strict=True):
        assert set(a) == set(FEATURES)
        for name in FEATURES:
            assert np.isfinite(b[name]), name
            assert b[name] == pytest.approx(a[name], abs=TOLERANCE), name


def test_served_answers_and_token_features_equal_in_process_with_a_second_eos_id(models, in_process):
    _, two, extra = models
    with start_in_thread(str(two), served_name="tiny", max_logprobs=1000, batch_size=4) as server:
        served = _served(server, two)
        try:
            assert extra in served.eos_ids and served.eos_ids == in_process.eos_ids
            assert served.max_context == in_process.max_context == 1024  # from the server, not a guess
            assert served.probe_record.context == 1024
            _assert_same(in_process, served, extra)
            assert served.option_reads["teacher_forced"] > 0 and not served.absent_reads  # top 5: some forced
        finally:
            served.close()


def test_a_server_that_runs_past_the_second_eos_id_is_cut_there(models, in_process):
    plain, two, extra = models
    with start_in_thread(str(plain), served_name="tiny", max_logprobs=1000, batch_size=4) as server:
        served = _served(server, two)  # the model's own files (the tokenizer reference) name the second EOS id
        try:
            raw = served.client.completion(
                served.encode_prompt(_prompts(in_process)[0], 200), max_tokens=12, temperature=0.0
            )
            assert len(raw["choices"][0]["text"]) > len(
                in_process.generate(_prompts(in_process)[:1], max_new_tokens=12)[0].text
            )
            _assert_same(in_process, served, extra)
        finally:
            served.close()
