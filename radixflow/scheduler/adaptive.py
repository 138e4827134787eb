"""`adaptive`: decide each round from the round-time model what to take and in which order.

Order: by deadline from a `RankIndex` kept up to date by events (arrival, wake-up, a group
member taken), never by a rescan. A request's slack grows with its key (`shapes`): ready
consumers first, then producers with the most dependents (producer promotion), then lone work;
the deadline counts from arrival, so aging bounds every wait, and a request that waited `FORCE`
times its slack is taken whatever the round costs.

How much: once per round, a rollout (`rollout`) serves the head of the queue two ways, with the
arrivals the measured rate predicts: *full* rounds (take every ready request; the budget cuts
the last one into a chunk, fewest rounds, as `radixflow`) and *whole* rounds (end the round
before the first request that does not fit once it completes something: short rounds that
pipeline, as `native` under light load). The round is filled the cheaper way.

Blocked consumers: skipped as in `radixflow` (they wait), unless recomputing the prefix from a
shallower READY point finishes them sooner than the cost model says the others lose
(`recompute`). Without recurrent state nothing blocks and every prompt reuses KV written in the
same round, so there is nothing to reorder for: the policy keeps arrival order and takes what
fits, as `radixflow` does (the ranking lost up to 12% there when measured).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Sequence

from radixflow.cache.types import Match
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.ranking import RankIndex
from radixflow.scheduler.recompute import Blocked, Verdict, weigh
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.rollout import Arrivals, Start, cost, jobs
from radixflow.scheduler.round_time import RoundTimes
from radixflow.scheduler.scan import PolicyContext, ScanAction
from radixflow.scheduler.shapes import Shape, Shapes

AGING = 32.0  # slack of a request, in rounds, per full token budget of work per completion
FORCE = 2.0  # a request that waited this many times its slack is taken whatever the round costs
# blocked consumers one scan passes over before it ends, per request a round may hold: keeps a
# round's cost flat however many consumers wait on one producer
SKIPS_PER_SLOT = 1
HORIZON = 256  # waiting requests a rollout looks at
RATE_WINDOW = 5  # rounds the arrival rate is measured over (a median: one burst is no rate)
ARRIVAL_SMOOTHING = 0.1  # weight of the newest arrival in the moving mean of arrival work
MIN_ROLLOUT_ARRIVALS = 8  # arrivals a rollout plays at the least, when any arrive


class Adaptive:
    name = "adaptive"

    def __init__(self, aging: float = AGING, force: float = FORCE, horizon: int = HORIZON) -> None:
        self._aging, self._force, self._horizon = aging, force, horizon
        self._ctx: PolicyContext | None = None
        self._shapes: Shapes | None = None
        self._times: RoundTimes | None = None
        self._ranked = True  # False without recurrent state: arrival order, as radixflow
        self._index = RankIndex(on_drop=self._forget)
        self._round = 0
        self._skips = 0  # blocked consumers this scan passed over
        self._full: bool | None = None  # this round's fill, decided at its first ready request
        self._waited: set[str] = set()  # consumers counted as waiting once
        self._counts = {"waits": 0, "recomputes": 0, "promotions": 0, "full_rounds": 0, "whole_rounds": 0}
        self._arrived = 0  # requests that arrived since the last round ended
        self._rates: deque[float] = deque([0.0] * RATE_WINDOW, maxlen=RATE_WINDOW)
        self._rate = 0.0  # requests arriving per second of engine time
        self._now: float | None = None
        self._arrival_work = 0.0  # work per completion of recent arrivals (moving mean)

    # ----------------------------------------------------------------- events
    def bind(self, context: PolicyContext) -> None:
        """Take the scheduler's context (mutates only the policy)."""
        self._ctx = context
        self._shapes = Shapes(context)
        self._times = RoundTimes(context.predict, context.config)
        self._ranked = context.config.has_recurrent

    def on_arrival(self, request: Request) -> None:
        """Shape and rank the newcomer; its group's members are re-keyed before the next scan
        (mutates only the policy)."""
        self._arrived += 1
        if not self._ranked:
            return
        assert self._shapes is not None
        shape = self._shapes.arrived(request)
        self._index.add(request, self._round, self._slack(shape))
        self._arrival_work += ARRIVAL_SMOOTHING * (shape.key - self._arrival_work)

    def on_round_end(self, woken: Sequence[Request], now: float | None) -> None:
        """Measure the arrival rate; re-key the woken consumers, whose reuse changed (mutates
        only the policy)."""
        if now is not None:
            self._clock(now)
        for req in woken:
            if req.status is RequestStatus.WAITING and self._ranked:
                self._rekey(req)

    def counters(self) -> dict[str, int]:
        return dict(self._counts)

    # ----------------------------------------------------------------- the scan
    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        """The index's scan by deadline, after re-keying the groups that changed (mutates only
        the policy)."""
        self._round += 1
        self._skips, self._full = 0, None
        if not self._ranked:
            return waiting
        assert self._shapes is not None
        for req in self._shapes.stale():
            self._rekey(req)
        return self._index.scan()

    def on_blocked(self, request: Request, match: Match, draft: SchedulerOutput) -> ScanAction:
        """Wait (skip it) or recompute; counts and notes the decision (mutates only the policy)."""
        assert self._ctx is not None
        verdict = self._weigh(request, match, draft)
        if verdict is not None and verdict.recompute:
            self._counts["recomputes"] += 1
            self._ctx.note(
                "recompute", request.id, producer=match.producer, tokens=match.checkpoint_tokens,
                rounds_saved=verdict.rounds_saved,
            )
            return ScanAction.RECOMPUTE
        if request.id not in self._waited:
            self._waited.add(request.id)
            self._counts["waits"] += 1
        self._skips += 1
        limit = SKIPS_PER_SLOT * self._ctx.config.max_requests
        return ScanAction.STOP if self._skips > limit else ScanAction.SKIP

    def on_ready(
        self, request: Request, match: Match, reuse: int, draft: SchedulerOutput
    ) -> ScanAction | None:
        """Take it unless this round fills the whole way and it does not fit; notes a promoted
        producer (mutates only the policy)."""
        if not self._ranked:
            return None
        assert self._shapes is not None and self._ctx is not None
        shape = self._shapes.of(request, reuse)
        if not self._overdue(request) and not self._fits(shape, draft):
            return ScanAction.STOP
        self._shapes.touch(shape)  # its siblings become consumers once it runs
        if shape.dependents and shape.key < shape.remaining:
            self._counts["promotions"] += 1
            self._ctx.note("promote", request.id, dependents=shape.dependents)
        return None

    # ----------------------------------------------------------------- decisions
    def _fits(self, shape: Shape, draft: SchedulerOutput) -> bool:
        """Whether the round takes ``shape``: always when it fills full; when it fills whole,
        unless it already completes something and ``shape`` would be cut into a chunk."""
        if self._full is None:
            self._full = self._fills_full(draft)
            self._counts["full_rounds" if self._full else "whole_rounds"] += 1
        if self._full:
            return True
        assert self._ctx is not None
        left = self._ctx.config.token_budget - draft.tokens
        completes = any(c.sample for c in draft.chunks)
        return not completes or left <= 0 or shape.remaining <= left

    def _fills_full(self, draft: SchedulerOutput) -> bool:
        """Roll the head of the queue out both ways (with the arrivals to expect): full rounds
        unless whole ones cost less. Visits at most `HORIZON` entries of the index."""
        assert self._ctx is not None and self._times is not None and self._shapes is not None
        head = (self._shapes.get(r.id) for r in self._index.head(self._horizon))
        queue = jobs(s for s in head if s is not None)
        start = Start(draft.tokens, sum(1 for c in draft.chunks if c.sample))
        coming = Arrivals()
        if self._rate > 0:
            coming = Arrivals(self._rate, int(self._arrival_work), max(len(queue), MIN_ROLLOUT_ARRIVALS))
        budget, seconds = self._ctx.config.token_budget, self._times.seconds
        full = cost(queue, start, budget, seconds, True, coming)
        return full <= cost(queue, start, budget, seconds, False, coming)

    def _weigh(self, request: Request, match: Match, draft: SchedulerOutput) -> Verdict | None:
        """The recompute verdict for a blocked consumer; None when the round is full or its
        producer is not running."""
        assert self._ctx is not None and self._times is not None
        budget = self._ctx.config.token_budget
        producer = self._ctx.running.get(match.producer or "")
        if producer is None or draft.tokens >= budget:
            return None  # a full round has no room to recompute in
        ready = next(iter(self._ctx.reuse.shallower(request, match.checkpoint_tokens))).tokens
        shared = 0 if request.registration is None else self._ctx.cache.sharing(request.registration).tokens
        pending = max(match.checkpoint_tokens, min(shared, len(request.prompt) - 1))
        blocked = Blocked(len(request.prompt), pending, ready, producer.computed)
        completions = sum(1 for c in draft.chunks if c.sample)
        return weigh(blocked, self._times, draft.chunks, budget, completions, len(self._index))

    def _overdue(self, request: Request) -> bool:
        """Waited `FORCE` times its slack: taken whatever the round costs."""
        deadline = self._index.deadline(request)
        if deadline is None:
            return False
        since = self._index.since(request)
        return self._round - since >= self._force * (deadline - since)

    def _clock(self, now: float) -> None:
        """Arrivals per second over the last rounds (a median: one burst makes no rate)."""
        if self._now is not None and now > self._now:
            self._rates.append(self._arrived / (now - self._now))
            self._rate = float(statistics.median(self._rates))
        self._arrived = 0
        self._now = now

    # ----------------------------------------------------------------- keys
    def _rekey(self, request: Request) -> None:
        assert self._shapes is not None
        self._index.rekey(request, self._slack(self._shapes.store(request)))

    def _forget(self, request: Request) -> None:
        assert self._shapes is not None
        self._shapes.forget(request)
        self._waited.discard(request.id)

    def _slack(self, shape: Shape) -> float:
        assert self._ctx is not None
        return self._aging * shape.key / self._ctx.config.token_budget
