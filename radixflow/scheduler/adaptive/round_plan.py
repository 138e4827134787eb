"""This round's cut, applied to the scan: which waiting requests the round takes.

At the scan's first request the planner pulls the next few budgets of the ranked queue, groups
them into units (a producer that other waiting prompts share with, counted with those dependents,
which follow it into its round; a lone request or ready consumer on its own), asks `round_cut`
where this round should end, and reorders what it pulled: the members of the units it takes
first (a producer before its followers, the followers found through the cache's tree even when
the rank order holds them further back), the rest after; requests past their FCFS bound go
right after the taken units' producers, ahead of followers still within theirs. The scan then
takes the taken units and ends at the first request of a unit it does not take.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from radixflow.scheduler.adaptive.round_cut import Horizon, Unit, cut
from radixflow.scheduler.adaptive.round_time_curve import RoundTimes
from radixflow.scheduler.adaptive.waiting_shapes import Shape, Shapes
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.request import Request, RequestStatus

# budgets of ranked work one round plans over: enough to see what this round delays, few enough
# that the plan stays cheap beside the scan
HORIZON_BUDGETS = 4
# units the plan weighs at most (the rest waits behind every planned round)
HORIZON_UNITS = 32


class Lookahead:
    """The scan's order with requests pulled ahead of it; yields those first, then the rest."""

    def __init__(self, source: Iterator[Request]) -> None:
        self._source = source
        self.ahead: deque[Request] = deque()

    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> Request:
        return self.ahead.popleft() if self.ahead else next(self._source)

    def pull(self) -> Request | None:
        """The next request of the underlying order (None: none left); the caller keeps it."""
        return next(self._source, None)


@dataclass(frozen=True)
class _Pulled:
    request: Request
    unit: int  # its unit's index


@dataclass(frozen=True)
class RoundTake:
    """What this round takes: the units' keys, or everything that fits (``all``)."""

    keys: frozenset[object]
    all: bool
    lead: object | None = None  # a unit whose producer alone it takes (its followers wait)

    def takes(self, key: object) -> bool:
        return self.all or key in self.keys

    def follows(self, key: object) -> bool:
        """Whether a consumer of this unit may follow its producer into the round."""
        return self.takes(key) and key != self.lead


class RoundPlanner:
    """Shapes of the waiting requests as last ranked, and this round's cut over them."""

    def __init__(self, config: SchedulerConfig, times: RoundTimes, shapes: Shapes) -> None:
        self._config, self._times, self._shapes = config, times, shapes
        self._shape: dict[str, Shape] = {}

    def shaped(self, request: Request, shape: Shape) -> None:
        """Remember a waiting request's shape as ranked (mutates the book)."""
        self._shape[request.id] = shape

    def forget(self, request_id: str) -> None:
        self._shape.pop(request_id, None)

    def shape(self, request_id: str) -> Shape | None:
        """The request's shape as last ranked (None: not ranked). Pure."""
        return self._shape.get(request_id)

    def key(self, request: Request) -> object:
        """Its unit's key: its group's node while the group's shared prefix waits to be computed
        (a producer and the dependents that follow it), else itself: a ready consumer completes
        on its own, so it is ranked and taken on its own (grouped, a late sibling would go
        ahead of other groups' earlier consumers)."""
        shape = self._shape.get(request.id)
        if shape is None or shape.group is None or not shape.dependents:
            return request.id
        return shape.group.node_id

    def plan(
        self,
        scan: Lookahead,
        head: Request,
        head_tokens: int | None,
        first: Callable[[int], float],
        room: Room,
    ) -> RoundTake:
        """Pull the horizon after ``head`` from ``scan``, cut it, and put the taken units' members
        first in ``scan``'s order (mutates ``scan``)."""
        units, pulled, keys, whole = self._pull(scan, head, head_tokens)
        arriving = room.arrivals(units, room.queued)
        behind = max(room.queued - sum(u.requests for u in units), 0) + arriving
        budget, slots = self._config.token_budget, self._config.max_requests
        due = 1 + max((p.unit for p in pulled if room.overdue(p.request)), default=-1)
        allow = [float("inf")] * len(units)
        for p in pulled:
            allow[p.unit] = min(allow[p.unit], room.allowance(p.request))
        beyond = not whole or arriving >= 1.0  # work beyond the horizon: queued, or on its way
        wave = self._times.second_wave() if self._config.same_round_state else 0.0
        horizon = Horizon(
            units,
            budget,
            slots,
            room.tokens,
            room.slots,
            room.running,
            behind,
            due,
            beyond,
            wave,
            allow,
        )
        choice = cut(horizon, first, self._times.seconds)
        if choice.units == 0 and not (choice.fill or choice.lead):
            # no room to plan: the scan goes on through what was pulled (the head is in its hands
            # already), so the budgets end it and say why, as they would without a cut
            scan.ahead.extendleft(reversed([p.request for p in pulled[1:]]))
            return RoundTake(frozenset(), True)
        taken = choice.units + (choice.fill or choice.lead)
        every = taken > len(units) or (whole and taken >= len(units) and not choice.lead)
        lead = keys[choice.units] if choice.lead else None
        take = RoundTake(frozenset(keys[:taken]), every, lead)
        behind_horizon = [] if whole else self._overdue_behind(scan, room.overdue, len(pulled))
        self._reorder(
            scan, pulled, len(units) if take.all else taken, choice.units, room.overdue, behind_horizon
        )
        return take

    def _overdue_behind(
        self, scan: Lookahead, overdue: Callable[[Request], bool], pulled: int
    ) -> list[Request]:
        """The requests past their FCFS bound among those right behind the horizon (the rank order
        holds them near its front; a horizon cut short by one long unit leaves them out): up to
        the requests a horizon holds with the ``pulled`` ones are looked at, so a round still
        visits a horizon's worth of the queue, not all of it. Those within their bound go back,
        in order: an overdue request may rank behind one still within it (a short key's early
        deadline, a long FCFS bound's late one), and is taken all the same (mutates ``scan``)."""
        late: list[Request] = []
        passed: list[Request] = []
        room = HORIZON_BUDGETS * self._config.max_requests - pulled
        while len(late) + len(passed) < room:
            req = next(scan, None)
            if req is None:
                break
            (late if overdue(req) else passed).append(req)
        scan.ahead.extendleft(reversed(passed))
        return late

    def _pull(
        self, scan: Lookahead, head: Request, head_tokens: int | None
    ) -> tuple[list[Unit], list[_Pulled], list[object], bool]:
        """The units of the next few budgets of the order, starting with ``head``'s, and whether
        they are the whole of it."""
        units: list[Unit] = []
        keys: list[object] = []
        index: dict[object, int] = {}
        pulled: list[_Pulled] = []
        tokens, limit = 0, HORIZON_BUDGETS * self._config.token_budget
        slots = HORIZON_BUDGETS * self._config.max_requests  # requests a horizon's rounds hold
        most = min(HORIZON_UNITS, slots)
        req: Request | None = head
        while req is not None:
            key = self.key(req)
            if len(pulled) >= slots:  # many consumers of few producers: the rest wait anyway
                scan.ahead.appendleft(req)
                return units, pulled, keys, False
            if key in index:
                pulled.append(_Pulled(req, index[key]))
                self._grow(units, index[key], req)
            else:
                if tokens >= limit or len(units) >= most:
                    scan.ahead.appendleft(req)
                    return units, pulled, keys, False
                unit = self._unit(req, head_tokens if req is head else None)
                index[key] = len(units)
                units.append(unit)
                keys.append(key)
                tokens += unit.tokens
                pulled.append(_Pulled(req, index[key]))
            req = scan.pull()
        return units, pulled, keys, True

    def _unit(self, request: Request, tokens: int | None) -> Unit:
        """A new unit from its first request: with its dependents when it is their producer."""
        shape = self._shape.get(request.id)
        remaining = len(request.prompt) if shape is None else shape.remaining
        own = remaining if tokens is None else tokens
        if shape is None or not shape.dependents:
            return Unit(own, 1)
        follow = round(shape.key * (shape.dependents + 1)) - shape.remaining  # the dependents' work
        # without same-round state its dependents cannot follow it: no round ends between them
        lead = own if self._config.same_round_state else 0
        return Unit(own + max(follow, 0), shape.dependents + 1, lead)

    def _grow(self, units: list[Unit], i: int, request: Request) -> None:
        """A later member of unit ``i``: counted already when the unit's first member was their
        producer; otherwise (consumers of a producer that ran before) added now."""
        unit, shape = units[i], self._shape.get(request.id)
        first_dependents = unit.requests - 1
        if first_dependents > 0 and shape is not None and shape.dependents:
            return
        tokens = len(request.prompt) if shape is None else shape.remaining
        units[i] = Unit(unit.tokens + tokens, unit.requests + 1)

    def _reorder(
        self,
        scan: Lookahead,
        pulled: list[_Pulled],
        taken: int,
        whole: int,
        overdue: Callable[[Request], bool],
        behind: list[Request],
    ) -> None:
        """The ``taken`` units' members first (their order kept; after the first of each of the
        ``whole`` units, its group's other waiting members, which follow it), then the rest of
        what was pulled, ``overdue`` requests first (the round takes them wherever it reaches
        them: the scan must reach them before it ends at a unit the cut leaves), then the
        order's remainder (mutates ``scan``). Where requests are overdue (pulled, or ``behind``
        the horizon), the followers still within their own bound go after them: the budget a
        follower takes is room an overdue request was promised."""
        members: list[list[Request]] = [[] for _ in range(taken)]
        leaders: list[Request | None] = [None] * taken
        rest: list[Request] = []
        for p in pulled:
            if p.unit >= taken:
                rest.append(p.request)
                continue
            if leaders[p.unit] is None:
                leaders[p.unit] = p.request
            if p.request is not pulled[0].request:  # the head is in the scan's hands already
                members[p.unit].append(p.request)
        seen = {p.request.id for p in pulled} | {r.id for r in behind}
        front: list[Request] = []
        for i in range(taken):
            front += members[i]
            for other in self._siblings(leaders[i]) if i < whole else ():
                if other.id not in seen:
                    seen.add(other.id)
                    front.append(other)
        late = [r for r in rest if overdue(r)]
        if late or behind:  # past its FCFS bound, a request goes ahead of followers that are not
            lead = {id(r) for r in leaders if r is not None}
            stays = [id(r) in lead or overdue(r) for r in front]
            ahead = [r for r, keep in zip(front, stays, strict=True) if keep]
            riders = [r for r, keep in zip(front, stays, strict=True) if not keep]
            moved = {id(r) for r in late}
            front, rest = ahead + late + behind + riders, [r for r in rest if id(r) not in moved]
        scan.ahead.extendleft(reversed(front + rest))

    def _siblings(self, request: Request | None) -> list[Request]:
        """The waiting members of ``request``'s group (none when it leads no group)."""
        shape = None if request is None else self._shape.get(request.id)
        if shape is None or shape.group is None or not shape.dependents:
            return []
        return [r for r in self._shapes.members(shape.group) if r.status is RequestStatus.WAITING]


@dataclass(frozen=True)
class Room:
    """What this round holds before the cut and who waits behind the horizon."""

    tokens: int  # budget left after the running requests' chunks
    slots: int  # chunks left
    running: int  # chunks already in the round
    queued: int  # requests waiting now
    # arrivals expected before the queue (``queued``, the horizon's units first) next empties
    arrivals: Callable[[list[Unit], int], float]
    overdue: Callable[[Request], bool]  # past its FCFS bound: not to be left again
    allowance: Callable[[Request], float]  # seconds it may still be held back (inf: no limit)
