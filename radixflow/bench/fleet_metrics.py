"""Figures of a fleet run: the usual per-policy result over all replicas, and the fleet's own
(routed-by-affinity share, imbalance over time, queue lengths, per-replica reuse)."""

from __future__ import annotations

from typing import Any

from radixflow.bench.fleet import FleetRun, QueueSample
from radixflow.bench.metrics import (
    Failure,
    PolicyResult,
    agreement,
    first_token,
    outputs_digest,
    percentile,
    rounds_lower_bound,
)
from radixflow.fleet import AFFINITY, BALANCE, PLACEMENT
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.scheduler import SchedulerConfig

HOT = 2.0  # a replica's queue above HOT x the mean queue is imbalance the acceptance bounds
HOT_SLACK = 2  # ... and above the mean by more than this many requests (small queues are noise)


def fleet_policy_result(
    policy: str, run: FleetRun, scheduler: SchedulerConfig, reference: dict[str, int] | None
) -> PolicyResult:
    """`summarize` over every replica: latencies from first arrival, makespan the last replica's,
    rounds and their lower bound every replica's summed;
    requests in the order given (the outputs' digest over them as `summarize`'s)."""
    reqs = run.requests
    done = [r for r in reqs if r.status is RequestStatus.FINISHED]
    lat = [r.latency_s for r in done if r.latency_s is not None]
    prompt_tokens = sum(len(r.prompt) for r in done)
    engines = [r.engine for r in run.replicas]
    rounds = [rd for e in engines for rd in e.rounds]
    # `rounds` counts every replica's rounds: so does the bound, each replica's own (its tokens,
    # chunks and dependency depth) as one engine's run states it
    bounds = [
        rounds_lower_bound(
            sum(rd.tokens for rd in e.rounds),
            sum(rd.requests for rd in e.rounds),
            e.dependency_depth(),
            scheduler,
        )
        for e in engines
    ]
    return PolicyResult(
        policy=policy,
        requests=len(reqs),
        completed=len(done),
        failed=len(reqs) - len(done),
        rounds=len(rounds),
        rounds_lower_bound=sum(bounds),
        mean_latency_s=sum(lat) / len(lat) if lat else None,
        p50_latency_s=percentile(lat, 50),
        p99_latency_s=percentile(lat, 99),
        reuse_rate=sum(r.reused for r in done) / prompt_tokens if prompt_tokens else None,
        bubble_tokens=sum(rd.bubble_tokens for rd in rounds),
        tokens_computed=sum(rd.tokens for rd in rounds),
        dependency_depth=max((e.dependency_depth() for e in engines), default=0),
        makespan_s=max((e.now for e in engines), default=0.0),
        worker_call_s=sum((rd.worker_call_s for rd in rounds), 0.0),
        outputs_sha256=outputs_digest([first_token(r) for r in reqs]),
        agreement=None if reference is None else agreement(reqs, reference),
        # by status, as `summarize`'s: `r not in done` searched a list, quadratic in the requests
        failures=tuple(
            Failure(r.id, r.error or r.status.value) for r in reqs if r.status is not RequestStatus.FINISHED
        ),
    )


def _share(decisions: list[Any], reason: str) -> float | None:
    return sum(d.reason == reason for d in decisions) / len(decisions) if decisions else None


def imbalance(samples: list[QueueSample], end_s: float) -> dict[str, float | None]:
    """max queue / mean queue over time (samples where the mean is positive), and how long the
    longest queue stayed above HOT x the mean (and HOT_SLACK requests above it)."""
    ratios, hot_s, longest, run_start = [], 0.0, 0.0, None
    times = [s.t for s in samples[1:]] + [end_s] if samples else []
    for sample, t_next in zip(samples, times, strict=True):
        mean = sum(sample.queues) / len(sample.queues)
        top = max(sample.queues)
        if mean > 0:
            ratios.append(top / mean)
        hot = mean > 0 and top > HOT * mean and top > mean + HOT_SLACK
        if hot:
            run_start = sample.t if run_start is None else run_start
            hot_s += max(t_next - sample.t, 0.0)
            longest = max(longest, t_next - run_start)
        else:
            run_start = None
    span = end_s - samples[0].t if samples else 0.0
    return {
        "imbalance_mean": sum(ratios) / len(ratios) if ratios else None,
        "imbalance_p99": percentile(ratios, 99),
        "hot_share": hot_s / span if span > 0 else None,
        "longest_hot_s": longest,
    }


def _replica_figures(name: str, decisions: list[Any], requests: list[Request], queues: list[int]) -> dict:
    done = [r for r in requests if r.status is RequestStatus.FINISHED]
    prompt = sum(len(r.prompt) for r in done)
    lat = [r.latency_s for r in done if r.latency_s is not None]
    return {
        "replica": name,
        "routed": len(decisions),
        "completed": len(done),
        "reuse_rate": sum(r.reused for r in done) / prompt if prompt else None,
        "mean_latency_s": sum(lat) / len(lat) if lat else None,
        "affinity_share": _share(decisions, AFFINITY),
        "mean_queue": sum(queues) / len(queues) if queues else None,
        "max_queue": max(queues, default=0),
    }


def _queues_of(samples: list[QueueSample], name: str) -> list[int]:
    """``name``'s queue in every sample taken while it was alive. Pure."""
    return [q for s in samples for n, q in zip(s.replicas, s.queues, strict=True) if n == name]


def fleet_figures(run: FleetRun, router: str) -> dict[str, Any]:
    """The fleet's own figures (plain JSON)."""
    decisions = [d for r in run.replicas for d in r.routed]
    end = max((r.engine.now for r in run.replicas), default=0.0)
    answers = {id(r) for r in run.requests}  # not what a replica finished after it died
    per_replica = []
    for replica in run.replicas:
        queues = _queues_of(run.samples, replica.name)
        requests = [r for r in replica.engine.requests if id(r) in answers]
        per_replica.append(_replica_figures(replica.name, replica.routed, requests, queues))
    all_queues = [q for s in run.samples for q in s.queues]
    return {
        "router": router,
        "replicas": len(run.replicas),
        "affinity_share": _share(decisions, AFFINITY),
        "placement_share": _share(decisions, PLACEMENT),
        "balance_share": _share(decisions, BALANCE),
        "retried": run.retried,
        "mean_queue": sum(all_queues) / len(all_queues) if all_queues else None,
        "max_queue": max(all_queues, default=0),
        **imbalance(run.samples, end),
        "per_replica": per_replica,
    }
