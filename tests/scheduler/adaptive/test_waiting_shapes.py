"""Shapes of the waiting requests: what a round re-keys when a group changes."""

from __future__ import annotations

import pytest
from engine_utils import new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.adaptive.adaptive_policy import Adaptive
from radixflow.scheduler.adaptive.waiting_shapes import GROUP_WALK, Shape, Shapes
from radixflow.scheduler.sampling import SamplingParams


def test_a_round_re_keys_at_most_a_walk_of_a_group_however_many_copies_of_one_prompt_wait(
    monkeypatch: pytest.MonkeyPatch,
):
    """Copies of one prompt (`n` choices, or a batch sampling one prompt many times) end at one
    node of the tree. The walk was bounded by nodes, not requests, so every round that admitted a
    copy re-keyed every copy still waiting and put them all in the scan's order: a round's
    scheduler CPU grew with the queue (12 ms at 1,000 copies, 130 ms at 8,000, against
    `radixflow`'s flat 1.2 ms). At most `GROUP_WALK` of a group's members now."""
    shaped: list[str] = []
    of = Shapes.of

    def counted(self: Shapes, request: Request, reuse: int | None = None) -> Shape:
        shaped.append(request.id)
        return of(self, request, reuse)

    monkeypatch.setattr(Shapes, "of", counted)
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    config = SchedulerConfig(token_budget=512, max_requests=8, block_size=16, num_blocks=4096)
    engine = new_engine(runner, config, policy="adaptive")
    assert isinstance(engine.scheduler.policy, Adaptive)
    prompt = tuple(range(1, 200))
    for i in range(600):
        engine.submit(Request(f"r{i}", prompt, sampling=SamplingParams(max_tokens=1, seed=i)))
    engine.step()
    for _ in range(5):
        shaped.clear()
        engine.step()
        assert 0 < len(shaped) <= 2 * GROUP_WALK + config.max_requests
    while engine.has_work():
        engine.step()
    assert all(r.status.done and r.error is None for r in engine.requests)
