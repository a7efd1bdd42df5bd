"""Model loading: resolve a model reference and load the causal LM and its tokenizer, ready for left-padded batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.assets import ResolvedModel
from workbench.backends.lora import resolve_model
from workbench.core.errors import AssetError

if TYPE_CHECKING:
    from workbench.assets import ResolvedModel


def resolve_generator_model(model: Any) -> ResolvedModel:
    """A ResolvedModel from a ResolvedModel, a path or a generator reference (AssetError if unknown)."""

    if isinstance(model, ResolvedModel):
        return model
    return resolve_model(str(model))


def load_causal_lm(path: str, device: str, dtype: str) -> tuple[Any, Any]:
    """Load model (eval mode) and tokenizer (left padding, a pad token); failures become one-line AssetErrors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{dtype}' (use e.g. float32, bfloat16, float16)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AssetError(f"cannot load a causal LM: {first}", str(path)) from None
    model.to(device).eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def model_eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every token id that ends a sequence: the tokenizer's EOS and the generation config's EOS id(s)."""
    from workbench.backends.generation_types import eos_token_ids

    return eos_token_ids(tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None))
