"""Teacher-forced reads: continuations' log-likelihood, a sequence's own log-probs (``echo``), next-token log-probs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.backends.decoding_state import joinable, left_padded_batch, returned_cache
from workbench.backends.generation_types import PromptLogprobs, Scored
from workbench.backends.generator.jobs import PromptJobs
from workbench.backends.generator.prefill import PrefillEngine
from workbench.backends.prefix_reuse import plan_prefix_groups, row_prefix_cache
from workbench.core.interrupt import check_interrupt

SCORE_POSITIONS = 2048
""":meth:`Scoring.prompt_logprobs` puts sequences in one forward while rows × the widest stays within this many
positions (the full-vocabulary logits of every position are held: 2048 × 49k float32 is about 400 MB)."""


class Scoring(PromptJobs, PrefillEngine):
    """Teacher-forced forwards over whole sequences (no decoding)."""

    def score(
        self,
        prompts: Sequence[str],
        continuations: Sequence[str],
        *,
        add_eos: bool = False,
    ) -> list[Scored]:
        """Teacher-forced log-likelihood of ``continuations[i]`` after ``prompts[i]``, in batches of ``batch_size``.

        Prompt and continuation are tokenised separately (the prompt as in :meth:`generate`, the continuation
        without special tokens) and concatenated, so the scored tokens are exactly the continuation's; ``add_eos``
        appends the EOS token to it. Prompts are left-truncated to fit ``max_context``. Counts: ``lm_calls`` +1 per
        pair, ``lm_batches`` +1 per batch, prompt tokens in ``prefill_tokens``, continuation tokens in
        ``scored_tokens``.
        """
        import torch

        prompts, continuations = list(prompts), list(continuations)
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        out: list[Scored] = []
        with torch.inference_mode():
            for start in range(0, len(prompts), self.batch_size):
                stop = start + self.batch_size
                batch = list(zip(prompts[start:stop], continuations[start:stop], strict=True))
                with self.counter.timed("score"):
                    out.extend(self._score_batch(batch, add_eos))
        return out

    def _score_batch(self, batch: list[tuple[str, str]], add_eos: bool) -> list[Scored]:
        """One teacher-forced forward pass over a left-padded batch of prompt + continuation."""
        import torch

        conts = [list(self.tokenizer(c, add_special_tokens=False)["input_ids"]) for _, c in batch]
        if add_eos:
            eos = self.tokenizer.eos_token_id
            conts = [[*c, eos] for c in conts]
        prompt_ids = [
            self.encode_prompt(prompt, max(self.max_context - len(c), 1))
            for (prompt, _), c in zip(batch, conts, strict=True)
        ]
        seqs = [p + c for p, c in zip(prompt_ids, conts, strict=True)]
        keep = max(len(c) for c in conts) + 1
        logits = self.tail_logits(seqs, keep)
        self.counter.lm_calls += len(batch)
        self.counter.lm_batches += 1
        self.counter.prefill_tokens += sum(len(p) for p in prompt_ids)
        self.counter.scored_tokens += sum(len(c) for c in conts)
        results = []
        for b, ((prompt, cont), ids) in enumerate(zip(batch, conts, strict=True)):
            # the logits at offset o (of the kept tail) predict token keep - o - 1 from the end; the last is unused
            preds = torch.log_softmax(logits[b, keep - 1 - len(ids) : keep - 1], dim=-1)
            target = torch.tensor(ids, dtype=torch.long, device=preds.device)
            lp = preds.gather(-1, target[:, None])[:, 0].cpu().numpy().astype(np.float32)
            ent = (-(preds.exp() * preds).nan_to_num().sum(-1)).cpu().numpy().astype(np.float32)
            mean = float(lp.mean()) if len(lp) else float("nan")
            results.append(Scored(prompt, cont, np.asarray(ids, dtype=np.int64), lp, ent, float(lp.sum()), mean))
        return results

    def prompt_logprobs(
        self,
        id_lists: Sequence[Sequence[int]],
        *,
        top_logprobs: int = 0,
        next_logits: list[Any] | None = None,
        echo_cache: Any = None,
    ) -> list[PromptLogprobs]:
        """Teacher-forced log-probs of each token-id sequence's own tokens (what ``echo`` reports), in order.

        Per sequence, for every token after the first: its raw (T=1) log-prob given the tokens before it, the entropy
        there and the ``top_logprobs`` most likely tokens (see :class:`PromptLogprobs`). The same forward as
        :meth:`score` (positions from each row's first real token), so a sequence's log-probs equal ``score``'s on the
        same ids. Sequences share a left-padded forward while rows × the widest stays within
        :data:`SCORE_POSITIONS`. ``next_logits`` (a list, optional) receives, in order, each sequence's logits at its
        last position (float32, ``(V,)``): the distribution of the token after it, which the same forward computes
        (:meth:`~workbench.backends.generator.Generator.prompt_logprobs_and_step` decodes one token from it).
        ``ValueError`` for an empty sequence or one longer than ``max_context``. Counts:
        ``lm_calls`` +1 per sequence, ``lm_batches`` +1 per forward, all tokens in ``prefill_tokens``, all but the
        first in ``scored_tokens``.

        With an ``echo_cache`` (:class:`~workbench.backends.echo_cache.EchoCache`; ``serve-model`` keeps one), a
        sequence sharing at least ``prefix_min_tokens`` tokens with one echoed before (by any call) is continued from
        that one's KV cache from their last shared token but one, its earlier log-probs taken from the kept entry
        (``prefix_reused_tokens`` counts the tokens not encoded again), and every sequence read is kept.
        """
        import torch

        seqs = [[int(i) for i in ids] for ids in id_lists]
        for ids in seqs:
            if not ids:
                raise ValueError("cannot score an empty token sequence")
            if len(ids) > self.max_context:
                raise ValueError(f"a sequence of {len(ids)} tokens is longer than max_context={self.max_context}")
        if top_logprobs < 0:
            raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
        out: list[PromptLogprobs | None] = [None] * len(seqs)
        last: list[Any] = [None] * len(seqs)
        kept = echo_cache if self.reuses_prefixes() else None
        with torch.inference_mode():
            found = {}
            if kept is not None:
                found = {
                    b: hit
                    for b, ids in enumerate(seqs)
                    if (hit := kept.lookup(ids, self.prefix_min_tokens, top_logprobs))
                }
            for b, (entry, shared) in found.items():
                out[b], last[b] = self._continue_echoed(entry, shared, seqs[b], top_logprobs, kept)
            rest = [b for b in range(len(seqs)) if b not in found]
            held: tuple[Any, PromptLogprobs] | None = None  # a prefix group's shared read, for all of its chunks
            for rows, logits, kv_of, head in self._whole_logits([seqs[b] for b in rest], keep_kv=kept is not None):
                self.counter.lm_calls += len(rows)
                self.counter.lm_batches += 1
                self.counter.prefill_tokens += sum(len(seqs[rest[r]]) for r in rows)
                self.counter.scored_tokens += sum(len(seqs[rest[r]]) - 1 for r in rows)
                # a prefix group's shared positions are read once (log-softmax, entropy, top k), not once per row
                cut = 0 if head is None else len(head) - 1
                if head is not None and (held is None or held[0] is not head):
                    held = (head, own_logprobs(head[:-1], seqs[rest[rows[0]]][: cut + 1], top_logprobs))
                for k, (r, own) in enumerate(zip(rows, logits, strict=True)):
                    b = rest[r]
                    if head is None:
                        out[b] = own_logprobs(own[:-1], seqs[b], top_logprobs)
                    else:  # the prefix's last position predicts this row's first own token
                        assert held is not None
                        tail = own_logprobs(_cat(head[-1:], own[:-1]), seqs[b][cut:], top_logprobs)
                        out[b] = _joined(seqs[b], held[1], cut, tail, top_logprobs)
                    last[b] = own[-1].clone() if next_logits is not None else None
                    if kept is not None and kv_of is not None:
                        kept.put(seqs[b], kv_of(k, len(seqs[b])), out[b])
        if next_logits is not None:
            next_logits.extend(last)
        return [item for item in out if item is not None]

    def _continue_echoed(
        self, entry: Any, shared: int, ids: list[int], top_logprobs: int, kept: Any
    ) -> tuple[PromptLogprobs, Any]:
        """``ids``' own log-probs and its last position's logits, continuing the kept echo ``entry`` that shares its
        first ``shared`` tokens: the entry's KV cache cut to ``shared`` − 1 tokens, the rest of ``ids`` forwarded over
        it (the last shared token is fed again: its logits predict the first token that differs), the log-probs of
        the tokens before it taken from the entry. Keeps the result in ``kept`` (the echo cache). Counts one call and
        one batch, every token in ``prefill_tokens`` (as a reused prefix is counted) and the cut in
        ``prefix_reused_tokens``."""
        import torch

        check_interrupt()
        cut = shared - 1
        head = row_prefix_cache(entry.kv, torch.ones((1, len(entry.ids)), dtype=torch.long), 0, cut)
        with self.counter.timed("score"):
            output, mask, _ = self._continue_prefix(head, cut, [ids[cut:]], len(ids) - cut, None)
        logits = output.logits[0].float()  # positions cut … len(ids) − 1
        tail = own_logprobs(logits[:-1], ids[cut:], top_logprobs)
        result = _joined(ids, entry.logprobs, cut, tail, top_logprobs)
        self.counter.lm_calls += 1
        self.counter.lm_batches += 1
        self.counter.prefill_tokens += len(ids)
        self.counter.scored_tokens += len(ids) - 1
        self.counter.prefix_reused_tokens += cut
        kept.put(ids, row_prefix_cache(returned_cache(output), mask, 0, len(ids)), result)
        return result, logits[-1].clone()

    def _whole_logits(self, seqs: list[list[int]], *, keep_kv: bool = False) -> Any:
        """Yield ``(rows, logits, kv_of, head)`` per forward: the indices of the sequences it covered; per row in
        order, the logits (float32) of that sequence's own positions — every position (``[len(seq), V]``) where
        ``head`` is None, else those after the shared prefix (``[len(seq) − len(head), V]``); ``head``, for rows
        sharing a prefix worth reusing (:func:`~workbench.backends.prefix_reuse.plan_prefix_groups`, one own token at
        least), the prefix's logits (``[len(head), V]``), computed once and continued over copies of its cache (the
        saved tokens in ``counter.prefix_reused_tokens``); with ``keep_kv``, ``kv_of(k, length)`` cuts the one-row
        KV cache of the ``k``-th row's first ``length`` tokens out of the forward's (None without, or when the cache
        cannot be cut). Rows with no such prefix share left-padded forwards while rows × the widest stays within
        :data:`SCORE_POSITIONS`. Equal to one plain forward per row up to float rounding."""
        groups = plan_prefix_groups(seqs, self.prefix_min_tokens, 1) if self.reuses_prefixes() else []
        grouped: set[int] = set()
        for group in groups:
            prefix = seqs[group.rows[0]][: group.length]
            with self.counter.timed("score"):
                head, head_logits = self._prefix_forward(prefix, group.length)
            if head is None:  # a cache that cannot be copied: everything plain
                break
            self.counter.prefix_reused_tokens += group.saved
            head_rows = head_logits[0].float()
            for chunk in _chunks(list(group.rows), [len(seqs[r]) - group.length for r in group.rows], self.batch_size):
                suffixes = [seqs[r][group.length :] for r in chunk]
                width = max(len(x) for x in suffixes)
                with self.counter.timed("score"):
                    tail, mask, _ = self._continue_prefix(head, group.length, suffixes, width, None)
                tails = tail.logits.float()
                rows = [tails[k, width - len(x) :] for k, x in enumerate(suffixes)]
                yield chunk, rows, _kv_cutter(returned_cache(tail), mask) if keep_kv else None, head_rows
                grouped.update(chunk)
        plain = [b for b in range(len(seqs)) if b not in grouped]
        for chunk in _chunks(plain, [len(seqs[b]) for b in plain], self.batch_size):
            batch = [seqs[b] for b in chunk]
            width = max(len(ids) for ids in batch)
            with self.counter.timed("score"):
                logits, kv_of = self._forward_whole(batch, width, keep_kv)
            yield chunk, [logits[k, width - len(ids) :] for k, ids in enumerate(batch)], kv_of, None

    def _forward_whole(self, seqs: list[list[int]], keep: int, keep_kv: bool) -> tuple[Any, Any]:
        """:meth:`_forward_tail`'s logits and, with ``keep_kv``, a ``kv_of(k, length)`` cutting row ``k``'s KV cache
        out of the same forward (None when not asked or when the model's cache cannot be cut: not plain layers)."""
        out, mask = self._padded_forward(seqs, keep, use_cache=keep_kv)
        if not keep_kv:
            return out.logits.float(), None
        cache = returned_cache(out)
        if self.joinable_cache is None:
            self.joinable_cache = joinable({"cache": cache, "mask": mask})
        return out.logits.float(), (_kv_cutter(cache, mask) if self.joinable_cache else None)

    def tail_logits(self, seqs: Sequence[Sequence[int]], keep: int) -> Any:
        """Logits (float32 tensor [rows, keep, V]) of the last ``keep`` positions of each token-id sequence, as one
        left-padded forward computes them (positions from each row's first real token; a row shorter than ``keep``
        has padding logits in front). Rows sharing a prefix that leaves each at least ``keep`` tokens of its own reuse
        it (see :meth:`prefill`; the same conditions, the saved tokens in ``counter.prefix_reused_tokens``): the
        prefix is encoded once, then the suffixes over copies of its cache. Counts nothing else: the callers count
        their calls and tokens."""
        import torch

        seqs = [[int(i) for i in ids] for ids in seqs]
        groups = plan_prefix_groups(seqs, self.prefix_min_tokens, keep) if self.reuses_prefixes() else []
        parts: list[tuple[list[int], Any]] = []
        for group in groups:
            head = self._encode_prefix(seqs[group.rows[0]][: group.length])
            if head is None:
                return self._forward_tail(seqs, keep)
            suffixes = [seqs[r][group.length :] for r in group.rows]
            out, _, _ = self._continue_prefix(head, group.length, suffixes, keep, None)
            parts.append((list(group.rows), out.logits.float()))
        if not parts:
            return self._forward_tail(seqs, keep)
        grouped = {r for rows, _ in parts for r in rows}
        plain = [r for r in range(len(seqs)) if r not in grouped]
        if plain:
            parts.append((plain, self._forward_tail([seqs[r] for r in plain], keep)))
        self.counter.prefix_reused_tokens += sum(group.saved for group in groups)
        logits = parts[0][1].new_empty((len(seqs), keep, parts[0][1].shape[-1]))
        for rows, part in parts:
            logits[torch.tensor(rows, dtype=torch.long, device=logits.device)] = part
        return logits

    def _forward_tail(self, seqs: list[list[int]], keep: int) -> Any:
        """Logits (float32) of the last ``keep`` positions of each sequence, in one left-padded forward pass (no
        prefix reuse)."""
        return self._padded_forward(seqs, keep)[0].logits.float()

    def _padded_forward(self, seqs: list[list[int]], keep: int, *, use_cache: bool = False) -> tuple[Any, Any]:
        """``(output, mask)``: one left-padded forward pass over ``seqs`` (positions from each row's first real
        token), the logits of the last ``keep`` positions, the KV cache kept with ``use_cache``; the attention mask on
        the model's device."""
        check_interrupt()  # between teacher-forced batches (core.interrupt)
        input_ids, mask, positions = left_padded_batch(seqs, self.tokenizer.pad_token_id)
        mask = mask.to(self.device)
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask,
            position_ids=positions.to(self.device),
            use_cache=use_cache,
            logits_to_keep=keep,
        )
        return out, mask

    def next_token_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> np.ndarray:
        """Log-probability (raw, T=1) of the first token of each option as the token following each prompt.

        Returns an ``(len(prompts), len(options))`` float32 array from one forward pass per batch of prompts: the
        cheap way to read a one-word verdict ("yes" / "no" / "maybe") or a multiple-choice letter. Counts
        ``lm_calls`` (one per prompt), ``lm_batches`` and ``prefill_tokens``.
        """
        import torch

        prompts = list(prompts)
        first = []
        for option in options:
            ids = self.tokenizer(option, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"option {option!r} encodes to no token")
            first.append(ids[0])
        out = np.zeros((len(prompts), len(first)), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(prompts), self.batch_size):
                ids = [self.encode_prompt(p, self.max_context) for p in prompts[start : start + self.batch_size]]
                with self.counter.timed("score"):
                    logits = self.tail_logits(ids, 1)[:, -1]
                self.counter.lm_calls += len(ids)
                self.counter.lm_batches += 1
                self.counter.prefill_tokens += sum(len(i) for i in ids)
                out[start : start + len(ids)] = torch.log_softmax(logits, -1)[:, first].cpu().numpy()
        return out


def own_logprobs(logits: Any, ids: list[int], k: int) -> PromptLogprobs:
    """:class:`PromptLogprobs` of ``ids`` from the logits of its positions ``0 .. L-2`` (each predicting the next)."""
    import torch

    preds = torch.log_softmax(logits.float(), dim=-1)
    target = torch.tensor(ids[1:], dtype=torch.long, device=preds.device)
    lp = preds.gather(-1, target[:, None])[:, 0].cpu().numpy().astype(np.float32)
    ent = (-(preds.exp() * preds).nan_to_num().sum(-1)).cpu().numpy().astype(np.float32)
    width = min(k, preds.shape[-1])
    if width:
        top = preds.topk(width, dim=-1)
        top_ids = top.indices.cpu().numpy().astype(np.int64)
        top_lps = top.values.cpu().numpy().astype(np.float32)
    else:
        top_ids = np.zeros((len(ids) - 1, 0), dtype=np.int64)
        top_lps = np.zeros((len(ids) - 1, 0), dtype=np.float32)
    return PromptLogprobs(np.asarray(ids, dtype=np.int64), lp, ent, top_ids, top_lps)


def _joined(ids: list[int], before: PromptLogprobs, cut: int, tail: PromptLogprobs, k: int) -> PromptLogprobs:
    """``ids``' :class:`PromptLogprobs` from ``before``'s first ``cut`` positions (a read of the same first ``cut`` + 1
    tokens, at least ``k`` wide) followed by ``tail`` (the read of ``ids[cut:]``)."""
    return PromptLogprobs(
        np.asarray(ids, dtype=np.int64),
        np.concatenate([before.logprobs[:cut], tail.logprobs]),
        np.concatenate([before.entropies[:cut], tail.entropies]),
        np.concatenate([before.top_ids[:cut, :k], tail.top_ids]),
        np.concatenate([before.top_logprobs[:cut, :k], tail.top_logprobs]),
    )


def _kv_cutter(cache: Any, mask: Any) -> Any:
    """``kv_of(k, length)``: the one-row KV cache of row ``k``'s first ``length`` real tokens of a forward's
    ``cache`` and attention ``mask`` (:func:`~workbench.backends.prefix_reuse.row_prefix_cache`)."""
    return lambda k, length: row_prefix_cache(cache, mask, k, length)


def _chunks(rows: list[int], widths: list[int], batch_size: int) -> list[list[int]]:
    """Consecutive chunks of ``rows`` (``widths`` their lengths, in order) of at most ``batch_size`` rows whose rows
    × the widest stays within :data:`SCORE_POSITIONS` (a row alone may exceed it)."""
    chunks: list[list[int]] = []
    widest = 0
    for row, width in zip(rows, widths, strict=True):
        if chunks and len(chunks[-1]) < batch_size and max(widest, width) * (len(chunks[-1]) + 1) <= SCORE_POSITIONS:
            chunks[-1].append(row)
            widest = max(widest, width)
        else:
            chunks.append([row])
            widest = width
    return chunks


def _cat(*parts: Any) -> Any:
    """``torch.cat`` of tensors along the first dimension (imported lazily: the runtime never loads torch here)."""
    import torch

    return torch.cat(parts, dim=0)
