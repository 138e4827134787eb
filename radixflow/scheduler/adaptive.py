"""`adaptive`: decide each round from the round-time model what to take and in which order.

Order: by deadline from a `RankIndex`: a request's key is the prompt work it costs per request
it completes (a ready consumer: its own remaining tokens; a producer whose checkpoint others
share: its work and theirs after reuse, per request), so ready consumers come first, then
producers with the most dependents, then lone work; aging bounds every wait.

How much (the exchange argument for mean latency): taking a chunk of ``w`` tokens delays the
``n`` requests that complete in this round by the round's marginal time ``Δ``; deferring it makes
the chunk's request, and the consumers waiting on its checkpoint, wait one more round. Take it
while ``Δ · n ≤ (1 + dependents) · T_next``.

Blocked consumers are skipped as in `radixflow`; a consumer behind a producer still chunking
through the prefix it shares waits for it unless recomputing the prefix finishes it sooner.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from radixflow.cache.types import Match, NodeHandle
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.ranking import RankIndex
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.rollout import Arrivals, Job, Start
from radixflow.scheduler.rollout import cost as rollout_cost
from radixflow.scheduler.round_time import RoundTimes
from radixflow.scheduler.scan import PolicyContext, ScanAction

AGING = 32.0  # slack of a request, in rounds, per full token budget of work per completion
FORCE = 2.0  # a request that waited this many times its slack is taken whatever the round costs
# blocked or waiting consumers one scan passes over before it ends, per request a round may hold:
# keeps a round's cost flat however many consumers wait on one producer
SKIPS_PER_SLOT = 1
# registered prompts re-ranked when their group changes (a sibling arrives, a producer runs); a
# larger group's key hardly moves with one member more or less
GROUP_WALK = 64
RATE_WINDOW = 5  # rounds the arrival rate is measured over (a median: one burst is no rate)


@dataclass(frozen=True)
class Shape:
    """What a waiting request would cost now."""

    remaining: int  # prompt tokens to compute from its reuse point
    dependents: int  # other waiting prompts that would reuse the checkpoint it computes
    key: float  # prompt tokens per request completed, itself and its dependents together
    group: NodeHandle | None  # the shared prefix whose members' keys move together
    consumer: bool  # it reuses a checkpoint
    after: int  # what it computes once the prefix it shares is checkpointed


class Adaptive:
    name = "adaptive"

    def __init__(self, aging: float = AGING, force: float = FORCE, rule: float = 3, learn: float = 1, horizon: float = 256) -> None:
        self._horizon = horizon
        self._rule, self._learn = rule, learn
        self._mode: bool | None = None
        self._shapes: dict[str, Shape] = {}  # request id -> its shape when last ranked
        self._admitted = (0, 0)  # (consumers, others) taken so far
        self._aging, self._force = aging, force
        self._index = RankIndex(on_drop=self._forget)
        self._by_end: dict[int, list[Request]] = {}  # registration node id -> waiting requests
        self._dirty: dict[int, NodeHandle] = {}  # groups to re-rank before the next scan
        self._round = 0
        self._skips = 0
        self._waited: set[str] = set()  # consumers that waited for a producer (counted once)
        self._counts = {"waits": 0, "recomputes": 0}
        self._ctx: PolicyContext | None = None
        self._times: RoundTimes | None = None
        self._backlog = (0.0, 0)  # waiting work and requests when this round's scan began
        self._taken = (0.0, 0)  # the part of it this round took so far
        self._arrived = 0  # requests that arrived since the last scan
        self._rates: deque[float] = deque([0.0] * RATE_WINDOW, maxlen=RATE_WINDOW)
        self._rate = 0.0  # requests arriving per second of engine time
        self._now: float | None = None
        self._arrival_work = 0.0  # work per completion of recent arrivals (moving average)

    # ----------------------------------------------------------------- events
    def bind(self, context: PolicyContext) -> None:
        self._ctx = context
        self._times = RoundTimes(context.predict, context.config)

    def on_arrival(self, request: Request) -> None:
        shape = self._shape(request)
        self._index.add(request, self._round, self._slack(shape), shape.key)
        self._shapes[request.id] = shape
        self._arrived += 1
        self._arrival_work += 0.1 * (shape.key - self._arrival_work)
        if request.registration is not None:
            self._by_end.setdefault(request.registration.node_id, []).append(request)
        self._touch(shape)

    def on_round_end(self, woken: Sequence[Request], now: float | None) -> None:
        if now is not None:
            self._clock(now)
        for req in woken:
            if req.status is RequestStatus.WAITING:
                self._rekey(req)

    def counters(self) -> dict[str, int]:
        return dict(self._counts)

    # ----------------------------------------------------------------- the scan
    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        self._round += 1
        self._skips = 0
        self._rerank()
        self._backlog = (self._index.work, len(self._index))  # before this round takes any
        self._taken = (0.0, 0)
        self._mode = None
        return self._index.scan()

    def on_blocked(self, request: Request, match: Match) -> ScanAction:
        return self._skip()

    def on_ready(self, request: Request, match: Match, reuse: int, draft: SchedulerOutput) -> ScanAction | None:
        shape = self._shape(request, reuse)
        verdict = None if self._force and self._overdue(request) else self._fill(shape, draft)
        if verdict is None:
            self._touch(shape)  # its siblings become consumers once it runs
            self._taken = (self._taken[0] + shape.key, self._taken[1] + 1)
            c, o = self._admitted
            self._admitted = (c + 1, o) if shape.consumer else (c, o + 1)
        return verdict

    # ----------------------------------------------------------------- decisions
    def _skip(self) -> ScanAction:
        self._skips += 1
        assert self._ctx is not None
        return ScanAction.STOP if self._skips > SKIPS_PER_SLOT * self._ctx.config.max_requests else ScanAction.SKIP

    def _overdue(self, request: Request) -> bool:
        """Waited `FORCE` times its slack: taken whatever the round costs."""
        deadline = self._index.deadline(request)
        if deadline is None:
            return False
        since = self._index.since(request)
        return self._round - since >= self._force * (deadline - since)

    def _fill(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        return getattr(self, f"_fill{int(self._rule)}")(shape, draft)

    def _fill8(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        if self._mode is None:
            self._mode = self._rollout_mode(draft)
        return self._fill5(shape, draft) if self._mode else self._fill6(shape, draft)

    def _rollout_mode(self, draft: SchedulerOutput) -> bool:
        assert self._ctx is not None and self._times is not None
        jobs: list[Job | None] = []
        groups: dict[int, list[int]] = {}  # group -> [job index, producer work, siblings, after]
        for req in self._index.head(int(self._horizon)):
            shape = self._shapes.get(req.id)
            if shape is None:
                continue
            if shape.consumer or shape.dependents == 0 or shape.group is None:
                jobs.append(Job(shape.remaining))
            elif shape.group.node_id in groups:
                groups[shape.group.node_id][2] += 1
            else:
                groups[shape.group.node_id] = [len(jobs), shape.remaining, 0, shape.after]
                jobs.append(None)
        for index, work, siblings, after in groups.values():
            jobs[index] = Job(work, siblings, after)
        start = Start(draft.tokens, sum(1 for c in draft.chunks if c.sample))
        budget, seconds = self._ctx.config.token_budget, self._times.seconds
        real = [j for j in jobs if j is not None]
        coming = Arrivals(self._rate, int(self._arrival_work), max(len(real), 8)) if self._rate > 0 else Arrivals()
        full = rollout_cost(real, start, budget, seconds, True, coming)
        return full < rollout_cost(real, start, budget, seconds, False, coming)

    def _fill7(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        if self._mode is None:
            self._mode = self._pack_mode(shape)
        return self._fill5(shape, draft) if self._mode else self._fill6(shape, draft)

    def _pack_mode(self, shape: Shape) -> bool:
        """Whether full rounds (chunking the last request) beat rounds of whole requests for the
        queue as it stands: they serve work faster, but each of their rounds is longer."""
        assert self._ctx is not None and self._times is not None
        budget, times = self._ctx.config.token_budget, self._times
        work, n = self._backlog
        if n == 0 or work <= 0:
            return False
        per_request = work / n
        big = max(shape.remaining, per_request)
        whole = max(budget - big / 2, budget / 2)  # a round of whole requests leaves part unused
        t_full, t_whole = times.seconds(budget), times.seconds(int(whole))
        slow_whole, slow_full = t_whole / whole, t_full / budget  # seconds per token
        if slow_whole <= slow_full:
            return False
        load = self._rate * per_request * slow_whole
        if load >= 0.95:
            return True
        queued = work + self._rate * per_request * work * slow_whole / (1 - load)
        return queued * (slow_whole - slow_full) > t_full - t_whole

    def _fill5(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        return None

    def _fill6(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        assert self._ctx is not None
        left = self._ctx.config.token_budget - draft.tokens
        done = sum(1 for c in draft.chunks if c.sample)
        if done == 0 or left <= 0 or shape.remaining <= left:
            return None
        return ScanAction.STOP

    def _fill2(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        assert self._ctx is not None and self._times is not None
        cfg = self._ctx.config
        left = cfg.token_budget - draft.tokens
        done = sum(1 for c in draft.chunks if c.sample)  # requests this round completes a step of
        if done == 0 or left <= 0:
            return None  # delays nobody (or the scheduler's budgets stop the scan)
        take = min(shape.remaining, left)
        times, budget = self._times, cfg.token_budget
        cost = (times.draft_seconds(draft.chunks, take) - times.draft_seconds(draft.chunks)) * done
        others = max(0.0, self._backlog[0] - self._taken[0] - shape.key)
        others_n = max(0, self._backlog[1] - self._taken[1] - 1)
        wanted = others + shape.remaining
        next_round = times.seconds(int(min(budget, wanted)))
        if take == shape.remaining:
            benefit = (1 + self._deps(shape)) * next_round
        else:
            benefit = (next_round - times.seconds(int(min(budget, wanted) - take))) * (others_n + 1)
        if wanted > budget:
            beyond = others_n * (1 - budget / wanted)
            benefit += beyond * take * times.seconds(budget) / budget
        return None if cost <= benefit else ScanAction.STOP

    def _fill3(self, shape: Shape, draft: SchedulerOutput) -> ScanAction | None:
        assert self._ctx is not None and self._times is not None
        cfg = self._ctx.config
        left = cfg.token_budget - draft.tokens
        done = sum(1 for c in draft.chunks if c.sample)  # requests this round completes a step of
        if done == 0 or left <= 0:
            return None  # delays nobody (or the scheduler's budgets stop the scan)
        take = min(shape.remaining, left)
        times, budget = self._times, cfg.token_budget
        delta = times.draft_seconds(draft.chunks, take) - times.draft_seconds(draft.chunks)
        # the waiting work besides this request (and what arrives meanwhile), and what the next
        # round would want without it
        others = max(0.0, self._backlog[0] - self._taken[0] - shape.key)
        others_n = max(0, self._backlog[1] - self._taken[1] - 1)
        per_request = others / others_n if others_n else shape.key
        full = times.seconds(budget)
        incoming = self._rate * times.draft_seconds(draft.chunks, take)  # before the next round
        others += incoming * per_request
        others_n += incoming
        wanted = others + shape.remaining
        if wanted <= budget:  # the next round would hold everything waiting
            next_round = times.seconds(int(wanted))
            if take == shape.remaining:  # it (and its dependents) complete a round sooner
                return self._verdict(delta * done, (1 + shape.dependents) * next_round)
            shorter = next_round - times.seconds(int(wanted) - take)  # a head start
            return self._verdict(delta * done, shorter * (others_n + 1))
        # The next round is full: what this round leaves, later rounds must take, so every
        # request completing after the next round gains what the work costs in a full round,
        # less the time this round grows by; the next round's own requests only wait longer.
        fits = min(others_n, budget / per_request)
        load = min(self._rate * per_request * full / budget, 0.9)  # of the full-round capacity
        busy = wanted * full / budget / (1 - load)  # seconds before the queue drains
        beyond = max(0.0, others_n - fits) + self._rate * busy
        benefit = beyond * (take * full / budget - delta)
        if take == shape.remaining:
            benefit += (1 + shape.dependents) * full
        return self._verdict(delta * (done + fits), benefit)

    def _deps(self, shape: Shape) -> float:
        """Dependents to expect: those registered, or as many as producers have had so far
        (its siblings may still be arriving)."""
        if shape.consumer or not self._learn:
            return shape.dependents
        consumers, others = self._admitted
        return max(float(shape.dependents), consumers / max(others, 1))

    def _clock(self, now: float) -> None:
        """Arrivals per second over the last rounds (a median: one burst makes no rate)."""
        if self._now is not None and now > self._now:
            self._rates.append(self._arrived / (now - self._now))
            self._rate = float(statistics.median(self._rates))
        self._arrived = 0
        self._now = now

    @staticmethod
    def _verdict(cost: float, benefit: float) -> ScanAction | None:
        return None if cost <= benefit else ScanAction.STOP

    # ----------------------------------------------------------------- keys
    def _touch(self, shape: Shape) -> None:
        if shape.group is not None:
            self._dirty[shape.group.node_id] = shape.group

    def _rerank(self) -> None:
        """Fresh keys for the members of every group that changed since the last scan."""
        assert self._ctx is not None
        for group in self._dirty.values():
            for end in self._ctx.cache.registered_under(group, GROUP_WALK):
                for req in self._by_end.get(end.node_id, ()):
                    if req.status is RequestStatus.WAITING:
                        self._rekey(req)
        self._dirty.clear()

    def _rekey(self, request: Request) -> None:
        shape = self._shape(request)
        self._shapes[request.id] = shape
        self._index.rekey(request, self._slack(shape), shape.key)

    def _forget(self, request: Request) -> None:
        self._shapes.pop(request.id, None)
        if request.registration is None:
            return
        same = self._by_end.get(request.registration.node_id, [])
        if request in same:
            same.remove(request)
        if not same:
            self._by_end.pop(request.registration.node_id, None)

    def _shape(self, request: Request, reuse: int | None = None) -> Shape:
        assert self._ctx is not None
        if reuse is None:
            match = self._ctx.reuse.match(request, touch=False)
            ready = self._ctx.reuse.tokens(match)
            reuse = match.checkpoint_tokens if ready is None else ready  # a blocked one will reuse it
        n = len(request.prompt)
        remaining = n - reuse
        consumer = reuse > 0
        if request.registration is None:
            return Shape(remaining, 0, float(remaining), None, consumer, remaining)
        share = self._ctx.cache.sharing(request.registration)
        if share.tokens <= reuse:  # what it shares is computed already: a consumer (or lone)
            return Shape(remaining, 0, float(remaining), share.node, consumer, remaining)
        dependents = share.prompts - 1
        key = (remaining + dependents * (n - share.tokens)) / share.prompts
        return Shape(remaining, dependents, key, share.node, consumer, n - share.tokens)

    def _slack(self, shape: Shape) -> float:
        assert self._ctx is not None
        return self._aging * shape.key / self._ctx.config.token_budget
