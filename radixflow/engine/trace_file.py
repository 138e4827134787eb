"""The file of a dependency trace (`radixflow.engine.trace`): Chrome/Perfetto trace JSON written
as a run goes.

The file is valid JSON after every flush (events go in before the closing brackets, which are
rewritten after them), and flushes come every few seconds, so a crash loses only the last ones.
Nothing is written before a run records its first event: a run refused before that leaves an
older trace at the path as it was.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from radixflow.engine.clocks import ROUND_CLOCKS
from radixflow.engine.trace import Event, TraceRecorder
from radixflow.files import write_whole

log = logging.getLogger("radixflow.trace")

CLOCKS = {"sim": "the sim runner's modelled clock"} | {c.name: c.means for c in ROUND_CLOCKS.values()}
FLUSH_EVERY_S = 5.0
FLUSH_EVENTS = 50_000  # or sooner, when this many wait
_CLOSE = b"\n]}\n"
NOT_WRITTEN = "the trace was not written"  # how a door that goes on without its trace warns of it


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
                log.warning("radixflow: warning: trace stopped: %s", self.error)

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
            events = (b",\n" if self._written else b"") + body
            f.seek(self._end)
            # one write, the brackets in it: a process killed between two left no JSON
            f.write(events + _CLOSE)
            f.truncate()
        return self._end + len(events)

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
