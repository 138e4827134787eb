"""A round written down: its `RoundRecord` from the scheduler's output (`round_record`), and what
a round that scheduled nothing says (`empty_round`: a scheduler bug). Pure functions of what the
scheduler handed the engine; the engine appends the records and raises the bug."""

from __future__ import annotations

from radixflow.engine.records import RoundRecord
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.scheduler import Scheduler


def round_record(
    out: SchedulerOutput, start: float, duration: float, worker: float, error: str | None = None
) -> RoundRecord:
    return RoundRecord(
        index=out.round_index,
        start_s=start,
        duration_s=duration,
        worker_call_s=worker,
        tokens=out.tokens,
        requests=len(out.chunks),
        bubble_tokens=out.bubble_tokens,
        blocked=len(out.blocked),
        stop_reason=out.stop_reason.value,
        chunks=tuple((c.request_id, c.start, c.end) for c in out.chunks),
        error=error,
    )


def empty_round(out: SchedulerOutput, scheduler: Scheduler) -> str:
    """Why a round with work scheduled nothing: a scheduler bug, never a request's or an option's
    fault. A running request's next chunk always fits a fresh round (a decode step is one token,
    a prefill chunk one block, and the token budget holds a block); an idle engine holds no
    locks, private blocks or PENDING checkpoints, so the first waiting request starts, from a
    shallower point or from scratch if it must, for `Engine.problem` refused every request that
    could not fit an empty cache. Raised, not asserted: under -O `Engine.run` would loop forever."""
    waiting, running = scheduler.waiting, scheduler.running
    first = waiting.first()
    head = f" (first {first.id!r})" if first is not None else ""
    return (
        f"scheduler bug: round {out.round_index} scheduled no chunk with {len(waiting)} waiting{head} "
        f"and {len(running)} running requests, stop reason {out.stop_reason.value}"
    )
