"""SIGTERM and SIGHUP taken as a Ctrl-C (`SigtermAsCtrlC`), for the commands that do not handle
them themselves.

Python leaves both to the system, which ends the process at once (exit 143, or 129 for a hangup:
the terminal or the ssh session closed): no message, a result file's rows not said where they
are, the engine's trace not written, a bench's finished policies lost. Taken as a Ctrl-C they go
the same way a Ctrl-C goes, held off where the engine's bookkeeping changes (`engine.interrupts`),
through every ``finally``, to the CLI's one line and its exit code (`ended`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from radixflow.engine.interrupts import ctrl_c_handler

# the signals taken as a Ctrl-C, and what the command's line says of each
TAKEN = {signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}


class SigtermAsCtrlC:
    """While entered (on the main thread, where Python delivers signals), a SIGTERM or SIGHUP is
    handed to the Ctrl-C handler of the moment (Python's, or one holding it off, or asyncio's) as
    a SIGINT would be; ``came`` says one came, ``signum`` which (the first). Leaving restores the
    handlers it found. A signal ignored when it is entered (``nohup``'s SIGHUP) stays ignored, and
    one whose handler was set outside Python keeps it."""

    def __init__(self) -> None:
        self.came = False
        self.signum: int | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> SigtermAsCtrlC:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in TAKEN:
            # a process started with the signal ignored (by whoever started it) keeps ignoring it;
            # one handled outside Python (None) keeps that handler: Python could not restore it
            if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                self._before[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self.came:
            self.came, self.signum = True, signum
        # SIGINT ignored (a background job) or the system's: still stop, at the engine's safe point
        ctrl_c_handler()(signal.SIGINT, frame)

    def ended(self) -> tuple[str, int]:
        """What the line of a command a Ctrl-C ended says, and its exit code: the signal's, where
        one of those taken as a Ctrl-C came (128 + its number, as a shell reports it)."""
        if self.signum is None:
            return "interrupted", 128 + signal.SIGINT
        return TAKEN[signal.Signals(self.signum)], 128 + self.signum

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, before in self._before.items():
            signal.signal(sig, before)
        self._before.clear()
