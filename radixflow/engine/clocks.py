"""The engine clock of a real runner: what a measured round advances `Engine.now` by.

``wall``: the wall time of the worker call, what a user waits. ``cpu``: the CPU time of the thread
that runs the worker call, so other load on the machine (which stretches wall time while this
thread waits for a core) does not move the figures. The sim's clock is modelled, not read.

Why the calling thread's CPU time, and not the whole process's or the sum over torch's threads:
the caller runs the round's serial part (Python, scheduling of kernels) and is the master of each
of torch's parallel (OpenMP) regions, where it computes its own share. Its CPU time is the serial
part plus one share of each parallel part: on an idle machine, the round's wall time when the
shares are balanced. The sum over every thread counts a parallel region once per thread (a round
on 4 threads would read 4x as long), and `time.process_time` also counts threads that are not
the round's (an HTTP server's). Both readings ignore time spent descheduled. Exact with one torch
thread; with more, threads that spin while waiting at a region's end (OpenMP's default, active
wait) burn CPU time that grows with the other load, so there the clock is honest only with
``OMP_WAIT_POLICY=passive`` (`spin_warning`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundClock:
    name: str
    read: Callable[[], float]  # seconds; only differences between two reads in one thread count
    means: str  # what a second of it is (the trace's ``clock_means``)


ROUND_CLOCKS: dict[str, RoundClock] = {
    "wall": RoundClock(
        "wall",
        time.perf_counter,
        "measured wall time of each worker call, laid end to end (host time between calls is not in it)",
    ),
    "cpu": RoundClock(
        "cpu",
        time.thread_time,
        "CPU time of the thread running each worker call, laid end to end (time spent waiting "
        "for a core under other load is not in it)",
    ),
}


def round_clock(name: str) -> RoundClock:
    """The clock registered as ``name``; KeyError naming the known ones for any other."""
    if name not in ROUND_CLOCKS:
        raise KeyError(f"unknown clock {name!r} (known: {', '.join(ROUND_CLOCKS)})")
    return ROUND_CLOCKS[name]


def spin_warning(clock: str, threads: int, one_thread: str = "--torch-threads 1") -> str | None:
    """Why ``clock`` may read load-dependent figures with ``threads`` compute threads (None: it
    will not): the CPU clock with more than one thread under OpenMP's default active wait.
    ``one_thread``: the setting of one thread, as the door spells it."""
    if clock != "cpu" or threads <= 1:
        return None
    if os.environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive":
        return None
    return (
        f"clock cpu with {threads} torch threads counts their spin-waits, which grow with other "
        f"load: set OMP_WAIT_POLICY=passive before starting, or {one_thread}"
    )
