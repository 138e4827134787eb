"""`adaptive` on generated workloads beside `native` and `radixflow`, through the checking runner.

Sizes land on edges: prompts that are prefixes of others, a token budget of one block or a
block and a bit, one request per round, scoring requests (max_tokens 0), one or two state slots,
KV for little more than the longest request. The round predictor lent to the policy answers 0,
NaN, 1e300 or a line. Every round the cache's integrity is checked and the runner asserts each
chunk reads exactly its own prefix's KV and state; every finished request's tokens are the ones
an uncached run computes, and with no abort all three policies end every request alike.
"""

from __future__ import annotations

import math

from checking_runner import VOCAB, CheckingRunner
from engine_utils import new_engine
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.engine.engine import Engine
from radixflow.runners.sim import sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk
from radixflow.scheduler.sampling import SamplingParams

PREDICTORS = {
    "none": None,
    "zero": lambda chunks: 0.0,
    "nan": lambda chunks: math.nan,
    "huge": lambda chunks: 1e300,
    "line": lambda chunks: 1e-3 * (1 + sum(c.length for c in chunks)),
}


class PredictingRunner(CheckingRunner):
    """The checking runner with a round predictor for the policy to weigh rounds by."""

    def __init__(self, block_size: int, same_round_state: bool, predictor: str) -> None:
        super().__init__(True, block_size, same_round_state)
        self.round_predictor = PREDICTORS[predictor]


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Request], SchedulerConfig]:
    bs = draw(st.sampled_from([1, 2, 4, 8]))
    tokens = st.integers(1, VOCAB - 1)
    stems = draw(st.lists(st.lists(tokens, min_size=1, max_size=6 * bs), min_size=1, max_size=3))
    reqs = []
    for i in range(draw(st.integers(1, 8))):
        stem = tuple(draw(st.sampled_from(stems)))
        cut = draw(st.integers(0, len(stem)))
        tail = tuple(draw(st.lists(tokens, max_size=2 * bs)))
        prompt = stem[:cut] + tail or (1,)
        sampling = SamplingParams(max_tokens=draw(st.sampled_from([0, 1, 1, 2, 4])))
        arrival = draw(st.sampled_from([0.0, 0.0, 0.002, 0.02]))
        reqs.append(Request(f"r{i}", prompt, arrival_s=arrival, sampling=sampling))
    longest = max(-(-r.max_length // bs) for r in reqs)
    config = SchedulerConfig(
        token_budget=bs * draw(st.integers(1, 4)) + draw(st.sampled_from([0, bs - 1])),
        max_requests=draw(st.integers(1, 4)),
        block_size=bs,
        num_blocks=longest + draw(st.sampled_from([0, 1, 4, 64])),
        num_state_slots=draw(st.sampled_from([1, 2, 3, 8])),
    )
    return reqs, config


def run(
    policy: str,
    reqs: list[Request],
    config: SchedulerConfig,
    runner: CheckingRunner,
    aborts: dict[int, str],
) -> Engine:
    """Every request to its end, the integrity checked after each round; ``aborts``: before step
    k, abort this request."""
    engine = new_engine(runner, config, policy=policy)
    runner.cache = engine.cache
    for r in reqs:
        engine.submit(Request(r.id, r.prompt, arrival_s=r.arrival_s, sampling=r.sampling))
    step = 0
    while engine.has_work():
        if step in aborts:
            engine.abort(aborts[step])
            engine.check_integrity()
        engine.step()
        engine.check_integrity()
        step += 1
        assert step < 2_000, "no progress"
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0
    for r in engine.requests:
        assert r.status in (RequestStatus.FINISHED, RequestStatus.ABORTED), (r.id, r.status, r.error)
        prefixes = [r.prompt + tuple(r.output[:i]) for i in range(len(r.output))]
        assert r.output == [sim_token(r.namespace, p, VOCAB) for p in prefixes], r.id
    return engine


def ends(engine: Engine) -> dict[str, tuple[RequestStatus, list[int]]]:
    return {r.id: (r.status, r.output) for r in engine.requests}


@settings(max_examples=60, deadline=None)
@given(
    workload=workloads(),
    predictor=st.sampled_from(sorted(PREDICTORS)),
    same_round=st.booleans(),
    abort=st.none() | st.tuples(st.integers(0, 12), st.integers(0, 7)),
)
def test_adaptive_ends_every_request_as_the_baselines_and_an_uncached_run(
    workload: tuple[list[Request], SchedulerConfig],
    predictor: str,
    same_round: bool,
    abort: tuple[int, int] | None,
):
    reqs, config = workload
    aborts = {} if abort is None else {abort[0]: reqs[abort[1] % len(reqs)].id}
    engines = {
        policy: run(policy, reqs, config, PredictingRunner(config.block_size, same_round, predictor), aborts)
        for policy in ("native", "radixflow", "adaptive")
    }
    if not aborts:  # an abort lands on a different round's state under each policy
        assert ends(engines["adaptive"]) == ends(engines["native"]) == ends(engines["radixflow"])


def test_the_predicting_runner_lends_its_predictor_to_the_policy():
    engine = new_engine(PredictingRunner(4, True, "line"), SchedulerConfig(token_budget=8, block_size=4))
    chunk = ScheduledChunk("a", "", (1, 2), 0, 2, (), None, (), True)
    assert engine.scheduler.predict is not None and engine.scheduler.predict([chunk]) == 0.003
