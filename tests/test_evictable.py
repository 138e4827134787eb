"""Eviction queues pop exactly what a full rebuild of the heap would pop."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from radixflow.cache.evictable import EvictionQueue
from radixflow.cache.node import Node


@given(st.lists(st.tuples(st.sampled_from(["offer", "touch", "block", "pop", "remove"]), st.integers(0, 9))))
def test_pops_the_true_minimum_despite_stale_entries(ops):
    nodes = [Node(id=i, key=(i,), parent=None, end=i + 1) for i in range(10)]
    blocked: set[int] = set()
    gone: set[int] = set()
    q = EvictionQueue(
        eligible=lambda n: n.id not in blocked,
        priority=lambda n: (n.last_used,),
        live=lambda n: n.id not in gone,
    )
    offered: set[int] = set()
    for op, i in ops:
        node = nodes[i]
        if op == "offer" and i not in gone:
            blocked.discard(i)
            q.offer(node)
            offered.add(i)
        elif op == "touch":
            node.last_used += 1 + i  # priorities only grow, as the LRU clock does
        elif op == "block":
            blocked.add(i)
        elif op == "remove":
            gone.add(i)
        elif op == "pop":
            candidates = [n for n in nodes if n.id in offered and n.id not in blocked and n.id not in gone]
            expected = min(candidates, key=lambda n: (n.last_used, n.id), default=None)
            got = q.pop()
            assert got is expected
            if got is not None:
                offered.discard(got.id)
