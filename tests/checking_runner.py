"""A runner that computes nothing but checks everything the scheduler asks of it.

It records what each KV position and state slot holds — (namespace, the exact token prefix it was
computed from) — and asserts that every chunk reads KV of ``prompt[:start]`` of its own namespace
and restores recurrent state of exactly ``prompt[:start]`` from a READY checkpoint or from its own
working slot, or (with ``same_round_state``, as the torch runner's waves allow) from a slot an
earlier chunk of the same round saves. Generated tokens are the sim runner's hash of namespace
and prompt.
"""

from __future__ import annotations

from radixflow.cache import RadixCache, Readiness
from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.problems import Problem
from radixflow.runners.sim import sim_token
from radixflow.scheduler import Request
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.samples import Sample

VOCAB = 1000


class InjectedFailure(RuntimeError):
    pass


class CheckingRunner:
    name = "checking"

    def __init__(self, has_recurrent: bool, block_size: int, same_round_state: bool = False) -> None:
        self.model = ModelInfo("checking", has_recurrent, VOCAB, 1 << 16, same_round_state=same_round_state)
        self.block_size = block_size
        self.cache: RadixCache | None = None  # attach the engine's cache to check readiness
        self.fail_rounds: set[int] = set()  # worker calls (0-based) that raise
        self.calls = 0
        self.kv: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.state: dict[int, tuple[str, tuple[int, ...]]] = {}

    def validate(self, request: Request) -> Problem | None:
        return validate_prompt(request, self.model)

    def _slot(self, chunk: ScheduledChunk, pos: int) -> int:
        return chunk.block_table[pos // self.block_size] * self.block_size + pos % self.block_size

    def run(self, batch: SchedulerOutput) -> RoundResult:
        self.calls += 1
        if self.calls - 1 in self.fail_rounds:
            # fail half-way: some KV and state already overwritten, as a crashing forward would
            for chunk in batch.chunks[: (len(batch.chunks) + 1) // 2]:
                for pos in range(chunk.start, chunk.end):
                    self.kv[self._slot(chunk, pos)] = ("garbage", ())
                for slot in (s.slot for s in chunk.snapshots):
                    self.state[slot] = ("garbage", ())
            raise InjectedFailure(f"injected failure in worker call {self.calls - 1}")
        for c in batch.chunks:  # every attention layer writes all new K/V before any read
            for pos in range(c.start, c.end):
                self.kv[self._slot(c, pos)] = (c.namespace, c.tokens[: pos + 1])
        saved: dict[int, tuple[str, tuple[int, ...]]] = {}
        for c in batch.chunks:
            assert len(c.block_table) * self.block_size >= c.end, f"{c.request_id}: block table too short"
            for pos in range(c.start):
                got = self.kv.get(self._slot(c, pos))
                assert got == (c.namespace, c.tokens[: pos + 1]), f"{c.request_id}: wrong KV at {pos}"
            if self.model.has_recurrent:
                self._check_restore(c, saved)
            for snap in c.snapshots:
                assert c.start < snap.position <= c.end, f"{c.request_id}: snapshot outside its chunk"
                saved.setdefault(snap.slot, (c.namespace, c.tokens[: snap.position]))
        # without same-round state, snapshots land after the round: nobody may read them in it
        self.state.update(saved)
        samples = {
            c.request_id: Sample(sim_token(c.namespace, c.tokens, VOCAB), 0.0)
            for c in batch.chunks
            if c.sample
        }
        return RoundResult(samples=samples, duration_s=1e-3 * (1 + batch.tokens), worker_call_s=1e-3)

    def _check_restore(self, c: ScheduledChunk, saved: dict[int, tuple[str, tuple[int, ...]]]) -> None:
        """``saved``: what earlier chunks of this round saved, slot by slot (the first saver's)."""
        if c.start == 0:
            assert c.restore_slot is None, f"{c.request_id}: restores state at position 0"
            return
        assert c.restore_slot is not None, f"{c.request_id}: starts at {c.start} from zero state"
        if self.model.same_round_state and c.restore_slot in saved:  # a follower, in a later wave
            got = saved[c.restore_slot]
            assert got == (c.namespace, c.tokens[: c.start]), f"{c.request_id}: follows the wrong state"
            return
        got = self.state.get(c.restore_slot)
        assert got == (c.namespace, c.tokens[: c.start]), f"{c.request_id}: restores the wrong state"
        if self.cache is not None:
            assert self._restorable(c.restore_slot), f"{c.request_id}: slot {c.restore_slot} not READY"

    def _restorable(self, slot: int) -> bool:
        cache = self.cache
        assert cache is not None
        if slot in cache.working_slots:
            return True
        owners = [n for n in cache.tree.nodes() if n.checkpoint is not None and n.checkpoint.slot == slot]
        return len(owners) == 1 and owners[0].checkpoint.readiness is Readiness.READY

    def reference_tokens(self, requests: list[Request]) -> dict[str, int]:
        return {r.id: sim_token(r.namespace, r.prompt, VOCAB) for r in requests}
