"""The radix tree's structure on its own: paths, splits and their hook, the walk, freeing a node."""

from __future__ import annotations

import pytest

from radixflow.cache.node import Checkpoint, Node
from radixflow.cache.pool import IdPool
from radixflow.cache.tree import Tree
from radixflow.cache.types import NodeHandle, Readiness

BS = 2
TOKENS = (1, 2, 3, 4, 5, 6)  # 3 blocks


def make() -> Tree:
    return Tree(BS, IdPool(8, "KV blocks"), IdPool(2, "state slots"))


def materialize(tree: Tree, path: list[Node]) -> None:
    for node in path:
        tree.set_blocks(node, tree.kv.take(len(node.key) // BS))


def test_block_size_below_one_is_refused():
    with pytest.raises(ValueError, match="block_size"):
        Tree(0, IdPool(1, "KV blocks"), IdPool(1, "state slots"))


def test_path_creates_unmaterialized_nodes_ending_at_each_cut():
    tree = make()
    path = tree.path("n", TOKENS, 3, cuts=[2, 4])
    assert [n.end for n in path] == [2, 4, 6]
    assert not any(n.materialized for n in path)
    assert tree.path("n", TOKENS, 3) == path  # a second walk finds the same nodes
    (top,) = tree.path("n", TOKENS, 1, cuts=[1 * BS])  # already ends there: nothing splits
    assert top is path[0] and len(tree.nodes()) == 4  # the root and three nodes


def test_a_split_reports_both_halves_to_the_hook_and_keeps_the_counts():
    splits: list[tuple[Node, Node]] = []
    tree = Tree(BS, IdPool(8, "KV blocks"), IdPool(2, "state slots"), on_split=lambda *s: splits.append(s))
    (whole,) = tree.path("n", TOKENS, 3)
    whole.demand, whole.lock_ref = 2, 1
    upper = tree.path("n", TOKENS, 1)[-1]
    assert splits == [(upper, whole)]
    assert (upper.end, whole.start, whole.parent) == (2, 2, upper)
    assert (upper.demand, upper.lock_ref) == (2, 1)


def test_the_walk_lists_one_root_per_namespace_and_every_node():
    tree = make()
    assert len(tree.roots()) == 0 and len(tree.nodes()) == 0
    roots, nodes = tree.roots(), tree.nodes()
    path = tree.path("a", TOKENS, 3, cuts=[2])
    tree.root("b")
    assert [r.key for r in roots] == [(), ()]  # live views: they follow later changes
    assert set(map(id, nodes)) == {id(n) for n in (*roots, *path)}
    assert not hasattr(roots, "append") and not hasattr(nodes, "pop")  # read-only


def test_lookup_finds_live_nodes_and_refuses_stale_handles():
    tree = make()
    (node,) = tree.path("n", TOKENS, 1)
    assert tree.lookup(NodeHandle(node.id)) is node and tree.is_live(node)
    tree.remove(node)
    assert not tree.is_live(node)
    with pytest.raises(ValueError, match="stale cache handle"):
        tree.lookup(NodeHandle(node.id))


def test_set_blocks_keeps_the_parents_live_child_count():
    tree = make()
    upper, lower = tree.path("n", TOKENS, 3, cuts=[2])
    materialize(tree, [upper, lower])
    assert tree.root("n").live_children == 1 and upper.live_children == 1
    tree.set_blocks(lower, None)
    assert upper.live_children == 0 and tree.kv.free == 5  # no block moved back to the pool


def test_drop_kv_frees_blocks_and_checkpoint_and_prunes_an_unwanted_node():
    tree = make()
    upper, lower = tree.path("n", TOKENS, 3, cuts=[2])
    materialize(tree, [upper, lower])
    lower.checkpoint = Checkpoint(tree.slots.take(1)[0], Readiness.READY, None)
    tree.drop_kv(lower)
    assert (tree.kv.free, tree.slots.free) == (7, 2)
    assert not tree.is_live(lower) and upper.live_children == 0 and not upper.children


def test_drop_kv_keeps_a_node_a_waiting_prompt_wants():
    tree = make()
    (node,) = tree.path("n", TOKENS, 3)
    node.demand = 1
    materialize(tree, [node])
    tree.drop_kv(node)
    assert tree.is_live(node) and not node.materialized and tree.kv.free == 8


def test_drop_checkpoint_frees_the_slot_and_keeps_the_kv():
    tree = make()
    (node,) = tree.path("n", TOKENS, 1)
    materialize(tree, [node])
    tree.drop_checkpoint(node)  # none: nothing happens
    node.checkpoint = Checkpoint(tree.slots.take(1)[0], Readiness.READY, None)
    tree.drop_checkpoint(node)
    assert node.checkpoint is None and tree.slots.free == 2 and node.blocks == [0]
