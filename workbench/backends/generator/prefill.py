"""The engine's forward passes: prefill (with prefix reuse and CPU grouping) and one decoding step.

A decoding *state* is a dict: "cache" (the KV cache), "mask" (attention mask [rows, width]), "next_pos" (the position
of each row's next token [rows, 1]) and "logits" (the last position's logits [rows, V]), plus "hidden" / "attn" when
the params ask for them. The generator's loop (:mod:`workbench.backends.generator.decode_loop`) and
:mod:`workbench.decoding.contrastive` both drive one with prefill → (choose tokens, finish_row, select_rows) → step,
and turn finished rows into answers with ``answer()``. What works on a state without the model (select_rows,
join_states, the batch layout) is in :mod:`workbench.backends.decoding_state`.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.decoding_state import (
    forward_outputs,
    join_states,
    joinable,
    left_padded_batch,
    returned_cache,
    select_rows,
)
from workbench.backends.generation_types import DecodingParams
from workbench.backends.generator.state import GeneratorState
from workbench.backends.prefix_reuse import (
    REUSE_ATTENTION,
    PrefixGroup,
    continued_layout,
    expand_cache,
    plan_prefix_groups,
)
from workbench.core.interrupt import check_interrupt

CPU_PREFILL_TOKENS = 512
"""On a CPU, rows are encoded together while their padded size (rows × the widest) stays within this many tokens: a
budget that kept short prompts batched and split long ones, the fastest of 512 / 1024 / 2048 / one forward for
closed-book, 2-passage and 5-passage prompts (SmolLM2, 2 cores)."""


class PrefillEngine(GeneratorState):
    """Encoding prompts into a decoding state and advancing it by one token per row (see the module docstring)."""

    def prefill(self, id_lists: list[list[int]], params: DecodingParams) -> dict[str, Any]:
        """Encode token-id lists (positions from each row's first real token); returns the decoding state of all the
        rows, in order (see above). Counts ``prefill_tokens`` (every row's tokens, padding excluded; a reused prefix
        counts in every row, as if encoded there) and ``prefix_reused_tokens`` (the tokens reuse did not forward)
        only: callers count their calls and batches.

        **Prefix reuse** (``prefix_reuse``, on by default): rows sharing a prefix of at least ``prefix_min_tokens``
        tokens (:func:`~workbench.backends.prefix_reuse.plan_prefix_groups`) have it encoded once, at batch 1; its KV
        cache is copied to the rows and only their suffixes are forwarded, positions and mask continuing the prefix
        (the padding between prefix and suffix is masked out); the other rows are encoded as below and the states are
        joined (:func:`join_states`) and put back in order. Every row then holds the keys, values and logits of its
        whole prompt (equal to a whole-row encoding up to float rounding), so decoding is unchanged. Reuse is off
        when attentions are requested (``params.attentions``: the weights of the prompt's own forward), when the
        model's cache cannot be joined (sliding-window or other special layers, ``joinable_cache`` False; learned
        on the first prefix) and under an attention implementation other than
        :data:`~workbench.backends.prefix_reuse.REUSE_ATTENTION` (flash kernels take no hole in a padding mask).

        On a GPU the rows (or a group's suffixes) go through left-padded forwards of ``batch_size`` rows (a batch can
        hold more prompts, up to ``batch_rows``: its prefill stays within the activations of ``batch_size``), joined
        (:func:`join_states`). On a CPU a forward is compute-bound, and a padded batch of long prompts costs more than
        its rows one by one (padding, and attention under a padding mask: 8 prompts of ~550 tokens took 1.3× as long
        padded as split, measured with SmolLM2 on 2 cores), so the rows are cut, in order, into groups whose padded size
        stays within :data:`CPU_PREFILL_TOKENS` (short prompts still share a forward), each group is encoded by a
        forward of its own and the KV caches are joined (:func:`join_states`). Every row's keys, values and next-token
        logits are those of its own forward, so decoding is unchanged. A model whose cache cannot be joined
        (sliding-window layers), or a request for attentions, takes one forward."""
        check_interrupt()  # a server stops here for a client that left (core.interrupt)
        if self.reuses_prefixes(params):
            groups = plan_prefix_groups(id_lists, self.prefix_min_tokens)
            if groups:
                state = self._prefill_reusing(id_lists, params, groups)
                if state is not None:
                    return state
        return self._prefill_rows(id_lists, params)

    def reuses_prefixes(self, params: DecodingParams | None = None) -> bool:
        """Whether a forward with ``params`` (None: a teacher-forced read) may reuse shared prefixes: the
        ``prefix_reuse`` switch is on, no attentions are requested, the cache is not known to be unjoinable and the
        attention implementation takes any padding mask (:data:`~workbench.backends.prefix_reuse.REUSE_ATTENTION`)."""
        if not self.prefix_reuse or self.joinable_cache is False:
            return False
        if params is not None and params.attentions:
            return False
        return getattr(self.model.config, "_attn_implementation", None) in REUSE_ATTENTION

    def _prefill_rows(self, id_lists: list[list[int]], params: DecodingParams) -> dict[str, Any]:
        """:meth:`prefill` without prefix reuse: one forward, or on a CPU consecutive groups joined."""
        groups = self._prefill_groups(id_lists, params)
        if len(groups) == 1:
            return self._prefill_forward(id_lists, params)
        first = self._prefill_forward(groups[0], params)
        if self.joinable_cache is None:
            self.joinable_cache = joinable(first)
        if not self.joinable_cache:  # found out on this first split: encode all the rows together after all
            self.counter.prefill_tokens -= sum(len(ids) for ids in groups[0])
            return self._prefill_forward(id_lists, params)
        return join_states(first, *(self._prefill_forward(group, params) for group in groups[1:]))

    def _prefill_reusing(
        self, id_lists: list[list[int]], params: DecodingParams, groups: list[PrefixGroup]
    ) -> dict[str, Any] | None:
        """:meth:`prefill` with the planned prefix ``groups``; None (nothing counted) when the model's cache turns
        out not to be joinable."""
        states: list[dict[str, Any]] = []
        order: list[int] = []
        for group in groups:
            head = self._encode_prefix(id_lists[group.rows[0]][: group.length])
            if head is None:
                return None
            order.extend(self._continue_group(head, id_lists, group, params, states))
        grouped = {r for group in groups for r in group.rows}
        plain = [r for r in range(len(id_lists)) if r not in grouped]
        if plain:
            states.append(self._prefill_rows([id_lists[r] for r in plain], params))
            order.extend(plain)
        self.counter.prefill_tokens += sum(len(id_lists[r]) for r in grouped)
        self.counter.prefix_reused_tokens += sum(group.saved for group in groups)
        return rows_in_order(states, order)

    def prefill_continuing(
        self, head: Any, length: int, id_lists: list[list[int]], params: DecodingParams
    ) -> dict[str, Any]:
        """The decoding state of rows whose first ``length`` tokens are encoded already, in order: ``head`` is the KV
        cache of those tokens (one row, positions 0 … ``length`` − 1; e.g. cut from another state's row by
        :func:`~workbench.backends.prefix_reuse.row_prefix_cache`) and every row of ``id_lists`` starts with them
        and has at least one token more. Only the rows' suffixes are forwarded, over copies of ``head``, exactly as
        :meth:`prefill` forwards a prefix group's (on a CPU in chunks whose padded size stays within
        :data:`CPU_PREFILL_TOKENS`, joined); every row then holds the keys, values and logits of its whole prompt.
        Counts ``prefill_tokens`` (every row's tokens, as :meth:`prefill` does) and ``prefix_reused_tokens``
        (``length`` per row). For plain full-attention caches under :meth:`reuses_prefixes` (the caller checks)."""
        short = [len(ids) for ids in id_lists if len(ids) <= length]
        if not id_lists or short or length < 1:
            raise ValueError(f"every row needs more than the {length} prefix tokens (rows of {short} tokens)")
        states: list[dict[str, Any]] = []
        order = self._continue_group(head, id_lists, PrefixGroup(tuple(range(len(id_lists))), length), params, states)
        self.counter.prefill_tokens += sum(len(ids) for ids in id_lists)
        self.counter.prefix_reused_tokens += length * len(id_lists)
        return rows_in_order(states, order)

    def _continue_group(
        self, head: Any, id_lists: list[list[int]], group: PrefixGroup, params: DecodingParams, states: list
    ) -> list[int]:
        """Forward the suffixes of ``group``'s rows over copies of the prefix cache ``head``, chunk by chunk
        (:meth:`_suffix_chunks`); appends one decoding state per chunk to ``states`` and returns the rows in the
        order their states hold them. Counts nothing."""
        order: list[int] = []
        for chunk in self._suffix_chunks(id_lists, group):
            out, mask, positions = self._continue_prefix(
                head, group.length, [id_lists[r][group.length :] for r in chunk], 1, params
            )
            state = {"cache": returned_cache(out), "mask": mask, "next_pos": positions[:, -1:] + 1}
            state.update(forward_outputs(out, params))
            states.append(state)
            order.extend(chunk)
        return order

    def _encode_prefix(self, prefix: list[int]) -> Any:
        """The KV cache of one prefix (batch 1, positions from 0), or None when it cannot be copied and joined
        (learned once into ``joinable_cache``). Counts nothing (the caller counts the rows' tokens)."""
        return self._prefix_forward(prefix, 1)[0]

    def _prefix_forward(self, prefix: list[int], keep: int) -> tuple[Any, Any]:
        """``(cache, logits)``: :meth:`_encode_prefix`'s cache (None when not joinable) and the logits of the
        prefix's last ``keep`` positions ([1, keep, V]) from the same forward."""
        import torch

        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            position_ids=torch.arange(len(prefix), device=self.device)[None],
            use_cache=True,
            logits_to_keep=keep,
        )
        cache = returned_cache(out)
        if self.joinable_cache is None:
            self.joinable_cache = joinable({"cache": cache, "mask": ids})
        return (cache if self.joinable_cache else None), out.logits

    def _suffix_chunks(self, id_lists: list[list[int]], group: PrefixGroup) -> list[list[int]]:
        """The rows of ``group``, shortest suffix first, in chunks forwarded together: on a GPU ``batch_size`` rows a
        chunk; on a CPU consecutive chunks whose padded suffixes stay within :data:`CPU_PREFILL_TOKENS` (as
        :meth:`prefill`)."""
        rows = sorted(group.rows, key=lambda r: len(id_lists[r]))
        if self._device_type() != "cpu":
            return [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        chunks: list[list[int]] = [[]]
        for r in rows:
            width = len(id_lists[r]) - group.length  # the widest so far: rows are sorted by length
            if chunks[-1] and width * (len(chunks[-1]) + 1) > CPU_PREFILL_TOKENS:
                chunks.append([])
            chunks[-1].append(r)
        return chunks

    def _continue_prefix(
        self, head: Any, length: int, suffixes: list[list[int]], keep: int, params: DecodingParams | None
    ) -> tuple[Any, Any, Any]:
        """One forward of ``suffixes`` over copies of the prefix cache ``head`` (``length`` tokens): the model
        output (logits of the last ``keep`` positions), the attention mask (on the model's device) and the suffixes'
        positions (on the CPU, as :meth:`_prefill_forward` keeps them)."""
        input_ids, mask, positions = continued_layout(suffixes, length, self.tokenizer.pad_token_id)
        mask = mask.to(self.device)
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask,
            position_ids=positions.to(self.device),
            use_cache=True,
            **{self._cache_arg: expand_cache(head, len(suffixes))},
            logits_to_keep=keep,
            output_hidden_states=params is not None and params.hidden_layer is not None,
        )
        return out, mask, positions

    def _prefill_groups(self, id_lists: list[list[int]], params: DecodingParams) -> list[list[list[int]]]:
        """Consecutive groups of rows for :meth:`prefill` (one group: a single forward): on a GPU ``batch_size`` rows a
        group (a batch may hold up to ``batch_rows`` prompts; the prefill's activations stay those of ``batch_size``),
        on a CPU groups within :data:`CPU_PREFILL_TOKENS`."""
        if len(id_lists) == 1 or params.attentions or self.joinable_cache is False:
            return [id_lists]
        if self._device_type() != "cpu":
            return [id_lists[i : i + self.batch_size] for i in range(0, len(id_lists), self.batch_size)]
        groups: list[list[list[int]]] = [[]]
        for ids in id_lists:
            width = max([len(ids), *map(len, groups[-1])])
            if groups[-1] and width * (len(groups[-1]) + 1) > CPU_PREFILL_TOKENS:
                groups.append([])
            groups[-1].append(ids)
        return groups

    def _device_type(self) -> str:
        return next(self.model.parameters()).device.type

    def _prefill_forward(self, id_lists: list[list[int]], params: DecodingParams) -> dict[str, Any]:
        """One left-padded forward over ``id_lists``: their decoding state."""
        input_ids, mask, positions = left_padded_batch(id_lists, self.tokenizer.pad_token_id)
        self.counter.prefill_tokens += int(mask.sum())
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            logits_to_keep=1,
            output_hidden_states=params.hidden_layer is not None,
            output_attentions=params.attentions,
        )
        state = {"cache": returned_cache(out), "mask": mask.to(self.device), "next_pos": positions[:, -1:] + 1}
        state.update(forward_outputs(out, params))
        return state

    def step(self, state: dict[str, Any], tokens: list[int], params: DecodingParams) -> dict[str, Any]:
        """Feed ``tokens`` (one per row of ``state``, in row order) in one forward; returns the advanced state (the
        KV cache object is reused)."""
        import torch

        check_interrupt()  # between decoding steps (core.interrupt)
        mask = torch.cat([state["mask"], state["mask"].new_ones((len(tokens), 1))], dim=1)
        positions = state["next_pos"].to(self.device)
        out = self.model(
            input_ids=torch.tensor(tokens, dtype=torch.long, device=self.device)[:, None],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_arg: state["cache"]},
            output_hidden_states=params.hidden_layer is not None,
            output_attentions=params.attentions,
        )
        new = {"cache": returned_cache(out), "mask": mask, "next_pos": state["next_pos"] + 1}
        new.update(forward_outputs(out, params))
        return new


def rows_in_order(states: list[dict[str, Any]], order: list[int]) -> dict[str, Any]:
    """One decoding state from ``states`` (joined) whose rows are ``order`` (a permutation of 0 … n − 1), put back
    in order 0 … n − 1."""
    import torch

    state = join_states(*states) if len(states) > 1 else states[0]
    if order != list(range(len(order))):
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
        state = select_rows(state, inverse)
    return state
