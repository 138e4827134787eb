"""What the engine answers about its work: one record per round, and the outcome of an abort or
stop. Kept apart from the engine so observers (trace, metrics, reports) can name them without
importing the engine itself."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class RoundRecord:
    index: int
    start_s: float
    duration_s: float
    worker_call_s: float
    tokens: int
    requests: int
    bubble_tokens: int
    blocked: int  # consumers left waiting on a PENDING checkpoint this round
    stop_reason: str
    chunks: tuple[tuple[str, int, int], ...]  # (request id, start, end)
    error: str | None = None  # the worker call failed and the round was rolled back
    predicted_s: float | None = None  # the runner's prediction of worker_call_s (`RoundResult`)
    predicted_from: int = 0  # ... from a fit over this many measured rounds
    wall_s: float | None = None  # measured wall time of the call, where the clock is another (`RoundResult`)


class SubmitRefused(ValueError):
    """`Engine.submit` refused the request object itself before taking anything: the engine is
    as it was and only that request is at fault (a server answers it alone)."""


class AbortResult(Enum):
    ABORTED = "aborted"  # `Engine.abort` cancelled it: ABORTED
    STOPPED = "stopped"  # `Engine.stop` ended it: FINISHED, finish reason STOP, its output kept
    ALREADY_DONE = "already_done"  # finished, failed or aborted before
    UNKNOWN = "unknown"  # no request with that id was submitted
