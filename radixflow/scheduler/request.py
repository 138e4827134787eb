"""The request: what the user asked for, plus the scheduler's bookkeeping for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from radixflow.cache.types import NodeHandle


class RequestStatus(Enum):
    WAITING = "waiting"  # arrived, not yet admitted
    RUNNING = "running"  # admitted; prefill in progress (possibly chunked)
    FINISHED = "finished"
    FAILED = "failed"  # rejected, or its round's worker call failed (see ``error``)
    ABORTED = "aborted"  # cancelled by the caller (`Engine.abort`)

    @property
    def done(self) -> bool:
        return self in (RequestStatus.FINISHED, RequestStatus.FAILED, RequestStatus.ABORTED)


@dataclass(eq=False)
class Request:
    id: str
    prompt: tuple[int, ...]
    namespace: str = "default"
    arrival_s: float = 0.0
    group: int | None = None  # workload bookkeeping: the shared context it belongs to
    kind: str = "candidate"  # "candidate" | "independent"

    # Scheduler-owned state. Invariant: reused <= computed <= len(prompt); block_table covers
    # positions [0, computed) rounded up to whole blocks.
    status: RequestStatus = RequestStatus.WAITING
    reused: int = 0  # prompt tokens served from the cache at admission
    computed: int = 0
    # Dependency depth: fewest rounds before this request's token could exist, given where its
    # reused state came from (depth_base: rounds before that checkpoint could exist).
    depth_base: int = 0
    depth: int = 0
    block_table: list[int] = field(default_factory=list)
    own_blocks: list[int] = field(default_factory=list)
    working_slot: int | None = None
    registration: NodeHandle | None = None
    lock: NodeHandle | None = None
    chunks: int = 0
    output_token: int | None = None
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)
    finish_s: float | None = None
    error: str | None = None

    @property
    def latency_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s
