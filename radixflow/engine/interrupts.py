"""Ctrl-C held off while the engine's bookkeeping changes (`HeldInterrupt`).

A SIGINT becomes a KeyboardInterrupt at whatever line Python is running. Inside the worker call
that is safe: the engine rolls the round back. Inside the scheduler, building a round or taking
its results, it would leave a request half admitted (KV promised to it, a slot held, a round
half applied), which nothing can undo. So those parts run with the signal noted, not raised, and
the engine raises it once they are done, after rolling back a round it will not run. The worker
call alone lets it through (`HeldInterrupt.let_through`), from inside the hold: there is no moment
between the two where a Ctrl-C is neither held nor the worker call's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType


class HeldInterrupt:
    """While entered, a SIGINT is noted (`came`) instead of raised. Only on the main thread (the
    one Python delivers signals to) and only where Python's own Ctrl-C handler is installed: a
    program with a handler of its own (a server's) keeps it."""

    def __init__(self) -> None:
        self.came = False
        self._holding = False

    def __enter__(self) -> HeldInterrupt:
        default = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        self._holding = default and threading.current_thread() is threading.main_thread()
        if self._holding:
            signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.came = True

    @contextmanager
    def let_through(self) -> Iterator[None]:
        """Within the hold, a stretch where a Ctrl-C is raised as usual: one noted so far is raised
        as it starts, and the hold is back before it ends, so any KeyboardInterrupt that ends the
        hold's part is raised inside it, where the caller handles it."""
        if not self._holding:
            yield
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            if self.came:
                self.came = False
                raise KeyboardInterrupt
            yield
        finally:
            signal.signal(signal.SIGINT, self._note)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._holding:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._holding = False
