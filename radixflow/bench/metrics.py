"""Per-policy summary figures computed from a finished engine run.

A figure that is undefined for a run (a latency with no completed request, agreement without a
reference) is None, never NaN, so the JSON stays strict.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from dataclasses import asdict, dataclass

from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.scheduler import SchedulerConfig


@dataclass(frozen=True)
class Failure:
    """A request that did not complete, and why (the engine's or the runner's reason)."""

    id: str
    reason: str


PREDICTOR_WARMUP_ROUNDS = 5  # a predictor's first rounds, left out of its error (it starts rough)


@dataclass(frozen=True)
class PredictorError:
    """The runner's round predictor against the measured worker call: |predicted − measured| /
    measured per round, over the rounds predicted after the predictor's first
    `PREDICTOR_WARMUP_ROUNDS` (counted over the runner's life: policies of a bench share it)."""

    rounds: int  # rounds counted
    median: float | None
    p90: float | None


def predictor_error(rounds: list[RoundRecord]) -> PredictorError | None:
    """None when the runner predicted none of the rounds (the sim's prediction is its charge)."""
    predicted = [r for r in rounds if r.predicted_s is not None]
    if not predicted:
        return None
    errors = [
        abs(r.predicted_s - r.worker_call_s) / r.worker_call_s  # type: ignore[operator]
        for r in predicted
        if r.predicted_from >= PREDICTOR_WARMUP_ROUNDS and r.worker_call_s > 0
    ]
    return PredictorError(len(errors), percentile(errors, 50), percentile(errors, 90))


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    requests: int
    completed: int
    failed: int
    rounds: int
    rounds_lower_bound: int  # max(tokens / token budget, chunks / max requests, dependency depth)
    mean_latency_s: float | None  # latencies are over completed requests
    p50_latency_s: float | None
    p99_latency_s: float | None
    reuse_rate: float | None  # prompt tokens served from cache / prompt tokens (completed requests)
    bubble_tokens: int
    tokens_computed: int
    dependency_depth: int
    makespan_s: float
    worker_call_s: float
    # the first tokens' digest; None where repeated trials' outputs differ (`trial_outputs_sha256`)
    outputs_sha256: str | None
    agreement: float | None = None  # see `agreement`; None without a reference
    median_top1_margin: float | None = None  # logit gap top-1 minus top-2, beside agreement
    failures: tuple[Failure, ...] = ()  # in submission order
    predictor: PredictorError | None = None  # None: the runner predicts nothing of its own
    # measured wall time beside an engine clock that is not it (`engine.clocks`: cpu); None where
    # the engine clock is the wall time or is modelled
    wall_mean_latency_s: float | None = None  # latencies with each round's wall time (`wall_times`)
    wall_worker_call_s: float | None = None
    # each trial's outputs digest, in trial order, where they differ (a deterministic runner's never
    # do); None: one trial, or trials that agree
    trial_outputs_sha256: tuple[str, ...] | None = None

    @property
    def predictor_rounds(self) -> int | None:
        """Rounds the predictor's error is taken over (after its first `PREDICTOR_WARMUP_ROUNDS`)."""
        return None if self.predictor is None else self.predictor.rounds

    @property
    def predictor_median(self) -> float | None:
        """The runner's round predictor's median error (None: it predicts nothing, or no round counted)."""
        return None if self.predictor is None else self.predictor.median

    @property
    def predictor_p90(self) -> float | None:
        return None if self.predictor is None else self.predictor.p90

    def to_dict(self) -> dict[str, object]:
        """Every field; None (JSON null) where a figure is undefined."""
        return asdict(self)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def first_token(request: Request) -> int | None:
    """The first generated token (the candidate-scoring workloads generate one); None: none yet."""
    return request.output[0] if request.output else None


def outputs_digest(tokens: list[int | None]) -> str:
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()


def agreement(requests: list[Request], reference: dict[str, int]) -> float | None:
    """Matches / all requests. A match is a completed request whose token equals the reference's.

    A failed request is a miss, never a match, even when the reference could not run it either
    (both None): 1.0 means every request completed and agreed. Failures are reported separately.
    """
    if not requests:
        return None
    matches = sum(
        r.status is RequestStatus.FINISHED and r.id in reference and reference[r.id] == first_token(r)
        for r in requests
    )
    return matches / len(requests)


def rounds_lower_bound(tokens: int, chunks: int, depth: int, scheduler: SchedulerConfig) -> int:
    """Fewest rounds any policy could take: each round holds at most ``token_budget`` tokens and
    ``max_requests`` chunks, and a request cannot finish before its dependency depth."""
    return max(math.ceil(tokens / scheduler.token_budget), math.ceil(chunks / scheduler.max_requests), depth)


def median_margin(requests: list[Request]) -> float | None:
    """Median logprob gap between the two most likely first tokens, over requests that have both."""
    tops = [r.output_logprobs[0].top for r in requests if r.output_logprobs]
    gaps = [top[0][1] - top[1][1] for top in tops if len(top) >= 2]
    return percentile(gaps, 50) if gaps else None


def wall_times(rounds: list[RoundRecord], times: list[float]) -> list[float]:
    """Engine times mapped to the wall clock of the same run: each round that ended by a time
    counts its measured wall time instead of its engine duration (idle gaps, where the engine
    jumps to the next arrival, are the same on both). Rounds in order, as an engine runs them."""
    ends, shifts, shift = [], [], 0.0
    for rd in rounds:
        shift += (rd.wall_s if rd.wall_s is not None else rd.duration_s) - rd.duration_s
        ends.append(rd.start_s + rd.duration_s)
        shifts.append(shift)
    return [t + (shifts[i - 1] if (i := bisect.bisect_right(ends, t)) else 0.0) for t in times]


def wall_latencies(engine: Engine, done: list[Request]) -> list[float] | None:
    """Each completed request's latency in wall time (None: no round measured a wall time of its
    own, so the engine clock is the wall time or is modelled)."""
    rounds = list(engine.rounds)
    if not any(rd.wall_s is not None for rd in rounds):
        return None
    timed = [r for r in done if r.finish_s is not None]
    arrive = wall_times(rounds, [r.arrival_s for r in timed])
    finish = wall_times(rounds, [r.finish_s for r in timed])  # type: ignore[misc]
    return [f - a for a, f in zip(arrive, finish, strict=True)]


def summarize(
    policy: str, engine: Engine, scheduler: SchedulerConfig, reference: dict[str, int] | None = None
) -> PolicyResult:
    reqs = engine.requests
    done = [r for r in reqs if r.status is RequestStatus.FINISHED]
    # Every request that did not complete (failed at submission or admission, or never ran).
    failures = tuple(
        Failure(r.id, r.error or r.status.value) for r in reqs if r.status is not RequestStatus.FINISHED
    )
    lat = [r.latency_s for r in done if r.latency_s is not None]
    prompt_tokens = sum(len(r.prompt) for r in done)
    computed = sum(rd.tokens for rd in engine.rounds)
    chunks = sum(rd.requests for rd in engine.rounds)
    depth = engine.dependency_depth()
    wall_lat = wall_latencies(engine, done)
    return PolicyResult(
        policy=policy,
        requests=len(reqs),
        completed=len(done),
        failed=len(failures),
        rounds=len(engine.rounds),
        rounds_lower_bound=rounds_lower_bound(computed, chunks, depth, scheduler),
        mean_latency_s=sum(lat) / len(lat) if lat else None,
        p50_latency_s=percentile(lat, 50),
        p99_latency_s=percentile(lat, 99),
        reuse_rate=sum(r.reused for r in done) / prompt_tokens if prompt_tokens else None,
        bubble_tokens=sum(rd.bubble_tokens for rd in engine.rounds),
        tokens_computed=computed,
        dependency_depth=depth,
        makespan_s=engine.now,
        worker_call_s=sum((rd.worker_call_s for rd in engine.rounds), 0.0),
        outputs_sha256=outputs_digest([first_token(r) for r in reqs]),
        agreement=None if reference is None else agreement(reqs, reference),
        median_top1_margin=median_margin(done),
        failures=failures,
        predictor=predictor_error(list(engine.rounds)),
        wall_mean_latency_s=None if wall_lat is None or not wall_lat else sum(wall_lat) / len(wall_lat),
        wall_worker_call_s=None if wall_lat is None else sum(rd.wall_s or 0.0 for rd in engine.rounds),
    )
