"""The dependency trace: an engine's rounds as Chrome/Perfetto trace JSON (Trace Event Format).

One `TraceFile` per output path, one `TraceRecorder` (an `EngineEvents` observer) per engine: a
process of the trace, named after its policy, so a benchmark's policies lie side by side. In it:

- track 0, ``rounds``: each round as a complete event (``X``) with its figures as args (with
  ``predicted_us`` and ``predicted_from`` where the runner predicted its worker call, as the torch
  runner does, and ``wall_us`` where the engine clock is not the wall's), a
  counter (``C``) of its tokens, bubble tokens and blocked consumers, and a ``bubble`` instant
  where token budget went unused while feasible work waited;
- one track per request: ``arrived``, ``queued`` (arrival to first chunk), every chunk it ran
  (``prefill`` / ``decode``, args: positions, restore slot, checkpoints placed: its own state saved
  between chunks is none), ``parked`` for
  a round spent blocked on a producer (args: the producer) and ``woken`` when it ended, policy
  decisions (instants such as ``promote`` / ``follow`` / ``recompute``, see `radixflow.scheduler.events`) and
  ``finished``;
- flows (``s`` → ``f``) from the chunk that wrote a checkpoint to each chunk of another request
  that restored it: producer to consumer, in one round for a follower (``follow``).

Timestamps and durations are µs of engine time (`Engine.now`): the sim clock on the sim runner,
measured wall or CPU time of the worker calls on a real one (``otherData.clock`` says which). How
the file is written: `radixflow.engine.trace_file`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from radixflow.engine.records import RoundRecord
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request, RequestStatus

Event = dict[str, Any]


class TraceSink(Protocol):
    """Where a recorder's events go (`radixflow.engine.trace_file.TraceFile`)."""

    def add(self, event: Event) -> None:
        """Queue one event for the next flush."""

    def flow_id(self) -> int:
        """A fresh id for a flow (``s`` → ``f``) between two chunks."""

    def tick(self) -> None:
        """Flush if one is due (a failure stops the trace, not the run)."""

    def flush(self) -> None:
        """Write every queued event now (raises OSError)."""


@dataclass(frozen=True)
class _Writer:
    """The chunk that last wrote a state slot (where a flow to its restorer starts)."""

    request_id: str
    tid: int
    ts: float


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _json_value(value: object) -> object:
    """A decision's detail as JSON: non-finite numbers and other objects as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return str(value)


class TraceRecorder:
    """Records one engine's run into a `TraceSink` (implements `EngineEvents`)."""

    def __init__(self, file: TraceSink, pid: int, label: str) -> None:
        self._file, self.pid = file, pid
        self._tids: dict[str, int] = {}  # request id -> its track (dropped when it finishes)
        self._next_tid = itertools.count(1)
        self._arrival: dict[str, float] = {}  # until the request's first chunk
        self._prompt_len: dict[str, int] = {}
        self._slots: dict[int, _Writer] = {}
        self._parked: list[tuple[str, str]] = []  # this round's, as the scheduler reports them
        self._woken: list[tuple[str, str]] = []
        self._decisions: list[tuple[str, str, dict[str, object]]] = []
        self._meta("process_name", 0, {"name": label})
        self._meta("process_sort_index", 0, {"sort_index": pid})
        self._meta("thread_name", 0, {"name": "rounds"})

    # ------------------------------------------------------------------ scheduler events
    def parked(self, consumer: str, producer: str) -> None:
        self._parked.append((consumer, producer))

    def woken(self, consumer: str, producer: str) -> None:
        self._woken.append((consumer, producer))

    def decision(self, kind: str, request_id: str, **details: object) -> None:
        self._decisions.append((kind, request_id, {k: _json_value(v) for k, v in details.items()}))

    # ------------------------------------------------------------------ engine events
    def arrived(self, request: Request) -> None:
        ts = _us(request.arrival_s)
        self._arrival[request.id] = ts
        # a prompt refused at submit may be no list of tokens (a number, an iterator, a text, a
        # dict): its track shows the refusal all the same (null tokens), where taking its length
        # raised out of submit, or gave a text's characters as its tokens
        tokens = len(request.prompt) if isinstance(request.prompt, list | tuple) else None
        if tokens is not None:
            self._prompt_len[request.id] = tokens
        self._instant("arrived", "request", self._tid(request.id), ts, {"prompt_tokens": tokens})

    def ended(self, request: Request) -> None:
        rid = request.id
        self._arrival.pop(rid, None)
        self._prompt_len.pop(rid, None)
        tid = self._tids.pop(rid, None)
        if tid is None:  # it never arrived: it has no track
            return
        args: dict[str, object] = {}
        if request.status is RequestStatus.ABORTED:
            args["aborted"] = True
        elif request.status is RequestStatus.FAILED:  # refused at submit
            args["error"] = request.error
        end = request.arrival_s if request.finish_s is None else request.finish_s
        self._instant("finished", "request", tid, _us(end), args)

    def round(self, record: RoundRecord, out: SchedulerOutput, finished: Sequence[str]) -> None:
        # the end from the engine's own sum, as the next round's start is: each rounded on its
        # own, a round could end a ns after the next began, and a viewer nests the next in it
        ts, end = _us(record.start_s), _us(record.start_s + record.duration_s)
        dur = round(end - ts, 3)
        mid = round(ts + dur / 2, 3)  # flows bind at a chunk's middle
        self._round(record, ts, dur)
        # slots saved by earlier chunks of this round: a follower restores from one of them (the
        # runner runs it in a later wave); a chunk restoring its own slot reads the older state
        saved: dict[int, _Writer] = {}
        for chunk in out.chunks:
            self._chunk(chunk, ts, dur)
            if record.error is not None:  # rolled back: it restored nothing and saved nothing
                continue
            self._restored(chunk, mid, saved)
            writer = _Writer(chunk.request_id, self._tid(chunk.request_id), mid)
            for snap in chunk.snapshots:
                saved.setdefault(snap.slot, writer)
        self._slots.update(saved)
        for consumer, producer in self._parked:
            self._complete("parked", "dependency", self._tid(consumer), ts, dur, {"producer": producer})
        for consumer, producer in self._woken:
            self._instant("woken", "dependency", self._tid(consumer), end, {"producer": producer})
        for kind, rid, details in self._decisions:
            self._instant(kind, "decision", self._tid(rid), ts, details)
        self._parked, self._woken, self._decisions = [], [], []
        for rid in finished:
            args = {"error": record.error} if record.error is not None else {}
            self._instant("finished", "request", self._tid(rid), end, args)
            self._tids.pop(rid, None)
            self._prompt_len.pop(rid, None)
        self._file.tick()

    def flush(self) -> None:
        self._file.flush()

    # ------------------------------------------------------------------ events
    def _round(self, record: RoundRecord, ts: float, dur: float) -> None:
        args: dict[str, object] = {
            "tokens": record.tokens,
            "requests": record.requests,
            "blocked": record.blocked,
            "bubble_tokens": record.bubble_tokens,
            "stop_reason": record.stop_reason,
            "worker_call_us": _us(record.worker_call_s),
        }
        if record.predicted_s is not None:  # the runner's own prediction of the worker call
            args["predicted_us"] = _us(record.predicted_s)
            args["predicted_from"] = record.predicted_from  # measured rounds it had learned from
        if record.wall_s is not None:  # the engine clock is another (cpu): the call's wall time
            args["wall_us"] = _us(record.wall_s)
        name = f"round {record.index}"
        if record.error is not None:
            args["error"], name = record.error, f"{name} (rolled back)"
        self._complete(name, "round", 0, ts, dur, args)
        counts = {"tokens": record.tokens, "bubble_tokens": record.bubble_tokens, "blocked": record.blocked}
        self._file.add(
            {"name": "round", "cat": "round", "ph": "C", "ts": ts, "pid": self.pid, "tid": 0, "args": counts}
        )
        if record.bubble_tokens > 0:
            self._instant("bubble", "round", 0, ts, {"tokens": record.bubble_tokens})

    def _chunk(self, chunk: ScheduledChunk, ts: float, dur: float) -> None:
        rid = chunk.request_id
        tid = self._tid(rid)
        arrival = self._arrival.pop(rid, None)
        if arrival is not None:
            self._complete("queued", "request", tid, arrival, max(round(ts - arrival, 3), 0.0), {})
        prefill = chunk.start < self._prompt_len.get(rid, len(chunk.tokens))
        args = {
            "start": chunk.start,
            "end": chunk.end,
            "restore_slot": chunk.restore_slot,
            "checkpoints": [s.position for s in chunk.snapshots if not s.own],
            "sample": chunk.sample,
        }
        self._complete("prefill" if prefill else "decode", "chunk", tid, ts, dur, args)

    def _restored(self, chunk: ScheduledChunk, mid: float, saved: dict[int, _Writer]) -> None:
        """A flow to ``chunk`` from the chunk that wrote the state it restored (this round's
        ``saved``, else an earlier round's), where another request wrote it."""
        slot = chunk.restore_slot
        writer = None if slot is None else saved.get(slot) or self._slots.get(slot)
        if writer is not None and writer.request_id != chunk.request_id:
            self._flow(writer, self._tid(chunk.request_id), mid, chunk.start)

    def _flow(self, writer: _Writer, tid: int, ts: float, position: int) -> None:
        """From the writer's chunk to the restoring one (both bound to their enclosing slices)."""
        flow = {"name": "checkpoint", "cat": "reuse", "id": self._file.flow_id(), "pid": self.pid}
        self._file.add(
            {**flow, "ph": "s", "ts": writer.ts, "tid": writer.tid, "args": {"position": position}}
        )
        self._file.add({**flow, "ph": "f", "bp": "e", "ts": ts, "tid": tid})

    def _tid(self, request_id: str) -> int:
        tid = self._tids.get(request_id)
        if tid is None:
            tid = self._tids[request_id] = next(self._next_tid)
            self._meta("thread_name", tid, {"name": request_id})
        return tid

    def _complete(
        self, name: str, cat: str, tid: int, ts: float, dur: float, args: dict[str, object]
    ) -> None:
        event = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": self.pid, "tid": tid}
        self._file.add({**event, "args": args})

    def _instant(self, name: str, cat: str, tid: int, ts: float, args: dict[str, object]) -> None:
        event = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": self.pid, "tid": tid}
        self._file.add({**event, "args": args})

    def _meta(self, name: str, tid: int, args: dict[str, object]) -> None:
        self._file.add({"name": name, "ph": "M", "pid": self.pid, "tid": tid, "args": args})
