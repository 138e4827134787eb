"""The cache's public calls with arguments drawn at random, valid or not: each call either
succeeds, leaving every invariant intact, or is refused (ValueError, `OutOfCapacity`) having
changed nothing. The caller keeps only the protocol a scheduler must (a chunk's extend is locked
at once, its slots free beforehand; locks move between rounds; a failed round's locks go before
its withdrawal); everything else may be a mistake. The named cases are `test_refusals.py`'s; this
one found a chunk starting past the published KV, and an allocation past the byte budget."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixflow.cache import OutOfCapacity, RadixCache
from radixflow.cache.eviction import EntrySizes
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cache.ledger import CacheBudget
from radixflow.cache.types import NodeHandle

BS = 2
BASE = (1, 2, 1, 2, 3, 3)
tokens_st = st.builds(
    lambda n, tail: BASE[:n] + tuple(tail), st.integers(0, len(BASE)), st.lists(st.integers(1, 3), max_size=5)
)
position = st.integers(-1, 12)
pick = st.integers(0, 1_000)


def snapshot(cache: RadixCache) -> tuple[object, ...]:
    nodes = sorted(
        (
            n.id,
            n.key,
            n.lock_ref,
            n.demand,
            n.ends,
            n.live_children,
            tuple(n.blocks or ()),
            repr(n.checkpoint),
        )
        for n in cache.tree.nodes()
    )
    journals = (dict(cache.journal.adopted_by_producer()), dict(cache.journal.pending_by_producer()))
    held = (sorted(cache.private_blocks), sorted(cache.working_slots), cache.locked_nodes)
    return cache.usage(), nodes, journals, held


class MisuseMachine(RuleBasedStateMachine):
    EVICTION, BUDGET = "lru", None  # a budget in bytes: a block weighs 3, a slot 5

    def __init__(self) -> None:
        super().__init__()
        policy = make_eviction_policy(self.EVICTION, EntrySizes(2, 5))
        self.cache = RadixCache(BS, 10, 4, eviction=policy, budget=CacheBudget(3, 5, self.BUDGET))
        self.handles: list[NodeHandle | None] = [None]  # every handle seen, stale ones included
        self.slots: list[int] = [0, 3]  # slot ids to try: working ones join
        self.chunks: dict[str, NodeHandle | None] = {}  # producer -> its chunk's lock
        self.n = 0

    def attempt(self, call: Callable[[], object]) -> object:
        """``call()``; a refusal must have changed nothing."""
        before = snapshot(self.cache)
        try:
            return call()
        except (ValueError, OutOfCapacity):
            assert snapshot(self.cache) == before, "a refused call changed the cache"
            return None

    def handle(self, i: int) -> NodeHandle | None:
        return self.handles[i % len(self.handles)]

    @rule(ns=st.sampled_from("ab"), tokens=tokens_st)
    def register(self, ns, tokens):
        self.handles.append(self.cache.register(ns, tokens))

    @rule(i=pick)
    def unregister(self, i):
        handle = self.handle(i)
        if handle is not None:
            self.attempt(lambda: self.cache.unregister(handle))

    @rule(n=st.integers(0, 4))
    def alloc_blocks(self, n):
        self.attempt(lambda: self.cache.alloc_blocks(n))

    @rule(ids=st.lists(st.integers(0, 11), max_size=3))
    def free_blocks(self, ids):
        self.attempt(lambda: self.cache.free_blocks(ids))

    @rule(ns=st.sampled_from("ab"), tokens=tokens_st, start=position, end=position, ckpts=st.lists(position))
    def extend(self, ns, tokens, start, end, ckpts):
        private = sorted(self.cache.private_blocks)
        ckpts = ckpts[: self.cache.free_slots]  # the protocol: the chunk's slots are free
        self.n += 1
        ext = self.attempt(lambda: self.cache.extend(ns, tokens, start, end, private, ckpts, f"p{self.n}"))
        if ext is not None:
            self.cache.lock(ext.handle)  # the protocol: a chunk's path is locked at once
            self.handles.append(ext.handle)
            self.chunks[f"p{self.n}"] = ext.handle

    @rule(i=pick)
    def lock(self, i):
        self.attempt(lambda: self.cache.lock(self.handle(i)))

    def between_rounds(self) -> bool:
        """No round open: locks may move (a round's path stays locked until it commits or fails)."""
        journal = self.cache.journal
        return not journal.pending_by_producer() and not journal.adopted_by_producer()

    @precondition(between_rounds)
    @rule(i=pick)
    def unlock(self, i):
        self.attempt(lambda: self.cache.unlock(self.handle(i)))

    @precondition(between_rounds)
    @rule(i=pick, j=pick)
    def relock(self, i, j):
        self.attempt(lambda: self.cache.relock(self.handle(i), self.handle(j)))

    @rule(n=st.integers(0, 12))
    def commit(self, n):
        self.cache.commit(f"p{n}")

    @rule(n=st.integers(0, 12))
    def withdraw(self, n):
        self.attempt(lambda: self.cache.withdraw([f"p{n}"]))

    @rule()
    def fail(self):
        """The round's worker call failed: its chunks' locks go, then the round is withdrawn (or,
        another lock holding its KV, refused: the chunks' locks are taken again)."""
        journal = self.cache.journal
        open_rounds = sorted({*journal.adopted_by_producer(), *journal.pending_by_producer()})
        locks = [self.chunks[p] for p in open_rounds if p in self.chunks]
        for handle in locks:
            self.cache.unlock(handle)
        self.attempt(lambda: self.cache.withdraw(open_rounds))
        if journal.adopted_by_producer():  # refused: the rounds stay open, their paths locked
            for handle in locks:
                self.cache.lock(handle)

    @rule()
    def alloc_working_slot(self):
        slot = self.attempt(self.cache.alloc_working_slot)
        if isinstance(slot, int):
            self.slots.append(slot)

    @rule(i=pick)
    def free_working_slot(self, i):
        self.attempt(lambda: self.cache.free_working_slot(self.slots[i % len(self.slots)]))

    @rule(ns=st.sampled_from("ab"), tokens=tokens_st, at=position, i=pick)
    def adopt_checkpoint(self, ns, tokens, at, i):
        slot = self.slots[i % len(self.slots)]
        self.attempt(lambda: self.cache.adopt_checkpoint(ns, tokens, at, slot))

    @rule(ns=st.sampled_from("ab"), tokens=tokens_st, upto=position)
    def kv_handle(self, ns, tokens, upto):
        self.handles.append(self.attempt(lambda: self.cache.kv_handle(ns, tokens, upto)))  # type: ignore[arg-type]

    @rule(ns=st.sampled_from("ab"), tokens=tokens_st, limit=position)
    def match(self, ns, tokens, limit):
        m = self.cache.match(ns, tokens, limit)
        assert m.checkpoint_tokens <= m.kv_tokens <= max(limit, 0)
        self.handles.append(m.handle)

    @rule(blocks=st.integers(0, 11), slots=st.integers(0, 5))
    def reserve(self, blocks, slots):
        self.cache.reserve(blocks, slots)

    @rule(n=st.integers(0, 5))
    def free_slots_upto(self, n):
        assert self.cache.free_slots_upto(n) <= n

    @invariant()
    def intact(self):
        self.cache.check_integrity()


MisuseMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestMisuse = MisuseMachine.TestCase


class BudgetMisuseMachine(MisuseMachine):
    """The same calls under `cost-per-byte` and a byte budget of 6 blocks and 2 slots."""

    EVICTION, BUDGET = "cost-per-byte", 6 * 3 + 2 * 5


BudgetMisuseMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestBudgetMisuse = BudgetMisuseMachine.TestCase
