"""Exact-prefix radix cache: KV blocks and recurrent-state checkpoints in one tree per namespace.

The scheduler talks to this class only through `NodeHandle`, `Match` and `Extension` objects.
Pure Python on purpose: the cache decides *what* is reusable, the runner owns the tensors.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence

from radixflow.cache.eviction import LRU, EvictionCandidate, EvictionPolicy
from radixflow.cache.node import Checkpoint, Node, common_blocks
from radixflow.cache.pool import IdPool
from radixflow.cache.types import CacheUsage, Extension, Match, NodeHandle, Readiness


class RadixCache:
    def __init__(
        self,
        block_size: int,
        num_blocks: int,
        num_slots: int,
        eviction: EvictionPolicy | None = None,
    ) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size
        self.kv = IdPool(num_blocks, "KV blocks")
        self.slots = IdPool(num_slots, "state slots")
        self.eviction = eviction or LRU()
        self._roots: dict[str, Node] = {}
        self._nodes: dict[int, Node] = {}
        self._next_id = 0
        self._tick = 0
        self._locks: Counter[int] = Counter()  # node id -> locks held on exactly that node
        self._private: set[int] = set()  # blocks held by requests outside the tree
        self._working: set[int] = set()  # state slots held by running requests
        self._pending: dict[str, list[Node]] = {}  # producer -> nodes with its PENDING checkpoints
        # producer -> nodes whose KV it published this round (undone by `withdraw`, kept by `commit`)
        self._adopted: dict[str, list[Node]] = {}

    # ----------------------------------------------------------------- tree walking
    def _root(self, namespace: str) -> Node:
        if namespace not in self._roots:
            self._roots[namespace] = self._new_node((), None, 0, blocks=[])
        return self._roots[namespace]

    def _new_node(
        self, key: tuple[int, ...], parent: Node | None, end: int, blocks: list[int] | None
    ) -> Node:
        node = Node(id=self._next_id, key=key, parent=parent, end=end, blocks=blocks)
        self._next_id += 1
        self._nodes[node.id] = node
        if parent is not None:
            parent.children[key[: self.block_size]] = node
        return node

    def _split(self, node: Node, nblocks: int) -> Node:
        """Cut ``node`` after ``nblocks`` blocks; returns the new upper part (no checkpoint)."""
        bs, parent = self.block_size, node.parent
        assert parent is not None and 0 < nblocks * bs < len(node.key)
        upper_key, node.key = node.key[: nblocks * bs], node.key[nblocks * bs :]
        upper_blocks = None
        if node.blocks is not None:
            upper_blocks, node.blocks = node.blocks[:nblocks], node.blocks[nblocks:]
        upper = self._new_node(upper_key, parent, node.start, upper_blocks)
        upper.lock_ref, upper.demand, upper.last_used = node.lock_ref, node.demand, node.last_used
        if node.published_by is not None:  # both halves were published by the same round
            upper.published_by = node.published_by
            self._adopted[node.published_by].append(upper)
        upper.children[node.key[:bs]] = node
        node.parent = upper
        return upper

    def _path(self, namespace: str, tokens: tuple[int, ...], nblocks: int) -> list[Node]:
        """Nodes covering the first ``nblocks`` blocks, creating/splitting so one ends exactly there."""
        bs = self.block_size
        node, pos, path = self._root(namespace), 0, []
        while pos < nblocks * bs:
            child = node.children.get(tokens[pos : pos + bs])
            if child is None:
                child = self._new_node(tokens[pos : nblocks * bs], node, nblocks * bs, blocks=None)
            shared = common_blocks(child.key, tokens[: nblocks * bs], pos, bs)
            if shared * bs < len(child.key):
                child = self._split(child, shared)
            path.append(child)
            node, pos = child, child.end
        return path

    def _handle(self, node: Node) -> NodeHandle:
        return NodeHandle(node.id)

    def _node(self, handle: NodeHandle) -> Node:
        try:
            return self._nodes[handle.node_id]
        except KeyError:
            raise ValueError(f"stale cache handle {handle}") from None

    # ----------------------------------------------------------------- demand (known sequences)
    def register(self, namespace: str, tokens: Sequence[int]) -> NodeHandle:
        """Record a waiting prompt's whole blocks in the tree (mutates demand, may split nodes).

        Used to find branch points before prefill; costs no capacity.
        """
        tokens = tuple(tokens)
        path = self._path(namespace, tokens, len(tokens) // self.block_size)
        for node in path:
            node.demand += 1
        end = path[-1] if path else self._root(namespace)
        end.ends += 1
        return self._handle(end)

    def unregister(self, handle: NodeHandle) -> None:
        """Undo `register`; prunes nodes that are neither materialized nor wanted."""
        end = self._node(handle)
        end.ends -= 1
        for node in end.ancestors():
            node.demand -= 1
        for node in end.ancestors():
            if node.demand == 0 and not node.materialized:
                self._remove(node)

    def branch_points(self, handle: NodeHandle, lo: int, hi: int) -> list[int]:
        """Positions in ``(lo, hi]`` on a registered path where known sequences diverge."""
        return sorted(
            n.end for n in self._node(handle).ancestors() if lo < n.end <= hi and len(n.children) > 1
        )

    # ----------------------------------------------------------------- matching
    def match(self, namespace: str, tokens: Sequence[int], limit: int, touch: bool = True) -> Match:
        """Longest reusable prefix of ``tokens[:limit]``; ``touch`` refreshes the path's LRU clock."""
        bs, tokens = self.block_size, tuple(tokens[: (limit // self.block_size) * self.block_size])
        self._tick += touch
        node, pos = self._root(namespace), 0
        best: Node | None = None
        while pos < len(tokens):
            child = node.children.get(tokens[pos : pos + bs])
            if child is None or not child.materialized:
                break
            if touch:
                child.last_used = self._tick
            shared = common_blocks(child.key, tokens, pos, bs)
            pos += shared * bs
            if shared * bs < len(child.key):
                break
            node = child
            if node.checkpoint is not None:
                best = node
        ckpt = best.checkpoint if best is not None else None
        return Match(
            kv_tokens=pos,
            checkpoint_tokens=best.end if best is not None else 0,
            checkpoint_ready=ckpt is None or ckpt.readiness is Readiness.READY,
            producer=ckpt.producer if ckpt is not None else None,
            checkpoint_slot=ckpt.slot if ckpt is not None else None,
            handle=self._handle(best) if best is not None else None,
        )

    def kv_handle(self, namespace: str, tokens: Sequence[int], upto: int) -> NodeHandle | None:
        """Handle of the materialized node ending exactly at ``upto`` (splitting if needed)."""
        if upto == 0:
            return None
        path = self._path(namespace, tuple(tokens), upto // self.block_size)
        assert path[-1].materialized, "kv_handle beyond materialized KV"
        return self._handle(path[-1])

    def block_table(self, handle: NodeHandle | None) -> list[int]:
        """KV block ids from the root to the end of ``handle``'s node."""
        if handle is None:
            return []
        table: list[int] = []
        for node in reversed(self._node(handle).ancestors()):
            assert node.blocks is not None
            table.extend(node.blocks)
        return table

    # ----------------------------------------------------------------- locks
    def lock(self, handle: NodeHandle | None) -> None:
        """Pin the path root..handle against eviction (mutates lock_ref along the path)."""
        if handle is None:
            return
        node = self._node(handle)
        self._locks[node.id] += 1
        for n in node.ancestors():
            n.lock_ref += 1

    def unlock(self, handle: NodeHandle | None) -> None:
        if handle is None:
            return
        node = self._node(handle)
        if self._locks[node.id] == 0:
            raise ValueError(f"unlock of an unlocked node {handle}")
        self._locks[node.id] -= 1
        for n in node.ancestors():
            n.lock_ref -= 1

    # ----------------------------------------------------------------- private resources
    def alloc_blocks(self, n: int) -> list[int]:
        """Blocks for a request's own use (raises OutOfCapacity; call `reserve` first)."""
        ids = self.kv.take(n)
        self._private.update(ids)
        return ids

    def free_blocks(self, ids: Sequence[int]) -> None:
        """Return a request's blocks; ones the tree adopted are skipped (the tree owns them)."""
        mine = [i for i in ids if i in self._private]
        self._private.difference_update(mine)
        self.kv.give(mine)

    def alloc_working_slot(self) -> int:
        slot = self.slots.take(1)[0]
        self._working.add(slot)
        return slot

    def free_working_slot(self, slot: int) -> None:
        self._working.remove(slot)
        self.slots.give([slot])

    # ----------------------------------------------------------------- computed prefixes
    def extend(
        self,
        namespace: str,
        tokens: Sequence[int],
        start: int,
        end: int,
        blocks: Sequence[int],
        checkpoints: Sequence[int],
        producer: str,
    ) -> Extension:
        """Insert the whole blocks a request computes this round (mutates the tree).

        ``blocks`` are the request's private blocks for positions ``[start, end)``; nodes in that
        range without KV adopt them. Each position in ``checkpoints`` gets a PENDING checkpoint
        owned by ``producer`` unless one exists. Call `reserve` beforehand for the slots.
        """
        bs, tokens = self.block_size, tuple(tokens)
        nblocks = end // bs
        for pos in sorted(checkpoints):
            self._path(namespace, tokens, pos // bs)  # make a node boundary at pos
        if start // bs < nblocks:
            self._path(namespace, tokens, start // bs)
        path = self._path(namespace, tokens, nblocks)
        self._tick += 1
        adopted, made = 0, {}
        for node in path:
            node.last_used = self._tick
            if node.end <= start:
                continue
            if not node.materialized:
                first = (node.start - start) // bs
                node.blocks = list(blocks[first : first + len(node.key) // bs])
                self._private.difference_update(node.blocks)
                node.published_by = producer
                self._adopted.setdefault(producer, []).append(node)
                adopted += len(node.blocks)
            if node.end in checkpoints and node.checkpoint is None:
                slot = self.slots.take(1)[0]
                node.checkpoint = Checkpoint(slot, Readiness.PENDING, producer)
                self._pending.setdefault(producer, []).append(node)
                made[node.end] = slot
        handle = self._handle(path[-1]) if path else None
        return Extension(handle=handle, adopted=adopted, checkpoints=made)

    def commit(self, producer: str) -> None:
        """The producer's round finished: its PENDING checkpoints become READY (mutates them)."""
        for node in self._adopted.pop(producer, []):
            node.published_by = None
        for node in self._pending.pop(producer, []):
            if node.checkpoint is not None and node.checkpoint.producer == producer:
                node.checkpoint.readiness = Readiness.READY
                node.checkpoint.producer = None

    def withdraw(self, producers: Iterable[str]) -> None:
        """The producers' round failed: undo what their `extend` published this round.

        Their PENDING checkpoints are dropped (slots freed) and the nodes whose KV they published
        lose that KV (blocks freed; a node nobody wants any more is pruned). Unlock the producers'
        paths first.
        """
        fresh: list[Node] = []
        for producer in producers:
            for node in self._pending.pop(producer, []):
                if node.checkpoint is not None and node.checkpoint.producer == producer:
                    self._drop_checkpoint(node)
            fresh.extend(self._adopted.pop(producer, []))
        for node in sorted(fresh, key=lambda n: -n.end):  # deepest first: KV stays prefix-closed
            assert node.lock_ref == 0 and node.blocks is not None, "withdraw of a locked or bare node"
            self.kv.give(node.blocks)
            node.blocks, node.published_by = None, None
            self._drop_checkpoint(node)
            if node.demand == 0:
                self._remove(node)

    # ----------------------------------------------------------------- capacity
    def reserve(self, blocks: int, slots: int) -> bool:
        """Evict unlocked READY entries until ``blocks`` and ``slots`` are free; False if impossible."""
        if self.kv.free < blocks and not self._evict_leaves(blocks - self.kv.free):
            return False
        return self.slots.free >= slots or self._evict_checkpoints(slots - self.slots.free)

    def free_slots_upto(self, n: int) -> int:
        """Evict READY checkpoints until ``n`` slots are free or none can go; returns min(free, n)."""
        if self.slots.free < n:
            self._evict_checkpoints(n - self.slots.free)
        return min(self.slots.free, n)

    def _evictable(self, node: Node) -> bool:
        ready = node.checkpoint is None or node.checkpoint.readiness is Readiness.READY
        leaf = not any(c.materialized for c in node.children.values())
        return node.parent is not None and node.materialized and node.lock_ref == 0 and ready and leaf

    def _ranked(self, nodes: list[Node]) -> list[tuple[tuple[int, ...], int]]:
        """Heap of (policy priority, node id); the smallest is evicted first."""
        heap = [(self._priority(n), n.id) for n in nodes]
        heapq.heapify(heap)
        return heap

    def _priority(self, node: Node) -> tuple[int, ...]:
        return self.eviction.priority(EvictionCandidate(node.last_used, node.end))

    def _evict_leaves(self, need: int) -> bool:
        """Free at least ``need`` KV blocks from evictable leaves; a parent left bare joins the heap."""
        heap = self._ranked([n for n in self._nodes.values() if self._evictable(n)])
        freed = 0
        while freed < need and heap:
            node = self._nodes.get(heapq.heappop(heap)[1])
            if node is None or not self._evictable(node):
                continue
            assert node.blocks is not None
            freed += len(node.blocks)
            self.kv.give(node.blocks)
            node.blocks = None
            self._drop_checkpoint(node)
            parent = node.parent
            if node.demand == 0:
                self._remove(node)
            if parent is not None and self._evictable(parent):
                heapq.heappush(heap, (self._priority(parent), parent.id))
        return freed >= need

    def _evict_checkpoints(self, need: int) -> bool:
        """Drop at least ``need`` unlocked READY checkpoints, keeping their KV."""
        ready = [
            n
            for n in self._nodes.values()
            if n.checkpoint is not None and n.checkpoint.readiness is Readiness.READY and n.lock_ref == 0
        ]
        heap = self._ranked(ready)
        for _ in range(min(need, len(heap))):
            self._drop_checkpoint(self._nodes[heapq.heappop(heap)[1]])
        return len(ready) >= need

    def _drop_checkpoint(self, node: Node) -> None:
        if node.checkpoint is not None:
            self.slots.give([node.checkpoint.slot])
            node.checkpoint = None

    def _remove(self, node: Node) -> None:
        assert node.parent is not None and not node.children and node.lock_ref == 0
        del node.parent.children[node.key[: self.block_size]]
        del self._nodes[node.id]

    # ----------------------------------------------------------------- accounting
    def usage(self) -> CacheUsage:
        tree = [n for n in self._nodes.values() if n.blocks]
        locked = sum(len(n.blocks or []) for n in tree if n.lock_ref > 0)
        cached = sum(len(n.blocks or []) for n in tree if n.lock_ref == 0)
        ckpts = sum(1 for n in self._nodes.values() if n.checkpoint is not None)
        return CacheUsage(
            total_blocks=self.kv.capacity,
            free_blocks=self.kv.free,
            cached_blocks=cached,
            locked_blocks=locked + len(self._private),
            total_slots=self.slots.capacity,
            free_slots=self.slots.free,
            checkpoint_slots=ckpts,
            working_slots=len(self._working),
        )

    def check_integrity(self) -> None:
        from radixflow.cache.integrity import check_cache

        check_cache(self)
