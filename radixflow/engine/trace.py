"""The dependency trace: an engine's rounds as Chrome/Perfetto trace JSON (Trace Event Format).

One `TraceFile` per output path, one `TraceRecorder` (an `EngineEvents` observer) per engine: a
process of the trace, named after its policy, so a benchmark's policies lie side by side. In it:

- track 0, ``rounds``: each round as a complete event (``X``) with its figures as args (with
  ``predicted_us`` and ``predicted_from`` where the runner predicted its worker call, as the torch
  runner does, and ``wall_us`` where the engine clock is not the wall's), a
  counter (``C``) of its tokens, bubble tokens and blocked consumers, and a ``bubble`` instant
  where token budget went unused while feasible work waited;
- one track per request: ``arrived``, ``queued`` (arrival to first chunk), every chunk it ran
  (``prefill`` / ``decode``, args: positions, restore slot, checkpoints written), ``parked`` for
  a round spent blocked on a producer (args: the producer) and ``woken`` when it ended, policy
  decisions (instants such as ``promote`` / ``follow`` / ``recompute``, see `radixflow.scheduler.events`) and
  ``finished``;
- flows (``s`` → ``f``) from the chunk that wrote a checkpoint to each chunk of another request
  that restored it: producer to consumer, in one round for a follower (``follow``).

Timestamps and durations are µs of engine time (`Engine.now`): the sim clock on the sim runner,
measured wall or CPU time of the worker calls on a real one (``otherData.clock`` says which). The
file is valid JSON after every flush (events go in before the closing brackets, which are rewritten
after them), and flushes come every few seconds, so a crash loses only the last ones. Nothing is
written before a run records its first event: a run refused before that leaves an older trace
at the path as it was.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixflow.engine.clocks import ROUND_CLOCKS
from radixflow.engine.records import RoundRecord
from radixflow.files import write_whole
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request, RequestStatus

log = logging.getLogger("radixflow.trace")
CLOCKS = {"sim": "the sim runner's modelled clock"} | {c.name: c.means for c in ROUND_CLOCKS.values()}
FLUSH_EVERY_S = 5.0
FLUSH_EVENTS = 50_000  # or sooner, when this many wait
_CLOSE = b"\n]}\n"
NOT_WRITTEN = "the trace was not written"  # how a door that goes on without its trace warns of it
Event = dict[str, Any]


class RewrittenError(OSError):
    """The trace file is no longer as its writer left it: another writer replaced it and writes
    there (two runs given one path); writing on at this writer's offsets would interleave the two
    into a file that is no JSON."""


class TraceFile:
    """A trace JSON file written as it goes. Opening it writes nothing: the file (an older trace
    there included) is left as it is until the first flush with an event of a run in it, which
    writes the header and those events whole (`write_whole`: a temporary file renamed over the
    old one), so a run refused or stopped before anything ran loses no earlier trace. Opening
    raises OSError where that write could not be made. After a write fails it records nothing
    more (``error`` says why)."""

    def __init__(self, path: Path, metadata: Mapping[str, object]) -> None:
        self.path = path
        self.error: str | None = None
        self.failure: OSError | None = None  # the failed write (``error`` says it in words)
        self._pending: list[Event] = []
        self._written = 0
        self._pids = itertools.count(1)
        self._flows = itertools.count(1)
        self._last_flush = time.monotonic()
        head = json.dumps({"displayTimeUnit": "ms", "otherData": dict(metadata)}, allow_nan=False)
        self._head = head[:-1].encode() + b', "traceEvents": [\n'
        # where the next events (then the closing brackets) go; None: nothing written yet
        self._end: int | None = None
        self._file_id: tuple[int, int] | None = None  # (device, inode) of the file the first flush made
        _check_writable(path)

    @property
    def written(self) -> bool:
        """Whether this trace has written its file (before that, an older file there is as it was)."""
        return self._end is not None

    def recorder(self, label: str) -> TraceRecorder:
        """The observer of one engine: a new process of the trace named ``label``."""
        return TraceRecorder(self, next(self._pids), label)

    def flow_id(self) -> int:
        return next(self._flows)

    def add(self, event: Event) -> None:
        if self.error is None:
            self._pending.append(event)

    def tick(self) -> None:
        """Flush when the last flush is a few seconds old or many events wait; a failure is
        logged (the run goes on without its trace)."""
        due = time.monotonic() - self._last_flush >= FLUSH_EVERY_S or len(self._pending) >= FLUSH_EVENTS
        if due:
            try:
                self.flush()
            except OSError:
                log.warning("trace stopped: %s", self.error)

    def flush(self) -> None:
        """Append the waiting events; the file stays valid JSON (raises OSError). Names of
        processes and tracks alone are not written: an engine that ran nothing leaves the file
        as it was."""
        self._last_flush = time.monotonic()
        if not self._pending or self.error is not None:
            return
        if self._end is None and all(e["ph"] == "M" for e in self._pending):
            return
        events, self._pending = self._pending, []
        body = ",\n".join(json.dumps(e, allow_nan=False) for e in events).encode()
        try:
            end = self._append(body) if self._end is not None else self._first(body)
        except RewrittenError as e:  # the other writer's file now: left as it is
            self.error, self.failure = f"cannot write {self.path}: {e}", e
            raise
        except OSError as e:
            self.error, self.failure = f"cannot write {self.path}: {e.strerror or e}", e
            if self._end is not None:  # a failed first write left the old file (or none) as it was
                self._close_at_last_flush()
            raise
        except BaseException:  # a Ctrl-C part way: cut back as for a full disk, its events kept
            if self._end is not None:  # for the flush the run makes as it stops (`trace_kept`)
                self._close_at_last_flush()
            self._pending = events + self._pending
            raise
        self._end, self._written = end, self._written + len(events)

    def _first(self, body: bytes) -> int:
        """The header and the first events, written whole over whatever the path held; where
        the next events go."""
        write_whole(self.path, (self._head + body + _CLOSE).decode())
        made = os.stat(self.path)
        self._file_id = (made.st_dev, made.st_ino)
        return len(self._head) + len(body)

    def _append(self, body: bytes) -> int:
        """``body`` after the events written so far, in place; where the next events go."""
        assert self._end is not None, "the first flush writes the file whole"
        with open(self.path, "r+b") as f:
            held = os.fstat(f.fileno())
            if (held.st_dev, held.st_ino) != self._file_id or held.st_size != self._end + len(_CLOSE):
                raise RewrittenError("it was rewritten by another writer (another run given this path?)")
            f.seek(self._end)
            f.write((b",\n" if self._written else b"") + body)
            end = f.tell()
            f.write(_CLOSE)
            f.truncate()
        return end

    def _close_at_last_flush(self) -> None:
        """After a failed write (a full disk part way through): cut the events it wrote in part
        and close the brackets after the last flush's, so the file stays valid JSON. Truncating
        frees the space the closing brackets need; if even that fails, nothing more can be done."""
        assert self._end is not None, "only a file this trace wrote is cut back"
        try:
            with open(self.path, "r+b") as f:
                f.seek(self._end)
                f.write(_CLOSE)
                f.truncate()
        except OSError:
            pass


def _check_writable(path: Path) -> None:
    """OSError where the first flush could not write ``path``: no directory to make it in, or one
    (or a file there) this process may not write. Checked, not opened: opening would empty an
    older trace before the run is known to run."""
    target = path.resolve()
    folder = target.parent
    if not folder.is_dir():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(folder))
    for where, mode in ((folder, os.W_OK | os.X_OK), (target, os.W_OK)):
        if where.exists() and not os.access(where, mode):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(where))


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
    """Records one engine's run into a `TraceFile` (implements `EngineEvents`)."""

    def __init__(self, file: TraceFile, pid: int, label: str) -> None:
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
        self._prompt_len[request.id] = len(request.prompt)
        self._instant("arrived", "request", self._tid(request.id), ts, {"prompt_tokens": len(request.prompt)})

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
            "checkpoints": [s.position for s in chunk.snapshots],
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
