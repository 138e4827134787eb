"""`FleetRequestRouter` and the ingress together, without a cluster: where Serve reports a job
went, a retry of that job, a replica's refusal. The router is built as Serve builds it in the
ingress's process (its JSON kwargs name the ingress's published `FleetFigures`)."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("prometheus_client")

from radixflow.cluster.fleet_metrics import FleetFigures, publish
from radixflow.cluster.ray_router import FleetRequestRouter
from radixflow.cluster.remote_loop import RemoteLoop
from radixflow.cluster.wire import Job, WireEvent
from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.params import SamplingParams
from radixflow.scheduler.request import Request
from radixflow.server.events import Final
from radixflow.server.metrics import ServerMetrics

ReplicaID = namedtuple("ReplicaID", "unique_id")  # what a request router reads of Serve's
CONTEXT = tuple(range(100, 164))  # four blocks of 16: a prefix worth following


def running(name: str, queue: int = 0) -> SimpleNamespace:
    """A live replica as Serve shows it to a request router: its id and routing stats."""
    stats = {"alive": True, "queue": queue, "block_size": 16, "checkpoints": []}
    return SimpleNamespace(replica_id=ReplicaID(name), routing_stats=stats)


def fleet_router(name: str, figures: FleetFigures) -> FleetRequestRouter:
    """The router Serve builds for the ingress holding ``figures`` (Serve's constructor needs a
    cluster: its bookkeeping is stood in for)."""
    router = FleetRequestRouter.__new__(FleetRequestRouter)
    router._replica_queue_len_cache = {}
    router.initialize_state(name, figures=publish(figures))
    return router


def job(job_id: str, prompt: tuple[int, ...] = CONTEXT) -> Job:
    return Job(job_id, prompt, "default", SamplingParams(), False)


def ranks(router: FleetRequestRouter, replicas: list, sent: Job) -> list[list[str]]:
    ranked = asyncio.run(router.choose_replicas(replicas, SimpleNamespace(args=[sent])))
    return [[r.replica_id.unique_id for r in rank] for rank in ranked]


@pytest.mark.parametrize("name", ["pow2", "prefix", "checkpoint"])
def test_a_retry_of_a_job_is_not_sent_back_to_the_replica_it_failed_on(name):
    # a replica that fails a job before sending anything (its actor unavailable, or dead before
    # Serve has heard) stays in Serve's set: the ingress's retry went back there, surely under
    # prefix affinity (the router had just recorded the job's prefix on it)
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b", queue=2)]
    router.on_request_routed(SimpleNamespace(args=[job("j")]), ReplicaID("a"), None)
    for _ in range(10):  # the ingress's retry of j, and Serve's own re-ranking of it
        assert ranks(router, replicas, job("j")) == [["b"]]
    router.on_request_routed(SimpleNamespace(args=[job("j")]), ReplicaID("b"), None)
    assert sorted(r for rank in ranks(router, replicas, job("j")) for r in rank) == ["a", "b"]  # tried both
    assert ranks(router, replicas, job("k"))[0] == ["a"]  # another job: the least loaded


def test_the_ingress_drops_what_the_router_noted_of_a_job_once_it_ends():
    figures = FleetFigures()
    router = fleet_router("prefix", figures)
    output = GenerationOutput("r", CONTEXT, (9,), "x", "length")

    def open_stream(sent: Job):
        async def answer():
            router.on_request_routed(SimpleNamespace(args=[sent]), ReplicaID("a"), None)
            yield WireEvent(Final(0, output), None, "a")

        return answer()

    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)
    answered: list[frozenset[str]] = []  # what the router had noted of j as it was answered

    def sink(event) -> None:
        answered.append(figures.routes.tried("j"))

    async def main() -> None:
        loop.submit([(Request("j", CONTEXT), None)], sink, False)  # type: ignore[list-item]
        await asyncio.to_thread(loop.join, 5)  # its flight ends

    asyncio.run(main())
    assert answered == [{"a"}]
    assert figures.routes.tried("j") == frozenset() and len(figures.routes) == 0
