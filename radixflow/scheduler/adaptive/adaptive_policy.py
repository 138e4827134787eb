"""`adaptive`: rank the queue by work per completion, size each round from the cost curve, and
let a blocked consumer follow its producer into its round (else weigh waiting against recomputing).

- Order: by deadline from a `RankIndex` kept up to date by events; slack from `waiting_shapes`
  (ready consumers, then producers with the most dependents, then lone work), aged from arrival
  and capped by `fcfs_bound`.
- How much: `round_cut` (applied by `round_plan`) ends the round where the predicted sum of waits
  over the next few rounds is least, within each request's FCFS allowance.
- Blocked consumers: `ScanAction.FOLLOW` where the runner restores state saved in the same round;
  otherwise wait, or recompute from a shallower READY point (`recompute`).
- Placement: `lone`. Without recurrent state nothing blocks: arrival order, as `radixflow`.
docs/policies.md#adaptive says why each rule is there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from radixflow.cache.types import Match
from radixflow.scheduler.adaptive.decisions import Decisions
from radixflow.scheduler.adaptive.fcfs_bound import FCFS_SHARE, FcfsBound
from radixflow.scheduler.adaptive.patience import Patience
from radixflow.scheduler.adaptive.ranking import RankIndex
from radixflow.scheduler.adaptive.recompute import Draft, Verdict, blocked, weigh
from radixflow.scheduler.adaptive.round_plan import Lookahead, Room, RoundPlanner, RoundTake
from radixflow.scheduler.adaptive.round_tally import ArrivalRate, DraftTally
from radixflow.scheduler.adaptive.round_time_curve import RoundTimes
from radixflow.scheduler.adaptive.waiting_shapes import Shape, Shapes
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.scan import PolicyContext, ScanAction

AGING = 32.0  # slack of a request, in rounds, per full token budget of work per completion
# blocked consumers and deferred chunks one scan passes over before it ends, per request a round
# may hold: keeps a round's cost flat however many consumers wait on one producer
SKIPS_PER_SLOT = 1


class Adaptive:
    name = "adaptive"
    # `branch` plus a checkpoint at the end of a lone request's shared context, so candidates that
    # arrive one at a time reuse it (the "lone context" part of this policy)
    placement = "lone"

    def __init__(self, aging: float = AGING, fcfs_share: float = FCFS_SHARE) -> None:
        self._aging = aging
        self._fcfs_share = fcfs_share
        self._fcfs: FcfsBound | None = None  # slack bounds, from the token budget at `bind`
        self._ctx: PolicyContext | None = None
        self._shapes: Shapes | None = None
        self._times: RoundTimes | None = None
        self._ranked = True  # False without recurrent state: arrival order, as radixflow
        self._index = RankIndex(on_drop=self._forget)
        self._round = 0
        self._skips = 0  # blocked consumers this scan passed over
        self._decisions = Decisions()  # counted and noted once their request gets its chunk
        self._tally = DraftTally()  # this round's draft, for the cut, following and recomputing
        self._continuing = 0  # chunks of running requests at the head of this round's draft
        self._arrivals = ArrivalRate()
        self._planner: RoundPlanner | None = None
        self._scan: Lookahead | None = None  # this round's order
        self._take: RoundTake | None = None  # this round's cut, from its first request on
        self._patience: Patience | None = None  # FCFS allowances and arrivals, from `bind`

    # ----------------------------------------------------------------- events
    def bind(self, context: PolicyContext) -> None:
        """Take the scheduler's context (mutates only the policy)."""
        self._ctx = context
        self._shapes = Shapes(context)
        self._times = RoundTimes(context.predict, context.config)
        self._ranked = context.config.has_recurrent
        self._fcfs = FcfsBound(context.config.token_budget, self._fcfs_share)
        self._planner = RoundPlanner(context.config, self._times, self._shapes)
        self._patience = Patience(context.config.token_budget, self._times, self._fcfs, self._arrivals)

    def on_arrival(self, request: Request) -> None:
        """Shape and rank the newcomer; its group's members are re-keyed before the next scan
        (mutates only the policy)."""
        if not self._ranked:
            return
        assert self._shapes is not None and self._fcfs is not None
        shape = self._shapes.arrived(request)
        assert self._planner is not None
        self._planner.shaped(request, shape)
        self._arrivals.arrived(request.arrival_s)
        self._fcfs.arrive(request.id, self._round, shape.remaining)
        self._index.add(request, self._round, self._slack(request, shape))

    def on_left(self, request: Request) -> None:
        """Drop a request that left the queue unadmitted now, not once a scan reaches it: the cut
        counts the waiting queue from the index. Its group's members are re-keyed before the next
        scan: a producer it depended on has a dependent fewer (mutates only the policy)."""
        shape = self._planner.shape(request.id) if self._planner is not None else None
        if shape is not None and self._shapes is not None:
            self._shapes.touch(shape)
        self._index.discard(request)

    def on_round_end(self, woken: Sequence[Request], now: float | None) -> None:
        """Re-key the woken consumers, whose reuse changed; note the engine's time for the arrival
        rate (mutates only the policy)."""
        if not self._ranked:
            return
        for req in woken:
            if req.status is RequestStatus.WAITING:
                self._rekey(req)
        if now is not None:
            self._arrivals.now = now

    def counters(self) -> dict[str, int]:
        return self._decisions.counters()

    def on_scheduled(self, request: Request) -> None:
        """The request decided about last got its chunk: count and note the decision (mutates
        only the policy)."""
        assert self._ctx is not None
        self._decisions.scheduled(request.id, self._ctx.note)

    # ----------------------------------------------------------------- the scan
    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        """The index's scan by deadline, after re-keying the groups that changed (mutates only
        the policy)."""
        self._round += 1
        self._skips = 0
        self._decisions.new_round()
        if not self._ranked:
            return waiting
        assert self._shapes is not None and self._ctx is not None
        self._continuing = len(self._ctx.running)
        self._tally.start(self._continuing)
        for req in self._shapes.stale():
            self._rekey(req)
        self._take = None
        self._scan = Lookahead(self._index.scan())
        return self._scan

    def on_blocked(self, request: Request, match: Match, draft: SchedulerOutput) -> ScanAction:
        """Follow its producer into this round, wait (skip it) or recompute; a follow or recompute
        is counted and noted once the request starts (`on_scheduled`), a wait at once (mutates
        only the policy)."""
        self._decisions.clear()
        if not self._takes(request, None, draft):
            return self._defer(request)  # it belongs to a unit this round does not take
        details: dict[str, object] = {"producer": match.producer, "tokens": match.checkpoint_tokens}
        if self._can_follow(request, match, draft):
            self._decisions.decide(request.id, "follow", details)
            return ScanAction.FOLLOW
        verdict = self._weigh(request, match, draft)
        if verdict is not None and verdict.recompute:
            self._decisions.decide(request.id, "recompute", details | {"rounds_saved": verdict.rounds_saved})
            return ScanAction.RECOMPUTE
        self._decisions.waited(request.id)
        return self._skip()

    def _can_follow(self, request: Request, match: Match, draft: SchedulerOutput) -> bool:
        """Whether the consumer can start after its producer within this round: the runner restores
        state saved in the same round, the producer is not a follower itself (a runner's recurrent
        layers then take at most two waves) and the budget left holds its first chunk from the
        PENDING checkpoint (a block, or less where its prompt ends sooner)."""
        assert self._ctx is not None
        config = self._ctx.config
        if not config.same_round_state or match.producer in self._decisions.followers:
            return False
        return self._fits(request, match.checkpoint_tokens, draft)

    def _defer(self, request: Request) -> ScanAction:
        """End the scan at a request whose unit the round's cut leaves; count and note it
        (mutates only the policy)."""
        assert self._ctx is not None
        self._decisions.deferred(request.id, self._ctx.note)
        return ScanAction.STOP

    def _skip(self) -> ScanAction:
        """Pass over a request; end the scan once it has passed over its limit (mutates the
        count of this scan's skips)."""
        assert self._ctx is not None
        self._skips += 1
        limit = SKIPS_PER_SLOT * self._ctx.config.max_requests
        return ScanAction.STOP if self._skips > limit else ScanAction.SKIP

    def on_ready(
        self, request: Request, match: Match, reuse: int, draft: SchedulerOutput
    ) -> ScanAction | None:
        """Take it (the budgets decide how much) when the round's cut takes its unit, else end the
        scan (`round_cut`); a producer its dependents promoted is counted and noted once it starts
        (`on_scheduled`). Its group is re-keyed before the next scan: its siblings become
        consumers once it runs (mutates only the policy)."""
        self._decisions.clear()
        if not self._ranked:
            return None
        assert self._shapes is not None and self._ctx is not None
        if not self._takes(request, len(request.prompt) - reuse, draft):
            if not self._fits(request, reuse, draft):
                return None  # the budget left cannot hold its chunk: the budget ends the scan
            return self._defer(request)  # the round ends before its unit (`round_cut`)
        shape = self._shapes.of(request, reuse)
        self._shapes.touch(shape)
        if shape.dependents and shape.key < shape.remaining:
            self._decisions.decide(request.id, "promote", {"dependents": shape.dependents})
        return None

    # ----------------------------------------------------------------- decisions
    def _takes(self, request: Request, tokens: int | None, draft: SchedulerOutput) -> bool:
        """Whether this round takes ``request``'s unit; the round's cut is planned at its first
        request (``tokens``: what it computes if taken, None: as last ranked)."""
        assert self._planner is not None and self._ctx is not None and self._times is not None
        assert self._patience is not None
        if self._take is None:
            assert self._scan is not None
            tally, config = self._tally, self._ctx.config
            tally.advance(draft.chunks, self._completes_prompt)
            prefill, decodes = tally.tokens - tally.decodes, tally.decodes
            room = Room(
                config.token_budget - tally.tokens,
                config.max_requests - len(draft.chunks),
                len(draft.chunks),
                len(self._index),
                self._patience.expected_arrivals,
                self._past_fcfs,
                self._patience.allowance,
            )
            running = len(draft.chunks) - decodes  # prefill chunks in the round already
            first = lambda x, n: self._times.seconds(prefill + x, decodes, running + n)  # noqa: E731
            self._take = self._planner.plan(self._scan, request, tokens, first, room)
        key = self._planner.key(request)
        # a consumer blocked on its producer starts in this round only by following it
        taken = self._take.takes(key) if tokens is not None else self._take.follows(key)
        return taken or self._past_fcfs(request)  # never left past its FCFS round

    def _fits(self, request: Request, reuse: int, draft: SchedulerOutput) -> bool:
        """Whether the round's token budget still holds a first chunk of ``request`` from
        ``reuse`` (mutates only the tally)."""
        assert self._ctx is not None
        left = self._budget_left(draft)
        return self._ctx.config.chunk_end(reuse, len(request.prompt), left) is not None

    def _budget_left(self, draft: SchedulerOutput) -> int:
        """Tokens of the round's budget ``draft`` leaves (mutates only the tally)."""
        assert self._ctx is not None
        self._tally.advance(draft.chunks, self._completes_prompt)
        return self._ctx.config.token_budget - self._tally.tokens

    def _past_fcfs(self, request: Request) -> bool:
        """The request is due: this round starts at or past its FCFS bound (`Patience.past_fcfs`)."""
        assert self._patience is not None
        return self._patience.past_fcfs(request, self._round)

    def _completes_prompt(self, chunk: ScheduledChunk) -> bool:
        """The chunk ends its request's prompt (a decode step completes no request)."""
        req = self._ctx.running.get(chunk.request_id) if self._ctx is not None else None
        return chunk.sample and req is not None and chunk.end <= len(req.prompt)

    def _weigh(self, request: Request, match: Match, draft: SchedulerOutput) -> Verdict | None:
        """The recompute verdict for a blocked consumer; None when the round is full or its
        producer is not running."""
        assert self._ctx is not None and self._times is not None
        budget = self._ctx.config.token_budget
        producer = self._ctx.running.get(match.producer or "")
        tally = self._tally
        tally.advance(draft.chunks, self._completes_prompt)
        if producer is None or tally.tokens >= budget:
            return None  # a full round has no room to recompute in
        waiting = blocked(request, match, self._ctx, producer.computed)
        drafted = Draft(tally.tokens, tally.decodes, tally.samples)
        return weigh(waiting, self._times, drafted, budget, len(self._index))

    # ----------------------------------------------------------------- keys
    def _rekey(self, request: Request) -> None:
        assert self._shapes is not None
        shape = self._shapes.of(request)
        assert self._planner is not None
        self._planner.shaped(request, shape)
        self._index.rekey(request, self._slack(request, shape))

    def _forget(self, request: Request) -> None:
        assert self._shapes is not None
        self._shapes.forget(request)
        if self._planner is not None:
            self._planner.forget(request.id)
        self._decisions.forget(request.id)
        if self._fcfs is not None:
            self._fcfs.forget(request.id)

    def _slack(self, request: Request, shape: Shape) -> float:
        """Rounds the request may wait from its arrival: its key's worth, at most its share of
        what FCFS would have made it wait."""
        assert self._ctx is not None and self._fcfs is not None
        return self._fcfs.cap(request.id, self._aging * shape.key / self._ctx.config.token_budget)
