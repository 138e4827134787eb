"""Who holds what outside the eviction order: locks on paths, requests' private KV blocks and
their working state slots. What these pin, eviction can never free (`Holdings.kept`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Set
from types import MappingProxyType

from radixflow.cache.evictable import Evictor
from radixflow.cache.node import Node
from radixflow.cache.pool import OutOfCapacity
from radixflow.cache.tree import Tree
from radixflow.cache.types import NodeHandle
from radixflow.cache.views import SetView


class Holdings:
    """Locks (a count per node, and ``lock_ref`` along each locked path), blocks requests hold
    outside the tree and state slots running requests work in. An unlock that frees a node offers
    it to the `Evictor`."""

    def __init__(self, tree: Tree, evictor: Evictor) -> None:
        self.tree, self.evictor = tree, evictor
        self._locks: Counter[int] = Counter()  # node id -> locks held on exactly that node
        self._private: set[int] = set()  # blocks held by requests outside the tree
        self._working: set[int] = set()  # state slots held by running requests

    # ----------------------------------------------------------------- locks
    def lock(self, handle: NodeHandle | None) -> None:
        """Pin the path root..handle against eviction (mutates lock_ref along the path). ValueError,
        changing nothing, for a node without KV (a registered prompt's end, say, or a root)."""
        if handle is None:
            return
        node: Node | None = _lockable(self.tree.lookup(handle))
        self._locks[handle.node_id] += 1
        while node is not None and node.parent is not None:
            node.lock_ref += 1
            node = node.parent

    def relock(self, old: NodeHandle | None, new: NodeHandle | None) -> None:
        """Move a lock from ``old`` to ``new``, a node at or below it (same as lock new, unlock old).

        Only the nodes between the two change: a chunk's lock moves down its own path. ValueError,
        changing nothing, for an unlocked ``old``, or a ``new`` not at or below it or without KV.
        """
        if old is None or new is None:
            self.lock(new)
            self.unlock(old)
            return
        top, node = self.tree.lookup(old), _lockable(self.tree.lookup(new))
        if self._locks[old.node_id] == 0:
            raise ValueError(f"unlock of an unlocked node {old}")
        between = self._below(top, node)
        self._release_lock(old.node_id)
        self._locks[new.node_id] += 1
        for walk in between:
            walk.lock_ref += 1

    @staticmethod
    def _below(top: Node, node: Node) -> list[Node]:
        """The nodes from ``node`` up to (excluding) ``top``; ValueError, before a relock changes
        anything, when ``top`` is not on ``node``'s path. Pure."""
        between: list[Node] = []
        walk: Node | None = node
        while walk is not top:
            if walk is None or walk.parent is None:
                raise ValueError(f"relock to node {node.id}, not at or below the old node {top.id}")
            between.append(walk)
            walk = walk.parent
        return between

    def unlock(self, handle: NodeHandle | None) -> None:
        """Release a `lock`; ValueError for a node holding none. Nodes left unlocked may be evicted."""
        if handle is None:
            return
        node = self.tree.lookup(handle)
        if self._locks[node.id] == 0:
            raise ValueError(f"unlock of an unlocked node {handle}")
        self._release_lock(node.id)
        walk: Node | None = node
        owed = 0  # the latest stamp owed on a node unlocked so far: its ancestors' too
        while walk is not None and walk.parent is not None:
            walk.lock_ref -= 1
            if walk.lock_ref == 0 and walk.path_stamp:
                owed, walk.path_stamp = max(owed, walk.path_stamp), 0
            if walk.last_used < owed:  # written before the policy may rank it (offered)
                walk.last_used = owed
            if walk.lock_ref == 0:
                self.evictor.offer(walk)
            walk = walk.parent

    def _release_lock(self, node_id: int) -> None:
        # an entry goes with its last lock: node ids are never reused, so zeros would pile up
        self._locks[node_id] -= 1
        if not self._locks[node_id]:
            del self._locks[node_id]

    # ----------------------------------------------------------------- private resources
    def alloc_blocks(self, n: int) -> list[int]:
        """Blocks for a request's own use; OutOfCapacity, taking none, when the pool or the byte
        budget (promised KV included: these may be the promised blocks) lacks room."""
        short = self.evictor.ledger.shortfall(n, 0)
        if short:
            raise OutOfCapacity(f"KV blocks: need {n}, the budget is {short} bytes short")
        ids = self.tree.kv.take(n)
        self._private.update(ids)
        return ids

    def free_blocks(self, ids: Sequence[int]) -> None:
        """Return a request's blocks; ones the tree adopted are skipped (the tree owns them).
        ValueError for a block named twice, changing nothing."""
        mine = [i for i in ids if i in self._private]
        self.tree.kv.give(mine)  # first: it refuses a repeated id before anything moves
        self._private.difference_update(mine)

    def adopted(self, ids: Iterable[int]) -> None:
        """The tree took over these private blocks (they stay taken in the pool)."""
        self._private.difference_update(ids)

    def alloc_working_slot(self) -> int:
        """A state slot for a running request's chunk-to-chunk state; OutOfCapacity, taking none,
        when the pool or the byte budget beside the promised KV (`ByteLedger.free_slots`) lacks one."""
        if self.tree.slots.free and not self.evictor.ledger.free_slots():
            raise OutOfCapacity("state slots: need 1, the budget has no room beside the promised KV")
        slot = self.tree.slots.take(1)[0]
        self._working.add(slot)
        return slot

    def free_working_slot(self, slot: int) -> None:
        """Return a working slot to its pool; ValueError for one no request works in."""
        self.hand_over(slot)
        self.tree.slots.give([slot])

    def hand_over(self, slot: int) -> None:
        """A working slot stops being a request's (it becomes a checkpoint, or is freed);
        ValueError, changing nothing, for one no request works in."""
        if slot not in self._working:
            raise ValueError(f"state slot {slot} is no request's working slot")
        self._working.remove(slot)

    # ----------------------------------------------------------------- what eviction cannot free
    def kept(self) -> tuple[int, int]:
        """KV blocks and state slots that stay once every unlocked entry went (a PENDING checkpoint
        is always locked): the paths above locks, private blocks and working slots.
        O(locks x depth). Pure."""
        seen: set[int] = set()
        locked_blocks = locked_ckpts = 0
        for nid in self._locks:
            node: Node | None = self.tree.lookup(NodeHandle(nid))
            while node is not None and node.parent is not None and node.id not in seen:
                seen.add(node.id)
                locked_blocks += len(node.blocks or ())
                locked_ckpts += node.checkpoint is not None
                node = node.parent
        return len(self._private) + locked_blocks, len(self._working) + locked_ckpts

    # ----------------------------------------------------------------- read-only views (pure)
    @property
    def private_blocks(self) -> Set[int]:
        """KV blocks held by requests outside the tree (a live view)."""
        return SetView(self._private)

    @property
    def working_slots(self) -> Set[int]:
        """State slots held by running requests for their chunk-to-chunk state (a live view)."""
        return SetView(self._working)

    @property
    def lock_counts(self) -> Mapping[int, int]:
        """Node id -> locks held on exactly that node, for each node holding one (a live view)."""
        return MappingProxyType(self._locks)

    @property
    def locked_nodes(self) -> int:
        """Nodes with a lock held on exactly them (each lock holder's node; bounded by them). Pure."""
        return len(self._locks)

    def own_locks(self, node: Node) -> int:
        """Locks held on exactly ``node`` (not on a node below it). Pure."""
        return self._locks[node.id]


def _lockable(node: Node) -> Node:
    """``node``, if a lock may hold it; ValueError for one without KV: a registered prompt's end
    (its unregister would prune it, locked) or a root (pruned with its namespace; the root's
    lock is ``None``). Pure."""
    if node.parent is None or not node.materialized:
        raise ValueError(f"lock of node {node.id}, which holds no KV")
    return node
