"""Sampling math of the decoding loop: the processed distribution (temperature, then top-k, then top-p), one
inverse-CDF draw per row from a uniform, and the seed of each sample's own ``torch.Generator`` — derived from
``(seed, prompt, sample index)`` only, so a sample never depends on the batch it ran in."""

from __future__ import annotations

from typing import Any

from workbench.core.seeding import derive_seed

__all__ = ["process_logits", "sample_from_logprobs", "sample_seed"]


def sample_seed(seed: int, prompt: str, sample_index: int) -> int:
    """The seed of the torch.Generator that draws sample ``sample_index`` of ``prompt`` (one uniform per step)."""
    return derive_seed(seed, "sample", prompt, sample_index)


def process_logits(logits: Any, temperature: float, top_k: int, top_p: float) -> Any:
    """Log-probs of the processed distribution: logits / temperature, then top-k, then top-p (nucleus).

    Removed tokens get ``-inf``. ``top_k == 0`` and ``top_p == 1`` disable the filters; the most likely token is
    always kept.
    """
    import torch

    scaled = logits / temperature
    if 0 < top_k < scaled.shape[-1]:
        threshold = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < threshold, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(-1) - probs
        remove_sorted = mass_before >= top_p
        remove_sorted[..., 0] = False
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        scaled = scaled.masked_fill(remove, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def sample_from_logprobs(logprobs: Any, uniforms: Any) -> Any:
    """Inverse-CDF sampling: for each row, the first token whose cumulative probability exceeds its uniform."""
    import torch

    cdf = logprobs.exp().cumsum(-1)
    target = (uniforms.to(device=cdf.device, dtype=cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    chosen = torch.searchsorted(cdf, target, right=True)[:, 0]
    return chosen.clamp(max=logprobs.shape[-1] - 1)
