"""One byte budget over KV blocks and checkpoints (`radixflow.cache.ledger`): bytes freed from one
kind hold the other, the policy's rank decides which goes, promised KV is held back from
checkpoints, and `check_integrity` catches a ledger over its budget."""

from __future__ import annotations

import pytest
from cache_utils import seq, serve

from radixflow.cache import IntegrityError, OutOfCapacity, RadixCache
from radixflow.cache.ledger import CacheBudget
from radixflow.cache.pool import IdPool

BS = 4
BLOCK, SLOT = 10, 30  # bytes: a checkpoint weighs three blocks


def budgeted(budget: int, blocks: int = 100, slots: int = 100) -> RadixCache:
    return RadixCache(BS, blocks, slots, budget=CacheBudget(BLOCK, SLOT, budget))


def test_checkpoint_bytes_freed_hold_kv():
    cache = budgeted(budget=4 * BLOCK + SLOT)
    assert serve(cache, "a", seq(0, 8), [8], "r0")  # 2 blocks + 1 checkpoint: 50 of 70 bytes
    assert cache.memory().used_bytes == 2 * BLOCK + SLOT
    # four more blocks need 40 bytes, 20 free: only evicting bytes of either kind makes room,
    # and the least recently used entry is the old leaf (its checkpoint goes with it)
    assert serve(cache, "b", seq(100, 16), [], "r1")
    assert cache.evictions() == {"kv": 1, "checkpoint": 1}
    assert cache.memory().kv_bytes == 4 * BLOCK and cache.memory().checkpoint_bytes == 0


def test_kv_bytes_freed_hold_a_checkpoint():
    cache = budgeted(budget=6 * BLOCK)
    assert serve(cache, "a", seq(0, 24), [], "r0")  # 6 blocks: the whole budget
    assert cache.free_slots == 0  # the slot pool has room, the budget none
    assert cache.free_slots_upto(1) == 1  # evicting KV leaves frees the bytes
    assert cache.evictions()["kv"] >= 1 and cache.evictions()["checkpoint"] == 0
    cache.check_integrity()


def test_promised_kv_is_held_back_from_checkpoints():
    cache = budgeted(budget=6 * BLOCK + 3 * SLOT)  # 150 bytes: five checkpoints' worth
    assert cache.free_slots == 5
    cache.promise(4)  # running requests will still allocate 4 blocks: 40 bytes spoken for
    assert cache.free_slots == 3
    cache.promise(7)
    assert cache.free_slots == 2
    assert cache.free_slots_upto(3) == 2  # nothing to evict: the promise stands
    cache.check_integrity()


def test_without_a_budget_the_pools_alone_limit():
    cache = RadixCache(BS, 4, 2, budget=CacheBudget(BLOCK, SLOT, None))
    assert cache.memory().budget_bytes == 4 * BLOCK + 2 * SLOT
    assert cache.reserve(4, 2) and not cache.reserve(5, 0)
    assert cache.free_slots == 2


def test_ranked_eviction_takes_the_older_kind_first():
    cache = budgeted(budget=5 * BLOCK + 2 * SLOT)
    assert serve(cache, "a", seq(0, 4), [4], "r0")  # oldest: a block and a checkpoint
    assert serve(cache, "b", seq(100, 4), [4], "r1")  # newer: the same
    assert cache.reserve(3, 0)  # 30 bytes free already: fits without evicting
    assert cache.evictions() == {"kv": 0, "checkpoint": 0}
    assert cache.reserve(4, 1)  # 70 bytes, 30 free: the older pair (40 bytes) goes, the newer stays
    assert cache.match("b", seq(100, 4), 4).checkpoint_tokens == 4
    assert cache.match("a", seq(0, 4), 4).kv_tokens == 0


def test_integrity_catches_bytes_over_the_budget():
    cache = budgeted(budget=3 * BLOCK)
    cache.alloc_blocks(3)
    cache.check_integrity()
    cache.ledger.budget = 2 * BLOCK  # as if an allocation had bypassed the ledger
    with pytest.raises(IntegrityError, match="over the budget"):
        cache.check_integrity()


def test_integrity_catches_promised_kv_over_the_budget():
    cache = budgeted(budget=3 * BLOCK)
    cache.alloc_blocks(2)
    cache.promise(2)
    with pytest.raises(IntegrityError, match="promised KV over the budget"):
        cache.check_integrity()


def test_integrity_catches_promised_kv_over_the_free_blocks():
    """Without a budget only the pool bounds the promise: running requests allocate their promised
    blocks with no reservation (no eviction), so a promise beyond the free blocks is a chunk that
    raises OutOfCapacity mid-round; check_integrity passed it."""
    cache = RadixCache(4, 4, 0)
    cache.alloc_blocks(2)
    cache.promise(2)
    cache.check_integrity()
    cache.promise(3)
    with pytest.raises(IntegrityError, match="3 KV blocks promised, 2 free"):
        cache.check_integrity()


def test_a_large_cap_costs_nothing_until_used():
    pool = IdPool(1 << 40, "KV blocks")  # never listed: taking stays cheap
    assert pool.take(3) == [0, 1, 2] and pool.free == (1 << 40) - 3
    pool.give([1])
    assert pool.take(2) == [1, 3]


def test_ids_given_back_go_first_most_recent_first_then_fresh_ones_in_order():
    pool = IdPool(8, "KV blocks")
    pool.take(6)
    pool.give([3])
    pool.give([5])
    assert pool.take(4) == [5, 3, 6, 7]  # not the lowest free id first: 3 was freed before 5


def test_a_request_cannot_take_blocks_or_a_working_slot_past_the_budget():
    # with room in the pools, an allocation the budget has no bytes for went through and put the
    # cache over its budget (check_integrity's complaint, found by no caller); a working slot
    # also ate into the KV promised to running requests
    cache = budgeted(budget=6 * BLOCK + SLOT)
    cache.promise(2)
    held = cache.alloc_blocks(4), cache.alloc_working_slot()
    before = cache.memory()
    with pytest.raises(OutOfCapacity, match="budget"):
        cache.alloc_working_slot()  # 10 bytes left beside 20 promised
    with pytest.raises(OutOfCapacity, match="budget"):
        cache.alloc_blocks(3)  # 2 blocks' bytes left
    assert cache.memory() == before
    assert len(cache.alloc_blocks(2)) == 2  # the promised ones
    cache.promise(0)
    assert held and cache.memory().used_bytes == 6 * BLOCK + SLOT
    cache.check_integrity()


def test_a_chunk_cannot_checkpoint_past_the_budget():
    # the slot pool had room, the budget none: the PENDING checkpoint put the cache over it
    cache = budgeted(budget=4 * BLOCK + SLOT)
    assert serve(cache, "a", seq(0, 8), [8], "r0")  # 50 of 70 bytes
    blocks = cache.alloc_blocks(2)  # the rest
    with pytest.raises(OutOfCapacity, match=r"checkpointing at \[4\] needs 1, 0 free"):
        cache.extend("b", seq(100, 8), 0, 8, blocks, [4], "r1")
    assert cache.extend("b", seq(100, 8), 0, 8, blocks, [], "r1").adopted == 2
