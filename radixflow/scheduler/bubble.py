"""Where a round's scan stopped, and the budget it left unused while feasible work waited."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from radixflow.cache.types import Match
from radixflow.scheduler.parking import ParkingLot
from radixflow.scheduler.request import Request
from radixflow.scheduler.reuse import ReuseFinder

# waiting requests the bubble count looks at past the scan's stop, per request a round may hold
# (a lower bound beyond that; the default bench and every cell of experiments/policies.toml fit)
BUBBLE_WALK_PER_SLOT = 2
# and at most this many whatever a round may hold (the experiments' 256 slots walk this far), so
# a huge ``max_requests`` does not make the count cost a round O(queue) again
BUBBLE_WALK_LIMIT = 512


@dataclass(frozen=True)
class ScanStop:
    """Where the waiting scan stopped: the request it could not admit and the rest of the scan
    (neither where the cache could not hold that request: the count is a lower bound)."""

    request: Request | None
    match: Match | None  # the stop request's match, when it is not parked
    rest: Iterator[Request]


def bubble_tokens(stop: ScanStop, reuse: ReuseFinder, parked: ParkingLot, cap: int, slots: int) -> int:
    """Prompt tokens (up to ``cap``) of waiting requests that could have run this round.

    Everything the scan passed was admitted or parked (parked consumers could not run), so only
    the stop request and what the scan never reached are matched, without touching LRU, and at
    most `BUBBLE_WALK_PER_SLOT` requests per one of the round's ``slots`` (`BUBBLE_WALK_LIMIT` in
    all): consumers blocked behind one producer add nothing, and a queue of them must not make
    the count (a metric) cost a round O(queue). Consumes part of ``stop.rest``.
    """
    total = 0
    if stop.request is not None:
        match = stop.match or reuse.match(stop.request, touch=False)
        total += _feasible(reuse, stop.request, match)
    for req in itertools.islice(stop.rest, min(BUBBLE_WALK_PER_SLOT * slots, BUBBLE_WALK_LIMIT)):
        if total >= cap:
            break
        if not parked.holds(req):
            total += _feasible(reuse, req, reuse.match(req, touch=False))
    return min(total, cap)


def _feasible(reuse: ReuseFinder, req: Request, match: Match) -> int:
    tokens = reuse.tokens(match)
    return 0 if tokens is None else len(req.prompt) - tokens
