"""The ingress side of a fleet: a `ServingLoop` whose requests run on replicas.

Each prompt is one job streamed from whichever replica the router picks (``open_stream``: the Ray
Serve handle, or anything with its shape). A replica that fails before its job sent anything, or
refuses it (`NOT_TAKEN`: its engine loop died, it is shutting down, its queue is full), is
retried on another replica (the router passes over those the job was sent to); one that fails
mid-answer, or a retry that fails again, ends the prompt with a 503 naming the failure; one
refused by every attempt, with the last refusal, counted as one server's refusal, and so are
its request's prompts that sent nothing yet (their jobs cancelled). Nothing
waits forever: every prompt ends with an answer, an error, or its client's abort.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from radixflow.cluster.fleet_metrics import FleetFigures
from radixflow.cluster.flights import Flight, NotTaken, Relayed, ReplicaFigures, Submitted
from radixflow.cluster.wire import REFUSALS, Job, WireEvent, decode, failure_line, not_taken
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.server.events import Delta, Final, NotAccepting, QueueFull, Sink
from radixflow.server.metrics import ServerMetrics

log = logging.getLogger("radixflow.cluster")
OpenStream = Callable[[Job], AsyncIterator[WireEvent]]


class RemoteLoop:
    def __init__(
        self,
        open_stream: OpenStream,
        tokenizer: TextTokenizer | None,
        metrics: ServerMetrics,
        max_pending: int,
        retries: int = 1,
        fleet: FleetFigures | None = None,
    ) -> None:
        """``fleet``: the replicas' state, which says why none can serve (`FleetFigures.down`)."""
        self.open_stream, self.tokenizer, self.metrics = open_stream, tokenizer, metrics
        self.max_pending, self.retries = max_pending, retries
        self._fleet = fleet
        if fleet is not None:
            fleet.watch(self._went_down)
        self.replicas: dict[str, ReplicaFigures] = {}  # by replica id, from their answers
        self.retried = 0
        self._accepting = True
        self._flights: dict[str, Flight] = {}  # event loop only
        self._idle = threading.Event()
        self._idle.set()
        self._aio: asyncio.AbstractEventLoop | None = None
        # the drain's end (the event loop's time) and its call: uvloop's call_later(0) is a plain
        # Handle, which has no when()
        self._deadline: tuple[float, asyncio.Handle] | None = None

    def start(self) -> None:
        pass  # the replicas run already

    @property
    def failure(self) -> str | None:
        """Why the fleet serves nothing (every replica's engine loop died), as one server's
        failed engine loop says it: `/health` answers 503 with it and new requests are refused."""
        return None if self._fleet is None else self._fleet.down()

    @property
    def alive(self) -> bool:
        return self.failure is None

    @property
    def accepting(self) -> bool:
        return self._accepting and self.failure is None

    @property
    def stalled(self) -> str | None:
        """Never: a stuck replica fails its own health check (`EngineReplica.check_health`) and
        Ray Serve replaces it; its jobs end with an error, so the ingress has nothing stuck."""
        return None

    def check_open(self, adding: int = 1, reading: int = 0) -> None:
        """Raise what `submit` would raise for ``adding`` more prompts now (on the event loop),
        ``reading`` others, still being tokenized, counted as queued."""
        self._check_room(adding, reading)

    def _check_room(self, adding: int, reading: int = 0) -> None:
        failure = self.failure
        if not self._accepting or failure is not None:
            raise NotAccepting(failure or "the server is shutting down")
        if len(self._flights) + reading + adding > self.max_pending:
            raise QueueFull.of(len(self._flights), adding, self.max_pending, reading)

    def submit(self, items: list[tuple[Request, RequestTracker]], sink: Sink, stream: bool) -> None:
        """On the event loop: every prompt becomes a job on a replica, all or none accepted."""
        self._check_room(len(items))
        self._aio = asyncio.get_running_loop()
        self._idle.clear()
        now, submitted = time.monotonic(), Submitted()
        for index, (req, _) in enumerate(items):
            job = Job(req.id, req.prompt, req.namespace, req.sampling, stream)
            flight = Flight(req, index, sink, now, submitted, job)
            if self._fleet is not None:
                self._fleet.routes.begun(req.id)
            self._flights[req.id] = flight
            submitted.flights.append(flight)
            flight.task = self._aio.create_task(self._run(job, flight))
            # not a `finally` in `_run`: a task cancelled before its first step (an abort, or the
            # drain's 503s, run before it) never runs its coroutine, and the prompt stayed queued
            flight.task.add_done_callback(lambda _, f=flight: self._done(f))
        self.metrics.on_pending(len(self._flights))

    def abort(self, request_ids: list[str]) -> None:
        """The clients went away: cancel their jobs (the replica aborts them), answer nobody."""
        for rid in request_ids:
            flight = self._flights.get(rid)
            if flight is not None and flight.task is not None:
                flight.aborted = True
                flight.task.cancel()

    def shutdown(self, drain_s: float) -> None:
        self._accepting = False
        try:
            aio = asyncio.get_running_loop()
        except RuntimeError:
            aio = self._aio
        if aio is None:
            return
        end = aio.time() + drain_s
        if self._deadline is not None:
            if self._deadline[0] <= end:
                return
            self._deadline[1].cancel()
        self._deadline = (end, aio.call_later(drain_s, self._fail_all))

    def join(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def abandon(self, message: str) -> None:
        """On the event loop: answer what is left with a 503 now (the drain's end does it too)."""
        self._fail_all(message)

    def _went_down(self, why: str) -> None:
        """Any thread (Serve's router reports): no replica can serve. The jobs in flight wait in
        Serve's queue for one, forever while replacements fail to start: answer them with a 503
        naming ``why`` now, as new requests are refused."""
        aio = self._aio
        if aio is not None and not aio.is_closed():
            aio.call_soon_threadsafe(self._fail_all, why)

    # ------------------------------------------------------------ event loop
    def _fail_all(self, message: str = "the server shut down before this request finished") -> None:
        """The drain is over: answer what is left with a 503 and cancel its jobs."""
        for flight in list(self._flights.values()):
            self._answer(flight, Final(flight.index, None, 503, message))
            if flight.task is not None:
                flight.task.cancel()

    async def _run(self, job: Job, flight: Flight) -> None:
        try:
            await self._relay(job, flight)
        except asyncio.CancelledError:
            pass  # aborted by its client, or failed by the drain (answered there)
        except Exception as e:  # a bug here must still answer the client
            log.exception("relaying %s failed", job.id)
            self._answer(flight, Final(flight.index, None, 500, f"{type(e).__name__}: {e}"))

    async def _relay(self, job: Job, flight: Flight) -> None:
        """``retries`` more attempts after a replica failed the job; after refusals, as many
        attempts as replicas run (each refuser passed over), so none is left unasked."""
        relayed, failures, attempt = Relayed(), 0, 0
        while True:
            relayed.sent = False
            last = failures >= self.retries or attempt + 1 >= self._attempts()
            try:
                await self._stream(job, flight, relayed, last=last)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                why = f"the replica serving this request failed: {failure_line(e)}"
                if relayed.sent or last:
                    self._answer(flight, Final(flight.index, None, 503, why))
                    return
                self.retried += 1
                attempt += 1
                log.warning("radixflow: warning: %s; retrying on another replica", why)
                if isinstance(e, NotTaken):  # it would look the least loaded again: it answers at once
                    job = replace(job, avoid=job.avoid | {e.replica})
                else:
                    failures += 1

    def _attempts(self) -> int:
        """The most attempts a job gets: ``retries`` + 1, or one per replica running if more."""
        return max(self.retries + 1, 0 if self._fleet is None else self._fleet.running())

    async def _stream(self, job: Job, flight: Flight, relayed: Relayed, last: bool) -> None:
        """One attempt: the replica's events passed on until its answer. `NotTaken` for a refusal
        another replica may serve (nothing sent yet, and not the ``last`` attempt)."""
        async for wire in self.open_stream(job):
            event = decode(wire, job.prompt, flight.index, self.tokenizer)
            if isinstance(event, Final):
                self._final(job, flight, event, wire, relayed, last)
                return
            if not relayed.first_token and isinstance(event, Delta) and event.delta.token_ids:
                self.metrics.on_first_token(time.monotonic() - flight.arrival)
                relayed.first_token = True
            relayed.sent = flight.sent = True
            flight.ran_on = flight.ran_on or wire.replica
            flight.sink(event)
        raise RuntimeError("the replica closed the stream without an answer")

    def _final(
        self, job: Job, flight: Flight, final: Final, wire: WireEvent, relayed: Relayed, last: bool
    ) -> None:
        if not_taken(final) and not relayed.sent:
            if self._fleet is not None:  # the router takes back the prefix it recorded there
                self._fleet.routes.refused(job, wire.replica)
            if not last:
                raise NotTaken(final, wire.replica)
            self._reject(flight, final, REFUSALS[final.status])
            return
        # an error answer left nothing there: refused by its checks, or failed with its round (what
        # that round computed is withdrawn)
        if final.output is not None:
            flight.ran_on = flight.ran_on or wire.replica
        if not relayed.first_token:  # not streamed: the first token came with the answer
            self._first_token_before(flight, final, wire.decode_s)
        self._count(wire.replica, final)
        self._answer(flight, final)

    def _first_token_before(self, flight: Flight, final: Final, decode_s: float | None) -> None:
        """Count the time to first token of a prompt whose first token the replica made
        ``decode_s`` before this answer (as one engine counts every prompt's)."""
        if final.output is None or not final.output.token_ids or decode_s is None:
            return
        self.metrics.on_first_token(max(time.monotonic() - flight.arrival - decode_s, 0.0))

    def _count(self, replica: str, final: Final) -> None:
        if final.output is None:
            return
        figures = self.replicas.setdefault(replica, ReplicaFigures())
        figures.answered += 1
        figures.prompt_tokens += len(final.output.prompt_token_ids)
        figures.reused_tokens += final.output.cached_tokens

    def _answer(self, flight: Flight, final: Final, rejected: str | None = None) -> None:
        """Answer ``flight`` with ``final``, counted by its outcome; ``rejected``: every replica
        refused it before it ran, the reason one server counts its own refusal under."""
        if flight.answered or flight.aborted:
            return
        flight.answered = True
        req = flight.request
        if final.output is not None:
            req.status, req.reused, req.output = (
                RequestStatus.FINISHED,
                final.output.cached_tokens,
                list(final.output.token_ids),
            )
        else:
            req.status, req.error = RequestStatus.FAILED, final.error
        if rejected is None:  # an error answer counted by its status, as one server counts it
            error = None if final.output is not None else final.status
            self.metrics.on_done(req, time.monotonic() - flight.arrival, error)
        elif not flight.submitted.rejected:  # once per HTTP request, as one server refuses it whole
            flight.submitted.rejected = True
            self.metrics.on_rejected(rejected)
        flight.sink(final)

    def _reject(self, flight: Flight, final: Final, reason: str) -> None:
        """Every replica refused ``flight``: so is its request, as one server refuses one whole.
        Its prompts that sent the client nothing get the same refusal now, their jobs cancelled:
        a non-streamed answer is that error anyway (naming ``flight``: `Final.refused_for`), and
        waited for them to generate to their end for nobody. One already streaming runs to its
        answer (the client has its tokens)."""
        self._answer(flight, final, rejected=reason)
        for sibling in flight.submitted.flights:
            if sibling.answered or sibling.sent:
                continue
            refusal = replace(final, index=sibling.index, refused_for=flight.index)
            self._answer(sibling, refusal, rejected=reason)
            if sibling.task is not None:
                sibling.task.cancel()

    def _done(self, flight: Flight) -> None:
        if not flight.answered:  # aborted by its client: counted, not answered
            flight.request.status = RequestStatus.ABORTED
            self.metrics.on_done(flight.request, time.monotonic() - flight.arrival)
        self._flights.pop(flight.request.id, None)
        if self._fleet is not None:  # routed no more; where it did not run, the router forgets it
            self._fleet.routes.ended(flight.request.id, flight.job, flight.ran_on)
        self.metrics.on_pending(len(self._flights))
        if not self._flights:
            self._idle.set()
