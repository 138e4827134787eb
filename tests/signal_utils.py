"""A time limit of a test's own, inside the one pytest-timeout sets for the whole test."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts the call on the main thread. pytest-timeout's
    signal method bounds the whole test with the same timer: it is armed again on the way out
    with what is left of it (cancelled, the rest of the test could hang for good)."""

    def on_alarm(*_: object) -> None:
        raise TimeoutError(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer > 0:  # past its end already: it fires at once
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 0.001))
