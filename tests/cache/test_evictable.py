"""Eviction queues pop exactly what a full rebuild of the heap would pop; the evictor frees a tree's
KV and checkpoints through the tree's own operations."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixflow.cache.evictable import EvictionQueue, Evictor
from radixflow.cache.eviction import LRU, EntryKind
from radixflow.cache.node import Checkpoint, Node
from radixflow.cache.pool import IdPool
from radixflow.cache.tree import Tree
from radixflow.cache.types import Readiness
from radixflow.problems import ProblemError


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


def test_the_evictor_needs_only_a_tree():
    """Deepest leaf first, then the parent it leaves a leaf; nodes a waiting prompt wants stay known."""
    tree = Tree(1, IdPool(3, "KV blocks"), IdPool(1, "state slots"))
    top, mid, low = tree.path("n", (1, 2, 3), 3, cuts=[1, 2])
    for node in (top, mid, low):
        tree.set_blocks(node, tree.kv.take(1))
    top.demand = mid.demand = mid.ends = 1  # a waiting prompt wants the first two blocks
    mid.checkpoint = Checkpoint(tree.slots.take(1)[0], Readiness.READY, None)
    evictor = Evictor(tree, LRU())
    for node in (top, mid, low):
        evictor.offer(node)
    assert evictor.free_slots_upto(1) == 1 and mid.checkpoint is None  # its KV stays
    assert evictor.reserve(1, 0) and not tree.is_live(low) and mid.materialized  # only the leaf went
    assert not evictor.reserve(4, 0)  # only three blocks exist
    assert tree.kv.free == 3 and tree.slots.free == 1
    assert tree.is_live(mid) and tree.is_live(top) and not (mid.materialized or top.materialized)


def test_drop_kv_queues_the_parent_it_leaves_a_leaf():
    tree = Tree(1, IdPool(2, "KV blocks"), IdPool(0, "state slots"))
    top, low = tree.path("n", (1, 2), 2, cuts=[1])
    for node in (top, low):
        tree.set_blocks(node, tree.kv.take(1))
    evictor = Evictor(tree, LRU())
    assert not evictor.kv_victims.queued(top)  # it has a materialized child
    evictor.drop_kv(low)
    assert evictor.kv_victims.queued(top) and tree.kv.free == 1


@given(
    st.lists(
        st.tuples(st.sampled_from(["offer", "raise", "lower", "block", "pop", "remove"]), st.integers(0, 9))
    )
)
def test_requeue_keeps_the_true_minimum_when_a_priority_drops(ops):
    # As above, with priorities that may also drop (the checkpoint on a KV leaf evicted) when
    # the queue is told: `requeue`. Also checks `stored` never ranks a node above its priority.
    nodes = [Node(id=i, key=(i,), parent=None, end=i + 1) for i in range(10)]
    prio = dict.fromkeys(range(10), 100)
    blocked: set[int] = set()
    gone: set[int] = set()
    q = EvictionQueue(
        eligible=lambda n: n.id not in blocked,
        priority=lambda n: (prio[n.id],),
        live=lambda n: n.id not in gone,
    )
    offered: set[int] = set()
    for op, i in ops:
        node = nodes[i]
        if op == "offer" and i not in gone:
            blocked.discard(i)
            q.offer(node)
            offered.add(i)
        elif op == "raise":
            prio[i] += 1 + i
        elif op == "lower":
            prio[i] -= 1 + i
            q.requeue(node)
            if i not in gone and i not in blocked:
                offered.add(i)
        elif op == "block":
            blocked.add(i)
        elif op == "remove":
            gone.add(i)
            q.forget(node)
            offered.discard(i)
        elif op == "pop":
            candidates = [n for n in nodes if n.id in offered and n.id not in blocked and n.id not in gone]
            expected = min(candidates, key=lambda n: (prio[n.id], n.id), default=None)
            got = q.pop()
            assert got is expected
            if got is not None:
                offered.discard(got.id)
        for key, nid, *_ in q.stored().values():
            assert key <= (prio[nid],)
        assert q.stale >= 0


class Worth:
    """A policy not coupled to the tree, its keys set by the test: ``worth`` by node id."""

    name = "worth"
    clock = 0.0
    coupled = False

    def __init__(self) -> None:
        self.worth: dict[int, int] = {}

    def priority(self, node: Node, kind: EntryKind) -> tuple[float, ...]:
        return (self.worth[node.id],)

    def evicted(self, node: Node, kind: EntryKind) -> None:
        pass

    def computed(self, node: Node, tokens: int) -> None:
        pass


def test_a_key_that_dropped_while_queued_is_refused_in_one_line_naming_the_policy():
    # keys only grow while queued (the heaps are lazy): a policy whose key dropped had its node
    # passed over for a worse victim without a word; where the heap pops it next, it is refused
    tree = Tree(1, IdPool(2, "KV blocks"), IdPool(0, "state slots"))
    (a,), (b,) = tree.path("n", (1,), 1), tree.path("n", (2,), 1)
    policy = Worth()
    policy.worth = {a.id: 3, b.id: 5}
    evictor = Evictor(tree, policy)
    for node in (a, b):
        tree.set_blocks(node, tree.kv.take(1))
        evictor.offer(node)
    policy.worth[b.id] = 1  # below a's: b should go first, but its entry says 5
    with pytest.raises(ProblemError) as caught:
        evictor.reserve(2, 0)
    said = str(caught.value)
    assert "\n" not in said
    assert said.startswith(
        f"eviction: 'worth' (Worth) priority of node {b.id}'s kv entry dropped from (5,) to (1,)"
    )


def test_a_coupled_policy_s_lowered_key_is_the_cache_s_to_requeue():
    tree = Tree(1, IdPool(1, "KV blocks"), IdPool(0, "state slots"))
    (a,) = tree.path("n", (1,), 1)
    policy = Worth()
    policy.coupled, policy.worth = True, {a.id: 3}
    evictor = Evictor(tree, policy)
    tree.set_blocks(a, tree.kv.take(1))
    evictor.offer(a)
    policy.worth[a.id] = 1  # as if a change of the tree lowered it and the cache requeues it
    evictor.kv_victims.requeue(a)
    assert evictor.reserve(1, 0) and not tree.is_live(a)


class Kept(Worth):
    """Values a KV leaf by the checkpoint on it, not coupled: its key drops with the checkpoint."""

    def priority(self, node: Node, kind: EntryKind) -> tuple[float, ...]:
        return (2 if kind is EntryKind.KV and node.checkpoint is not None else 1, node.id)


def test_a_key_on_the_node_s_own_checkpoint_needs_coupled_as_the_docs_say():
    # docs/extending.md named only the checkpoints above a node as what `coupled` is for
    tree = Tree(1, IdPool(2, "KV blocks"), IdPool(1, "state slots"))
    (a,), (b,) = tree.path("n", (1,), 1), tree.path("n", (2,), 1)
    for node in (a, b):
        tree.set_blocks(node, tree.kv.take(1))
    a.checkpoint = Checkpoint(tree.slots.take(1)[0], Readiness.READY, None)
    evictor = Evictor(tree, Kept())
    for node in (a, b):
        evictor.offer(node)
    assert evictor.free_slots_upto(1) == 1 and a.checkpoint is None  # a's KV key drops to (1, a)
    with pytest.raises(ProblemError, match=r"'worth' \(Kept\) priority of node .*'s kv entry dropped"):
        evictor.reserve(2, 0)
    docs = (Path(__file__).parents[2] / "docs" / "extending.md").read_text()
    assert "(the checkpoint on it or those above it," in " ".join(docs.split())
