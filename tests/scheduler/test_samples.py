"""Prompt logprobs as columns: rows appended round by round keep each row's own rank."""

from __future__ import annotations

from radixflow.scheduler.samples import PromptLogprobs


def rows(positions: list[int], ranked: bool) -> PromptLogprobs:
    """Rows at ``positions``, ranked ``10 + position`` where ``ranked`` (else by a runner that
    ranks nothing)."""
    ranks = [10 + p for p in positions] if ranked else []
    n = len(positions)
    return PromptLogprobs(positions, [7] * n, [-1.0] * n, [[7]] * n, [[-1.0]] * n, ranks)


def test_a_round_that_ranks_nothing_between_two_that_rank_leaves_every_row_its_own_rank():
    """Its rows came out unranked, and the next round's ranks were read as theirs (row 3 said
    rank 15, which is row 5's)."""
    got = PromptLogprobs()
    for positions, ranked in (([1, 2], True), ([3, 4], False), ([5, 6], True)):
        got.extend(rows(positions, ranked))
    assert [got.rank(i) for i in range(len(got))] == [11, 12, None, None, 15, 16]
    assert [row.rank for row in got] == [11, 12, None, None, 15, 16]
    assert got.rank(-1) == 16
