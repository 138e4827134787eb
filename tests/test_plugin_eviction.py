"""A plugin eviction policy `coupled` to the tree (docs/extending.md) has its entries requeued
where the cache knows a change lowers keys; a key of its that drops elsewhere (what it reads of
the node changed: its hits, a clock of its own) is refused where the heap meets it, as an
uncoupled policy's is, not ranked by the stale key (a pop passing over the true victim)."""

from __future__ import annotations

import pytest

from radixflow.cache.evictable import Evictor
from radixflow.cache.eviction import EntryKind
from radixflow.cache.eviction_checked import CheckedEviction
from radixflow.cache.node import Node
from radixflow.cache.pool import IdPool
from radixflow.cache.tree import Tree
from radixflow.problems import ProblemError


class Coupled:
    """A coupled policy, its keys set by the test: ``worth`` by node id."""

    name = "coupled"
    clock = 0.0
    coupled = True

    def __init__(self) -> None:
        self.worth: dict[int, int] = {}

    def priority(self, node: Node, kind: EntryKind) -> tuple[float, ...]:
        return (self.worth[node.id],)

    def evicted(self, node: Node, kind: EntryKind) -> None:
        pass

    def computed(self, node: Node, tokens: int) -> None:
        pass


def _two_leaves(policy: Coupled) -> tuple[Tree, Evictor, Node, Node]:
    """Two KV leaves of one block each, worth 3 and 5, queued."""
    tree = Tree(1, IdPool(2, "KV blocks"), IdPool(0, "state slots"))
    (a,), (b,) = tree.path("n", (1,), 1), tree.path("n", (2,), 1)
    policy.worth = {a.id: 3, b.id: 5}
    evictor = Evictor(tree, CheckedEviction("coupled", policy))
    for node in (a, b):
        tree.set_blocks(node, tree.kv.take(1))
        evictor.offer(node)
    return tree, evictor, a, b


def test_a_coupled_plugin_s_key_dropped_with_no_requeue_is_refused_in_one_line():
    # was taken silently: `a` evicted, `b` (now worth 1) passed over
    policy = Coupled()
    _, evictor, _, b = _two_leaves(policy)
    policy.worth[b.id] = 1
    with pytest.raises(ProblemError) as caught:
        evictor.reserve(2, 0)
    said = str(caught.value)
    assert "\n" not in said
    assert said.startswith(
        f"eviction: 'coupled' (Coupled) priority of node {b.id}'s kv entry dropped from (5,) to (1,)"
    )
    assert said.endswith("while queued: keys only grow but where the cache requeues them")


def test_a_coupled_plugin_s_key_dropped_and_requeued_runs():
    policy = Coupled()
    tree, evictor, a, b = _two_leaves(policy)
    policy.worth[b.id] = 1
    evictor.kv_victims.requeue(b)  # as the cache does where a change of the tree lowers it
    assert evictor.reserve(1, 0)
    assert not tree.is_live(b) and tree.is_live(a)
