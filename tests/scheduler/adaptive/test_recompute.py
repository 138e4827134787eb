"""Wait or recompute, on hand-computed rounds and a linear round-time model."""

from __future__ import annotations

from radixflow.scheduler import SchedulerConfig
from radixflow.scheduler.adaptive.recompute import Blocked, Draft, done_recomputing, done_waiting, weigh
from radixflow.scheduler.adaptive.round_time_curve import RoundTimes
from radixflow.scheduler.output import ScheduledChunk

BUDGET = 100


def linear(fixed: float, per_token: float) -> RoundTimes:
    def predict(chunks: list[ScheduledChunk]) -> float:
        return fixed + per_token * sum(c.end - c.start for c in chunks)

    return RoundTimes(predict, SchedulerConfig(token_budget=BUDGET, max_requests=8, block_size=1))


def drafted(tokens: int) -> Draft:
    """A round holding one prefill chunk of ``tokens`` that completes its prompt."""
    return Draft(tokens=tokens, decodes=0, completions=1)


def test_rounds_waiting_and_recomputing():
    # the producer commits the checkpoint this round; the consumer needs 30 tokens after it
    committed = Blocked(prompt=130, pending=100, ready=0, producer_at=100)
    assert done_waiting(committed, BUDGET) == 1
    assert done_recomputing(committed, BUDGET, left=130) == 0
    assert done_recomputing(committed, BUDGET, left=30) == 1
    # the producer still has 250 tokens to the shared end: three rounds, then the consumer's own
    behind = Blocked(prompt=420, pending=400, ready=0, producer_at=150)
    assert done_waiting(behind, BUDGET) == 3 + 1
    assert done_recomputing(behind, BUDGET, left=20) == 4


def test_a_high_fixed_cost_makes_a_round_worth_the_duplicate():
    b = Blocked(prompt=60, pending=48, ready=0, producer_at=60)
    verdict = weigh(b, linear(fixed=10.0, per_token=0.01), drafted(30), BUDGET, waiting=1)
    assert verdict.recompute and verdict.rounds_saved == 1


def test_no_fixed_cost_and_a_queue_behind_make_the_consumer_wait():
    b = Blocked(prompt=60, pending=48, ready=0, producer_at=60)
    verdict = weigh(b, linear(fixed=0.0, per_token=1.0), drafted(30), BUDGET, waiting=20)
    assert not verdict.recompute and verdict.cost_s > verdict.benefit_s


def test_no_room_in_the_round_means_waiting():
    b = Blocked(prompt=60, pending=48, ready=0, producer_at=60)
    verdict = weigh(b, linear(fixed=10.0, per_token=0.01), drafted(BUDGET), BUDGET, waiting=0)
    assert not verdict.recompute and verdict.rounds_saved == 0
