"""On the engine thread, between the engine and the submissions it serves.

Each accepted request is handed to the engine (`Dispatch.admit`); the output processor's events
go to its submission's sink, a `Delta` or its `Final` answer; aborts, the drain's end and an engine
failure are answered; the queue and cache gauges are published after every change. Only the
engine thread calls it (`EngineLoop` owns the thread, its commands and the bounded queue of
answers owed, which ``release`` settles).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord, SubmitRefused
from radixflow.generation.output_processor import (
    EngineDriver,
    FirstToken,
    OutputEvent,
    OutputProcessor,
    Streamed,
)
from radixflow.generation.tracker import RequestTracker
from radixflow.server.events import Delta, Final, Sink, final_of, send
from radixflow.server.liveness import Liveness
from radixflow.server.metrics import NOT_ACCEPTING, ServerMetrics


@dataclass(eq=False)  # by identity: the loop's set of owed entries holds them
class Entry:
    tracker: RequestTracker  # handed to the output processor on admission; read for metrics
    index: int
    sink: Sink
    stream: bool
    arrival: float  # time.monotonic() when the request was accepted
    first_token_at: float | None = None  # time.monotonic() when its first token came


class Release(Protocol):
    def __call__(self, entry: Entry, error: int | None, counted: bool = True) -> bool:
        """The entry's request left the engine: count it, by the status of its error answer
        (None: it has none, answered with its output or aborted), unless not ``counted`` (a
        refusal, counted by its HTTP request); False when the loop answered it already
        (`EngineLoop.abandon`), so nothing more goes to its sink."""
        ...


class Dispatch:
    def __init__(self, engine: Engine, metrics: ServerMetrics, liveness: Liveness, release: Release) -> None:
        self.engine, self.metrics, self.liveness = engine, metrics, liveness
        self._release = release
        self.active: dict[str, Entry] = {}  # request id -> its entry, until answered or aborted
        self.failure: str | None = None  # why the engine failed, if it did
        self._processor = OutputProcessor(engine)
        self._driver = EngineDriver(engine, self._processor, self._on_round)

    def admit(self, entries: list[Entry]) -> None:
        if self.failure is not None:
            self._refuse(entries, self.failure)
            return
        for entry in entries:  # all active first: should a submit fail the loop, the failure answers each
            req = entry.tracker.request
            # an id in use keeps its own entry (the engine refuses the newcomer, `_submit`)
            if self.active.setdefault(req.id, entry) is entry:
                req.arrival_s = self.engine.now  # the engine clock: arrived now, admitted next round
        for entry in entries:
            # handlers check requests first: a refusal here is a safety net (a 400 answer)
            self._forward(self._submit(entry))
        self.publish()

    def _refuse(self, entries: list[Entry], message: str) -> None:
        """A submission accepted while the round that failed the engine ran, never handed to it:
        refused (503) as one arriving a moment later is, and counted so, once for its request
        (`ServerState.submit`), not as engine requests that failed."""
        refused = [entry for entry in entries if self._release(entry, 503, counted=False)]
        if refused:
            self.metrics.on_rejected(NOT_ACCEPTING)
        for entry in refused:
            send(entry.sink, Final(entry.index, None, 503, message))
        self.publish()

    def _submit(self, entry: Entry) -> list[OutputEvent]:
        """Hand the entry's request to the engine. One the engine refuses outright (an id in use:
        a job retried onto a replica that still runs its first attempt) took nothing there, so it
        alone is answered (400) and the loop carries on."""
        try:
            return self._processor.submit(entry.tracker, entry.stream)
        except SubmitRefused as e:
            rid = entry.tracker.request.id
            if self.active.get(rid) is entry:
                del self.active[rid]
            self._answer(entry, Final(entry.index, None, 400, str(e)))
            return []

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            entry = self.active.pop(rid, None)
            if entry is None:
                continue  # already answered
            self._processor.abort(rid)  # nobody listens for its answer
            self._release(entry, None)
        self.publish()

    def step(self) -> None:
        self._forward(self._driver.step())
        self.publish()

    def _forward(self, events: list[OutputEvent]) -> None:
        """Hand the processor's events to the submissions they belong to."""
        for event in events:
            entry = self.active.get(event.request_id)
            if entry is None:
                continue
            if isinstance(event, FirstToken):
                entry.first_token_at = time.monotonic()
                self.metrics.on_first_token(entry.first_token_at - entry.arrival)
            elif isinstance(event, Streamed):
                send(entry.sink, Delta(entry.index, event.delta))
            else:
                del self.active[event.request_id]
                self._answer(entry, final_of(entry.index, event, entry.first_token_at))

    def _answer(self, entry: Entry, final: Final) -> None:
        # first: a client that has its answer finds its slot in the queue free
        if self._release(entry, None if final.output is not None else final.status):
            send(entry.sink, final)

    def _on_round(self, record: RoundRecord) -> None:
        self.metrics.on_round(record)
        self.liveness.on_round(record)

    def fail(self, message: str) -> None:
        """The engine failed, its state unknown: answer every active request with a 500; what
        comes after is answered with ``message`` (503), never handed to it."""
        self.failure = message
        self.fail_all(500, message, abort=False)

    def fail_all(self, status: int, message: str, abort: bool = True) -> None:
        """Answer every active request with an error; ``abort`` releases them in the engine (not
        when the engine itself has failed: then only the answers matter)."""
        for rid, entry in list(self.active.items()):
            del self.active[rid]
            if abort:
                self._processor.abort(rid)
            else:
                self._processor.drop(rid)
            self._answer(entry, Final(entry.index, None, status, message))
        self.publish()

    def publish(self) -> None:
        """The queue and cache gauges, as the engine has them now."""
        sched = self.engine.scheduler
        if self.failure is not None:
            # a failed engine still holds what it held, but runs nothing again: all was answered.
            # Nor is it read again: the broken invariant that failed it may fail its figures too,
            # and the failure's answers must all go out; the cache gauges keep their last values
            self.metrics.on_queues(0, 0)
            return
        self.metrics.on_queues(len(sched.waiting), len(sched.running))
        cache = sched.cache
        memory = cache.memory()
        in_use = {
            "kv": memory.kv_bytes,
            "checkpoint": memory.checkpoint_bytes,
            "working": memory.working_bytes,
        }
        evictions = cache.evictions()
        self.metrics.on_cache(cache.namespaces, memory.budget_bytes, in_use, evictions, memory.promised_bytes)
