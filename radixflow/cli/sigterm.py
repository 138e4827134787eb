"""SIGTERM taken as a Ctrl-C (`SigtermAsCtrlC`), for the commands that do not handle it themselves.

Python leaves SIGTERM to the system, which ends the process at once (exit 143): no message, a
result file's rows not said where they are, the engine's trace not written. Taken as a Ctrl-C it
goes the same way a Ctrl-C goes, held off where the engine's bookkeeping changes
(`engine.interrupts`), through every ``finally``, to the CLI's one line and its exit code.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class SigtermAsCtrlC:
    """While entered (on the main thread, where Python delivers signals), a SIGTERM is handed to
    the Ctrl-C handler of the moment (Python's, or one holding it off, or asyncio's) as a SIGINT
    would be; ``came`` says one came. Leaving restores the handler it found. A SIGTERM ignored
    when it is entered stays ignored."""

    def __init__(self) -> None:
        self.came = False
        self._before: Any = None
        self._installed = False

    def __enter__(self) -> SigtermAsCtrlC:
        main = threading.current_thread() is threading.main_thread()
        # a process started with SIGTERM ignored (by whoever started it) keeps ignoring it
        self._installed = main and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        if self._installed:
            self._before = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.came = True
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIGINT ignored (a background job) or the system's: still stop
            handler = signal.default_int_handler
        handler(signal.SIGINT, frame)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._before)
            self._installed = False
