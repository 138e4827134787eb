"""Leave a whole prompt for a round of its own, or take it: hand-built rounds, and the busy
fraction on hand-timed rounds."""

from __future__ import annotations

import pytest

from radixflow.scheduler.admission import BUSY_CAP, MIN_COMPLETIONS, BusyFraction, Split, leave_for_later


def split(
    completions: int = 6, grows: float = 4.0, alone: float = 7.0, waiting: int = 0, busy: float = 0.0
) -> Split:
    return Split(completions, grows, alone, waiting, busy)


def test_a_round_of_consumers_on_an_idle_engine_leaves_a_long_prompt_for_later():
    # six completions would wait 4 s each (24 s); a round of its own costs it 3 s more
    s = split()
    assert s.extra_fixed_s == pytest.approx(3.0) and s.delayed == pytest.approx(1.0)
    assert leave_for_later(s)


def test_the_requests_waiting_behind_it_pay_the_extra_fixed_part_too():
    assert leave_for_later(split(waiting=6))  # 24 s against 7 x 3 s
    assert not leave_for_later(split(waiting=7))  # 24 s against 8 x 3 s


def test_a_busy_engine_counts_the_arrivals_before_the_backlog_drains():
    # half busy: every request delayed brings one more arrival behind it
    assert split(waiting=1, busy=0.5).delayed == pytest.approx(4.0)
    assert leave_for_later(split(waiting=2, busy=0.5))  # 24 s against 6 x 3 s
    assert not leave_for_later(split(waiting=3, busy=0.5))  # 24 s against 8 x 3 s


def test_a_backlog_that_never_drains_counts_the_capped_busy_fraction():
    assert split(busy=1.0).delayed == pytest.approx(1.0 / (1.0 - BUSY_CAP))
    assert not leave_for_later(split(busy=1.0))  # 24 s against 20 x 3 s
    assert leave_for_later(split(completions=40, busy=1.0))  # 160 s against 60 s


def test_a_round_completing_fewer_than_the_minimum_takes_it():
    assert not leave_for_later(split(completions=MIN_COMPLETIONS - 1, grows=100.0))
    assert leave_for_later(split(completions=MIN_COMPLETIONS, grows=100.0))


def test_without_a_fixed_part_a_round_of_its_own_costs_nothing():
    s = split(grows=7.0, alone=7.0, waiting=50, busy=0.9)
    assert s.extra_fixed_s == 0.0 and leave_for_later(s)
    # a prompt that costs less alone than its growth (interpolation noise) costs nothing either
    assert split(grows=8.0, alone=7.0).extra_fixed_s == 0.0


def test_nothing_grows_nothing_is_left():
    assert not leave_for_later(split(grows=0.0, alone=3.0))


def test_back_to_back_rounds_are_all_busy():
    busy = BusyFraction()
    assert busy.value == 0.0  # no round yet
    busy.round_ended(0.010, predicted_s=0.010, work_left=True)
    busy.round_ended(0.025, predicted_s=0.001, work_left=True)  # started at 0.010: its whole span
    assert busy.value == pytest.approx(1.0)


def test_after_running_out_of_work_only_the_predicted_round_is_busy():
    busy = BusyFraction()
    busy.round_ended(0.010, predicted_s=0.010, work_left=False)  # the engine idles from 0.010
    busy.round_ended(0.040, predicted_s=0.010, work_left=False)  # an arrival at 0.030
    assert busy.value == pytest.approx(0.020 / 0.040)
    # a prediction longer than the span (a model error) counts no more than the span
    busy.round_ended(0.045, predicted_s=1.0, work_left=True)
    assert busy.value == pytest.approx(0.025 / 0.045)


def test_the_window_forgets_old_rounds():
    busy = BusyFraction(window=2)
    busy.round_ended(1.0, predicted_s=0.1, work_left=False)  # 10% busy, then idle
    busy.round_ended(2.0, predicted_s=0.1, work_left=True)
    busy.round_ended(2.5, predicted_s=0.1, work_left=True)
    assert busy.value == pytest.approx((0.1 + 0.5) / 1.5)  # the first round left the window
