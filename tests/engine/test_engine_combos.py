"""The pluggable policies in every combination, through the options' own sizing path.

Each case samples one point of scheduling policy × checkpoint placement (None: the policy's own)
× eviction × admission × memory (kv_blocks / state_slots caps, one cache_memory budget, or both;
from generous down to barely one request's working set) × model (every sim shape and a few zoo
presets, their real KV and checkpoint bytes). The capacities come from `EnginePlan.scheduler_config`
as every door sizes them; the worker is the checking runner with the sim shape's sizes and round
predictor, so every chunk is checked to read exactly its own prefix's KV and restore exactly
``prompt[:start]``. Workloads land on edges: a prompt that is a prefix of another, identical
prompts, prompts ending on a block boundary, budgets that end chunks on a checkpoint position,
aborts and stops mid-prefill, worker calls that fail half-way. After every step the cache's
integrity holds; at the end every request finished with the no-cache run's tokens, was aborted or
stopped where asked, failed with its round's worker call, or was refused alone with a one-line
reason exactly when it cannot fit; nothing is locked, promised or leaked.
"""

from __future__ import annotations

import random
from dataclasses import replace

from checking_runner import VOCAB, CheckingRunner
from engine_utils import end_request

from radixflow.cache import EVICTION_POLICIES
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.options import EngineOptions, build
from radixflow.problems import ProblemError
from radixflow.runners.sim import sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.sampling import SamplingParams

# sim shapes of every family, and zoo presets read as sim shapes (their config, no weights)
MODELS = [*SIM_MODELS, "qwen3_5-tiny", "lfm2-tiny", "nemotron_h-tiny", "falcon_h1-tiny", "llama-tiny"]


def draw(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, VOCAB) for _ in range(n))


def workload(rng: random.Random, bs: int, chunk: int) -> list[Request]:
    stems = [draw(rng, bs * rng.randint(1, 6) + rng.choice([0, 0, 1])) for _ in range(rng.randint(1, 3))]
    reqs = []
    for i in range(rng.choice([rng.randint(1, 14), rng.randint(15, 30)])):
        stem = rng.choice(stems)
        whole = bs * rng.randint(0, len(stem) // bs)  # a block boundary
        cut = rng.choice([len(stem), len(stem), whole, rng.randint(0, len(stem)), min(len(stem), chunk)])
        tail = draw(rng, rng.choice([0, 0, 1, bs, chunk, rng.randint(1, 2 * bs)]))
        prompt = stem[:cut] + tail or (rng.randrange(1, VOCAB),)
        max_tokens = rng.choice([1, 1, 0, 2, bs + 1, 3 * bs + 2])
        sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=rng.random() < 0.3)
        reqs.append(
            Request(
                f"r{i}",
                prompt,
                rng.choice(["a", "a", "b", f"n{i % 3}"]),
                arrival_s=rng.choice([0.0, 0.0, 0.002, 0.01 * i]),
                sampling=sampling,
            )
        )
    return reqs


def memory(rng: random.Random, reqs: list[Request], bs: int, block: int, slot: int) -> dict[str, object]:
    """kv_blocks / state_slots / cache_memory: generous, tight, or barely one request."""
    longest = max(-(-r.max_length // bs) for r in reqs)
    prompt_blocks = max(-(-len(r.prompt) // bs) for r in reqs)
    mode = rng.choice(["caps", "budget", "both"])
    out: dict[str, object] = {}
    if mode in ("caps", "both"):
        out["kv_blocks"] = rng.choice([longest, longest + 1, longest + 4, 4 * longest + 8])
        out["state_slots"] = rng.choice([None, 0, 1, 2, 3, 64])
    if mode in ("budget", "both"):
        working = rng.choice([longest, prompt_blocks]) * block + slot
        extra = rng.choice([0, 0, 1, block, slot, block + slot, 2 * slot, 8 * (block + slot)])
        out["cache_memory"] = str(max(1, working + extra - rng.choice([0, 0, 0, 1])))
    return out


def over(r: Request, cfg: SchedulerConfig, block: int, slot: int) -> bool:
    """Whether ``r`` alone cannot fit the empty cache: its KV blocks past the pool or, with its
    state slot on a hybrid model, past the byte budget; several rounds or decode steps of a hybrid
    model with no state slot."""
    blocks = -(-r.max_length // cfg.block_size)
    slots = 1 if cfg.has_recurrent and cfg.num_state_slots > 0 else 0
    if blocks > cfg.num_blocks:
        return True
    if cfg.cache_memory is not None and blocks * block + slots * slot > cfg.cache_memory:
        return True
    stateless = cfg.has_recurrent and cfg.num_state_slots == 0
    return stateless and (len(r.prompt) > cfg.token_budget or r.sampling.max_tokens > 1)


def combo(seed: int) -> None:
    rng = random.Random(seed)
    bs = rng.choice([1, 2, 4, 8, 16])
    token_budget = bs * rng.randint(1, 4) + rng.choice([0, 0, bs - 1, 1])
    reqs = workload(rng, bs, token_budget)
    model = rng.choice(MODELS)
    hardware = rng.choice(["h100", "h200", "cpu"])  # the round predictor adaptive weighs rounds by
    sized = build.plan_engine(EngineOptions(model=model, runner="sim", block_size=bs))
    entry = sized.choice.entry_bytes(bs)
    options = EngineOptions(
        model=model,
        runner="sim",
        hardware=hardware,
        block_size=bs,
        token_budget=max(token_budget, bs),
        max_requests=rng.randint(1, 5),
        policy=rng.choice(sorted(SCHEDULING_POLICIES)),
        placement=rng.choice([None, *sorted(PLACEMENTS)]),
        eviction=rng.choice(sorted(EVICTION_POLICIES)),
        admission=rng.choice(sorted(ADMISSIONS)),
        **memory(rng, reqs, bs, entry.block, entry.slot),
    )
    where = f"seed {seed}: {options}"
    plan = build.plan_engine(options)
    try:
        cfg = plan.scheduler_config([len(r.prompt) for r in reqs])
    except ProblemError as e:  # refused up front: one line naming the option
        assert e.problem.param in ("cache_memory", "state_slots", "kv_blocks"), where
        assert "\n" not in e.problem.message, where
        return
    sim = plan.build([len(r.prompt) for r in reqs]).runner
    runner = CheckingRunner(sim.model.has_recurrent, bs, rng.random() < 0.5)
    eos = tuple(range(rng.randrange(3), VOCAB, 7)) if rng.random() < 0.3 else ()
    runner.model = replace(
        runner.model,
        eos_token_ids=eos,
        kv_bytes_per_token=sim.model.kv_bytes_per_token,
        checkpoint_bytes=sim.model.checkpoint_bytes,
        request_overhead_s=rng.choice([0.0, sim.model.request_overhead_s]),  # admission delayed
    )
    if rng.random() < 0.75:  # adaptive weighs rounds as on the sim; else counts them
        runner.round_predictor = sim.round_predictor
    runner.fail_rounds = {rng.randrange(30) for _ in range(rng.choice([0, 0, 0, 1, 2]))}
    engine = build.new_engine(runner, cfg, options)
    runner.cache = engine.cache
    refused = set()
    for r in reqs:
        engine.submit(r)
        if r.status is RequestStatus.FAILED:
            assert r.error and "\n" not in r.error, (where, r.id)
            refused.add(r.id)
        unfit = over(r, engine.scheduler.config, entry.block, entry.slot)
        assert (r.id in refused) == unfit, (where, r.id, r.error)
    ended: dict[str, RequestStatus] = {}
    step = 0
    while engine.has_work():
        if rng.random() < 0.08:  # prefer a request mid-prefill, else any
            mid = [r for r in reqs if r.status is RequestStatus.RUNNING and r.computed < len(r.prompt)]
            end_request(engine, rng.choice(mid or reqs), rng.random() < 0.6, ended, where)
        engine.step()
        engine.check_integrity()
        step += 1
        assert step < 5_000, f"{where}: no progress"
    cache = engine.cache
    usage = cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0 and cache.promised == 0, where
    assert usage.free_blocks + usage.cached_blocks == usage.total_blocks, where
    assert usage.free_slots + usage.checkpoint_slots == usage.total_slots, where
    assert all(n.demand == 0 and n.ends == 0 for n in cache.tree.nodes()), where
    for r in reqs:
        assert r.lock is None and r.registration is None and not r.own_blocks, (where, r.id)
        if r.id in refused:
            continue
        if r.status is RequestStatus.ABORTED:
            assert ended.get(r.id) is RequestStatus.ABORTED, (where, r.id)
            continue
        if r.status is RequestStatus.FAILED:  # its round's worker call failed
            assert "injected failure" in (r.error or ""), (where, r.id, r.error)
            continue
        assert r.status is RequestStatus.FINISHED and r.finish_reason is not None, (where, r.id, r.error)
        prefixes = [r.prompt + tuple(r.output[:i]) for i in range(len(r.output))]
        assert r.output == [sim_token(r.namespace, p, VOCAB) for p in prefixes], (where, r.id)
        if r.id in ended:
            continue
        if r.finish_reason is FinishReason.LENGTH:
            assert len(r.output) == r.sampling.max_tokens, (where, r.id)
        else:
            assert not r.sampling.ignore_eos and r.output[-1] in eos, (where, r.id)


def test_every_combination_of_policies_and_memory_is_exact_and_leaves_the_cache_whole():
    for seed in range(1200):
        combo(seed)
