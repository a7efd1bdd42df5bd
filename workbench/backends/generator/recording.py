"""Recording: when a row ends (EOS, stop string, length), its answer tokens and text, its :class:`Generation`.

Per generated token a :class:`~workbench.backends.generation_types.Generation` holds the token id, its log-prob under
the raw (T=1) distribution, its log-prob under the processed distribution (0 for greedy) and the entropy of the raw
distribution; optionally the top-k tokens, one layer's hidden states and attention diagonals.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.backends.decoding_state import DecodingRow
from workbench.backends.generation_types import DecodingParams, Generation
from workbench.backends.generator.jobs import Job
from workbench.backends.generator.state import GeneratorState


class Recording(GeneratorState):
    """Ending rows and turning finished rows into :class:`Generation` records."""

    def finish_row(self, row: DecodingRow, token: int, step: int, params: DecodingParams) -> bool:
        """Whether ``row`` ends after ``token`` (already appended to ``row.tokens``), chosen at decoding step ``step``:
        at an EOS id (``eos_ids``), when the decoded text holds a stop string (``row.text`` = the text before it) or
        at the ``max_new_tokens``-th step; sets ``row.finish`` accordingly."""
        if token in self.eos_ids:
            row.finish = "eos"
            return True
        if params.stop:
            text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
            cuts = [text.find(s) for s in params.stop if s in text]
            if cuts:
                row.finish, row.text = "stop", text[: min(cuts)]
                return True
        if step + 1 >= params.max_new_tokens:
            row.finish = "length"
            return True
        return False

    def answer(self, row: DecodingRow) -> tuple[list[int], str]:
        """The answer of a finished row: its tokens without a final EOS and, when a stop string ended it, only the
        shortest prefix whose decoding covers the text before the stop string; and the answer text."""
        tokens = row.tokens[:-1] if row.finish == "eos" else row.tokens
        if row.finish == "stop":
            return tokens[: self._covering_prefix(tokens, row.text)], row.text
        return tokens, self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _finalise(self, row: DecodingRow, job: Job, params: DecodingParams) -> Generation:
        """Turn a finished row into a :class:`Generation` (answer tokens, text, optional hidden/attentions)."""
        tokens, text = self.answer(row)
        kept = len(tokens)
        gen = Generation(
            prompt=job.prompt,
            text=text,
            token_ids=np.asarray(tokens[:kept], dtype=np.int64),
            logprobs=np.asarray(row.raw[:kept], dtype=np.float32),
            logprobs_processed=np.asarray(row.processed[:kept], dtype=np.float32),
            entropies=np.asarray(row.entropy[:kept], dtype=np.float32),
            finish_reason=row.finish or "length",
            sample_index=row.sample,
            prompt_tokens=len(job.ids),
            decode_steps=len(row.tokens),
        )
        eos = row.finish == "eos" and len(row.raw) > kept  # EOS ends the answer: no stop cut, the EOS step is `kept`
        if eos:
            gen.eos_logprob = float(row.raw[kept])
            gen.eos_entropy = float(row.entropy[kept])
            gen.eos_token_id = int(row.tokens[kept])
        if params.top_logprobs and row.top_ids:
            width = len(row.top_ids[0])
            gen.top_ids = np.asarray(row.top_ids[:kept], dtype=np.int64).reshape(kept, width)
            gen.top_logprobs = np.asarray(row.top_lps[:kept], dtype=np.float32).reshape(kept, width)
            if eos:
                gen.eos_top_ids = np.asarray(row.top_ids[kept], dtype=np.int64)
                gen.eos_top_logprobs = np.asarray(row.top_lps[kept], dtype=np.float32)
        if params.hidden_layer is not None:
            states = np.stack(row.hidden)
            gen.hidden_mean = states[: max(kept, 1)].mean(axis=0)
            gen.hidden_last = states[min(kept, len(states) - 1)]
        if params.attentions:
            gen.attentions = np.stack(row.attn[:kept], axis=-1) if kept else np.zeros((*row.attn[0].shape, 0))
            gen.attentions = gen.attentions.astype(np.float32)
        own = row.own_attention[:kept]
        if params.answer_attention and len(own) == kept and all(a is not None for a in own):
            heads = int(self.model.config.num_attention_heads)
            diag = np.stack(own, axis=-1) if kept else np.zeros((heads, 0))
            gen.attention_logdiag = diag.astype(np.float32)
        return gen

    def _covering_prefix(self, tokens: list[int], text: str) -> int:
        """Length of the shortest token prefix whose decoding is at least as long as ``text``."""
        for k in range(len(tokens) + 1):
            if len(self.tokenizer.decode(tokens[:k], skip_special_tokens=True)) >= len(text):
                return k
        return len(tokens)


def record_own_attention(rows: list[DecodingRow], fed: list[int], recorder: Any) -> None:
    """Give each row of ``fed`` (in the order its token was fed) the last layer's log diagonal of that token's
    position, from the one forward ``recorder`` holds; None when it holds another count of forwards (a model that
    runs its last attention layer more or less than once a step: its answers then take the teacher-forced pass)."""
    forwards = recorder.take()
    if len(forwards) != 1 or forwards[0].shape[0] != len(fed):
        for r in fed:
            rows[r].own_attention.append(None)
        return
    for k, r in enumerate(fed):
        rows[r].own_attention.append(forwards[0][k, :, -1])  # (rows, heads, 1): one query per row
