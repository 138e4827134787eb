"""Incrementally maintained eviction queues: the next victim in O(log n), never a tree scan.

A queue is a lazy min-heap over tree nodes holding at most one entry per node. The tree offers a
node whenever it may have become evictable (unlock to zero, commit, a child evicted, ...); entries
are checked when popped: a node that is gone or no longer eligible is dropped, and one whose
priority moved since it was pushed (a match touched it) goes back with its current priority.
Stored priorities never exceed current ones (touches only raise ``last_used``), so the first valid
pop is the true minimum: the same victim a full rebuild of the heap would choose.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from radixflow.cache.node import Node

Priority = tuple[int, ...]


class EvictionQueue:
    def __init__(
        self,
        eligible: Callable[[Node], bool],
        priority: Callable[[Node], Priority],
        live: Callable[[Node], bool],
    ) -> None:
        self._eligible = eligible  # may this node be evicted now?
        self._priority = priority  # smallest first
        self._live = live  # is the node still in the tree?
        self._heap: list[tuple[Priority, int, Node]] = []
        self._queued: set[int] = set()  # ids of nodes with an entry in the heap

    def offer(self, node: Node) -> None:
        """Queue ``node`` if it is eligible and not queued yet (mutates the heap)."""
        if node.id not in self._queued and self._eligible(node):
            heapq.heappush(self._heap, (self._priority(node), node.id, node))
            self._queued.add(node.id)

    def pop(self) -> Node | None:
        """Remove and return the eligible node with the smallest priority; None if there is none."""
        while self._heap:
            key, nid, node = heapq.heappop(self._heap)
            if not self._live(node) or not self._eligible(node):
                self._queued.discard(nid)
                continue
            current = self._priority(node)
            if current != key:
                heapq.heappush(self._heap, (current, nid, node))
                continue
            self._queued.discard(nid)
            return node
        return None

    def queued(self, node: Node) -> bool:
        return node.id in self._queued

    def __len__(self) -> int:
        return len(self._heap)
