"""Building one round: running requests' next chunks first, then a scan of the waiting queue.

The scan's behaviour at a blocked consumer is the policy's; everything else (budgets, chunked
prefill, cache reservations, checkpoint placement) is shared by every policy. The scan stops when
the budgets run out, so a round's cost does not grow with the queue. What happens once the round
has run (update, finish, rollback) is `Scheduler`'s (scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from radixflow.cache.radix import RadixCache
from radixflow.cache.types import Match
from radixflow.problems import Problem, ProblemError
from radixflow.scheduler.bubble import ScanStop, bubble_tokens
from radixflow.scheduler.checkpoints import CheckpointPlanner
from radixflow.scheduler.chunk_writer import ChunkWriter
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.events import SchedulerEvents
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, StopReason
from radixflow.scheduler.parking import ParkingLot
from radixflow.scheduler.policy import ScanAction, SchedulingPolicy, scan_order
from radixflow.scheduler.queue import WaitingQueue
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.reuse import ReuseFinder, ReusePoint


class _Admit(Enum):
    SCHEDULED = "scheduled"
    BLOCKED = "blocked"
    NO_BUDGET = "no_budget"
    NO_MEMORY = "no_memory"
    SKIPPED = "skipped"  # the policy left it waiting and goes on
    DECLINED = "declined"  # the policy ended the round before it


_ANSWERS = {
    "on_blocked": tuple(ScanAction),  # tuples: an unhashable answer is told, not a TypeError
    "on_ready": (None, ScanAction.SKIP, ScanAction.STOP),
}


def _answer(policy: SchedulingPolicy, method: str, answer: object) -> ScanAction | None:
    """``answer`` when the protocol lets ``method`` give it: a policy added from outside
    (docs/extending.md) that answers anything else is told so, not read as another action."""
    if answer in _ANSWERS[method]:
        return answer  # type: ignore[return-value]
    said = f"{policy.name!r} ({type(policy).__qualname__}) {method} returned {answer!r}"
    raise ProblemError(Problem("policy", f"{said}, not one of the ScanActions it may return"))


@dataclass
class _Budget:
    tokens: int
    requests: int


@dataclass
class RoundBuilder:
    """Builds a round from the scheduler's queues and cache (shares them; owns none of them)."""

    config: SchedulerConfig
    cache: RadixCache
    policy: SchedulingPolicy
    reuse: ReuseFinder
    checkpoints: CheckpointPlanner
    writer: ChunkWriter
    waiting: WaitingQueue
    running: dict[str, Request]
    parked: ParkingLot
    events: SchedulerEvents | None

    def build(self, round_index: int) -> SchedulerOutput:
        """Pick round ``round_index``'s chunks (mutates requests, cache locks and reservations)."""
        out = SchedulerOutput(round_index=round_index)
        budget = _Budget(self.config.token_budget, self.config.max_requests)
        if self._continue_running(budget, out):
            stop = self._scan(budget, out)
        else:
            stop = ScanStop(None, None, scan_order(self.policy, self.waiting))
        if stop is not None and budget.tokens > 0 and budget.requests > 0:
            slots = self.config.max_requests
            out.bubble_tokens = bubble_tokens(stop, self.reuse, self.parked, budget.tokens, slots)
        return out

    def _continue_running(self, budget: _Budget, out: SchedulerOutput) -> bool:
        """Next chunk of every running request, decode steps first; False when the budget ran out."""
        decoding = [r for r in self.running.values() if r.prefilled]
        prefilling = [r for r in self.running.values() if not r.prefilled]
        for req in decoding + prefilling:
            chunk = self._continue(req, budget) if budget.requests > 0 else None
            if chunk is None:
                out.stop_reason = StopReason.TOKEN_BUDGET
                return False
            out.chunks.append(chunk)
        return True

    def _scan(self, budget: _Budget, out: SchedulerOutput) -> ScanStop | None:
        """Admit waiting requests in the policy's order; None when every one was considered."""
        scan = scan_order(self.policy, self.waiting)
        for req in scan:
            if budget.requests == 0:
                out.stop_reason = StopReason.REQUEST_BUDGET
                return ScanStop(req, None, scan)
            status, match = self._admit(req, budget, out)
            if status is _Admit.BLOCKED:
                action = _answer(self.policy, "on_blocked", self.policy.on_blocked(req, match, out))
                if action is ScanAction.RECOMPUTE:
                    status = self._recompute(req, match, budget, out)
                elif action is ScanAction.FOLLOW:
                    status = self._follow(req, match, budget, out)
                else:
                    self._park(req, match, out)
                if action is ScanAction.STOP:
                    out.stop_reason = StopReason.BLOCKED
                    return ScanStop(None, None, scan)
            if status is _Admit.SCHEDULED:
                self.policy.on_scheduled(req)
            elif status is _Admit.DECLINED:
                out.stop_reason = StopReason.POLICY
                return ScanStop(req, match, scan)
            elif status is _Admit.NO_BUDGET:
                out.stop_reason = StopReason.TOKEN_BUDGET
                return ScanStop(req, match, scan)
            elif status is _Admit.NO_MEMORY:
                # the cache could not hold ``req``: it could not have run, and whether any request
                # behind it fits would take a reservation, so the bubble count (a lower bound) stops
                out.stop_reason = StopReason.MEMORY
                return ScanStop(None, None, iter(()))
        return None

    def _park(self, req: Request, match: Match, out: SchedulerOutput) -> None:
        """``req`` waits for ``match``'s producer until the round ends (mutates the lot)."""
        out.blocked.append(req.id)
        assert match.producer is not None
        self.parked.park(req, match.producer)
        if self.events is not None:
            self.events.parked(req.id, match.producer)

    def _recompute(self, req: Request, match: Match, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """Start a blocked consumer from the deepest READY point above its PENDING one: it
        recomputes the prefix rather than wait for the producer (mutates as `_start` does)."""
        status = self._start_shallower(req, match.checkpoint_tokens, budget, out)
        if status is _Admit.SCHEDULED:
            self.checkpoints.observe(req, match)
        return status

    def _follow(self, req: Request, match: Match, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """Start a blocked consumer from its PENDING checkpoint: the producer's chunk in this
        round saves the state before the runner's later wave restores it (mutates as `_start`)."""
        if not self.config.same_round_state:
            said = f"{self.policy.name!r} ({type(self.policy).__qualname__}) on_blocked returned FOLLOW"
            cannot = "on a runner that cannot restore state saved in the round"
            raise ProblemError(Problem("policy", f"{said} {cannot}"))
        point = self.reuse.pending_point(match)
        status = self._start(req, point, budget, out)
        if status is _Admit.SCHEDULED:
            self.checkpoints.observe(req, match)
        return status

    def _admit(self, req: Request, budget: _Budget, out: SchedulerOutput) -> tuple[_Admit, Match]:
        match = self.reuse.match(req)
        point = self.reuse.point(req, match)
        if point is None:
            return _Admit.BLOCKED, match
        verdict = _answer(self.policy, "on_ready", self.policy.on_ready(req, match, point.tokens, out))
        if verdict is not None:
            return (_Admit.SKIPPED if verdict is ScanAction.SKIP else _Admit.DECLINED), match
        status = self._start(req, point, budget, out)
        if status is _Admit.NO_MEMORY and point.tokens and self.config.has_recurrent and not self.running:
            # Nothing running will free capacity, so waiting cannot help. Our own lock on the reuse
            # point pins the checkpoints above it; a shallower start frees them for a working slot.
            status = self._start_shallower(req, point.tokens, budget, out)
        if status is _Admit.SCHEDULED:
            self.checkpoints.observe(req, match)
        return status, match

    def _start_shallower(self, req: Request, below: int, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """`_start` from the deepest READY point shallower than ``below`` prompt tokens that can
        get its capacity (NO_MEMORY when none can)."""
        status = _Admit.NO_MEMORY
        for point in self.reuse.shallower(req, below):
            status = self._start(req, point, budget, out)
            if status is not _Admit.NO_MEMORY:
                break
        return status

    def _start(self, req: Request, point: ReusePoint, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """Lock ``point``, reserve the request's capacity and emit its first chunk."""
        end = self.config.chunk_end(point.tokens, len(req.prompt), budget.tokens)
        if end is None:
            return _Admit.NO_BUDGET
        self.cache.lock(point.handle)  # protect the reuse point from our own reservations
        carries_state = end < len(req.prompt) or req.sampling.max_tokens > 1
        working = 1 if self.config.has_recurrent and carries_state else 0
        # Admit only when the whole prompt's KV fits beside what running requests still need,
        # so a running request can always finish (no deadlock, no preemption needed).
        if not self.writer.reserve(req, point, working):
            self.cache.unlock(point.handle)
            return _Admit.NO_MEMORY
        self.writer.start(req, point)  # first: its KV joins the promise checkpoints must leave room for
        ckpts = self.checkpoints.positions(req, point.tokens, end, held=working)
        if working:
            req.working_slot = self.cache.alloc_working_slot()
        req.status = RequestStatus.RUNNING
        self.waiting.remove(req)
        self.running[req.id] = req
        out.chunks.append(self._emit(req, end, ckpts, point.restore_slot, budget))
        return _Admit.SCHEDULED

    def _continue(self, req: Request, budget: _Budget) -> ScheduledChunk | None:
        """The next prefill chunk, or the decode step that feeds the token sampled last round."""
        decoding = req.prefilled
        target = req.computed + 1 if decoding else len(req.prompt)
        end = self.config.chunk_end(req.computed, target, budget.tokens)
        if end is None:
            return None
        ckpts = [] if decoding else self.checkpoints.positions(req, req.computed, end)
        return self._emit(req, end, ckpts, req.working_slot, budget)

    def _emit(
        self, req: Request, end: int, ckpts: list[int], restore: int | None, budget: _Budget
    ) -> ScheduledChunk:
        """The writer's chunk for ``req`` up to ``end``, charged to the round's budget."""
        chunk = self.writer.emit(req, end, ckpts, restore)
        budget.tokens -= chunk.end - chunk.start
        budget.requests -= 1
        return chunk
