"""Checkpoint placement policies."""

from __future__ import annotations

import pytest

from radixflow.scheduler.placement import PlacementContext, make_placement


def ctx(start: int, end: int, prompt_len: int = 100, branches: tuple[int, ...] = ()) -> PlacementContext:
    return PlacementContext(
        prompt_len=prompt_len,
        start=start,
        end=end,
        block_size=16,
        branch_points=lambda lo, hi: [b for b in branches if lo < b <= hi],
    )


def test_branch_places_at_divergences_and_the_prompt_end():
    assert make_placement("branch").positions(ctx(0, 100, branches=(48,))) == [48, 96]
    assert make_placement("branch").positions(ctx(0, 64, branches=(48,))) == [48]  # end is later
    assert make_placement("branch").positions(ctx(48, 100, branches=(48,))) == [96]  # (start, end]


def test_align_places_at_the_last_block_boundary_of_the_chunk():
    assert make_placement("align").positions(ctx(0, 100)) == [96]
    assert make_placement("align").positions(ctx(96, 100)) == []


def test_none_places_nothing_and_unknown_names_fail():
    assert make_placement("none").positions(ctx(0, 100, branches=(48,))) == []
    with pytest.raises(ValueError, match="unknown checkpoint placement"):
        make_placement("everywhere")
