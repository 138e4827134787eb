"""One thread at a time in the engine (`between_rounds`).

The engine is single-threaded: a round builds, runs and takes its results with no lock of its
own. A caller stepping it in one thread and ending a request from another (a cancel button's
`Engine.stop` beside an `LLM.generate`) ended it in the middle of a round, whose update then
raised KeyError, every request's results lost. So `step` and each method that changes requests
hold the engine's round lock: from another thread they wait for the round running to end, and
the request ends between rounds, as it would from the stepping thread. Re-entrant: the stepping
thread's own calls (a stop string seen by an observer) take it again. Uncontended, it costs a
lock's acquire per call (a round costs far more); the server never contends for it (one thread
steps its engine and runs every command, `server/loop.py`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

# the methods that run under the lock: the round, and each one that changes requests
GUARDED = ("step", "submit", "abort", "stop", "forget", "check_integrity")


def between_rounds(cls: T) -> T:
    """``cls`` (the engine) with a round lock made in its ``__init__`` and held by `GUARDED`."""
    made = cls.__init__

    @functools.wraps(made)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        self._round_lock = threading.RLock()
        made(self, *args, **kwargs)

    cls.__init__ = init  # type: ignore[misc]
    for name in GUARDED:
        setattr(cls, name, _held(getattr(cls, name)))
    return cls


def _held(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._round_lock:
            return method(self, *args, **kwargs)

    return held
