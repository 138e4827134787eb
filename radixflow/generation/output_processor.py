"""The one output path: what each engine round means to the requests a caller follows.

`LLM` and the server's engine loop both step an engine and turn its rounds into answers. The
`OutputProcessor` does the second half for both: after a step it reads the requests the round
touched (detokenizing incrementally, ending a request at a stop string, collecting logprobs),
and emits events — a `Streamed` delta for a request that streams, `FirstToken` once, and a `Done`
answer (the `GenerationOutput`, or a `Failure` saying why there is none) when the request is
over, after which the engine forgets it. Finish and failure reasons are decided here and
nowhere else. `EngineDriver` is the loop both callers run: step the engine, process the round.

Everything here runs on the one thread that steps the engine (the engine is single-threaded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord
from radixflow.generation.outputs import GenerationOutput, StreamDelta
from radixflow.generation.tracker import RequestTracker, observe
from radixflow.scheduler.request import RequestStatus


class FailureKind(Enum):
    REFUSED = "refused"  # the engine would not take it: it can never run (a caller's mistake)
    FAILED = "failed"  # it failed while it ran (its round's worker call failed, no room left)
    ABORTED = "aborted"  # cancelled before it finished


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    reason: str  # one line, for the caller's error message


@dataclass(frozen=True)
class Streamed:
    """New output of a streaming request, safe to show (never retracted later)."""

    request_id: str
    delta: StreamDelta


@dataclass(frozen=True)
class FirstToken:
    """The request's first generated token exists (once per request; for latency figures)."""

    request_id: str


@dataclass(frozen=True)
class Done:
    """The request is over and forgotten by the engine: its output, or why it has none."""

    request_id: str
    output: GenerationOutput | None
    failure: Failure | None = None


OutputEvent = Streamed | FirstToken | Done


@dataclass
class _Followed:
    tracker: RequestTracker
    stream: bool
    first_token: bool = False


class OutputProcessor:
    """Owns the trackers of the requests it follows (handed over by `submit`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._followed: dict[str, _Followed] = {}

    @property
    def following(self) -> int:
        """Requests submitted and not yet answered."""
        return len(self._followed)

    def submit(self, tracker: RequestTracker, stream: bool = False) -> list[OutputEvent]:
        """Submit the tracker's request to the engine and follow it; ``stream`` asks for a
        `Streamed` event whenever it has new output. A request the engine refuses is answered
        at once (a `Done` with a REFUSED failure); otherwise nothing is emitted yet."""
        req = tracker.request
        self.engine.submit(req)
        self._followed[req.id] = _Followed(tracker, stream)
        if req.status is RequestStatus.FAILED:
            return [self._answer(tracker, FailureKind.REFUSED)]
        return []

    def process(self, record: RoundRecord | None) -> list[OutputEvent]:
        """Events of the round just stepped (``record``; None when the step ran no round: then
        every followed request is looked at, as one may have failed without a round)."""
        if record is None:
            touched = list(self._followed)
        else:
            touched = list(dict.fromkeys(rid for rid, _, _ in record.chunks))
        events: list[OutputEvent] = []
        for rid in touched:
            followed = self._followed.get(rid)
            if followed is not None:
                events.extend(self._look(followed))
        return events

    def abort(self, request_id: str) -> Done | None:
        """Cancel a followed request (freeing its blocks and slots) and stop following it; its
        answer (ABORTED, or its result if it was already over), or None when not followed."""
        followed = self._followed.get(request_id)
        if followed is None:
            return None
        self.engine.abort(request_id)  # a no-op for a request that is already over
        observe(self.engine, followed.tracker)  # read what it generated before it ended
        return self._answer(followed.tracker)

    def drop(self, request_id: str) -> None:
        """Stop following a request without touching the engine (the engine itself has failed)."""
        self._followed.pop(request_id, None)

    def _look(self, followed: _Followed) -> list[OutputEvent]:
        tracker = followed.tracker
        observe(self.engine, tracker)  # a stop string ends the request here (`Engine.stop`)
        events: list[OutputEvent] = []
        if not followed.first_token and tracker.request.output:
            followed.first_token = True
            events.append(FirstToken(tracker.id))
        if followed.stream:
            delta = tracker.delta()
            if delta is not None:
                events.append(Streamed(tracker.id, delta))
        if tracker.done:
            events.append(self._answer(tracker))
        return events

    def _answer(self, tracker: RequestTracker, kind: FailureKind | None = None) -> Done:
        """The done request's answer; it is no longer followed and the engine forgets it."""
        req = tracker.request
        del self._followed[req.id]
        self.engine.forget(req.id)
        if req.status is RequestStatus.FINISHED:
            return Done(req.id, tracker.output())
        if kind is None:
            kind = FailureKind.ABORTED if req.status is RequestStatus.ABORTED else FailureKind.FAILED
        return Done(req.id, None, Failure(kind, req.error or f"request {req.status.value}"))


class EngineDriver:
    """The engine loop of every caller: step the engine, hand the round to the processor.

    ``on_round`` sees each round that ran (metrics, for instance) before its events are made.
    """

    def __init__(
        self,
        engine: Engine,
        processor: OutputProcessor,
        on_round: Callable[[RoundRecord], None] | None = None,
    ) -> None:
        self.engine, self.processor, self._on_round = engine, processor, on_round

    def step(self) -> list[OutputEvent]:
        """One engine step and its events."""
        return self._step()[1]

    def run(self) -> Iterator[OutputEvent]:
        """Step until every followed request is answered, yielding the events as they come.
        Stops early only if the engine runs out of work with requests still unanswered (then
        they are still followed: the caller aborts them)."""
        while self.processor.following:
            record, events = self._step()
            yield from events
            if record is None and not self.engine.has_work():
                return

    def _step(self) -> tuple[RoundRecord | None, list[OutputEvent]]:
        record = self.engine.step()
        if record is not None and self._on_round is not None:
            self._on_round(record)
        return record, self.processor.process(record)
