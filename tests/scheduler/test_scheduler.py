"""Scheduler behaviour of the two policies on small workloads, driven through the sim runner."""

from __future__ import annotations

import pytest
from checking_runner import VOCAB, CheckingRunner
from engine_utils import drive, new_engine

from radixflow.cache import IntegrityError
from radixflow.cache.evictable import kv_evictable
from radixflow.engine.engine import Engine
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig, StopReason
from radixflow.scheduler.bubble import BUBBLE_WALK_PER_SLOT
from radixflow.scheduler.sampling import SamplingParams
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

HYBRID = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
ATTN = SimRunner(SIM_MODELS["qwen3-4b"], HARDWARE["h100"])
CFG = SchedulerConfig(token_budget=256, max_requests=16, block_size=8, num_blocks=512, num_state_slots=64)


def checked_engine(block_size: int, cfg: SchedulerConfig | None = None, policy: str = "radixflow") -> Engine:
    """An engine whose runner checks the state every row restores against its prefix (`CheckingRunner`);
    ``cfg`` defaults to four slots and 64 blocks of ``block_size``, at most 16 or 64 tokens a round."""
    budget = 16 if block_size == 8 else 64
    cfg = cfg or SchedulerConfig(
        token_budget=budget, max_requests=4, block_size=block_size, num_blocks=64, num_state_slots=4
    )
    runner = CheckingRunner(True, block_size)
    engine = new_engine(runner, cfg, policy=policy)
    runner.cache = engine.cache
    return engine


def grouped(groups=3, candidates=3, context=64, cand=8, **kw) -> list[Request]:
    spec = WorkloadSpec(groups=groups, candidates=candidates, context_len=context, candidate_len=cand, **kw)
    return build_workload(spec).requests


def run(policy: str, requests, runner=HYBRID, cfg=CFG, placement="branch") -> Engine:
    engine = new_engine(runner, cfg, policy=policy, placement=placement)
    for r in requests:
        engine.submit(r)
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    return engine


def test_native_stops_at_first_blocked_consumer():
    engine = new_engine(HYBRID, CFG, policy="native")
    for r in grouped():
        engine.submit(r)
    engine.step()
    first = engine.rounds[0]
    assert [c[0] for c in first.chunks] == ["g0c0"]
    assert first.stop_reason == StopReason.BLOCKED.value
    assert first.blocked == 1  # g0c1 ended the scan
    assert first.bubble_tokens > 0  # g1c0 and g2c0 were runnable but left out


def test_radixflow_fills_the_round_with_independent_producers():
    engine = new_engine(HYBRID, CFG, policy="radixflow")
    for r in grouped():
        engine.submit(r)
    engine.step()
    first = engine.rounds[0]
    assert [c[0] for c in first.chunks] == ["g0c0", "g1c0", "g2c0"]
    assert first.blocked == 6  # every consumer waits locally, none is treated as ready
    assert first.bubble_tokens == 0


def test_consumers_reuse_the_branch_checkpoint_after_it_is_ready():
    engine = run("radixflow", grouped())
    second = engine.rounds[1]
    consumers = [c for c in second.chunks if c[0].endswith(("c1", "c2"))]
    assert consumers and all(start == 64 for _, start, _ in consumers)


def test_same_reuse_and_outputs_fewer_rounds():
    native, flow = run("native", grouped()), run("radixflow", grouped())
    assert len(flow.rounds) < len(native.rounds)
    assert native.dependency_depth() == flow.dependency_depth() == 2  # producer round, then consumers
    assert [r.reused for r in native.requests] == [r.reused for r in flow.requests]
    assert [r.output for r in native.requests] == [r.output for r in flow.requests]
    assert all(r.status is RequestStatus.FINISHED for r in native.requests + flow.requests)


def test_full_attention_nothing_blocks():
    native = run("native", grouped(groups=4, candidates=4), runner=ATTN)
    flow = run("radixflow", grouped(groups=4, candidates=4), runner=ATTN)
    assert len(native.rounds) == len(flow.rounds)
    assert all(rd.blocked == 0 for rd in native.rounds + flow.rounds)
    # same-round KV reuse: consumers scheduled with their producer still reuse the context
    assert all(r.reused == 64 for r in flow.requests if not r.id.endswith("c0"))


def test_chunked_prefill_splits_on_block_boundaries():
    cfg = SchedulerConfig(token_budget=40, max_requests=4, block_size=8, num_blocks=256, num_state_slots=16)
    req = Request("long", tuple(range(1, 101)))
    engine = run("radixflow", [req], cfg=cfg)
    spans = [c[1:] for rd in engine.rounds for c in rd.chunks]
    assert spans == [(0, 40), (40, 80), (80, 100)]
    assert req.status is RequestStatus.FINISHED and req.chunks == 3
    assert engine.dependency_depth() == 3  # 100 tokens at 40 per round need three rounds
    assert engine.cache.usage().working_slots == 0  # chunk-to-chunk state released


def test_no_starvation_under_a_stream_of_newcomers():
    groups = grouped(groups=2, candidates=4, context=64, cand=8)
    flood = [
        Request(f"new{i}", tuple(range(1000 + 80 * i, 1000 + 80 * i + 80)), arrival_s=0.001 * i)
        for i in range(60)
    ]
    engine = run("radixflow", groups + flood, cfg=CFG)
    assert all(r.status is RequestStatus.FINISHED for r in engine.requests)
    finish_round = {cid: rd.index for rd in engine.rounds for cid, _, end in rd.chunks}
    for g in range(2):
        producer = finish_round[f"g{g}c0"]
        for k in range(1, 4):
            assert finish_round[f"g{g}c{k}"] <= producer + 1  # served as soon as the state is READY


def test_align_placement_misses_branch_points():
    branch = run("radixflow", grouped(groups=2, candidates=4, context=60, cand=12), placement="branch")
    align = run("radixflow", grouped(groups=2, candidates=4, context=60, cand=12), placement="align")
    assert sum(r.reused for r in align.requests) == 0  # checkpoints land in request-unique tokens
    assert all(r.reused == 56 for r in branch.requests if not r.id.endswith("c0"))


def test_eviction_under_memory_pressure_keeps_everything_exact():
    cfg = SchedulerConfig(token_budget=256, max_requests=16, block_size=8, num_blocks=40, num_state_slots=6)
    small = run("radixflow", grouped(groups=4, candidates=3), cfg=cfg)
    big = run("radixflow", grouped(groups=4, candidates=3))
    assert all(r.status is RequestStatus.FINISHED for r in small.requests)
    assert [r.output for r in small.requests] == [r.output for r in big.requests]


def test_request_that_can_never_fit_fails_cleanly():
    cfg = SchedulerConfig(token_budget=256, max_requests=4, block_size=8, num_blocks=4, num_state_slots=4)
    big, ok = Request("big", tuple(range(1, 100))), Request("ok", tuple(range(1, 20)))
    run("radixflow", [big, ok], cfg=cfg)
    assert big.status is RequestStatus.FAILED and "does not fit" in (big.error or "")
    assert ok.status is RequestStatus.FINISHED


def test_tight_state_slots_and_kv_never_deadlock_running_requests():
    # Many forks along one path and tiny chunks: every fork wants a checkpoint, but checkpoints are
    # best effort, and admission keeps each running request's remaining KV free.
    stem = tuple(range(10, 74))
    reqs = [Request(f"r{i}", stem[: 8 * (i + 1)] + (900 + i,) * 5) for i in range(8)]
    cfg = SchedulerConfig(token_budget=8, max_requests=3, block_size=8, num_blocks=30, num_state_slots=4)
    for policy in ("native", "radixflow"):
        engine = run(policy, [Request(r.id, r.prompt) for r in reqs], cfg=cfg)
        assert all(r.status is RequestStatus.FINISHED for r in engine.requests)


def test_consumer_whose_reuse_point_pins_the_only_slot_still_runs():
    # A 17-token producer checkpoints at 16 into the only state slot. The consumer's best reuse
    # point is that checkpoint, but its chunked prompt needs a working slot too: with nothing
    # running, it falls back to no reuse instead of being failed.
    cfg = SchedulerConfig(token_budget=24, max_requests=4, block_size=8, num_blocks=64, num_state_slots=1)
    stem = tuple(range(1, 17))
    producer, consumer = Request("p", (*stem, 500)), Request("c", stem + tuple(range(600, 640)))
    engine = run("radixflow", [producer, consumer], cfg=cfg)
    assert producer.status is consumer.status is RequestStatus.FINISHED
    assert consumer.reused == 0
    assert consumer.output == [sim_token("default", consumer.prompt, HYBRID.model.vocab_size)]
    assert engine.cache.usage().working_slots == 0


def test_fallback_prefers_a_shallower_ready_checkpoint():
    # Two checkpoints on the consumer's path (8 and 16); the slot budget allows one checkpoint plus
    # one working slot, so the consumer restarts from the shallower one rather than from scratch.
    cfg = SchedulerConfig(token_budget=24, max_requests=1, block_size=8, num_blocks=64, num_state_slots=2)
    stem = tuple(range(1, 17))
    reqs = [Request("a", (*stem[:8], 700)), Request("b", (*stem, 701))]
    reqs.append(Request("c", stem + tuple(range(600, 640))))
    run("radixflow", reqs, cfg=cfg)
    assert all(r.status is RequestStatus.FINISHED for r in reqs)
    assert reqs[2].reused == 8


def test_abort_of_a_running_chunked_request_releases_everything():
    cfg = SchedulerConfig(token_budget=16, max_requests=4, block_size=8, num_blocks=64, num_state_slots=4)
    long, other = Request("long", tuple(range(1, 60))), Request("other", tuple(range(100, 130)))
    engine = new_engine(HYBRID, cfg, policy="radixflow")
    engine.submit(long)
    engine.submit(other)
    engine.step()
    assert long.status is RequestStatus.RUNNING and engine.cache.usage().working_slots == 1
    engine.abort("long")
    engine.check_integrity()
    assert long.status is RequestStatus.ABORTED and long.lock is None and not long.own_blocks
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    usage = engine.cache.usage()
    assert other.status is RequestStatus.FINISHED
    assert usage.locked_blocks == 0 and usage.working_slots == 0
    assert all("long" not in {c[0] for c in rd.chunks} for rd in list(engine.rounds)[1:])


@pytest.mark.parametrize("end", ["abort", "stop"])
def test_a_prompt_ended_mid_prefill_leaves_its_state_for_the_prompt_sent_again(end):
    # a client that gives up during a long prompt's prefill and sends it again: the KV computed
    # so far stayed cached, but the state beside it went with the working slot, so the prompt
    # was computed again from its start; the runner checks the state the retry restores
    engine = checked_engine(8)
    prompt = tuple(range(1, 60))
    engine.submit(Request("first", prompt))
    engine.step()
    engine.step()  # 32 of its 59 tokens; its own checkpoint (branch) would come at 56
    getattr(engine, end)("first")
    engine.check_integrity()
    assert engine.cache.usage().working_slots == 0
    retry = Request("retry", prompt, arrival_s=engine.now)
    drive(engine, [retry])
    assert retry.reused == 32 and retry.output == [sim_token("default", prompt, VOCAB)]


def test_a_generation_aborted_mid_decode_leaves_its_tail_for_the_next_turn():
    # a chat client's "stop generating" closes the connection (an abort, not a stop string): the
    # next turn sends the prompt, what was shown of the answer and more; the state at the last
    # block boundary of the answer was thrown away, so that turn recomputed from the prompt's end
    engine = checked_engine(4)
    prompt = tuple(range(1, 11))
    first = Request("first", prompt, sampling=SamplingParams(max_tokens=20))
    engine.submit(first)
    for _ in range(8):  # the prompt, then 7 decode steps: positions up to 17 computed
        engine.step()
    engine.abort("first")
    engine.check_integrity()
    assert first.status is RequestStatus.ABORTED and engine.cache.usage().working_slots == 0
    turn = Request("turn", first.sequence + (5, 6, 7), arrival_s=engine.now)
    drive(engine, [turn])
    assert turn.reused == 16 and turn.output == [sim_token("default", turn.prompt, VOCAB)]


@pytest.mark.parametrize("end", ["finish", "abort"])
def test_a_request_resuming_a_kept_state_counts_the_rounds_that_state_took(end):
    # dependency depth (the fewest rounds before a request's first token could exist, whose
    # maximum is bench's 'rounds lower bound') counted a checkpoint kept from a request's own
    # state (a decoded tail, a prefill cut short) as free: the next turn resuming the tail had
    # depth 1, as if it reused nothing (or the depth of whatever checkpoint held that slot before)
    engine = checked_engine(4)
    tokens = 7 if end == "finish" else 20  # finished by its seventh token, or aborted after it
    first = Request("first", tuple(range(1, 11)), sampling=SamplingParams(max_tokens=tokens))
    engine.submit(first)
    for _ in range(7):  # the prompt (round 1), then decode steps: the tail at 16 after round 7
        engine.step()
    if end == "abort":
        engine.abort("first")
    assert first.status is (RequestStatus.FINISHED if end == "finish" else RequestStatus.ABORTED)
    turn = Request("turn", first.sequence[:16] + (5, 6, 7), arrival_s=engine.now)
    drive(engine, [turn])
    assert turn.reused == 16 and turn.depth == 8  # round 8: its one chunk after the tail's 7
    assert engine.dependency_depth() == 8


@pytest.mark.parametrize("end", ["abort", "stop"])
def test_a_prompt_resuming_a_prefill_cut_short_counts_the_rounds_that_state_took(end):
    engine = checked_engine(8)
    prompt = tuple(range(1, 60))
    engine.submit(Request("first", prompt))
    engine.step()
    engine.step()  # 32 of its 59 tokens in two rounds
    getattr(engine, end)("first")
    retry = Request("retry", prompt, arrival_s=engine.now)
    drive(engine, [retry])
    assert retry.reused == 32 and retry.depth == 4  # two rounds for the state, two for the rest


@pytest.mark.parametrize("policy", ["native", "radixflow"])
@pytest.mark.parametrize("length", [64, 65])
def test_a_prompt_sent_several_times_is_computed_once_when_it_ends_on_a_block_boundary(policy, length):
    # `n` choices (and retries) are requests of their own with the same prompt; a prompt is
    # resumed at most from the last block boundary before its end (its last token's logits are
    # computed), so `branch`'s checkpoint at a block-aligned prompt's end served no copy of it:
    # each recomputed the whole prompt, the same prompt sent later too
    prompt = tuple(range(1, length + 1))
    sampled = [SamplingParams(max_tokens=2, temperature=1.0, seed=i) for i in range(3)]
    reqs = [Request(f"c{i}", prompt, sampling=s) for i, s in enumerate(sampled)]
    engine = checked_engine(8, CFG, policy)  # checks the state each copy restores
    drive(engine, reqs)
    later = Request("later", prompt, arrival_s=engine.now)
    drive(engine, [later])
    assert [r.reused for r in reqs + [later]] == [0] + [(length - 1) // 8 * 8] * 3
    assert later.output == [sim_token("default", prompt, VOCAB)]


@pytest.mark.parametrize("policy", ["native", "radixflow"])
def test_a_prompt_that_is_a_prefix_of_an_earlier_one_resumes_where_it_ends(policy):
    # the longer prompt runs first; the shorter ends inside it, where no known sequence diverges
    # (the path goes on): `branch` checkpointed only divergences and the longer one's end, so the
    # prefix, known all along, was computed again from its start
    prompt = tuple(range(1, 60))
    reqs = [Request("long", prompt + tuple(range(200, 240))), Request("prefix", prompt)]
    engine = checked_engine(8, CFG, policy)
    drive(engine, reqs)
    assert [r.reused for r in reqs] == [0, 56]
    assert reqs[1].output == [sim_token("default", prompt, VOCAB)]


def test_abort_of_a_waiting_request_drops_its_registered_demand():
    engine = new_engine(HYBRID, CFG, policy="radixflow")
    reqs = grouped(groups=1, candidates=3)
    for r in reqs:
        engine.submit(r)
    engine.step()  # g0c0 runs, g0c1 and g0c2 wait
    engine.abort("g0c2")
    engine.check_integrity()
    while engine.has_work():
        engine.step()
    assert [r.status for r in reqs] == [RequestStatus.FINISHED, RequestStatus.FINISHED, RequestStatus.ABORTED]
    assert all(n.demand == 0 for n in engine.cache.tree.nodes())


class _FailOnce:
    """Wraps a runner; its first worker call raises."""

    def __init__(self, inner):
        self.inner, self.model, self.name, self.calls = inner, inner.model, "fail-once", 0

    def validate(self, request):
        return self.inner.validate(request)

    def run(self, batch):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("device lost")
        return self.inner.run(batch)

    def reference_tokens(self, requests):
        return None


def test_rollback_withdraws_the_rounds_checkpoints_and_a_consumer_becomes_producer():
    engine = new_engine(_FailOnce(HYBRID), CFG, policy="radixflow")
    reqs = grouped(groups=1, candidates=3)
    for r in reqs:
        engine.submit(r)
    record = engine.step()  # g0c0 produces the branch checkpoint; the worker call fails
    assert record is not None and record.error == "worker call failed: RuntimeError: device lost"
    engine.check_integrity()
    assert reqs[0].status is RequestStatus.FAILED and "device lost" in (reqs[0].error or "")
    assert not any(n.materialized and n.blocks for n in engine.cache.tree.nodes())  # no KV kept
    assert all(n.checkpoint is None for n in engine.cache.tree.nodes())  # nothing became READY
    engine.step()
    assert [c[0] for c in engine.rounds[0].chunks] == ["g0c1"]  # the next consumer produces
    assert engine.rounds[0].blocked == 1 and reqs[1].reused == 0
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert reqs[2].status is RequestStatus.FINISHED and reqs[2].reused == 64
    assert engine.cache.usage().locked_blocks == 0


@pytest.mark.parametrize("policy", ["native", "radixflow"])
def test_a_blocked_consumer_is_parked_and_never_matched_twice_in_a_round(policy):
    engine = new_engine(HYBRID, CFG, policy=policy)
    reqs = grouped(groups=1, candidates=20) + [Request("solo", tuple(range(900, 940)))]
    for r in reqs:
        engine.submit(r)
    calls: dict[str, int] = {}
    plain = engine.scheduler.reuse.match

    def counting(req, touch=True):
        calls[req.id] = calls.get(req.id, 0) + 1
        return plain(req, touch)

    engine.scheduler.reuse.match = counting
    engine._admit_arrivals()
    out = engine.scheduler.schedule()
    assert max(calls.values()) == 1  # neither the scan nor the bubble count matches anyone twice
    assert len(engine.scheduler.parked) == (1 if policy == "native" else 19)
    # native stopped at g0c1: the independent request was runnable and left out
    assert out.bubble_tokens == (40 if policy == "native" else 0)
    engine.scheduler.update(out, engine.runner.run(out).samples, 0.0)
    assert not engine.scheduler.parked  # woken when the producer's checkpoint committed
    engine.check_integrity()


def test_integrity_notices_an_evictable_entry_missing_from_its_queue():
    engine = run("radixflow", grouped(groups=2, candidates=2))
    cache = engine.cache
    victim = next(n for n in cache.tree.nodes() if kv_evictable(n))
    cache.evictor.kv_victims._queued.discard(victim.id)
    with pytest.raises(IntegrityError, match="not queued"):
        cache.check_integrity()


def one_by_one(placement: str, requests: list[Request]) -> Engine:
    """Each request submitted when the one before it has finished (a call per candidate)."""
    engine = new_engine(HYBRID, CFG, policy="radixflow", placement=placement)
    for r in requests:
        engine.run([Request(r.id, r.prompt, r.namespace, engine.now, sampling=r.sampling)])
        engine.check_integrity()
    return engine


def test_lone_candidates_reuse_their_context_where_branch_recomputes_it():
    reqs = grouped(groups=3, candidates=3, context=64, cand=8)
    branch, lone = one_by_one("branch", reqs), one_by_one("lone", reqs)
    reused = {name: {r.id: r.reused for r in e.requests} for name, e in (("branch", branch), ("lone", lone))}
    # branch: a context's second candidate finds only the first one's KV, no state, and recomputes
    assert [reused["branch"][f"g{g}c1"] for g in range(3)] == [0, 0, 0]
    # lone: the first candidate left a checkpoint where its context ends (the cold-start ladder in
    # the first group, the fork the namespace has seen since in the others)
    assert [reused["lone"][f"g{g}c1"] for g in range(3)] == [64, 64, 64]
    assert all(reused["lone"][f"g{g}c2"] == 64 for g in range(3))
    assert sum(reused["lone"].values()) == sum(r.reused for r in run("radixflow", reqs).requests)
    assert [r.output for r in lone.requests] == [r.output for r in branch.requests]
    assert lone.now < branch.now


@pytest.mark.parametrize("policy", ["native", "adaptive"])
def test_the_bubble_count_of_a_round_looks_at_a_bounded_part_of_a_queue_of_blocked_consumers(policy):
    """A round of these policies costs the same with 100 or 1000 consumers blocked behind one
    producer; `radixflow`'s first round matches every one of them once (then they are parked)."""
    matched = {}
    for consumers in (100, 1000):
        engine = new_engine(HYBRID, CFG, policy=policy)
        reqs = grouped(groups=1, candidates=consumers + 1)
        reqs.append(Request("solo", tuple(range(900, 940)), arrival_s=0.0))  # runnable, behind them all
        for r in reqs:
            engine.submit(r)
        engine._admit_arrivals()  # an arrival costs its own match (adaptive shapes it), once
        calls = _count_matches(engine)
        engine.step()
        engine.check_integrity()
        matched[consumers] = len(calls)
        # the solo request lies past the walk: the count is a lower bound, here none of it
        assert engine.rounds[0].bubble_tokens == 0
    # the walk past the stop, the scan's own skips and (adaptive) a group's bounded re-keying
    assert matched[100] == matched[1000] < 4 * BUBBLE_WALK_PER_SLOT * CFG.max_requests + 64


def _count_matches(engine: Engine) -> list[str]:
    """The ids the scheduler matches from now on, one entry per match."""
    calls: list[str] = []
    plain = engine.scheduler.reuse.match

    def counting(req, touch=True):
        calls.append(req.id)
        return plain(req, touch)

    engine.scheduler.reuse.match = counting
    return calls


def _follower_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register `follows`: radixflow that follows every blocked consumer into its round."""
    from radixflow.scheduler.policy import SCHEDULING_POLICIES, RadixFlow, ScanAction

    class Follows(RadixFlow):
        name = "follows"

        def on_blocked(self, request, match, draft):
            return ScanAction.FOLLOW

    monkeypatch.setitem(SCHEDULING_POLICIES, "follows", Follows)


def test_a_follower_starts_from_the_pending_checkpoint_and_a_failed_round_takes_it_down_too(monkeypatch):
    _follower_policy(monkeypatch)
    reqs = grouped(groups=1, candidates=3)
    engine = new_engine(_FailOnce(HYBRID), CFG, policy="follows", placement="branch")
    for r in reqs:
        engine.submit(r)
    seen = []
    schedule = engine.scheduler.schedule

    def spy():
        out = schedule()
        rows = [(c.request_id, c.start, c.restore_slot, [x.slot for x in c.snapshots]) for c in out.chunks]
        seen.append(rows)
        return out

    engine.scheduler.schedule = spy
    record = engine.step()  # all three in one round; the worker call fails
    (first,) = seen
    slot = first[0][3][0]
    assert [c[:3] for c in first] == [(reqs[0].id, 0, None), (reqs[1].id, 64, slot), (reqs[2].id, 64, slot)]
    assert record is not None and record.error is not None
    assert all(r.status is RequestStatus.FAILED for r in reqs)
    engine.check_integrity()
    assert engine.cache.usage().locked_blocks == 0
    assert all(n.checkpoint is None for n in engine.cache.tree.nodes())  # nothing became READY


def test_following_on_a_runner_without_same_round_state_is_refused(monkeypatch):
    from dataclasses import replace

    _follower_policy(monkeypatch)
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    runner.model = replace(runner.model, same_round_state=False)
    engine = new_engine(runner, CFG, policy="follows", placement="branch")
    for r in grouped(groups=1, candidates=2):
        engine.submit(r)
    with pytest.raises(ValueError, match="cannot"):
        engine.step()


def test_a_duplicate_waiting_id_is_refused_before_its_prompt_is_registered():
    # the queue refused it after the cache had registered its prompt: a stray known sequence,
    # a branch point that no request would ever reach (the engine refuses duplicates first)
    scheduler = new_engine(HYBRID, CFG).scheduler
    stem = tuple(range(1, 65))
    first = Request("r", stem + (7,) * 16)
    scheduler.add(first)
    with pytest.raises(ValueError, match="already waiting"):
        scheduler.add(Request("r", stem + (9,) * 16))
    assert scheduler.cache.branch_points(first.registration, 0, len(first.prompt)) == []
    scheduler.cache.check_integrity()
