"""Rollouts of the queue: full vs whole rounds, consumers released, and termination."""

from __future__ import annotations

from radixflow.scheduler.rollout import Arrivals, Job, Start, cost


def seconds(tokens: int) -> float:
    return 10.0 + tokens  # a fixed cost per round and one unit per token


def test_whole_rounds_finish_a_short_job_without_the_long_one_beside_it():
    jobs = [Job(50), Job(80)]
    # whole: 50 alone (t=60), then 80 (t=150): 210; full: 50 + 50 of the 80 (t=110), 30 (t=150): 260
    assert cost(jobs, Start(), 100, seconds, full=False) == 60 + 150
    assert cost(jobs, Start(), 100, seconds, full=True) == 110 + 150


def test_full_rounds_win_when_rounds_are_dear():
    jobs = [Job(50), Job(60), Job(90)]
    dear = lambda tokens: 1000.0 + tokens  # noqa: E731
    assert cost(jobs, Start(), 100, dear, full=True) < cost(jobs, Start(), 100, dear, full=False)


def test_a_producer_releases_its_consumers_the_round_after_it_completes():
    # round 1: the producer (t=110); round 2: its three consumers of 20 (t=180)
    assert cost([Job(100, consumers=3, consumer_work=20)], Start(), 100, seconds, full=True) == 110 + 3 * 180


def test_consumers_and_jobs_longer_than_the_budget_terminate():
    jobs = [Job(250, consumers=2, consumer_work=150), Job(120)]
    for full in (True, False):
        total = cost(jobs, Start(), 100, seconds, full=full, arrivals=Arrivals(rate=0.01, work=300, count=2))
        assert total > 0
