"""`Liveness`: a loop with work and no finished round past its bound is stalled; an idle one never."""

from __future__ import annotations

from dataclasses import replace

from radixflow.engine.records import RoundRecord
from radixflow.server.liveness import Liveness


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def round_of(
    predicted_s: float | None, worker_call_s: float = 0.01, learned: int = 50, tokens: int = 8
) -> RoundRecord:
    record = RoundRecord(0, 0.0, worker_call_s, worker_call_s, tokens, 1, 0, 0, "budget", ())
    return replace(record, predicted_s=predicted_s, predicted_from=learned)


def test_an_idle_loop_is_never_stalled():
    clock = Clock()
    live = Liveness(floor_s=30.0, clock=clock)
    clock.now += 10_000
    assert live.stalled() is None


def test_work_waiting_past_the_floor_without_a_round_is_stalled_and_a_round_clears_it():
    clock = Clock()
    live = Liveness(floor_s=30.0, first_round_s=0.0, clock=clock)
    clock.now += 10_000  # idle for long: the wait starts when work comes, not at the last round
    live.on_pending(2)
    clock.now += 29
    assert live.stalled() is None
    clock.now += 2
    why = live.stalled()
    assert why is not None and "no round finished for 31 s" in why and "2 requests" in why
    live.on_round(round_of(None))
    assert live.stalled() is None
    live.on_pending(0)
    clock.now += 100
    assert live.stalled() is None


def test_the_bound_grows_with_the_longest_round_the_runner_predicts():
    clock = Clock()
    live = Liveness(floor_s=30.0, rounds=20.0, first_round_s=0.0, clock=clock)
    assert live.bound_s == 30.0
    live.on_round(round_of(0.5))
    assert live.bound_s == 30.0  # 20 x 0.5 s is under the floor
    live.on_round(round_of(4.0))
    live.on_round(round_of(1.0))
    assert live.bound_s == 80.0
    live.on_round(round_of(None, worker_call_s=5.0))  # no prediction: the measured call counts
    assert live.bound_s == 100.0
    live.on_pending(1)
    clock.now += 99
    assert live.stalled() is None
    clock.now += 2
    assert live.stalled() is not None


def test_a_round_that_ran_far_past_its_prediction_does_not_stretch_the_bound():
    # a round stuck for an hour that then came back would make the next stall wait 20 hours
    live = Liveness(floor_s=30.0, rounds=20.0, clock=Clock())
    live.on_round(round_of(0.5, worker_call_s=3600.0))
    assert live.bound_s == 30.0


def test_a_prediction_from_the_prior_alone_does_not_hide_a_slow_machine():
    # before its fit has measured a round the runner predicts from its prior (a cost model of
    # another machine): a CPU 50x slower than the prior took its rounds' 20x for a stall
    live = Liveness(floor_s=1.0, rounds=20.0, clock=Clock())
    live.on_round(round_of(0.01, worker_call_s=2.0, learned=0))
    assert live.bound_s == 40.0


def test_before_any_round_the_bound_is_the_first_rounds():
    # no round has told this machine's speed yet: a real model's first full-budget prefill on a
    # CPU takes minutes, and a replica reported stuck then is replaced before its first round
    # ends, again and again
    clock = Clock()
    live = Liveness(floor_s=30.0, first_round_s=600.0, clock=clock)
    live.on_pending(1)
    clock.now += 599
    assert live.stalled() is None
    clock.now += 2
    assert live.stalled() is not None
    live.on_round(round_of(None, worker_call_s=0.01))
    assert live.bound_s == 30.0


def test_a_failed_round_moves_the_wait_on_but_tells_nothing_of_the_machines_speed():
    # a worker call that raised at once (memory run short) ended the first round's grace: the
    # first round that ran, a CPU's minutes-long prefill, was then called stuck after 30 s
    clock = Clock()
    live = Liveness(floor_s=30.0, first_round_s=600.0, clock=clock)
    live.on_pending(1)
    clock.now += 500
    live.on_round(replace(round_of(None, worker_call_s=0.0), error="worker call failed: MemoryError: "))
    assert live.bound_s == 600.0
    clock.now += 599  # the wait starts again at the failed round: the loop moved on
    assert live.stalled() is None
    clock.now += 2
    assert live.stalled() is not None


def test_a_round_larger_than_any_timed_gets_time_in_proportion_to_its_tokens():
    """A tiny first round (0.1 s) brought the bound down to the 30 s floor: a full-budget CPU
    prefill after it, 40 s, was called stuck. Until a full round is timed, a round may be as large
    as the budget: the largest one timed, scaled up to it (a round's time grows at most in
    proportion to its tokens), no further than the bound before any round."""
    clock = Clock()
    live = Liveness(floor_s=30.0, rounds=20.0, first_round_s=600.0, budget_tokens=2048, clock=clock)
    live.on_round(round_of(None, worker_call_s=0.1, tokens=16, learned=0))
    assert live.bound_s == 20 * 0.1 * 2048 / 16
    live.on_pending(1)
    clock.now += 40
    assert live.stalled() is None
    live.on_round(round_of(2.0, tokens=2048))  # a full round timed: its own time is the evidence
    assert live.bound_s == 40.0


def test_scaling_a_tiny_round_up_to_the_budget_stops_at_the_bound_before_any_round():
    live = Liveness(floor_s=30.0, rounds=20.0, first_round_s=600.0, budget_tokens=2048, clock=Clock())
    live.on_round(round_of(None, worker_call_s=1.0, tokens=1, learned=0))  # 20 x 2048 s scaled
    assert live.bound_s == 600.0
    live.on_round(round_of(None, worker_call_s=40.0, tokens=1, learned=0))  # measured: more
    assert live.bound_s == 800.0
