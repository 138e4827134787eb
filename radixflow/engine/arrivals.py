"""Submitted requests not yet handed to the scheduler, by the time each becomes ready."""

from __future__ import annotations

import heapq

from radixflow.scheduler.request import Request, RequestStatus


class Arrivals:
    """A heap by ready time (arrival plus the model's per-request overhead), ties in submission
    order; a request aborted or stopped before it is ready stays until the heap reaches it, and is
    then dropped, never handed on."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Request]] = []
        self._pushed = 0  # the tie-break: submission order

    def push(self, ready_s: float, request: Request) -> None:
        self._pushed += 1
        heapq.heappush(self._heap, (ready_s, self._pushed, request))

    def next_ready(self) -> float | None:
        """When the first request still waiting is ready (None: none waits); drops the ended ones
        ahead of it."""
        while self._heap and self._heap[0][2].status is not RequestStatus.WAITING:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pop_ready(self, now: float) -> list[Request]:
        """The requests still waiting that are ready by ``now``, in ready order (they leave)."""
        ready = []
        while self._heap and self._heap[0][0] <= now:
            request = heapq.heappop(self._heap)[2]
            if request.status is RequestStatus.WAITING:
                ready.append(request)
        return ready

    def earliest(self) -> float | None:
        """The earliest ready time of a request still waiting (None: none waits). Pure."""
        return min((ready for ready, _, r in self._heap if r.status is RequestStatus.WAITING), default=None)

    def waiting(self) -> int:
        """Requests still waiting to be ready. Pure."""
        return sum(1 for _, _, r in self._heap if r.status is RequestStatus.WAITING)
