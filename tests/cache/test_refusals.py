"""A call the cache refuses (a caller's mistake) raises ValueError and changes nothing: no node
made or split, no lock, block or slot moved, nothing lost from the accounting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from cache_utils import seq

from radixflow.cache import OutOfCapacity, RadixCache
from radixflow.cache.types import NodeHandle

BS = 4
PROMPT = seq(0, 20)  # 5 blocks, published with a READY checkpoint at 8, locked at its end
LONGER = seq(0, 40)


@dataclass
class Setup:
    cache: RadixCache
    end: NodeHandle  # the published prompt's last node, locked
    private: list[int]  # two blocks a request holds outside the tree
    working: int  # a request's working slot
    sibling: NodeHandle  # a published sibling of the prompt's tail, below its checkpoint (locked)
    waiting: NodeHandle  # a registered prompt's end, past the published KV
    short: NodeHandle  # a registered prompt shorter than a block: it ends on the namespace's root


def setup() -> Setup:
    cache = RadixCache(BS, 16, 4)
    blocks = cache.alloc_blocks(5)
    ext = cache.extend("n", PROMPT, 0, len(PROMPT), blocks, [8], "p")
    assert ext.handle is not None
    cache.lock(ext.handle)
    cache.commit("p")
    other = PROMPT[:8] + (99,) * 4
    sibling = cache.extend("n", other, 8, 12, cache.alloc_blocks(1), [], "q").handle
    assert sibling is not None
    cache.lock(sibling)
    cache.commit("q")
    waiting, short = cache.register("n", LONGER), cache.register("n", (1,))
    held = cache.alloc_blocks(2), cache.alloc_working_slot()
    return Setup(cache, ext.handle, *held, sibling, waiting, short)


def snapshot(cache: RadixCache) -> tuple[object, ...]:
    nodes = sorted(
        (n.id, n.key, n.lock_ref, n.demand, n.live_children, tuple(n.blocks or ()), repr(n.checkpoint))
        for n in cache.tree.nodes()
    )
    held = (sorted(cache.private_blocks), sorted(cache.working_slots), cache.locked_nodes)
    return cache.usage(), nodes, held, cache.kv.free, cache.slots.free


# what the caller got wrong -> (the refused call, the words the refusal says)
REFUSALS: dict[str, tuple[Callable[[Setup], object], str]] = {
    # a request's block list naming one block twice: the first copy was dropped from the private
    # set before the pool refused the second, and the block was lost to both
    "a private block freed twice in one call": (
        lambda s: s.cache.free_blocks([s.private[0], s.private[0]]),
        "freed twice",
    ),
    # a slot given back as working state that no request works in (given back twice, say): a bare
    # KeyError named only its number
    "a slot no request works in given back": (
        lambda s: s.cache.free_working_slot(s.working + 1),
        "state slot 2 is no request's working slot",
    ),
    # a lock on a registered prompt's node, which holds no KV yet (a registration handle taken
    # for a reuse point): the prompt's unregister then failed an assert half-way
    "a lock on a node without KV": (
        lambda s: s.cache.lock(s.waiting),
        "holds no KV",
    ),
    "a lock moved down to a node without KV": (
        lambda s: s.cache.relock(s.end, s.waiting),
        "holds no KV",
    ),
    # a root (a prompt shorter than a block ends there): pruned with its namespace, locked or not
    "a lock on a namespace's root": (
        lambda s: s.cache.lock(s.short),
        "holds no KV",
    ),
    # a lock moved up the path or across to another branch: the old lock was released before the
    # walk up from the new node missed it (an AssertionError), its path's counts left one short
    "a lock moved to a node above it": (
        lambda s: s.cache.relock(s.end, s.cache.match("n", PROMPT, 8).handle),
        "not at or below",
    ),
    "a lock moved to another branch": (
        lambda s: s.cache.relock(s.end, s.sibling),
        "not at or below",
    ),
    # a state adopted where no published KV ends: the walk made bare nodes nobody wants (and, at
    # position 0, failed on an empty path) after the working slot was already let go
    "a checkpoint adopted past the published KV": (
        lambda s: s.cache.adopt_checkpoint("n", LONGER, 28, s.working),
        "not a block boundary of published KV",
    ),
    "a checkpoint adopted inside a block": (
        lambda s: s.cache.adopt_checkpoint("n", LONGER, 10, s.working),
        "not a block boundary of published KV",
    ),
    "a checkpoint adopted at position 0": (
        lambda s: s.cache.adopt_checkpoint("n", LONGER, 0, s.working),
        "not a block boundary of published KV",
    ),
    "a checkpoint adopted from a slot no request works in": (
        lambda s: s.cache.adopt_checkpoint("n", PROMPT, 16, s.working + 1),
        "no request's working slot",
    ),
    # a reuse point past the KV made a bare node before its assert; inside a block, the handle
    # was silently that of the block boundary below it
    "a KV handle past the published KV": (
        lambda s: s.cache.kv_handle("n", LONGER, 28),
        "not a block boundary of published KV",
    ),
    "a KV handle inside a block": (
        lambda s: s.cache.kv_handle("n", LONGER, 10),
        "not a block boundary of published KV",
    ),
    # a chunk's extend that would cut a node inside a block (a placement's unaligned position),
    # walk past its tokens or adopt fewer blocks than its nodes hold: the tree was left with a
    # node of part of a block, or of too few block ids, and an AssertionError or nothing raised
    "a checkpoint placed inside a block": (
        lambda s: s.cache.extend("n", LONGER, 20, 28, s.private, [26], "q"),
        "checkpoint at 26: not a block boundary",
    ),
    "a chunk ending past its tokens": (
        lambda s: s.cache.extend("n", LONGER[:22], 20, 28, s.private, [], "q"),
        r"chunk \[20, 28\) of 22 tokens",
    ),
    "a chunk ending before it starts": (
        lambda s: s.cache.extend("n", LONGER, 28, 20, s.private, [], "q"),
        r"chunk \[28, 20\) of 40 tokens",
    ),
    # a chunk starting past the KV published before it: a block below a bare node (KV no longer
    # prefix-closed), or, ending where it starts, a bare node nobody wants as its handle
    "a chunk starting past the published KV": (
        lambda s: s.cache.extend("n", LONGER, 24, 28, s.private, [], "q"),
        r"chunk \[24, 28\) starts past the 20 tokens of KV published before it",
    ),
    "a chunk ending where it starts past the published KV": (
        lambda s: s.cache.extend("n", LONGER, 24, 24, s.private, [], "q"),
        r"chunk \[24, 24\) starts past the 20 tokens",
    ),
    "a chunk with too few blocks": (
        lambda s: s.cache.extend("n", LONGER, 20, 32, s.private, [], "q"),
        r"2 KV blocks for the 3 whole blocks",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_call_changes_nothing(case):
    s = setup()
    call, words = REFUSALS[case]
    before = snapshot(s.cache)
    with pytest.raises(ValueError, match=words):
        call(s)
    assert snapshot(s.cache) == before
    s.cache.check_integrity()


def test_a_round_withdrawn_before_its_paths_are_unlocked_is_refused_and_changes_nothing():
    # the PENDING checkpoints were dropped and the round's journal closed before an assert found
    # the locked KV: the round could be neither committed nor withdrawn again
    s = setup()
    ext = s.cache.extend("n", LONGER, 20, 28, s.private, [24, 28], "w")
    s.cache.lock(ext.handle)
    before = snapshot(s.cache), s.cache.journal.pending_by_producer()
    with pytest.raises(ValueError, match=r"w's round: its KV at 20\.\.24 is still locked"):
        s.cache.withdraw(["w"])
    assert (snapshot(s.cache), s.cache.journal.pending_by_producer()) == before
    s.cache.unlock(ext.handle)
    s.cache.withdraw(["w"])
    s.cache.check_integrity()


def test_a_chunk_asking_no_new_checkpoint_is_published_with_no_state_slot_free():
    # a chunk whose checkpoints all lie before it (or that asks none) takes no slot: it is not
    # held to the slots left (nor walked for the checkpoints the path holds)
    s = setup()
    s.cache.alloc_working_slot(), s.cache.alloc_working_slot()  # none left
    ext = s.cache.extend("n", LONGER, 20, 28, s.private, [8], "q")
    assert ext.adopted == 2 and ext.checkpoints == {}


def test_a_chunk_whose_new_checkpoints_the_free_slots_cannot_hold_is_refused():
    # the blocks were adopted and the first checkpoint made before the pool ran out half-way
    s = setup()
    s.cache.alloc_working_slot()  # one slot left
    before = snapshot(s.cache)
    with pytest.raises(OutOfCapacity, match=r"checkpointing at \[24, 28\] needs 2, 1 free"):
        s.cache.extend("n", LONGER, 20, 28, s.private, [8, 24, 28], "q")  # 8 has one already
    assert snapshot(s.cache) == before
    ext = s.cache.extend("n", LONGER, 20, 28, s.private, [8, 28], "q")
    assert list(ext.checkpoints) == [28]
