"""Seeded random workloads on the sim runner, every policy × placement × eviction: the scheduler's
promises checked round by round through the engine's observer (`EngineEvents`).

Each round: the token budget and max requests hold; every chunk reads KV and restores state of
exactly its own prefix, computed in an earlier round or (a follower) saved earlier in the same
round by a chunk that is not itself a follower; a request's chunks are contiguous from its reuse
point and cover its prompt once, then decode one token a round; a round that says it scanned the
whole queue left no waiting request unvisited; under `adaptive`, a ready request past its FCFS
bound (docs/policies.md, in rounds or, with the runner's predictor, in seconds) is never left
where the round's budgets had room for it. At the end every request has finished, with the
tokens an uncached run computes (the sim's hash of namespace and sequence).
Workloads land on edges: shared contexts with several candidates, prompts that are prefixes of
others, next turns of a conversation (its prompt and output and more), grouped / shuffled /
Poisson arrivals, budgets of a block or a block and a bit, one request per round, chunk ends on
block and checkpoint boundaries, KV and state slots for little more than one request.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest
from engine_utils import new_engine

from radixflow.cache import EVICTION_POLICIES
from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_token
from radixflow.scheduler import PLACEMENTS, SCHEDULING_POLICIES, Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.adaptive.fcfs_bound import FCFS_SHARE
from radixflow.scheduler.adaptive.round_time_curve import RoundTimes
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, StopReason, waves
from radixflow.scheduler.sampling import SamplingParams

Content = tuple[str, tuple[int, ...]]  # (namespace, the token prefix a KV slot or state holds)


@dataclass
class Promises:
    """An observer that checks each round's chunks against what earlier rounds computed."""

    config: SchedulerConfig
    kv: dict[int, Content] = field(default_factory=dict)  # physical KV position -> content
    state: dict[int, Content] = field(default_factory=dict)  # state slot -> content
    next_start: dict[str, int] = field(default_factory=dict)  # request -> where its next chunk starts
    prompts: dict[str, int] = field(default_factory=dict)  # request -> prompt length
    finished: set[str] = field(default_factory=set)
    rounds: int = 0
    notes: list[tuple[str, str]] = field(default_factory=list)  # this round's policy decisions
    fcfs: bool = False  # check `adaptive`'s FCFS bound
    # a full-budget round's predicted seconds: the bound is kept in seconds (None: in rounds)
    full_s: float | None = None
    now: float = 0.0  # when the last round ended: the policy's clock
    waiting: dict[str, float] = field(default_factory=dict)  # not yet started -> its FCFS due round
    clock: float = 0.0  # FCFS's clock over the prompts' whole work: never earlier than the policy's

    # SchedulerEvents / EngineEvents
    def parked(self, consumer: str, producer: str) -> None:
        pass

    def woken(self, consumer: str, producer: str) -> None:
        pass

    def decision(self, kind: str, request_id: str, **details: object) -> None:
        self.notes.append((kind, request_id))

    def arrived(self, request: Request) -> None:
        """Its FCFS due round (`FcfsBound`), from the prompt's whole work: the policy counts the
        work left after reuse, so its clock, bound and due round are never later than these."""
        self.prompts[request.id] = len(request.prompt)
        self.clock = max(self.clock, self.rounds) + len(request.prompt) / self.config.token_budget
        bound = (self.clock - self.rounds) * FCFS_SHARE
        in_s = None if self.full_s is None else request.arrival_s + bound * self.full_s
        self.waiting[request.id] = self.rounds + bound if in_s is None else in_s

    def ended(self, request: Request) -> None:
        raise AssertionError(f"{request.id} ended between rounds: {request.status} {request.error}")

    def flush(self) -> None:
        pass

    def round(self, record: RoundRecord, out: SchedulerOutput, finished: Sequence[str]) -> None:
        assert record.error is None, record.error
        self.rounds += 1
        cfg = self.config
        assert out.chunks, "an empty round ran"
        assert out.tokens <= cfg.token_budget, f"round {out.round_index}: {out.tokens} tokens"
        assert len(out.chunks) <= cfg.max_requests, f"round {out.round_index}: {len(out.chunks)} chunks"
        unused = cfg.token_budget - out.tokens
        assert 0 <= out.bubble_tokens <= unused, f"round {out.round_index}: bubble {out.bubble_tokens}"
        # a scan stopped by memory met a request that could not run: no bubble (a lower bound)
        assert out.stop_reason is not StopReason.MEMORY or not out.bubble_tokens, f"round {out.round_index}"
        ids = [c.request_id for c in out.chunks]
        assert len(set(ids)) == len(ids), f"round {out.round_index}: a request twice: {ids}"
        assert max(waves(out.chunks)) <= 1, f"round {out.round_index}: a follower follows a follower"
        followers = {c.request_id for c, w in zip(out.chunks, waves(out.chunks), strict=True) if w}
        noted = {rid for kind, rid in self.notes if kind == "follow"}
        assert followers == noted, f"round {out.round_index}: followers {followers}, noted {noted}"
        started = {c.request_id for c in out.chunks if c.request_id not in self.next_start}
        for kind, rid in self.notes:  # a decision is noted once the request got its chunk
            assert (rid in started) == (kind != "defer"), f"round {out.round_index}: {kind} {rid}"
        self.notes.clear()
        saved: dict[int, Content] = {}
        for chunk in out.chunks:  # every attention layer writes the round's KV before any read
            for pos in range(chunk.start, chunk.end):
                self.kv[self._slot(chunk, pos)] = (chunk.namespace, chunk.tokens[: pos + 1])
        for chunk in out.chunks:
            self._check_chunk(chunk, saved)
            for snap in chunk.snapshots:
                assert chunk.start < snap.position <= chunk.end, f"{chunk.request_id}: snapshot outside"
                aligned = snap.position % cfg.block_size == 0 or snap.position == chunk.end
                assert aligned, f"{chunk.request_id}: a checkpoint off a block at {snap.position}"
                saved.setdefault(snap.slot, (chunk.namespace, chunk.tokens[: snap.position]))
        self.state.update(saved)
        if out.stop_reason is StopReason.QUEUE_EMPTY:  # "scanned every waiting request"
            left = set(self.waiting) - set(ids) - set(out.blocked)
            assert not left, f"round {out.round_index}: queue_empty, but {sorted(left)} never scanned"
        if self.fcfs:
            self._check_fcfs(out)
        for rid in ids:
            self.waiting.pop(rid, None)
        self.now = record.start_s + record.duration_s
        for rid in finished:
            assert rid not in self.finished, f"{rid} finished twice"
            self.finished.add(rid)

    # the checks
    def _check_fcfs(self, out: SchedulerOutput) -> None:
        """A ready request past its FCFS round is always taken (policies.md, `adaptive`): where the
        scan reached the queue's end or the policy's cut ended it, none is left waiting."""
        if out.stop_reason not in (StopReason.QUEUE_EMPTY, StopReason.POLICY):
            return  # the budgets, the cache or a blocked consumer ended the scan
        ran = {c.request_id for c in out.chunks}
        if self.full_s is None:  # the policy counts its rounds from 1 in the first round's scan
            late = [r for r, due in self.waiting.items() if out.round_index + 1 >= due]
        else:
            late = [r for r, due in self.waiting.items() if due <= self.now]
        left = [r for r in late if r not in ran and r not in out.blocked and self._fits(r, out)]
        assert not left, f"round {out.round_index} ({out.stop_reason}) left {left} past their FCFS round"

    def _fits(self, request_id: str, out: SchedulerOutput) -> bool:
        """Whether a first chunk of the request fits what the round left of its budgets, wherever
        its reuse lets it start (a block of budget always does)."""
        cfg = self.config
        tokens = cfg.token_budget - out.tokens
        room = tokens >= cfg.block_size or tokens >= self.prompts[request_id]
        return room and len(out.chunks) < cfg.max_requests

    def _slot(self, chunk: ScheduledChunk, pos: int) -> int:
        bs = self.config.block_size
        return chunk.block_table[pos // bs] * bs + pos % bs

    def _check_chunk(self, c: ScheduledChunk, saved: dict[int, Content]) -> None:
        rid = c.request_id
        assert rid not in self.finished, f"{rid} runs after it finished"
        assert 0 <= c.start < c.end <= len(c.tokens), f"{rid}: chunk [{c.start}, {c.end})"
        prompt = self.prompts[rid]
        expected = self.next_start.get(rid)
        if expected is None:  # its first chunk: from a reuse point inside the prompt
            assert c.start < prompt, f"{rid}: first chunk starts at {c.start} of {prompt}"
        else:
            assert c.start == expected, f"{rid}: chunk starts at {c.start}, its last ended at {expected}"
        if c.start >= prompt:
            assert c.length == 1, f"{rid}: a decode chunk of {c.length} tokens"
        else:
            assert c.end <= prompt, f"{rid}: a prefill chunk [{c.start}, {c.end}) past the prompt {prompt}"
            cut = c.end % self.config.block_size
            assert c.end == prompt or cut == 0, f"{rid}: a cut chunk ends off a block at {c.end}"
        wants = c.end == len(c.tokens) and c.sampling.max_tokens > 0  # max_tokens 0: a scoring request
        assert c.sample == wants, f"{rid}: sample {c.sample} at {c.end} of {len(c.tokens)}"
        self.next_start[rid] = c.end
        assert len(c.block_table) * self.config.block_size >= c.end, f"{rid}: block table too short"
        for pos in range(c.start):
            got = self.kv.get(self._slot(c, pos))
            assert got == (c.namespace, c.tokens[: pos + 1]), f"{rid}: reads KV of {got} at {pos}"
        if not self.config.has_recurrent:
            return
        if c.start == 0:
            assert c.restore_slot is None, f"{rid}: restores state at 0"
            return
        assert c.restore_slot is not None, f"{rid}: starts at {c.start} from zero state"
        got = saved.get(c.restore_slot, self.state.get(c.restore_slot))
        assert got == (c.namespace, c.tokens[: c.start]), f"{rid}: restores {got} at {c.start}"


BLOCKS = [1, 2, 4, 8, 16]


def tokens(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, 500) for _ in range(n))


def workload(rng: random.Random, bs: int) -> list[Request]:
    """Shared contexts with candidates (a candidate may be the context alone, a prompt that is a
    prefix of its siblings'), lone prompts, arrivals grouped, shuffled, in a batch or Poisson."""
    prompts: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(rng.randint(1, 4)):
        ns = rng.choice(["a", "a", "b"])
        context = tokens(rng, bs * rng.randint(1, 8) + rng.choice([0, 0, 1, bs - 1]))
        for _ in range(rng.randint(1, 6)):
            tail = tokens(rng, rng.choice([0, 1, bs, rng.randint(1, 3 * bs)]))
            cut = rng.choice([len(context), len(context), bs * rng.randint(0, len(context) // bs)])
            prompts.append((ns, context[:cut] + tail or (7,)))
    for _ in range(rng.randint(0, 2)):
        prompts.append(("a", tokens(rng, rng.randint(1, 4 * bs))))
    order = rng.choice(["grouped", "shuffled"])
    if order == "shuffled":
        rng.shuffle(prompts)
    arrival = rng.choice(["batch", "poisson", "spread"])
    reqs, t = [], 0.0
    for i, (ns, prompt) in enumerate(prompts):
        if arrival == "poisson":
            t += rng.expovariate(rng.choice([1e2, 1e3, 1e4]))
        elif arrival == "spread":
            t = rng.choice([0.0, 0.0, 1e-4, 1e-3, 1e-2])
        sampling = SamplingParams(max_tokens=rng.choice([0, 1, 1, 1, 2, 3 * bs + 1]))
        reqs.append(Request(f"r{i}", prompt, ns, arrival_s=t, sampling=sampling))
    return reqs


def follow_ups(rng: random.Random, reqs: list[Request], vocab: int, eos: tuple[int, ...]) -> list[Request]:
    """Next turns of some conversations: an earlier prompt, the tokens it generates, and more,
    arriving a little later (they reuse the checkpoint a decode leaves at a block boundary)."""
    more = []
    for r in rng.sample(reqs, rng.randint(0, min(2, len(reqs)))):
        prompt = r.prompt + tuple(uncached(r, vocab, eos)) + tokens(rng, rng.randint(1, 5))
        arrival = r.arrival_s + rng.choice([0.0, 1e-3, 1e-2])
        more.append(Request(f"{r.id}.next", prompt, r.namespace, arrival_s=arrival))
    return reqs + more


def config(rng: random.Random, bs: int, reqs: list[Request]) -> SchedulerConfig:
    longest = max(-(-r.max_length // bs) for r in reqs)
    return SchedulerConfig(
        token_budget=bs * rng.choice([1, 1, 2, 3, 4, 8]) + rng.choice([0, 0, 1, bs - 1]),
        max_requests=rng.choice([1, 1, 2, 3, 8]),
        block_size=bs,
        num_blocks=longest + rng.choice([0, 1, 4, 64]),
        num_state_slots=rng.choice([1, 2, 3, 8]),
    )


def uncached(req: Request, vocab: int, eos: tuple[int, ...]) -> list[int]:
    """The tokens a run without any cache generates: the hash of each sequence in turn."""
    seq, out = req.prompt, []
    while len(out) < req.sampling.max_tokens:
        out.append(sim_token(req.namespace, seq, vocab))
        if out[-1] in eos:
            break
        seq += (out[-1],)
    return out


class Unpredicting(SimRunner):
    """The sim runner without its round predictor: `adaptive` keeps its FCFS bound in rounds."""

    round_predictor = None


def check_run(seed: int, model: str, policy: str, placement: str, eviction: str) -> Engine:
    rng = random.Random(seed)
    bs = rng.choice(BLOCKS)
    predicting = rng.random() < 0.5
    runner = (SimRunner if predicting else Unpredicting)(SIM_MODELS[model], HARDWARE["h100"])
    reqs = follow_ups(rng, workload(rng, bs), runner.model.vocab_size, runner.model.eos_token_ids)
    cfg = config(rng, bs, reqs)
    if rng.random() < 0.25:  # one byte budget for KV and checkpoints, caps above it
        block, slot = runner.model.kv_bytes_per_token * bs, runner.model.checkpoint_bytes
        memory = cfg.num_blocks * block + cfg.num_state_slots * slot + rng.randrange(block)
        cfg = replace(
            cfg, num_blocks=cfg.num_blocks + 64, num_state_slots=cfg.num_state_slots + 8, cache_memory=memory
        )
    admission = rng.choice(sorted(ADMISSIONS))
    effective = SchedulerConfig(**{**cfg.__dict__, "has_recurrent": runner.model.has_recurrent})
    fcfs = policy == "adaptive" and runner.model.has_recurrent
    full_s = RoundTimes(runner.round_predictor, effective).seconds(cfg.token_budget) if predicting else None
    promises = Promises(effective, fcfs=fcfs, full_s=full_s)
    engine = new_engine(
        runner, cfg, policy, placement, events=promises, eviction=eviction, admission=admission
    )
    for r in reqs:
        engine.submit(r)
    steps = 0
    while engine.has_work():
        engine.step()
        engine.check_integrity()
        steps += 1
        assert steps < 10_000, "no progress"
    for r in reqs:
        where = f"seed {seed}: {r.id}"
        assert r.status is RequestStatus.FINISHED, (where, r.status, r.error)
        assert r.id in promises.finished, f"{where}: finished outside a round"
        assert promises.next_start[r.id] >= len(r.prompt), f"{where}: prompt not covered"
        assert r.output == uncached(r, runner.model.vocab_size, runner.model.eos_token_ids), where
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0
    return engine


GRID = [
    (policy, placement, eviction)
    for policy in SCHEDULING_POLICIES
    for placement in PLACEMENTS
    for eviction in EVICTION_POLICIES
]


@pytest.mark.parametrize(("policy", "placement", "eviction"), GRID)
def test_every_round_keeps_the_schedulers_promises(policy, placement, eviction):
    for seed in range(8):
        model = ["qwen3_5-2b", "nemotron_h-8b", "lfm2-1.2b", "qwen3-4b"][seed % 4]
        check_run(seed, model, policy, placement, eviction)
