"""The engine loop: schedule → run → update, the same for every runner."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from radixflow.cache.eviction import make_eviction_policy
from radixflow.cache.radix import RadixCache
from radixflow.engine.runner import Runner
from radixflow.scheduler.placement import make_placement
from radixflow.scheduler.policy import make_policy
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.scheduler import Scheduler, SchedulerConfig


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


class Engine:
    def __init__(
        self,
        runner: Runner,
        config: SchedulerConfig,
        policy: str = "radixflow",
        placement: str = "branch",
        eviction: str = "lru",
    ) -> None:
        self.runner = runner
        config = replace(config, has_recurrent=runner.model.has_recurrent)
        self.cache = RadixCache(
            config.block_size, config.num_blocks, config.num_state_slots, make_eviction_policy(eviction)
        )
        self.scheduler = Scheduler(
            config,
            self.cache,
            make_policy(policy),
            make_placement(placement if config.has_recurrent else "none"),
        )
        self.now = 0.0
        self.rounds: list[RoundRecord] = []
        self.requests: list[Request] = []  # submission order
        self._arrivals: list[tuple[float, int, Request]] = []

    def submit(self, request: Request) -> None:
        """Accept a request; one the model cannot run is marked FAILED, the rest carry on."""
        if request.status is not RequestStatus.WAITING or request.registration is not None:
            raise ValueError(f"request {request.id!r} was already submitted to an engine")
        self.requests.append(request)
        error = self.runner.validate(request)
        if error is not None:
            request.status, request.error = RequestStatus.FAILED, error
            return
        heapq.heappush(self._arrivals, (request.arrival_s, len(self.requests), request))

    def has_work(self) -> bool:
        return bool(self._arrivals) or self.scheduler.has_work()

    def _admit_arrivals(self) -> None:
        if not self.scheduler.has_work() and self._arrivals:
            self.now = max(self.now, self._arrivals[0][0])  # idle: jump to the next arrival
        while self._arrivals and self._arrivals[0][0] <= self.now:
            self.scheduler.add(heapq.heappop(self._arrivals)[2])

    def step(self) -> RoundRecord | None:
        """One round: schedule → run → update. None when there is nothing left to do."""
        self._admit_arrivals()
        if not self.scheduler.has_work():
            return None
        out = self.scheduler.schedule()
        if not out.chunks:
            self._stalled()
            return None
        result = self.runner.run(out)
        start = self.now
        self.now += result.duration_s
        for req in self.scheduler.update(out, result.tokens, self.now):
            req.top_logprobs = result.top_logprobs.get(req.id, [])
        record = RoundRecord(
            index=out.round_index,
            start_s=start,
            duration_s=result.duration_s,
            worker_call_s=result.worker_call_s,
            tokens=out.tokens,
            requests=len(out.chunks),
            bubble_tokens=out.bubble_tokens,
            blocked=len(out.blocked),
            stop_reason=out.stop_reason.value,
            chunks=tuple((c.request_id, c.start, c.end) for c in out.chunks),
        )
        self.rounds.append(record)
        return record

    def _stalled(self) -> None:
        # Nothing fits even in an otherwise idle round: the head request can never run.
        if self.scheduler.running:
            raise RuntimeError("running requests cannot continue: KV/state capacity exhausted")
        self.scheduler.fail_head("request does not fit in the cache's free KV blocks/state slots")

    def run(
        self, requests: Iterable[Request], on_round: Callable[[RoundRecord], None] | None = None
    ) -> list[Request]:
        """Submit ``requests`` and step until every one has finished or failed."""
        for req in requests:
            self.submit(req)
        while self.has_work():
            record = self.step()
            if record is not None and on_round is not None:
                on_round(record)
        return self.requests

    def dependency_depth(self) -> int:
        return max((r.depth for r in self.requests), default=0)
