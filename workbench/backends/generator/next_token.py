"""Choosing each row's next token: greedy arg-max, or one seeded draw per step from a per-sample ``torch.Generator``.

``temperature == 0`` is greedy (arg-max of the raw logits); otherwise temperature, then top-k, then top-p (the math is
in :mod:`workbench.backends.sampling`), then one draw from the row's own generator seeded from ``(seed, prompt,
sample_index)``, so a sample depends on its prompt, parameters and seed only, never on the batch it ran in. Every
choice records the token's raw and processed log-probs, the raw entropy and, when asked, the top-k tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.backends.decoding_state import DecodingRow
from workbench.backends.generation_types import DecodingParams
from workbench.backends.generator.state import GeneratorState
from workbench.backends.sampling import process_logits, sample_from_logprobs, sample_seed


class TokenChooser(GeneratorState):
    """The sampling step of the decoding loop (see the module docstring)."""

    def _rng(self, prompt: str, sample: int, seed: int | None) -> Any:
        """The per-sample torch.Generator: seeded from (seed, prompt, sample index) only."""
        import torch

        return torch.Generator().manual_seed(sample_seed(int(seed or 0), prompt, sample))

    def _choose_tokens(
        self, rows: list[DecodingRow], active: list[int], logits: Any, params: DecodingParams
    ) -> list[int]:
        """Pick the next token of every active row and record its log-probs and entropy."""
        import torch

        logits = logits.float()
        raw = torch.log_softmax(logits, dim=-1)
        entropy = -(raw.exp() * raw).nan_to_num().sum(-1)
        if params.greedy:
            chosen = raw.argmax(-1)
            processed = torch.zeros(len(active))
        else:
            proc = process_logits(logits, params.temperature, params.top_k, params.top_p)
            uniforms = torch.stack([torch.rand((), generator=rows[r].generator) for r in active])
            chosen = sample_from_logprobs(proc, uniforms)
            processed = proc.gather(-1, chosen[:, None])[:, 0]
        columns = (
            chosen.tolist(),
            raw.gather(-1, chosen[:, None])[:, 0].tolist(),
            processed.tolist(),
            entropy.tolist(),
        )
        for r, token, raw_lp, proc_lp, ent in zip(active, *columns, strict=True):
            row = rows[r]
            row.tokens.append(token)
            row.raw.append(raw_lp)
            row.processed.append(proc_lp)
            row.entropy.append(ent)
        if params.top_logprobs:
            top = raw.topk(min(params.top_logprobs, raw.shape[-1]), dim=-1)
            top_ids, top_lps = top.indices.cpu().numpy(), top.values.cpu().numpy().astype(np.float32)
            for k, r in enumerate(active):
                rows[r].top_ids.append(top_ids[k])
                rows[r].top_lps.append(top_lps[k])
        return columns[0]
