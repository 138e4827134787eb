"""`lookup.SpelledPaths` (an extend's path, remembered for the request's next chunk while
`Tree.shape` holds) against the cache without it, adversarially.

A program of steps is drawn once and run on two caches, one remembering paths and one whose
`remember` keeps nothing (every hint walks up, as before the memory): requests decode chunk by
chunk from their lock, beside prompts that split their path (register, `kv_handle`), rounds
that fail (`withdraw`), finished requests whose id comes back, reservations that evict nodes of
kept paths, checkpoints dropped and adopted, namespaces emptied and made again. After every step
both caches are alike (`snapshot`), `check_integrity` holds (each kept path is the walk's), and
`Tree.shape`'s contract holds: while it is unchanged, every materialized node's path to its
namespace's root is the same nodes with the same keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from cache_utils import serve, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.cache import RadixCache, lookup
from radixflow.cache.node import Node
from radixflow.cache.pool import OutOfCapacity
from radixflow.cache.types import NodeHandle

STEPS = ("chunk", "chunk", "chunk", "chunk", "chunk", "start", "start", "finish", "fail", "serve")
STEPS += ("register", "register", "unregister", "kv_handle", "reserve", "reserve", "free_slots", "adopt")
Step = tuple[str, int, int, int]


@dataclass
class Live:
    """A request the program runs: its sequence, computed part, lock and what it holds."""

    ns: str
    seq: tuple[int, ...]
    computed: int = 0
    lock: NodeHandle | None = None
    table: list[int] = field(default_factory=list)
    own: list[int] = field(default_factory=list)
    working: int | None = None


@dataclass
class Program:
    bs: int
    blocks: int
    stems: list[tuple[int, ...]]
    steps: list[Step]


def _shape_paths(cache: RadixCache) -> dict[int, tuple[object, ...]]:
    """Each materialized node's path to its root (ids, keys, ends) and the namespace it is the
    root of: what a path remembered while `Tree.shape` holds relies on."""
    namespaces = {id(root): ns for ns, root in cache.tree.named_roots()}
    out: dict[int, tuple[object, ...]] = {}
    for node in cache.tree.nodes():
        up: Node | None = node
        path: list[tuple[int, tuple[int, ...], int]] = []
        while up is not None and up.parent is not None and up.blocks is not None:
            path.append((up.id, up.key, up.end))
            up = up.parent
        if node.parent is not None and up is not None and up.parent is None:
            out[node.id] = (namespaces.get(id(up)), up.id, tuple(path))
    return out


class Run:
    """One cache running a `Program`; ``remember`` False: `SpelledPaths.remember` keeps nothing."""

    def __init__(self, program: Program, remember: bool) -> None:
        self.p, self.bs = program, program.bs
        self.cache = RadixCache(program.bs, program.blocks, 6)
        if not remember:
            self.cache.publisher.paths.remember = lambda *args: None  # type: ignore[method-assign]
        self.live: dict[int, Live] = {}
        self.registered: list[NodeHandle] = []

    def prompt(self, a: int, b: int) -> tuple[str, tuple[int, ...]]:
        """A stem, cut (often on a block boundary) and given a tail: prefixes of one another."""
        stem = self.p.stems[a % len(self.p.stems)]
        cut = [len(stem), b % (len(stem) + 1), len(stem) // self.bs * self.bs][a % 3]
        return "ab"[b % 5 == 0], stem[:cut] + tuple(range(b % 3)) or (1,)

    def step(self, step: Step) -> None:
        name, a, b, c = step
        getattr(self, f"_{name}")(a, b, c)
        self.cache.check_integrity()  # every remembered path is the walk's

    # ------------------------------------------------------------------ requests
    def _start(self, a: int, b: int, c: int) -> None:
        """A request (id ``c % 3``, maybe one that finished) starts at its prompt's published KV."""
        rid = c % 3
        if rid in self.live:
            return
        ns, seq = self.prompt(a, b)
        kv = self.cache.match(ns, seq, len(seq) - 1).kv_tokens
        handle = self.cache.kv_handle(ns, seq, kv)  # a split where the match ends inside a node
        self.cache.lock(handle)
        self.live[rid] = Live(ns, seq, kv, handle, self.cache.block_table(handle))

    def _pick(self, c: int) -> tuple[int, Live | None]:
        """One of the live requests (by ``c``), if any."""
        rids = sorted(self.live)
        return (rids[c % len(rids)], self.live[rids[c % len(rids)]]) if rids else (-1, None)

    def _chunk(self, a: int, b: int, c: int) -> None:
        """A live request computes its next chunk of prompt, or decodes a token past it."""
        rid, req = self._pick(c)
        if req is None:
            return
        if req.computed == len(req.seq):  # one token a chunk: a decode step
            req.seq += (a % 3,)
        self._emit(rid, req, min(len(req.seq), req.computed + 1 + a % (3 * self.bs)), b)

    def _emit(self, rid: int, req: Live, end: int, b: int) -> None:
        bs, start = self.bs, req.computed
        top = end // bs * bs
        ckpts = [top] if b % 4 == 0 and top > start and top else []
        need = -(-end // bs) - len(req.table)
        if not self.cache.reserve(need, len(ckpts)):
            return
        blocks = self.cache.alloc_blocks(need)
        req.own += blocks
        req.table += blocks
        ext = self.cache.extend(
            req.ns, req.seq, start, end, req.table[start // bs :], ckpts, f"r{rid}", hint=req.lock
        )
        self.cache.relock(req.lock, ext.handle)
        req.lock, req.computed = ext.handle, end
        if b % 7 == 3:  # the round failed: its KV withdrawn, the request let go
            self.cache.unlock(req.lock)
            req.lock = None
            self.cache.withdraw([f"r{rid}"])
            self._release(rid)
        else:
            self.cache.commit(f"r{rid}")

    def _finish(self, a: int, b: int, c: int) -> None:
        """A live request ends (stopped, aborted): its id may come back with another prompt."""
        rid, req = self._pick(c)
        if req is not None:
            self._release(rid)

    def _fail(self, a: int, b: int, c: int) -> None:
        rid, req = self._pick(c)
        if req is not None and req.computed < len(req.seq):
            self._emit(rid, req, min(len(req.seq), req.computed + 1 + a % self.bs), 3)

    def _release(self, rid: int) -> None:
        req = self.live.pop(rid)
        self.cache.unlock(req.lock)
        self.cache.free_blocks(req.own)
        if req.working is not None:
            self.cache.free_working_slot(req.working)

    def _adopt(self, a: int, b: int, c: int) -> None:
        """A live request's state becomes the checkpoint at a published block boundary of its path."""
        _, req = self._pick(c)
        if req is None or req.computed < self.bs or req.working is not None:
            return
        with contextlib.suppress(OutOfCapacity):
            req.working = self.cache.alloc_working_slot()
            at = req.computed // self.bs * self.bs
            self.cache.adopt_checkpoint(req.ns, req.seq, at, req.working)
            req.working = None

    # ------------------------------------------------------------------ others beside them
    def _serve(self, a: int, b: int, c: int) -> None:
        ns, seq = self.prompt(a, b)
        serve(self.cache, ns, seq, [p for p in (c % 9 * self.bs,) if 0 < p <= len(seq)], f"s{c}")

    def _register(self, a: int, b: int, c: int) -> None:
        self.registered.append(self.cache.register(*self.prompt(a, b)))

    def _unregister(self, a: int, b: int, c: int) -> None:
        if self.registered:
            self.cache.unregister(self.registered.pop(a % len(self.registered)))

    def _kv_handle(self, a: int, b: int, c: int) -> None:
        ns, seq = self.prompt(a, b)
        at = min(c % 5 * self.bs, self.cache.match(ns, seq, len(seq), touch=False).kv_tokens)
        self.cache.kv_handle(ns, seq, at)  # a split inside a node, maybe of a kept path

    def _reserve(self, a: int, b: int, c: int) -> None:
        """Room asked for: one or two unlocked leaves evicted (a node a waiting prompt wants is
        kept bare), or all of them (a namespace left with nothing dropped), and checkpoints."""
        self.cache.reserve(self.p.blocks if a % 3 == 0 else self.cache.kv.free + a % 3, b % 3)

    def _free_slots(self, a: int, b: int, c: int) -> None:
        self.cache.free_slots_upto(a % 4)


@st.composite
def programs(draw: Callable) -> Program:
    bs = draw(st.sampled_from((1, 2, 4)))
    stems = draw(
        st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=5 * bs).map(tuple), min_size=1, max_size=3)
    )
    step = st.tuples(st.sampled_from(STEPS), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99))
    return Program(
        bs, draw(st.sampled_from((6, 10, 16))), stems, draw(st.lists(step, min_size=8, max_size=40))
    )


@settings(max_examples=150, deadline=None)
@given(programs())
def test_remembered_paths_change_nothing_and_shape_guards_every_path(program: Program) -> None:
    kept, walked = Run(program, remember=True), Run(program, remember=False)
    for step in program.steps:
        before, shape = _shape_paths(kept.cache), kept.cache.tree.shape
        kept.step(step)
        walked.step(step)
        assert snapshot(kept.cache) == snapshot(walked.cache), step
        if kept.cache.tree.shape == shape:  # nothing said a path changed: none did
            after = _shape_paths(kept.cache)
            assert {n: after.get(n) for n in before} == before, step


def _plain_and_kept(bs: int) -> tuple[RadixCache, RadixCache]:
    plain = RadixCache(bs, 16, 4)
    plain.publisher.paths.remember = lambda *args: None  # type: ignore[method-assign]
    return plain, RadixCache(bs, 16, 4)


def _answers_alike(cache: RadixCache, ns: str, tokens: tuple[int, ...], node_id: int) -> None:
    cache.check_integrity()
    want = lookup.spelled(cache.tree, ns, tokens, NodeHandle(node_id))
    assert cache.publisher.paths.take(ns, tokens, NodeHandle(node_id)) == want


@pytest.mark.parametrize("bs", [1, 2, 16])
def test_kv_dropped_under_a_waiting_prompt_forgets_the_path(bs: int) -> None:
    """A kept path's last node loses its KV but stays (a registered prompt wants it, bare): no
    node goes, yet the path is no longer one a chunk may resume on."""
    cache = RadixCache(bs, 16, 4)
    prompt = tuple(range(2 * bs))
    assert serve(cache, "n", prompt, [], "s")
    (_, _, handle, _), *_ = cache.publisher.paths.remembered()
    cache.register("n", prompt + tuple(range(bs)))
    assert cache.reserve(16, 0)  # evicts the served prompt's KV, its node kept for the waiter
    assert cache.tree.find_node(handle) is not None and not cache.tree.lookup(handle).materialized
    _answers_alike(cache, "n", prompt, handle.node_id)


@pytest.mark.parametrize("bs", [1, 2, 16])
def test_a_split_inside_a_kept_path_is_walked(bs: int) -> None:
    """A node of a kept path is cut (a lookup's handle inside it): the path gains a node."""
    cache = RadixCache(bs, 16, 4)
    prompt = tuple(range(3 * bs))
    assert serve(cache, "n", prompt, [], "s")
    (_, _, handle, path), *_ = cache.publisher.paths.remembered()
    cache.kv_handle("n", prompt, bs)
    _answers_alike(cache, "n", prompt, handle.node_id)
    assert len(lookup.spelled(cache.tree, "n", prompt, handle) or []) == len(path) + 1


def test_the_token_cap_forgets_the_oldest_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `SpelledPaths.TOKENS`, the oldest answers go (one longer than the cap is not kept):
    the count held is what is kept, and every answer is still the walk's."""
    monkeypatch.setattr(lookup.SpelledPaths, "TOKENS", 8)
    cache = RadixCache(2, 32, 4)
    paths = cache.publisher.paths
    kept_after = ([4], [4, 4], [4, 2], [2, 6], [], [2])  # the 10 tokens' path is not kept at all
    for i, (n, want) in enumerate(zip((4, 4, 2, 6, 10, 2), kept_after, strict=True)):
        assert serve(cache, "n", tuple(range(10 * i, 10 * i + n)), [], f"s{i}")
        kept = [len(tokens) for _, tokens, _, _ in paths.remembered()]
        assert kept == want and paths._held == sum(kept)


def test_a_decode_step_is_answered_from_memory() -> None:
    """The memory is used: a decoding request's next step, hinted by its lock, gets the path its
    last step ended on (the very list kept), until a split elsewhere changes the shape."""
    cache = RadixCache(2, 16, 4)
    seq = (5, 6, 7, 8, 9)
    blocks = cache.alloc_blocks(3)
    ext = cache.extend("n", seq, 0, 5, blocks, [], "r")
    cache.lock(ext.handle)
    cache.commit("r")
    (_, _, handle, path), *_ = cache.publisher.paths.remembered()
    assert handle == ext.handle and cache.publisher.paths.take("n", seq + (1,), handle) is path
    cache.publisher.paths.remember("n", seq, path)
    assert serve(cache, "n", (5, 6, 0, 0), [], "s")  # splits the request's node: walked again
    assert cache.publisher.paths.take("n", seq + (1,), handle) is not path
    cache.check_integrity()


def test_a_step_inside_a_block_keeps_the_spelling_it_was_answered_with() -> None:
    """A decode step whose path ends where its last one did keeps the tokens kept for it (equal,
    `take` compared them) instead of a fresh copy of its sequence: the same tuple, and the walk's
    answer still."""
    cache = RadixCache(2, 16, 4)
    blocks = cache.alloc_blocks(3)
    ext = cache.extend("n", (5, 6, 7, 8), 0, 4, blocks, [], "r")
    cache.lock(ext.handle)
    cache.commit("r")
    (_, kept, _, _), *_ = cache.publisher.paths.remembered()
    tokens = (5, 6, 7, 8, 9)
    step = cache.extend("n", tokens, 4, 5, blocks[2:], [], "r", hint=ext.handle)
    assert step.handle == ext.handle
    (_, now, _, path), *_ = cache.publisher.paths.remembered()
    assert now is kept and path == lookup.spelled(cache.tree, "n", tokens, ext.handle)
    cache.commit("r")
    cache.check_integrity()
