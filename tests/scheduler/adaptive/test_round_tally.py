"""The round's draft read incrementally, and the arrival rate."""

from __future__ import annotations

import pytest

from radixflow.scheduler.adaptive.round_tally import ArrivalRate, DraftTally
from radixflow.scheduler.output import ScheduledChunk


def test_the_arrival_rate_is_zero_for_a_batch_and_decays_when_a_stream_stops():
    batch = ArrivalRate()
    for _ in range(10):
        batch.arrived(0.0)
    batch.now = 0.5
    assert batch.rate() == 0.0  # every arrival at once: no span, nothing more will come
    stream = ArrivalRate(window=8)
    for i in range(8):
        stream.arrived(0.01 * i)  # 100 per second
    stream.now = 0.07
    assert stream.rate() == pytest.approx(100.0)  # 7 gaps over 0.07 s
    stream.now = 0.1  # the span runs to now: 7 arrivals over 0.1 s
    assert stream.rate() == pytest.approx(70.0)
    stream.now = 0.7  # arrivals stopped: the rate decays
    assert stream.rate() == pytest.approx(10.0)


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
