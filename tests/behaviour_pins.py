"""Workloads whose scheduling outcome is pinned (rounds, reuse, bubbles, outputs, chunk order).

`tests/test_behaviour_pins.py` replays them and compares against `tests/data/behaviour_pins.json`.
Regenerate the file only for an intended behaviour change:
``python tests/behaviour_pins.py > tests/data/behaviour_pins.json``.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from engine_utils import new_engine

from radixflow.bench.metrics import first_token
from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.problems import Problem
from radixflow.runners.sim import sim_token
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.samples import Sample
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


class FixedCostRunner:
    """Sim tokens with a round time that depends only on the batch shape (not on a cost model)."""

    name = "fixed"

    def __init__(self, has_recurrent: bool) -> None:
        self.model = ModelInfo("pin", has_recurrent, 32_000, 1 << 20)

    def validate(self, request: Request) -> Problem | None:
        return validate_prompt(request, self.model)

    def run(self, batch: SchedulerOutput) -> RoundResult:
        seconds = 2e-3 + 1e-6 * batch.tokens + 1e-4 * len(batch.chunks)
        samples = {
            c.request_id: Sample(sim_token(c.namespace, c.tokens, 32_000), 0.0)
            for c in batch.chunks
            if c.sample
        }
        return RoundResult(samples=samples, duration_s=seconds, worker_call_s=seconds)

    def reference_tokens(self, requests: list[Request]) -> None:
        return None


@dataclass(frozen=True)
class PinCase:
    name: str
    spec: WorkloadSpec | None  # None: random workload from ``seed``
    config: SchedulerConfig
    hybrid: bool = True
    placement: str = "branch"
    seed: int = 0


def _random_requests(seed: int) -> list[Request]:
    rng = random.Random(seed)
    stems = [tuple(rng.randrange(1, 500) for _ in range(rng.choice([16, 24, 40, 64]))) for _ in range(3)]
    reqs = []
    for i in range(rng.randint(4, 30)):
        stem = rng.choice(stems)
        cut = rng.randint(0, len(stem))
        tail = tuple(rng.randrange(1, 500) for _ in range(rng.randint(1, 24)))
        arrival = rng.choice([0.0, 0.0, 0.001, 0.004])
        reqs.append(Request(f"r{i}", stem[:cut] + tail, rng.choice(["a", "b"]), arrival_s=arrival))
    return reqs


def cases() -> list[PinCase]:
    default = SchedulerConfig()
    small = WorkloadSpec(groups=4, candidates=4, context_len=96, candidate_len=12)
    out = [
        PinCase("readme-default", WorkloadSpec(), default),
        PinCase("readme-groups32", WorkloadSpec(groups=32), default),
        PinCase("readme-groups128", WorkloadSpec(groups=128), default),
        PinCase(
            "readme-groups400",
            WorkloadSpec(groups=400, candidates=8, context_len=512, candidate_len=16),
            SchedulerConfig(token_budget=8192, max_requests=256),
        ),
        PinCase("control", WorkloadSpec(), default, hybrid=False),
        PinCase("align", WorkloadSpec(), default, placement="align"),
        PinCase("interleaved", WorkloadSpec(order="interleaved"), default),
        PinCase("shuffled-indep", WorkloadSpec(order="shuffled", independent=16), default),
        PinCase("poisson", WorkloadSpec(arrival="poisson", rate=400.0), default),
        PinCase("bursty-ns", WorkloadSpec(arrival="bursty", rate=800.0, namespaces=3), default),
        PinCase(
            "tight-kv",
            small,
            SchedulerConfig(token_budget=128, max_requests=6, block_size=8, num_blocks=48, num_state_slots=6),
        ),
        PinCase(
            "tight-slots",
            small,
            SchedulerConfig(token_budget=64, max_requests=4, block_size=8, num_blocks=400, num_state_slots=2),
        ),
    ]
    for seed in range(40):
        rng = random.Random(1000 + seed)
        cfg = SchedulerConfig(
            token_budget=rng.choice([8, 16, 24, 40, 64]),
            max_requests=rng.randint(1, 6),
            block_size=8,
            num_blocks=rng.randint(24, 80),
            num_state_slots=rng.randint(2, 12),
        )
        placement = rng.choice(["branch", "align"])
        out.append(PinCase(f"random-{seed}", None, cfg, hybrid=seed % 5 != 4, placement=placement, seed=seed))
    return out


def outcome(case: PinCase, policy: str) -> dict[str, object]:
    reqs = build_workload(case.spec).requests if case.spec is not None else _random_requests(case.seed)
    engine = new_engine(FixedCostRunner(case.hybrid), case.config, policy=policy, placement=case.placement)
    engine.run(reqs)
    return {
        "rounds": len(engine.rounds),
        "reused": sum(r.reused for r in engine.requests),
        "bubble_tokens": sum(rd.bubble_tokens for rd in engine.rounds),
        "statuses": _digest([r.status.value for r in engine.requests]),
        "outputs_sha256": _digest([first_token(r) for r in engine.requests]),
        "chunks_sha256": _digest([list(rd.chunks) for rd in engine.rounds]),
    }


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def all_outcomes() -> dict[str, dict[str, object]]:
    return {f"{c.name}/{p}": outcome(c, p) for c in cases() for p in ("native", "radixflow")}


if __name__ == "__main__":
    print(json.dumps(all_outcomes(), indent=1, sort_keys=True))
