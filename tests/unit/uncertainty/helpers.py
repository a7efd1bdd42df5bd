"""Builders of small hand-made NLI matrices and stats dictionaries for the uncertainty tests, and a hash-based
stand-in for the sentence embedder."""

from __future__ import annotations

import hashlib

import numpy as np

C, N, E = 0, 1, 2  # NLI label indices: contradiction, neutral, entailment


def onehot_nli(labels: list[list[int]], confidence: float = 1.0) -> np.ndarray:
    """(n, n, 3) probabilities whose argmax is ``labels[i][j]`` (probability ``confidence`` on it)."""
    lab = np.asarray(labels)
    n = len(lab)
    rest = (1.0 - confidence) / 2
    out = np.full((n, n, 3), rest)
    for i in range(n):
        for j in range(n):
            out[i, j, lab[i, j]] = confidence
    return out


def block_labels(groups: list[int]) -> list[list[int]]:
    """Entailment inside a group, contradiction across groups (``groups[i]`` = group id of answer i)."""
    return [[E if gi == gj else C for gj in groups] for gi in groups]


def consistency_stats(agree: bool, n_samples: int = 5) -> dict:
    """Stats for ``n_samples`` samples + a greedy answer that all agree (one string) or all differ (disjoint words)."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]
    if agree:
        texts = ["paris"]
        idx_samples = [0] * n_samples
        probs = onehot_nli([[E]])
        paraphrase = ["paris"] * 5
        dense = ["paris"] * 6
    else:
        texts = words[: n_samples + 1]
        idx_samples = list(range(1, n_samples + 1))
        probs = onehot_nli(block_labels(list(range(n_samples + 1))))
        paraphrase = words[:5]
        dense = words[:6]
    return {
        "sample_logprobs": [[-0.1, -0.2]] * n_samples,
        "nli_texts": texts,
        "nli_index_greedy": 0,
        "nli_index_samples": idx_samples,
        "nli_probs": probs,
        "paraphrase_answers": paraphrase,
        "paraphrase_nli_probs": onehot_nli(block_labels([0] * 5 if agree else list(range(5)))),
        "dense_answers": dense,
        "dense_nli_probs": onehot_nli(block_labels([0] * 6 if agree else list(range(6)))),
        "sts_samples": np.ones((n_samples, n_samples)) if agree else np.zeros((n_samples, n_samples)),
    }


class HashEmbedder:
    """A stand-in for MiniLM: deterministic unit vectors (``dim`` 8) from a hash of each text. Counts its ``encode``
    calls (``calls``) and, like the real embedder, the texts it encodes (``counter.embed_texts``)."""

    dim = 8
    fingerprint = "fake"

    def __init__(self) -> None:
        from workbench.backends.cost import CostCounter

        self.calls = 0
        self.counter = CostCounter()

    def encode(self, texts):
        self.calls += 1
        self.counter.embed_texts += len(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:8], dtype=np.uint8).astype(float) for t in texts]
        out = np.asarray(rows).reshape(len(texts), self.dim) + 1.0
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)
