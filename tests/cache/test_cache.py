"""Radix cache: unit cases plus a hypothesis state machine with check_integrity after every step."""

from __future__ import annotations

import pytest
from cache_utils import seq, serve
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from radixflow.cache import EVICTION_POLICIES, RadixCache, Readiness
from radixflow.cache.eviction import EntrySizes
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cache.integrity import IntegrityError
from radixflow.cache.ledger import CacheBudget
from radixflow.cache.node import Node

BS = 4


def prompt(*parts: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(t for p in parts for t in p)


CTX = tuple(range(100, 116))  # 4 blocks
A = CTX + (1, 2, 3, 4, 5, 6, 7, 8)
B = CTX + (9, 9, 9, 9, 5, 5)


def compute(cache: RadixCache, ns: str, tokens: tuple[int, ...], start: int, end: int, ckpts, rid="r"):
    blocks = cache.alloc_blocks(-(-end // BS) - start // BS)
    ext = cache.extend(ns, tokens, start, end, blocks, ckpts, rid)
    cache.lock(ext.handle)
    return ext, blocks


def test_sharing_is_the_deepest_prefix_others_registered_share():
    cache = RadixCache(BS, 64, 8)
    ra = cache.register("n", A)
    assert cache.sharing(ra).tokens == 0 and cache.sharing(ra).node is None  # alone
    rb = cache.register("n", B)
    cache.register("n", B + (7,))
    share = cache.sharing(ra)
    assert (share.tokens, share.prompts) == (len(CTX), 3)
    # B is a prefix of B+7: they share B's whole blocks (a registration is kept in whole blocks)
    assert cache.sharing(rb).tokens == len(B) // BS * BS and cache.sharing(rb).prompts == 2
    assert share.node is not None
    ends = cache.registered_under(share.node, limit=64)
    assert {e.node_id for e in ends} >= {ra.node_id, rb.node_id}
    assert len(cache.registered_under(share.node, limit=1)) <= 1  # the walk is bounded
    cache.unregister(ra)
    cache.check_integrity()


def test_a_prompt_unregistered_twice_is_refused_and_changes_nothing():
    cache = RadixCache(BS, 64, 8)
    reg = cache.register("n", CTX)
    serve(cache, "n", CTX, [len(CTX)], "r")  # its KV stays cached: the node outlives the prompt
    cache.unregister(reg)
    with pytest.raises(ValueError, match="unregister of a prompt not registered"):
        cache.unregister(reg)
    assert all(n.demand == 0 and n.ends == 0 for n in cache.tree.nodes())
    cache.check_integrity()


def test_branch_points_from_registered_prompts():
    cache = RadixCache(BS, 64, 8)
    ra = cache.register("n", A)
    cache.register("n", B)
    assert cache.branch_points(ra, 0, len(A)) == [len(CTX)]
    cache.check_integrity()


def test_pending_checkpoint_blocks_then_ready():
    cache = RadixCache(BS, 64, 8)
    cache.register("n", A)
    cache.register("n", B)
    ext, _ = compute(cache, "n", A, 0, len(A), [len(CTX)], rid="prod")
    cache.check_integrity()
    m = cache.match("n", B, len(B) - 1)
    assert m.kv_tokens == len(CTX)  # KV is visible in the same round
    assert m.checkpoint_tokens == len(CTX) and m.blocked and m.producer == "prod"
    cache.commit("prod")
    m = cache.match("n", B, len(B) - 1)
    assert not m.blocked and m.checkpoint_ready and m.checkpoint_slot == ext.checkpoints[len(CTX)]
    cache.check_integrity()


def test_namespaces_never_share():
    cache = RadixCache(BS, 64, 8)
    cache.register("x", A)
    compute(cache, "x", A, 0, len(A), [len(CTX)])
    cache.commit("r")
    m = cache.match("y", A, len(A))
    assert m.kv_tokens == 0 and m.checkpoint_tokens == 0


def test_lru_eviction_respects_locks_and_capacity():
    cache = RadixCache(BS, 8, 4)
    ext, blocks = compute(cache, "n", CTX, 0, 16, [16])
    cache.commit("r")
    assert not cache.reserve(8, 0)  # everything is locked
    cache.unlock(ext.handle)
    cache.free_blocks(blocks)
    assert cache.reserve(8, 0)  # now evictable
    assert cache.usage().free_blocks == 8
    cache.check_integrity()


@pytest.mark.parametrize(
    ("blocks", "slots", "num_blocks", "budget"), [(5, 0, 10, None), (0, 3, 10, None), (10, 0, 20, 150)]
)
def test_a_reservation_that_cannot_succeed_evicts_nothing(blocks, slots, num_blocks, budget):
    # 2 cached blocks and a checkpoint; a running request holds 7 blocks and a working slot: 5 more
    # blocks, 3 slots, or 10 blocks' bytes beside the 7 locked in a 150-byte budget can never be
    # had. The failed reservation evicted every evictable entry all the same, each time a waiting
    # request tried, and the prefix the next request would have reused was lost.
    cache = RadixCache(BS, num_blocks, 3, budget=CacheBudget(10, 10, budget))
    assert serve(cache, "a", seq(100, 8), [8], "p")
    held, slot = cache.alloc_blocks(7), cache.alloc_working_slot()
    before = cache.usage()
    assert not cache.reserve(blocks, slots)
    assert cache.usage() == before and cache.evictions() == {"kv": 0, "checkpoint": 0}
    cache.check_integrity()
    cache.free_blocks(held)
    cache.free_working_slot(slot)
    assert cache.reserve(blocks, slots)  # possible now: it evicts what it must
    cache.check_integrity()


def test_freeing_slots_that_cannot_be_had_evicts_nothing():
    # a checkpoint weighs 5 blocks; beside 7 locked blocks and 2 cached ones, a 100-byte budget
    # never holds one: asking for a slot evicted the cached KV all the same, for nothing
    cache = RadixCache(BS, 20, 4, budget=CacheBudget(10, 50, 100))
    assert serve(cache, "a", seq(100, 8), [], "p")
    held = cache.alloc_blocks(7)
    before = cache.usage()
    assert cache.free_slots_upto(1) == 0
    assert cache.usage() == before and cache.evictions() == {"kv": 0, "checkpoint": 0}
    cache.free_blocks(held[:3])  # 4 locked blocks: a slot fits once the 2 cached ones go
    assert cache.free_slots_upto(2) == 1 and cache.evictions() == {"kv": 1, "checkpoint": 0}
    cache.check_integrity()


def test_the_accounting_views_follow_alloc_free_and_adoption():
    cache = RadixCache(BS, 16, 4)
    private, working = cache.private_blocks, cache.working_slots
    blocks = cache.alloc_blocks(3)
    slot = cache.alloc_working_slot()
    assert private == set(blocks) and working == {slot}
    ext = cache.extend("n", CTX, 0, 8, blocks[:2], [], "r")  # the tree adopts two of them
    assert private == {blocks[2]}
    cache.free_blocks(blocks)
    cache.free_working_slot(slot)
    assert not private and not working
    assert not hasattr(private, "add") and not hasattr(working, "discard")  # read-only
    node = cache.tree.lookup(ext.handle)
    assert cache.journal.adopted_by_producer() == {"r": (node,)}
    cache.lock(ext.handle)
    cache.lock(ext.handle)
    assert cache.own_locks(node) == 2 and cache.own_locks(node.parent) == 0
    cache.check_integrity()


def _pending(cache: RadixCache) -> Node:
    return next(n for n in cache.tree.nodes() if n.checkpoint is not None)


def _wanted(cache: RadixCache) -> Node:
    return next(n for n in cache.tree.nodes() if not n.materialized)


def _gone(cache: RadixCache) -> Node:
    """A materialized node as the tree had it, no longer in the tree."""
    node = _pending(cache)
    return Node(id=10_000, key=node.key, parent=node.parent, end=node.end, blocks=list(node.blocks or []))


def _unregistered_twice(node: Node) -> None:
    node.ends -= 1
    for above in node.ancestors():
        above.demand -= 1


# expected message -> a corruption of a cache holding CTX (locked, PENDING checkpoint at its end)
# under which A's registered tail waits unmaterialized
CORRUPTIONS = {
    # the parts' own operations, used outside the cache's protocol
    "stale pending entry": lambda cache: cache.tree.drop_checkpoint(_pending(cache)),
    "demand mismatch": lambda cache: cache.tree.remove(_wanted(cache)),
    "published this round without KV": lambda cache: cache.journal.adopt("r", _wanted(cache)),
    # the nodes' fields
    "lock_ref 5": lambda cache: setattr(_pending(cache), "lock_ref", 5),
    "READY checkpoint still names a producer": lambda cache: setattr(
        _pending(cache).checkpoint, "readiness", Readiness.READY
    ),
    # a prompt unregistered once too often: the sums still add up, below zero
    "-1 registered prompts end here": lambda cache: _unregistered_twice(_pending(cache)),
    # a lock left on a node gone from the tree: the next reservation that walks the locks fails
    "not in the tree": lambda cache: cache.holdings._locks.update([10_000]),
    # a round's journal naming a node gone from the tree: withdrawing the round frees its blocks
    "journaled by r, not in the tree": lambda cache: cache.journal.adopt("r", _gone(cache)),
    # the tree's index (no operation unlinks a node from it alone)
    "not indexed": lambda cache: cache.tree._nodes.pop(_wanted(cache).id),
    # a root made and never used (a lookup once made one per namespace asked about)
    "a namespace that holds nothing": lambda cache: cache.tree.root("salt:never-used"),
    # a root's count of materialized children (kept by `set_blocks` as every node's is)
    "node 0: live_children 5 != 1": lambda cache: setattr(_root(cache), "live_children", 5),
    # a node left in the index, out of the tree (a namespace's root dropped from the walk alone):
    # `nodes()` lists it, and the index grows with every salt a client names
    "1 indexed nodes not in the tree": lambda cache: cache.tree._nodes.update({10_000: _orphan()}),
}


def _root(cache: RadixCache) -> Node:
    return next(iter(cache.tree.roots()))


def _orphan() -> Node:
    return Node(id=10_000, key=(), parent=None, end=0, blocks=[])


@pytest.mark.parametrize("expected", sorted(CORRUPTIONS))
def test_integrity_detects_corruption(expected):
    cache = RadixCache(BS, 16, 4)
    cache.register("n", A)
    compute(cache, "n", CTX, 0, 16, [16])
    cache.check_integrity()
    CORRUPTIONS[expected](cache)
    with pytest.raises(IntegrityError, match=expected):
        cache.check_integrity()


@pytest.mark.parametrize("queue", ["kv_victims", "state_victims"])
def test_integrity_sees_a_queued_victim_its_heap_lost(queue):
    # marked queued, it is never offered again; with no entry, it is never popped either: a
    # reservation the cache promised could succeed would fail half-way
    cache = RadixCache(BS, 16, 4)
    serve(cache, "n", CTX, [len(CTX)], "r")
    cache.check_integrity()
    getattr(cache.evictor, queue)._heap.clear()
    with pytest.raises(IntegrityError, match="queued without a heap entry"):
        cache.check_integrity()


def test_state_eviction_drops_only_unlocked_ready_checkpoints():
    cache = RadixCache(BS, 64, 2)
    e1, _ = compute(cache, "n", A, 0, 16, [8, 16], rid="p")
    cache.commit("p")
    assert cache.slots.free == 0
    assert not cache.reserve(0, 1)
    cache.unlock(e1.handle)
    assert cache.reserve(0, 1)
    cache.check_integrity()


def _serve_once(cache: RadixCache, ns: str, tokens: tuple[int, ...], ckpts, rid: str) -> None:
    """One request's life as the scheduler drives it: register, compute, commit, release."""
    reg = cache.register(ns, tokens)
    assert cache.reserve(-(-len(tokens) // BS), len(ckpts))
    ext, blocks = compute(cache, ns, tokens, 0, len(tokens), ckpts, rid=rid)
    cache.commit(rid)
    cache.unlock(ext.handle)
    cache.free_blocks(blocks)
    cache.unregister(reg)


def test_a_namespace_goes_with_its_last_cached_block():
    cache = RadixCache(BS, 8, 4)
    _serve_once(cache, "salt:a", CTX, [16], "r")
    assert cache.namespaces == 1 and cache.usage().namespaces == 1  # its KV is cached
    assert cache.reserve(8, 4)  # evicts every block
    assert cache.namespaces == 0 and not cache.tree.nodes()
    cache.check_integrity()


def test_a_lookup_or_a_prompt_that_caches_nothing_leaves_no_namespace():
    cache = RadixCache(BS, 8, 4)
    assert cache.match("salt:looked-up", A, len(A)).kv_tokens == 0
    short = cache.register("salt:short", (1, 2))  # under a block: it ends on the root itself
    long = cache.register("salt:long", A)
    assert cache.namespaces == 2
    cache.check_integrity()
    cache.unregister(short)
    cache.unregister(long)
    assert cache.namespaces == 0 and not cache.tree.nodes()
    ext = cache.extend("salt:tiny", (1, 2), 0, 2, cache.alloc_blocks(1), [], "r")  # no whole block
    assert ext.handle is None and cache.namespaces == 0
    cache.check_integrity()


def test_unique_salts_leave_a_bounded_cache():
    """Every request its own namespace, the cache full for most of them: what stays is bounded
    by the capacity, nodes and eviction queues included (not by the requests seen)."""
    cache = RadixCache(BS, num_blocks=16, num_slots=64)  # slots never short: their queue is never popped
    for i in range(2000):
        _serve_once(cache, f"salt:{i}", CTX, [8, 16], f"r{i}")
    assert cache.namespaces <= 16 // (len(CTX) // BS)
    assert cache.locked_nodes == 0  # nothing is held: no lock bookkeeping is left either
    assert len(cache.tree.nodes()) <= 2 * 16
    assert len(cache.evictor.kv_victims) <= 2 * 16 + cache.evictor.kv_victims.SLACK
    assert len(cache.evictor.state_victims) <= 2 * 16 + cache.evictor.state_victims.SLACK
    cache.check_integrity()


def test_a_withdrawn_round_leaves_no_namespace():
    cache = RadixCache(BS, 8, 4)
    reg = cache.register("salt:w", CTX)
    ext, blocks = compute(cache, "salt:w", CTX, 0, 16, [16], rid="p")
    cache.unlock(ext.handle)
    cache.withdraw(["p"])
    cache.free_blocks(blocks)
    assert cache.namespaces == 1  # the registered prompt still holds it
    cache.unregister(reg)
    assert cache.namespaces == 0
    cache.check_integrity()


# --------------------------------------------------------------------------- state machine
PREFIXES = [tuple(range(10, 18)), tuple(range(10, 14)) + (7, 7, 7, 7), (1, 2, 3, 4)]
prompts = st.builds(
    lambda p, tail: p + tuple(tail),
    st.sampled_from(PREFIXES),
    st.lists(st.integers(0, 3), min_size=1, max_size=10),
) | st.lists(st.integers(0, 3), min_size=2, max_size=BS - 1).map(tuple)  # under a block: ends on a root
NAMESPACES = ["a", "b", "c"]


class CacheMachine(RuleBasedStateMachine):
    registered = Bundle("registered")
    running = Bundle("running")

    BLOCKS, SLOTS, EVICTION, RECURRENT = 24, 6, "lru", True
    BUDGET: int | None = None  # one byte budget over both pools (None: the pools alone)

    def __init__(self) -> None:
        super().__init__()
        full = self.BUDGET or self.BLOCKS * BS * 3 + self.SLOTS * 40  # paces the clock's fill
        sizes = EntrySizes(3, 40, self.RECURRENT, capacity=full)
        policy = make_eviction_policy(self.EVICTION, sizes)
        budget = CacheBudget(3 * BS, 40, self.BUDGET)  # the sizes the policy weighs entries by
        self.cache = RadixCache(BS, self.BLOCKS, self.SLOTS, eviction=policy, budget=budget)
        self.computed: dict[str, set[tuple[int, ...]]] = {ns: set() for ns in NAMESPACES}
        self.n = 0

    @rule(target=registered, ns=st.sampled_from(NAMESPACES), tokens=prompts)
    def register(self, ns, tokens):
        return (ns, tokens, self.cache.register(ns, tokens))

    @rule(reg=consumes(registered))
    def unregister(self, reg):
        self.cache.unregister(reg[2])

    @rule(target=running, reg=registered, cut=st.integers(0, 3))
    def compute(self, reg, cut):
        ns, tokens, _ = reg
        m = self.cache.match(ns, tokens, len(tokens) - 1)
        if m.blocked:
            return None
        self.cache.lock(m.handle)
        self.cache.resumed(m.handle)
        start, end = m.checkpoint_tokens, len(tokens)
        ckpts = sorted({p for p in (start + BS * cut, end // BS * BS) if start < p <= end and p % BS == 0})
        need = -(-end // BS) - start // BS
        if not self.cache.reserve(need, len(ckpts)):
            self.cache.unlock(m.handle)
            return None
        self.n += 1
        rid = f"r{self.n}"
        blocks = self.cache.alloc_blocks(need)
        ext = self.cache.extend(ns, tokens, start, end, blocks, ckpts, rid)
        self.cache.lock(ext.handle)
        self.cache.unlock(m.handle)
        self.computed[ns].add(tokens[: end // BS * BS])
        return (rid, ext.handle, blocks)

    @rule(run=consumes(running))
    def finish(self, run):
        if run is None:
            return
        rid, handle, blocks = run
        self.cache.commit(rid)
        self.cache.unlock(handle)
        self.cache.free_blocks(blocks)

    @rule(blocks=st.integers(0, 24), slots=st.integers(0, 6))  # beyond capacity: refused
    def evict(self, blocks, slots):
        self.cache.reserve(blocks, slots)

    @rule(n=st.integers(0, 3))
    def make_slots(self, n):
        got = self.cache.free_slots_upto(n)
        assert got <= n and self.cache.free_slots >= got

    @rule(ns=st.sampled_from(NAMESPACES), tokens=prompts)
    def match_is_bounded_by_what_was_computed(self, ns, tokens):
        m = self.cache.match(ns, tokens, len(tokens))
        best = max((_lcp(tokens, c) for c in self.computed[ns]), default=0)
        assert m.kv_tokens <= best  # namespaces never share; nothing appears uncomputed
        assert m.checkpoint_tokens <= m.kv_tokens
        if m.blocked:
            assert m.producer is not None

    @invariant()
    def integrity(self):
        self.cache.check_integrity()

    @invariant()
    def namespaces_hold_something(self):
        holding = {ns for ns, root in self.cache.tree.named_roots() if root.children or root.ends}
        assert self.cache.namespaces == len(holding)


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


CacheMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestCacheMachine = CacheMachine.TestCase


class ScarceCacheMachine(CacheMachine):
    """The same rules with every eviction policy over a cache that holds little: most steps evict."""


for _name in EVICTION_POLICIES:
    for _recurrent in (True, False):  # sizes of a hybrid model, and of one that resumes anywhere
        _label = f"{_name.replace('-', '_')}{'' if _recurrent else '_attention'}"
        _attrs = {"BLOCKS": 8, "SLOTS": 2, "EVICTION": _name, "RECURRENT": _recurrent}
        _machine = type(f"Scarce_{_label}", (ScarceCacheMachine,), _attrs)
        _machine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
        globals()[f"TestScarceCacheMachine_{_label}"] = _machine.TestCase


class BudgetCacheMachine(CacheMachine):
    """The same rules over one byte budget holding 8 blocks and 2 checkpoints' worth, under caps
    that let either kind take most of it: KV and checkpoints trade bytes at every step."""


for _name in EVICTION_POLICIES:
    for _recurrent in (True, False):
        _label = f"{_name.replace('-', '_')}{'' if _recurrent else '_attention'}"
        _attrs = {"BUDGET": 8 * 3 * BS + 2 * 40, "EVICTION": _name, "RECURRENT": _recurrent}
        _machine = type(f"Budget_{_label}", (BudgetCacheMachine,), _attrs)
        _machine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
        globals()[f"TestBudgetCacheMachine_{_label}"] = _machine.TestCase


def test_the_prompts_registered_are_counted_and_checked_against_the_tree():
    # the scheduler ties the count to its live requests: a registration never given back shows
    cache = RadixCache(BS, 64, 8)
    ra = cache.register("n", A)
    cache.register("n", B)
    cache.unregister(ra)
    assert sum(cache.registrations.values()) == 1
    cache.check_integrity()
    ra = cache.register("n", A)
    cache._registered[ra] -= 1  # a count out of step with the tree's ``ends``
    with pytest.raises(IntegrityError, match="1 registered prompts end in the tree, 0 registered"):
        cache.check_integrity()


def test_prompts_registered_on_other_nodes_than_the_tree_says_fail_the_check():
    # the same number registered in all, on the wrong nodes: a per-node count tells
    cache = RadixCache(BS, 64, 8)
    ra, rb = cache.register("n", A), cache.register("n", B)
    cache._registered[ra] += 1
    cache._registered[rb] -= 1
    with pytest.raises(IntegrityError, match="registered"):
        cache.check_integrity()


def test_kv_published_on_an_unlocked_path_is_evictable_once_its_round_commits():
    # the scheduler locks what a request computes; a caller that does not must not leak the KV
    # (an evictable leaf the evictor never queued is held for good)
    cache = RadixCache(BS, 3, 4)
    ext = cache.extend("n", A, 0, 12, cache.alloc_blocks(3), [8], "p")
    cache.commit("p")
    cache.check_integrity()
    assert cache.reserve(3, 0)  # the whole pool: only by evicting what "p" published
    assert ext.handle is not None and cache.match("n", A, len(A)).kv_tokens == 0
    cache.check_integrity()
