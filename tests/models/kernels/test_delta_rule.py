"""pick_chunk: the chunk length of the batched delta-rule kernel, from the padded work of a round."""

from __future__ import annotations

import pytest

from radixflow.models.kernels.delta_rule import CHUNK_SIZES, STEP_COST, pick_chunk

HEADS, DK, DV = 8, 64, 64  # qwen3_5-small's Gated DeltaNet layers


def padded_rows(lengths: list[list[int]], chunk: int) -> int:
    size = min(chunk, max(n for segs in lengths for n in segs))
    return sum(-(-n // size) * size for segs in lengths for n in segs)


def test_short_suffixes_beside_one_prompt_take_short_chunks() -> None:
    # a server round: 12 scoring suffixes of 11 tokens and a 70-token chat prompt
    lengths = [[11]] * 12 + [[70]]
    assert padded_rows(lengths, 64) == 896 and padded_rows(lengths, 16) == 272
    assert pick_chunk(lengths, HEADS, DK, DV) == 16


def test_a_long_prompt_alone_does_not_take_the_shortest_chunks() -> None:
    # no padding at any length: the carry loop's steps decide (64 steps at 16, 32 at 32)
    assert pick_chunk([[1024]], HEADS, DK, DV) == 32
    # one head of small states: a row is cheap next to a step, so the longest chunks win
    assert pick_chunk([[1024]], 1, 8, 8) == 64


@pytest.mark.parametrize(
    "lengths", [[[1]], [[1], [1], [1]], [[64]], [[65]], [[33, 31], [2]], [[5]] * 40, [[4096]]]
)
def test_the_pick_is_a_known_length_and_the_cheapest(lengths: list[list[int]]) -> None:
    chunk = pick_chunk(lengths, HEADS, DK, DV)
    assert chunk in CHUNK_SIZES

    def cost(c: int) -> float:
        size = min(c, max(n for segs in lengths for n in segs))
        steps = max(sum(-(-n // size) for n in segs) for segs in lengths)
        per_row = 3 * DK * DV + size * (3 * DK + DV) + size * size
        return HEADS * padded_rows(lengths, c) * per_row + steps * STEP_COST

    assert cost(chunk) == min(cost(c) for c in CHUNK_SIZES)
