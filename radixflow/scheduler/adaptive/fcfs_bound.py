"""How long first-come-first-served would keep a request waiting: the bound on its slack.

Ranking by work per completion lowers the mean by letting short work overtake long work, and
the long work's tail grows: with slack alone (`adaptive.AGING` rounds per budget of work), a
producer that arrived early could be overtaken for as many rounds as its key allows, and on the
policies grid the p99 latency of 43 of 432 cells (seed 0) ended more than 5% above that of both
first-come-first-served baselines.

So each arrival also advances a virtual FCFS clock: the round in which a server taking the
waiting work in arrival order, a full token budget per round, would have finished it. A
request's slack is then at most a share of the rounds between its arrival and that finish,
so a request is never held much past the point where FCFS would have served it, and under a
light load (the clock barely runs ahead of the rounds) nothing is reordered. The clock runs in
full-budget rounds, so it can only run early, never late, of a real FCFS schedule.
"""

from __future__ import annotations

# The share of its FCFS wait a request may be held back, measured on the policies grid
# (experiments/policies.toml, seed 0, 432 cells; `tests` do not depend on it): 1.0 left 42 cells
# with p99 above the worse baseline's + 5%, 0.7 left 35, 0.4 left 16, while the hybrid cells
# within 1% of the better baseline's mean stayed at 342 of 360 (see README, Scheduling policies).
# With the `lone` placement and the cut-chunk rule, 0.4 left 2 such cells, 0.3 left 1 (hybrid
# cells better than both 316 / within 1% 359 either way) and 0.2 left 3 (better than both 301).
FCFS_SHARE = 0.3


class FcfsBound:
    """The most slack (in rounds, from arrival) each waiting request may have."""

    def __init__(self, token_budget: int, share: float = FCFS_SHARE) -> None:
        if token_budget < 1 or not share > 0:
            raise ValueError(f"token_budget {token_budget} and share {share} must be positive")
        self._budget = token_budget
        self._share = share
        self._clock = 0.0  # rounds: when FCFS would finish every arrival so far
        self._slack: dict[str, float] = {}  # request id -> its bound
        self._due: dict[str, float] = {}  # request id -> the round FCFS would have finished it by

    def arrive(self, request_id: str, round_index: int, work_tokens: int) -> float:
        """Advance the clock by a newcomer's prompt work and fix its bound, which it returns
        (mutates the clock)."""
        self._clock = max(self._clock, float(round_index)) + max(work_tokens, 0) / self._budget
        bound = (self._clock - round_index) * self._share
        self._slack[request_id] = bound
        self._due[request_id] = self._clock
        return bound

    def due(self, request_id: str) -> float | None:
        """The round by which FCFS would have finished the request (None: never seen). Pure."""
        return self._due.get(request_id)

    def cap(self, request_id: str, slack: float) -> float:
        """``slack`` held to the request's bound (unchanged for a request never seen). Pure."""
        bound = self._slack.get(request_id)
        return slack if bound is None else min(slack, bound)

    def forget(self, request_id: str) -> None:
        """The request left the queue (mutates the book)."""
        self._slack.pop(request_id, None)
        self._due.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._slack)
