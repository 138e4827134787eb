"""Exact-prefix radix cache: KV blocks and recurrent-state checkpoints in one tree per namespace.

The scheduler talks to this class only through `NodeHandle`, `Match` and `Extension` objects.
Pure Python on purpose: the cache decides *what* is reusable, the runner owns the tensors.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence, Set

from radixflow.cache.digest import CheckpointDigest, extend_chain, namespace_seed
from radixflow.cache.evictable import Evictor
from radixflow.cache.eviction import LRU, EntryKind, EvictionPolicy, evidenced
from radixflow.cache.ledger import ByteLedger, CacheBudget, MemoryUsage
from radixflow.cache.node import Checkpoint, Node, common_blocks
from radixflow.cache.pool import IdPool
from radixflow.cache.rounds import RoundJournal
from radixflow.cache.tree import Tree
from radixflow.cache.types import CacheUsage, Extension, Match, NodeHandle, Readiness, Sharing
from radixflow.cache.views import SetView


class RadixCache:
    """A composition: the `Tree` (structure), the `Evictor` (what goes when capacity runs out), the
    `RoundJournal` (what unfinished rounds published) and the bookkeeping of who holds what (locks,
    requests' private blocks and working slots), which its neighbours read through read-only views.

    The scheduler uses only the methods that take and return `NodeHandle`, `Match`, `Extension`
    and `CacheUsage`; ``tree``, ``evictor`` and ``journal`` are for the cache's own modules and tests.
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
        self._tick = 0
        self._locks: Counter[int] = Counter()  # node id -> locks held on exactly that node
        self._private: set[int] = set()  # blocks held by requests outside the tree
        self._working: set[int] = set()  # state slots held by running requests

    # ----------------------------------------------------------------- demand (known sequences)
    def register(self, namespace: str, tokens: Sequence[int]) -> NodeHandle:
        """Record a waiting prompt's whole blocks in the tree (mutates demand, may split nodes).

        Used to find branch points before prefill; costs no capacity.
        """
        tokens = tuple(tokens)
        path = self.tree.path(namespace, tokens, len(tokens) // self.block_size)
        for node in path:
            node.demand += 1
        end = path[-1] if path else self.tree.root(namespace)
        end.ends += 1
        return NodeHandle(end.id)

    def unregister(self, handle: NodeHandle) -> None:
        """Undo `register`; prunes nodes that are neither materialized nor wanted. ValueError for a
        handle no registered prompt ends on (unregistered already), changing nothing."""
        end = self.tree.lookup(handle)
        if end.ends == 0:  # its node outlived the prompt (cached KV): demand would go negative
            raise ValueError(f"unregister of a prompt not registered at {handle}")
        end.ends -= 1
        for node in end.ancestors():
            node.demand -= 1
        self.evictor.demand_dropped(end)
        for node in end.ancestors():
            if node.demand == 0 and not node.materialized:
                self.tree.remove(node)  # the last one may take its namespace with it
        if end.parent is None:  # a prompt shorter than a block ends on its namespace's root
            self.tree.drop_if_bare(end)

    def branch_points(self, handle: NodeHandle, lo: int, hi: int) -> list[int]:
        """Positions in ``(lo, hi]`` on a registered path where known sequences diverge."""
        return sorted(
            n.end for n in self.tree.lookup(handle).ancestors() if lo < n.end <= hi and len(n.children) > 1
        )

    def sharing(self, handle: NodeHandle) -> Sharing:
        """The deepest prefix of registered path ``handle`` that other registered prompts share
        (`Sharing.NONE` when none does). Pure."""
        for node in self.tree.lookup(handle).ancestors():  # deepest first
            if node.demand > 1:
                return Sharing(node.end, node.demand, NodeHandle(node.id))
        return Sharing.NONE

    def registered_under(self, handle: NodeHandle, limit: int) -> list[NodeHandle]:
        """Where registered prompts through node ``handle`` end (their `register` handles), at
        most ``limit`` nodes visited, nearest first; [] when the node is gone. Pure."""
        try:
            top = self.tree.lookup(handle)
        except ValueError:
            return []
        found: list[NodeHandle] = []
        frontier, visited = deque([top]), 0
        while frontier and visited < limit:
            node = frontier.popleft()
            visited += 1
            if node.ends:
                found.append(NodeHandle(node.id))
            frontier.extend(node.children.values())
        return found

    # ----------------------------------------------------------------- matching
    def match(self, namespace: str, tokens: Sequence[int], limit: int, touch: bool = True) -> Match:
        """Longest reusable prefix of ``tokens[:limit]``; ``touch`` refreshes the path's LRU clock."""
        bs, tokens = self.block_size, tuple(tokens[: (limit // self.block_size) * self.block_size])
        self._tick += touch
        root = self.tree.find_root(namespace)
        if root is None:  # the namespace holds nothing (a lookup makes no namespace)
            return Match(0, 0, True, None, None, None)
        node, pos = root, 0
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
            handle=NodeHandle(best.id) if best is not None else None,
        )

    def resumed(self, handle: NodeHandle | None) -> None:
        """A request starts from ``handle``'s node (None: from scratch): a hit there, counted once
        per request (a waiting request is matched every round it waits), at the eviction clock."""
        if handle is not None:
            node = self.tree.lookup(handle)
            node.hits += 1
            node.aged = self.evictor.policy.clock

    def kv_handle(self, namespace: str, tokens: Sequence[int], upto: int) -> NodeHandle | None:
        """Handle of the materialized node ending exactly at ``upto`` (splitting if needed)."""
        if upto == 0:
            return None
        path = self.tree.path(namespace, tuple(tokens), upto // self.block_size)
        assert path[-1].materialized, "kv_handle beyond materialized KV"
        return NodeHandle(path[-1].id)

    def block_table(self, handle: NodeHandle | None) -> list[int]:
        """KV block ids from the root to the end of ``handle``'s node."""
        if handle is None:
            return []
        table: list[int] = []
        for node in reversed(self.tree.lookup(handle).ancestors()):
            assert node.blocks is not None
            table.extend(node.blocks)
        return table

    # ----------------------------------------------------------------- locks
    def lock(self, handle: NodeHandle | None) -> None:
        """Pin the path root..handle against eviction (mutates lock_ref along the path)."""
        if handle is None:
            return
        node: Node | None = self.tree.lookup(handle)
        self._locks[handle.node_id] += 1
        while node is not None and node.parent is not None:
            node.lock_ref += 1
            node = node.parent

    def relock(self, old: NodeHandle | None, new: NodeHandle | None) -> None:
        """Move a lock from ``old`` to ``new``, a node at or below it (same as lock new, unlock old).

        Only the nodes between the two change: a chunk's lock moves down its own path.
        """
        if old is None or new is None:
            self.lock(new)
            self.unlock(old)
            return
        top, node = self.tree.lookup(old), self.tree.lookup(new)
        if self._locks[old.node_id] == 0:
            raise ValueError(f"unlock of an unlocked node {old}")
        self._release_lock(old.node_id)
        self._locks[new.node_id] += 1
        while node is not top:
            assert node is not None and node.parent is not None, "relock to a node not below the old one"
            node.lock_ref += 1
            node = node.parent

    def unlock(self, handle: NodeHandle | None) -> None:
        if handle is None:
            return
        node = self.tree.lookup(handle)
        if self._locks[node.id] == 0:
            raise ValueError(f"unlock of an unlocked node {handle}")
        self._release_lock(node.id)
        walk: Node | None = node
        while walk is not None and walk.parent is not None:
            walk.lock_ref -= 1
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

        ``blocks`` are the request's blocks from the one holding ``start`` up to ``end`` (its block
        table from ``start // block_size``); nodes in ``[start, end)`` without KV adopt them.
        Each position in ``checkpoints`` gets a PENDING checkpoint owned by ``producer`` unless
        one exists. Call `reserve` beforehand for the slots.
        """
        bs, tokens = self.block_size, tuple(tokens)
        nblocks = end // bs
        cuts = sorted({*checkpoints, start // bs * bs})  # node boundaries at checkpoints and start
        path = self.tree.path(namespace, tokens, nblocks, cuts)
        self._tick += 1
        adopted, made, wanted = 0, {}, set(checkpoints)
        clock = self.evictor.policy.clock
        for node in path:
            node.last_used = self._tick
            if node.end > start:  # computed now: enters the policy's order at the clock (no hit)
                node.aged = clock
            if node.end <= start:
                continue
            if not node.materialized:
                first = node.start // bs - start // bs
                self.tree.set_blocks(node, list(blocks[first : first + len(node.key) // bs]))
                # a continuation: below the end of a prompt a request resumed from (a
                # conversation's next turn); a branch below a context is a sibling (a candidate)
                parent = node.parent
                node.continues = parent is not None and evidenced(parent)
                node.closes_prompt = node.end == len(tokens) // bs * bs
                self._private.difference_update(node.blocks or [])
                self.journal.adopt(producer, node)
                adopted += len(node.blocks)
            if node.end in wanted and node.checkpoint is None:
                slot = self.slots.take(1)[0]
                node.checkpoint = Checkpoint(slot, Readiness.PENDING, producer)
                self.journal.add_pending(producer, node)
                self.evictor.checkpoint_added(node)
                made[node.end] = slot
        handle = NodeHandle(path[-1].id) if path else None
        return Extension(handle=handle, adopted=adopted, checkpoints=made)

    def adopt_checkpoint(self, namespace: str, tokens: Sequence[int], position: int, slot: int) -> None:
        """Turn a request's own state slot, computed in an earlier round, into the READY
        checkpoint at ``position`` (block-aligned, KV published); the slot is freed instead when
        that position already has one."""
        self._working.remove(slot)
        node = self.tree.path(namespace, tuple(tokens), position // self.block_size)[-1]
        assert node.materialized and node.end == position, "checkpoint adopted beyond published KV"
        if node.checkpoint is not None:
            self.slots.give([slot])
            return
        node.checkpoint = Checkpoint(slot, Readiness.READY, None)
        node.aged = self.evictor.policy.clock
        self.evictor.checkpoint_added(node)
        self.evictor.offer(node)

    def commit(self, producer: str) -> None:
        """The producer's round finished: its PENDING checkpoints become READY (mutates them)."""
        for node in self.journal.close(producer).pending:
            if node.checkpoint is not None and node.checkpoint.producer == producer:
                node.checkpoint.readiness = Readiness.READY
                node.checkpoint.producer = None
                self.evictor.offer(node)

    def withdraw(self, producers: Iterable[str]) -> None:
        """The producers' round failed: undo what their `extend` published this round.

        Their PENDING checkpoints are dropped (slots freed) and the nodes whose KV they published
        lose that KV (blocks freed; a node nobody wants any more is pruned). Unlock the producers'
        paths first.
        """
        fresh: list[Node] = []
        for producer in producers:
            closed = self.journal.close(producer)
            for node in closed.pending:
                if node.checkpoint is not None and node.checkpoint.producer == producer:
                    self.tree.drop_checkpoint(node)
                    self.evictor.checkpoint_dropped(node)
            fresh.extend(closed.adopted)
        for node in sorted(fresh, key=lambda n: -n.end):  # deepest first: KV stays prefix-closed
            assert node.lock_ref == 0 and node.blocks is not None, "withdraw of a locked or bare node"
            self.evictor.drop_kv(node)

    # ----------------------------------------------------------------- capacity
    def reserve(self, blocks: int, slots: int) -> bool:
        """Evict unlocked READY entries until ``blocks`` and ``slots`` are free, in the pools and in
        the budget; False, evicting nothing, if impossible. ``blocks`` counts the promised ones
        (`promise`)."""
        ledger = self.ledger
        if self.kv.free >= blocks and self.slots.free >= slots and not ledger.shortfall(blocks, slots):
            return True
        kv, state, held = self._after_eviction()
        need = blocks * ledger.block_bytes + slots * ledger.slot_bytes
        fits = ledger.budget is None or held + need <= ledger.budget
        return kv >= blocks and state >= slots and fits and self.evictor.reserve(blocks, slots)

    def _after_eviction(self) -> tuple[int, int, int]:
        """KV blocks and state slots free, and bytes held, once every unlocked entry went (a
        PENDING checkpoint is always locked): what only the paths above locks, requests' private
        blocks and working slots keep. O(locks x depth). Pure."""
        seen: set[int] = set()
        locked_blocks = locked_ckpts = 0
        for nid in self._locks:
            node: Node | None = self.tree.lookup(NodeHandle(nid))
            while node is not None and node.parent is not None and node.id not in seen:
                seen.add(node.id)
                locked_blocks += len(node.blocks or ())
                locked_ckpts += node.checkpoint is not None
                node = node.parent
        kv_kept, slots_kept = len(self._private) + locked_blocks, len(self._working) + locked_ckpts
        held = kv_kept * self.ledger.block_bytes + slots_kept * self.ledger.slot_bytes
        return self.kv.capacity - kv_kept, self.slots.capacity - slots_kept, held

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
        if self.free_slots >= n:
            return n
        ledger = self.ledger
        _, state, held = self._after_eviction()
        if ledger.budget is not None:  # the bytes left beside what stays and the promised KV
            spare = ledger.budget - held - ledger.promised * ledger.block_bytes
            state = min(state, max(spare, 0) // ledger.slot_bytes)
        return self.evictor.free_slots_upto(min(n, state))

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
        return self.ledger.usage(len(self._working))

    def evictions(self) -> dict[str, int]:
        """Entries evicted so far, by kind (``kv``: KV leaves; ``checkpoint``: checkpoints, those
        lost with their leaf included). Pure."""
        return {kind.value: self.evictor.evictions[kind] for kind in EntryKind}

    # ----------------------------------------------------------------- accounting
    def usage(self) -> CacheUsage:
        tree = [n for n in self.tree.nodes() if n.blocks]
        locked = sum(len(n.blocks or []) for n in tree if n.lock_ref > 0)
        cached = sum(len(n.blocks or []) for n in tree if n.lock_ref == 0)
        ckpts = sum(1 for n in self.tree.nodes() if n.checkpoint is not None)
        return CacheUsage(
            total_blocks=self.kv.capacity,
            free_blocks=self.kv.free,
            cached_blocks=cached,
            locked_blocks=locked + len(self._private),
            total_slots=self.slots.capacity,
            free_slots=self.slots.free,
            checkpoint_slots=ckpts,
            working_slots=len(self._working),
            namespaces=self.namespaces,
        )

    @property
    def namespaces(self) -> int:
        """Namespaces holding something: cached KV below their root, or a registered prompt. At
        most the KV blocks plus the registered prompts (an empty namespace is dropped). Pure."""
        return len(self.tree.roots())

    def ready_digest(self, kv_runs: bool = False) -> CheckpointDigest:
        """Chain hashes (`radixflow.cache.digest`) of every prefix ending at a READY checkpoint;
        ``kv_runs``: at the end of every materialized node instead (a model without recurrent
        layers resumes anywhere its KV is). A router's view of this cache. Pure."""
        found: set[int] = set()
        for namespace, root in self.tree.named_roots():
            stack = [(root, namespace_seed(namespace))]
            while stack:
                node, h = stack.pop()
                for child in node.children.values():
                    if not child.materialized:
                        continue
                    *_, end = extend_chain(h, child.key, self.block_size)
                    ckpt = child.checkpoint
                    if kv_runs or (ckpt is not None and ckpt.readiness is Readiness.READY):
                        found.add(end)
                    stack.append((child, end))
        return CheckpointDigest(self.block_size, frozenset(found))

    def check_integrity(self) -> None:
        """Raise `IntegrityError` at the first broken invariant. Pure."""
        # deliberate circle: the checker walks a whole RadixCache (it names the type only for
        # hints), so it is imported here, when first used, not at the top of this module
        from radixflow.cache.integrity import check_cache

        check_cache(self)

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
    def locked_nodes(self) -> int:
        """Nodes with a lock held on exactly them (each lock holder's node; bounded by them). Pure."""
        return len(self._locks)

    def own_locks(self, node: Node) -> int:
        """Locks held on exactly ``node`` (not on a node below it)."""
        return self._locks[node.id]
