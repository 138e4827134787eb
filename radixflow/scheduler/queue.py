"""The waiting queue: FCFS order, O(1) append and removal, iteration that survives removal."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from radixflow.scheduler.request import Request


@dataclass(eq=False)
class _Link:
    request: Request | None  # None: the sentinel
    prev: _Link | None = None
    next: _Link | None = None
    removed: bool = False


class WaitingQueue:
    """Requests in arrival order; a doubly linked list indexed by request id.

    A removed link keeps its ``next`` pointer, so an iterator standing on it carries on with the
    request after it: the round scan removes admitted requests while it walks the queue.
    """

    def __init__(self) -> None:
        self._head = _Link(None)
        self._head.prev = self._head.next = self._head
        self._links: dict[str, _Link] = {}

    def append(self, request: Request) -> None:
        if request.id in self._links:
            raise ValueError(f"request {request.id!r} is already waiting")
        last = self._head.prev
        assert last is not None
        link = _Link(request, prev=last, next=self._head)
        last.next = self._head.prev = link
        self._links[request.id] = link

    def remove(self, request: Request) -> None:
        link = self._links.pop(request.id)
        assert link.prev is not None and link.next is not None
        link.prev.next, link.next.prev = link.next, link.prev
        link.removed = True

    def __contains__(self, request: Request) -> bool:
        return request.id in self._links

    def __len__(self) -> int:
        return len(self._links)

    def __bool__(self) -> bool:
        return bool(self._links)

    def __iter__(self) -> Iterator[Request]:
        return self.iter_from(None)

    def iter_from(self, request: Request | None) -> Iterator[Request]:
        """Requests from ``request`` (inclusive; None: the head) to the tail."""
        link = self._head.next if request is None else self._links[request.id]
        while link is not None and link is not self._head:
            if not link.removed and link.request is not None:  # skip ones removed behind our back
                yield link.request
            link = link.next

    def first(self) -> Request | None:
        link = self._head.next
        return None if link is None or link is self._head else link.request
