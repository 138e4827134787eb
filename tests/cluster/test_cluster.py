"""The fleet's ingress side without Ray: the wire format, and `RemoteLoop` when a replica dies
(before or during an answer), hangs past the drain, or loses its client. Every prompt ends with
an answer or an error; none hangs."""

from __future__ import annotations

import asyncio
import os
import pickle
from collections import namedtuple
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from radixflow.cluster.remote_loop import RemoteLoop
from radixflow.cluster.wire import Job, WireEvent, decode, encode
from radixflow.generation.outputs import GenerationOutput, PromptTokenLogprobs, StreamDelta
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.samples import PromptLogprobs
from radixflow.server.events import Delta, Final, NotAccepting
from radixflow.server.metrics import REFUSED, REJECTIONS, ServerMetrics

PROMPT = (5, 6, 7)


def output(cached: int = 2) -> GenerationOutput:
    return GenerationOutput("r", PROMPT, (9,), "x", "length", cached_tokens=cached)


class Texts:
    """A stand-in tokenizer: each token's text is its id (what `token_texts` asks of a decoder)."""

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(f"<{i}>" for i in ids)

    def decode_each(self, ids, skip_special_tokens: bool = False) -> list[str]:
        return [f"<{i}>" for i in ids]


def test_prompt_logprobs_travel_as_columns_and_get_the_ingress_texts():
    scored = PromptLogprobs([1, 2], [6, 7], [-0.5, -1.0], [[6], [7]], [[-0.5], [-1.0]])
    lazy = PromptTokenLogprobs(PROMPT, scored, lambda: (_ for _ in ()).throw(AssertionError("no texts here")))
    wire = encode(Delta(0, StreamDelta((9,), "x", None, lazy)), "replica-a")
    wire = pickle.loads(pickle.dumps(wire))  # what Ray does to it
    assert wire.event.delta.prompt_logprobs is None and wire.scored == scored and wire.replica == "replica-a"
    event = decode(wire, PROMPT, 3, Texts())  # type: ignore[arg-type]
    assert event.index == 3
    lp = event.delta.prompt_logprobs
    assert lp[0] is None and lp[2].logprob == -1.0 and (lp[2].token, lp[2].text) == (7, "<7>")
    final = encode(Final(0, output()))
    assert decode(final, PROMPT, 1, None) == Final(1, output())


def stream_of(*steps):
    """An ``open_stream`` whose n-th call replays ``steps[n]``: events, or an exception to raise."""
    calls = []

    def open_stream(job: Job):
        script = steps[len(calls)]
        calls.append(job)

        async def gen():
            for step in script:
                if isinstance(step, BaseException):
                    raise step
                if step == "hang":
                    await asyncio.sleep(3600)
                yield step

        return gen()

    return open_stream, calls


async def serve(loop: RemoteLoop, n: int = 1, after=None) -> list[list]:
    """Submit ``n`` prompts and collect each one's events until its Final (``after``: then call it)."""
    events: list[list] = [[] for _ in range(n)]
    finals = asyncio.Event()

    def sink(event) -> None:
        events[event.index].append(event)
        if sum(isinstance(e, Final) for es in events for e in es) == n:
            finals.set()

    items = [(Request(f"r{i}", PROMPT), None) for i in range(n)]
    loop.submit(items, sink, stream=True)  # type: ignore[arg-type]
    if after is not None:
        after()
    await asyncio.wait_for(finals.wait(), 5)
    return events


DELTA = WireEvent(Delta(0, StreamDelta((9,), "x")))
FINAL = WireEvent(Final(0, output()), None, "replica-b")


def test_a_replica_dying_before_it_answers_is_retried_elsewhere(caplog):
    open_stream, calls = stream_of([ConnectionError("actor died")], [DELTA, FINAL])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)
    with caplog.at_level("WARNING", logger="radixflow.cluster"):
        events = asyncio.run(serve(loop))[0]
    [said] = [r.getMessage() for r in caplog.records if r.name == "radixflow.cluster"]
    assert said.startswith("radixflow: warning: the replica serving this request failed: ConnectionError")
    assert [type(e) for e in events] == [Delta, Final] and events[-1].output is not None
    assert len(calls) == 2 and loop.retried == 1
    assert loop.replicas["replica-b"].answered == 1 and loop.replicas["replica-b"].reused_tokens == 2


@pytest.mark.parametrize(
    "status, why",
    [(503, "the engine failed: RuntimeError: boom"), (503, "the server is shutting down"), (429, "queued")],
)
def test_a_replica_that_does_not_take_a_request_has_it_retried_elsewhere(status, why):
    # a replica whose engine loop died answers every job at once with a 503 until its next stats
    # report marks it dead (a draining one, or one whose queue is full, likewise): the client got
    # that answer, though another replica would have served it, as it does when the actor dies
    refused = WireEvent(Final(0, None, status, why), None, "replica-a")
    open_stream, calls = stream_of([refused], [DELTA, FINAL])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)
    events = asyncio.run(serve(loop))[0]
    assert [type(e) for e in events] == [Delta, Final] and events[-1].output is not None
    assert len(calls) == 2 and loop.retried == 1
    assert calls[0].avoid == frozenset() and calls[1].avoid == {"replica-a"}  # not back to it
    # the last attempt's refusal is the answer, as the replica gave it
    open_stream, calls = stream_of([refused], [refused])
    final = asyncio.run(serve(RemoteLoop(open_stream, None, ServerMetrics(), 8)))[0][-1]
    assert (final.status, final.error) == (status, why) and len(calls) == 2


def test_a_refused_job_is_offered_to_every_running_replica_before_it_is_refused():
    # with three replicas, two refusing (one draining, one whose loop just died), a job was
    # refused after its second try, the third replica never asked
    from radixflow.cluster.fleet_metrics import FleetFigures

    figures = FleetFigures()
    figures.update({"replica-a": None, "replica-b": None, "replica-c": None})
    refusals = [WireEvent(Final(0, None, 503, "refused"), None, name) for name in ("replica-a", "replica-b")]
    open_stream, calls = stream_of([refusals[0]], [refusals[1]], [DELTA, FINAL], [DELTA, FINAL])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)
    events = asyncio.run(serve(loop))[0]
    assert events[-1].output is not None and len(calls) == 3
    assert calls[2].avoid == {"replica-a", "replica-b"}
    # a failure (not a refusal) is still retried once, however many replicas run
    open_stream, calls = stream_of([ConnectionError("died")], [ConnectionError("died")], [DELTA, FINAL])
    final = asyncio.run(serve(RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)))[0][-1]
    assert final.status == 503 and len(calls) == 2


@pytest.mark.parametrize("status, reason", [(429, "queue_full"), (503, "not_accepting")])
def test_a_request_every_replica_refused_is_counted_as_rejected_not_failed(status, reason):
    # a fleet's /metrics counted it in radixflow_requests_total{outcome="failed"}, where one
    # server counts the same 429 or 503 in radixflow_requests_rejected_total, once per request
    metrics = ServerMetrics()
    refused = WireEvent(Final(0, None, status, "refused"), None, "replica-a")
    open_stream, calls = stream_of(*[[refused]] * 4)  # two prompts
    events = asyncio.run(serve(RemoteLoop(open_stream, None, metrics, 8), n=2))
    # the first, tried twice, refuses the second with it: never sent
    assert [es[-1].status for es in events] == [status, status] and len(calls) == 2
    sample = metrics.registry.get_sample_value
    assert sample("radixflow_requests_rejected_total", {"reason": reason}) == 1
    assert sum(sample("radixflow_requests_rejected_total", {"reason": r}) for r in REJECTIONS) == 1
    for outcome in ("failed", "finished", "aborted"):
        assert sample("radixflow_requests_total", {"outcome": outcome}) == 0
    # refused once, then answered: a finished request, no rejection
    metrics = ServerMetrics()
    open_stream, _ = stream_of([refused], [DELTA, FINAL])
    asyncio.run(serve(RemoteLoop(open_stream, None, metrics, 8)))
    sample = metrics.registry.get_sample_value
    assert sample("radixflow_requests_rejected_total", {"reason": reason}) == 0
    assert sample("radixflow_requests_total", {"outcome": "finished"}) == 1


@pytest.mark.parametrize(("status", "outcome"), [(400, REFUSED), (500, "failed")])
def test_a_request_its_replica_answered_with_an_error_is_counted_as_one_server_counts_it(status, outcome):
    # a replica's 400 (its engine's checks refused the request) was counted as failed at the
    # ingress, where one server counts the same answer as refused: the ingress passed no status
    metrics = ServerMetrics()
    answer = WireEvent(Final(0, None, status, "why"), None, "replica-a")
    open_stream, calls = stream_of([answer])
    events = asyncio.run(serve(RemoteLoop(open_stream, None, metrics, 8)))[0]
    assert events[-1].status == status and len(calls) == 1
    sample = metrics.registry.get_sample_value
    assert sample("radixflow_requests_total", {"outcome": outcome}) == 1
    assert sum(sample("radixflow_requests_total", {"outcome": o}) for o in (REFUSED, "failed")) == 1


def scripted(scripts: dict[str, list]):
    """An ``open_stream`` playing each job's script by its request id, one per attempt: events, an
    `asyncio.Event` to wait for (its job runs on meanwhile), an exception to raise; and the ids of
    the jobs whose streams were left before their end (cancelled)."""
    left: list[str] = []

    def open_stream(job: Job):
        script = scripts[job.id].pop(0)

        async def gen():
            answered = False
            try:
                for step in script:
                    if isinstance(step, asyncio.Event):
                        await step.wait()
                    elif isinstance(step, BaseException):
                        raise step
                    else:
                        answered = isinstance(step.event, Final)
                        yield step
            except (asyncio.CancelledError, GeneratorExit):
                if not answered:
                    left.append(job.id)
                raise

        return gen()

    return open_stream, left


@pytest.mark.parametrize("status", [429, 503])
def test_a_prompt_every_replica_refused_refuses_its_siblings_that_sent_nothing(status):
    # two prompts: the first ran on a replica, the second was refused by every replica. The
    # request's answer is that refusal (a non-streamed response is its first error), yet it came
    # only once the first prompt had generated to its end, which ran on for nobody, counted as a
    # finished request beside the rejection
    async def main() -> tuple[list[list], list[str], ServerMetrics]:
        never = asyncio.Event()
        refused = WireEvent(Final(0, None, status, "refused"), None, "replica-a")
        open_stream, left = scripted({"r0": [[never, FINAL]], "r1": [[refused], [refused]]})
        metrics = ServerMetrics()
        return await serve(RemoteLoop(open_stream, None, metrics, 8), n=2), left, metrics

    events, left, metrics = asyncio.run(main())
    assert [(es[-1].index, es[-1].status, es[-1].error) for es in events] == [
        (0, status, "refused"),
        (1, status, "refused"),
    ]
    assert left == ["r0"]  # its job cancelled on its replica
    sample = metrics.registry.get_sample_value
    assert sum(sample("radixflow_requests_rejected_total", {"reason": r}) for r in REJECTIONS) == 1
    for outcome in ("failed", "finished", "aborted"):
        assert sample("radixflow_requests_total", {"outcome": outcome}) == 0


def test_a_prompt_every_replica_refused_leaves_a_sibling_already_streaming_to_its_answer():
    # a streamed sibling's tokens are the client's already: it runs to its answer, which is counted
    async def main() -> tuple[list[list], list[str], ServerMetrics]:
        refusal_out = asyncio.Event()
        refused = WireEvent(Final(0, None, 429, "refused"), None, "replica-a")
        scripts = {"r0": [[DELTA, refusal_out, FINAL]], "r1": [[refused], [refused]]}
        open_stream, left = scripted(scripts)
        metrics = ServerMetrics()
        loop = RemoteLoop(open_stream, None, metrics, 8)
        task = asyncio.ensure_future(serve(loop, n=2))
        while len(loop._flights) > 1:  # r1's refusal ends its flight
            await asyncio.sleep(0)
        refusal_out.set()
        return await task, left, metrics

    events, left, metrics = asyncio.run(main())
    assert [type(e) for e in events[0]] == [Delta, Final] and events[0][-1].output is not None
    assert events[1][-1].status == 429 and left == []
    sample = metrics.registry.get_sample_value
    assert sample("radixflow_requests_rejected_total", {"reason": "queue_full"}) == 1
    assert sample("radixflow_requests_total", {"outcome": "finished"}) == 1


def test_a_replica_failing_a_request_it_took_is_not_retried():
    # a 503 after tokens were streamed (the replica's drain ran out), or a 500 (its round failed),
    # is the request's own answer
    drained = WireEvent(Final(0, None, 503, "the server shut down before this request finished"))
    failed = WireEvent(Final(0, None, 500, "worker call failed: RuntimeError: device lost"))
    for script in ([DELTA, drained], [failed]):
        open_stream, calls = stream_of(script, [FINAL])
        final = asyncio.run(serve(RemoteLoop(open_stream, None, ServerMetrics(), 8)))[0][-1]
        assert final.status == script[-1].event.status and len(calls) == 1


def test_a_replica_dying_mid_answer_ends_the_prompt_with_a_503():
    open_stream, calls = stream_of([DELTA, ConnectionError("actor died")], [FINAL])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)
    events = asyncio.run(serve(loop))[0]
    final = events[-1]
    assert isinstance(final, Final) and final.status == 503 and "actor died" in final.error
    assert len(calls) == 1  # tokens were streamed already: not retried (the client saw them)


# what Ray raises at the ingress when a replica is killed mid-answer (recorded from Ray 2.60)
ACTOR_DIED = (
    "The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: ServeReplica:radixflow:radixflow-engine\n"
    "\tactor_id: 9808f6365870b22b6166c00701000000\n"
    "\tpid: 19275\n"
    "\tname: SERVE_REPLICA::radixflow#radixflow-engine#c6neommp\n"
    "\tnamespace: serve\n"
    "\tip: 192.0.2.2\n"
    "The actor is dead because it was killed by `ray.kill`."
)


class ActorDiedError(Exception):
    pass


class TaskError(Exception):
    """Ray's error for a replica's own exception: its traceback as text, the exception as ``cause``."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(
            "\x1b[36mray::ServeReplica:radixflow:radixflow-engine.generate()\x1b[39m (pid=5, ip=192.0.2.2)\n"
            '  File "radixflow/cluster/replica.py", line 97, in generate\n'
            f"{type(cause).__name__}: {cause}"
        )
        self.cause = cause


@pytest.mark.parametrize(
    "error, said",
    [
        (
            ActorDiedError(ACTOR_DIED),
            "ActorDiedError: The actor died unexpectedly before finishing this task. "
            "The actor is dead because it was killed by `ray.kill`.",
        ),
        (TaskError(RuntimeError("device lost")), "RuntimeError: device lost"),
    ],
)
def test_a_replica_failure_is_one_line_not_rays_report(error, said):
    # the 503 (and the log) carried Ray's whole report: the dead actor's id, pid, name and
    # namespace on tab-indented lines, or the replica's traceback
    open_stream, _ = stream_of([DELTA, error])
    final = asyncio.run(serve(RemoteLoop(open_stream, None, ServerMetrics(), 8)))[0][-1]
    assert final.status == 503
    assert final.error == f"the replica serving this request failed: {said}"


def test_a_retry_that_fails_too_is_an_error_not_a_hang():
    open_stream, _ = stream_of([RuntimeError("gone")], [RuntimeError("gone again")])
    events = asyncio.run(serve(RemoteLoop(open_stream, None, ServerMetrics(), 8)))[0]
    assert events[-1].status == 503 and "gone again" in events[-1].error


def test_a_stream_that_ends_without_an_answer_is_an_error():
    open_stream, _ = stream_of([DELTA])
    events = asyncio.run(serve(RemoteLoop(open_stream, None, ServerMetrics(), 8)))[0]
    assert events[-1].status == 503 and "without an answer" in events[-1].error


def test_the_drain_answers_hanging_requests_and_join_returns():
    open_stream, _ = stream_of(["hang"], ["hang"])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)

    async def main() -> list[list]:
        events = await serve(loop, n=2, after=lambda: loop.shutdown(0.05))
        await asyncio.sleep(0.01)  # the cancelled jobs unwind
        return events

    events = asyncio.run(main())
    assert all(es[-1].status == 503 and "shut down" in es[-1].error for es in events)
    loop.join(1.0)
    assert loop._idle.is_set() and not loop.accepting
    with pytest.raises(NotAccepting):
        loop.submit([(Request("late", PROMPT), None)], lambda e: None, False)  # type: ignore[list-item]


def test_an_aborted_request_is_cancelled_and_not_answered():
    open_stream, _ = stream_of(["hang"])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)
    got: list = []

    async def main() -> Request:
        req = Request("gone", PROMPT)
        loop.submit([(req, None)], got.append, False)  # type: ignore[list-item]
        await asyncio.sleep(0.01)
        loop.abort(["gone"])
        await asyncio.sleep(0.01)
        return req

    req = asyncio.run(main())
    assert got == [] and req.status is RequestStatus.ABORTED and loop._idle.is_set()


@pytest.mark.parametrize("end", ["abort", "abandon"])
def test_a_job_ended_before_its_relay_started_leaves_the_queue(end):
    """A relay cancelled before its first step (an abort, or the 503s of a fleet gone down, that
    the event loop runs before the new jobs' tasks) never ran its own clean-up: the prompt stayed
    counted in the bounded queue for good (every later request refused as the queue filled) and
    `join` never returned."""
    open_stream, _ = stream_of(["hang"])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)
    got: list = []

    async def main() -> Request:
        req = Request("gone", PROMPT)
        loop.submit([(req, None)], got.append, False)  # type: ignore[list-item]
        if end == "abort":
            loop.abort(["gone"])
        else:
            loop.abandon("the fleet serves nothing")
        await asyncio.sleep(0.01)
        return req

    req = asyncio.run(main())
    assert not loop._flights and loop.join(0)
    if end == "abort":
        assert got == [] and req.status is RequestStatus.ABORTED
    else:
        assert [f.status for f in got] == [503] and req.status is RequestStatus.FAILED


def test_queue_full_past_max_pending():
    from radixflow.server.events import QueueFull

    open_stream, _ = stream_of(["hang"], ["hang"])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 1)

    async def main() -> None:
        loop.submit([(Request("a", PROMPT), None)], lambda e: None, False)  # type: ignore[list-item]
        with pytest.raises(QueueFull):
            loop.submit([(Request("b", PROMPT), None)], lambda e: None, False)  # type: ignore[list-item]
        loop.shutdown(0.0)
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_prompt_not_streamed_still_has_its_time_to_first_token_counted():
    # the ingress took a first token only from a streamed delta: /metrics counted no time to
    # first token for any non-streamed prompt (one engine counts every prompt's)
    metrics = ServerMetrics()
    answer = WireEvent(Final(0, output()), None, "replica-a", decode_s=3600.0)
    open_stream, _ = stream_of([answer], [DELTA, answer])
    loop = RemoteLoop(open_stream, None, metrics, 8)
    asyncio.run(serve(loop))
    ttft = metrics.registry.get_sample_value
    assert ttft("radixflow_time_to_first_token_seconds_count") == 1
    assert ttft("radixflow_time_to_first_token_seconds_sum") == 0.0  # its answer came decode_s after it
    asyncio.run(serve(loop))  # streamed: counted at its first delta, once
    assert ttft("radixflow_time_to_first_token_seconds_count") == 2


def test_the_deployment_checks_replica_health_often(monkeypatch):
    # Serve's default (every 10 s, three failures in a row) left a replica whose engine died in
    # rotation for half a minute; now it is checked every HEALTH_CHECK_PERIOD_S
    serve = pytest.importorskip("ray.serve")
    from radixflow.cluster import launch
    from radixflow.options import EngineOptions
    from radixflow.server.state import ServerConfig

    seen: dict = {}

    class Deployment:
        def bind(self, *args):
            return args

    def deployment(cls, **kwargs):
        seen.update(kwargs)
        return Deployment()

    monkeypatch.setattr(serve, "deployment", deployment)
    monkeypatch.setattr(serve, "run", lambda app, **_: app)
    spec = launch.FleetSpec(2, "pow2")
    launch.deploy(EngineOptions.from_mapping({"model": "qwen3_5-tiny"}), spec, ServerConfig())
    assert seen["health_check_period_s"] == launch.HEALTH_CHECK_PERIOD_S <= 2.0
    assert seen["health_check_timeout_s"] == launch.HEALTH_CHECK_TIMEOUT_S


def test_local_replicas_past_this_machines_cpus_are_warned_of():
    # a local Ray is started with the CPUs the replicas take, so it placed four one-thread replicas
    # on two cores without a word, each forward pass then sharing a core
    from radixflow.cluster import launch

    said = launch.local_contention(launch.FleetSpec(4, "pow2"), cpus=2)
    assert said is not None and said.startswith("--replicas 4: the replicas run 4 torch threads (1 each)")
    assert "this machine's 2 CPUs" in said and "\n" not in said
    assert launch.local_contention(launch.FleetSpec(2, "pow2", None, 2.0), cpus=2) is not None
    assert launch.local_contention(launch.FleetSpec(2, "pow2"), cpus=2) is None  # one core each
    cluster = launch.FleetSpec(4, "pow2", "10.0.0.1:6379")
    assert launch.local_contention(cluster, cpus=2) is None  # the cluster's CPUs: cpu_shortfall's


def test_the_router_hands_the_replicas_engine_reports_to_the_ingress():
    # Serve hands the router every replica's routing stats; the engine figures in them are what
    # the ingress's /metrics shows (it has no engine of its own)
    pytest.importorskip("ray.serve")
    from types import SimpleNamespace

    from radixflow.cluster.ray_router import engine_reports

    def running(name: str, stats: dict) -> SimpleNamespace:
        return SimpleNamespace(replica_id=SimpleNamespace(unique_id=name), routing_stats=stats)

    report = {"radixflow_rounds": [("radixflow_rounds_total", {}, 3.0)]}
    got = engine_reports([running("a", {"queue": 1, "engine": report}), running("b", {})])
    assert got == {"a": report, "b": None}  # b has not reported yet


def test_the_ray_router_never_offers_a_replica_whose_loop_died():
    # neither as its choice nor as the fallback Serve tries when the choice is full
    pytest.importorskip("ray.serve")
    from collections import namedtuple
    from types import SimpleNamespace

    from radixflow.cluster.ray_router import FleetRequestRouter
    from radixflow.generation.params import SamplingParams

    replica_id = namedtuple("ReplicaID", "unique_id")

    def running(name: str, alive: bool, queue: int) -> SimpleNamespace:
        stats = {"alive": alive, "queue": queue, "block_size": 16, "checkpoints": []}
        return SimpleNamespace(replica_id=replica_id(name), routing_stats=stats)

    router = FleetRequestRouter.__new__(FleetRequestRouter)  # Serve's constructor needs a cluster
    router._replica_queue_len_cache = {}
    router.initialize_state("pow2")
    replicas = [running("dead", False, 0), running("b", True, 3), running("c", True, 4)]
    job = Job("j", PROMPT, "default", SamplingParams(), False)
    for _ in range(20):
        ranked = asyncio.run(router.choose_replicas(replicas, SimpleNamespace(args=[job])))
        names = [r.replica_id.unique_id for rank in ranked for r in rank]
        assert "dead" not in names and sorted(names) == ["b", "c"]


class _Handle:
    """Serve's handle to the replicas, as `fleet_server` uses it: ``describe`` answers ``info``."""

    def __init__(self, info) -> None:
        self.describe = SimpleNamespace(remote=lambda: SimpleNamespace(result=lambda: info))

    def options(self, **_):
        return self


def test_a_fleet_whose_tokenizer_the_ingress_cannot_read_is_one_line_not_a_500_per_request(tmp_path):
    # the ingress tokenizes every request (token-id prompts too: stop strings, bad words): without
    # the model's tokenizer.json it answered each one with "internal server error: AttributeError"
    from radixflow.cache.ledger import ByteLedger
    from radixflow.cache.pool import IdPool
    from radixflow.cluster.fleet_metrics import FleetFigures
    from radixflow.cluster.launch import fleet_server
    from radixflow.cluster.replica import ReplicaInfo
    from radixflow.engine.runner import ModelInfo
    from radixflow.problems import ProblemError
    from radixflow.scheduler.scheduler import SchedulerConfig
    from radixflow.server.state import ServerConfig

    scheduler = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=64)
    ledger = ByteLedger(IdPool(64, "kv"), IdPool(8, "state"), 1024, 4096, None)
    info = ReplicaInfo("m", str(tmp_path), ModelInfo("m", False, 512, 4096), scheduler, ledger)
    with pytest.raises(ProblemError) as e:
        fleet_server(_Handle(info), ServerConfig(), "127.0.0.1", 0, "warning", FleetFigures())
    assert e.value.problem.param == "model" and "tokenizer.json" in str(e.value)
    assert "\n" not in str(e.value)
    (tmp_path / "tokenizer.json").write_text("{not json")  # there, and broken: the same one line
    with pytest.raises(ProblemError) as e:
        fleet_server(_Handle(info), ServerConfig(), "127.0.0.1", 0, "warning", FleetFigures())
    assert e.value.problem.param == "model" and "tokenizer.json" in str(e.value)


def test_the_ray_router_passes_over_the_replicas_that_refused_the_job():
    # a job retried after a replica refused it (its loop died before its stats said so) must not
    # go back there: that replica answers at once, so its queue looks the shortest
    pytest.importorskip("ray.serve")
    from collections import namedtuple

    from radixflow.cluster.ray_router import FleetRequestRouter
    from radixflow.generation.params import SamplingParams

    replica_id = namedtuple("ReplicaID", "unique_id")

    def running(name: str, queue: int) -> SimpleNamespace:
        stats = {"alive": True, "queue": queue, "block_size": 16, "checkpoints": []}
        return SimpleNamespace(replica_id=replica_id(name), routing_stats=stats)

    router = FleetRequestRouter.__new__(FleetRequestRouter)  # Serve's constructor needs a cluster
    router._replica_queue_len_cache = {}
    router.initialize_state("pow2")
    replicas = [running("a", 0), running("b", 3), running("c", 4)]
    job = Job("j", PROMPT, "default", SamplingParams(), False, avoid=frozenset({"a"}))
    for _ in range(20):
        ranked = asyncio.run(router.choose_replicas(replicas, SimpleNamespace(args=[job])))
        names = [r.replica_id.unique_id for rank in ranked for r in rank]
        assert "a" not in names and sorted(names) == ["b", "c"]
    everyone = Job("j", PROMPT, "default", SamplingParams(), False, avoid=frozenset({"a", "b", "c"}))
    ranked = asyncio.run(router.choose_replicas(replicas, SimpleNamespace(args=[everyone])))
    assert sorted(r.replica_id.unique_id for rank in ranked for r in rank) == ["a", "b", "c"]


def test_a_refused_job_goes_back_to_a_live_replica_not_to_a_dead_one():
    # a full replica (429) refused the job; the only other one's loop had died: the retry went to
    # the dead one ("others left"), whose 503 naming its failure was the client's answer, not
    # another try where the job can run (or that replica's 429, which says to come back)
    pytest.importorskip("ray.serve")
    from collections import namedtuple

    from radixflow.cluster.ray_router import FleetRequestRouter
    from radixflow.generation.params import SamplingParams

    replica_id = namedtuple("ReplicaID", "unique_id")

    def running(name: str, alive: bool) -> SimpleNamespace:
        stats = {"alive": alive, "queue": 0, "block_size": 16, "checkpoints": []}
        return SimpleNamespace(replica_id=replica_id(name), routing_stats=stats)

    router = FleetRequestRouter.__new__(FleetRequestRouter)  # Serve's constructor needs a cluster
    router._replica_queue_len_cache = {}
    router.initialize_state("checkpoint")
    replicas = [running("full", True), running("dead", False)]
    job = Job("j", PROMPT, "default", SamplingParams(), False, avoid=frozenset({"full"}))
    ranked = asyncio.run(router.choose_replicas(replicas, SimpleNamespace(args=[job])))
    assert [[r.replica_id.unique_id for r in rank] for rank in ranked] == [["full"]]


def test_the_ingress_says_it_cannot_serve_while_every_replicas_engine_loop_is_dead():
    # each dead replica answers every job with a 503 until Serve replaces it (seconds; forever
    # when a new one dies again), while the ingress's /health said "ok": one server whose
    # engine died says so (a 503 naming the failure) and refuses new requests up front
    from radixflow.cluster.fleet_metrics import FleetFigures

    figures = FleetFigures()
    open_stream, _ = stream_of()
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)
    assert loop.accepting and loop.alive  # nothing reported yet: starting
    figures.update({"a": None, "b": None}, dead={"a"})
    assert loop.accepting and loop.failure is None  # b still serves
    figures.update({"a": None, "b": None}, dead={"a", "b"})
    assert not loop.accepting and not loop.alive
    # a replica whose engine is stuck reports itself dead too (`EngineReplica.record_routing_stats`)
    assert loop.failure == (
        "the engine loop of every replica (2) has failed or is stuck; Ray Serve is replacing them"
    )
    with pytest.raises(NotAccepting, match="every replica"):
        loop.submit([(Request("r", PROMPT), None)], lambda e: None, False)  # type: ignore[list-item]
    figures.update({"c": None}, dead=set())  # replaced: the new one serves
    assert loop.accepting and loop.failure is None


def test_requests_waiting_for_a_replica_get_a_503_once_none_is_left_not_a_hang():
    # every replica died and none Serve started since is up: a job waits in Serve's queue for a
    # replica (here: a stream that never answers) until one runs, forever when each fails to start
    from radixflow.cluster.fleet_metrics import FleetFigures

    figures = FleetFigures()
    figures.update({"a": None})
    open_stream, _ = stream_of(["hang"])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8, fleet=figures)
    events = asyncio.run(serve(loop, after=lambda: figures.update({})))[0]
    assert events[-1].status == 503 and events[-1].error.startswith("no replica is running")
    with pytest.raises(NotAccepting, match="no replica is running"):
        loop.submit([(Request("late", PROMPT), None)], lambda e: None, False)  # type: ignore[list-item]
    figures.update({"b": None})  # a replica runs again: requests are taken again
    assert loop.accepting


def test_the_ray_router_hands_the_ingress_the_replicas_reported_dead():
    pytest.importorskip("ray.serve")
    from radixflow.cluster.ray_router import dead_replicas

    def running(name: str, stats: dict | None) -> SimpleNamespace:
        return SimpleNamespace(replica_id=SimpleNamespace(unique_id=name), routing_stats=stats)

    fleet = [running("a", {"alive": False}), running("b", {"alive": True}), running("c", None)]
    assert dead_replicas(fleet) == {"a"}  # c has not reported yet: starting, so alive


class _Response:
    """Serve's streaming response to one job, as `fleet_server` gets it: iterated, and
    ``cancel()``-ed to stop the job on its replica (cancelling the task iterating it does not)."""

    def __init__(self, *events) -> None:
        self.events, self.cancelled = list(events), False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.events:
            raise StopAsyncIteration
        step = self.events.pop(0)
        if step == "hang":
            await asyncio.sleep(3600)
        if isinstance(step, BaseException):
            raise step
        return step

    def cancel(self) -> None:
        self.cancelled = True


def test_a_client_leaving_a_streamed_request_cancels_its_job_on_the_replica():
    # the ingress cancelled its own task only: the replica generated on to max_tokens for nobody,
    # holding a slot of its queue (seen on Ray: its queue stayed 1, rounds kept counting)
    from radixflow.cluster.launch import job_streams

    left, finished = _Response(DELTA, "hang"), _Response(DELTA, FINAL)
    responses = [left, finished]
    streaming = SimpleNamespace(generate=SimpleNamespace(remote=lambda job: responses.pop(0)))
    loop = RemoteLoop(job_streams(streaming), None, ServerMetrics(), 8)

    async def main() -> None:
        got = asyncio.Event()
        loop.submit([(Request("gone", PROMPT), None)], lambda e: got.set(), True)  # type: ignore[list-item]
        await asyncio.wait_for(got.wait(), 5)  # its first delta: the job runs on the replica
        loop.abort(["gone"])
        await asyncio.sleep(0.01)
        await serve(loop)  # a request answered in full is not cancelled

    asyncio.run(main())
    assert left.cancelled and not finished.cancelled


class _Unreachable(_Response):
    """A response whose cancel fails as Serve's does when its assignment failed (it re-raises that)."""

    def cancel(self) -> None:
        super().cancel()
        raise ConnectionError("actor unavailable")


@pytest.mark.parametrize("response", [_Response, _Unreachable])
def test_a_job_whose_replica_failed_mid_answer_is_cancelled_there(response):
    # a stream that failed mid-answer (Ray's ActorUnavailableError: the actor unreachable, not
    # dead) left the job running on its replica: the client had its 503, and the replica generated
    # on to max_tokens for nobody, holding its queue's place and its cache. A dead one ignores it
    from radixflow.cluster.launch import job_streams

    died = response(DELTA, ConnectionError("actor unavailable"))
    streaming = SimpleNamespace(generate=SimpleNamespace(remote=lambda job: died))
    final = asyncio.run(serve(RemoteLoop(job_streams(streaming), None, ServerMetrics(), 8)))[0][-1]
    assert final.status == 503 and "actor unavailable" in final.error and died.cancelled
    # before it sent anything: cancelled there too, then retried on another replica
    responses = [response(ConnectionError("actor unavailable")), _Response(DELTA, FINAL)]
    first = responses[0]
    streaming = SimpleNamespace(generate=SimpleNamespace(remote=lambda job: responses.pop(0)))
    final = asyncio.run(serve(RemoteLoop(job_streams(streaming), None, ServerMetrics(), 8)))[0][-1]
    assert final.output is not None and first.cancelled


# what Serve says of a deployment whose replica's constructor raised (recorded from Ray 2.60)
FAILED_DEPLOYMENT = (
    "The deployment failed to start 3 times in a row. This may be due to a problem with its "
    "constructor or initial health check failing. See controller logs for details. Error:\n"
    "\x1b[36mray::ServeReplica:radixflow:radixflow-engine.initialize_and_get_metadata()\x1b[39m "
    "(pid=10717, ip=192.0.2.2)\n"
    '  File "ray/serve/_private/replica.py", line 1928, in initialize\n'
    "    raise RuntimeError(traceback.format_exc()) from None\n"
    "RuntimeError: Traceback (most recent call last):\n"
    '  File "radixflow/generation/setup.py", line 68, in load_model\n'
    "    plan = plan_engine(options)\n"
    "radixflow.problems.ProblemError: model: unknown torch model '/gone/model' (zoo names: llama-tiny)"
)


@pytest.mark.parametrize("gpus", [0.0, 1.0])
def test_each_replica_asks_ray_for_its_cpus_and_gpus(monkeypatch, gpus):
    # the GPUs were never asked for: on CUDA every replica landed on the one GPU all of them see
    serve = pytest.importorskip("ray.serve")
    from radixflow.cluster import launch
    from radixflow.options import EngineOptions
    from radixflow.server.state import ServerConfig

    asked = {}

    def deployment(cls, **kwargs):
        asked.update(kwargs["ray_actor_options"])
        raise RuntimeError("stop here")

    monkeypatch.setattr(serve, "deployment", deployment)
    options = EngineOptions.from_mapping({"model": "qwen3_5-tiny"})
    with pytest.raises(RuntimeError, match="stop here"):
        launch.deploy(options, launch.FleetSpec(2, "pow2", None, 2.0, gpus), ServerConfig())
    assert asked == {"num_cpus": 2.0, "num_gpus": gpus}


def test_a_replica_that_fails_to_start_is_one_line_naming_its_error(monkeypatch):
    # serve.run said only "Deploying application radixflow failed: Failed to update the
    # deployments ['radixflow-engine']." (a RuntimeError: a traceback at the command line), the
    # replica's own error in Serve's status, unread
    serve = pytest.importorskip("ray.serve")
    from radixflow.cluster import launch
    from radixflow.options import EngineOptions
    from radixflow.server.state import ServerConfig

    def run(app, **_):
        raise RuntimeError("Deploying application radixflow failed: Failed to update the deployments")

    deployment = SimpleNamespace(message=FAILED_DEPLOYMENT)
    app = SimpleNamespace(message="Failed", deployments={launch.DEPLOYMENT: deployment})
    monkeypatch.setattr(serve, "run", run)
    monkeypatch.setattr(serve, "status", lambda: SimpleNamespace(applications={launch.APP: app}))
    options = EngineOptions.from_mapping({"model": "qwen3_5-tiny"})
    with pytest.raises(launch.ReplicaStartError) as e:
        launch.deploy(options, launch.FleetSpec(2, "pow2"), ServerConfig())
    assert str(e.value) == (
        "a replica failed to start: radixflow.problems.ProblemError: model: unknown torch model "
        "'/gone/model' (zoo names: llama-tiny)"
    )


@pytest.mark.parametrize("address", [None, "ray://head:10001"])
def test_a_fleet_on_a_cluster_it_joined_removes_only_its_own_application(monkeypatch, address):
    # serve.shutdown() deletes every application on the cluster: `serve --ray-address` took the
    # cluster's other Serve applications down with it when it stopped. On a local instance, which
    # ray.shutdown() ends anyway, its controller's own shutdown printed Ray's noise on every stop
    # ("Task ServeController.graceful_shutdown failed ... killed by `ray.kill`", and on a busy
    # machine "Controller failed to shut down within 30.0s")
    serve = pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    calls: list[str] = []
    monkeypatch.setattr(ray, "init", lambda **_: calls.append("init"))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("ray.shutdown"))
    monkeypatch.setattr(serve, "start", lambda **_: calls.append("start"))
    monkeypatch.setattr(serve, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(serve, "delete", lambda name, **_: calls.append(f"delete {name}"))
    monkeypatch.setattr(serve, "status", lambda: SimpleNamespace(applications={}))
    monkeypatch.setattr(launch, "unreachable", lambda address: None)  # "head" is no host here
    with launch.ray_serve(launch.FleetSpec(2, "pow2", address)):
        pass
    assert calls == ["init", "start", "delete radixflow", "ray.shutdown"]


@pytest.mark.parametrize("address", [None, "ray://head:10001"])
def test_replicas_slow_to_stop_are_one_line_not_a_traceback_past_the_drain(monkeypatch, caplog, address):
    # Serve waits 60 s for the application to go, then raises: a replica stuck in a round drains
    # for --drain-timeout + 5 s
    serve = pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    calls: list[str] = []

    def slow(name: str, **_) -> None:
        raise TimeoutError(f"Some of these applications weren't deleted after 60s: [{name!r}]")

    monkeypatch.setattr(ray, "init", lambda **_: None)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("ray.shutdown"))
    monkeypatch.setattr(serve, "start", lambda **_: None)
    monkeypatch.setattr(serve, "delete", slow)
    monkeypatch.setattr(serve, "status", lambda: SimpleNamespace(applications={}))
    monkeypatch.setattr(launch, "unreachable", lambda address: None)
    stopping = launch.ray_serve(launch.FleetSpec(2, "pow2", address))
    with caplog.at_level("WARNING", "radixflow.cluster"), stopping:
        pass
    assert calls == ["ray.shutdown"]
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith("radixflow: warning: ") and "weren't deleted after 60s" in said


def test_a_fleet_ray_address_nothing_listens_at_is_refused_at_once(monkeypatch):
    # ray.init retried an address with nothing listening for minutes, a warning every few seconds
    # and never an error: `serve --replicas 2 --ray-address 127.0.0.1:1` looked hung
    import socket

    pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init reached"))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        refused = pytest.raises(launch.RayStartError, match=rf"^--ray-address {address}: Ray did not start: ")
        with refused, launch.ray_serve(launch.FleetSpec(2, "pow2", address)):
            pytest.fail("a fleet started")


def _answering(reply: bytes):
    """A server on a free local port that sends ``reply`` to each connection (as Ray's GCS sends its
    HTTP/2 settings at once) or, given b"", answers an HTTP/1 request as a web server does; its
    address, while the context lasts."""
    import contextlib
    import http.server
    import socketserver
    import threading

    class Settings(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(reply)

    handler = Settings if reply else http.server.SimpleHTTPRequestHandler

    @contextlib.contextmanager
    def running():
        with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                yield f"127.0.0.1:{server.server_address[1]}"
            finally:
                server.shutdown()

    return running()


def test_a_fleet_ray_address_of_a_web_server_is_refused_at_once(monkeypatch):
    # an address where a web server listens (Ray's dashboard, port 8265: the address Ray's job
    # tools take) passed the connection check; ray.init then retried it for minutes, a warning
    # every few seconds and never an error
    pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch
    from radixflow.ray_start import unreachable

    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init reached"))
    with _answering(b"") as address:
        said = rf"^--ray-address {address}: Ray did not start: {address} answers HTTP"
        refused = pytest.raises(launch.RayStartError, match=said)
        with refused, launch.ray_serve(launch.FleetSpec(2, "pow2", address)):
            pytest.fail("a fleet started")
    # Ray's own ports answer in HTTP/2 (gRPC): they are left to ray.init
    settings = b"\x00\x00\x18\x04\x00\x00\x00\x00\x00"
    with _answering(settings) as address:
        assert unreachable(address) is None
        assert unreachable(f"ray://{address}") is None


@pytest.mark.parametrize("address", ["http://127.0.0.1:8265", "https://head:8265/"])
def test_a_fleet_ray_address_of_the_dashboard_url_is_refused_naming_it(monkeypatch, address):
    # the address Ray's job tools take (RAY_ADDRESS=http://head:8265) was read as host
    # "http://127.0.0.1": refused as "cannot connect ... (Name or service not known)", or, with a
    # path, handed to ray.init
    pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init reached"))
    with pytest.raises(launch.RayStartError) as e, launch.ray_serve(launch.FleetSpec(2, "pow2", address)):
        pytest.fail("a fleet started")
    said = f"--ray-address {address}: Ray did not start: an http address is Ray's dashboard"
    assert str(e.value).startswith(said)


@pytest.mark.parametrize("address", [":6379", "ray://", "ray://:10001"])
def test_a_fleet_ray_address_naming_no_host_is_one_line(monkeypatch, address):
    # ":6379" reached ray.init, which logged its own traceback ("Failed to convert :6379 to
    # host:port") above the one line; "ray://" waited out Ray Client's 30 s connection timeout
    pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init reached"))
    with pytest.raises(launch.RayStartError) as e, launch.ray_serve(launch.FleetSpec(2, "pow2", address)):
        pytest.fail("a fleet started")
    assert str(e.value).startswith(f"--ray-address {address}: Ray did not start: it names no host: give ")


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("127.0.0.1:99999", "its port must be at most 65535, got 99999"),
        ("ray://127.0.0.1:99999", "its port must be at most 65535, got 99999"),
        ("127.0.0.1:0", "its port must be at least 1, got 0"),
        ("127.0.0.1:-1", "its port must be at least 1, got -1"),
        ("head:abc", "its port must be an integer, got 'abc'"),
    ],
)
def test_a_fleet_ray_address_with_a_bad_port_says_so_as_every_door_does(monkeypatch, address, said):
    # 99999 and 0 were "cannot connect to 127.0.0.1:99999 (Connection refused)", as if nothing
    # listened there; -1 reached ray.init, which retried it for minutes, a warning every few
    # seconds; "abc" reached it too, which named its own rewrite of the address
    pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init reached"))
    with pytest.raises(launch.RayStartError) as e, launch.ray_serve(launch.FleetSpec(2, "pow2", address)):
        pytest.fail("a fleet started")
    assert str(e.value) == f"--ray-address {address}: Ray did not start: {said}"


@pytest.mark.parametrize(
    "address", ["auto", "head:6379", "ray://head", "ray://[::1]", "[::1]:6379", "ray://h:10001"]
)
def test_a_ray_address_with_a_good_port_or_none_passes_the_port_check(address):
    from radixflow.ray_start import port_problem

    assert port_problem(address) is None


def test_a_ray_client_address_without_a_port_is_checked_at_ray_clients_port(monkeypatch):
    # "ray://head" is Ray Client's port 10001 there; with nothing listening it waited out Ray
    # Client's 30 s connection timeout, a warning and then the one line
    import socket

    from radixflow import ray_start

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused
        port = closed.getsockname()[1]
        monkeypatch.setattr(ray_start, "RAY_CLIENT_PORT", port)
        for host in ("127.0.0.1", "[::1]"):
            why = ray_start.unreachable(f"ray://{host}")
            assert why is not None and why.startswith(f"cannot connect to {host}:{port} ")


def test_a_fleet_on_a_cluster_already_serving_one_is_refused_and_leaves_it_running(monkeypatch):
    # serve.run under the same application name replaced the running fleet's replicas (perhaps
    # of another model, behind an ingress with the first model's tokenizer); its exit then
    # deleted the application the other ingress still routed to
    serve = pytest.importorskip("ray.serve")
    import ray

    from radixflow.cluster import launch

    calls: list[str] = []
    monkeypatch.setattr(ray, "init", lambda **_: calls.append("init"))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("ray.shutdown"))
    monkeypatch.setattr(serve, "start", lambda **_: calls.append("start"))
    monkeypatch.setattr(serve, "delete", lambda name, **_: calls.append(f"delete {name}"))
    running = SimpleNamespace(applications={launch.APP: SimpleNamespace()})
    monkeypatch.setattr(serve, "status", lambda: running)
    monkeypatch.setattr(launch, "unreachable", lambda address: None)
    with pytest.raises(launch.RayStartError) as e, launch.ray_serve(launch.FleetSpec(2, "pow2", "auto")):
        pytest.fail("deployed over the running fleet")
    assert str(e.value) == (
        "--ray-address auto: the cluster already runs a Serve application named 'radixflow' "
        "(another radixflow serve?): stop that one first, or delete it (ray.serve.delete('radixflow'))"
    )
    assert calls == ["init", "start", "ray.shutdown"]


_ReplicaID = namedtuple("ReplicaID", "unique_id")  # what a request router reads of Serve's


def _running(name: str) -> SimpleNamespace:
    """A live replica as Serve shows it to a request router: its id and routing stats."""
    stats = {"alive": True, "queue": 0, "block_size": 16, "checkpoints": []}
    return SimpleNamespace(replica_id=_ReplicaID(name), routing_stats=stats)


def _bare_router(name: str):
    """A `FleetRequestRouter` for ``name`` without Serve's constructor (it needs a cluster)."""
    from radixflow.cluster.ray_router import FleetRequestRouter

    router = FleetRequestRouter.__new__(FleetRequestRouter)
    router._replica_queue_len_cache = {}
    router.initialize_state(name)
    return router


@pytest.mark.parametrize("name", ["prefix", "checkpoint"])
def test_the_ray_router_remembers_where_serve_sent_a_job_not_what_it_ranked_first(name):
    # the router recorded its first choice as it ranked the replicas, though Serve sends the job
    # to the next rank when that one is full, and recorded again on every backoff retry: the
    # job's siblings then followed it to a replica that never saw its prefix
    pytest.importorskip("ray.serve")
    from radixflow.generation.params import SamplingParams

    router = _bare_router(name)
    replicas = [_running("a"), _running("b")]
    prompt = tuple(range(100, 164))  # four blocks: a prefix worth following
    job = SimpleNamespace(args=[Job("j", prompt, "default", SamplingParams(), False)])
    for _ in range(3):  # Serve ranks again on each backoff retry
        ranked = asyncio.run(router.choose_replicas(replicas, job))
    first = ranked[0][0].replica_id.unique_id
    took = "b" if first == "a" else "a"  # the first rank was full: Serve sent it to the other
    router.on_request_routed(job, _ReplicaID(took), None)
    sibling = SimpleNamespace(args=[Job("k", prompt + (7, 8), "default", SamplingParams(), False)])
    for _ in range(5):
        ranked = asyncio.run(router.choose_replicas(replicas, sibling))
        assert ranked[0][0].replica_id.unique_id == took


@pytest.mark.parametrize("found", ["RAY_ADDRESS", "ray start"])
def test_a_local_fleet_starts_its_own_ray_whatever_cluster_the_machine_knows(monkeypatch, tmp_path, found):
    # without --ray-address, ray.init(address=None) joined the cluster in $RAY_ADDRESS, or the one
    # `ray start` left on this machine: given the local instance's num_cpus it refused with "--replicas:
    # Ray did not start: When connecting to an existing cluster, num_cpus and num_gpus must not be
    # provided", and had it joined, its exit would have shut down that cluster's Serve applications
    serve = pytest.importorskip("ray.serve")
    import ray
    from ray._private import services

    from radixflow.cluster import launch

    if found == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: "head:6379")
    seen: dict = {}
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(serve, "start", lambda **_: None)
    monkeypatch.setattr(serve, "delete", lambda name, **_: None)
    with launch.ray_serve(launch.FleetSpec(2, "pow2")):
        pass
    # what ray.init does with its address: RAY_ADDRESS replaces None (or "auto"), then a cluster
    # found on this machine does; None from here starts a local instance
    address = seen["address"]
    if address in (None, "auto") and "RAY_ADDRESS" in os.environ:
        address = os.environ["RAY_ADDRESS"]
    assert services.canonicalize_bootstrap_address(address, None) is None
    assert seen["num_cpus"] == 2


def test_the_ray_router_forgets_a_replica_serve_replaced_not_only_one_whose_actor_died(monkeypatch):
    # Serve replaces a replica whose engine loop died (or stuck) after its health check fails: it
    # leaves the replica set in update_replicas, and no job dies with its actor (it answered 503s),
    # so on_replica_actor_died never came and the router kept its prefixes under that name
    pytest.importorskip("ray.serve")
    from ray.serve.request_router import RequestRouter

    from radixflow.fleet.routers import prompt_chain
    from radixflow.fleet.types import RouteRequest
    from radixflow.generation.params import SamplingParams

    router = _bare_router("prefix")
    # Serve's own bookkeeping of the replica set needs its event loop
    monkeypatch.setattr(RequestRouter, "update_replicas", lambda self, replicas: None)
    router.update_replicas([_running("a"), _running("b")])
    job = SimpleNamespace(args=[Job("j", tuple(range(100, 164)), "default", SamplingParams(), False)])
    router.on_request_routed(job, _ReplicaID("a"), None)
    memory, size = router._router.memory, router._router.config.block_size
    chain = prompt_chain(RouteRequest("default", tuple(range(100, 164))), size)
    assert set(memory.depths(chain, size)) == {"a"}
    router.update_replicas([_running("b"), _running("c")])  # a replaced by c
    assert memory.depths(chain, size) == {}  # nothing was sent anywhere but a


@pytest.mark.parametrize("ours", [None, "/checkout"])
def test_the_replicas_keep_the_pythonpath_their_nodes_give_them(monkeypatch, ours):
    # the runtime env set the replicas' PYTHONPATH to this process's, "" when it had none: on a
    # cluster whose nodes find radixflow through their own PYTHONPATH (an image's /app) every
    # replica failed to start (ModuleNotFoundError), its own path replaced
    serve = pytest.importorskip("ray.serve")
    import ray
    from ray._private.utils import update_envs

    from radixflow.cluster import launch

    if ours is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", ours)
    seen: dict = {}
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(serve, "start", lambda **_: None)
    monkeypatch.setattr(serve, "delete", lambda name, **_: None)
    monkeypatch.setattr(serve, "status", lambda: SimpleNamespace(applications={}))
    with launch.ray_serve(launch.FleetSpec(2, "pow2", "auto")):
        pass
    monkeypatch.setenv("PYTHONPATH", "/app")  # a node's own, as Ray's worker setup finds it there
    update_envs({"PYTHONPATH": seen["runtime_env"]["env_vars"]["PYTHONPATH"]})  # what Ray does there
    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    assert "/app" in paths and (ours is None or paths[0] == ours)  # ours first: this checkout wins


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_local_fleet_whose_replicas_caches_together_pass_the_memory_is_one_line(monkeypatch, zoo, replicas):
    """Each replica checked its own pools against the machine's available memory, so two whose
    caches each took most of it both started and filled it together, until one was killed (Serve
    then restarted it, and it was killed again): the pools of every replica on this machine are
    checked together before Ray starts."""
    pytest.importorskip("ray.serve")
    pytest.importorskip("torch")
    from radixflow.cli import serve_fleet
    from radixflow.options import EngineOptions, machine
    from radixflow.problems import ProblemError

    options = EngineOptions.from_mapping({"model": "qwen3_5-tiny", "cache_memory": "64M", "torch_threads": 1})
    monkeypatch.setattr(machine, "available_memory", lambda *_: 200_000_000)  # one replica's pools fit
    args = SimpleNamespace(replicas=replicas, ray_address=None)
    if replicas == 1:
        serve_fleet._refuse_fleet(args, options)
        return
    with pytest.raises(ProblemError) as refused:
        serve_fleet._refuse_fleet(args, options)
    problem = refused.value.problem
    assert problem.param == "cache_memory" and "2 replicas" in problem.message
    assert "0.2 GB of memory is available" in problem.message and "fewer replicas" in problem.message
    serve_fleet._refuse_fleet(SimpleNamespace(replicas=2, ray_address="auto"), options)  # the cluster's


def test_a_fleets_429_carries_the_code_one_servers_does():
    # one server refuses a full queue with "code": "queue_full"; a fleet's, every replica's
    # refusal of a prompt, reached its client with "code": null, plain or streamed
    from radixflow.server.responses.stream import _event_text
    from radixflow.server.submission import failure

    refused = Final(1, None, 429, "the queue is full")
    error = failure([Final(0, output()), refused])
    assert (error.status, error.code) == (429, "queue_full")
    shape = SimpleNamespace(prompts=2, n=1)
    text = asyncio.run(_event_text(shape, refused, []))  # type: ignore[arg-type]
    assert '"code": "queue_full"' in text and "prompt 1: the queue is full" in text
    drained = failure([Final(0, None, 503, "shutting down")])
    assert drained.code == "service_unavailable"  # as one server's 503 carries


def test_a_request_refused_for_one_prompt_names_that_prompt_not_a_sibling_refused_with_it():
    # prompt 1 was refused by every replica; prompts 0 and 2, still running, got its refusal too.
    # The whole answer (the first prompt without one) said "prompt 0: ...", a prompt nobody refused
    from radixflow.server.submission import failure

    async def main() -> list[list]:
        never = asyncio.Event()
        refused = WireEvent(Final(0, None, 503, "the server is shutting down"), None, "replica-a")
        scripts = {"r0": [[never, FINAL]], "r1": [[refused], [refused]], "r2": [[never, FINAL]]}
        open_stream, _ = scripted(scripts)
        return await serve(RemoteLoop(open_stream, None, ServerMetrics(), 8), n=3)

    finals = [es[-1] for es in asyncio.run(main())]
    assert [f.index for f in finals] == [0, 1, 2]  # each answered under its own index
    error = failure(finals)
    assert (error.status, error.message) == (503, "prompt 1: the server is shutting down")


def test_a_second_signal_then_the_apps_own_shutdown_ends_the_drain_under_uvloop():
    # uvicorn runs on uvloop, whose call_later(0) is a plain Handle, without when(): after the
    # second signal (drain 0) the app's own shutdown asked the drain's deadline its time, and a
    # fleet's Ctrl-C twice ended in an AttributeError traceback
    uvloop = pytest.importorskip("uvloop")
    open_stream, _ = stream_of(["hang"])
    loop = RemoteLoop(open_stream, None, ServerMetrics(), 8)

    def signals() -> None:
        loop.shutdown(30.0)  # the first signal: drain
        loop.shutdown(0.0)  # the second: now
        loop.shutdown(30.0)  # the app's lifespan, as it stops: the drain is over already

    events = uvloop.run(serve(loop, after=signals))[0]
    assert events[-1].status == 503 and "shut down" in events[-1].error


def _fleet_app(monkeypatch, tmp_path):
    """The ingress's app over a stand-in handle (its tokenizer stood in for: none is read)."""
    from radixflow.cache.ledger import ByteLedger
    from radixflow.cache.pool import IdPool
    from radixflow.cluster import launch
    from radixflow.cluster.fleet_metrics import FleetFigures
    from radixflow.cluster.replica import ReplicaInfo
    from radixflow.engine.runner import ModelInfo
    from radixflow.scheduler.scheduler import SchedulerConfig
    from radixflow.server.state import ServerConfig

    scheduler = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=64)
    ledger = ByteLedger(IdPool(64, "kv"), IdPool(8, "state"), 1024, 4096, None)
    info = ReplicaInfo("m", str(tmp_path), ModelInfo("m", False, 512, 4096), scheduler, ledger)
    monkeypatch.setattr(launch, "ingress_tokenizer", lambda path: None)
    server = launch.fleet_server(_Handle(info), ServerConfig(), "127.0.0.1", 0, "warning", FleetFigures())
    return server.config.app


def test_get_fleet_answers_head_as_the_servers_get_routes_do(monkeypatch, tmp_path):
    # a load balancer's HEAD probe: /health answered it, /fleet (added by the fleet) answered 405
    from starlette.testclient import TestClient

    client = TestClient(_fleet_app(monkeypatch, tmp_path))
    got = client.get("/fleet")
    assert got.status_code == 200 and got.json() == {"replicas": {}, "retried": 0}
    head = client.head("/fleet")
    assert (head.status_code, head.content) == (200, b"")
    assert client.head("/health").status_code == 200  # as the server's own GET routes
    paths = client.get("/openapi.json").json()["paths"]
    assert list(paths["/fleet"]) == ["get"]  # the twin stays out of the schema, as the server's
