"""Round times read off the predictor on a grid: exact at grid sizes, interpolated between."""

from __future__ import annotations

import tracemalloc

import pytest

from radixflow.scheduler import SchedulerConfig
from radixflow.scheduler.adaptive.round_time_curve import FALLBACK_FIXED_SHARE, RoundTimes
from radixflow.scheduler.output import ScheduledChunk

CFG = SchedulerConfig(token_budget=1000, max_requests=8, block_size=1)


def test_a_linear_predictor_is_read_back_exactly_and_probed_once_per_size():
    calls: list[int] = []

    def predict(chunks: list[ScheduledChunk]) -> float:
        calls.append(len(chunks))
        return 5.0 + 0.01 * sum(c.end - c.start for c in chunks)

    times = RoundTimes(predict, CFG)
    assert abs(times.seconds(1000) - 15.0) < 1e-9
    assert abs(times.seconds(333) - 8.33) < 1e-9  # interpolated on a linear model: exact
    probes = len(calls)
    times.seconds(333)
    assert len(calls) == probes  # cached
    assert abs(times.per_token() - 0.01) < 1e-9
    chunk = ScheduledChunk("a", "n", tuple(range(100)), 0, 100, (), None, (), True)
    assert abs(times.draft_seconds([chunk], extra_tokens=50) - 6.5) < 1e-9
    assert times.seconds(0) == 0.0


def test_without_a_predictor_a_round_is_a_fixed_part_plus_its_tokens():
    times = RoundTimes(None, CFG)
    assert times.seconds(100) == FALLBACK_FIXED_SHARE * 1000 + 100


def test_the_fixed_part_is_the_prefill_intercept_and_growth_counts_decode_steps_apart():
    def predict(chunks: list[ScheduledChunk]) -> float:
        decodes = sum(1 for c in chunks if c.end - c.start == 1)
        prefill = sum(c.end - c.start for c in chunks) - decodes
        # a decode-only round is cheap; a round with prefill pays 5 s plus 0.01 s a token
        return (5.0 if prefill else 0.5) + 0.01 * prefill + 0.002 * decodes

    times = RoundTimes(predict, CFG)
    assert abs(times.fixed() - 5.0) < 1e-9
    assert times.seconds(1) < times.fixed()  # one token is costed as a decode step
    assert abs(times.grows(300, 0, 100) - 1.0) < 1e-9
    # 300 tokens of which 20 decode steps: 280 prefill; 100 more prefill tokens add 1 s
    assert abs(times.grows(300, 20, 100) - 1.0) < 1e-9


class Learning:
    """A predictor refitted between rounds, as the torch runner's: ``revision`` says when."""

    def __init__(self) -> None:
        self.per_token, self.revision = 0.01, 0

    def __call__(self, chunks: list[ScheduledChunk]) -> float:
        return 1.0 + self.per_token * sum(c.end - c.start for c in chunks)


def test_a_learning_predictor_is_asked_again_after_each_refit_only():
    predict = Learning()
    times = RoundTimes(predict, CFG)
    assert abs(times.seconds(500) - 6.0) < 1e-9
    predict.per_token = 0.02  # refitted, but not yet announced: the probes still stand
    assert abs(times.seconds(500) - 6.0) < 1e-9
    predict.revision += 1
    assert abs(times.seconds(500) - 11.0) < 1e-9
    assert abs(times.per_token() - 0.02) < 1e-9


def test_a_round_is_probed_in_as_many_chunks_as_it_runs():
    """A predictor that runs several sequences faster than one long one (attention is quadratic
    in a chunk's length): a round of 1000 tokens in 8 chunks is priced as 8 chunks of 125, not as
    one of 1000; counts round down to a power of two (6 chunks are probed as 4)."""

    def predict(chunks: list[ScheduledChunk]) -> float:
        return 1.0 + sum((c.end - c.start) ** 2 for c in chunks) * 1e-6

    times = RoundTimes(predict, CFG)
    assert abs(times.seconds(1000) - (1.0 + 1.0)) < 1e-9
    assert abs(times.seconds(1000, chunks=8) - (1.0 + 8 * 125**2 * 1e-6)) < 1e-9
    assert abs(times.seconds(1000, chunks=6) - (1.0 + 4 * 250**2 * 1e-6)) < 1e-9


class Failing(Learning):
    """Sane for small rounds; ``bad`` for rounds over 400 tokens until refitted (``bad`` None)."""

    def __init__(self, bad: float) -> None:
        super().__init__()
        self.bad: float | None = bad

    def __call__(self, chunks: list[ScheduledChunk]) -> float:
        big = sum(c.end - c.start for c in chunks) > 400
        return self.bad if big and self.bad is not None else super().__call__(chunks)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 1e300])
def test_a_predictor_answering_no_time_is_read_as_no_predictor_until_it_is_refitted(bad):
    # every cost came out NaN or inf, and the adaptive cut fell back to one unit per round
    predict = Failing(bad)
    times, plain = RoundTimes(predict, CFG), RoundTimes(None, CFG)
    assert times.seconds(100) == 2.0  # sane so far: the predictor's
    assert times.seconds(500) == plain.seconds(500)  # a bad answer: no predictor from then on
    assert times.seconds(100) == plain.seconds(100) and times.second_wave() == 0.0
    assert times.fixed() == plain.fixed() and times.per_token() == plain.per_token()
    assert times.seconds(500, decode_steps=3) == plain.seconds(500, decode_steps=3)
    assert times.seconds(0, decode_steps=5) == plain.seconds(0, decode_steps=5)
    predict.bad, predict.revision = None, 1  # refitted: asked again
    assert times.seconds(500) == 6.0


def test_a_huge_token_budget_is_probed_without_allocating_its_tokens():
    # `--token-budget` goes to 2**31 (`MAX_COUNT`: plain counters), and `adaptive`, the default
    # policy, probed a whole budget's round as chunks holding a tuple of that many token ids: a
    # budget of 10**7 took 400 MB and seconds, 2**31 was killed for memory in its first round
    seen: list[tuple[int, int]] = []

    def predict(chunks: list[ScheduledChunk]) -> float:
        seen.extend((len(c.tokens), c.end) for c in chunks)
        return 1e-3 + 1e-9 * sum(c.end - c.start for c in chunks)

    times = RoundTimes(predict, SchedulerConfig(token_budget=10**6, max_requests=8, block_size=16))
    tracemalloc.start()
    try:
        times.seconds(10**6)
        times.seconds(10**6 - 1, decode_steps=3, chunks=4)
        times.second_wave()
        times.fixed()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # a tuple of 10**6 ids alone is 8 MB
    assert seen and all(n >= end for n, end in seen)  # each probe still holds its [0, end)
