"""Rows that continue another state's row over their shared prefix (``row_prefix_cache`` +
``Generator.prefill_continuing``), and KV caches with room reserved for decoding (``reserve_positions``): the same
logits and decoding as a plain prefill and a plain cache, the counters, chunking, row order and the guards."""

from __future__ import annotations

import pytest

from workbench.backends.cost import CostCounter

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def smooth(tiny_lm_long_dir):
    """The shared tiny Llama (small weights: float parity of logits is tight). Own instance."""
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_long_dir, batch_size=8)


HEAD = list(range(10, 40))  # 30 tokens every row below begins with
ROWS = [[*HEAD, 50, 51, 52, 53, 54, 55], [60, 61, 62], [*HEAD, 56], [*HEAD, 57, 58]]
"""Left padding, a row sharing nothing (row 1) and three rows the generator's prefix reuse groups (a hole layout)."""


def _params(n: int = 4):
    from workbench.backends.generator import DecodingParams

    return DecodingParams(max_new_tokens=n, temperature=0.0).normalised()


def _decode(gen, state, steps: int) -> list:
    """Greedy steps from ``state``: the logits of every step (the prefill's first)."""
    logits = [state["logits"]]
    for _ in range(steps):
        tokens = state["logits"].argmax(-1).tolist()
        state = gen.step(state, tokens, _params())
        logits.append(state["logits"])
    return logits


# ---------------------------------------------------------------------- cutting a row's prefix
@pytest.mark.parametrize("row", [0, 2, 3], ids=["widest", "grouped", "grouped-2"])
def test_row_prefix_cache_holds_the_rows_first_tokens(smooth, row):
    from workbench.backends.prefix_reuse import row_prefix_cache

    smooth.prefix_reuse = True
    with torch.inference_mode():
        state = smooth.prefill(ROWS, _params())  # rows 0, 2, 3 share HEAD: a hole layout, left-padded by the join
        alone = smooth.prefill([HEAD], _params())
        head = row_prefix_cache(state["cache"], state["mask"], row, len(HEAD))
    assert state["mask"][row].sum().item() == len(ROWS[row])
    assert (len(ROWS[row]) < state["mask"].shape[1]) == (row != 0)  # the narrower rows are padded or holed
    for cut, whole in zip(head.layers, alone["cache"].layers, strict=True):
        assert cut.keys.shape == whole.keys.shape == (1, whole.keys.shape[1], len(HEAD), whole.keys.shape[3])
        torch.testing.assert_close(cut.keys, whole.keys, atol=1e-5, rtol=0)
        torch.testing.assert_close(cut.values, whole.values, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="fewer than"):
        row_prefix_cache(state["cache"], state["mask"], 1, len(HEAD))  # row 1 holds 3 tokens


# ---------------------------------------------------------------------- prefill_continuing
def test_continuing_rows_match_a_plain_prefill_and_count_their_tokens(smooth):
    from workbench.backends.prefix_reuse import row_prefix_cache

    rows = [[*HEAD, 70, 71], [*HEAD, 72], [*HEAD, 73, 74, 75, 76]]
    smooth.counter = CostCounter()
    with torch.inference_mode():
        base = smooth.prefill([[*HEAD, 90, 91, 92]], _params())
        before = smooth.counter.snapshot()
        head = row_prefix_cache(base["cache"], base["mask"], 0, len(HEAD))
        state = smooth.prefill_continuing(head, len(HEAD), rows, _params())
        spent = smooth.counter.since(before)
        smooth.prefix_reuse = False
        plain = smooth.prefill(rows, _params())
        smooth.prefix_reuse = True
        continued, whole = _decode(smooth, state, 3), _decode(smooth, plain, 3)
    assert spent.prefill_tokens == sum(len(r) for r in rows)  # every row's tokens, as prefill counts them
    assert spent.prefix_reused_tokens == len(HEAD) * len(rows)  # none of the rows forwarded the prefix
    assert state["mask"].sum(1).tolist() == [len(r) for r in rows]
    assert state["next_pos"].flatten().tolist() == [len(r) for r in rows] == plain["next_pos"].flatten().tolist()
    for a, b in zip(continued, whole, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="more than the 30 prefix tokens"):
        smooth.prefill_continuing(head, len(HEAD), [HEAD], _params())


def test_continuing_rows_come_back_in_order_across_cpu_chunks(smooth, monkeypatch):
    from workbench.backends.generator import prefill as module
    from workbench.backends.prefix_reuse import row_prefix_cache

    rows = [[*HEAD, 70, 71, 72, 73], [*HEAD, 74], [*HEAD, 75, 76], [*HEAD, 77, 78, 79]]  # not sorted by length
    with torch.inference_mode():
        base = smooth.prefill([[*HEAD, 90]], _params())
        head = row_prefix_cache(base["cache"], base["mask"], 0, len(HEAD))
        whole = smooth.prefill_continuing(head, len(HEAD), rows, _params())
        calls = []
        hook = smooth.model.register_forward_hook(lambda module, args, output: calls.append(1))
        monkeypatch.setattr(module, "CPU_PREFILL_TOKENS", 1)  # every suffix chunk holds one row
        try:
            split = smooth.prefill_continuing(head, len(HEAD), rows, _params())
        finally:
            hook.remove()
    assert len(calls) == len(rows)
    assert split["next_pos"].flatten().tolist() == [len(r) for r in rows]
    torch.testing.assert_close(split["logits"], whole["logits"], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------- reserved room
def test_a_reserved_cache_decodes_exactly_as_a_plain_one_in_place(smooth):
    from workbench.backends.decoding_state import joinable, reserve_positions, select_rows
    from workbench.backends.reserved_cache import ReservedLayer

    with torch.inference_mode():
        plain = smooth.prefill(ROWS, _params())
        reserved = reserve_positions(smooth.prefill(ROWS, _params()), 5)
        assert all(type(layer) is ReservedLayer for layer in reserved["cache"].layers)
        assert not joinable(reserved)  # join before reserving
        tokens = plain["logits"].argmax(-1).tolist()
        plain, reserved = smooth.step(plain, tokens, _params()), smooth.step(reserved, tokens, _params())
        layer = reserved["cache"].layers[0]
        buffer = layer._key_buffer.data_ptr()
        assert layer._key_buffer.shape[-2] == plain["mask"].shape[1] + 4  # the first step made room for 4 more
        for step in range(6):  # two steps past the room: the layer copies again, as a plain one does
            if step == 1:  # drop row 1, keep the others with their room
                keep = torch.tensor([0, 2, 3])
                plain, reserved = select_rows(plain, keep), select_rows(reserved, keep)
                buffer = reserved["cache"].layers[0]._key_buffer.data_ptr()
            tokens = plain["logits"].argmax(-1).tolist()
            plain, reserved = smooth.step(plain, tokens, _params()), smooth.step(reserved, tokens, _params())
            torch.testing.assert_close(reserved["logits"], plain["logits"], atol=0, rtol=0)
            for a, b in zip(reserved["cache"].layers, plain["cache"].layers, strict=True):
                assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
            if 1 <= step <= 3:  # within the room: written in place
                assert reserved["cache"].layers[0]._key_buffer.data_ptr() == buffer


def test_reserving_leaves_other_caches_and_zero_room_alone(smooth):
    from workbench.backends.decoding_state import reserve_positions

    with torch.inference_mode():
        state = smooth.prefill(ROWS[:2], _params())
        layers = list(state["cache"].layers)
        assert reserve_positions(state, 0)["cache"].layers == layers  # no room asked: untouched
        reserved = list(reserve_positions(state, 3)["cache"].layers)
        assert reserved != layers
        assert reserve_positions(state, 3)["cache"].layers == reserved  # already reserved (not joinable): untouched
        other = smooth.prefill(ROWS[:2], _params())
        other["mask"] = other["mask"][:, 1:]  # a cache wider than its mask: not a plain full-attention cache
        reserve_positions(other, 3)
        assert all(type(layer).__name__ == "DynamicLayer" for layer in other["cache"].layers)
