"""`EngineReplica` driven directly (no Ray): a tiny model, one job at a time."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("prometheus_client")

from radixflow.cluster.replica import EngineReplica
from radixflow.cluster.wire import Job
from radixflow.generation.params import SamplingParams
from radixflow.options import EngineOptions
from radixflow.server.loop import Final


def test_the_answer_says_how_long_after_the_first_token_it_came(zoo):
    # the ingress of a fleet sees no first token of a non-streamed prompt: it takes the time to
    # first token from the answer's arrival less this
    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 5.0)
    try:
        job = Job("j", tuple(range(10, 40)), "default", SamplingParams(max_tokens=6, ignore_eos=True), False)

        async def answer():
            return [wire async for wire in replica.generate(job)]

        wires = asyncio.run(answer())
    finally:
        replica.drain()
    final = wires[-1]
    assert isinstance(final.event, Final) and len(final.event.output.token_ids) == 6
    assert final.decode_s is not None and final.decode_s > 0  # five more rounds after the first token


def test_a_replica_whose_engine_failed_fails_its_health_check(zoo):
    # Serve asks a replica's check_health; it had none, so a replica whose engine loop had died
    # stayed in rotation, answering every job it was routed (by its last digest) with a 503
    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 5.0)
    try:
        replica.check_health()  # a working replica passes

        def broken() -> None:
            raise RuntimeError("boom")

        replica.engine.step = broken  # type: ignore[method-assign]
        job = Job("j", tuple(range(10, 40)), "default", SamplingParams(max_tokens=4), False)

        async def answer():
            return [wire async for wire in replica.generate(job)]

        final = asyncio.run(answer())[-1].event
        assert isinstance(final, Final) and final.status == 500
        replica.loop.join(5.0)
        with pytest.raises(RuntimeError, match="the engine failed: RuntimeError: boom"):
            replica.check_health()
        t0 = time.monotonic()  # its stats come at once, not after the 10 s call timeout ...
        stats = asyncio.run(replica.record_routing_stats())
        assert time.monotonic() - t0 < 5.0
        # ... and say it is dead: a failed poll left the router the last live report, so it kept
        # routing there (a dead replica's instant 503s make its queue look the shortest)
        assert stats["alive"] is False and stats["checkpoints"] == []
    finally:
        replica.drain()
