"""Capacity: room in the two pools and the byte budget, weighed against what eviction could free
(`Holdings.kept`) before anything is evicted, and the block and slot accounting the cache reports
(`usage`). Functions over the cache's parts; `RadixCache` hands its capacity methods to them."""

from __future__ import annotations

from radixflow.cache.evictable import Evictor
from radixflow.cache.holdings import Holdings
from radixflow.cache.ledger import ByteLedger
from radixflow.cache.tree import Tree
from radixflow.cache.types import CacheUsage


def after_eviction(ledger: ByteLedger, holdings: Holdings) -> tuple[int, int, int]:
    """KV blocks and state slots free, and bytes held, once every unlocked entry went
    (`Holdings.kept`). Pure."""
    kv_kept, slots_kept = holdings.kept()
    held = ledger.bytes_of(kv_kept, slots_kept)
    return ledger.kv.capacity - kv_kept, ledger.slots.capacity - slots_kept, held


def reserve(ledger: ByteLedger, holdings: Holdings, evictor: Evictor, blocks: int, slots: int) -> bool:
    """`RadixCache.reserve`: evict until ``blocks`` and ``slots`` are free, in the pools and in the
    budget; False, evicting nothing, if even every unlocked entry gone would not make room."""
    if ledger.kv.free >= blocks and ledger.slots.free >= slots and not ledger.shortfall(blocks, slots):
        return True
    kv, state, held = after_eviction(ledger, holdings)
    fits = ledger.budget is None or held + ledger.bytes_of(blocks, slots) <= ledger.budget
    return kv >= blocks and state >= slots and fits and evictor.reserve(blocks, slots)


def free_slots_upto(ledger: ByteLedger, holdings: Holdings, evictor: Evictor, n: int) -> int:
    """`RadixCache.free_slots_upto`: evict until ``n`` slots can be taken, or as many as eviction
    can make takeable, evicting nothing for slots it cannot; returns min(takeable, n)."""
    if ledger.free_slots() >= n:
        return n
    _, state, held = after_eviction(ledger, holdings)
    if ledger.budget is not None:  # the bytes left beside what stays and the promised KV
        spare = ledger.budget - held - ledger.bytes_of(ledger.promised, 0)
        state = min(state, max(spare, 0) // ledger.slot_bytes)
    return evictor.free_slots_upto(min(n, state))


def usage(tree: Tree, ledger: ByteLedger, holdings: Holdings) -> CacheUsage:
    """Blocks and slots by who holds them (a walk of the tree: for tests and reports). Pure."""
    held = [n for n in tree.nodes() if n.blocks]
    locked = sum(len(n.blocks or []) for n in held if n.lock_ref > 0)
    cached = sum(len(n.blocks or []) for n in held if n.lock_ref == 0)
    ckpts = sum(1 for n in tree.nodes() if n.checkpoint is not None)
    return CacheUsage(
        total_blocks=ledger.kv.capacity,
        free_blocks=ledger.kv.free,
        cached_blocks=cached,
        locked_blocks=locked + len(holdings.private_blocks),
        total_slots=ledger.slots.capacity,
        free_slots=ledger.slots.free,
        checkpoint_slots=ckpts,
        working_slots=len(holdings.working_slots),
        namespaces=len(tree.roots()),
    )
