"""`EngineReplica` driven directly (no Ray): a tiny model, one job at a time."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("prometheus_client")

from radixflow.cluster.replica import EngineReplica
from radixflow.cluster.wire import Job, not_taken
from radixflow.generation.params import SamplingParams
from radixflow.options import EngineOptions
from radixflow.server.events import Final


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


def test_the_time_after_the_first_token_is_wall_time_not_the_engines_clock(zoo):
    # the engine's clock advances by its worker calls only: the loop's own time between rounds
    # (scheduling, detokenizing, waking) was left out of decode_s, so the ingress's time to
    # first token of a non-streamed prompt (its answer's arrival less decode_s) read high
    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 5.0)
    step = replica.engine.step

    def slow_step():  # each round's time outside the worker call
        time.sleep(0.2)
        return step()

    replica.engine.step = slow_step  # type: ignore[method-assign]
    try:
        job = Job("j", tuple(range(10, 40)), "default", SamplingParams(max_tokens=6, ignore_eos=True), False)

        async def answer():
            return [wire async for wire in replica.generate(job)]

        final = asyncio.run(answer())[-1]
    finally:
        replica.drain()
    assert isinstance(final.event, Final) and len(final.event.output.token_ids) == 6
    assert final.decode_s is not None and final.decode_s >= 5 * 0.2  # five rounds after the first token


def test_the_routing_stats_carry_the_engines_figures(zoo):
    # the ingress of a fleet runs no engine: it learns the replicas' rounds, cache bytes and
    # evictions from what each reports with its routing stats (its /metrics read 0 for them)
    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 5.0)
    try:
        job = Job("j", tuple(range(10, 40)), "default", SamplingParams(max_tokens=3, ignore_eos=True), False)

        async def run():
            [wire async for wire in replica.generate(job)]
            return await replica.record_routing_stats()

        stats = asyncio.run(run())
    finally:
        replica.drain()
    engine = stats["engine"]
    assert engine["radixflow_rounds"] == [("radixflow_rounds_total", {}, 3.0)]
    budget = engine["radixflow_cache_budget_bytes"]
    assert len(budget) == 1 and budget[0][2] > 0
    kinds = {labels["kind"] for _, labels, _ in engine["radixflow_cache_bytes"]}
    assert kinds == {"kv", "checkpoint", "working"}


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
        # its stats come at once, asking the dead engine thread nothing (not after the 10 s call
        # timeout) ...
        replica._routing_state = asks_the_engine  # type: ignore[method-assign]
        stats = asyncio.run(replica.record_routing_stats())
        # ... and say it is dead: a failed poll left the router the last live report, so it kept
        # routing there (a dead replica's instant 503s make its queue look the shortest)
        assert stats["alive"] is False and stats["checkpoints"] == []
        # a job routed here meanwhile is refused naming this replica: the ingress retries it elsewhere
        (refusal,) = asyncio.run(answer())
        assert refusal.event.status == 503 and refusal.replica == replica.name
    finally:
        replica.drain()


def test_a_replica_whose_engine_is_stuck_fails_its_health_check_and_is_passed_over(zoo):
    # check_health asked only whether the engine thread was alive: one stuck in a worker call
    # passed, so Serve kept it and its jobs waited until the drain; its routing stats poll timed
    # out, so routers kept its last (live, short-queued) report and sent it more
    import threading

    from radixflow.generation.tracker import RequestTracker
    from radixflow.scheduler.request import Request

    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 0.0)
    release = threading.Event()
    run = replica.engine.runner.run

    def stuck(batch):
        release.wait()
        return run(batch)

    replica.engine.runner.run = stuck  # type: ignore[method-assign]
    replica.loop.liveness.floor_s = replica.loop.liveness.first_round_s = 0.05
    try:
        replica.check_health()  # idle: healthy
        req = Request("j", tuple(range(10, 40)), sampling=SamplingParams(max_tokens=2))
        replica.loop.submit([(req, RequestTracker(req, replica.model.tokenizer))], lambda event: None, False)
        deadline = time.monotonic() + 30
        while True:
            try:
                replica.check_health()
            except RuntimeError as e:
                assert "no round finished" in str(e)
                break
            assert time.monotonic() < deadline, "check_health never failed"
            time.sleep(0.01)
        replica._routing_state = asks_the_engine  # type: ignore[method-assign]
        stats = asyncio.run(replica.record_routing_stats())  # at once, not after the 10 s call timeout
        assert stats["alive"] is False
        release.set()
        while True:  # answered: idle, healthy again
            try:
                replica.check_health()
                break
            except RuntimeError:
                assert time.monotonic() < deadline + 30, "check_health never recovered"
                time.sleep(0.01)
    finally:
        release.set()
        replica.drain()


def test_a_replica_stopped_with_its_engine_stuck_answers_its_jobs_and_stops(zoo):
    # drain joined the engine thread without a bound: Serve stopping a stuck replica (one that
    # failed its health check) hung in it until Serve killed the actor, its jobs unanswered
    import threading

    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 0.0)
    release, entered = threading.Event(), threading.Event()
    run = replica.engine.runner.run

    def stuck(batch):
        entered.set()
        release.wait()
        return run(batch)

    replica.engine.runner.run = stuck  # type: ignore[method-assign]
    try:
        job = Job("j", tuple(range(10, 40)), "default", SamplingParams(max_tokens=2), False)

        async def answer_while_draining():
            answer = asyncio.ensure_future(collect(replica.generate(job)))
            await asyncio.to_thread(entered.wait, 60)
            drain = threading.Thread(target=replica.drain, daemon=True)  # a hang fails, not hangs, the test
            drain.start()
            await asyncio.to_thread(drain.join, 60)
            assert not drain.is_alive(), "drain waited for the stuck engine thread"
            return await asyncio.wait_for(answer, 60)

        final = asyncio.run(answer_while_draining())[-1].event
        # a refusal the ingress retries on another replica: this one never ran the job to its end
        assert isinstance(final, Final) and final.status == 503 and "stuck" in final.error
    finally:
        release.set()
        replica.loop.join(30)


async def asks_the_engine():
    raise AssertionError("a dead or stuck replica's report waited on its engine thread")


async def collect(events):
    return [event async for event in events]


def test_a_replica_in_a_long_round_still_reports_at_once(zoo):
    # the stats poll waited for the engine thread to finish its round (up to 10 s), then raised:
    # Serve logged the failure and kept the last report, so through a long round the ingress's
    # engine series stood still (radixflow_seconds_since_last_round read what it did before it)
    import threading

    from radixflow.generation.tracker import RequestTracker
    from radixflow.scheduler.request import Request

    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 0.0)
    release, entered, ended = threading.Event(), threading.Event(), threading.Event()
    run = replica.engine.runner.run

    def long_round(batch):
        entered.set()
        release.wait(60)
        ended.set()
        return run(batch)

    replica.engine.runner.run = long_round  # type: ignore[method-assign]
    try:
        before = asyncio.run(replica.record_routing_stats())  # idle: read between rounds
        req = Request("j", tuple(range(10, 40)), sampling=SamplingParams(max_tokens=2))
        replica.loop.submit([(req, RequestTracker(req, replica.model.tokenizer))], lambda event: None, False)
        assert entered.wait(60)
        for _ in range(2):  # a read stays queued behind the round: one at a time
            during = asyncio.run(replica.record_routing_stats())  # not raised ...
            assert not ended.is_set()  # ... nor waited for the round (a clock, however slow, says
            # nothing here: a stall of the test's own process read as a wait)
        assert during["alive"] and during["checkpoints"] == before["checkpoints"]  # what it last read
        ((_, _, since),) = during["engine"]["radixflow_seconds_since_last_round"]
        assert since > 0
        release.set()
        deadline = time.monotonic() + 60
        while replica.loop.call(lambda engine: engine.queue_length(), 60):  # until it is answered
            assert time.monotonic() < deadline
            time.sleep(0.05)
        truth = replica.loop.call(lambda engine: sorted(engine.routing_digest().hashes))
        while asyncio.run(replica.record_routing_stats())["checkpoints"] != truth:  # read again
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        release.set()
        replica.drain()


def test_the_ingress_refuses_a_prompt_past_the_cache_budget_as_the_replica_does(zoo):
    # with --cache-memory the ingress checked the KV cap alone: a prompt too long for the cache
    # was refused naming kv_blocks, an option never given ("does not fit in the KV cache: 2000
    # tokens need 125 blocks, cache has 80 (kv_blocks)"), where one engine names the budget
    import pickle

    from radixflow.cluster.launch import ingress_problem
    from radixflow.scheduler.request import Request

    options = {"model": "qwen3_5-tiny", "torch_threads": 1, "cache_memory": "1MB"}
    replica = EngineReplica(EngineOptions.from_mapping(options), 8, 5.0)
    try:
        info = pickle.loads(pickle.dumps(replica.describe()))  # what Serve hands the ingress
        req = Request("r", tuple(i % 500 + 1 for i in range(2000)), sampling=SamplingParams(max_tokens=4))
        problem = ingress_problem(info)(req)
        assert problem is not None and problem == replica.engine.problem(req)
        assert "cache_memory budget" in str(problem)
    finally:
        replica.drain()


def test_a_retry_reaching_a_replica_that_still_runs_the_job_is_refused_not_a_400(zoo):
    # the ingress retries a job whose stream failed before it sent anything (Ray's
    # ActorUnavailableError: the actor unreachable, maybe still running it), on the same replica
    # when no other runs: the engine refused the id in use, and the client got a 400, "duplicate
    # request id", for the fleet's own hiccup. A refusal (503) is what another replica may serve
    replica = EngineReplica(EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1}), 8, 5.0)
    job = Job("j", tuple(range(10, 40)), "default", SamplingParams(max_tokens=200, ignore_eos=True), True)

    async def run() -> Final:
        first = replica.generate(job)
        await first.__anext__()  # the first attempt runs on
        try:
            return [wire async for wire in replica.generate(job)][-1].event
        finally:
            await first.aclose()

    try:
        again = asyncio.run(run())
    finally:
        replica.drain()
    assert isinstance(again, Final) and again.output is None and again.status == 503, again
    assert not_taken(again) and "duplicate" not in again.error
