"""The bubble count: token budget a round left unused while work that could have run waited."""

from __future__ import annotations

from engine_utils import new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig, StopReason
from radixflow.scheduler.bubble import BUBBLE_WALK_LIMIT
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

ATTN = SimRunner(SIM_MODELS["qwen3-4b"], HARDWARE["h100"])


def test_a_request_the_cache_cannot_hold_this_round_is_no_bubble():
    # 10 blocks of 8: the first prompt takes 8, the second needs 5 and waits for memory
    cfg = SchedulerConfig(token_budget=256, max_requests=16, block_size=8, num_blocks=10, num_state_slots=4)
    engine = new_engine(ATTN, cfg, policy="native")
    engine.submit(Request("big", tuple(range(64))))
    engine.submit(Request("next", tuple(range(100, 140))))
    engine.step()
    first = engine.rounds[0]
    assert [c[0] for c in first.chunks] == ["big"]
    assert first.stop_reason == StopReason.MEMORY.value
    assert first.bubble_tokens == 0  # "next" could not have run: no room for its KV


HYBRID = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])


def _first_round_matches(consumers: int, cfg: SchedulerConfig) -> int:
    """Matches in `native`'s first round over one producer, ``consumers`` blocked behind it and a
    runnable request behind them all."""
    spec = WorkloadSpec(groups=1, candidates=consumers + 1, context_len=64, candidate_len=8)
    engine = new_engine(HYBRID, cfg, policy="native")
    for r in [*build_workload(spec).requests, Request("solo", tuple(range(900, 940)))]:
        engine.submit(r)
    engine._admit_arrivals()
    calls = []
    plain = engine.scheduler.reuse.match
    engine.scheduler.reuse.match = lambda req, touch=True: calls.append(req.id) or plain(req, touch)
    engine.step()
    assert engine.rounds[0].bubble_tokens == 0  # the solo request lies past the walk
    return len(calls)


def test_the_bubble_walk_is_bounded_when_a_round_may_hold_very_many_requests():
    huge = SchedulerConfig(token_budget=256, max_requests=100_000, block_size=8, num_blocks=512)
    fewer, more = BUBBLE_WALK_LIMIT + 100, 2 * BUBBLE_WALK_LIMIT
    assert _first_round_matches(fewer, huge) == _first_round_matches(more, huge)
