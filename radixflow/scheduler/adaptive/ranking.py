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
        self.pops = 0  # heap entries taken off so far, stale ones included (what a scan costs)
        self._visited: list[_Entry] = []
        self._count = itertools.count()
        self._versions = itertools.count()

    def add(self, request: Request, round_index: int, slack: float) -> None:
        """Rank a request that arrived in round ``round_index`` (mutates the index)."""
        self._since[request.id] = round_index
        self._seq[request.id] = next(self._count)
        self.rekey(request, slack)

    def rekey(self, request: Request, slack: float) -> None:
        """Give a waiting request a new slack; its deadline counts from its arrival round, so
        re-keying never lets a request fall behind later arrivals with no more slack (mutates
        the index)."""
        if request.id not in self._since:
            return  # not ranked here (it left, or never arrived)
        deadline = self._since[request.id] + slack
        live = self._live.get(request.id)
        if live is not None and live[3] is request and live[0] == deadline:
            return  # same place in the order: a new entry would only grow the heap
        # (an entry of another request is a done one whose id was given again: it goes stale)
        entry = (deadline, self._seq[request.id], next(self._versions), request)
        self._live[request.id] = entry
        heapq.heappush(self._heap, entry)

    def discard(self, request: Request) -> None:
        """Forget a request that left the queue unvisited; its heap entry, no longer live, is
        passed over when it reaches the top (mutates the index)."""
        if request.id in self._since:
            self._drop(request)

    def __len__(self) -> int:
        return len(self._live)

    def scan(self) -> Iterator[Request]:
        """Waiting requests by deadline (ties: arrival order). Pops what it yields; the next scan
        puts back the ones still waiting."""
        self._restore()
        while self._heap:
            entry = self._pop()
            if entry is not None:
                self._visited.append(entry)
                yield entry[3]

    def _pop(self) -> _Entry | None:
        """The top entry if it is live and its request still waits (None: it was dropped)."""
        entry = heapq.heappop(self._heap)
        self.pops += 1
        req = entry[3]
        if self._live.get(req.id) is not entry:
            return None  # superseded by a re-key, or already dropped
        if req.status is not RequestStatus.WAITING:
            self._drop(req)
            return None
        return entry

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
        self._live.pop(request.id, None)
        self._seq.pop(request.id, None)
        if known and self._on_drop is not None:
            self._on_drop(request)
