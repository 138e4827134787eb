"""Per-policy summary figures computed from a finished engine run."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

from radixflow.engine.engine import Engine
from radixflow.scheduler.request import Request, RequestStatus


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
    agreement: float | None = None  # fraction of requests matching the no-cache reference
    median_top1_margin: float | None = None  # logit gap top-1 minus top-2, beside agreement

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


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


def agreement(requests: list[Request], reference: dict[str, int]) -> float:
    """Fraction of requests whose generated token equals the reference (failed ones count as misses)."""
    if not requests:
        return math.nan
    return sum(reference.get(r.id) == r.output_token for r in requests) / len(requests)


def median_margin(requests: list[Request]) -> float | None:
    gaps = [r.top_logprobs[0][1] - r.top_logprobs[1][1] for r in requests if len(r.top_logprobs) >= 2]
    return percentile(gaps, 50) if gaps else None


def summarize(
    policy: str, engine: Engine, token_budget: int, reference: dict[str, int] | None = None
) -> PolicyResult:
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
        agreement=None if reference is None else agreement(reqs, reference),
        median_top1_margin=median_margin(done),
    )
