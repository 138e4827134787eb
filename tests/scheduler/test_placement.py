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


def test_branch_places_the_boundary_before_a_block_aligned_prompts_end_where_a_copy_is_known():
    # a copy resumes at most at the last boundary before the prompt's end (its last token's
    # logits are computed): the end alone served no copy of a prompt ending on a block boundary
    def shared(prompt_len: int, start: int = 0, end: int = 96) -> PlacementContext:
        base = ctx(start, end, prompt_len=prompt_len)
        return PlacementContext(**{**base.__dict__, "shared": lambda: prompt_len // 16 * 16})

    branch = make_placement("branch")
    assert branch.positions(shared(96)) == [80, 96]
    assert branch.positions(ctx(0, 96, prompt_len=96)) == [96]  # no copy known: its end alone
    assert branch.positions(shared(100, end=100)) == [96]  # a copy resumes at 96 already
    assert branch.positions(shared(96, start=80)) == [96]  # (start, end] of this chunk only
    # a known copy is a known sibling: `lone` guesses no ladder for it (its rungs would take the
    # slots the copy's resume point needs where they are short), it places what `branch` does
    assert make_placement("lone").positions(shared(96)) == [80, 96]
    assert make_placement("lone").positions(shared(100, end=100)) == [96]


def test_align_places_at_the_last_block_boundary_of_the_chunk():
    assert make_placement("align").positions(ctx(0, 100)) == [96]
    assert make_placement("align").positions(ctx(96, 100)) == []


def test_none_places_nothing_and_unknown_names_fail():
    assert make_placement("none").positions(ctx(0, 100, branches=(48,))) == []
    with pytest.raises(ValueError, match="unknown checkpoint placement"):
        make_placement("everywhere")


def lone_ctx(
    start: int, end: int, prompt_len: int = 100, branches: tuple[int, ...] = (), predicted: int | None = None
) -> PlacementContext:
    return PlacementContext(
        prompt_len=prompt_len,
        start=start,
        end=end,
        block_size=16,
        branch_points=lambda lo, hi: [b for b in branches if lo < b <= hi],
        predicted_fork=lambda: predicted,
    )


def test_lone_places_a_ladder_before_the_end_of_a_lone_prompt_in_a_fresh_namespace():
    lone = make_placement("lone")
    # prompt end 96 (floored to a block); rungs 1, 2, 4 blocks back (8 and 16 fall before 0)
    assert lone.positions(lone_ctx(0, 100)) == [32, 64, 80, 96]
    assert lone.positions(lone_ctx(0, 70)) == [32, 64]  # (start, end] of this chunk only
    assert lone.positions(lone_ctx(64, 100)) == [80, 96]


def test_lone_places_no_ladder_for_a_prompt_with_known_siblings():
    lone = make_placement("lone")
    assert lone.positions(lone_ctx(0, 100, branches=(48,))) == [48, 96]  # exactly `branch`
    assert lone.positions(lone_ctx(0, 100, branches=(16,))) == [16, 96]


def test_lone_places_the_predicted_fork_unless_a_known_branch_is_as_deep():
    lone = make_placement("lone")
    assert lone.positions(lone_ctx(0, 100, predicted=64)) == [64, 96]
    assert lone.positions(lone_ctx(0, 100, branches=(16,), predicted=64)) == [16, 64, 96]
    assert lone.positions(lone_ctx(0, 100, branches=(64,), predicted=64)) == [64, 96]
    assert lone.positions(lone_ctx(0, 100, branches=(80,), predicted=64)) == [80, 96]
    assert lone.positions(lone_ctx(0, 100, predicted=0)) == [96]  # history, nothing worth it
    assert lone.positions(lone_ctx(64, 100, predicted=64)) == [96]  # an earlier chunk's position
    # a known copy resumes at 80, deeper than the prediction: as a known branch there would
    copy = PlacementContext(**{**lone_ctx(0, 96, prompt_len=96, predicted=64).__dict__, "shared": lambda: 96})
    assert lone.positions(copy) == [80, 96]
