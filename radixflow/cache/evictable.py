"""What may be evicted, and the queues it is evicted from: the next victim in O(log n), never a
tree scan.

A queue is a lazy min-heap over tree nodes, one valid entry per queued node. The cache offers a
node whenever it may have become evictable (unlock to zero, commit, a child evicted, ...); entries
are checked when popped: a node that is gone or no longer eligible is dropped, and one whose
priority moved since it was pushed (a match touched it) goes back with its current priority.
Stored priorities never exceed current ones (touches only raise them; a change of the tree that
lowers one queues the node again at its new priority, `requeue`), so the first valid pop is the
true minimum: the same victim a full rebuild of the heap would choose.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable

from radixflow.cache.eviction import EntryKind, EvictionPolicy, Priority
from radixflow.cache.eviction_checked import lowered_key
from radixflow.cache.ledger import ByteLedger
from radixflow.cache.node import Node
from radixflow.cache.tree import Tree
from radixflow.cache.types import Readiness


class EvictionQueue:
    """A node pruned from the tree while queued is `forget`-ten: its entry is counted stale and
    the heap is rebuilt without such entries once they are half of it, so a queue that is rarely
    popped (state slots seldom short) does not keep every node the tree ever pruned."""

    SLACK = 64  # stale entries tolerated in a small heap before a rebuild

    def __init__(
        self,
        eligible: Callable[[Node], bool],
        priority: Callable[[Node], Priority],
        live: Callable[[Node], bool],
        lowered: Callable[[Node, Priority, Priority], None] | None = None,
    ) -> None:
        self._eligible = eligible  # may this node be evicted now?
        self._priority = priority  # smallest first
        self._live = live  # is the node still in the tree?
        # told of an entry met at the top above its node's priority (key, then priority): a key
        # that dropped with no `requeue`, which the pops before may have passed over
        self._lowered = lowered
        # (priority, node id, push sequence, node): ties go by node id, and the sequence keeps two
        # entries of one node apart without comparing nodes
        self._heap: list[tuple[Priority, int, int, Node]] = []
        self._seq = itertools.count()
        self._queued: set[int] = set()  # ids of nodes with an entry in the heap
        self.stale = 0  # entries of forgotten nodes, and superseded ones (`requeue`), still in the heap

    def offer(self, node: Node) -> None:
        """Queue ``node`` if it is eligible and not queued yet (mutates the heap)."""
        if node.id not in self._queued and self._eligible(node):
            heapq.heappush(self._heap, (self._priority(node), node.id, next(self._seq), node))
            self._queued.add(node.id)

    def requeue(self, node: Node) -> None:
        """``node``'s priority may have dropped: queue it (again) at its current priority. A node
        already queued gets a second entry, the first then counted stale (mutates the heap)."""
        if node.id not in self._queued:
            self.offer(node)
        else:  # eligible or not: it may become so again, and must not be found at its old key then
            heapq.heappush(self._heap, (self._priority(node), node.id, next(self._seq), node))
            self.stale += 1
            self._compact()

    def peek(self) -> Node | None:
        """The eligible node with the smallest priority, left queued; None if there is none
        (drops the invalid entries above it, mutating the heap)."""
        while self._heap:
            key, nid, _, node = self._heap[0]
            if nid not in self._queued:  # forgotten or superseded: counted stale until now
                heapq.heappop(self._heap)
                self.stale -= 1
                continue
            if not self._live(node) or not self._eligible(node):
                heapq.heappop(self._heap)
                self._queued.discard(nid)
                continue
            current = self._priority(node)
            if current != key:
                if current < key and self._lowered is not None:  # only when a key moved: no cost
                    self._lowered(node, key, current)
                heapq.heapreplace(self._heap, (current, nid, next(self._seq), node))
                continue
            return node
        return None

    def pop(self) -> Node | None:
        """Remove and return the eligible node with the smallest priority; None if there is none."""
        node = self.peek()
        if node is not None:
            heapq.heappop(self._heap)
            self._queued.discard(node.id)
        return node

    def forget(self, node: Node) -> None:
        """``node`` left the tree: its entry, if any, is stale (mutates the heap when they pile up)."""
        if node.id not in self._queued:
            return
        self._queued.discard(node.id)
        self.stale += 1
        self._compact()

    def _compact(self) -> None:
        """Rebuild the heap without stale entries once they are half of it (mutates the heap)."""
        if self.stale > max(len(self._heap) // 2, self.SLACK):
            self._heap = list(self.stored().values())  # each queued node's smallest entry
            heapq.heapify(self._heap)
            self.stale = 0

    def stored(self) -> dict[int, tuple[Priority, int, int, Node]]:
        """Each queued node's smallest heap entry, by node id (a full pass: for checks). Pure."""
        smallest: dict[int, tuple[Priority, int, int, Node]] = {}
        for entry in self._heap:
            nid = entry[1]
            if nid in self._queued and (nid not in smallest or entry < smallest[nid]):
                smallest[nid] = entry
        return smallest

    def priority(self, node: Node) -> Priority:
        """``node``'s current priority in this queue. Pure."""
        return self._priority(node)

    def queued(self, node: Node) -> bool:
        return node.id in self._queued

    def __len__(self) -> int:
        return len(self._heap)


def kv_evictable(node: Node) -> bool:
    """A KV leaf nothing holds: unlocked, no PENDING state, no materialized child."""
    ready = node.checkpoint is None or node.checkpoint.readiness is Readiness.READY
    return (
        node.parent is not None
        and node.materialized
        and node.lock_ref == 0
        and ready
        and (node.live_children == 0)
    )


def checkpoint_evictable(node: Node) -> bool:
    """A READY checkpoint on a node nobody holds (its KV may stay)."""
    ck = node.checkpoint
    return ck is not None and ck.readiness is Readiness.READY and node.lock_ref == 0


class Evictor:
    """Frees a `Tree`'s KV blocks and state slots, policy-ordered, from its queues.

    The cache offers a node whenever it may have become evictable (a lock dropped to zero, a
    checkpoint committed, a child evicted); `check_integrity` verifies nothing evictable is missing.
    Under a byte budget (``ledger``) bytes short are freed from either kind, the entry the policy
    ranks lowest first; ids short in a pool are freed from that pool's kind.
    """

    def __init__(self, tree: Tree, policy: EvictionPolicy, ledger: ByteLedger | None = None) -> None:
        self.tree = tree
        self.policy = policy
        self.ledger = ledger or ByteLedger(tree.kv, tree.slots, 1, 1, None)
        kv, ckpt, live = EntryKind.KV, EntryKind.CHECKPOINT, tree.is_live
        kv_key, ckpt_key = (lambda n: policy.priority(n, kv)), (lambda n: policy.priority(n, ckpt))
        self.kv_victims = EvictionQueue(kv_evictable, kv_key, live, lowered_key(policy, kv))
        self.state_victims = EvictionQueue(checkpoint_evictable, ckpt_key, live, lowered_key(policy, ckpt))
        # entries evicted, by kind: KV leaves, and checkpoints (those lost with their leaf included)
        self.evictions: Counter[EntryKind] = Counter()

    def offer(self, node: Node) -> None:
        """``node`` may have become evictable: queue its KV and its checkpoint."""
        if node.lock_ref == 0:  # a locked node is neither (the common case on a hot path)
            self.kv_victims.offer(node)
            self.state_victims.offer(node)

    def checkpoint_added(self, node: Node) -> None:
        """A checkpoint appeared on ``node``: for a policy that values a checkpoint by the tokens
        since the one above it, the nearest checkpoints below now save less: queue them at their
        new priority (a walk down to them, through materialized nodes only)."""
        if not self.policy.coupled:
            return
        stack = [c for c in node.children.values() if c.materialized]
        while stack:
            below = stack.pop()
            if below.checkpoint is not None:
                self.kv_victims.requeue(below)
                self.state_victims.requeue(below)
            else:
                stack.extend(c for c in below.children.values() if c.materialized)

    def demand_dropped(self, node: Node) -> None:
        """A registered prompt through ``node`` and its ancestors is gone: for a policy that counts
        waiting prompts as future hits, the checkpoints among them are worth less now."""
        if not self.policy.coupled:
            return
        for above in node.ancestors():  # a node not queued gets its current priority when offered
            for queue in (self.kv_victims, self.state_victims):
                if queue.queued(above):
                    queue.requeue(above)

    def checkpoint_dropped(self, node: Node) -> None:
        """``node`` lost its checkpoint and kept its KV, which may be worth less now: queue it at
        its new priority (a policy that values KV by the checkpoint on it lowers it)."""
        if self.policy.coupled:
            self.kv_victims.requeue(node)
        else:
            self.kv_victims.offer(node)

    def drop_kv(self, node: Node) -> None:
        """Free ``node``'s KV and checkpoint now (`Tree.drop_kv`: may prune it) and queue its parent,
        which may have become an evictable KV leaf."""
        parent = node.parent
        assert parent is not None
        self.tree.drop_kv(node)
        # pruned, its entries would keep it alive; kept bare for a waiting prompt, they would hold
        # the priority of an entry it no longer has: either way they are stale
        self.kv_victims.forget(node)
        self.state_victims.forget(node)
        self.kv_victims.offer(parent)

    def reserve(self, blocks: int, slots: int) -> bool:
        """Evict until ``blocks`` KV blocks and ``slots`` state slots are free, in their pools and
        in the budget; False if impossible."""
        kv, state, ledger = self.tree.kv, self.tree.slots, self.ledger
        if kv.free < blocks and not self._evict_leaves(blocks - kv.free):
            return False
        if state.free < slots and not self._evict_checkpoints(slots - state.free):
            return False
        return self._evict_ranked(lambda: ledger.shortfall(blocks, slots) == 0)

    def free_slots_upto(self, n: int) -> int:
        """Evict until ``n`` state slots can be taken (`ByteLedger.free_slots`) or nothing more can
        go; returns min(that, n). Only READY checkpoints go for a slot short in its pool; under a
        budget, bytes short go as the policy ranks KV leaves and checkpoints."""
        state, ledger = self.tree.slots, self.ledger
        if state.free < n:
            self._evict_checkpoints(n - state.free)
        self._evict_ranked(lambda: ledger.free_slots() >= min(n, state.free))
        return min(ledger.free_slots(), n)

    def _evict_ranked(self, enough: Callable[[], bool]) -> bool:
        """Evict the lowest-ranked entry of either kind until ``enough()``; False if none is left."""
        while not enough():
            leaf, ckpt = self.kv_victims.peek(), self.state_victims.peek()
            if leaf is None and ckpt is None:
                return False
            if ckpt is None or (
                leaf is not None and self.kv_victims.priority(leaf) <= self.state_victims.priority(ckpt)
            ):
                self._evict_leaves(1)
            else:
                self._evict_checkpoints(1)
        return True

    def _evict_leaves(self, need: int) -> bool:
        """Free at least ``need`` KV blocks from evictable leaves; a parent left bare may follow."""
        freed = 0
        while freed < need:
            node = self.kv_victims.pop()
            if node is None:
                return False
            freed += len(node.blocks or [])
            self.policy.evicted(node, EntryKind.KV)
            self.evictions[EntryKind.KV] += 1
            self.evictions[EntryKind.CHECKPOINT] += node.checkpoint is not None
            self._hand_down_stamp(node)
            self.drop_kv(node)
        return True

    @staticmethod
    def _hand_down_stamp(node: Node) -> None:
        """``node``'s KV is evicted: its parent takes over its stamp on the policy's clock
        (``aged``) if later. A request that resumed at ``node`` (or computed it) used the parent's
        KV too, and the next one like it resumes at or above the parent: without this, a
        context's upper pieces keep the stamp of its first computation however often requests
        resumed below them, and follow its last piece out at once (mutates the parent; its keys
        only grow, as the queues require)."""
        parent = node.parent
        if parent is not None:
            parent.aged = max(parent.aged, node.aged)

    def _evict_checkpoints(self, need: int) -> bool:
        """Drop ``need`` unlocked READY checkpoints, keeping their KV; False if there are fewer."""
        for _ in range(need):
            node = self.state_victims.pop()
            if node is None:
                return False
            self.policy.evicted(node, EntryKind.CHECKPOINT)
            self.evictions[EntryKind.CHECKPOINT] += 1
            self.tree.drop_checkpoint(node)
            self.checkpoint_dropped(node)
        return True
