"""One memory budget over KV blocks and state slots: the cache's byte ledger.

The two id pools (`IdPool`) stay the physical caps (``kv_blocks``, ``state_slots``); the ledger is
the logical limit over both: a KV block and a state slot (a checkpoint, or a running request's
working state) are charged at their real size, so bytes freed from KV can hold a checkpoint and
the other way round. Without a budget the caps alone limit, as two separate pools.

The scheduler promises running requests the KV blocks they will still allocate (`promised`):
those bytes are spoken for, so a checkpoint may only take what is left beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.cache.pool import IdPool


@dataclass(frozen=True)
class CacheBudget:
    """The cache's memory budget and what its entries weigh against it, decided where the engine
    is built (the cost model's sizes in the sim, the pools' tensors on the torch runner)."""

    block_bytes: int = 1  # one KV block of every attention layer
    slot_bytes: int = 1  # one state slot: a checkpoint of every recurrent layer
    budget_bytes: int | None = None  # None: no budget, the pools' caps alone limit


@dataclass(frozen=True)
class MemoryUsage:
    """Bytes the cache holds now, by kind, against its budget."""

    budget_bytes: int  # the budget; without one, what both pools hold when full
    kv_bytes: int  # KV blocks in use (the tree's, and requests' private ones)
    checkpoint_bytes: int  # state slots holding checkpoints
    working_bytes: int  # state slots holding running requests' own state
    promised_bytes: int  # KV bytes running requests will still allocate

    @property
    def used_bytes(self) -> int:
        return self.kv_bytes + self.checkpoint_bytes + self.working_bytes


class ByteLedger:
    """Charges KV blocks and state slots at ``block_bytes`` and ``slot_bytes`` against ``budget``
    (None: no budget, the pools' caps alone limit). Reads the pools' counts; allocates nothing."""

    def __init__(
        self, kv: IdPool, slots: IdPool, block_bytes: int, slot_bytes: int, budget: int | None
    ) -> None:
        if block_bytes < 1 or slot_bytes < 1:
            raise ValueError(f"entry sizes must be at least one byte: {block_bytes}, {slot_bytes}")
        if budget is not None and budget < 0:
            raise ValueError(f"cache budget must be >= 0 bytes, got {budget}")
        self.kv, self.slots = kv, slots
        self.block_bytes, self.slot_bytes = block_bytes, slot_bytes
        self.budget = budget
        self.promised = 0  # KV blocks promised to running requests, kept by the scheduler

    @property
    def total(self) -> int:
        """The budget in bytes; without one, what both pools hold when full. Pure."""
        caps = self.kv.capacity * self.block_bytes + self.slots.capacity * self.slot_bytes
        return caps if self.budget is None else self.budget

    def used(self) -> int:
        """Bytes of KV blocks and state slots in use. Pure."""
        kv_used = self.kv.capacity - self.kv.free
        slots_used = self.slots.capacity - self.slots.free
        return kv_used * self.block_bytes + slots_used * self.slot_bytes

    def bytes_of(self, blocks: int, slots: int) -> int:
        """What ``blocks`` KV blocks and ``slots`` state slots weigh against the budget. Pure."""
        return blocks * self.block_bytes + slots * self.slot_bytes

    def shortfall(self, blocks: int, slots: int) -> int:
        """Bytes to free before ``blocks`` more KV blocks and ``slots`` more state slots fit the
        budget (0: they fit). ``blocks`` counts any promised ones: the caller's reservation. Pure."""
        if self.budget is None:
            return 0
        return max(self.bytes_of(blocks, slots) - (self.budget - self.used()), 0)

    def free_slots(self) -> int:
        """State slots that can be taken now without evicting: free in the pool and within the
        budget beside the promised KV. Pure."""
        if self.budget is None:
            return self.slots.free
        spare = self.budget - self.used() - self.promised * self.block_bytes
        return max(min(self.slots.free, spare // self.slot_bytes), 0)

    def slot_room(self) -> int:
        """State slots free in the pool and within the budget, the promised KV aside (a chunk's
        checkpoints: its blocks, allocated before them, are still counted as promised). Pure."""
        if self.budget is None:
            return self.slots.free
        return max(min(self.slots.free, (self.budget - self.used()) // self.slot_bytes), 0)

    def holds(self, blocks: int, slots: int) -> bool:
        """Whether an empty cache could hold ``blocks`` KV blocks and ``slots`` state slots. Pure."""
        in_pools = blocks <= self.kv.capacity and slots <= self.slots.capacity
        return in_pools and self.within_budget(blocks, slots)

    def within_budget(self, blocks: int, slots: int) -> bool:
        """Whether ``blocks`` KV blocks and ``slots`` state slots fit the byte budget (always, with
        none), whatever the pools' caps. Pure."""
        return self.budget is None or self.bytes_of(blocks, slots) <= self.budget

    def usage(self, working_slots: int) -> MemoryUsage:
        """Bytes in use by kind; ``working_slots`` of the used state slots are requests' own. Pure."""
        slots_used = self.slots.capacity - self.slots.free
        return MemoryUsage(
            budget_bytes=self.total,
            kv_bytes=(self.kv.capacity - self.kv.free) * self.block_bytes,
            checkpoint_bytes=(slots_used - working_slots) * self.slot_bytes,
            working_bytes=working_slots * self.slot_bytes,
            promised_bytes=self.promised * self.block_bytes,
        )
