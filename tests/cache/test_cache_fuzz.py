"""A seeded stateful fuzz of the radix cache, driven the way the scheduler drives it.

Requests arrive (`register`), are matched, lock their reuse point, reserve their whole remaining KV
beside what running requests were promised, take a working slot, and run chunk by chunk (`extend`
with checkpoints, `relock` down their path); a round commits (PENDING -> READY) or fails
(`withdraw`); finished requests adopt their rolling tail checkpoint and let go, and aborted ones
also their state where a chunked prefill stopped (the scheduler's `_keep_states`). Sizes are drawn to
land on the edges: prompts a block long, one token past a block, a prefix of another, identical
prompts, token budgets that end chunks on block boundaries, one or no free block or slot.

After every step `check_integrity()` runs, and a reference model checks what the cache claims
against what was really computed: every KV position and state slot records the (namespace, token
prefix) written into it, as a runner would, so a chunk that reads KV or restores state it should
not, a READY checkpoint without its data, or a locked path that lost its KV fails at once. Every
victim popped from an eviction queue is checked against a scan of the tree: the evictable entry
the policy ranks lowest.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from cache_utils import snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.cache import EVICTION_POLICIES, RadixCache
from radixflow.cache.digest import chain_hashes
from radixflow.cache.evictable import EvictionQueue, checkpoint_evictable, kv_evictable
from radixflow.cache.eviction import EntrySizes
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cache.ledger import CacheBudget
from radixflow.cache.node import Node
from radixflow.cache.types import NodeHandle, Readiness

Content = tuple[str, tuple[int, ...]]
GARBAGE: Content = ("garbage", ())


@dataclass
class Req:
    rid: str
    ns: str
    prompt: tuple[int, ...]
    max_tokens: int
    registration: NodeHandle | None = None
    output: list[int] = field(default_factory=list)
    lock: NodeHandle | None = None
    block_table: list[int] = field(default_factory=list)
    own_blocks: list[int] = field(default_factory=list)
    computed: int = 0
    reused: int = 0  # where it started: the tokens its reuse point served
    working: int | None = None
    tail: int | None = None
    tail_position: int = 0

    @property
    def seq(self) -> tuple[int, ...]:
        return self.prompt + tuple(self.output)

    @property
    def max_length(self) -> int:
        return len(self.prompt) + max(self.max_tokens - 1, 0)


@dataclass
class Chunk:
    req: Req
    start: int
    end: int
    restore: int | None
    snapshots: list[tuple[int, int]]  # (position, slot)
    follows: bool = False  # restores a PENDING checkpoint an earlier chunk of its round saves


@dataclass(frozen=True)
class Config:
    bs: int
    blocks: int
    slots: int
    policy: str
    recurrent: bool
    budget: int | None  # in units: a block weighs BLOCK_BYTES, a slot SLOT_BYTES
    same_round: bool  # a blocked consumer may follow its producer into the round
    contexts: int = 3  # shared contexts prompts are drawn from


BLOCK_BYTES, SLOT_BYTES = 3, 5


class Driver:
    def __init__(self, cfg: Config, seed: int, hints: bool = False) -> None:
        """``hints``: `extend` is given a hint, mostly the request's lock, drawn from an RNG of
        its own (the workload is the same as without)."""
        self.cfg, self.rng, self.bs = cfg, random.Random(seed), cfg.bs
        self.hints = random.Random(seed) if hints else None
        sizes = EntrySizes(
            kv_bytes_per_token=max(BLOCK_BYTES // cfg.bs, 1),
            checkpoint_bytes=SLOT_BYTES,
            recurrent=cfg.recurrent,
            capacity=cfg.blocks * BLOCK_BYTES + cfg.slots * SLOT_BYTES,  # paces the clock's fill
        )
        policy = make_eviction_policy(cfg.policy, sizes)
        slots = cfg.slots if cfg.recurrent else 0
        budget = CacheBudget(BLOCK_BYTES, SLOT_BYTES, cfg.budget)
        self.cache = RadixCache(cfg.bs, cfg.blocks, slots, eviction=policy, budget=budget)
        ev = self.cache.evictor
        for queue, eligible in ((ev.kv_victims, kv_evictable), (ev.state_victims, checkpoint_evictable)):
            queue.pop = self._checked_pop(queue, eligible)  # type: ignore[method-assign]
        self.kv: dict[int, Content] = {}  # block * bs + offset -> what it holds
        self.state: dict[int, Content] = {}  # state slot -> what it holds
        self.waiting: list[Req] = []
        self.running: dict[str, Req] = {}
        self.n = 0
        self.contexts = [self._tokens(self._edge_len()) for _ in range(cfg.contexts)]

    def _checked_pop(
        self, queue: EvictionQueue, eligible: Callable[[Node], bool]
    ) -> Callable[[], Node | None]:
        """``queue.pop``, checked against a scan of the whole tree: the victim is the evictable
        entry the policy ranks lowest (ties by node id), as a heap rebuilt from scratch would pick."""
        pop = queue.pop

        def checked() -> Node | None:
            ranks = [(queue.priority(n), n.id) for n in self.cache.tree.nodes() if eligible(n)]
            victim = pop()
            got = None if victim is None else (queue.priority(victim), victim.id)
            assert got == min(ranks, default=None), f"evicted {got}, lowest {min(ranks, default=None)}"
            return victim

        return checked

    # ------------------------------------------------------------------ workload
    def _edge_len(self) -> int:
        bs = self.bs
        return max(self.rng.choice([bs, 2 * bs, 3 * bs, bs + 1, 2 * bs - 1, 1, 2 * bs + 1]), 1)

    def _tokens(self, n: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(3) for _ in range(n))

    def _prompt(self) -> tuple[str, tuple[int, ...]]:
        rng = self.rng
        ns = rng.choice(["a", "a", "b"])
        kind = rng.randrange(6)
        ctx = rng.choice(self.contexts)
        if kind == 0:
            return ns, ctx  # identical prompts
        if kind == 1:
            return ns, ctx[: rng.randrange(1, len(ctx) + 1)]  # a prefix of another
        if kind == 2:
            return ns, self._tokens(self._edge_len())
        if kind == 3:  # a later turn: a conversation's context grows
            return ns, ctx + rng.choice(self.contexts) + self._tokens(self._edge_len())
        return ns, ctx + self._tokens(self._edge_len())  # a candidate under a shared context

    def arrive(self) -> None:
        ns, prompt = self._prompt()
        self.n += 1
        req = Req(f"r{self.n}", ns, prompt, self.rng.choice([0, 1, 1, 2, self.bs + 1]))
        # the longest prompt alone must fit an empty cache, as the engine checks before admission
        if not self.cache.holds(-(-req.max_length // self.bs), 1 if self.cfg.recurrent else 0):
            return
        req.registration = self.cache.register(ns, prompt)
        self.waiting.append(req)

    # ------------------------------------------------------------------ ledger (ChunkWriter's)
    def owed(self, computed: int, req: Req) -> int:
        bs = self.bs
        start = -(-computed // bs) * bs
        return max(-(-req.max_length // bs) - start // bs, 0)

    # ------------------------------------------------------------------ one round
    def round(self) -> None:
        budget = self.rng.choice([self.bs, self.bs + 1, 2 * self.bs, 3 * self.bs - 1, 64])
        chunks: list[Chunk] = []
        producers: set[str] = set()
        for req in list(self.running.values()):
            chunk = self._continue(req, budget)
            if chunk is not None:
                budget -= chunk.end - chunk.start
                chunks.append(chunk)
                producers.add(req.rid)
        for req in list(self.waiting):
            if budget <= 0:
                break
            chunk = self._admit(req, budget, producers)
            if chunk is not None:
                budget -= chunk.end - chunk.start
                chunks.append(chunk)
                producers.add(req.rid)
            self.check()
        if not chunks:
            return
        if self.rng.random() < 0.1:
            self._fail(chunks)
        else:
            self._run(chunks)
        self.check()

    def _chunk_end(self, start: int, target: int, tokens: int) -> int | None:
        if target - start <= tokens:
            return target
        end = (start + tokens) // self.bs * self.bs
        return end if end > start else None

    def _continue(self, req: Req, budget: int) -> Chunk | None:
        decoding = req.computed >= len(req.prompt)
        target = req.computed + 1 if decoding else len(req.prompt)
        end = self._chunk_end(req.computed, target, budget)
        if end is None:
            return None
        ckpts = [] if decoding else self._positions(req.computed, end, 0)
        return self._emit(req, end, ckpts, req.working)

    def _admit(self, req: Req, budget: int, producers: set[str]) -> Chunk | None:
        cache, bs = self.cache, self.bs
        limit = (len(req.prompt) - 1) // bs * bs
        m = cache.match(req.ns, req.prompt, limit)
        self._check_match(req, m.kv_tokens, m.checkpoint_tokens)
        if not self.cfg.recurrent:  # KV anywhere, even KV an earlier chunk of this round writes
            tokens, handle, restore = m.kv_tokens, cache.kv_handle(req.ns, req.prompt, m.kv_tokens), None
        elif m.blocked and not (self.cfg.same_round and m.producer in producers):
            if self.rng.random() < 0.7:
                return None  # a blocked consumer waits
            for point in self._shallower(req, m.checkpoint_tokens):  # or recomputes the prefix
                chunk = self._start(req, *point, budget)
                if chunk is not None:
                    return chunk
            return None
        else:
            tokens, handle, restore = m.checkpoint_tokens, m.handle, m.checkpoint_slot
        chunk = self._start(req, tokens, handle, restore, budget)
        if chunk is not None:
            chunk.follows = m.blocked
        if chunk is None and tokens and self.cfg.recurrent and not self.running and not m.blocked:
            for point in self._shallower(req, tokens):
                chunk = self._start(req, *point, budget)
                if chunk is not None:
                    break
        return chunk

    def _shallower(self, req: Req, below: int) -> Iterator[tuple[int, NodeHandle | None, int | None]]:
        """READY checkpoints above ``below`` on the prompt's path, deepest first, then none (the
        scheduler's `ReuseFinder.shallower`)."""
        while below > 0:
            m = self.cache.match(req.ns, req.prompt, below - 1, touch=False)
            assert m.checkpoint_tokens < below
            below = m.checkpoint_tokens
            if below > 0 and not m.blocked:
                yield below, m.handle, m.checkpoint_slot
        yield 0, None, None

    def _start(
        self, req: Req, tokens: int, handle: NodeHandle | None, restore: int | None, budget: int
    ) -> Chunk | None:
        cache = self.cache
        end = self._chunk_end(tokens, len(req.prompt), budget)
        if end is None:
            return None
        cache.lock(handle)
        carries = end < len(req.prompt) or req.max_tokens > 1
        working = 1 if self.cfg.recurrent and carries else 0
        if not self._reserve(self.owed(tokens, req) + cache.promised, working):
            cache.unlock(handle)
            return None
        req.lock, req.computed, req.reused = handle, tokens, tokens
        cache.resumed(handle)
        req.block_table = cache.block_table(handle)
        cache.promise(cache.promised + self.owed(tokens, req))
        ckpts = self._positions(tokens, end, working)
        if working:
            req.working = cache.alloc_working_slot()
        self.waiting.remove(req)
        self.running[req.rid] = req
        return self._emit(req, end, ckpts, restore)

    def _positions(self, start: int, end: int, held: int) -> list[int]:
        """Random block-aligned checkpoint positions in (start, end], as far as slots allow (the
        planner's rule: free ones, or evicted ones for up to all of them)."""
        if not self.cfg.recurrent:
            return []
        bs = self.bs
        aligned = [p for p in range(start // bs * bs + bs, end + 1, bs) if p > start]
        wanted = sorted(self.rng.sample(aligned, self.rng.randint(0, len(aligned))))
        if not wanted or self.cache.free_slots >= len(wanted) + held:
            return wanted
        got = self._free_slots_upto(len(wanted) + held)
        return wanted[: max(got - held, 0)]

    def _emit(self, req: Req, end: int, ckpts: list[int], restore: int | None) -> Chunk:
        cache, bs, start = self.cache, self.bs, req.computed
        blocks = cache.alloc_blocks(-(-end // bs) - len(req.block_table))
        req.own_blocks.extend(blocks)
        req.block_table.extend(blocks)
        table = req.block_table[start // bs :]
        ext = cache.extend(req.ns, req.seq, start, end, table, ckpts, req.rid, hint=self._hint(req))
        assert set(ext.checkpoints) <= set(ckpts)
        cache.relock(req.lock, ext.handle)
        req.lock = ext.handle
        snaps = sorted(ext.checkpoints.items())
        goes_on = end < len(req.prompt) or len(req.output) + 1 < req.max_tokens
        if req.working is not None and goes_on:
            snaps.append((end, req.working))
        if end >= len(req.prompt) and start >= len(req.prompt) and end % bs == 0 and self.cfg.recurrent:
            if req.tail is None and cache.free_slots:
                req.tail = cache.alloc_working_slot()
            if req.tail is not None:
                snaps.append((end, req.tail))
                req.tail_position = end
        cache.promise(cache.promised - (self.owed(start, req) - self.owed(end, req)))
        req.computed = end
        return Chunk(req, start, end, restore, snaps)

    def _hint(self, req: Req) -> NodeHandle | None:
        """`extend`'s hint: none without ``hints``; else the request's lock, as the scheduler
        gives, or one that is no use to it: none, any node (a root, one without KV, one off the
        path), a pruned one."""
        if self.hints is None:
            return None
        kind = self.hints.random()
        if kind < 0.7:
            return req.lock
        if kind < 0.8:
            return None
        if kind < 0.9:
            return NodeHandle(self.hints.choice(list(self.cache.tree.nodes())).id)
        return NodeHandle(self.hints.randrange(self.cache.tree._next_id))

    # ------------------------------------------------------------------ the worker call
    def _pos(self, chunk: Chunk, pos: int) -> int:
        return chunk.req.block_table[pos // self.bs] * self.bs + pos % self.bs

    def _run(self, chunks: list[Chunk]) -> None:
        saved: dict[int, Content] = {}
        for c in chunks:
            seq, ns = c.req.seq, c.req.ns
            assert len(c.req.block_table) * self.bs >= c.end
            for pos in range(c.start):
                got = self.kv.get(self._pos(c, pos))
                assert got == (ns, seq[: pos + 1]), f"{c.req.rid}: wrong KV at {pos}"
            for pos in range(c.start, c.end):
                self.kv[self._pos(c, pos)] = (ns, seq[: pos + 1])
            if self.cfg.recurrent:
                if c.start == 0:
                    assert c.restore is None
                else:
                    assert c.restore is not None
                    # a follower runs after the wave that saves its state; the others read the
                    # state as the round found it, which no earlier chunk may have overwritten
                    assert c.follows == (c.restore in saved), f"{c.req.rid}: slot saved this round"
                    got = saved[c.restore] if c.follows else self.state.get(c.restore)
                    assert got == (ns, seq[: c.start]), f"{c.req.rid}: restores the wrong state"
            for pos, slot in c.snapshots:
                saved.setdefault(slot, (ns, seq[:pos]))
        self.state.update(saved)
        for c in chunks:  # the scheduler's update: each chunk commits, then its request may finish
            req = c.req
            self.cache.commit(req.rid)
            self.check()
            if c.end < len(req.prompt):
                continue
            if req.max_tokens > 0:
                req.output.append(self.rng.randrange(3))
            if len(req.output) >= req.max_tokens:  # prompt logprobs only: done at the prompt's end
                self._finish(req)
                self.check()

    def _fail(self, chunks: list[Chunk]) -> None:
        for c in chunks[: (len(chunks) + 1) // 2]:  # a forward that crashed half-way
            for pos in range(c.start, c.end):
                self.kv[self._pos(c, pos)] = GARBAGE
            for _, slot in c.snapshots:
                self.state[slot] = GARBAGE
        for c in chunks:
            self.cache.unlock(c.req.lock)
            c.req.lock = None
        self.cache.withdraw([c.req.rid for c in chunks])
        self.check()
        for c in chunks:
            self._release(c.req)
            self.check()

    # ------------------------------------------------------------------ leaving
    def _finish(self, req: Req) -> None:
        if req.tail is not None:
            self.cache.adopt_checkpoint(req.ns, req.seq, req.tail_position, req.tail)
            req.tail = None
        self._release(req)

    def _release(self, req: Req) -> None:
        cache = self.cache
        if self.running.pop(req.rid, None) is not None:
            cache.promise(cache.promised - self.owed(req.computed, req))
        if req in self.waiting:
            self.waiting.remove(req)
        cache.unlock(req.lock)
        cache.free_blocks(req.own_blocks)
        for slot in (req.working, req.tail):
            if slot is not None:
                cache.free_working_slot(slot)
        if req.registration is not None:
            cache.unregister(req.registration)
        req.lock, req.working, req.tail, req.registration = None, None, None, None
        req.own_blocks, req.block_table = [], []

    def stop(self) -> None:
        """A stop string found between rounds: a decoding request finishes early."""
        decoding = [r for r in self.running.values() if r.output]
        if decoding:
            self._finish(self.rng.choice(decoding))

    def abort(self) -> None:
        """A request cancelled between rounds keeps what it computed, as the scheduler's
        `_keep_states` does: its decoded tail, and its state where a chunked prefill stopped."""
        everyone = self.waiting + list(self.running.values())
        if everyone:
            req = self.rng.choice(everyone)
            if req.working is not None and req.reused < req.computed < len(req.prompt):
                self.cache.adopt_checkpoint(req.ns, req.prompt, req.computed, req.working)
                req.working = None
            self._finish(req)

    def squeeze(self) -> None:
        """What a neighbour asks between rounds: a reservation or slots beyond what is free."""
        cache = self.cache
        if self.rng.random() < 0.5:
            blocks, slots = self.rng.randint(0, self.cfg.blocks + 1), self.rng.randint(0, 2)
            slots = slots if self.cfg.recurrent else 0
            self._reserve(blocks + cache.promised, slots)
        elif self.cfg.recurrent:
            self._free_slots_upto(self.rng.randint(0, 3))

    # ------------------------------------------------------------------ the reference model
    def _kept(self) -> tuple[int, int]:
        """KV blocks and state slots no eviction can free: requests' own, and those on locked
        nodes (a PENDING checkpoint's node is locked)."""
        cache = self.cache
        locked = [n for n in cache.tree.nodes() if n.lock_ref > 0]
        blocks = len(cache.private_blocks) + sum(len(n.blocks or ()) for n in locked)
        slots = len(cache.working_slots) + sum(n.checkpoint is not None for n in locked)
        return blocks, slots

    def _reachable(self, blocks: int, slots: int) -> tuple[bool, int]:
        """Whether ``blocks`` and ``slots`` more could be had once every unlocked entry went, and
        how many state slots could be taken then beside the promised KV."""
        cache, ledger = self.cache, self.cache.ledger
        kept_blocks, kept_slots = self._kept()
        free_blocks, free_slots = cache.kv.capacity - kept_blocks, cache.slots.capacity - kept_slots
        held = kept_blocks * ledger.block_bytes + kept_slots * ledger.slot_bytes
        fits = free_blocks >= blocks and free_slots >= slots
        if ledger.budget is None:
            return fits, free_slots
        fits = fits and held + blocks * ledger.block_bytes + slots * ledger.slot_bytes <= ledger.budget
        spare = ledger.budget - held - ledger.promised * ledger.block_bytes
        return fits, max(min(free_slots, spare // ledger.slot_bytes), 0)

    def _reserve(self, blocks: int, slots: int) -> bool:
        """`reserve`, checked: it succeeds exactly when emptying the cache would make room, and a
        refusal evicts nothing."""
        cache = self.cache
        feasible, _ = self._reachable(blocks, slots)
        before = (cache.memory(), cache.evictions())
        fits = (
            cache.kv.free >= blocks
            and cache.slots.free >= slots
            and not cache.ledger.shortfall(blocks, slots)
        )
        got = cache.reserve(blocks, slots)
        if fits:
            assert cache.evictions() == before[1], "evicted for room that was free"
        assert got == feasible, f"reserve({blocks}, {slots}) = {got}, room for it: {feasible}"
        if got:
            assert cache.kv.free >= blocks and cache.slots.free >= slots
            assert cache.ledger.shortfall(blocks, slots) == 0
        else:
            assert (cache.memory(), cache.evictions()) == before, "a refused reservation evicted"
        return got

    def _free_slots_upto(self, n: int) -> int:
        """`free_slots_upto`, checked: as many as asked or as eviction can make free."""
        cache = self.cache
        _, reachable = self._reachable(0, 0)
        free, evicted = cache.free_slots, cache.evictions()
        got = cache.free_slots_upto(n)
        assert got == min(n, reachable), f"free_slots_upto({n}) = {got}, reachable {reachable}"
        assert cache.free_slots >= got
        if free >= got:
            assert cache.evictions() == evicted, "evicted for slots that were free"
        return got

    def _check_match(self, req: Req, kv_tokens: int, ckpt_tokens: int) -> None:
        limit = (len(req.prompt) - 1) // self.bs * self.bs
        kv, ckpt, _ = self._reference_match(req.ns, req.prompt, limit)
        assert (kv_tokens, ckpt_tokens) == (kv, ckpt), f"match {kv_tokens, ckpt_tokens} != {kv, ckpt}"

    def _prefixes(self, ns: str) -> list[tuple[Node, tuple[int, ...]]]:
        """Every node of ``ns`` with the tokens from its root to its end (a separate walk)."""
        root = self.cache.tree.find_root(ns)
        out: list[tuple[Node, tuple[int, ...]]] = []
        stack = [(root, ())] if root is not None else []
        while stack:
            node, prefix = stack.pop()
            for child in node.children.values():
                out.append((child, prefix + child.key))
                stack.append((child, prefix + child.key))
        return out

    def _reference_match(self, ns: str, tokens: tuple[int, ...], limit: int) -> tuple[int, int, int]:
        """(KV tokens, deepest checkpoint, deepest READY checkpoint) of ``tokens[:limit]``: the
        longest run of whole blocks any published node holds, and the checkpoints on it."""
        bs, limit = self.bs, limit // self.bs * self.bs
        kv = ckpt = ready = 0
        for node, prefix in self._prefixes(ns):
            if not node.materialized:
                continue
            n = 0
            while n + bs <= min(len(prefix), limit) and prefix[n : n + bs] == tokens[n : n + bs]:
                n += bs
            kv = max(kv, n)
            if node.checkpoint is not None and n == node.end:
                ckpt = max(ckpt, n)
                if node.checkpoint.readiness is Readiness.READY:
                    ready = max(ready, n)
        return kv, ckpt, ready

    def _block_lcp(self, a: tuple[int, ...], b: tuple[int, ...]) -> int:
        bs, n = self.bs, 0
        while n + bs <= min(len(a), len(b)) and a[n : n + bs] == b[n : n + bs]:
            n += bs
        return n

    def probe_demand(self) -> None:
        """What registered prompts share, and where known sequences branch, against a reference
        computed from the registrations and the published prefixes alone."""
        everyone = [r for r in self.waiting + list(self.running.values()) if r.registration is not None]
        if not everyone:
            return
        req, cache, bs = self.rng.choice(everyone), self.cache, self.bs
        assert req.registration is not None
        whole = len(req.prompt) // bs * bs
        others = [r for r in everyone if r is not req and r.ns == req.ns]
        depth = max((self._block_lcp(req.prompt[:whole], r.prompt) for r in others), default=0)
        share = cache.sharing(req.registration)
        assert share.tokens == depth, f"sharing {share.tokens} != {depth}"
        if depth:
            through = [
                r for r in everyone if r.ns == req.ns and self._block_lcp(req.prompt, r.prompt) >= depth
            ]
            assert share.prompts == len(through)
            assert share.node is not None
            ends = {h.node_id for h in cache.registered_under(share.node, 10_000)}
            assert ends == {r.registration.node_id for r in through if r.registration is not None}
        else:
            assert share == share.NONE
        seqs = [r.prompt[: len(r.prompt) // bs * bs] for r in everyone if r.ns == req.ns]
        seqs += [prefix for node, prefix in self._prefixes(req.ns) if node.materialized]
        lo = self.rng.randint(0, whole)
        want = []
        for p in range(lo - lo % bs + bs if lo % bs else lo + bs, whole + 1, bs):
            nxt = {q[p : p + bs] for q in seqs if len(q) >= p + bs and q[:p] == req.prompt[:p]}
            if len(nxt) > 1:
                want.append(p)
        assert cache.branch_points(req.registration, lo, whole) == want

    def probe(self) -> None:
        """A lookup of any prompt, with no request behind it: the match and the router's digest
        agree with a reference walk; nothing changes."""
        ns, prompt = self._prompt()
        limit = self.rng.randint(0, len(prompt) + self.bs)  # past the prompt: its whole blocks
        m = self.cache.match(ns, prompt, limit, touch=False)
        kv, ckpt, ready = self._reference_match(ns, prompt, limit)
        assert (m.kv_tokens, m.checkpoint_tokens) == (kv, ckpt)
        assert m.blocked == (ckpt > ready)
        assert m.kv_tokens <= len(prompt) and m.kv_tokens % self.bs == 0
        digest = self.cache.ready_digest(kv_runs=not self.cfg.recurrent)
        chain = chain_hashes(ns, prompt, self.bs, limit // self.bs)
        if self.cfg.recurrent:
            assert digest.depth(chain) == ready, f"digest {digest.depth(chain)} != {ready}"
        else:  # every whole block of KV: exactly the KV a match finds
            assert digest.depth(chain) == kv, f"digest {digest.depth(chain)} != {kv}"
        if kv and self.rng.random() < 0.5:  # a node made to end there (a split): the same KV
            handle = self.cache.kv_handle(ns, prompt, kv)
            assert handle is not None
            table = self.cache.block_table(handle)
            assert len(table) * self.bs == kv
            for pos in range(kv):
                assert self.kv.get(table[pos // self.bs] * self.bs + pos % self.bs) == (ns, prompt[: pos + 1])
            if not self.cfg.recurrent:
                assert self.cache.ready_digest(kv_runs=True).depth(chain) == kv

    def check(self) -> None:
        cache = self.cache
        cache.check_integrity()
        usage = cache.usage()
        assert usage.free_blocks + usage.cached_blocks + usage.locked_blocks == usage.total_blocks
        promised = sum(self.owed(r.computed, r) for r in self.running.values())
        assert cache.promised == promised
        for req in self.running.values():  # a locked path keeps its KV, and it is the request's
            if req.lock is not None:
                node = cache.tree.lookup(req.lock)
                assert all(n.materialized for n in node.ancestors()), f"{req.rid}: locked KV evicted"
        for ns, root in cache.tree.named_roots():
            self._check_contents(ns, root, ())

    def _check_contents(self, ns: str, node: Node, prefix: tuple[int, ...]) -> None:
        """Published KV holds its tokens, READY checkpoints their state (KV published by a round
        still running is written when it runs)."""
        for child in node.children.values():
            seq = prefix + child.key
            if child.blocks is not None and child.published_by is None:
                for i, pos in enumerate(range(child.start, child.end)):
                    block = child.blocks[i // self.bs]
                    got = self.kv.get(block * self.bs + pos % self.bs)
                    assert got == (ns, seq[: pos + 1]), f"node {child.id}: KV at {pos} holds {got}"
            ck = child.checkpoint
            if ck is not None and ck.readiness is Readiness.READY:
                assert self.state.get(ck.slot) == (ns, seq), f"node {child.id}: READY without its state"
            self._check_contents(ns, child, seq)

    # ------------------------------------------------------------------ the loop
    def step(self) -> None:
        r = self.rng.random()
        if r < 0.35:
            self.arrive()
        elif r < 0.85:
            self.round()
        elif r < 0.91:
            self.squeeze()
        elif r < 0.92:
            self.probe()
        elif r < 0.93:
            self.probe_demand()
        elif r < 0.96:
            self.stop()
        else:
            self.abort()
        self.check()

    def drain(self) -> None:
        """Nothing left running or waiting: everything held is given back."""
        for req in self.waiting + list(self.running.values()):
            self._release(req)
        self.check()
        cache = self.cache
        assert cache.promised == 0 and cache.locked_nodes == 0
        assert not cache.private_blocks and not cache.working_slots
        assert cache.usage().locked_blocks == 0


CONFIGS = [
    Config(bs, blocks, slots, policy, recurrent, budget, same_round)
    for bs, blocks, slots, budget in [
        (1, 6, 2, None),
        (2, 5, 1, None),
        (4, 4, 2, None),
        (2, 12, 6, 6 * BLOCK_BYTES + 1 * SLOT_BYTES),
        (4, 10, 4, 5 * BLOCK_BYTES + 2 * SLOT_BYTES - 1),
    ]
    for policy in ("lru", "cost-per-byte")
    for recurrent, same_round in ((True, False), (True, True), (False, False))
] + [  # deeper trees: chains of checkpoints, so a checkpoint is added above another and, under a
    # budget, a checkpoint can rank below every KV leaf
    Config(2, 40, 12, "cost-per-byte", True, 20 * BLOCK_BYTES + 4 * SLOT_BYTES, True, contexts=8),
    Config(1, 30, 8, "cost-per-byte", True, None, False, contexts=6),
]


def _config_id(c: Config) -> str:
    return (
        f"bs{c.bs}-{c.blocks}b{c.slots}s-{c.policy}-"
        f"{'hyb' if c.recurrent else 'attn'}{'-follow' if c.same_round else ''}"
        f"{'-budget' if c.budget else ''}"
    )


@pytest.mark.parametrize("cfg", CONFIGS, ids=_config_id)
def test_cache_fuzz(cfg: Config) -> None:
    for seed in range(6):
        driver = Driver(cfg, seed)
        for _ in range(150):
            driver.step()
        driver.drain()


@pytest.mark.parametrize("cfg", CONFIGS[::4], ids=_config_id)
def test_extend_from_a_hint_does_what_the_walk_from_the_root_does(cfg: Config) -> None:
    """`extend` given the request's lock walks from it (`Publisher._known_path`); given a hint it
    cannot use, from the root: either way the cache ends each step as without a hint."""
    taken = 0
    for seed in range(4):
        plain, hinted = Driver(cfg, seed), Driver(cfg, seed, hints=True)
        spy = hinted.cache.publisher._known_path = _PathSpy(hinted.cache.publisher._known_path)
        for _ in range(150):
            plain.step()
            hinted.step()
            assert snapshot(hinted.cache) == snapshot(plain.cache)
        taken += spy.taken
    assert taken > 0  # the walk from the lock ran


@dataclass
class _PathSpy:
    """`Publisher._known_path`, counting the paths it found (the walk from the hint taken)."""

    known_path: Callable[..., list[Node] | None]
    taken: int = 0

    def __call__(self, *args: object) -> list[Node] | None:
        path = self.known_path(*args)
        self.taken += bool(path)
        return path


@st.composite
def edge_configs(draw: st.DrawFn) -> Config:
    """A configuration drawn at the budget's edges: pools down to one state slot (a working slot
    leaves none free), a budget of one block and one slot (the least an engine accepts), the bytes
    of some blocks and slots exactly or one byte short, or none."""
    blocks, slots = draw(st.integers(2, 12)), draw(st.integers(1, 4))
    some = draw(st.integers(1, blocks)) * BLOCK_BYTES + draw(st.integers(1, slots)) * SLOT_BYTES
    budget = draw(st.sampled_from([None, BLOCK_BYTES + SLOT_BYTES, some, some - 1]))
    return Config(
        bs=draw(st.integers(1, 4)),
        blocks=blocks,
        slots=slots,
        policy=draw(st.sampled_from(sorted(EVICTION_POLICIES))),
        recurrent=draw(st.booleans()),
        budget=budget,
        same_round=draw(st.booleans()),
        contexts=draw(st.integers(1, 5)),
    )


@settings(max_examples=40, deadline=None)
@given(cfg=edge_configs(), seed=st.integers(0, 2**16))
def test_cache_fuzz_at_drawn_budget_edges(cfg: Config, seed: int) -> None:
    """The fuzz above over drawn configurations, not its fixed handful: every step checked as
    there, and a drained cache holds nothing locked."""
    driver = Driver(cfg, seed)
    for _ in range(80):
        driver.step()
    driver.drain()
