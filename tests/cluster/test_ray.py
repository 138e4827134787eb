"""Two real replicas on Ray Serve (skipped without the cluster extra; about a minute on 2 CPUs):
one replica is killed while requests are in flight; every request is answered or gets an error,
none hangs, and later requests go to the survivor; the ingress's metrics get the replicas'
engine figures."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("torch")

from radixflow.cluster.fleet_metrics import FleetFigures
from radixflow.cluster.launch import DEPLOYMENT, FleetSpec, deploy, ray_serve
from radixflow.cluster.remote_loop import RemoteLoop
from radixflow.generation.params import SamplingParams
from radixflow.options import EngineOptions
from radixflow.scheduler.request import Request
from radixflow.server.events import Final
from radixflow.server.metrics import ServerMetrics
from radixflow.server.state import ServerConfig


def kill_one_replica() -> str:
    import ray

    names = [a for a in ray.util.list_named_actors(all_namespaces=True) if DEPLOYMENT in a["name"]]
    victim = sorted(a["name"] for a in names)[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    return victim


async def collect(
    loop: RemoteLoop, requests: list[Request], flag: bool, timeout_s: float, kill_after_s: float | None = None
) -> list[Final]:
    """Submit ``requests`` and wait for every final answer (killing a replica after
    ``kill_after_s`` when given); fails if any is still unanswered after ``timeout_s``."""
    finals: list[Final] = []
    done = asyncio.Event()

    def sink(event) -> None:
        if isinstance(event, Final):
            finals.append(event)
            if len(finals) == len(requests):
                done.set()

    loop.submit([(r, None) for r in requests], sink, flag)  # type: ignore[misc]
    if kill_after_s is not None:
        await asyncio.sleep(kill_after_s)
        await asyncio.to_thread(kill_one_replica)
    await asyncio.wait_for(done.wait(), timeout_s)  # none hangs
    return finals


def test_a_replica_killed_mid_run_leaves_no_request_hanging():
    options = EngineOptions.from_mapping({"model": "qwen3_5-tiny", "torch_threads": 1})
    config = ServerConfig(max_pending=64, drain_s=5.0)
    with ray_serve(FleetSpec(2, "pow2")):
        figures = FleetFigures()  # the engine series of the ingress's /metrics
        handle = deploy(options, FleetSpec(2, "pow2"), config, figures)
        streaming = handle.options(stream=True)
        loop = RemoteLoop(lambda job: streaming.generate.remote(job), None, ServerMetrics(), 64)
        prompts = [tuple(range(10 + i, 60 + i)) for i in range(12)]
        params = SamplingParams(max_tokens=24, ignore_eos=True)
        first = [Request(f"q{i}", p, sampling=params) for i, p in enumerate(prompts)]
        # the deadlines bound a hang only (a busy machine is slow): a wall-clock bound on the run
        # also counted the kill, which may take a while
        finals = asyncio.run(collect(loop, first, True, 300, kill_after_s=1.0))
        assert len(finals) == 12
        ok = [f for f in finals if f.output is not None]
        failed = [f for f in finals if f.output is None]
        assert all(f.status == 503 and "replica" in (f.error or "") for f in failed)
        assert ok, "the surviving replica answered nothing"
        second = [Request(f"later{i}", p) for i, p in enumerate(prompts[:4])]
        later = asyncio.run(collect(loop, second, False, 300))
        assert all(f.output is not None for f in later)  # the survivor serves what comes next
        # the replicas' engine figures reach the ingress with their routing stats (they read 0)
        ingress = ServerMetrics()
        ingress.engine_from(figures)
        deadline = time.monotonic() + 120  # the next stats poll: about 1 s on a quiet machine
        while not ingress.registry.get_sample_value("radixflow_rounds_total"):
            assert time.monotonic() < deadline, "no replica's rounds reached the ingress"
            time.sleep(0.25)
        assert (ingress.registry.get_sample_value("radixflow_cache_budget_bytes") or 0) > 0
