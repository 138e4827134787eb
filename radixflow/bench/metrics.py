"""Per-policy summary figures computed from a finished engine run."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

from radixflow.engine.engine import Engine
from radixflow.scheduler.request import RequestStatus


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    requests: int
    completed: int
    failed: int
    rounds: int
    rounds_lower_bound: int
    mean_latency_s: float
    p50_latency_s: float
    p99_latency_s: float
    reuse_rate: float  # prompt tokens served from cache / prompt tokens (completed requests)
    bubble_tokens: int
    tokens_computed: int
    dependency_depth: int
    makespan_s: float
    worker_call_s: float
    outputs_sha256: str
    agreement: float | None = None  # torch runner: fraction matching the no-cache reference

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        if d["agreement"] is None:
            del d["agreement"]
        return d


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def outputs_digest(tokens: list[int | None]) -> str:
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()


def summarize(policy: str, engine: Engine, token_budget: int) -> PolicyResult:
    reqs = engine.requests
    done = [r for r in reqs if r.status is RequestStatus.FINISHED]
    lat = [r.latency_s for r in done if r.latency_s is not None]
    prompt_tokens = sum(len(r.prompt) for r in done)
    computed = sum(rd.tokens for rd in engine.rounds)
    depth = engine.dependency_depth()
    return PolicyResult(
        policy=policy,
        requests=len(reqs),
        completed=len(done),
        failed=sum(r.status is RequestStatus.FAILED for r in reqs),
        rounds=len(engine.rounds),
        rounds_lower_bound=max(math.ceil(computed / token_budget), depth),
        mean_latency_s=sum(lat) / len(lat) if lat else math.nan,
        p50_latency_s=percentile(lat, 50),
        p99_latency_s=percentile(lat, 99),
        reuse_rate=sum(r.reused for r in done) / prompt_tokens if prompt_tokens else 0.0,
        bubble_tokens=sum(rd.bubble_tokens for rd in engine.rounds),
        tokens_computed=computed,
        dependency_depth=depth,
        makespan_s=engine.now,
        worker_call_s=sum(rd.worker_call_s for rd in engine.rounds),
        outputs_sha256=outputs_digest([r.output_token for r in reqs]),
    )
