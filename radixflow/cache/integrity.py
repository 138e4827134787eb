"""`check_integrity()` for the radix cache: every invariant written beside the fields, checked.

Reads the cache only through its public face (the tree's walk, the read-only accounting views and
round journals, the evictor's queues); changes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from radixflow.cache import lookup
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


@dataclass(frozen=True)
class _Journals:
    """One snapshot of the cache's round journals, taken once per check."""

    adopted: Mapping[str, tuple[Node, ...]]
    pending: Mapping[str, tuple[Node, ...]]


@dataclass
class _Walk:
    """What a walk of the tree from its roots found: KV blocks and state slots, by their owners,
    and how many nodes it passed."""

    blocks: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    nodes: int = 0
    ends: dict[int, int] = field(default_factory=dict)  # node id -> registered prompts ending there


def check_cache(cache: RadixCache) -> None:
    """Raise `IntegrityError` at the first broken invariant of ``cache``. Pure."""
    journals = _Journals(cache.journal.adopted_by_producer(), cache.journal.pending_by_producer())
    walk = _Walk()
    for root in cache.tree.roots():
        _require(root.parent is None and root.key == () and root.end == 0, "malformed root")
        # an empty namespace holds only its name: kept, a client naming new salts grows the server
        _require(bool(root.children) or root.ends > 0, f"root {root.id}: a namespace that holds nothing")
        _check_subtree(cache, journals, root, walk)
    # the walk meets only indexed nodes (`_check_subtree`): as many as the index holds, the same
    extra = len(cache.tree.nodes()) - walk.nodes
    _require(extra == 0, f"{extra} indexed nodes not in the tree")
    _check_registrations(walk.ends, {h.node_id: n for h, n in cache.registrations.items()})
    tree_blocks, slots = walk.blocks, walk.slots
    private, working = cache.private_blocks, cache.working_slots
    _require(len(tree_blocks) == len(set(tree_blocks)), "a KV block is owned by two nodes")
    _require(not set(tree_blocks) & private, "a KV block is both private and in the tree")
    _require(cache.kv.used() == set(tree_blocks) | private, "KV accounting: free + cached + locked != total")
    _require(len(slots) == len(set(slots)), "a state slot is owned by two checkpoints")
    _require(not set(slots) & working, "a state slot is both a checkpoint and working state")
    _require(cache.slots.used() == set(slots) | working, "state-slot accounting mismatch")
    usage = cache.usage()
    _require(
        usage.free_blocks + usage.cached_blocks + usage.locked_blocks == usage.total_blocks,
        "free + cached + locked != total blocks",
    )
    _require(
        usage.free_slots + usage.checkpoint_slots + usage.working_slots == usage.total_slots,
        "free + checkpoint + working != total state slots",
    )
    held = sum(1 for node in cache.tree.nodes() if cache.own_locks(node))
    _require(held == cache.locked_nodes, f"{cache.locked_nodes - held} locked nodes not in the tree")
    _check_ledger(cache, len(tree_blocks) + len(private), len(slots), len(working))
    _check_queues(cache)
    _check_remembered(cache)
    for producer, nodes in journals.adopted.items():
        for node in nodes:  # `withdraw` frees each journaled node's blocks: it must be in the tree
            _require(cache.tree.is_live(node), f"node {node.id}: journaled by {producer}, not in the tree")
            _require(node.published_by == producer, f"stale round journal entry for {producer}")
    for producer, nodes in journals.pending.items():
        for node in nodes:
            _require(cache.tree.is_live(node), f"node {node.id}: journaled by {producer}, not in the tree")
            ck = node.checkpoint
            _require(ck is not None and ck.producer == producer, f"stale pending entry for {producer}")


def _check_ledger(cache: RadixCache, blocks: int, checkpoints: int, working: int) -> None:
    """The byte ledger charges exactly what the tree and the requests hold, within the budget, and
    the KV promised to running requests fits beside it, in the budget and in the pool's free blocks."""
    ledger, memory = cache.ledger, cache.memory()
    _require(memory.kv_bytes == blocks * ledger.block_bytes, "ledger: KV bytes != blocks held")
    _require(memory.checkpoint_bytes == checkpoints * ledger.slot_bytes, "ledger: checkpoint bytes mismatch")
    _require(memory.working_bytes == working * ledger.slot_bytes, "ledger: working-state bytes mismatch")
    _require(ledger.promised >= 0, f"ledger: {ledger.promised} KV blocks promised")
    # running requests take their promised blocks without a reservation, so nothing is evicted
    # for them: the pool must hold them free now
    free = cache.kv.free
    _require(ledger.promised <= free, f"ledger: {ledger.promised} KV blocks promised, {free} free")
    if ledger.budget is not None:
        _require(memory.used_bytes <= ledger.budget, f"ledger: {memory.used_bytes} bytes over the budget")
        in_use = memory.used_bytes + memory.promised_bytes
        _require(in_use <= ledger.budget, f"ledger: {in_use} bytes with promised KV over the budget")


def _check_queues(cache: RadixCache) -> None:
    """The lazy heaps' invariant: no queued entry of a node still in the tree is ranked later than
    its node's current priority (else a pop could pass over the true victim), and every node
    marked queued has an entry (else it is never popped, nor offered again)."""
    evictor = cache.evictor
    for queue in (evictor.kv_victims, evictor.state_victims):
        stored = queue.stored()
        for key, nid, _, node in stored.values():
            if cache.tree.is_live(node):
                current = queue.priority(node)
                _require(key <= current, f"node {nid}: queued at {key}, above its priority {current}")
        for node in cache.tree.nodes():
            if queue.queued(node):
                _require(node.id in stored, f"node {node.id}: queued without a heap entry")


def _check_remembered(cache: RadixCache) -> None:
    """Each path the publisher remembers for a next chunk's hint (`SpelledPaths`) is the one a
    walk up from its node finds now: the tree's shape count moved with every change to it."""
    for namespace, tokens, handle, path in cache.publisher.paths.remembered():
        found = lookup.spelled(cache.tree, namespace, tokens, handle)
        _require(found == path, f"node {handle.node_id}: a remembered path that the walk up no longer finds")


def _check_registrations(in_tree: dict[int, int], registered: dict[int, int]) -> None:
    """The prompts ending on each node (its ``ends``) are those registered there."""
    for nid in sorted(in_tree.keys() | registered.keys()):
        ends, count = in_tree.get(nid, 0), registered.get(nid, 0)
        _require(ends == count, f"node {nid}: {ends} registered prompts end in the tree, {count} registered")


def _check_subtree(cache: RadixCache, journals: _Journals, node: Node, walk: _Walk) -> None:
    bs = cache.block_size
    walk.nodes += 1
    if node.ends:
        walk.ends[node.id] = node.ends
    # with demand = ends + the children's, a negative count still adds up: checked on its own
    _require(node.ends >= 0, f"node {node.id}: {node.ends} registered prompts end here")
    live = sum(c.materialized for c in node.children.values())  # a root's count is kept too
    _require(node.live_children == live, f"node {node.id}: live_children {node.live_children} != {live}")
    lock_sum, demand_sum = 0, 0
    for first, child in node.children.items():
        _require(child.parent is node, f"node {child.id}: wrong parent link")
        _require(cache.tree.is_live(child), f"node {child.id}: not indexed")
        _require(len(child.key) > 0 and len(child.key) % bs == 0, f"node {child.id}: key not whole blocks")
        _require(child.key[:bs] == first, f"node {child.id}: keyed under the wrong first block")
        _require(child.start == node.end, f"node {child.id}: positions do not follow its parent")
        _check_node(cache, journals, node, child)
        if child.blocks is not None:
            walk.blocks.extend(child.blocks)
        if child.checkpoint is not None:
            walk.slots.append(child.checkpoint.slot)
        _check_subtree(cache, journals, child, walk)
        lock_sum += child.lock_ref
        demand_sum += child.demand
    if node.parent is not None:
        own = cache.own_locks(node)
        _require(
            node.lock_ref == own + lock_sum, f"node {node.id}: lock_ref {node.lock_ref} != {own}+{lock_sum}"
        )
        _require(node.demand == node.ends + demand_sum, f"node {node.id}: demand mismatch")


def _check_node(cache: RadixCache, journals: _Journals, parent: Node, node: Node) -> None:
    nid = node.id
    if node.blocks is None:
        _require(node.demand > 0, f"node {nid}: neither materialized nor wanted")
        _require(node.checkpoint is None, f"node {nid}: checkpoint without KV")
    else:
        _require(len(node.blocks) == len(node.key) // cache.block_size, f"node {nid}: block count")
        _require(parent.blocks is not None, f"node {nid}: materialized under an unmaterialized parent")
    _require(node.hits >= 1, f"node {nid}: {node.hits} hits")
    _require(node.aged <= cache.evictor.policy.clock, f"node {nid}: aged past the eviction clock")
    _require(node.path_stamp == 0 or node.lock_ref > 0, f"node {nid}: a stamp owed on an unlocked node")
    if kv_evictable(node):
        _require(cache.evictor.kv_victims.queued(node), f"node {nid}: evictable KV leaf not queued")
    if checkpoint_evictable(node):
        _require(cache.evictor.state_victims.queued(node), f"node {nid}: evictable checkpoint not queued")
    if node.published_by is not None:
        _require(node.blocks is not None, f"node {nid}: published this round without KV")
        _require(node in journals.adopted.get(node.published_by, ()), f"node {nid}: unjournaled publish")
    ck = node.checkpoint
    if ck is not None and ck.readiness is Readiness.PENDING:
        _require(ck.producer is not None, f"node {nid}: PENDING checkpoint without a producer")
        _require(node.lock_ref > 0, f"node {nid}: PENDING checkpoint on an unlocked node")
        _require(
            node in journals.pending.get(ck.producer or "", ()), f"node {nid}: untracked PENDING checkpoint"
        )
    if ck is not None and ck.readiness is Readiness.READY:
        _require(ck.producer is None, f"node {nid}: READY checkpoint still names a producer")
