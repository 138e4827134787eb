"""Ctrl-C held off while the engine's bookkeeping changes (`HeldInterrupt`).

A SIGINT becomes a KeyboardInterrupt at whatever line Python is running. Inside the worker call
that is safe: the engine rolls the round back. Inside the scheduler, building a round or taking
its results, it would leave a request half admitted (KV promised to it, a slot held, a round
half applied), which nothing can undo. So those parts run with the signal noted, not raised, and
the engine raises it once they are done, after rolling back a round it will not run. The worker
call alone lets it through (`HeldInterrupt.let_through`), from inside the hold: there is no moment
between the two where a Ctrl-C is neither held nor the worker call's.

Where SIGINT is ignored (a background job of a script, ``cmd &``) a SIGTERM or SIGHUP still stops
a command as a Ctrl-C (`cli.sigterm`); the hold then leaves SIGINT ignored and is what such a
signal is handed to instead (`ctrl_c_handler`), so it waits for the same safe points.
"""

from __future__ import annotations

import _signal  # CPython's C module under `signal`
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType

Handler = Callable[[int, FrameType | None], object]
# where SIGINT is ignored: the Ctrl-C handler of the moment, which SIGINT itself never reaches
_stand_in: Handler | None = None
# `signal.signal`/`getsignal` wrap each handler in and out of an enum (a failed enum lookup per
# callable): a held step calls them 5 times (docs/policies.md, "Decode steps"). The hold only sets
# Python callables on SIGINT, so it calls the C functions beneath them (same effect, ints back).
_SIGINT = int(signal.SIGINT)
_raw_signal, _raw_getsignal = _signal.signal, _signal.getsignal


def ctrl_c_handler() -> Handler:
    """What a signal taken as a Ctrl-C is handed to: SIGINT's handler, or where it has none of
    Python's (ignored: a background job) the hold in force, else Python's own (raise now)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        return handler
    return _stand_in or signal.default_int_handler


class HeldInterrupt:
    """While entered, a SIGINT is noted (`came`) instead of raised. Only on the main thread (the
    one Python delivers signals to) and only where Python's own Ctrl-C handler is installed, or
    SIGINT is ignored (then only a signal taken as a Ctrl-C is held: `ctrl_c_handler`), with no
    hold in force already: a program with a handler of its own (a server's) keeps it."""

    def __init__(self) -> None:
        self.came = False
        self._holding = False
        self._ignored = False  # SIGINT ignored: the hold is `_stand_in`, SIGINT left alone
        self._found: Handler | None = None  # `_stand_in` as the hold found it

    def __enter__(self) -> HeldInterrupt:
        handler = _raw_getsignal(_SIGINT)  # SIG_IGN comes back as a plain int: compared with ==
        # as where SIGINT has Python's handler: none held yet, or a worker call let through
        self._found = _stand_in
        self._ignored = handler == signal.SIG_IGN and _stand_in in (None, signal.default_int_handler)
        default = handler is signal.default_int_handler or self._ignored
        self._holding = default and threading.current_thread() is threading.main_thread()
        if self._holding:
            self._set(self._note)
        return self

    def _set(self, handler: Handler | None) -> None:
        """``handler`` as the Ctrl-C handler of the moment (None: the hold's ends)."""
        global _stand_in
        if self._ignored:
            _stand_in = handler or self._found
        else:
            _raw_signal(_SIGINT, handler or signal.default_int_handler)

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
        self._set(signal.default_int_handler)
        try:
            if self.came:
                self.came = False
                raise KeyboardInterrupt
            yield
        finally:
            self._set(self._note)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._holding:
            self._set(None)
            self._holding = False
