"""Waiting requests ranked by a deadline, kept up to date by events instead of rescans.

A request's deadline is the round it arrived in plus its slack (in rounds, from its key): the
scan visits requests by deadline, so a request with little work goes first, and a request with
more waits at most its slack before every later arrival ranks behind it (aging).

Entries are removed lazily: one that left the queue (admitted, finished, aborted) or was
re-keyed is dropped when it reaches the top. The scan pops what it visits; the next scan first
puts back what it visited and left waiting, so a round costs O(visited · log n), never O(n).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from radixflow.scheduler.request import Request, RequestStatus

_Entry = tuple[float, int, int, Request]  # (deadline, arrival sequence, version, request)


class RankIndex:
    def __init__(self, on_drop: Callable[[Request], None] | None = None) -> None:
        """``on_drop``: called once for each request the index forgets (it left the queue)."""
        self._on_drop = on_drop
        self._heap: list[_Entry] = []
        self._live: dict[str, _Entry] = {}  # request id -> its current entry
        self._since: dict[str, int] = {}  # request id -> round it arrived in
        self._seq: dict[str, int] = {}  # request id -> arrival sequence (the tie-break)
        self._work: dict[str, float] = {}  # request id -> the work it stands for
        self.work = 0.0  # sum of the work of every ranked request
        self._visited: list[_Entry] = []
        self._count = itertools.count()
        self._versions = itertools.count()

    def add(self, request: Request, round_index: int, slack: float, work: float) -> None:
        """Rank an arrived request that stands for ``work`` (mutates the index)."""
        self._since[request.id] = round_index
        self._seq[request.id] = next(self._count)
        self.rekey(request, slack, work)

    def rekey(self, request: Request, slack: float, work: float) -> None:
        """Give a waiting request a new slack (its deadline counts from its arrival round)."""
        if request.id not in self._since:
            return  # not ranked here (it left, or never arrived)
        self.work += work - self._work.get(request.id, 0.0)
        self._work[request.id] = work
        entry = (self._since[request.id] + slack, self._seq[request.id], next(self._versions), request)
        self._live[request.id] = entry
        heapq.heappush(self._heap, entry)

    def deadline(self, request: Request) -> float | None:
        entry = self._live.get(request.id)
        return None if entry is None else entry[0]

    def since(self, request: Request) -> int:
        """The round ``request`` arrived in (it must be ranked here)."""
        return self._since[request.id]

    def __len__(self) -> int:
        return len(self._live)

    def scan(self) -> Iterator[Request]:
        """Waiting requests by deadline (ties: arrival order). Pops what it yields; the next scan
        puts back the ones still waiting."""
        self._restore()
        while self._heap:
            entry = heapq.heappop(self._heap)
            req = entry[3]
            if self._live.get(req.id) is not entry:
                continue  # superseded by a re-key, or already dropped
            if req.status is not RequestStatus.WAITING:
                self._drop(req)
                continue
            self._visited.append(entry)
            yield req

    def head(self, limit: int) -> list[Request]:
        """Up to ``limit`` waiting requests in scan order, those this scan visited first. Pure
        but for dropping entries that are no longer live."""
        out = [e[3] for e in self._visited if self._live.get(e[3].id) is e]
        out = [r for r in out if r.status is RequestStatus.WAITING]
        popped: list[_Entry] = []
        while self._heap and len(out) < limit:
            entry = heapq.heappop(self._heap)
            req = entry[3]
            if self._live.get(req.id) is not entry:
                continue
            if req.status is not RequestStatus.WAITING:
                self._drop(req)
                continue
            popped.append(entry)
            out.append(req)
        for entry in popped:
            heapq.heappush(self._heap, entry)
        return out[:limit]

    def _restore(self) -> None:
        for entry in self._visited:
            req = entry[3]
            if self._live.get(req.id) is not entry:
                continue  # re-keyed since (pushed again already)
            if req.status is RequestStatus.WAITING:
                heapq.heappush(self._heap, entry)
            else:
                self._drop(req)
        self._visited.clear()

    def _drop(self, request: Request) -> None:
        known = self._since.pop(request.id, None) is not None
        self.work -= self._work.pop(request.id, 0.0)
        self._live.pop(request.id, None)
        self._seq.pop(request.id, None)
        if known and self._on_drop is not None:
            self._on_drop(request)
