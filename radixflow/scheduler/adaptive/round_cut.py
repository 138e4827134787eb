"""How much of the ranked queue this round takes: the cut that minimizes the predicted waits.

Total latency is the sum over rounds of the round's time times the requests still incomplete
when it runs (those in it and all behind it). With the queue in rank order grouped into units (a
producer and the consumers that follow it into its round; a lone request is a unit of one), a
schedule of the next few rounds is a partition of that sequence into rounds: each ends at a unit
boundary, or where its token budget runs out inside a unit (a budget-cut chunk). The best
partition is a small dynamic program over those end points (serial batching with a setup per
batch: Coffman, Yannakakis, Magazine & Santos 1990), and this round takes its first part.

Round times come from the runner's predictor (`RoundTimes`), so the curve decides: where a round
is mostly a fixed part, fewer rounds save everyone a fixed part and the cut packs the budget;
where its time grows with its tokens, short rounds let the first units finish early and the cut
pipelines; in between, what the curve says. Requests beyond the horizon and arrivals expected
before the queue next empties wait behind every round of it (`Horizon.behind`); running
requests' chunks are in the first round whatever is cut. A unit this round could take whole is
left only while its allowance (`Horizon.allow`) covers this round.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

RoundTime = Callable[[int, int], float]  # seconds of a round of this many prompt tokens, in so many chunks


@dataclass(frozen=True)
class Unit:
    """Work that completes together: a producer and its followers, or a lone request."""

    tokens: int  # prompt tokens it computes
    requests: int  # requests it completes
    # tokens of its producer, which a round may end after (its followers then start the next
    # round from the saved state, in the first wave); 0: the unit is not split
    lead: int = 0


@dataclass(frozen=True)
class Horizon:
    """The ranked units of the next few rounds and what bounds and weighs those rounds."""

    units: Sequence[Unit]
    budget: int  # prompt tokens a round may compute
    slots: int  # chunks a round may hold
    first_tokens: int  # budget left in this round (its running requests' chunks are in it)
    first_slots: int  # chunks left in this round
    running: int  # requests this round holds already: they wait for this round only
    behind: float  # requests that wait behind every round of the horizon (queued, or to arrive)
    due: int = 0  # units this round must take (they hold a request it may not delay again)
    beyond: bool = False  # work waits beyond the horizon: a round may end inside it
    wave_s: float = 0.0  # what a round pays when followers restore state saved in it (a wave)
    # per unit, the seconds it may still be held back (its FCFS bound); empty: no limit
    allow: Sequence[float] = ()


@dataclass(frozen=True)
class Cut:
    """This round's share of the best partition."""

    units: int  # whole units it takes, from the front
    fill: bool  # and the next unit up to the budget (a budget-cut chunk)
    cost_s: float  # the predicted sum of waits over the horizon (request-seconds)
    lead: bool = False  # and the next unit's producer alone (its followers start next round)


class _Plan:
    """The horizon laid out as token positions: where a round may end (a unit's end, or its
    producer's end), how many requests are complete there, and where producers end."""

    def __init__(self, h: Horizon, first: RoundTime, later: RoundTime) -> None:
        self.h, self.first = h, first
        times: dict[tuple[int, int], float] = {}

        def remembered(tokens: int, chunks: int) -> float:  # the DP asks for the same few sizes
            t = times.get((tokens, chunks))
            if t is None:
                t = times[(tokens, chunks)] = later(tokens, chunks)
            return t

        self.later = remembered
        self.ends = [0]  # cut points, in token positions (ends[0]: nothing)
        self.done = [0]  # requests complete there
        self.unit = [0]  # units wholly computed there
        self.leads: list[int] = []  # where producers with followers end
        for i, u in enumerate(h.units):
            start, before = self.ends[-1], self.done[-1]
            if 0 < u.lead < u.tokens and u.requests > 1:
                self.leads.append(start + u.lead)
                self._point(start + u.lead, before + 1, i)
            self._point(start + max(u.tokens, 0), before + u.requests, i + 1)
        self.total = self.done[-1]
        self.memo: dict[int, tuple[float, int]] = {}
        self._points: dict[int, int] = {}
        # what a token of the work beyond the horizon, computed early, saves those behind it: its
        # share of a full round, as the rounds after the horizon run
        full = h.budget
        self.credit = later(full, 1) / full * h.behind if h.beyond else 0.0

    def _point(self, position: int, done: int, units: int) -> None:
        self.ends.append(position)
        self.done.append(done)
        self.unit.append(units)

    def point_by(self, p: int) -> int:
        """The last cut point at or before position ``p`` (remembered: the DP asks for the same
        few positions many times)."""
        j = self._points.get(p)
        if j is None:
            j = self._points[p] = bisect.bisect_right(self.ends, p) - 1
        return j

    def waiting_at(self, p: int) -> float:
        """Requests incomplete when a round starts at ``p``."""
        return self.total - self.done[self.point_by(p)] + self.h.behind

    def seconds(self, p: int, q: int, time: RoundTime) -> float:
        """A round computing positions ``[p, q)``, in one chunk per request it reaches (so the
        predictor prices it as it runs); a second wave when a producer ends inside it."""
        wave = 0.0
        if self.leads:
            i = bisect.bisect_right(self.leads, p)
            wave = self.h.wave_s if i < len(self.leads) and self.leads[i] < q else 0.0
        a, b = self.point_by(p), self.point_by(q)
        chunks = self.done[b] - self.done[a] + (1 if q > self.ends[b] else 0)
        return time(q - p, max(chunks, 1)) + wave

    def ends_from(self, p: int, tokens: int, slots: int) -> list[int]:
        """Where a round starting at ``p`` may end: cut points within its tokens and chunks, and
        the budget's end inside a unit when the tokens run out first."""
        out: list[int] = []
        first = self.point_by(p)  # the cut point at or before p
        for j in range(first + 1, len(self.ends)):
            if self.ends[j] - p > tokens:  # the budget ends before point j: cut a chunk there
                if self.done[j - 1] - self.done[first] < slots:
                    out.append(p + tokens)
                break
            if self.done[j] - self.done[first] > slots:
                break
            out.append(self.ends[j])
        else:
            if self.h.beyond and self.done[-1] - self.done[first] < slots:
                out.append(p + tokens)  # the rest of the horizon and the work beyond it
        return out

    def best_from(self, p: int) -> float:
        """Least sum of waits from a later round starting at ``p`` to the horizon's end.

        Not by recursion: a unit of thousands of budgets (a long prompt under a small token
        budget, a system prompt shared by thousands) is a chain of one round per budget, deeper
        than Python's recursion limit. A round only moves forward, so the positions reachable
        from ``p`` are evaluated last one first."""
        end, memo = self.ends[-1], self.memo
        if p < end and p not in memo:
            for x, nexts in self._unknown_from(p):
                memo[x] = self._best_round(x, nexts)
        return memo[p][0] if p < end else -(p - end) * self.credit

    def _best_round(self, x: int, nexts: list[int]) -> tuple[float, int]:
        """The least sum of waits from ``x`` and where its round ends, every position a round
        from ``x`` may end at (``nexts``) already evaluated."""
        end, memo, weight = self.ends[-1], self.memo, self.waiting_at(x)
        best, arg = float("inf"), x
        for q in nexts:
            rest = memo[q][0] if q < end else -(q - end) * self.credit  # beyond: done early
            cost = self.seconds(x, q, self.later) * weight + rest
            if cost < best:
                best, arg = cost, q
        return best, arg

    def _unknown_from(self, p: int) -> list[tuple[int, list[int]]]:
        """The positions not evaluated yet that rounds from ``p`` reach (``p`` included), each
        with where a round from it may end, deepest first."""
        end, memo = self.ends[-1], self.memo
        found: dict[int, list[int]] = {}
        frontier = [p]
        while frontier:
            x = frontier.pop()
            if x in found:
                continue  # reached from two positions before it was taken off
            nexts = found[x] = self.ends_from(x, self.h.budget, self.h.slots) or [x + self.h.budget]
            frontier += [q for q in nexts if q < end and q not in memo and q not in found]
        return sorted(found.items(), reverse=True)


def _held_limits(h: Horizon, reach: int) -> list[float]:
    """For each unit index ``i``, the least allowance among units ``i`` to ``reach`` (those a
    round taking ``i`` whole units leaves, and could have taken whole); one more entry past the
    last unit (nothing left). A unit no cut of this round can take whole completes in a later
    round whatever the cut, so its allowance does not bind this round (once overdue, it is due)."""
    limits = [float("inf")] * (len(h.units) + 1)
    allow = list(h.allow[:reach]) + [float("inf")] * (len(h.units) - min(len(h.allow), reach))
    for i in range(len(h.units) - 1, -1, -1):
        limits[i] = min(limits[i + 1], allow[i])
    return limits


def cut(h: Horizon, first: RoundTime, later: RoundTime) -> Cut:
    """The first round of the partition of ``h`` with the least predicted sum of waits.

    ``first(x, n)``: this round's seconds with ``x`` more tokens in ``n`` more chunks than its
    running chunks; ``later(x, n)``: a later round's. Ties go to the larger cut (fewer rounds). Pure."""
    plan = _Plan(h, first, later)
    if not h.units or h.first_tokens <= 0 or h.first_slots <= 0:
        return Cut(0, False, 0.0)
    weight = plan.waiting_at(0) + h.running
    best, arg = float("inf"), 0
    ends = plan.ends_from(0, h.first_tokens, h.first_slots)
    due = plan.ends[plan.unit.index(min(h.due, len(h.units)))]
    held = _held_limits(h, max(plan.unit[plan.point_by(q)] for q in ends) if ends else 0)
    for q in reversed([q for q in ends if q >= due] or ends[-1:]):
        seconds = plan.seconds(0, q, first)
        if seconds > held[min(plan.unit[plan.point_by(q)], len(held) - 1)] and q != ends[-1]:
            continue  # a unit it leaves would be held past its bound: a larger cut
        cost = seconds * weight + plan.best_from(q)
        if cost < best:
            best, arg = cost, q
    if arg == 0:  # not even one unit's first chunk fits: take what the budget allows
        return Cut(0, True, 0.0)
    i = plan.point_by(arg)
    units = plan.unit[i]
    if arg > plan.ends[i]:
        return Cut(units, True, best)  # a budget-cut chunk of the next unit (or beyond them all)
    return Cut(units, False, best, lead=arg in plan.leads)
