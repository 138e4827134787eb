"""The engine in its own thread beside the event loop.

The engine is single-threaded: only this thread touches it. HTTP handlers hand it commands
(submit, abort, a function to run between steps) through a queue guarded by a condition; it
applies them between rounds, so requests of many connections share the same rounds. Results go
back through each submission's ``sink`` (called on this thread; the server's sink hops onto the
event loop). Stepping the engine and turning rounds into answers is generation's one output path
(`EngineDriver`, `OutputProcessor`, as `LLM` uses it), which `Dispatch` (server/dispatch.py) drives
on this thread, its events to their sinks and the gauges published; this loop adds the commands,
the bounded queue, draining and failure handling. Answered requests are forgotten by the engine
and the engine keeps a bounded round history, so a long-running server does not grow.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from radixflow.engine.engine import Engine
from radixflow.engine.trace_file import NOT_WRITTEN
from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request
from radixflow.server.dispatch import Dispatch, Entry
from radixflow.server.events import Final, NotAccepting, QueueFull, Sink, send
from radixflow.server.liveness import Liveness
from radixflow.server.metrics import ServerMetrics

log = logging.getLogger("radixflow.server")
T = TypeVar("T")


# How long past the drain's end a stop waits for the engine thread to finish its round before it
# answers what is left itself and leaves the thread behind (`EngineLoop.stop`): the drain's end
# fails what is left at the next chance the thread gets, so a thread this late is stuck (a worker
# call that never returns), and its clients and the process would wait on it forever.
ENGINE_GRACE_S = 5.0
STUCK = "the server shut down before this request finished (the engine was stuck in a round)"


class EngineLoop:
    def __init__(
        self, engine: Engine, metrics: ServerMetrics, max_pending: int, liveness: Liveness | None = None
    ) -> None:
        """``liveness``: when the loop says it is stuck (`stalled`); its documented bounds if None."""
        self.engine, self.metrics, self.max_pending = engine, metrics, max_pending
        self.liveness = liveness or Liveness(budget_tokens=engine.scheduler.config.token_budget)
        self._cond = threading.Condition()
        self._commands: deque[Callable[[], None]] = deque()  # guarded by _cond
        # guarded by _cond: the engine thread took its last commands; a later one runs where given
        self._ended = False
        self._owed: set[Entry] = set()  # accepted and not yet answered or aborted (guarded by _cond)
        self._accepting = True  # guarded by _cond
        self._deadline: float | None = None  # draining: fail what is left at this monotonic time
        self._dispatch = Dispatch(engine, metrics, self.liveness, self._release)  # engine thread only
        self._thread = threading.Thread(target=self._run, name="radixflow-engine", daemon=True)
        self.abandoned = False  # a stop left the engine thread behind, stuck (`abandon`)
        self._finished = threading.Event()  # the engine thread ended, or was left behind

    # ------------------------------------------------------------ any thread
    def start(self) -> None:
        # before the engine thread runs (nothing else reads the engine yet): a scrape before the
        # first request sees the cache budget and every series at 0, not an empty budget
        self._dispatch.publish()
        self._thread.start()

    @property
    def failure(self) -> str | None:
        """Why the engine loop died, if it did."""
        return self._dispatch.failure

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.failure is None

    @property
    def stalled(self) -> str | None:
        """Why the engine thread, alive, looks stuck: requests wait and no round has finished
        for longer than `Liveness.bound_s` (a worker call that never returns, a deadlock). None
        while it makes progress or is idle. It may yet come back: this refuses nothing."""
        return self.liveness.stalled()

    @property
    def accepting(self) -> bool:
        """False once shutting down (draining) or failed."""
        with self._cond:
            return self._accepting and self.alive

    def submit(self, items: list[tuple[Request, RequestTracker]], sink: Sink, stream: bool) -> None:
        """Accept a submission's requests, all or none: `QueueFull` past ``max_pending``,
        `NotAccepting` while shutting down."""
        arrival = time.monotonic()
        with self._cond:
            self._check_room(len(items))
            entries = [Entry(tracker, i, sink, stream, arrival) for i, (_, tracker) in enumerate(items)]
            self._owed.update(entries)
            self._on_pending()  # now: the engine thread may be in a long round
            self._commands.append(lambda: self._dispatch.admit(entries))
            self._cond.notify()

    def check_open(self, adding: int = 1, reading: int = 0) -> None:
        """Raise what `submit` would raise for ``adding`` more requests now (`NotAccepting`,
        `QueueFull`), ``reading`` others, still being tokenized, counted as queued: a handler
        refuses them before tokenizing their prompts. `submit` decides still."""
        with self._cond:
            self._check_room(adding, reading)

    def _check_room(self, adding: int, reading: int = 0) -> None:  # under _cond
        if not self._accepting or self.failure is not None:
            raise NotAccepting(self.failure or "the server is shutting down")
        if len(self._owed) + reading + adding > self.max_pending:
            raise QueueFull.of(len(self._owed), adding, self.max_pending, reading)

    def abort(self, request_ids: list[str]) -> None:
        """Cancel these requests (a client went away): their locks, blocks and slots are freed."""
        self._command(lambda: self._dispatch.abort(request_ids))

    def call(self, fn: Callable[[Engine], T], timeout: float = 30.0) -> T:
        """Run ``fn(engine)`` on the engine thread between rounds and return its result."""
        return self.ask(fn).result(timeout)

    def ask(self, fn: Callable[[Engine], T]) -> concurrent.futures.Future[T]:
        """Run ``fn(engine)`` on the engine thread between rounds; its result comes in the future
        returned at once (a caller that cannot wait out a round does not block on it)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(self.engine))
            except BaseException as e:
                future.set_exception(e)

        self._command(run)
        return future

    def shutdown(self, drain_s: float) -> None:
        """Stop accepting; finish what was accepted within ``drain_s`` seconds, then fail the rest
        (status 503). Returns at once; `join` waits for the thread. A second call never extends
        the deadline."""
        with self._cond:
            self._accepting = False
            deadline = time.monotonic() + drain_s
            self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
            self._cond.notify()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the engine thread to end, or to be left behind by `abandon` (at most
        ``timeout`` seconds); True once it has: every accepted request has its answer then."""
        if self._thread.ident is None:  # never started
            return True
        if not self._finished.wait(timeout):
            return False
        if not self.abandoned:
            self._thread.join()  # past its last line: a moment
        return True

    def stop(self, drain_s: float, grace_s: float = ENGINE_GRACE_S) -> bool:
        """`shutdown` and wait: True once the engine thread ended; False when it was still in a
        round ``grace_s`` after the drain's end (a second `shutdown` brings that closer), so its
        requests were answered here (`abandon`)."""
        self.shutdown(drain_s)
        while not self.join(0.1):
            with self._cond:
                due = self._deadline is not None and time.monotonic() >= self._deadline + grace_s
            if due:
                self.abandon()
                return False
        return not self.abandoned

    def abandon(self, message: str = STUCK) -> None:
        """Answer every accepted, unanswered request with a 503 now, from this thread, and leave
        the engine thread behind: it is stuck in a round past the drain, and its clients would
        wait on it forever. Whatever it answers if it comes back goes nowhere; `join` returns."""
        with self._cond:
            self._accepting, self.abandoned = False, True
            owed = list(self._owed)
            self._owed.clear()
            self._on_pending()
        for entry in owed:
            self.metrics.on_done(entry.tracker.request, time.monotonic() - entry.arrival, 503)
            send(entry.sink, Final(entry.index, None, 503, message))
        self._finished.set()

    def _command(self, fn: Callable[[], None]) -> None:
        with self._cond:
            if not self._ended:
                self._commands.append(fn)
                self._cond.notify()
                return
        fn()  # the engine thread has ended: no other thread touches the engine now

    # ------------------------------------------------------------ engine thread
    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._finished.set()

    def _serve(self) -> None:
        try:
            while self._next_commands():
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    self._dispatch.fail_all(503, "the server shut down before this request finished")
                if self.engine.has_work():
                    self._dispatch.step()
        # the engine is in an unknown state: fail everything, refuse more. Whatever ended it: a
        # plugin's SystemExit, which is no Exception, left every client waiting forever
        except BaseException as e:
            log.exception("engine loop failed")
            self._dispatch.fail(f"the engine failed: {type(e).__name__}: {e}")
        with self._cond:
            self._accepting, self._ended = False, True
            pending = list(self._commands)
            self._commands.clear()
        for command in pending:  # `call`s waiting for an answer get one; admissions are failed
            command()
        self._flush_trace()

    def _flush_trace(self) -> None:
        """Write out the dependency trace (--trace-out): every few seconds while serving (the
        engine's rounds), whenever the loop goes idle and at the end."""
        try:
            self.engine.flush_events()
        except OSError as e:
            log.warning("radixflow: warning: %s: %s", NOT_WRITTEN, e.strerror or e)

    def _next_commands(self) -> bool:
        """Wait for something to do and run the commands that came in. False: time to stop."""
        if not self.engine.has_work():  # idle, maybe for long: what the trace holds goes to disk
            self._flush_trace()
        with self._cond:
            while not self._commands and not self.engine.has_work():
                if not self._accepting and not self._dispatch.active:
                    return False
                self._cond.wait(timeout=self._wait_s())
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    break
            commands = list(self._commands)
            self._commands.clear()
        for i, command in enumerate(commands):
            try:
                command()
            except BaseException:
                # the loop fails; the commands after this one are not dropped: `_run` runs them
                # once it has failed (their admissions are answered with the failure)
                with self._cond:
                    self._commands.extendleft(reversed(commands[i + 1 :]))
                raise
        return True

    def _wait_s(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def _release(self, entry: Entry, error: int | None, counted: bool = True) -> bool:
        """The entry's request left the engine (the processor forgot it there): count it, by the
        status of its ``error`` answer where it got one (not aborted, though the drain aborts it),
        unless not ``counted`` (`Dispatch` counts a refusal by its request). False: `abandon`
        answered it already."""
        with self._cond:
            if entry not in self._owed:
                return False
            self._owed.discard(entry)
            self._on_pending()
        if counted:
            self.metrics.on_done(entry.tracker.request, time.monotonic() - entry.arrival, error)
        return True

    def _on_pending(self) -> None:  # under _cond
        self.metrics.on_pending(len(self._owed))
        self.liveness.on_pending(len(self._owed))
