"""What a generator backend can give, and the one check that a feature or method gets what it needs.

The in-process generator (:class:`~workbench.backends.generator.Generator`) can give everything: it holds the model.
A served generator (:class:`~workbench.backends.served.ServedGenerator`) gives what its server answers through the
OpenAI protocol, found by :func:`workbench.backends.served_probe.probe` once per run (docs/served-models.md). Features
and methods declare what they need as capability names (:data:`CAPABILITIES`); :func:`missing_capabilities` says what
a backend lacks, and callers refuse a recipe in one line naming the feature and the missing capability.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

CAPABILITIES: dict[str, str] = {
    "logprobs": "the chosen tokens' log-probabilities",
    "top_logprobs": "the most likely tokens' log-probabilities at each position",
    "echo": "the prompt tokens' log-probabilities (echo)",
    "token_prompts": "prompts given as token ids",
    "prompt_lists": "several prompts in one request",
    "token_ids": "the generated tokens' ids",
    "n": "several samples per request",
    "seed": "seeded sampling that repeats",
    "hidden_states": "hidden states (in-process backend only)",
    "attentions": "attention weights (in-process backend only)",
    "step_logits": "per-step logits of two decoding streams (in-process backend only)",
    "weights": "the model's own weights, to train or time them (in-process backend only)",
}
"""Every capability name and what it means (the one-line refusals quote these)."""

IN_PROCESS_ONLY = frozenset({"hidden_states", "attentions", "step_logits", "weights"})
"""What no OpenAI-protocol server gives: the model's insides."""


@dataclass(frozen=True)
class Capabilities:
    """What one generator backend can give. ``top_logprobs`` is how many alternatives per position (0: none);
    ``completions`` is whether the legacy completions route answers (else chat only); ``chat_template`` says who
    renders prompts (``local``: the client, with the model's tokenizer, as in-process; ``server``: the server's own
    template through the chat route); ``eos_token_ids`` are the token ids the server states end a sequence (its
    ``/v1/models`` entry's ``eos_token_id``; empty when it states none). The in-process backend is
    :meth:`in_process`."""

    logprobs: bool = False
    top_logprobs: int = 0
    echo: bool = False
    token_prompts: bool = False
    prompt_lists: bool = False
    token_ids: bool = False
    n: bool = False
    seed: bool = False
    hidden_states: bool = False
    attentions: bool = False
    step_logits: bool = False
    weights: bool = False
    completions: bool = True
    chat_template: str = "local"
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def in_process(cls) -> Capabilities:
        """Everything: the model is in this process."""
        return cls(True, 1 << 30, True, True, True, True, True, True, True, True, True, True, True, "local")

    def has(self, name: str) -> bool:
        """Whether the capability ``name`` (a key of :data:`CAPABILITIES`) is there."""
        if name not in CAPABILITIES:
            raise KeyError(f"unknown capability {name!r}")
        return bool(getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (recorded in the run's manifest and the bundle's)."""
        return {**asdict(self), "eos_token_ids": list(self.eos_token_ids)}


def missing_capabilities(needs: Iterable[str], capabilities: Capabilities) -> list[str]:
    """The capabilities among ``needs`` that ``capabilities`` lacks, sorted."""
    return sorted({name for name in needs if not capabilities.has(name)})


def describe_missing(missing: Iterable[str]) -> str:
    """``"echo (the prompt tokens' log-probabilities (echo)), ..."`` for a one-line refusal."""
    return ", ".join(f"'{name}' ({CAPABILITIES[name]})" for name in missing)
