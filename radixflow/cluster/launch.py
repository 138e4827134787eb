"""`radixflow serve MODEL --replicas N`: N engine replicas as a Ray Serve deployment, the OpenAI
ingress (the same FastAPI app as one replica) in this process, routed by a `radixflow.fleet`
router running as Serve's request router.

Ctrl-C drains: the ingress stops accepting and lets accepted requests finish (as one replica
does), then Serve stops the replicas (each drains its engine) and Ray shuts down.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.responses import JSONResponse

from radixflow.cluster.fleet_metrics import FleetFigures, publish
from radixflow.cluster.remote_loop import OpenStream, RemoteLoop
from radixflow.cluster.replica import EngineReplica, ReplicaInfo
from radixflow.cluster.wire import Job, WireEvent
from radixflow.engine.runner import generation_room, validate_prompt
from radixflow.engine.submit_checks import budget_problem
from radixflow.generation.tokenizer import TextTokenizer, TokenizerError
from radixflow.options import EngineOptions
from radixflow.problems import Problem, ProblemError
from radixflow.ray_start import LOCAL_RAY, unreachable, worker_env
from radixflow.scheduler.request import Request
from radixflow.server.app import answer_head_as_get
from radixflow.server.events import Final
from radixflow.server.metrics import ServerMetrics
from radixflow.server.serve import Server, serve_state
from radixflow.server.state import Backend, ServerConfig, ServerState

log = logging.getLogger("radixflow.cluster")
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of Ray's messages
APP = "radixflow"
DEPLOYMENT = "radixflow-engine"
ROUTER_CLASS = "radixflow.cluster.ray_router:FleetRequestRouter"
STATS_PERIOD_S = 0.25  # how often Serve asks each replica for its queue and checkpoint digest
# Serve replaces a replica after three failed health checks in a row: one whose engine loop died
# is out in about 3 s (Serve's default 10 s left it in rotation 30 s; routers skip it sooner)
HEALTH_CHECK_PERIOD_S = 1.0
HEALTH_CHECK_TIMEOUT_S = 5.0  # check_health only reads a flag: a replica this slow to answer is stuck


class RayStartError(RuntimeError):
    """Ray refused to start or to join ``--ray-address`` (the message names the flag)."""


class ReplicaStartError(RuntimeError):
    """A replica failed to start (Serve gave up on the deployment): one line, its own error."""


@dataclass(frozen=True)
class FleetSpec:
    replicas: int
    router: str
    ray_address: str | None = None
    cpus_per_replica: float = 1.0
    # a GPU of its own for each replica on a CUDA device: Ray then gives each its own
    # CUDA_VISIBLE_DEVICES (asked for none, every replica landed on the one GPU all of them see)
    gpus_per_replica: float = 0.0


@contextlib.contextmanager
def ray_serve(spec: FleetSpec) -> Iterator[None]:
    """Ray (a local instance, or the cluster at ``ray_address``) with Serve, no HTTP proxy of its
    own (the ingress is ours); on the way out this fleet's application is deleted (its replicas
    drain), then a local instance is shut down. Not serve.shutdown(): it takes a cluster's other
    applications down, and its controller's shutdown printed Ray's noise on each stop."""
    import ray
    from ray import serve

    env = {"env_vars": {**worker_env(), "OMP_NUM_THREADS": "1"}}
    local = spec.ray_address is None
    cpus = max(1, round(spec.replicas * spec.cpus_per_replica)) if local else None
    if not local and (why := unreachable(spec.ray_address)) is not None:
        raise RayStartError(f"--ray-address {spec.ray_address}: Ray did not start: {why}")
    try:
        # its SIGTERM handler (sys.exit) is left in place: the SIGTERM uvicorn re-raises past its
        # drain then runs the `finally` below, which deletes the fleet's (detached) application.
        # Without --ray-address, an instance of our own: a cluster Ray would find instead refuses
        # the local instance's num_cpus, and this fleet's exit would stop its Serve applications
        ray.init(
            address=LOCAL_RAY if local else spec.ray_address,
            num_cpus=cpus,
            runtime_env=env,
            include_dashboard=False,
            log_to_driver=False,
        )
    except (ValueError, ConnectionError) as e:  # a malformed or unreachable address: the user's
        where = "--replicas" if local else f"--ray-address {spec.ray_address}"
        raise RayStartError(f"{where}: Ray did not start: {e}") from None
    try:
        serve.start(proxy_location="Disabled")
        if not local:
            refuse_taken(spec.ray_address)
    except BaseException:  # nothing of ours runs: leave the cluster's applications alone
        ray.shutdown()
        raise
    try:
        yield
    finally:
        try:  # stops the replicas: each drains its engine (EngineReplica.__del__)
            serve.delete(APP)
        except TimeoutError as e:  # Serve waits 60 s; a stuck replica drains for --drain-timeout + 5
            log.warning("radixflow: warning: Ray Serve did not stop the replicas in time: %s", e)
        finally:
            ray.shutdown()


def cpu_shortfall(spec: FleetSpec) -> str | None:
    """On a cluster joined with ``--ray-address``: why Serve will wait to place the replicas (the
    CPUs, or GPUs, they take are not free there now), else None. A local instance is started with the CPUs
    its replicas take. Serve itself waits without a word."""
    if spec.ray_address is None:
        return None
    import ray

    free = ray.available_resources()
    for name, each in (("CPU", spec.cpus_per_replica), ("GPU", spec.gpus_per_replica)):
        need = spec.replicas * each
        if free.get(name, 0.0) < need:
            return (
                f"--replicas {spec.replicas}: the replicas take {need:g} {name}{'' if need == 1 else 's'} "
                f"({each:g} each) and the cluster at --ray-address {spec.ray_address} has "
                f"{free.get(name, 0.0):g} free: serve waits for the rest (from its autoscaler, or other "
                "work ending)"
            )
    return None


def local_contention(spec: FleetSpec, cpus: int) -> str | None:
    """Without ``--ray-address``: why the replicas will contend for this machine's ``cpus`` (their
    torch threads outnumber them: a local Ray is started with as many CPUs as they take, so it
    places them all, and every forward pass then shares a core), else None. Pure."""
    need = spec.replicas * spec.cpus_per_replica
    if spec.ray_address is not None or need <= cpus:
        return None
    return (
        f"--replicas {spec.replicas}: the replicas run {need:g} torch threads ({spec.cpus_per_replica:g} "
        f"each) on this machine's {cpus} CPU{'' if cpus == 1 else 's'}: they contend for them, each "
        "slower than it would run alone (fewer replicas, or join a cluster with --ray-address)"
    )


def refuse_taken(address: str | None) -> None:
    """`RayStartError` when the cluster at ``address`` runs an application under this fleet's
    name: deploying would replace that fleet's replicas under its ingress, and this one's exit
    would delete them."""
    from ray import serve

    if APP in serve.status().applications:
        raise RayStartError(
            f"--ray-address {address}: the cluster already runs a Serve application named {APP!r} "
            f"(another radixflow serve?): stop that one first, or delete it (ray.serve.delete({APP!r}))"
        )


def deploy(
    options: EngineOptions, spec: FleetSpec, config: ServerConfig, figures: FleetFigures | None = None
) -> Any:
    """Start the replicas; returns Serve's handle to them (routed by ``spec.router``).
    ``figures``: where the router puts the engine figures the replicas report (the ingress's
    `/metrics`)."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    kwargs = {"router": spec.router} | ({} if figures is None else {"figures": publish(figures)})
    routing = RequestRouterConfig(
        request_router_class=ROUTER_CLASS,
        request_router_kwargs=kwargs,
        request_routing_stats_period_s=STATS_PERIOD_S,
        request_routing_stats_timeout_s=10.0,
    )
    deployment = serve.deployment(
        EngineReplica,
        name=DEPLOYMENT,
        num_replicas=spec.replicas,
        max_ongoing_requests=config.max_pending,
        ray_actor_options={"num_cpus": spec.cpus_per_replica, "num_gpus": spec.gpus_per_replica},
        request_router_config=routing,
        health_check_period_s=HEALTH_CHECK_PERIOD_S,
        health_check_timeout_s=HEALTH_CHECK_TIMEOUT_S,
        graceful_shutdown_timeout_s=config.drain_s + 5,
        graceful_shutdown_wait_loop_s=0.5,
    )
    app = deployment.bind(options, config.max_pending, config.drain_s)
    try:
        return serve.run(app, name=APP, route_prefix=None)
    except RuntimeError as e:  # DEPLOY_FAILED: Serve's message names no reason; its status does
        raise ReplicaStartError(f"a replica failed to start: {start_failure(str(e))}") from None


def start_failure(fallback: str) -> str:
    """Why the deployment failed, in one line: the last line of Serve's message about it (a
    replica's traceback ends with its error), ``fallback`` when Serve has none."""
    from ray import serve

    try:
        app = serve.status().applications.get(APP)
    except Exception:  # Serve itself is gone: its message is all there is
        return fallback
    deployment = None if app is None else app.deployments.get(DEPLOYMENT)
    lines = [line.strip() for line in (getattr(deployment, "message", "") or fallback).splitlines()]
    return ANSI.sub("", next((line for line in reversed(lines) if line), fallback))


def ingress_problem(info: ReplicaInfo) -> Any:
    """The replicas' own admission check (`Engine.problem`), run at the ingress (no model needed
    here): the budget before the KV cap, as there (the cap is what the budget holds)."""

    def problem(request: Request) -> Problem | None:
        return (
            validate_prompt(request, info.model)
            or budget_problem(request, info.scheduler, info.ledger)
            or info.scheduler.unfit_reason(request)
        )

    return problem


def ingress_tokenizer(path: Path) -> TextTokenizer:
    """The model's tokenizer, read here: the ingress tokenizes every request (a token-id prompt's
    stop strings too), as one server does. `ProblemError` naming ``model`` when the directory has
    none or it is broken (with ``--ray-address``: when this machine cannot read it), as a model
    without one is refused by `radixflow serve` alone; not a 500 for every request."""
    try:
        return TextTokenizer.load(path)
    except TokenizerError as e:
        raise ProblemError(Problem("model", str(e))) from None


def job_streams(streaming: Any) -> OpenStream:
    """Each job's events from ``streaming`` (Serve's streaming handle to the replicas). A stream
    left before its answer (its client went away, the drain ran out) or failed before it (Ray's
    `ActorUnavailableError`: the actor unreachable, maybe still running the job) cancels the job
    on its replica: cancelling the task that iterates Serve's response does not, and the replica
    would generate on to ``max_tokens`` for nobody (the client had its answer: an error, or a
    retry's), holding a place in its queue and its cache."""

    async def open_stream(job: Job) -> AsyncIterator[WireEvent]:
        response = streaming.generate.remote(job)
        answered = False
        try:
            async for wire in response:
                answered = isinstance(wire.event, Final)
                yield wire
        except BaseException:
            if not answered:
                _cancel(response)
            raise

    return open_stream


def _cancel(response: Any) -> None:
    """Best effort: Serve's cancel re-raises a failed assignment's error (the caller raises it)."""
    with contextlib.suppress(Exception):
        response.cancel()


def fleet_server(
    handle: Any, config: ServerConfig, host: str, port: int, log_level: str, figures: FleetFigures
) -> Server:
    """The ingress over ``handle``'s replicas; its `/metrics` takes the engine series from
    ``figures`` (given to `deploy`)."""
    info: ReplicaInfo = handle.describe.remote().result()
    tokenizer = ingress_tokenizer(Path(info.path))
    open_stream = job_streams(handle.options(stream=True))
    loops: list[RemoteLoop] = []

    def make_loop(metrics: ServerMetrics) -> RemoteLoop:
        metrics.engine_from(figures)  # no engine here: the replicas' figures
        loops.append(RemoteLoop(open_stream, tokenizer, metrics, config.max_pending, fleet=figures))
        return loops[-1]

    def room(prompt_len: int) -> int:
        return generation_room(prompt_len, info.model, info.scheduler)

    backend = Backend(info.name, tokenizer, info.model, ingress_problem(info), room, make_loop)
    server = serve_state(ServerState(backend, config), host, port, log_level)
    app = server.config.app

    @app.get("/fleet")
    async def fleet() -> JSONResponse:
        """Per replica (by Serve's id): prompts answered, prompt tokens and reused tokens."""
        loop = loops[0]
        figures = {
            name: {**vars(f), "reuse_rate": f.reused_tokens / f.prompt_tokens if f.prompt_tokens else None}
            for name, f in loop.replicas.items()
        }
        return JSONResponse({"replicas": figures, "retried": loop.retried})

    answer_head_as_get(app.router)  # /fleet's HEAD (a load balancer's probe), as the server's
    return server
