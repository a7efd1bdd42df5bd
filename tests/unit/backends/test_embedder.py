"""Embedder: normalised float32 rows, the on-disk cache (hits, misses, second instance), empty input, errors."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.embedder import Embedder, EmbeddingCache, TextEncoder, l2_normalize, text_key
from workbench.core.errors import AssetError, DataError


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


TEXTS = ["The capital of France is Paris.", "The Nile is a river in Africa.", "Who wrote Hamlet?"]


def test_encode_returns_unit_float32_rows(tiny_encoder_dir):
    embedder = Embedder(str(tiny_encoder_dir))
    vectors = embedder.encode(TEXTS)
    assert isinstance(embedder, TextEncoder)
    assert embedder.dim == 32
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(vectors[0], vectors[1])


def test_cache_hits_across_instances(tiny_encoder_dir):
    first = Embedder(str(tiny_encoder_dir))
    before = first.encode(TEXTS)
    assert (first.counter.cache_misses, first.counter.cache_hits, first.counter.embed_texts) == (3, 0, 3)

    counter = CostCounter()
    second = Embedder(str(tiny_encoder_dir), counter=counter)
    assert second.fingerprint == first.fingerprint
    after = second.encode([*TEXTS, "A new sentence about Einstein."])
    assert (counter.cache_hits, counter.cache_misses, counter.embed_texts) == (3, 1, 1)
    np.testing.assert_array_equal(after[:3], before)


def test_duplicates_are_encoded_once_and_keep_order(tiny_encoder_dir):
    embedder = Embedder(str(tiny_encoder_dir), cache=False)
    vectors = embedder.encode([TEXTS[0], TEXTS[1], TEXTS[0]])
    assert embedder.counter.embed_texts == 2
    np.testing.assert_array_equal(vectors[0], vectors[2])


def test_cached_vectors_equal_fresh_ones(tiny_encoder_dir):
    cached = Embedder(str(tiny_encoder_dir)).encode(TEXTS)
    fresh = Embedder(str(tiny_encoder_dir), cache=False).encode(TEXTS)
    np.testing.assert_allclose(cached, fresh, atol=1e-6)


def test_empty_input_gives_zero_rows(tiny_encoder_dir):
    embedder = Embedder(str(tiny_encoder_dir))
    out = embedder.encode([])
    assert out.shape == (0, 32) and out.dtype == np.float32
    assert embedder.counter.embed_texts == 0


def test_bad_inputs_raise(tiny_encoder_dir, tmp_path):
    embedder = Embedder(str(tiny_encoder_dir), cache=False)
    with pytest.raises(DataError):
        embedder.encode("one string")
    with pytest.raises(DataError):
        embedder.encode(["ok", 3])
    with pytest.raises(AssetError):
        Embedder(str(tmp_path / "does-not-exist"))
    with pytest.raises(DataError):
        Embedder(str(tiny_encoder_dir), batch_size=0)


def test_pooled_encoder_matches_sentence_transformers_without_importing_it(tiny_encoder_dir, tmp_path):
    import subprocess
    import sys

    from sentence_transformers import SentenceTransformer

    from workbench.backends.embedder import pooled_chain

    assert pooled_chain(tiny_encoder_dir) == {
        "pooling": "mean",
        "normalize": True,
        "max_seq_length": 128,
        "do_lower_case": False,
    }
    texts = [*TEXTS, "x " * 300]  # the last one is cut at max_seq_length by both
    ours = Embedder(str(tiny_encoder_dir), cache=False)
    assert ours.backend == "pooled"
    reference = SentenceTransformer(str(tiny_encoder_dir), device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(ours.encode(texts), reference, atol=1e-5)
    code = (
        "import sys; from workbench.backends.embedder import Embedder; "
        f"Embedder({str(tiny_encoder_dir)!r}, cache=False).encode(['a b']); "
        "print('sentence_transformers' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_other_layouts_fall_back_to_sentence_transformers(tmp_path):
    from tests.tiny_models import build_tiny_encoder

    plain = build_tiny_encoder(tmp_path / "plain", sentence_transformers=False)  # no modules.json
    embedder = Embedder(str(plain), cache=False)
    assert embedder.backend == "sentence-transformers" and embedder.encode(TEXTS).shape == (3, 32)


def test_embedding_cache_store_is_shared_by_two_handles(tmp_path):
    path = tmp_path / "store.sqlite"
    writer, reader = EmbeddingCache(path, dim=4), EmbeddingCache(path, dim=4)
    vec = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    writer.put_many({text_key("a"): vec})
    writer.put_many({text_key("a"): vec * 2})  # first writer wins
    got = reader.get_many([text_key("a"), text_key("b")])
    assert list(got) == [text_key("a")] and len(reader) == 1
    np.testing.assert_array_equal(got[text_key("a")], vec)
    assert len(EmbeddingCache(path, dim=8).get_many([text_key("a")])) == 0  # wrong dimension is never returned


def test_l2_normalize_keeps_zero_rows():
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])
