"""The bubble count: token budget a round left unused while work that could have run waited."""

from __future__ import annotations

from engine_utils import new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig, StopReason

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
