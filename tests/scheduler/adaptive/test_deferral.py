"""Leave a whole prompt for a round of its own, or take it: hand-built rounds, and the busy
fraction on hand-timed rounds."""

from __future__ import annotations

import pytest

from radixflow.scheduler.adaptive.deferral import (
    BUSY_CAP,
    MIN_COMPLETIONS,
    ArrivalRate,
    Backlog,
    BusyFraction,
    Cut,
    DraftTally,
    Split,
    defer_cut,
    leave_for_later,
)
from radixflow.scheduler.output import ScheduledChunk


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


def cut(
    affected: int = 8,
    grows: float = 9.0,
    fixed: float = 1.0,
    share: float = 0.25,
    waiting: int = 48,
    load: float = 0.0,
) -> Cut:
    return Cut(affected, grows, fixed, share, waiting, load)


def test_a_cut_chunk_is_deferred_when_the_completions_lose_more_than_its_share_of_a_fixed_part():
    # 8 completions x 9 ms = 72 ms against 48 waiting x 1 ms x a quarter of a round = 12 ms
    assert defer_cut(cut())
    # at 10 ms per call and 32 contexts (254 waiting) the saved fixed part wins
    assert not defer_cut(cut(fixed=10.0, waiting=254))
    # the edge: 72 ms against 288 x 1 x 0.25 = 72 ms is not more
    assert not defer_cut(cut(waiting=288))
    assert defer_cut(cut(waiting=287))
    # nothing completes or wakes in the round: nobody is delayed by the chunk
    assert not defer_cut(cut(affected=0))


def test_the_offered_load_counts_the_arrivals_before_the_waiting_drain():
    assert cut(waiting=48, load=0.5).delayed == pytest.approx(96.0)
    assert cut(waiting=10, load=7.0).delayed == pytest.approx(10 / (1 - BUSY_CAP))  # capped
    assert defer_cut(cut(waiting=48, load=0.0)) and not defer_cut(cut(waiting=48, load=0.9))


def test_the_backlog_follows_each_requests_latest_remaining_tokens():
    backlog = Backlog()
    backlog.set("p", 1088)
    backlog.set("c", 1088)
    assert backlog.tokens == 2176
    backlog.set("c", 64)  # its producer computed the shared context: it became a consumer
    assert backlog.tokens == 1152 and backlog.of("c") == 64
    backlog.drop("p")
    backlog.drop("p")  # twice is harmless
    assert backlog.tokens == 64 and backlog.of("p") == 0


def test_the_arrival_rate_is_zero_for_a_batch_and_decays_when_a_stream_stops():
    batch = ArrivalRate()
    for _ in range(10):
        batch.arrived(0.0, 1000)
    batch.now = 0.5
    assert batch.load(1e-4) == 0.0  # every arrival at once: no span, nothing more will come
    stream = ArrivalRate(window=8)
    for i in range(8):
        stream.arrived(0.01 * i, 1000)  # 100 per second
    stream.now = 0.07
    assert stream.load(1e-5) == pytest.approx(100 * 1000 * 1e-5)  # 7 gaps over 0.07 s
    stream.now = 0.1  # the span runs to now: 7 arrivals over 0.1 s
    assert stream.load(1e-5) == pytest.approx(70 * 1000 * 1e-5)
    stream.now = 0.7  # arrivals stopped: the rate decays
    assert stream.load(1e-5) == pytest.approx(10 * 1000 * 1e-5)


def chunk(rid: str, start: int, end: int) -> ScheduledChunk:
    return ScheduledChunk(rid, "n", tuple(range(end)), start, end, (), None, (), True)


def test_the_tally_counts_fresh_tokens_past_the_running_requests_and_where_chunks_end():
    tally = DraftTally()
    tally.start(continuing=1)
    chunks = [chunk("running", 512, 1024), chunk("new", 0, 300)]
    tally.advance(chunks, lambda c: c.end >= 1000)
    assert (tally.tokens, tally.fresh_tokens, tally.completions, tally.samples) == (812, 300, 1, 2)
    assert tally.ends == {"running": 1024, "new": 300}
    chunks.append(chunk("another", 0, 64))
    tally.advance(chunks, lambda c: False)
    assert (tally.tokens, tally.fresh_tokens) == (876, 364)
    tally.start()
    assert (tally.tokens, tally.fresh_tokens, tally.ends) == (0, 0, {})
