"""Summary figures."""

from __future__ import annotations

from engine_utils import new_engine

from radixflow.bench.metrics import (
    agreement,
    first_token,
    median_margin,
    outputs_digest,
    percentile,
    rounds_lower_bound,
    summarize,
)
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request
from radixflow.scheduler.request import RequestStatus
from radixflow.scheduler.samples import Sample
from radixflow.scheduler.scheduler import SchedulerConfig


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0], 100) == 3.0
    assert percentile([], 50) is None  # undefined, and JSON has no NaN


def _finished(rid: str, token: int | None) -> Request:
    r = Request(rid, (1,))
    r.status, r.output = RequestStatus.FINISHED, [] if token is None else [token]
    return r


def _failed(rid: str) -> Request:
    r = Request(rid, (1,))
    r.status, r.error = RequestStatus.FAILED, "token id 9 is outside the vocabulary (0..7)"
    return r


def test_agreement_counts_misses_and_failures():
    reqs = [_finished("0", 7), _finished("1", 8), _finished("2", 9), _failed("3")]
    assert agreement(reqs, {"0": 7, "1": 8, "2": 0, "3": 5}) == 0.5


def test_agreement_never_counts_a_failed_request_as_a_match():
    # The reference cannot run an out-of-vocabulary request either: both sides have no token,
    # which used to compare equal (None == None) and report 1.000 for one failure in three.
    reqs = [_finished("a", 3), _finished("b", 4), _failed("oov")]
    assert agreement(reqs, {"a": 3, "b": 4}) == 2 / 3
    assert agreement([_failed("oov")], {}) == 0.0
    assert agreement([], {}) is None


def test_rounds_lower_bound_respects_the_request_cap():
    cfg = SchedulerConfig(token_budget=1000, max_requests=2)
    assert rounds_lower_bound(tokens=100, chunks=10, depth=1, scheduler=cfg) == 5  # request cap
    assert rounds_lower_bound(tokens=3500, chunks=2, depth=1, scheduler=cfg) == 4  # token budget
    assert rounds_lower_bound(tokens=100, chunks=2, depth=7, scheduler=cfg) == 7  # dependency depth


def test_rounds_lower_bound_of_a_run_counts_its_chunks():
    # Ten independent 16-token requests, two per round: the token budget alone says 1 round.
    cfg = SchedulerConfig(token_budget=1024, max_requests=2)
    engine = new_engine(SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"]), cfg)
    engine.run([Request(f"r{i}", tuple(range(i * 16, i * 16 + 16))) for i in range(10)])
    result = summarize("radixflow", engine, cfg)
    assert result.rounds_lower_bound == 5 <= result.rounds
    assert result.failures == () and result.failed == 0


def test_margin_and_digest():
    r = Request("a", (1,))
    r.output, r.output_logprobs = [3], [Sample(3, -0.1, ((3, -0.1), (4, -0.6)))]
    assert median_margin([r]) == 0.5
    assert outputs_digest([1, 2]) != outputs_digest([2, 1])


def test_margin_skips_requests_without_two_alternatives():
    one_alt, no_sample = Request("b", (1,)), Request("c", (1,))
    one_alt.output, one_alt.output_logprobs = [3], [Sample(3, -0.1, ((3, -0.1),))]
    assert median_margin([one_alt, no_sample]) is None


def test_first_token_is_the_first_generated_one_or_none():
    assert first_token(_finished("a", None)) is None  # nothing generated (a failed request)
    r = _finished("b", 5)
    r.output.append(6)  # a generating request: only the first token is scored
    assert first_token(r) == 5


def test_wall_times_count_each_finished_rounds_wall_time_and_keep_idle_gaps():
    from radixflow.bench.metrics import wall_times
    from radixflow.engine.records import RoundRecord

    def rnd(i: int, start: float, duration: float, wall: float) -> RoundRecord:
        return RoundRecord(i, start, duration, duration, 1, 1, 0, 0, "budget", (), wall_s=wall)

    rounds = [rnd(0, 0.0, 1.0, 3.0), rnd(1, 5.0, 1.0, 2.0)]  # idle from 1 to 5 (engine clock)
    # a round's end counts its whole wall time; an arrival in the idle gap keeps the gap
    assert wall_times(rounds, [0.0, 0.5, 1.0, 5.0, 6.0]) == [0.0, 0.5, 3.0, 7.0, 9.0]
    assert wall_times([], [2.0]) == [2.0]


def test_the_sim_reports_no_wall_figures_of_its_own():
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    config = SchedulerConfig(token_budget=64)
    engine = new_engine(runner, config, "adaptive")
    engine.run([Request("a", tuple(range(1, 40)))])
    result = summarize("adaptive", engine, config)
    assert result.wall_mean_latency_s is None and result.wall_worker_call_s is None
    assert all(r.wall_s is None for r in engine.rounds)
