"""A request's chunks as the cache sees them, and the ledger of KV blocks promised to running work.

Admission reserves a request's whole remaining prompt beside what running requests still need,
so a running request can always finish (no deadlock, no preemption). This writer keeps that
count (`promised`, the blocks running requests will still allocate), allocates and publishes each
chunk's blocks and checkpoints in the tree as the chunk is scheduled, and gives a request's
resources back when it leaves.
"""

from __future__ import annotations

from collections.abc import Iterable

from radixflow.cache.radix import RadixCache
from radixflow.scheduler.checkpoints import CheckpointPlanner
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk, SnapshotSpec
from radixflow.scheduler.request import Request
from radixflow.scheduler.reuse import ReusePoint


class ChunkWriter:
    def __init__(self, cache: RadixCache, config: SchedulerConfig, checkpoints: CheckpointPlanner) -> None:
        self.cache = cache
        self.config = config
        self.checkpoints = checkpoints
        # checkpoint slot -> fewest rounds any schedule needs before that state can exist
        self._slot_depth: dict[int, int] = {}
        # request id -> its prompt, output and sequence as its last chunk carried them (`sequence`)
        self._sequences: dict[str, tuple[tuple[int, ...], list[int], tuple[int, ...]]] = {}

    @property
    def promised(self) -> int:
        """KV blocks running requests will still allocate (= sum of `owed` over them): kept in the
        cache, whose byte budget holds them back from checkpoints (`RadixCache.promise`)."""
        return self.cache.promised

    @promised.setter
    def promised(self, blocks: int) -> None:
        self.cache.promise(blocks)

    def owed(self, computed: int, req: Request) -> int:
        """KV blocks ``req`` still has to allocate once ``computed`` positions exist. Pure.

        Its block table holds every block up to position ``computed - 1``: a prompt that ends
        inside a block holds that block, so the count starts at the next boundary."""
        bs = self.config.block_size
        return self.config.blocks_needed(-(-computed // bs) * bs, req.max_length)

    def reserve(self, req: Request, point: ReusePoint, working: int) -> bool:
        """Reserve ``req``'s whole remaining KV from ``point`` beside what running requests still
        need, and ``working`` state slots (may evict; mutates the cache's reservation)."""
        return self.cache.reserve(self.owed(point.tokens, req) + self.promised, working)

    def start(self, req: Request, point: ReusePoint) -> None:
        """``req`` runs from ``point``: its lock, reuse, block table and depth; its blocks join the
        ledger (mutates ``req`` and the ledger; the caller has locked ``point``)."""
        req.lock, req.reused, req.computed = point.handle, point.tokens, point.tokens
        self.cache.resumed(point.handle)
        req.block_table = self.cache.block_table(point.handle)
        depth = self._slot_depth.get(point.restore_slot, 0) if point.restore_slot is not None else 0
        # a state saved earlier in the same round serves in that round: one round fewer
        req.depth_base = max(depth - 1, 0) if point.same_round else depth
        self.promised += self.owed(req.computed, req)

    def emit(self, req: Request, end: int, ckpts: list[int], restore: int | None) -> ScheduledChunk:
        """The chunk computing ``[req.computed, end)``: allocates its blocks and publishes its whole
        blocks and checkpoints in the tree (mutates ``req``, the cache and the ledger)."""
        start, seq, bs = req.computed, self.sequence(req), self.config.block_size
        blocks = self.cache.alloc_blocks(-(-end // bs) - len(req.block_table))  # a decode step may need none
        req.own_blocks.extend(blocks)
        req.block_table.extend(blocks)
        table = req.block_table[start // bs :]
        ext = self.cache.extend(req.namespace, seq, start, end, table, ckpts, req.id, hint=req.lock)
        self.cache.relock(req.lock, ext.handle)
        req.lock = ext.handle
        for pos, slot in ext.checkpoints.items():
            self._slot_depth[slot] = self.depth_at(req, pos)
        snaps = [SnapshotSpec(pos, slot) for pos, slot in sorted(ext.checkpoints.items())]
        snaps.extend(self.checkpoints.own_snapshots(req, end))
        self.promised -= self.owed(start, req) - self.owed(end, req)
        req.computed = end
        return ScheduledChunk(
            request_id=req.id,
            namespace=req.namespace,
            tokens=seq,
            start=start,
            end=end,
            block_table=tuple(req.block_table),
            restore_slot=restore,
            snapshots=tuple(snaps),
            sample=end == len(seq) and req.sampling.max_tokens > 0,
            sampling=req.sampling,
            prompt_logprobs_from=_prompt_logprobs_from(req, start),
            prompt_len=len(req.prompt),
        )

    def sequence(self, req: Request) -> tuple[int, ...]:
        """``req.sequence``, its last chunk's with the tokens appended since: a decode step copies
        its sequence once, not its whole output and then the sequence (`Request.sequence`). While
        it runs a request's output only grows, by the scheduler's appends; a new prompt or output
        list, one shorter than before or whose last token moved, is read whole."""
        prompt, output = req.prompt, req.output
        known = self._sequences.get(req.id)
        seq = req.sequence if known is None else _appended(known, prompt, output)
        self._sequences[req.id] = (prompt, output, seq)
        return seq

    def depth_at(self, req: Request, position: int) -> int:
        """Fewest rounds any schedule needs before ``req``'s state at ``position`` can exist: its
        prompt's rounds from its reuse point, or past the prompt (a decoded tail) its first token's
        round plus a decode step per position. Pure."""
        if position > len(req.prompt):
            return req.depth + position - len(req.prompt)
        return req.depth_base + self.config.rounds_for(position - req.reused)

    def kept(self, req: Request, position: int, slot: int) -> None:
        """``req``'s own state at ``position`` in ``slot`` became a READY checkpoint (`Scheduler.
        finish`, `abort`): a request resuming it counts the rounds that state took, not a slot's
        depth from an earlier checkpoint or none (mutates the depth book)."""
        self._slot_depth[slot] = self.depth_at(req, position)

    def release(self, req: Request, running: bool) -> None:
        """Give back everything ``req`` holds: path lock, private blocks, working slots, demand;
        ``running``: it was running, so its blocks leave the ledger (mutates ``req``, the cache
        and the ledger)."""
        self._sequences.pop(req.id, None)  # first: a release cut short (a Ctrl-C) leaves none
        if running:
            self.promised -= self.owed(req.computed, req)
        self.cache.unlock(req.lock)
        self.cache.free_blocks(req.own_blocks)
        for slot in (req.working_slot, req.tail_slot):
            if slot is not None:
                self.cache.free_working_slot(slot)
        if req.registration is not None:
            self.cache.unregister(req.registration)
        req.lock, req.working_slot, req.tail_slot, req.registration = None, None, None, None
        req.own_blocks, req.block_table = [], []

    def check(self, running: Iterable[Request]) -> None:
        """The ledger is exact: what the running requests still owe, no more, no less; and a
        sequence is kept only for a running request (`release` drops it)."""
        running = list(running)
        owed = sum(self.owed(r.computed, r) for r in running)
        assert self.promised == owed, f"promised KV {self.promised} != {owed}"
        stray = sorted(set(self._sequences) - {r.id for r in running})
        assert not stray, f"sequences kept for requests not running: {', '.join(stray)}"


def _appended(
    known: tuple[tuple[int, ...], list[int], tuple[int, ...]], prompt: tuple[int, ...], output: list[int]
) -> tuple[int, ...]:
    """The sequence of ``prompt`` and ``output``, from ``known`` (a prompt, an output list and
    their sequence then) when only tokens were appended to that list since. Pure."""
    was_prompt, was_output, seq = known
    done = len(seq) - len(prompt)  # output tokens in ``seq``
    if was_prompt is not prompt or was_output is not output or not 0 <= done <= len(output):
        return prompt + tuple(output)
    if done and output[done - 1] is not seq[-1]:
        return prompt + tuple(output)
    return seq + tuple(output[done:]) if done < len(output) else seq


def _prompt_logprobs_from(req: Request, start: int) -> int | None:
    if req.sampling.prompt_logprobs is None or start >= len(req.prompt):
        return None
    return 1 if start == req.reused else start  # the first chunk also reports reused positions
