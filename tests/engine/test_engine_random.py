"""Randomized workloads through the whole engine with a checking runner.

Every round: cache integrity, and the runner asserts each chunk reads exactly its own prefix's KV
and restores exactly ``prompt[:start]`` of its namespace from a READY checkpoint. Sizes are drawn
to land on edges: prompts that are prefixes of others, cuts on block boundaries, budgets that end
chunks on checkpoint positions, one or two state slots, KV for little more than one prompt.
Aborts and failing worker calls are mixed in; every request ends FINISHED with the right token,
ABORTED, or FAILED because its round's worker call failed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from checking_runner import VOCAB, CheckingRunner
from engine_utils import new_engine
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.engine.engine import Engine
from radixflow.runners.sim import sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.sampling import FinishReason, SamplingParams


@dataclass
class Scenario:
    requests: list[Request]
    config: SchedulerConfig
    policy: str
    placement: str
    hybrid: bool
    fail_rounds: set[int]
    aborts: dict[int, list[int]]  # before step k: abort these request indices
    stops: dict[int, list[int]]  # before step k: end these requests with what they generated
    same_round: bool = False  # the runner restores state saved earlier in the round (followers)


def draw(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, VOCAB) for _ in range(n))


def scenario(rng: random.Random) -> Scenario:
    bs = rng.choice([1, 2, 4, 8])
    stems = [draw(rng, bs * rng.randint(1, 8) + rng.choice([0, 0, 1])) for _ in range(rng.randint(1, 3))]
    reqs = []
    for i in range(rng.randint(1, 12)):
        stem = rng.choice(stems)
        cut = rng.choice([len(stem), rng.randint(0, len(stem)), bs * rng.randint(0, len(stem) // bs)])
        tail = draw(rng, rng.choice([0, 1, 1, bs, rng.randint(1, 3 * bs)]))
        prompt = stem[:cut] + tail or (rng.randrange(1, VOCAB),)
        ns = rng.choice(["a", "a", "b"])
        sampling = SamplingParams(max_tokens=rng.choice([1, 1, 1, 0, 2, 5, 3 * bs + 1]))
        arrival = rng.choice([0.0, 0.0, 0.002, 0.02])
        reqs.append(Request(f"r{i}", prompt, ns, arrival_s=arrival, sampling=sampling))
    longest = max(-(-r.max_length // bs) for r in reqs)
    cfg = SchedulerConfig(
        token_budget=bs * rng.randint(1, 6) + rng.choice([0, 0, bs - 1]),
        max_requests=rng.randint(1, 5),
        block_size=bs,
        num_blocks=longest + rng.choice([0, 1, 2, 4, 16, 64]),
        num_state_slots=rng.choice([1, 1, 2, 3, 8]),
    )
    steps = 4 * len(reqs) + 8
    aborts = {rng.randrange(steps): [rng.randrange(len(reqs))] for _ in range(rng.choice([0, 0, 1, 2]))}
    stops = {rng.randrange(steps): [rng.randrange(len(reqs))] for _ in range(rng.choice([0, 0, 1]))}
    fails = {rng.randrange(steps) for _ in range(rng.choice([0, 0, 0, 1, 2]))}
    return Scenario(
        reqs, cfg, rng.choice(["native", "radixflow", "adaptive"]), rng.choice(["branch", "lone", "align"]),
        rng.random() < 0.85, fails, aborts, stops, rng.random() < 0.5,
    )


def check(sc: Scenario) -> Engine:
    runner = CheckingRunner(sc.hybrid, sc.config.block_size, sc.same_round)
    runner.fail_rounds = sc.fail_rounds
    engine = new_engine(runner, sc.config, policy=sc.policy, placement=sc.placement)
    runner.cache = engine.cache
    for r in sc.requests:
        engine.submit(r)
    step = 0
    while engine.has_work():
        for i in sc.aborts.get(step, []):
            engine.abort(sc.requests[i].id)
            engine.check_integrity()
        for i in sc.stops.get(step, []):
            engine.stop(sc.requests[i].id)
            engine.check_integrity()
        engine.step()
        engine.check_integrity()
        step += 1
        assert step < 10_000, "engine does not make progress"
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0, "resources leaked"
    for r in engine.requests:
        if r.status is RequestStatus.FINISHED:
            prefixes = [r.prompt + tuple(r.output[:i]) for i in range(len(r.output))]
            assert r.output == [sim_token(r.namespace, p, VOCAB) for p in prefixes], r.id
            assert len(r.output) <= r.sampling.max_tokens
            assert r.finish_reason is FinishReason.STOP or len(r.output) == r.sampling.max_tokens
        elif r.status is RequestStatus.FAILED:
            assert "injected failure" in (r.error or ""), (r.id, r.error)
        else:
            assert r.status is RequestStatus.ABORTED, (r.id, r.status)
    return engine


def test_two_thousand_random_workloads_are_exact_and_never_lose_a_request():
    outcomes = {s: 0 for s in RequestStatus}
    follows = 0
    for seed in range(2000):
        engine = check(scenario(random.Random(seed)))
        for r in engine.requests:
            outcomes[r.status] += 1
        follows += engine.scheduler.policy.counters().get("follows", 0)
    assert follows > 20  # consumers followed their producer into its round, checked as such
    # the draw really exercises every ending, not only the easy one
    assert outcomes[RequestStatus.FINISHED] > 10 * outcomes[RequestStatus.ABORTED] > 0
    assert outcomes[RequestStatus.FAILED] > 0 and outcomes[RequestStatus.WAITING] == 0


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_workloads_hypothesis(seed):
    check(scenario(random.Random(seed)))


# not adaptive: with a round to spare it recomputes c's prefix beside p, so nothing is restored
@pytest.mark.parametrize("policy", ["native", "radixflow"])
def test_checking_runner_catches_a_wrong_restore(policy):
    # the checker itself must be able to fail: corrupt a checkpoint's recorded state
    reqs = [Request("p", tuple(range(1, 18))), Request("c", tuple(range(1, 17)) + (99, 98, 97))]
    sc = Scenario(reqs, SchedulerConfig(token_budget=64, block_size=8), policy, "branch", True, set(), {}, {})
    runner = CheckingRunner(True, 8)
    engine = new_engine(runner, sc.config, policy=policy)
    runner.cache = engine.cache
    for r in reqs:
        engine.submit(r)
    engine.step()
    for slot in list(runner.state):
        runner.state[slot] = ("a", ())
    while engine.has_work():
        engine.step()
    # the engine survives a failing worker call, so the violation surfaces as the round's error
    assert reqs[1].status is RequestStatus.FAILED and "restores the wrong state" in (reqs[1].error or "")
