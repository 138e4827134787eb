"""What a scheduling policy sees and decides while the scheduler scans its waiting queue.

The scheduler owns budgets, reservations and the cache; a policy owns the order of the scan and
three decisions: what to do at a blocked consumer (stop the scan, skip it so it waits, recompute
the prefix it waits for, or follow its producer into the round where the runner restores state
saved in the same round), whether to take a ready request into the round, and (optionally) what
to remember between rounds, fed by the scheduler's events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from radixflow.cache.radix import RadixCache
from radixflow.cache.types import Match
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request
from radixflow.scheduler.reuse import ReuseFinder

# Predicted seconds of a round computing these chunks: the runner's model (`Runner.round_predictor`,
# pure), what a policy may weigh rounds by. One that learns between rounds (the torch runner's)
# has an int ``revision`` that changes when its answers may: memoised answers are stale then.
RoundPredictor = Callable[[Sequence[ScheduledChunk]], float]
# Report a decision about a request to the scheduler's observer: note(kind, request_id, **details).
Note = Callable[..., None]


class ScanAction(Enum):
    STOP = "stop"  # end this round's scan
    SKIP = "skip"  # leave the request waiting (local wait) and keep scanning
    # (at a blocked consumer) start it now from a shallower READY point, recomputing the prefix
    # its PENDING checkpoint would have served
    RECOMPUTE = "recompute"
    # (at a blocked consumer, where `SchedulerConfig.same_round_state`) start it now from its
    # PENDING checkpoint: its producer's chunk, earlier in this round, saves that state first
    FOLLOW = "follow"


@dataclass(frozen=True)
class PolicyContext:
    """What the scheduler lends its policy: read it, never mutate it."""

    config: SchedulerConfig
    cache: RadixCache
    reuse: ReuseFinder
    running: Mapping[str, Request]  # admitted requests, admission order
    predict: RoundPredictor | None  # None: the runner predicts nothing
    note: Note  # `Scheduler.note`: decisions the trace shows


class SchedulingPolicy(Protocol):
    name: str
    # the checkpoint placement (`placement.PLACEMENTS`) this policy is built around: what an engine
    # uses when it is given none
    placement: str

    def bind(self, context: PolicyContext) -> None:
        """Called once by the scheduler that uses this policy (mutates only the policy)."""
        ...

    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        """Scan order of the waiting queue (arrival order) for this round; called once per round.

        Mutates nothing outside the policy. The scan removes admitted requests from the queue while
        it iterates the result, and may stop early.
        """
        ...

    def on_blocked(self, request: Request, match: Match, draft: SchedulerOutput) -> ScanAction:
        """Decide the scan's fate at a consumer whose best reuse point is PENDING: STOP the scan,
        SKIP it (it waits for the producer), RECOMPUTE (it starts now from a shallower point) or,
        where the runner restores state saved in the same round, FOLLOW (it starts now from the
        PENDING point, after its producer within the round).
        ``draft`` is the round so far (read it, never mutate it). Mutates only the policy."""
        ...

    def on_ready(
        self, request: Request, match: Match, reuse: int, draft: SchedulerOutput
    ) -> ScanAction | None:
        """Whether the round takes a request that can start at ``reuse`` prompt tokens now.

        ``draft`` is the round so far (read it, never mutate it). None: take it (if budgets and
        capacity allow); SKIP: leave it waiting and go on; STOP: end the scan here. Mutates only
        the policy.
        """
        ...

    def on_scheduled(self, request: Request) -> None:
        """``request``, which this scan's last `on_ready` or `on_blocked` let in (taken, FOLLOW or
        RECOMPUTE), got its first chunk in the round: the decision happened. Not called where the
        budgets or the cache refused it. Mutates only the policy."""
        ...

    def on_arrival(self, request: Request) -> None:
        """A request joined the waiting queue (registered in the cache). Mutates only the policy."""
        ...

    def on_left(self, request: Request) -> None:
        """A waiting request left the queue unadmitted (aborted, stopped or failed between
        rounds); no scan will reach it again. Mutates only the policy."""
        ...

    def on_round_end(self, woken: Sequence[Request], now: float | None) -> None:
        """A round ended at engine time ``now`` (None: it was rolled back); ``woken`` are the
        consumers parked on its producers, whose reuse changed. Mutates only the policy."""
        ...

    def counters(self) -> dict[str, int]:
        """The policy's own decision counts so far (empty when it makes none). Pure."""
        ...
