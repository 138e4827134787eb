"""Round size from the cost curve, through the scheduler and the sim runner: short pipelined
rounds where a round's time grows with its tokens, packed rounds where a fixed part dominates."""

from __future__ import annotations

from engine_utils import new_engine

from radixflow.bench.harness import fresh_copy
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, plan_engine
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

CFG = SchedulerConfig(token_budget=2048, max_requests=64, block_size=16, num_blocks=8192, num_state_slots=256)
# four contexts of 512 tokens, each with 8 candidates of 32, all arriving at once
CONTEXTS = build_workload(WorkloadSpec(groups=4, candidates=8, context_len=512, candidate_len=32, seed=0))


def run(policy: str, runner: SimRunner) -> Engine:
    engine = new_engine(runner, CFG, policy=policy)
    for r in CONTEXTS.requests:
        engine.submit(Request(r.id, r.prompt, r.namespace, r.arrival_s, sampling=r.sampling))
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    return engine


def mean_latency(engine: Engine) -> float:
    return sum(r.latency_s for r in engine.requests) / len(engine.requests)


def outputs(engine: Engine) -> dict[str, list[int]]:
    return {r.id: r.output for r in engine.requests}


def test_where_a_round_costs_its_tokens_adaptive_runs_a_context_and_its_followers_per_round():
    """On a CPU a round's time is almost all its tokens: one context and its 7 followers per
    round lets the first contexts finish early (`radixflow` packs three rounds, the first
    holding two contexts and a cut chunk of a third)."""
    cpu = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["cpu"])
    ours, paper = run("adaptive", cpu), run("radixflow", cpu)
    assert len(ours.rounds) > len(paper.rounds)
    assert max(len(r.chunks) for r in ours.rounds) == 8  # a context and its 7 followers
    assert mean_latency(ours) < mean_latency(paper)
    assert mean_latency(ours) < mean_latency(run("native", cpu))
    assert outputs(ours) == outputs(paper)


def test_where_a_fixed_part_dominates_adaptive_packs_its_rounds():
    """At a 50 ms fixed part per call on an H100, fewer rounds save every request a fixed part:
    adaptive runs no more rounds than `radixflow` does."""
    gpu = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"].with_fixed_round_cost(0.05))
    ours, paper = run("adaptive", gpu), run("radixflow", gpu)
    assert len(ours.rounds) <= len(paper.rounds)
    assert mean_latency(ours) <= mean_latency(paper)
    assert outputs(ours) == outputs(paper)


def test_a_round_of_several_sequences_is_priced_as_it_runs():
    """Contexts of 4096 tokens, 8192-token budget, 1 ms per call (H200): the cost model runs a
    producer with the previous context's 7 consumers faster than the producer alone (several
    sequences fill the GPU better than one). Priced as one chunk, such a round looked dearer
    than the producer alone and the cut gave the consumers rounds of their own, 6% behind
    `native`; priced in its chunks, the cut pairs them and `adaptive` is ahead of both."""
    plan = plan_engine(
        EngineOptions.from_mapping(
            dict(
                runner="sim",
                model="qwen3_5-2b",
                hardware="h200",
                fixed_cost_ms=1.0,
                max_requests=256,
                token_budget=8192,
            )
        )
    )
    spec = WorkloadSpec(
        groups=8, candidates=8, context_len=4096, candidate_len=64, seed=0, vocab_size=plan.choice.vocab_size
    )
    reqs = build_workload(spec).requests
    setup = plan.build([len(r.prompt) for r in reqs])
    engines = {}
    for policy in ("native", "radixflow", "adaptive"):
        engines[policy] = setup.engine(policy)
        engines[policy].run(fresh_copy(reqs))
    assert mean_latency(engines["adaptive"]) < mean_latency(engines["native"])
    assert mean_latency(engines["adaptive"]) < mean_latency(engines["radixflow"])
    assert outputs(engines["adaptive"]) == outputs(engines["native"])
