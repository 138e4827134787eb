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
from radixflow.cluster.routes import Routes
from radixflow.cluster.wire import Job, WireEvent
from radixflow.fleet import RouteRequest
from radixflow.fleet.routers import prompt_chain
from radixflow.generation.outputs import GenerationOutput, StreamDelta
from radixflow.generation.params import SamplingParams
from radixflow.scheduler.request import Request
from radixflow.server.events import Delta, Final
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


def refusing(router: FleetRequestRouter, replicas: list, answers: dict[str, WireEvent]):
    """An ``open_stream`` as Serve's handle: the router ranks, Serve reports where the job went
    (its first rank), and that replica answers as ``answers`` says."""

    def open_stream(sent: Job):
        async def answer():
            [[took, *_], *_] = await router.choose_replicas(replicas, SimpleNamespace(args=[sent]))
            router.on_request_routed(SimpleNamespace(args=[sent]), took.replica_id, None)
            yield answers[took.replica_id.unique_id]

        return answer()

    return open_stream


def serve_one(loop: RemoteLoop, prompt: tuple[int, ...]) -> Final:
    finals: list[Final] = []

    async def main() -> None:
        loop.submit([(Request("j", prompt), None)], finals.append, False)  # type: ignore[list-item]
        await asyncio.to_thread(loop.join, 5)

    asyncio.run(main())
    return finals[-1]


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_siblings_do_not_follow_a_job_to_the_replica_that_refused_it(name):
    # the router recorded the prefix on the replica Serve reported took the job, though that
    # replica then refused it (its engine's queue full: 429; draining: 503): the job's siblings
    # were sent where it was never cached, as often as where its retry ran
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b", queue=1)]  # a first: the least loaded
    output = GenerationOutput("r", CONTEXT, (9,), "x", "length")
    full = WireEvent(Final(0, None, 429, "queued"), None, "a")
    loop = RemoteLoop(
        refusing(router, replicas, {"a": full, "b": WireEvent(Final(0, output), None, "b")}),
        None,
        ServerMetrics(),
        8,
        fleet=figures,
    )
    assert serve_one(loop, CONTEXT).output is not None  # refused by a, answered by b
    replicas = [running("a"), running("b")]
    for i in range(5):
        assert ranks(router, replicas, job(f"sibling{i}", CONTEXT + (7, 8)))[0] == ["b"]


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_a_job_every_replica_refused_is_remembered_nowhere(name):
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b", queue=1)]
    refusals = {r: WireEvent(Final(0, None, 503, "the server is shutting down"), None, r) for r in "ab"}
    loop = RemoteLoop(refusing(router, replicas, refusals), None, ServerMetrics(), 8, fleet=figures)
    assert serve_one(loop, CONTEXT).status == 503  # the last refusal is the answer
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {}


def taking(router: FleetRequestRouter, replicas: list, script: list):
    """An ``open_stream`` as Serve's handle: the router ranks, Serve reports the job went to its
    first rank, and that replica plays ``script`` (events; "hang": it runs on, sending nothing)."""

    def open_stream(sent: Job):
        async def answer():
            [[took, *_], *_] = await router.choose_replicas(replicas, SimpleNamespace(args=[sent]))
            router.on_request_routed(SimpleNamespace(args=[sent]), took.replica_id, None)
            for step in script:
                if step == "hang":
                    await asyncio.sleep(3600)
                yield step

        return answer()

    return open_stream


def left_by_its_client(loop: RemoteLoop, stream: bool) -> None:
    """Submit job "j" (CONTEXT) and abort it once its replica took it."""

    async def main() -> None:
        loop.submit([(Request("j", CONTEXT), None)], lambda _: None, stream)  # type: ignore[list-item]
        await asyncio.sleep(0.05)
        loop.abort(["j"])
        await asyncio.to_thread(loop.join, 5)

    asyncio.run(main())


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_job_its_client_left_before_its_replica_sent_anything_is_remembered_nowhere(name, stream):
    # its replica aborted it (queued, or in its prefill): the router still sent its siblings there,
    # for a prefix that replica never held
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b", queue=1)]
    loop = RemoteLoop(taking(router, replicas, ["hang"]), None, ServerMetrics(), 8, fleet=figures)
    left_by_its_client(loop, stream)
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {}


def test_a_job_its_client_left_mid_stream_is_still_remembered_where_it_ran():
    # its first token came: its prompt is cached there, its siblings should follow it
    figures = FleetFigures()
    router = fleet_router("prefix", figures)
    replicas = [running("a"), running("b", queue=1)]
    token = WireEvent(Delta(0, StreamDelta((9,), "x")), None, "a")
    loop = RemoteLoop(taking(router, replicas, [token, "hang"]), None, ServerMetrics(), 8, fleet=figures)
    left_by_its_client(loop, True)
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {"a": 48}  # its whole blocks but the last


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_a_sibling_cancelled_by_its_requests_refusal_is_remembered_nowhere(name):
    # prompt "s" was taken by a and ran on, sending nothing; prompt "j" was refused by every
    # replica, so the request was refused whole and "s" cancelled: its prefix stayed noted at a
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b", queue=1)]
    sibling = tuple(range(300, 364))
    refusals = {r: WireEvent(Final(0, None, 429, "queued"), None, r) for r in "ab"}

    def open_stream(sent: Job):
        if sent.id == "s":
            return taking(router, replicas, ["hang"])(sent)
        return refusing(router, replicas, refusals)(sent)

    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)
    finals: list[Final] = []

    async def main() -> None:
        items = [(Request("s", sibling), None), (Request("j", CONTEXT), None)]
        loop.submit(items, lambda e: finals.append(e) if isinstance(e, Final) else None, False)  # type: ignore[arg-type]
        await asyncio.to_thread(loop.join, 5)

    asyncio.run(main())
    assert sorted(f.status for f in finals) == [429, 429]
    for prompt in (sibling, CONTEXT):
        chain = prompt_chain(RouteRequest("default", prompt + (7, 8)), 16)
        assert router._router.memory.depths(chain, 16) == {}


def test_a_job_sent_twice_to_one_replica_is_taken_back_there_twice():
    # a retry finds only the replica it failed on (the fleet's one live replica): the router
    # recorded the job there twice, and took back one record of the two at the job's end
    routes = Routes()
    retracted: list[str] = []
    routes.watch_retractions(lambda _, replica: retracted.append(replica))
    routes.routed("j", "a")
    routes.routed("j", "a")
    routes.refused(job("j"), "a")  # the retry refused there (its first attempt still runs)
    assert retracted == ["a"] and routes.tried("j") == {"a"}
    routes.ended("j", job("j"))  # its client left: neither attempt ran
    assert retracted == ["a", "a"] and len(routes) == 0
    routes.refused(job("j"), "a")  # heard after its end: recorded nowhere now
    assert retracted == ["a", "a"]


@pytest.mark.parametrize("status", [400, 500])
def test_a_job_its_replica_answered_with_an_error_is_remembered_nowhere(status):
    # refused by the engine's own checks (400), or failed with its round (500: what the round
    # computed is withdrawn): that replica holds none of its prompt
    figures = FleetFigures()
    router = fleet_router("prefix", figures)
    replicas = [running("a"), running("b", queue=1)]
    error = WireEvent(Final(0, None, status, "no"), None, "a")
    loop = RemoteLoop(taking(router, replicas, [error]), None, ServerMetrics(), 8, fleet=figures)
    assert serve_one(loop, CONTEXT).status == status
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {}


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_a_send_serve_reports_after_its_job_ended_unrun_is_remembered_nowhere(name):
    # the client left while Serve was routing the job: Serve reported the replica took it only
    # after the ingress had ended its flight (nothing to take back yet), so the record stayed
    figures = FleetFigures()
    router = fleet_router(name, figures)
    figures.routes.ended("j", job("j"))  # its client left; nothing was sent
    router.on_request_routed(SimpleNamespace(args=[job("j")]), ReplicaID("a"), None)  # then Serve's word
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {} and len(figures.routes) == 0
    # a later job reusing the id (a client's own request id) is routed as any other
    figures.routes.begun("j")
    router.on_request_routed(SimpleNamespace(args=[job("j")]), ReplicaID("a"), None)
    assert router._router.memory.depths(chain, 16) == {"a": 48}


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_siblings_ranked_before_serve_reports_the_first_send_follow_it(name):
    # a context's candidates arrive together: each was ranked before Serve reported where the
    # first went (after its replica accepted it), so each was a new context, placed on the least
    # loaded replica: the one the first had not just been sent to
    figures = FleetFigures()
    router = fleet_router(name, figures)
    [[first]] = ranks(router, [running("a"), running("b")], job("j0"))[:1]
    queues = {"a": 0, "b": 0} | {first: 1}  # Serve counts the send to it at once
    replicas = [running(r, q) for r, q in queues.items()]
    for i in range(1, 4):
        assert ranks(router, replicas, job(f"j{i}", CONTEXT + (i,)))[0] == [first]
    router.on_request_routed(SimpleNamespace(args=[job("j0")]), ReplicaID(first), None)
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert set(router._router.memory.depths(chain, 16)) == {first}  # recorded there, and only there


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_a_job_ranked_and_never_sent_is_remembered_nowhere(name):
    # ranked first to one replica, then Serve sent it to another (the first full), or its client
    # left while it waited for room: only where it went counts, and nothing once it ended unrun
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b")]
    [[first], *_] = ranks(router, replicas, job("j"))
    other = "b" if first == "a" else "a"
    router.on_request_routed(SimpleNamespace(args=[job("j")]), ReplicaID(other), None)
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {other: 48}
    ranks(router, replicas, job("k", CONTEXT + (9,)))  # a sibling ranked, then its client left
    figures.routes.ended("k", job("k", CONTEXT + (9,)))
    figures.routes.ended("j", job("j"))  # and j's
    assert router._router.memory.depths(chain, 16) == {}


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_job_retried_elsewhere_is_remembered_only_where_its_retry_ran(name, stream):
    # Serve sent the job to a, which failed it before sending anything (its actor unreachable a
    # moment; cancelled there); its retry ran on b. The record at a stayed (only a job that ran
    # nowhere was taken back), so its siblings followed it to a, which never held its prompt
    figures = FleetFigures()
    router = fleet_router(name, figures)
    replicas = [running("a"), running("b", queue=1)]  # a first: the least loaded
    output = GenerationOutput("r", CONTEXT, (9,), "x", "length")
    token = WireEvent(Delta(0, StreamDelta((9,), "x")), None, "b")
    answer = WireEvent(Final(0, output), None, "b")
    answers = [token, answer] if stream else [answer]
    attempts: list[str] = []

    def open_stream(sent: Job):
        async def answer():
            [[took, *_], *_] = await router.choose_replicas(replicas, SimpleNamespace(args=[sent]))
            router.on_request_routed(SimpleNamespace(args=[sent]), took.replica_id, None)
            attempts.append(took.replica_id.unique_id)
            if len(attempts) == 1:
                raise RuntimeError("ActorUnavailableError: the actor is unreachable")
            for event in answers:
                yield event

        return answer()

    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)
    finals: list = []

    async def main() -> None:
        loop.submit([(Request("j", CONTEXT), None)], finals.append, stream)  # type: ignore[list-item]
        await asyncio.to_thread(loop.join, 5)

    asyncio.run(main())
    assert attempts == ["a", "b"] and finals[-1].output is not None
    chain = prompt_chain(RouteRequest("default", CONTEXT + (7, 8)), 16)
    assert router._router.memory.depths(chain, 16) == {"b": 48}
    for i in range(3):  # its siblings follow it where it ran
        assert ranks(router, [running("a"), running("b")], job(f"sibling{i}", CONTEXT + (i,)))[0] == ["b"]


def test_a_job_keeps_its_sends_however_many_others_are_in_flight():
    # the replicas each job was sent to were capped at 65,536 jobs, the oldest dropped without a
    # word, where --max-pending lets a fleet hold a million: past that, the oldest job's retry
    # could go back to the replica it failed on, and its refusal or end took back nothing
    routes = Routes()
    retracted: list[str] = []
    routes.watch_retractions(lambda _, replica: retracted.append(replica))
    routes.routed("j", "a")
    for i in range(1 << 16):  # as many others in flight, each sent somewhere
        routes.routed(f"k{i}", "b")
    assert routes.tried("j") == {"a"} and len(routes) == (1 << 16) + 1
    routes.ended("j", job("j"))  # its client left before a token came: taken back where it went
    assert retracted == ["a"]
