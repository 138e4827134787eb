"""Exact-prefix radix cache: KV blocks and recurrent-state checkpoints in one tree per namespace.

The scheduler talks to this class only through `NodeHandle`, `Match` and `Extension` objects.
Pure Python on purpose: the cache decides *what* is reusable, the runner owns the tensors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Set
from types import MappingProxyType

from radixflow.cache import capacity, demand, lookup
from radixflow.cache.digest import CheckpointDigest
from radixflow.cache.evictable import Evictor
from radixflow.cache.eviction import LRU, EntryKind, EvictionPolicy
from radixflow.cache.holdings import Holdings
from radixflow.cache.ledger import ByteLedger, CacheBudget, MemoryUsage
from radixflow.cache.node import Node
from radixflow.cache.pool import IdPool
from radixflow.cache.publish import Publisher
from radixflow.cache.rounds import RoundJournal
from radixflow.cache.tree import Tree
from radixflow.cache.types import CacheUsage, Extension, Match, NodeHandle, Sharing


class RadixCache:
    """A composition: the `Tree` (structure), the `Evictor` (what goes when capacity runs out), the
    `RoundJournal` (what unfinished rounds published), the `Holdings` (who holds what: locks,
    requests' private blocks and working slots, which its neighbours read through read-only views)
    and the `Publisher` (computed prefixes into the tree); demand and matching are functions over
    the tree (`radixflow.cache.demand`, `radixflow.cache.lookup`), and so is capacity, which weighs
    them all against the pools and the byte budget (`radixflow.cache.capacity`).

    The scheduler uses only the methods that take and return `NodeHandle`, `Match`, `Extension`
    and `CacheUsage`; ``tree``, ``evictor``, ``journal``, ``holdings`` and ``publisher`` are for the
    cache's own modules and tests.
    """

    def __init__(
        self,
        block_size: int,
        num_blocks: int,
        num_slots: int,
        eviction: EvictionPolicy | None = None,
        budget: CacheBudget | None = None,
    ) -> None:
        """``num_blocks`` and ``num_slots`` cap the two pools; ``budget`` (None: none) limits the
        bytes both hold together (`radixflow.cache.ledger`)."""
        kv, slots = IdPool(num_blocks, "KV blocks"), IdPool(num_slots, "state slots")
        b = budget or CacheBudget()
        self.ledger = ByteLedger(kv, slots, b.block_bytes, b.slot_bytes, b.budget_bytes)
        self.journal = RoundJournal()
        self.tree = Tree(block_size, kv, slots, on_split=self.journal.on_split)
        self.evictor = Evictor(self.tree, eviction or LRU(), self.ledger)
        self.block_size, self.kv, self.slots = block_size, kv, slots
        self.holdings = Holdings(self.tree, self.evictor)
        self.publisher = Publisher(self.tree, self.journal, self.evictor, self.holdings)
        self._tick = 0  # the LRU clock: a match that touches and each extend advance it
        self._registered: Counter[NodeHandle] = Counter()  # by the node each ends on: its ``ends``

    # ----------------------------------------------------------------- demand (`radixflow.cache.demand`)
    def register(self, namespace: str, tokens: Sequence[int]) -> NodeHandle:
        """Record a waiting prompt's whole blocks in the tree (mutates demand, may split nodes).

        Used to find branch points before prefill; costs no capacity.
        """
        handle = demand.register(self.tree, namespace, tokens)
        self._registered[handle] += 1
        return handle

    def unregister(self, handle: NodeHandle) -> None:
        """Undo `register`; prunes nodes that are neither materialized nor wanted. ValueError for a
        handle no registered prompt ends on (unregistered already), changing nothing."""
        demand.unregister(self.tree, self.evictor, handle)
        left = self._registered.pop(handle, 0) - 1
        if left:  # negative only for a count already out of step with the tree: check_integrity says
            self._registered[handle] = left

    def branch_points(self, handle: NodeHandle, lo: int, hi: int) -> list[int]:
        """Positions in ``(lo, hi]`` on a registered path where known sequences diverge. Pure."""
        return demand.branch_points(self.tree, handle, lo, hi)

    def sharing(self, handle: NodeHandle) -> Sharing:
        """The deepest prefix of registered path ``handle`` that other registered prompts share
        (`Sharing.NONE` when none does). Pure."""
        return demand.sharing(self.tree, handle)

    def registered_under(self, handle: NodeHandle, limit: int) -> list[NodeHandle]:
        """Where registered prompts through node ``handle`` end (their `register` handles), at
        most ``limit`` nodes visited, nearest first; [] when the node is gone. Pure."""
        return demand.registered_under(self.tree, handle, limit)

    # ----------------------------------------------------------------- matching
    def match(self, namespace: str, tokens: Sequence[int], limit: int, touch: bool = True) -> Match:
        """Longest reusable prefix of the first ``limit`` tokens (none for a limit below 1);
        ``touch`` refreshes the path's LRU clock."""
        self._tick += touch
        return lookup.match(self.tree, namespace, tokens, limit, self._tick if touch else None)

    def resumed(self, handle: NodeHandle | None) -> None:
        """A request starts from ``handle``'s node (None: from scratch): a hit there, counted once
        per request (a waiting request is matched every round it waits), at the eviction clock."""
        if handle is not None:
            node = self.tree.lookup(handle)
            node.hits += 1
            node.aged = self.evictor.policy.clock

    def kv_handle(self, namespace: str, tokens: Sequence[int], upto: int) -> NodeHandle | None:
        """Handle of the materialized node ending exactly at ``upto`` (splitting if needed; None
        for 0). ValueError, changing nothing, where ``upto`` is no block boundary of published KV."""
        if upto == 0:
            return None
        if not lookup.published(self.tree, namespace, tokens, upto):
            raise ValueError(f"KV handle at {upto}: not a block boundary of published KV")
        return NodeHandle(self.tree.path(namespace, tuple(tokens), upto // self.block_size)[-1].id)

    def block_table(self, handle: NodeHandle | None) -> list[int]:
        """KV block ids from the root to the end of ``handle``'s node."""
        return lookup.block_table(self.tree, handle)

    # ----------------------------------------------------------------- locks (`Holdings`)
    def lock(self, handle: NodeHandle | None) -> None:
        """Pin the path root..handle against eviction (mutates lock_ref along the path). ValueError,
        changing nothing, for a node without KV (a registered prompt's end, say, or a root)."""
        self.holdings.lock(handle)

    def relock(self, old: NodeHandle | None, new: NodeHandle | None) -> None:
        """Move a lock from ``old`` to ``new``, a node at or below it (lock new, unlock old): only the
        nodes between change, as a chunk's lock moves down its own path. ValueError, changing
        nothing, for an unlocked ``old``, or a ``new`` not at or below it or without KV."""
        self.holdings.relock(old, new)

    def unlock(self, handle: NodeHandle | None) -> None:
        """Release a `lock`; ValueError for a node holding none."""
        self.holdings.unlock(handle)

    # ----------------------------------------------------------------- private resources (`Holdings`)
    def alloc_blocks(self, n: int) -> list[int]:
        """Blocks for a request's own use (call `reserve` first): OutOfCapacity, taking none, where
        the pool or the byte budget lacks room."""
        return self.holdings.alloc_blocks(n)

    def free_blocks(self, ids: Sequence[int]) -> None:
        """Return a request's blocks; ones the tree adopted are skipped (the tree owns them).
        ValueError for a block named twice, changing nothing."""
        self.holdings.free_blocks(ids)

    def alloc_working_slot(self) -> int:
        """A state slot for a running request's chunk-to-chunk state: OutOfCapacity, taking none,
        where the pool or the byte budget beside the promised KV (`free_slots`) lacks one."""
        return self.holdings.alloc_working_slot()

    def free_working_slot(self, slot: int) -> None:
        """Return a working slot to its pool; ValueError, changing nothing, for one no request
        works in."""
        self.holdings.free_working_slot(slot)

    # ----------------------------------------------------------------- computed prefixes (`Publisher`)
    def extend(
        self,
        namespace: str,
        tokens: Sequence[int],
        start: int,
        end: int,
        blocks: Sequence[int],
        checkpoints: Sequence[int],
        producer: str,
        hint: NodeHandle | None = None,
    ) -> Extension:
        """Insert the whole blocks a request computes this round (mutates the tree).

        ``blocks``: the request's block table from ``start // block_size`` on, up to ``end``; nodes
        in ``[start, end)`` without KV adopt them. Each position in ``checkpoints`` gets a PENDING
        checkpoint owned by ``producer`` unless one exists (call `reserve` first for the slots).
        ValueError, changing nothing, for a chunk outside ``tokens``, a checkpoint inside a block,
        too few ``blocks``, or a chunk starting past the KV published before its block. ``hint``:
        the caller's lock, a speed-up only: the walk starts there if it ends at ``start``'s block."""
        self._tick += 1
        args = (namespace, tokens, start, end, blocks, checkpoints, producer, self._tick, hint)
        return self.publisher.extend(*args)

    def adopt_checkpoint(self, namespace: str, tokens: Sequence[int], position: int, slot: int) -> None:
        """Turn a request's own state slot, computed in an earlier round, into the READY
        checkpoint at ``position`` (block-aligned, KV published); the slot is freed instead when
        that position already has one. ValueError, changing nothing, for a slot that is no working
        slot or a position that is no block boundary of published KV."""
        self.publisher.adopt_checkpoint(namespace, tokens, position, slot)

    def commit(self, producer: str) -> None:
        """The producer's round finished: its PENDING checkpoints READY, its unlocked KV evictable."""
        self.publisher.commit(producer)

    def withdraw(self, producers: Iterable[str]) -> None:
        """The producers' round failed: undo what their `extend` published this round. Their
        PENDING checkpoints are dropped (slots freed) and the nodes whose KV they published lose
        that KV (blocks freed; a node nobody wants any more is pruned). Unlock the producers' paths
        first: ValueError, changing nothing, while a lock holds any of that KV."""
        self.publisher.withdraw(producers)

    # ----------------------------------------------------------------- capacity
    def reserve(self, blocks: int, slots: int) -> bool:
        """Evict unlocked READY entries until ``blocks`` and ``slots`` are free, in the pools and in
        the budget; False, evicting nothing, if impossible. ``blocks`` counts the promised ones
        (`promise`)."""
        return capacity.reserve(self.ledger, self.holdings, self.evictor, blocks, slots)

    def promise(self, blocks: int) -> None:
        """Running requests will still allocate ``blocks`` KV blocks: their bytes are spoken for,
        so checkpoints take only what is left beside them (`free_slots`)."""
        self.ledger.promised = blocks

    @property
    def promised(self) -> int:
        """KV blocks promised to running requests (`promise`). Pure."""
        return self.ledger.promised

    def free_slots_upto(self, n: int) -> int:
        """Evict READY checkpoints (under a budget, KV leaves too) until ``n`` slots are free, or as
        many as eviction can make free, evicting nothing for slots it cannot; returns min(free, n)."""
        return capacity.free_slots_upto(self.ledger, self.holdings, self.evictor, n)

    @property
    def free_slots(self) -> int:
        """State slots that can be taken now without evicting anything: free in their pool and,
        under a budget, in bytes beside the promised KV. Pure."""
        return self.ledger.free_slots()

    def holds(self, blocks: int, slots: int) -> bool:
        """Whether the empty cache could hold ``blocks`` KV blocks and ``slots`` state slots. Pure."""
        return self.ledger.holds(blocks, slots)

    def within_budget(self, blocks: int, slots: int) -> bool:
        """Whether ``blocks`` KV blocks and ``slots`` state slots fit the byte budget alone (the
        pools' caps aside). Pure."""
        return self.ledger.within_budget(blocks, slots)

    def memory(self) -> MemoryUsage:
        """Bytes held by kind against the budget; O(1), for a per-round metric. Pure."""
        return self.ledger.usage(len(self.holdings.working_slots))

    def evictions(self) -> dict[str, int]:
        """Entries evicted so far, by kind (``kv``: KV leaves; ``checkpoint``: checkpoints, those
        lost with their leaf included). Pure."""
        return {kind.value: self.evictor.evictions[kind] for kind in EntryKind}

    # ----------------------------------------------------------------- accounting
    def usage(self) -> CacheUsage:
        """Blocks and slots by who holds them: free + cached + locked = total blocks, free +
        checkpoint + working = total slots (a walk of the tree). Pure."""
        return capacity.usage(self.tree, self.ledger, self.holdings)

    @property
    def namespaces(self) -> int:
        """Namespaces holding something: cached KV below their root, or a registered prompt. At
        most the KV blocks plus the registered prompts (an empty namespace is dropped). Pure."""
        return len(self.tree.roots())

    def ready_digest(self, kv_runs: bool = False) -> CheckpointDigest:
        """Chain hashes (`radixflow.cache.digest`) of every prefix ending at a READY checkpoint;
        ``kv_runs``: at every whole block of a materialized node instead (a model without
        recurrent layers resumes at any block of its KV). A router's view of this cache. Pure."""
        return lookup.ready_digest(self.tree, kv_runs)

    def check_integrity(self) -> None:
        """Raise `IntegrityError` at the first broken invariant. Pure."""
        # imported when first used: the checker walks a RadixCache (a deliberate circle)
        from radixflow.cache.integrity import check_cache

        check_cache(self)

    # ----------------------------------------------------------------- read-only views (pure)
    @property
    def private_blocks(self) -> Set[int]:
        """KV blocks held by requests outside the tree (a live view)."""
        return self.holdings.private_blocks

    @property
    def working_slots(self) -> Set[int]:
        """State slots held by running requests for their chunk-to-chunk state (a live view)."""
        return self.holdings.working_slots

    @property
    def registrations(self) -> Mapping[NodeHandle, int]:
        """Handle -> prompts registered there, not unregistered yet (whose, the scheduler knows)."""
        return MappingProxyType(self._registered)

    @property
    def lock_counts(self) -> Mapping[int, int]:
        """Node id -> locks held on exactly that node (a live view): whose they are, the scheduler knows."""
        return self.holdings.lock_counts

    @property
    def locked_nodes(self) -> int:
        """Nodes with a lock held on exactly them (each lock holder's node; bounded by them). Pure."""
        return self.holdings.locked_nodes

    def own_locks(self, node: Node) -> int:
        """Locks held on exactly ``node`` (not on a node below it)."""
        return self.holdings.own_locks(node)
