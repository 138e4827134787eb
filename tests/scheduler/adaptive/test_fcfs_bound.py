"""The FCFS bound on a request's slack: its clock, its cap, its book."""

from __future__ import annotations

import pytest

from radixflow.scheduler.adaptive.fcfs_bound import FcfsBound


def test_the_clock_runs_a_full_budget_per_round_and_never_behind_the_rounds():
    bound = FcfsBound(token_budget=100, share=1.0)
    assert bound.arrive("a", 0, 250) == pytest.approx(2.5)  # FCFS needs 2.5 full rounds for it
    assert bound.arrive("b", 0, 50) == pytest.approx(3.0)  # behind a: 3 rounds of work ahead
    assert bound.arrive("c", 10, 100) == pytest.approx(1.0)  # the backlog drained by round 10


def test_the_share_scales_the_bound_and_cap_takes_the_smaller():
    bound = FcfsBound(token_budget=100, share=0.5)
    assert bound.arrive("a", 3, 400) == pytest.approx(2.0)
    assert bound.cap("a", 7.0) == pytest.approx(2.0)
    assert bound.cap("a", 1.5) == pytest.approx(1.5)
    assert bound.cap("never-seen", 7.0) == pytest.approx(7.0)


def test_forget_drops_the_bound_but_not_the_clock():
    bound = FcfsBound(token_budget=100, share=1.0)
    bound.arrive("a", 0, 300)
    bound.forget("a")
    bound.forget("a")  # twice is harmless
    assert len(bound) == 0
    assert bound.cap("a", 9.0) == 9.0
    assert bound.arrive("b", 1, 100) == pytest.approx(3.0)  # a's work still counts: FCFS did it first


@pytest.mark.parametrize(("budget", "share"), [(0, 0.4), (100, 0.0), (100, float("nan"))])
def test_bad_arguments_are_refused(budget: int, share: float):
    with pytest.raises(ValueError, match="must be positive"):
        FcfsBound(budget, share)


def test_due_is_the_arrival_round_plus_the_bound():
    """Past its arrival plus its share of the FCFS wait a request may not be held back again."""
    bound = FcfsBound(token_budget=100, share=0.4)
    bound.arrive("a", 0, 250)  # FCFS finishes it by round 2.5: held at most 0.4 x 2.5
    bound.arrive("b", 1, 100)  # by round 3.5: held at most 0.4 x 2.5 from round 1
    assert bound.due("a") == pytest.approx(1.0) and bound.due("b") == pytest.approx(2.0)
    assert bound.due("never-seen") is None
    bound.forget("a")
    assert bound.due("a") is None
