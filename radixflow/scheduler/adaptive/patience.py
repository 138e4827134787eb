"""How long `adaptive` may still hold a request back, and what a longer horizon costs arrivals.

A request's FCFS allowance (`fcfs_bound`) is kept in predicted seconds where the runner predicts
round times, else in rounds; arrivals expected while the queue drains (the measured rate,
`round_tally`) are the requests each second of the horizon delays.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.scheduler.adaptive.fcfs_bound import FcfsBound
from radixflow.scheduler.adaptive.round_cut import Unit
from radixflow.scheduler.adaptive.round_tally import ArrivalRate
from radixflow.scheduler.adaptive.round_time_curve import RoundTimes
from radixflow.scheduler.request import Request


@dataclass
class Patience:
    """Reads the policy's FCFS bounds, round times and arrival rate (shares them; owns none)."""

    token_budget: int
    times: RoundTimes
    fcfs: FcfsBound
    arrivals: ArrivalRate

    def expected_arrivals(self, units: list[Unit], queued: int) -> float:
        """Requests expected to arrive, at the measured rate, while the queue drains: each second
        the horizon's rounds take delays every one of them by a second (the marginal cost of a
        longer horizon). The ``queued`` requests take the horizon's seconds per request, and
        arrivals while they run bring more work at that rate: a busy period of the queue's work
        over ``1 - load``. The rate is extrapolated no further than it was measured over, and
        at least over the horizon."""
        rate = self.arrivals.rate()
        served = sum(u.requests for u in units)
        if rate <= 0.0 or not self.times.in_seconds or served == 0:
            return 0.0  # without a predictor round times are not in seconds
        budget = self.token_budget
        full, part = divmod(sum(u.tokens for u in units), budget)
        horizon = full * self.times.seconds(budget) + self.times.seconds(part)
        if not self.times.in_seconds:  # the predictor answered these no usable time
            return 0.0
        per_request = horizon / served
        load = rate * per_request
        busy = float("inf") if load >= 1.0 else per_request * max(queued, served) / (1.0 - load)
        return rate * max(horizon, min(busy, self.arrivals.span()))

    def past_fcfs(self, request: Request, round_index: int) -> bool:
        """The request is due: the round planned now (``round_index``) starts at or past its FCFS
        bound, in predicted seconds where the runner predicts them (`allowance`), else in rounds.
        Both ways a due request is taken in the first round that starts at or past its bound and
        has room for it: given room, it waits past the bound by less than one round."""
        allowance = self.allowance(request)
        if self.times.in_seconds:
            return allowance <= 0.0
        due = self.fcfs.due(request.id)
        return due is not None and round_index >= due

    def allowance(self, request: Request) -> float:
        """Seconds the request may still be held back: its bound, in full rounds' seconds, from its
        arrival (inf without a predictor: the bound is then kept in rounds by `past_fcfs`)."""
        bound = self.fcfs.bound(request.id)
        if not self.times.in_seconds or bound is None:
            return float("inf")
        full = self.times.seconds(self.token_budget)
        if not self.times.in_seconds:  # the predictor answered it no usable time
            return float("inf")
        # the clock is the last round's end: a request that arrived after it (the engine sat
        # idle) has waited nothing yet, not a negative time
        waited = max(self.arrivals.now - request.arrival_s, 0.0)
        return bound * full - waited
