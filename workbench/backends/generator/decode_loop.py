"""Generation's batching and decoding loop: jobs in batches, one prefill per batch, decode until every row finishes.

The ``n`` samples of a prompt **share one prefill**: the prompt batch is encoded once, then the KV cache and the last
logits are repeated per sample along the batch dimension (``share_prefill=False`` re-encodes each sample, for
comparison). Sequences stop at EOS, at the first stop string or after ``max_new_tokens``; finished rows are dropped
from the batch (and the KV cache) at once.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from workbench.backends.attention_diag import last_layer_logdiag
from workbench.backends.decoding_state import DecodingRow, record_extras, select_rows
from workbench.backends.generation_types import DecodingParams, Generation
from workbench.backends.generator.jobs import Job, PromptJobs
from workbench.backends.generator.next_token import TokenChooser
from workbench.backends.generator.prefill import PrefillEngine
from workbench.backends.generator.recording import Recording, record_own_attention


class DecodeLoop(PromptJobs, PrefillEngine, TokenChooser, Recording):
    """Running :class:`Job` s to :class:`Generation` s (see the module docstring)."""

    def _generate_jobs(
        self, jobs: list[Job], params: DecodingParams, share_prefill: bool
    ) -> dict[tuple[Hashable, int], Generation]:
        """Run the jobs in batches (:meth:`_batches`, sorted by length to limit padding)."""
        import torch

        order = sorted(range(len(jobs)), key=lambda i: len(jobs[i].ids))
        out: dict[tuple[Hashable, int], Generation] = {}
        restore = self._attention_mode(params.attentions)
        try:
            with torch.inference_mode():
                for batch in self._batches([jobs[i] for i in order], params):
                    with self.counter.timed("generate"):
                        out.update(self._decode_batch(batch, params, share_prefill))
        finally:
            if restore is not None:
                self.model.set_attn_implementation(restore)
        return out

    def _batches(self, jobs: list[Job], params: DecodingParams) -> list[list[Job]]:
        """Consecutive batches of ``jobs``: a batch takes the next job while it holds fewer than ``batch_size``
        prompts, or while its decoding rows (each job's missing samples) stay within ``batch_rows`` with it — so 40
        greedy answers go in one batch of 40 rows, as 8 prompts of 5 samples would, instead of five batches of 8 rows
        (on a CPU the larger batch took 0.58x the time: SmolLM2, 2 threads, 16 tokens). Requests for attentions (their
        weights grow with the batch) and models whose cache cannot be joined (their prefill is one forward of the
        whole batch) keep ``batch_size`` prompts."""
        batches: list[list[Job]] = []
        rows = 0
        grows = not params.attentions and self.joinable_cache is not False  # else a prefill is one forward
        for job in jobs:
            batch = batches[-1] if batches else None
            fits = batch is not None and (
                len(batch) < self.batch_size or (grows and rows + len(job.samples) <= self.batch_rows)
            )
            if fits:
                batch.append(job)
                rows += len(job.samples)
            else:
                batches.append([job])
                rows = len(job.samples)
        return batches

    def _attention_mode(self, need_attentions: bool) -> str | None:
        """Switch to eager attention when attention weights are requested; returns the mode to restore."""
        current = getattr(self.model.config, "_attn_implementation", None)
        if not need_attentions or current == "eager":
            return None
        self.model.set_attn_implementation("eager")
        return current

    def _decode_batch(
        self, jobs: list[Job], params: DecodingParams, share_prefill: bool
    ) -> dict[tuple[Hashable, int], Generation]:
        """Prefill one batch of prompts, expand to samples, and decode until every row finishes; with
        ``params.answer_attention``, under :func:`~workbench.backends.attention_diag.last_layer_logdiag`."""
        if not params.answer_attention:
            return self._decode_rows(jobs, params, share_prefill, None)

        # a step feeds one token per row: its last query is all a step's forward records (the prefill's is dropped)
        with last_layer_logdiag(self.model, queries=1) as recorder:
            return self._decode_rows(jobs, params, share_prefill, recorder if recorder.active else None)

    def _decode_rows(
        self, jobs: list[Job], params: DecodingParams, share_prefill: bool, recorder: Any
    ) -> dict[tuple[Hashable, int], Generation]:
        """:meth:`_decode_batch`'s loop; ``recorder`` (or None) holds the last layer's log diagonal of each forward:
        the prefill's is dropped (prompt positions), each step's goes to the rows whose tokens it fed."""
        import torch

        rows = [
            DecodingRow(job=i, sample=j, generator=None if params.greedy else self._rng(job.prompt, j, params.seed))
            for i, job in enumerate(jobs)
            for j in job.samples
        ]
        row_to_job = torch.tensor([r.job for r in rows], dtype=torch.long)
        if share_prefill:
            state = self.prefill([job.ids for job in jobs], params)
            if len(rows) > len(jobs):  # expand each prompt's cache, logits and extras to its samples
                state = select_rows(state, row_to_job)
        else:  # the comparison path: every sample re-encodes its whole prompt (no prefix reuse either)
            state = self._prefill_rows([jobs[r.job].ids for r in rows], params)
        self.counter.lm_calls += len(jobs)  # prompts, not batches (CostCounter)
        self.counter.lm_batches += 1
        if recorder is not None:
            recorder.take()  # the prompt's positions: not answer tokens
        active = list(range(len(rows)))
        for step in range(params.max_new_tokens):
            record_extras(rows, active, state, params)
            tokens = self._choose_tokens(rows, active, state["logits"], params)
            self.counter.decoded_tokens += len(active)
            keep = [k for k, r in enumerate(active) if not self.finish_row(rows[r], tokens[k], step, params)]
            if not keep:
                if recorder is not None:
                    self._feed_last_tokens(rows, active, state, params, recorder)
                break
            if len(keep) < len(active):
                state = select_rows(state, torch.tensor(keep, dtype=torch.long))
                tokens = [tokens[k] for k in keep]
                active = [active[k] for k in keep]
            state = self.step(state, tokens, params)
            if recorder is not None:
                record_own_attention(rows, active, recorder)
        return {(jobs[r.job].key, r.sample): self._finalise(r, jobs[r.job], params) for r in rows}

    def _feed_last_tokens(
        self, rows: list[DecodingRow], active: list[int], state: dict[str, Any], params: DecodingParams, recorder: Any
    ) -> None:
        """After the last step, feed the final token of the ``active`` rows whose answer keeps it (they ended at
        ``max_new_tokens``, or a stop string cut inside that token) in one forward, to read its attention diagonal.
        Nothing decodes after it, so ``state`` is free to narrow."""
        import torch

        need = [k for k, r in enumerate(active) if len(self.answer(rows[r])[0]) > len(rows[r].own_attention)]
        if not need:
            return
        if len(need) < len(active):
            state = select_rows(state, torch.tensor(need, dtype=torch.long))
        self.step(state, [rows[active[k]].tokens[-1] for k in need], params)
        record_own_attention(rows, [active[k] for k in need], recorder)
