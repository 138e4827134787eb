"""One engine replica: the server's own `EngineLoop` over a loaded model, fed one job at a time.

Ray Serve runs this class as a deployment (see `launch`); nothing here imports ray, so it can be
driven directly (the tests do). Each replica reports its queue and a digest of its READY
checkpoints (`record_routing_stats`, polled by Serve), which the routers read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from radixflow.cache.digest import CheckpointDigest
from radixflow.cache.ledger import ByteLedger
from radixflow.cluster.fleet_metrics import engine_samples
from radixflow.cluster.wire import Job, WireEvent, encode
from radixflow.engine.runner import ModelInfo
from radixflow.generation.setup import LoadedModel, load_model
from radixflow.generation.tracker import RequestTracker
from radixflow.options import EngineOptions
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.server.events import Final, NotAccepting, QueueFull
from radixflow.server.loop import EngineLoop
from radixflow.server.metrics import ServerMetrics

log = logging.getLogger("radixflow.cluster")
ROUND_HISTORY = 256
DEAD_BLOCK_SIZE = 16  # of the empty digest a dead replica reports
# how long a stats poll waits for the engine thread to read its queue and digest between rounds:
# through a longer round it reports what it last read (Serve keeps a failed poll's last report,
# engine figures and all, and logs the failure)
STATS_WAIT_S = 1.0
# a retry that reached this replica while its first attempt still runs here (the ingress retries
# a job whose stream failed before it sent anything, as when Ray could not reach this actor)
STILL_RUNNING = "this replica still runs an earlier attempt of this request; retry later"


@dataclass(frozen=True)
class ReplicaInfo:
    """What the ingress needs of the model: its name, where its tokenizer is, its limits."""

    name: str
    path: str
    model: ModelInfo
    scheduler: SchedulerConfig
    ledger: ByteLedger  # its cache's entry sizes and byte budget (`budget_problem` reads those)


def replica_name() -> str:
    """Serve's id of the replica running this code ("local" outside Serve)."""
    try:
        from ray import serve

        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # not in a Serve replica (or no ray): a replica driven directly
        return "local"


def decode_seconds(final: Final) -> float | None:
    """Seconds from ``final``'s first token to now (wall time: the engine's clock counts its
    worker calls only, not the loop's time between rounds); None without a token."""
    return None if final.first_token_at is None else time.monotonic() - final.first_token_at


class EngineReplica:
    def __init__(self, options: EngineOptions, max_pending: int, drain_s: float) -> None:
        """``max_pending`` and ``drain_s``: the fleet's `ServerConfig` (declared there, not here)."""
        self.model: LoadedModel = load_model(options)
        self.engine = self.model.engine(round_history=ROUND_HISTORY)
        self.metrics = ServerMetrics()
        self.loop = EngineLoop(self.engine, self.metrics, max_pending)
        self.drain_s = drain_s
        self.name = replica_name()
        # the queue and READY-checkpoint digest last read on the engine thread, and the read under
        # way (one at a time: polls through a long round queue no more)
        self._routing: tuple[int, CheckpointDigest] = (0, self.engine.routing_digest())
        self._reading: concurrent.futures.Future[tuple[int, CheckpointDigest]] | None = None
        self._jobs: set[str] = set()  # the ids of the jobs generating here (Serve's event loop only)
        self.loop.start()

    def describe(self) -> ReplicaInfo:
        engine, model = self.engine, self.model
        return ReplicaInfo(
            model.name, str(model.path), engine.runner.model, engine.scheduler.config, engine.cache.ledger
        )

    async def generate(self, job: Job) -> AsyncIterator[WireEvent]:
        """The job's events, the last a `Final`; cancelled (the client left): the job is aborted."""
        req = Request(job.id, job.prompt, job.namespace, sampling=job.params)
        problem = self.engine.problem(req)
        if problem is not None:
            yield WireEvent(Final(0, None, 400, str(problem)), None, self.name)
            return
        if job.id in self._jobs:  # the engine would refuse the id in use: a 400, the client's fault
            yield WireEvent(Final(0, None, 503, STILL_RUNNING), None, self.name)  # not taken
            return
        self._jobs.add(job.id)
        try:  # closed with this one: a client gone aborts the job now, not when it is collected
            async with contextlib.aclosing(self._generate(job, req)) as events:
                async for wire in events:
                    yield wire
        finally:
            self._jobs.discard(job.id)

    async def _generate(self, job: Job, req: Request) -> AsyncIterator[WireEvent]:
        queue: asyncio.Queue = asyncio.Queue()
        aio = asyncio.get_running_loop()
        try:
            self.loop.submit(
                [(req, RequestTracker(req, self.model.tokenizer))], self._sink(aio, queue), job.stream
            )
        except QueueFull as e:
            yield WireEvent(Final(0, None, 429, str(e)), None, self.name)  # the ingress retries elsewhere
            return
        except NotAccepting as e:
            yield WireEvent(Final(0, None, 503, str(e)), None, self.name)
            return
        done = False
        try:
            while not done:
                event = await queue.get()
                done = isinstance(event, Final)
                yield encode(event, self.name, decode_seconds(event) if done else None)
        finally:
            if not done:
                self.loop.abort([job.id])

    @staticmethod
    def _sink(aio: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> Any:
        return lambda event: aio.call_soon_threadsafe(queue.put_nowait, event)

    def check_health(self) -> None:
        """Serve calls this every few seconds: a replica whose engine loop died is replaced, not
        left in rotation answering every job with the failure; so is one whose engine thread is
        stuck with jobs waiting (`EngineLoop.stalled`): they would wait until the drain."""
        if not self.loop.alive:
            raise RuntimeError(self.loop.failure or "the engine loop stopped")
        stalled = self.loop.stalled
        if stalled is not None:
            raise RuntimeError(stalled)

    async def record_routing_stats(self) -> dict[str, Any]:
        """Serve polls this: whether the engine loop runs, the queue, the READY-checkpoint digest
        and the engine's metrics (`fleet_metrics.engine_samples`), all plain and picklable. A dead
        loop (or a stuck one) is reported, not raised: Serve keeps the last report of a failed
        poll, and routers must learn the replica is dead before it is replaced."""
        self.metrics.update_throughput(time.monotonic())  # an idle engine's tokens/s decays too
        engine = engine_samples(self.metrics)  # the ingress's /metrics shows these, summed
        # a dead loop answers no call, nor does a stuck one in time: report now, not after the
        # timeout (a failed poll leaves routers the last live report), so routers pass it over
        if not self.loop.alive or self.loop.stalled is not None:
            dead = {"queue": 0, "block_size": DEAD_BLOCK_SIZE, "checkpoints": []}
            return {"alive": False, **dead, "engine": engine}
        queue, digest = await self._routing_state()
        return {
            "alive": True,
            "queue": queue,
            "block_size": digest.block_size,
            "checkpoints": sorted(digest.hashes),
            "engine": engine,
        }

    async def _routing_state(self) -> tuple[int, CheckpointDigest]:
        """The queue and digest, read on the engine thread between rounds; what was last read
        when that takes over `STATS_WAIT_S` (a long round), the read left under way."""
        if self._reading is None or self._reading.done():
            self._reading = self.loop.ask(lambda e: (e.queue_length(), e.routing_digest()))
        with contextlib.suppress(TimeoutError):
            self._routing = await asyncio.to_thread(self._reading.result, STATS_WAIT_S)
        return self._routing

    def drain(self) -> None:
        """Finish what was accepted (within the drain time), then stop the engine thread; one
        stuck in its round past that is left behind, its jobs answered with a 503 (`EngineLoop.stop`)."""
        self.loop.stop(self.drain_s)

    def __del__(self) -> None:  # Serve calls it when it stops the replica
        with contextlib.suppress(Exception):  # interpreter teardown: nothing left to drain into
            self.drain()
