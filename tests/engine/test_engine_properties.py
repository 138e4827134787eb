"""Random workloads through the whole engine: integrity after every round, nothing lost, exact."""

from __future__ import annotations

import pytest
from engine_utils import new_engine
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.cache import EVICTION_POLICIES
from radixflow.engine.engine import Engine
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.sampling import SamplingParams

BS = 8
STEMS = [tuple(range(10, 50)), tuple(range(10, 34)) + tuple(range(90, 106)), tuple(range(200, 216))]


@st.composite
def workloads(draw: st.DrawFn, vocab: int = 500) -> list[Request]:
    n = draw(st.integers(1, 10))
    reqs = []
    for i in range(n):
        stem = draw(st.sampled_from(STEMS))
        cut = draw(st.integers(0, len(stem)))
        tail = draw(st.lists(st.integers(1, vocab - 1), min_size=1, max_size=20))
        ns = draw(st.sampled_from(["a", "b"]))
        arrival = draw(st.sampled_from([0.0, 0.0, 0.001, 0.01]))
        reqs.append(Request(f"r{i}", stem[:cut] + tuple(tail), ns, arrival_s=arrival))
    return reqs


configs = st.builds(
    SchedulerConfig,
    token_budget=st.integers(BS, 64),
    max_requests=st.integers(1, 6),
    block_size=st.just(BS),
    num_blocks=st.integers(24, 64),
    num_state_slots=st.integers(4, 16),
)


def run(
    runner,
    cfg: SchedulerConfig,
    policy: str,
    reqs: list[Request],
    eviction: str | None = None,
    admission: str | None = None,
) -> Engine:
    engine = new_engine(runner, cfg, policy=policy, eviction=eviction, admission=admission)
    for r in reqs:
        engine.submit(r)
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0  # everything released
    return engine


@pytest.mark.parametrize("model", ["qwen3_5-2b", "qwen3-4b"])
@settings(max_examples=60, deadline=None)
@given(reqs=workloads(), cfg=configs, policy=st.sampled_from(["native", "radixflow"]))
def test_sim_engine_finishes_everything_exactly(model, reqs, cfg, policy):
    runner = SimRunner(SIM_MODELS[model], HARDWARE["h100"])
    engine = run(runner, cfg, policy, reqs)
    for r in engine.requests:  # every prompt fits the cache alone, so none may be refused
        assert r.status is RequestStatus.FINISHED, (r.id, r.error)
        assert r.output[0] == sim_token(r.namespace, r.prompt, runner.model.vocab_size)


# A cache that holds one prompt (at most 60 tokens: 8 blocks) and little more, and one to three
# state slots: nearly every admission evicts something.
scarce = st.builds(
    SchedulerConfig,
    token_budget=st.integers(BS, 64),
    max_requests=st.integers(1, 6),
    block_size=st.just(BS),
    num_blocks=st.integers(9, 14),
    num_state_slots=st.integers(1, 3),
)


@pytest.mark.parametrize("model", list(SIM_MODELS))
@settings(max_examples=25, deadline=None)
@given(
    reqs=workloads(),
    cfg=scarce,
    policy=st.sampled_from(["native", "radixflow", "adaptive"]),
    eviction=st.sampled_from(sorted(EVICTION_POLICIES)),
    admission=st.sampled_from(sorted(ADMISSIONS)),
)
def test_scarce_memory_stays_exact_under_every_eviction_policy(model, reqs, cfg, policy, eviction, admission):
    runner = SimRunner(SIM_MODELS[model], HARDWARE["h100"])
    engine = run(runner, cfg, policy, reqs, eviction, admission)
    for r in engine.requests:
        assert r.status is RequestStatus.FINISHED, (r.id, r.error)
        assert r.output[0] == sim_token(r.namespace, r.prompt, runner.model.vocab_size)


@st.composite
def budgets(draw: st.DrawFn, runner: SimRunner) -> SchedulerConfig:
    """Scarce memory as one byte budget: room for 9 to 14 blocks and 1 to 3 checkpoints' worth of
    bytes, shared, under caps that let either kind take most of it (a freed checkpoint can hold
    KV, and the other way round)."""
    block = runner.model.kv_bytes_per_token * BS
    slot = runner.model.checkpoint_bytes
    blocks, slots = draw(st.integers(9, 14)), draw(st.integers(1, 3))
    spare = draw(st.integers(0, block - 1))
    return SchedulerConfig(
        token_budget=draw(st.integers(BS, 64)),
        max_requests=draw(st.integers(1, 6)),
        block_size=BS,
        num_blocks=draw(st.sampled_from([blocks, 64, 4096])),
        num_state_slots=draw(st.sampled_from([slots, 16])),
        cache_memory=blocks * block + slots * slot + spare,
    )


@pytest.mark.parametrize("model", list(SIM_MODELS))
@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    reqs=workloads(),
    policy=st.sampled_from(["native", "radixflow", "adaptive"]),
    eviction=st.sampled_from(sorted(EVICTION_POLICIES)),
    admission=st.sampled_from(sorted(ADMISSIONS)),
)
def test_scarce_byte_budget_stays_exact_under_every_eviction_policy(
    model, data, reqs, policy, eviction, admission
):
    runner = SimRunner(SIM_MODELS[model], HARDWARE["h100"])
    cfg = data.draw(budgets(runner))
    engine = run(runner, cfg, policy, reqs, eviction, admission)
    for r in engine.requests:
        assert r.status is RequestStatus.FINISHED, (r.id, r.error)
        assert r.output[0] == sim_token(r.namespace, r.prompt, runner.model.vocab_size)
    assert engine.cache.memory().used_bytes <= cfg.cache_memory


def test_a_request_the_budget_cannot_hold_fails_alone():
    """A hand-built config whose caps exceed its budget: the request that cannot fit the budget
    fails with a one-line reason; the one that fits still runs."""
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    block, slot = runner.model.kv_bytes_per_token * BS, runner.model.checkpoint_bytes
    cfg = SchedulerConfig(
        token_budget=64, block_size=BS, num_blocks=64, num_state_slots=4, cache_memory=4 * block + slot
    )
    engine = new_engine(runner, cfg)
    decoding = SamplingParams(max_tokens=2)  # holds a state slot (one token alone would hold none)
    big = Request("big", tuple(range(1, 41)), sampling=decoding)
    small = Request("small", tuple(range(1, 25)), sampling=decoding)
    engine.submit(big)
    engine.submit(small)
    while engine.has_work():
        engine.step()
    assert big.status is RequestStatus.FAILED and "cache_memory budget" in (big.error or "")
    assert small.status is RequestStatus.FINISHED


def test_a_request_that_needs_no_state_slot_is_not_charged_one_against_the_budget():
    """A prompt one round computes, asking for one token, holds no working slot (the scheduler
    takes one only to carry state between rounds): it was refused for a slot it never takes,
    named as the prompt, though it runs. One that decodes more, or whose prompt spans rounds,
    holds one, and is refused naming what asks for it."""
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    block, slot = runner.model.kv_bytes_per_token * BS, runner.model.checkpoint_bytes
    assert 10 * block < slot
    cfg = SchedulerConfig(
        token_budget=64, block_size=BS, num_blocks=64, num_state_slots=4, cache_memory=10 * block
    )
    engine = new_engine(runner, cfg)
    one = Request("one", tuple(range(1, 17)))
    decodes = Request("decodes", tuple(range(1, 17)), sampling=SamplingParams(max_tokens=2))
    chunked = Request("chunked", tuple(range(1, 73)))
    for r in (one, decodes, chunked):
        engine.submit(r)
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert one.status is RequestStatus.FINISHED, one.error
    assert one.output == [sim_token(one.namespace, one.prompt, runner.model.vocab_size)]
    over = "does not fit in the cache_memory budget: it needs"
    assert decodes.error == (
        f"max_tokens: {over} 3 KV blocks and a state slot, {3 * block + slot} bytes; "
        f"the budget is {10 * block} bytes"
    )
    assert chunked.error == (
        f"prompt: {over} 9 KV blocks and a state slot, {9 * block + slot} bytes; "
        f"the budget is {10 * block} bytes"
    )


def test_a_prompt_the_budget_cannot_hold_is_named_whatever_max_tokens_asks():
    """A prompt over the budget on its own is the prompt's fault: fewer tokens to generate cannot
    help (it was named max_tokens as soon as it asked for more than one); one that fits alone
    but not with what it generates is max_tokens'. Either says the bytes it needs and the budget
    (it said only blocks, which a user who gave cache_memory in bytes cannot weigh)."""
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    block, slot = runner.model.kv_bytes_per_token * BS, runner.model.checkpoint_bytes
    cfg = SchedulerConfig(
        token_budget=64, block_size=BS, num_blocks=64, num_state_slots=4, cache_memory=4 * block + slot
    )
    engine = new_engine(runner, cfg)
    # its prompt spans two rounds (token budget 64): it holds a state slot even generating one
    big = Request("big", tuple(range(1, 73)), sampling=SamplingParams(max_tokens=4))
    grows = Request("grows", tuple(range(1, 25)), sampling=SamplingParams(max_tokens=20))
    for r in (big, grows):
        engine.submit(r)
    over, budget = "does not fit in the cache_memory budget: it needs", 4 * block + slot
    assert big.error == (
        f"prompt: {over} 9 KV blocks and a state slot, {9 * block + slot} bytes; the budget is {budget} bytes"
    )
    assert grows.error == (
        f"max_tokens: {over} 6 KV blocks and a state slot, {6 * block + slot} bytes; "
        f"the budget is {budget} bytes"
    )


def test_a_request_over_the_budget_names_the_budget_not_the_kv_blocks_cap_it_sized():
    """Built from options, the KV cap is what the budget holds: a prompt over it was told 'cache
    has 4 (kv_blocks)' though only cache_memory was given. The cap a user gave is still named."""
    from radixflow.options import EngineOptions, build_engine

    probe = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"]).model
    block, slot = probe.kv_bytes_per_token * BS, probe.checkpoint_bytes
    budget = EngineOptions(model="qwen3_5-2b", block_size=BS, cache_memory=str(4 * block + slot))
    prompt, grows = tuple(range(1, 41)), SamplingParams(max_tokens=20)
    over = "does not fit in the cache_memory budget"
    for options, req, says in [
        (budget, Request("big", prompt), f"prompt: {over}: it needs 5"),
        (budget, Request("grows", prompt[:24], sampling=grows), f"max_tokens: {over}"),
        (budget.replace(kv_blocks=2, cache_memory="1GiB"), Request("big", prompt), "cache has 2 (kv_blocks)"),
    ]:
        engine = build_engine(options)
        engine.submit(req)
        assert req.status is RequestStatus.FAILED and says in (req.error or ""), req.error
