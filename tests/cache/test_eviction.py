"""Eviction policies' order: `cost-per-byte` evicts what costs least to recompute per byte freed,
weighed by hits and aged by its inflation clock, where `lru` evicts the least recently used."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cache_utils import seq, serve

from radixflow.cache import RadixCache
from radixflow.cache.eviction import (
    EVICTION_POLICIES,
    LRU,
    CostPerByte,
    EntryKind,
    EntrySizes,
    evidenced,
)
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cache.node import Node

BS = 8
SIZES = EntrySizes(kv_bytes_per_token=10, checkpoint_bytes=100)


def resume(cache: RadixCache, ns: str, tokens: tuple[int, ...], at: int) -> None:
    """A request over ``tokens`` starts from the checkpoint at ``at`` (a hit there)."""
    match = cache.match(ns, tokens, len(tokens))
    assert match.checkpoint_tokens == at
    cache.resumed(match.handle)


def publish(
    cache: RadixCache, ns: str, tokens: tuple[int, ...], start: int, ckpts: list[int], rid: str
) -> Node:
    """A request that resumed at ``start`` computes the rest of ``tokens`` and publishes it (with
    checkpoints at ``ckpts``), commits and lets go; returns the node it ends on."""
    blocks = cache.alloc_blocks((len(tokens) - start) // cache.block_size)
    ext = cache.extend(ns, tokens, start, len(tokens), blocks, ckpts, rid)
    cache.lock(ext.handle)
    cache.commit(rid)
    cache.unlock(ext.handle)
    cache.free_blocks(blocks)
    cache.check_integrity()
    assert ext.handle is not None
    return cache.tree.lookup(ext.handle)


def kv_ends(cache: RadixCache) -> list[tuple[str, int]]:
    """(namespace, end) of every node holding KV, sorted."""
    found, stack = [], [(ns, root) for ns, root in cache.tree.named_roots()]
    while stack:
        ns, top = stack.pop()
        for child in top.children.values():
            if child.materialized:
                found.append((ns, child.end))
            stack.append((ns, child))
    return sorted(found)


def ends_with_checkpoint(cache: RadixCache) -> set[int]:
    return {n.end for n in cache.tree.nodes() if n.checkpoint is not None}


def new_cache(policy: str, blocks: int, slots: int) -> RadixCache:
    return RadixCache(BS, blocks, slots, make_eviction_policy(policy, SIZES))


def test_the_registry_builds_both_with_sizes():
    assert set(EVICTION_POLICIES) == {"lru", "cost-per-byte"}
    assert isinstance(make_eviction_policy("lru", SIZES), LRU)
    assert make_eviction_policy("cost-per-byte", SIZES).sizes == SIZES  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown eviction policy 'mru'"):
        make_eviction_policy("mru")
    with pytest.raises(ValueError, match="at least one byte"):
        EntrySizes(kv_bytes_per_token=0)
    with pytest.raises(ValueError, match="capacity must be at least one byte"):
        EntrySizes(capacity=0)


@pytest.mark.parametrize(("policy", "kept"), [("lru", 8), ("cost-per-byte", 64)])
def test_a_cheap_checkpoint_goes_before_an_expensive_one_even_when_used_last(policy, kept):
    # Two checkpoints of one size: at 8 tokens (cheap to recompute) and at 64, the cheap one
    # touched last. LRU drops the expensive one; cost-per-byte the cheap one.
    cache = new_cache(policy, blocks=16, slots=2)
    assert serve(cache, "a", seq(100, 64), [64], "deep")
    assert serve(cache, "b", seq(300, 8), [8], "shallow")
    assert cache.free_slots_upto(1) == 1
    assert ends_with_checkpoint(cache) == {kept}
    cache.check_integrity()


@pytest.mark.parametrize(
    ("policy", "left"),
    [("lru", [("a", 64), ("a", 72), ("b", 64)]), ("cost-per-byte", [("a", 64), ("a", 72), ("a", 72)])],
)
def test_a_big_cheap_kv_leaf_goes_before_a_small_expensive_one(policy, left):
    # Namespace a (older): two prompts sharing 64 tokens with no checkpoint there, each ending in
    # a one-block leaf with a checkpoint at 72: evicting one loses 72 tokens for the 72 tokens of
    # KV it holds (the shared 64 serve only through it) and its checkpoint. Namespace b (newer):
    # an eight-block leaf with a checkpoint at 64: 64 tokens for 64 of KV and a checkpoint.
    # Freeing one block: LRU takes a's oldest leaf; cost-per-byte takes b's, which saves fewer
    # tokens per byte held (the checkpoint weighs on fewer tokens).
    cache = new_cache(policy, blocks=18, slots=3)
    assert serve(cache, "a", seq(100, 64) + seq(500, 8), [72], "a1")
    assert serve(cache, "a", seq(100, 64) + seq(600, 8), [72], "a2")
    assert serve(cache, "b", seq(300, 64), [64], "big")
    assert cache.reserve(cache.kv.free + 1, 0)
    assert kv_ends(cache) == left
    cache.check_integrity()


@pytest.mark.parametrize(("policy", "survivor"), [("lru", "b"), ("cost-per-byte", "a")])
def test_a_kv_leaf_whose_checkpoint_is_gone_goes_first(policy, survivor):
    # a (older, one 64-token leaf, checkpoint at 64, resumed from once: evidence of reuse) and b
    # (newer, a 16-token leaf, checkpoint at 16, no evidence but two prompts waiting through it:
    # two hits to come). Per byte, b's checkpoint saves less than a's (2.25 x 16 < 64 tokens), but
    # b's KV leaf with its checkpoint saves more than a's (2.25 x 16 / 260 > 64 / 740 bytes).
    # Freeing a slot drops b's checkpoint under cost-per-byte, leaving b's KV under no
    # checkpoint: worth nothing to a hybrid model, it goes first when KV is short.
    cache = new_cache(policy, blocks=10, slots=2)
    assert serve(cache, "a", seq(100, 64), [64], "a")
    resume(cache, "a", seq(100, 64) + (1,), 64)
    assert serve(cache, "b", seq(300, 16), [16], "b")
    waiting = [cache.register("b", seq(300, 16) + seq(700 + i, 8)) for i in range(2)]
    leaf = {ns: root for ns, root in cache.tree.named_roots()}
    a, b = (next(c for c in leaf[ns].children.values() if c.materialized) for ns in "ab")
    kv = cache.evictor.kv_victims
    if policy == "cost-per-byte":
        assert kv.priority(b) > kv.priority(a)  # while its checkpoint stands
    assert cache.free_slots_upto(1) == 1
    for handle in waiting:
        cache.unregister(handle)
    cache.check_integrity()
    if policy == "cost-per-byte":
        assert b.checkpoint is None and kv.priority(b) < kv.priority(a)
    assert cache.reserve(cache.kv.free + 2, 0)  # two blocks: all of b, or a quarter of a
    cache.check_integrity()
    namespaces = {ns for ns, _ in cache.tree.named_roots()}
    assert namespaces == {survivor}


@pytest.mark.parametrize(("policy", "hot_hits", "cold", "kept"), [
    ("lru", 2, 24, 24),
    ("cost-per-byte", 0, 24, 24),
    ("cost-per-byte", 1, 24, 8),
    ("cost-per-byte", 5, 24, 8),
    ("cost-per-byte", 5, 40, 40),
])  # fmt: skip
def test_past_hits_are_evidence_of_reuse_not_a_count(policy, hot_hits, cold, kept):
    # A checkpoint at 8 resumed from ``hot_hits`` times, then one at ``cold`` computed and matched
    # often, never resumed from. LRU keeps the newer. Cost-per-byte credits an entry with evidence
    # of reuse (a hit) in full and one without at UNEVIDENCED_ODDS (1/4): after a hit, 8 tokens
    # beat 24 / 4. More hits add nothing (a group is finite, so they count down what is left):
    # against 40 / 4 tokens the resumed 8 lose, however often they were resumed from.
    cache = new_cache(policy, blocks=8, slots=2)
    assert serve(cache, "a", seq(100, 8), [8], "hot")
    for _ in range(hot_hits):
        resume(cache, "a", seq(100, 8) + (1,), 8)
    assert serve(cache, "b", seq(300, cold), [cold], "cold")
    for _ in range(5):  # a waiting prompt is matched every round it waits: no hit until it starts
        assert cache.match("b", seq(300, cold) + (1,), cold + 1).checkpoint_tokens == cold
    assert cache.free_slots_upto(1) == 1
    assert ends_with_checkpoint(cache) == {kept}
    cache.check_integrity()


@pytest.mark.parametrize(("policy", "kept"), [("lru", "one-off"), ("cost-per-byte", "chat")])
def test_a_one_off_tail_goes_before_a_continued_conversations_tail(policy, kept):
    # A conversation's first turn, then its second turn resumed from it and published its own
    # tail; then a one-off prompt of the same length as that turn. The two tails save as much
    # per byte and the one-off's is newer, but only the conversation's shows evidence that it
    # will be continued (it continues content a request resumed from): cost-per-byte keeps it.
    cache = new_cache(policy, blocks=32, slots=3)
    turn1, turn2 = seq(100, 16), seq(100, 16) + seq(500, 16)
    assert serve(cache, "a", turn1, [16], "t1")
    resume(cache, "a", turn2, 16)
    publish(cache, "a", turn2, 16, [32], "t2")
    assert serve(cache, "a", seq(900, 32), [32], "one-off")
    assert cache.free_slots_upto(1) == 1  # one of three slots goes: the chain's at 16 is cheapest
    assert cache.free_slots_upto(2) == 2  # and then one of the two tails at 32
    cache.check_integrity()
    tails = {n.key[0]: n for n in _walk(cache.tree.find_root("a")) if n.checkpoint and n.end == 32}
    assert {"chat" if 500 in tails else "one-off"} == {kept}


def node(end: int, length: int, hits: int = 1, aged: float = 0.0, last_used: int = 0) -> Node:
    # a prompt's end (a hit there is evidence of reuse)
    return Node(
        id=end, key=(0,) * length, parent=None, end=end, hits=hits, aged=aged, last_used=last_used,
        closes_prompt=True,
    )  # fmt: skip


def test_the_inflation_clock_puts_a_fresh_entry_above_an_old_one_of_equal_worth():
    policy = CostPerByte(SIZES)  # prompts' ends resumed from (two hits): their worth counted in full
    old = node(64, 8, hits=2)  # worth 0.64, touched before the clock moved
    victim = node(640, 8, hits=2)  # worth 6.4: the clock moves to its key when it goes
    policy.evicted(victim, EntryKind.CHECKPOINT)
    assert policy.clock == pytest.approx(6.4)
    fresh = node(64, 8, hits=2, aged=policy.clock, last_used=1)
    assert policy.priority(old, EntryKind.CHECKPOINT) < policy.priority(fresh, EntryKind.CHECKPOINT)
    policy.evicted(old, EntryKind.CHECKPOINT)  # a victim ranked below the clock leaves it alone
    assert policy.clock == pytest.approx(6.4)


def test_without_recurrent_layers_every_kv_byte_weighs_alike():
    policy = CostPerByte(EntrySizes(kv_bytes_per_token=10, checkpoint_bytes=100, recurrent=False))
    short, long = node(8, 8), node(640, 64)  # no checkpoint on either: KV alone resumes
    assert policy.priority(short, EntryKind.KV) == policy.priority(long, EntryKind.KV)
    hybrid = CostPerByte(SIZES)
    assert hybrid.priority(long, EntryKind.KV) == (0.0, 0)  # a hybrid model cannot resume in it


@pytest.mark.parametrize(("policy", "gone"), [("lru", "a"), ("cost-per-byte", "b")])
def test_without_recurrent_layers_waiting_prompts_still_rank_kv_not_recency_alone(policy, gone):
    # Two one-block KV leaves of a full-attention model: a (older) with a prompt waiting through
    # it, b (newer) with none. Every KV byte weighs alike, but the waiting prompt is a hit to come:
    # cost-per-byte keeps a (the docs said recency alone decides there, which is lru's order).
    sizes = EntrySizes(kv_bytes_per_token=10, checkpoint_bytes=100, recurrent=False, capacity=2 * BS * 10)
    cache = RadixCache(BS, 2, 0, make_eviction_policy(policy, sizes))
    assert serve(cache, "a", seq(100, BS), [], "a")
    assert serve(cache, "b", seq(300, BS), [], "b")
    cache.register("a", seq(100, BS) + seq(700, BS))
    assert cache.reserve(1, 0)
    cache.check_integrity()
    assert {ns for ns, _ in kv_ends(cache)} == {"a", "b"} - {gone}


@pytest.mark.parametrize(("policy", "gone"), [("lru", ("c", 32)), ("cost-per-byte", ("a", 72))])
def test_a_checkpoint_saves_only_the_tokens_since_the_one_above(policy, gone):
    # c: a checkpoint at 32 (oldest). a1: one at 72 over 64 shared tokens; a2 then adds one at
    # 64, the branch point, above a1's: a1's now saves 8 tokens, not 72, and goes first.
    cache = new_cache(policy, blocks=32, slots=4)
    assert serve(cache, "c", seq(900, 32), [32], "c")
    assert serve(cache, "a", seq(100, 64) + seq(500, 8), [72], "a1")
    assert serve(cache, "a", seq(100, 64) + seq(600, 8), [64, 72], "a2")
    before = sorted((ns, n.end) for ns, root in cache.tree.named_roots() for n in _walk(root) if n.checkpoint)
    assert cache.free_slots_upto(1) == 1
    cache.check_integrity()
    after = sorted((ns, n.end) for ns, root in cache.tree.named_roots() for n in _walk(root) if n.checkpoint)
    assert len(after) == len(before) - 1
    assert before.count(gone) - after.count(gone) == 1


def _walk(root: Node) -> list[Node]:
    out, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


@pytest.mark.parametrize(("policy", "kept"), [("lru", "b"), ("cost-per-byte", "a")])
def test_a_prompt_waiting_through_a_checkpoint_counts_as_a_hit_to_come(policy, kept):
    # Two checkpoints saving as much: a's older, b's newer; a prompt waits through a's. Once it
    # is gone (unregistered), a's checkpoint is worth what it was before.
    cache = new_cache(policy, blocks=8, slots=2)
    assert serve(cache, "a", seq(100, 16), [16], "a")
    assert serve(cache, "b", seq(300, 16), [16], "b")
    waiting = cache.register("a", seq(100, 16) + seq(700, 8))
    assert cache.free_slots_upto(1) == 1
    assert {ns for ns, root in cache.tree.named_roots() for n in _walk(root) if n.checkpoint} == {kept}
    cache.unregister(waiting)
    cache.check_integrity()


def test_a_continuation_is_published_below_a_prompts_end_resumed_from():
    # A context with a first candidate below it; a second candidate resumes at the context and
    # publishes a sibling branch: no evidence that the branch will be continued (a candidate).
    # A request that resumes at the first candidate's tail (its prompt's end) and goes on
    # publishes a continuation (a conversation's next turn), and so is what is published below.
    cache = new_cache("cost-per-byte", blocks=32, slots=6)
    context = seq(100, 16)
    assert serve(cache, "a", context + seq(500, 8), [16, 24], "c1")
    resume(cache, "a", context + seq(600, 8) + (1,), 16)
    sibling = publish(cache, "a", context + seq(600, 8), 16, [24], "c2")
    assert not sibling.continues and not evidenced(sibling)
    resume(cache, "a", context + seq(500, 16) + (1,), 24)
    turn = publish(cache, "a", context + seq(500, 16), 24, [32], "t2")
    assert turn.continues and evidenced(turn)
    below = publish(cache, "a", context + seq(500, 24), 32, [40], "t3")  # no hit at 32 yet
    assert below.continues


def test_a_candidate_is_no_continuation_when_its_siblings_were_evicted():
    # Under pressure a candidate's tail is gone before the next candidate resumes at the context:
    # that candidate's branch is then the context's only one, yet a sibling all the same. The
    # context lies inside the prompts, so hits there are no evidence (they count down a group).
    cache = new_cache("cost-per-byte", blocks=32, slots=6)
    context = seq(100, 16)
    assert serve(cache, "a", context + seq(500, 8), [16, 24], "c1")
    first = cache.tree.lookup(cache.kv_handle("a", context + seq(500, 8), 24))
    cache.evictor.drop_kv(first)
    cache.check_integrity()
    resume(cache, "a", context + seq(600, 8) + (1,), 16)
    shared = cache.tree.lookup(cache.kv_handle("a", context, 16))
    assert shared.hits == 2 and shared.live_children == 0 and not evidenced(shared)
    second = publish(cache, "a", context + seq(600, 8), 16, [24], "c2")
    assert not second.continues and not evidenced(second)


SMALL_CHECKPOINT = EntrySizes(kv_bytes_per_token=10, checkpoint_bytes=20)  # 2 tokens of KV (LFM2-like)


@pytest.mark.parametrize("policy", ["lru", "cost-per-byte"])
def test_a_spent_context_goes_before_a_fresh_one_of_equal_worth(policy):
    # Context a (older) served three candidates: two resumed from it. Context b (newer) has served
    # one. With a small checkpoint a context (64 tokens for 6.6 of KV) and a candidate tail (8
    # for 1) cost about alike per byte, so recency decides, as under LRU: the tails go, then a.
    # Crediting a's hits as evidence of reuse would keep it and drop b, though a group of
    # candidates is finite and a's hits count down the ones it has left.
    cache = RadixCache(BS, 20, 6, make_eviction_policy(policy, SMALL_CHECKPOINT))
    a, b = seq(100, 64), seq(300, 64)
    assert serve(cache, "a", a + seq(500, 8), [64, 72], "a1")
    for i in (2, 3):
        resume(cache, "a", a + seq(500 + 100 * i, 8) + (1,), 64)
        publish(cache, "a", a + seq(500 + 100 * i, 8), 64, [72], f"a{i}")
    assert serve(cache, "b", b + seq(900, 8), [64, 72], "b1")
    assert cache.kv.free == 0
    assert cache.reserve(12, 0)  # the four tails and one context
    cache.check_integrity()
    assert kv_ends(cache) == [("b", 64)]


@pytest.mark.parametrize("policy", ["lru", "cost-per-byte"])
def test_a_leaf_holding_the_only_checkpoint_of_a_split_context_holds_all_of_it(policy):
    # a (older): a 64-token context, split at 56 by a prompt that registered and left: its leaf
    # [56, 64) holds the checkpoint that makes all 64 tokens of KV usable, so it holds them too.
    # b (newer): a 64-token context in one node. Both save 64 tokens for 64 of KV and a
    # checkpoint; recency decides. Counting the leaf's own 8 tokens of KV alone would make a
    # eight times dearer per byte and drop b.
    cache = new_cache(policy, blocks=16, slots=2)
    assert serve(cache, "a", seq(100, 64), [64], "a")
    cache.unregister(cache.register("a", seq(100, 56) + seq(800, 8)))
    assert {n.end for n in _walk(cache.tree.find_root("a"))} == {56, 64}
    assert serve(cache, "b", seq(300, 64), [64], "b")
    assert cache.reserve(cache.kv.free + 8, 0)
    cache.check_integrity()
    assert {ns for ns, _ in cache.tree.named_roots()} == {"b"}


def test_each_branch_below_checkpointless_kv_holds_all_of_it():
    # Two prompts share 64 tokens with no checkpoint there, each ending in a one-block leaf with
    # a checkpoint at 72: each leaf saves 72 tokens and holds all 72 tokens of KV that only its
    # checkpoint makes usable (and its checkpoint), shared or not. So a sibling's eviction leaves
    # the other's key as it was: nothing to requeue (check_integrity checks queued keys).
    cache = new_cache("cost-per-byte", blocks=18, slots=3)
    assert serve(cache, "a", seq(100, 64) + seq(500, 8), [72], "a1")
    assert serve(cache, "a", seq(100, 64) + seq(600, 8), [72], "a2")
    leaves = [n for n in _walk(cache.tree.find_root("a")) if n.end == 72]
    policy = cache.evictor.policy
    assert all(policy.value(n, EntryKind.KV) == pytest.approx(72 / (72 * 10 + 100)) for n in leaves)
    kv = cache.evictor.kv_victims
    before = {n.key[0]: kv.priority(n) for n in leaves}
    assert cache.reserve(cache.kv.free + 1, 0)
    cache.check_integrity()
    (left,) = [n for n in leaves if n.materialized]
    assert kv.priority(left) == before[left.key[0]]


def test_a_contexts_upper_piece_keeps_the_recency_of_a_request_resumed_below_it():
    # b: a 64-token context split by checkpoints at 56 and 64, a candidate's tail below it
    # (no checkpoint there: worth nothing), computed at clock 0. a: a 64-token context computed
    # later (the clock at 0.001). Later still (0.003) a second candidate resumes at b's 64: its
    # piece [56, 64) is stamped then, and goes soon all the same (8 tokens for 8 of KV and a
    # checkpoint). Its parent [0, 56) is what the next candidate resumes from, and was used by
    # that request too: it takes over the stamp, so b's context outranks a (the older, of about
    # the same worth per byte) instead of keeping the stamp of its first computation and going.
    cache = RadixCache(BS, 17, 3, make_eviction_policy("cost-per-byte", SMALL_CHECKPOINT))
    policy = cache.evictor.policy
    b = seq(300, 64)
    assert serve(cache, "b", b + seq(900, 8), [56, 64], "b1")
    policy.clock = 0.001  # evictions elsewhere moved the clock
    assert serve(cache, "a", seq(100, 64), [64], "a")
    policy.clock = 0.003
    resume(cache, "b", b + seq(700, 8) + (1,), 64)
    assert cache.kv.free == 0
    assert cache.reserve(9, 0)  # b's tail and its piece [56, 64), then one context
    cache.check_integrity()
    assert kv_ends(cache) == [("b", 56)]


@pytest.mark.parametrize("policy", ["lru", "cost-per-byte"])
def test_the_context_computed_last_is_not_evicted_first_at_a_cold_clock(policy):
    # a (older): a 64-token context in one node, its checkpoint at 64. b (newer): a 64-token
    # context that the cold-start ladder split with checkpoints at 48, 56 and 64, so each piece
    # saves a little less per byte than a whole context (8 tokens for 8 of KV and a checkpoint of
    # 2, against 64 for 66). Nothing has been evicted yet: a clock that moves only at evictions
    # stamps both at its start, and worth alone would drop all of b, piece by piece, before a.
    # The clock moves as work is computed too, so b is the newer and a goes, as under LRU.
    blocks, slots = 16, 4
    sizes = replace(SMALL_CHECKPOINT, capacity=blocks * BS * 10 + slots * 20)
    cache = RadixCache(BS, blocks, slots, make_eviction_policy(policy, sizes))
    assert serve(cache, "a", seq(100, 64), [64], "a")
    assert serve(cache, "b", seq(300, 64), [48, 56, 64], "b")
    assert cache.kv.free == 0
    assert cache.reserve(8, 0)  # one context's blocks
    cache.check_integrity()
    assert {ns for ns, _ in cache.tree.named_roots()} == {"b"}
    assert ends_with_checkpoint(cache) == {48, 56, 64}
