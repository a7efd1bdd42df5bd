"""Generator additions for the reference server: top-k log-probs per step, token-id prompts, teacher-forced prompt
log-probs (echo), the EOS step's top-k, and cache keys / cached blobs that stay valid."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.gencache import GenerationCache, decode_generation, encode_generation
from workbench.backends.generation_types import DecodingParams
from workbench.backends.prompts import encode

torch = pytest.importorskip("torch")

PROMPTS = ["The capital of France", "Question: who wrote Hamlet? Answer: William"]


@pytest.fixture(scope="module")
def shared_gen(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, max_context=128)


@pytest.fixture
def gen(shared_gen):
    """The module's generator with a fresh counter, no cache and its own EOS ids restored after the test."""
    shared_gen.counter = CostCounter()
    eos, cache = shared_gen.eos_ids, shared_gen.cache
    yield shared_gen
    shared_gen.eos_ids, shared_gen.cache = eos, cache


def test_top_logprobs_are_the_raw_distribution_and_change_nothing_else(gen):
    plain = gen.generate(PROMPTS, max_new_tokens=5, stop=None)
    vocab = gen.vocab_size
    full = gen.generate(PROMPTS, max_new_tokens=5, stop=None, top_logprobs=vocab + 50)  # capped at the vocabulary
    for a, b in zip(plain, full, strict=True):
        assert a.text == b.text and np.array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.logprobs, b.logprobs)
        assert a.top_ids is None and a.top_logprobs is None
        assert b.top_ids.shape == b.top_logprobs.shape == (len(b.token_ids), vocab)
        assert b.top_ids.dtype == np.int64 and b.top_logprobs.dtype == np.float32
        assert np.all(np.diff(b.top_logprobs, axis=1) <= 0)  # most likely first
        np.testing.assert_array_equal(b.top_ids[:, 0], b.token_ids)  # greedy: the chosen token is the top one
        np.testing.assert_array_equal(b.top_logprobs[:, 0], b.logprobs)
        p = np.exp(b.top_logprobs.astype(np.float64))
        np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-4)
        np.testing.assert_allclose(-(p * b.top_logprobs).sum(1), b.entropies, atol=1e-4)


def test_sampled_top_logprobs_hold_the_chosen_tokens_raw_logprob(gen):
    out = gen.generate(PROMPTS[:1], max_new_tokens=6, stop=None, temperature=1.3, n=2, seed=3, top_logprobs=400)
    for g in out:
        for t, token in enumerate(g.token_ids):
            where = np.flatnonzero(g.top_ids[t] == token)
            assert len(where) == 1 and g.top_logprobs[t, where[0]] == pytest.approx(g.logprobs[t], abs=1e-6)


def test_eos_step_keeps_its_top_k_and_token(gen):
    first = gen.generate(PROMPTS[:1], max_new_tokens=6, stop=None)[0]
    eos = int(first.token_ids[2])
    gen.eos_ids = gen.eos_ids | {eos}
    out = gen.generate(PROMPTS[:1], max_new_tokens=6, stop=None, top_logprobs=3)[0]
    assert out.finish_reason == "eos" and out.eos_token_id == eos
    cut = int(np.flatnonzero(first.token_ids == eos)[0])
    assert len(out.token_ids) == cut and out.top_ids.shape == (cut, 3)
    assert out.eos_top_ids.shape == out.eos_top_logprobs.shape == (3,)
    assert int(out.eos_top_ids[0]) == eos and out.eos_top_logprobs[0] == pytest.approx(out.eos_logprob)
    assert gen.generate(PROMPTS[:1], max_new_tokens=6, stop=None)[0].eos_top_ids is None


def test_cache_key_is_unchanged_without_top_logprobs(gen):
    params = DecodingParams(max_new_tokens=4, stop=("\n",), seed=None)
    old_request = {**params.__dict__, "stop": ["\n"], "max_context": gen.max_context}
    del old_request["top_logprobs"]  # the request dict as keys were made before the field existed
    del old_request["answer_attention"]  # never in a key (it changes no stored field's meaning)
    assert gen._key("p", 0, params) == GenerationCache.make_key(gen.fingerprint, "p", old_request, 0)
    with_top = DecodingParams(max_new_tokens=4, stop=("\n",), seed=None, top_logprobs=5)
    assert gen._key("p", 0, with_top) != gen._key("p", 0, params)
    with pytest.raises(ValueError, match="top_logprobs"):
        DecodingParams(max_new_tokens=4, top_logprobs=-1).validate()


def test_new_arrays_round_trip_through_the_cache_and_old_blobs_still_load(gen, tmp_path):
    gen.eos_ids = gen.eos_ids | {int(gen.generate(PROMPTS[:1], max_new_tokens=4, stop=None)[0].token_ids[1])}
    out = gen.generate(PROMPTS[:1], max_new_tokens=4, stop=None, top_logprobs=4)[0]
    back = decode_generation(encode_generation(out))
    assert back.eos_token_id == out.eos_token_id and back.finish_reason == "eos"
    for name in ("top_ids", "top_logprobs", "eos_top_ids", "eos_top_logprobs"):
        np.testing.assert_array_equal(getattr(back, name), getattr(out, name))
        assert getattr(back, name).dtype == getattr(out, name).dtype
    # a blob of a generation cached before the fields existed: same header without them
    import json
    import struct

    from workbench.backends.gencache import MAGIC

    blob = encode_generation(gen.generate(PROMPTS[1:], max_new_tokens=3, stop=None)[0])
    start = len(MAGIC) + 4
    (size,) = struct.unpack("<I", blob[len(MAGIC) : start])
    header = json.loads(blob[start : start + size])
    del header["scalars"]["eos_token_id"]
    for name in ("top_ids", "top_logprobs", "eos_top_ids", "eos_top_logprobs"):
        del header["arrays"][name]
    head = json.dumps(header).encode()
    old = decode_generation(MAGIC + struct.pack("<I", len(head)) + head + blob[start + size :])
    assert old.top_ids is None and old.eos_token_id is None and len(old.token_ids) == 3
    # through a real cache: a top-k request is stored under its own key and read back whole
    gen.cache = GenerationCache(tmp_path / "g.sqlite")
    first = gen.generate(PROMPTS, max_new_tokens=3, stop=None, top_logprobs=2)
    again = gen.generate(PROMPTS, max_new_tokens=3, stop=None, top_logprobs=2)
    assert gen.counter.cache_hits == 2
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a.top_ids, b.top_ids)


def test_token_id_prompts_give_the_texts_generations(gen, tmp_path):
    ids = [encode(gen.tokenizer, p) for p in PROMPTS]
    assert gen.decode_prompt(ids[0]) == (PROMPTS[0], True)
    for kwargs in ({}, {"temperature": 1.0, "n": 3, "seed": 9, "top_p": 0.9}):
        by_text = gen.generate(PROMPTS, max_new_tokens=5, stop=None, **kwargs)
        by_ids = gen.generate(ids, max_new_tokens=5, stop=None, **kwargs)
        mixed = gen.generate([PROMPTS[0], ids[1]], max_new_tokens=5, stop=None, **kwargs)
        for a, b, c in zip(by_text, by_ids, mixed, strict=True):
            assert a.text == b.text == c.text and a.prompt == b.prompt
            np.testing.assert_array_equal(a.token_ids, b.token_ids)
            np.testing.assert_array_equal(a.logprobs, b.logprobs)
    # with a cache, the ids of a text are that text: a hit
    gen.cache = GenerationCache(tmp_path / "g.sqlite")
    gen.generate(PROMPTS[:1], max_new_tokens=4, stop=None)
    gen.generate([ids[0]], max_new_tokens=4, stop=None)
    assert gen.counter.cache_hits == 1


def test_ids_that_are_not_a_texts_encoding_keep_their_ids(gen):
    text = "Paris"
    merged = encode(gen.tokenizer, text)
    split = [gen.tokenizer.convert_tokens_to_ids(ch) for ch in text]  # one byte-level token per letter
    assert split != merged and gen.decode_prompt(split) == (text, False)
    out = gen.generate([split, merged], max_new_tokens=3, stop=None)
    assert out[0].prompt == out[1].prompt == text and out[0].prompt_tokens == len(split)
    with torch.inference_mode():
        logits = gen.model(input_ids=torch.tensor([split])).logits[0, -1]
    assert int(out[0].token_ids[0]) == int(logits.argmax())
    assert gen._key(gen._prompt_key(split), 0, DecodingParams(3)) != gen._key(text, 0, DecodingParams(3))
    for bad in ([], [gen.vocab_size], [-1]):
        with pytest.raises(ValueError):
            gen.generate([bad], max_new_tokens=2)


def test_prompt_logprobs_equal_score_and_count_costs(gen):
    prompt, cont = PROMPTS[1], " Shakespeare wrote Hamlet."
    p_ids = encode(gen.tokenizer, prompt)
    c_ids = list(gen.tokenizer(cont, add_special_tokens=False)["input_ids"])
    scored = gen.score([prompt], [cont])[0]
    gen.counter = CostCounter()
    short = encode(gen.tokenizer, PROMPTS[0])
    own, other = gen.prompt_logprobs([p_ids + c_ids, short], top_logprobs=3)
    assert gen.counter.lm_calls == 2 and gen.counter.lm_batches == 1
    assert gen.counter.prefill_tokens == len(p_ids) + len(c_ids) + len(short)
    assert gen.counter.scored_tokens == len(p_ids) + len(c_ids) - 1 + len(short) - 1
    assert len(own.logprobs) == len(p_ids) + len(c_ids) - 1 and own.top_ids.shape == (len(own.logprobs), 3)
    np.testing.assert_allclose(own.logprobs[len(p_ids) - 1 :], scored.logprobs, atol=1e-5)
    np.testing.assert_allclose(own.entropies[len(p_ids) - 1 :], scored.entropies, atol=1e-5)
    alone = gen.prompt_logprobs([short])[0]  # padding in the batch does not change a row
    np.testing.assert_allclose(other.logprobs, alone.logprobs, atol=1e-5)
    assert alone.top_ids.shape == (len(short) - 1, 0)
    assert len(gen.prompt_logprobs([[5]])[0].logprobs) == 0
    with pytest.raises(ValueError):
        gen.prompt_logprobs([[]])


def test_prompt_logprobs_and_step_equal_an_echo_then_a_one_token_generation(gen):
    """One forward gives what an echo pass and a greedy one-token generation give: the same own log-probs, the same
    token with its log-prob, entropy and top k, the same EOS and stop-string endings."""
    ids = [encode(gen.tokenizer, p) for p in PROMPTS]
    own, gens = gen.prompt_logprobs_and_step([PROMPTS[0], ids[1]], top_logprobs=4)
    alone = gen.prompt_logprobs(ids, top_logprobs=4)
    stepped = gen.generate(PROMPTS, max_new_tokens=1, stop=None, top_logprobs=4)
    for o, a in zip(own, alone, strict=True):
        np.testing.assert_allclose(o.logprobs, a.logprobs, atol=1e-5)
        np.testing.assert_array_equal(o.top_ids, a.top_ids)
    for g, s in zip(gens, stepped, strict=True):
        assert g.text == s.text and g.finish_reason == s.finish_reason == "length"
        np.testing.assert_array_equal(g.token_ids, s.token_ids)
        np.testing.assert_array_equal(g.top_ids, s.top_ids)
        np.testing.assert_allclose(g.logprobs, s.logprobs, atol=1e-5)
        np.testing.assert_allclose(g.entropies, s.entropies, atol=1e-5)
        assert g.prompt == s.prompt and g.prompt_tokens == s.prompt_tokens
    gen.counter = CostCounter()
    gen.eos_ids = gen.eos_ids | {int(stepped[0].token_ids[0])}  # the greedy token now ends the sequence
    (_,), (ended,) = gen.prompt_logprobs_and_step([PROMPTS[0]], top_logprobs=2)
    assert ended.finish_reason == "eos" and len(ended.token_ids) == 0 and ended.eos_top_ids.shape == (2,)
    assert ended.eos_logprob == pytest.approx(float(stepped[0].logprobs[0]), abs=1e-5)
    assert gen.counter.decoded_tokens == 1 and gen.counter.lm_calls == 1
    text = stepped[1].text
    if text.strip():  # a stop string inside the chosen token cuts the text as generate does
        (_,), (cut,) = gen.prompt_logprobs_and_step([PROMPTS[1]], stop=[text.strip()[-1]])
        (ref,) = gen.generate([PROMPTS[1]], max_new_tokens=1, stop=[text.strip()[-1]])
        assert cut.finish_reason == ref.finish_reason == "stop" and cut.text == ref.text


def test_prompt_logprobs_reuse_a_shared_prefix_and_give_the_same_numbers(gen):
    """Echo reads of one prompt + each option (a served teacher-forced read) encode the prompt once: the same
    log-probs, entropies, top k and next-token logits as each sequence alone."""
    head = encode(gen.tokenizer, PROMPTS[1] + " and the play was first staged in London by his company")
    assert len(head) >= gen.prefix_min_tokens
    seqs = [[*head, 7], [*head, 9, 11], [*head, 13], encode(gen.tokenizer, PROMPTS[0])]
    gen.counter = CostCounter()
    nexts: list = []
    together = gen.prompt_logprobs(seqs, top_logprobs=3, next_logits=nexts)
    assert gen.counter.prefix_reused_tokens == 2 * len(head)  # the head encoded once for three rows
    assert gen.counter.lm_calls == 4 and gen.counter.prefill_tokens == sum(map(len, seqs))
    for seq, joint, nxt in zip(seqs, together, nexts, strict=True):
        alone_next: list = []
        (alone,) = gen.prompt_logprobs([seq], top_logprobs=3, next_logits=alone_next)
        np.testing.assert_allclose(joint.logprobs, alone.logprobs, atol=1e-5)
        np.testing.assert_allclose(joint.entropies, alone.entropies, atol=1e-4)
        np.testing.assert_array_equal(joint.top_ids[:, 0], alone.top_ids[:, 0])
        np.testing.assert_allclose(nxt.numpy(), alone_next[0].numpy(), atol=1e-4)


def test_a_shared_prefix_is_read_once_for_its_whole_group(gen, monkeypatch):
    """The log-softmax, entropy and top k of a prefix group's shared positions are computed once, not once per row:
    the positions read are the prefix's own plus each row's after it (the prefix's last position predicts each
    row's first own token), and the values are those of each sequence read alone."""
    from workbench.backends.generator import scoring

    head = encode(gen.tokenizer, PROMPTS[1] + " and the play was first staged in London by his company")
    seqs = [[*head, 7], [*head, 9, 11], [*head, 13, 5, 3], encode(gen.tokenizer, PROMPTS[0])]
    alone = [gen.prompt_logprobs([seq], top_logprobs=2)[0] for seq in seqs]
    read: list[int] = []
    real = scoring.own_logprobs

    def counting(logits, ids, k):
        read.append(int(logits.shape[0]))
        return real(logits, ids, k)

    monkeypatch.setattr(scoring, "own_logprobs", counting)
    together = gen.prompt_logprobs(seqs, top_logprobs=2)
    grouped, plain = seqs[:3], seqs[3]
    assert sum(read) == (len(head) - 1) + sum(len(s) - len(head) for s in grouped) + (len(plain) - 1)
    assert sum(read) < sum(len(s) - 1 for s in seqs) - len(head)  # each row's read of the prefix skipped
    for joint, single in zip(together, alone, strict=True):
        np.testing.assert_array_equal(joint.token_ids, single.token_ids)
        np.testing.assert_allclose(joint.logprobs, single.logprobs, atol=1e-5)
        np.testing.assert_allclose(joint.top_logprobs, single.top_logprobs, atol=1e-5)
        np.testing.assert_array_equal(joint.top_ids, single.top_ids)
