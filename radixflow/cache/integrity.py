"""`check_integrity()` for the radix cache: every invariant written beside the fields, checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixflow.cache.evictable import checkpoint_evictable, kv_evictable
from radixflow.cache.node import Node
from radixflow.cache.types import Readiness

if TYPE_CHECKING:
    from radixflow.cache.radix import RadixCache


class IntegrityError(AssertionError):
    pass


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise IntegrityError(msg)


def check_cache(cache: RadixCache) -> None:
    tree_blocks: list[int] = []
    slots: list[int] = []
    for root in cache._roots.values():
        _require(root.parent is None and root.key == () and root.end == 0, "malformed root")
        _check_subtree(cache, root, tree_blocks, slots)
    _require(len(tree_blocks) == len(set(tree_blocks)), "a KV block is owned by two nodes")
    _require(not set(tree_blocks) & cache._private, "a KV block is both private and in the tree")
    _require(
        cache.kv.used() == set(tree_blocks) | cache._private,
        "KV accounting: free + cached + locked != total",
    )
    _require(len(slots) == len(set(slots)), "a state slot is owned by two checkpoints")
    _require(not set(slots) & cache._working, "a state slot is both a checkpoint and working state")
    _require(cache.slots.used() == set(slots) | cache._working, "state-slot accounting mismatch")
    usage = cache.usage()
    _require(
        usage.free_blocks + usage.cached_blocks + usage.locked_blocks == usage.total_blocks,
        "free + cached + locked != total blocks",
    )
    for producer, nodes in cache._adopted.items():
        for node in nodes:
            _require(node.published_by == producer, f"stale round journal entry for {producer}")
    for producer, nodes in cache._pending.items():
        for node in nodes:
            ck = node.checkpoint
            _require(ck is not None and ck.producer == producer, f"stale pending entry for {producer}")


def _check_subtree(cache: RadixCache, node: Node, blocks: list[int], slots: list[int]) -> None:
    bs = cache.block_size
    lock_sum, demand_sum = 0, 0
    for first, child in node.children.items():
        _require(child.parent is node, f"node {child.id}: wrong parent link")
        _require(cache._nodes.get(child.id) is child, f"node {child.id}: not indexed")
        _require(len(child.key) > 0 and len(child.key) % bs == 0, f"node {child.id}: key not whole blocks")
        _require(child.key[:bs] == first, f"node {child.id}: keyed under the wrong first block")
        _require(child.start == node.end, f"node {child.id}: positions do not follow its parent")
        _check_node(cache, node, child)
        if child.blocks is not None:
            blocks.extend(child.blocks)
        if child.checkpoint is not None:
            slots.append(child.checkpoint.slot)
        _check_subtree(cache, child, blocks, slots)
        lock_sum += child.lock_ref
        demand_sum += child.demand
    if node.parent is not None:
        own = cache._locks.get(node.id, 0)
        _require(
            node.lock_ref == own + lock_sum, f"node {node.id}: lock_ref {node.lock_ref} != {own}+{lock_sum}"
        )
        _require(node.demand == node.ends + demand_sum, f"node {node.id}: demand mismatch")


def _check_node(cache: RadixCache, parent: Node, node: Node) -> None:
    nid = node.id
    if node.blocks is None:
        _require(node.demand > 0, f"node {nid}: neither materialized nor wanted")
        _require(node.checkpoint is None, f"node {nid}: checkpoint without KV")
    else:
        _require(len(node.blocks) == len(node.key) // cache.block_size, f"node {nid}: block count")
        _require(parent.blocks is not None, f"node {nid}: materialized under an unmaterialized parent")
    live = sum(c.materialized for c in node.children.values())
    _require(node.live_children == live, f"node {nid}: live_children {node.live_children} != {live}")
    if kv_evictable(node):
        _require(cache.evictor.kv_victims.queued(node), f"node {nid}: evictable KV leaf not queued")
    if checkpoint_evictable(node):
        _require(cache.evictor.state_victims.queued(node), f"node {nid}: evictable checkpoint not queued")
    if node.published_by is not None:
        _require(node.blocks is not None, f"node {nid}: published this round without KV")
        _require(node in cache._adopted.get(node.published_by, []), f"node {nid}: unjournaled publish")
    ck = node.checkpoint
    if ck is not None and ck.readiness is Readiness.PENDING:
        _require(ck.producer is not None, f"node {nid}: PENDING checkpoint without a producer")
        _require(node.lock_ref > 0, f"node {nid}: PENDING checkpoint on an unlocked node")
        _require(
            node in cache._pending.get(ck.producer or "", []), f"node {nid}: untracked PENDING checkpoint"
        )
    if ck is not None and ck.readiness is Readiness.READY:
        _require(ck.producer is None, f"node {nid}: READY checkpoint still names a producer")
