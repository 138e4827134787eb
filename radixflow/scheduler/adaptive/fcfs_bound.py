"""How long first-come-first-served would keep a request waiting: the bound on its slack.

Ranking by work per completion lowers the mean by letting short work overtake long work, and
the long work's tail grows: with slack alone (`adaptive_policy.AGING` rounds per budget of
work), a producer that arrived early could be overtaken for as many rounds as its key allows, and
the p99 latency of many cells of the policies grid ended above both first-come-first-served
baselines'.

So each arrival also advances a virtual FCFS clock: the round in which a server taking the
waiting work in arrival order, a full token budget per round, would have finished it. A
request's slack is then at most a share of the rounds between its arrival and that finish,
so a request is never held much past the point where FCFS would have served it, and under a
light load (the clock barely runs ahead of the rounds) nothing is reordered. The clock runs in
full-budget rounds, so it can only run early, never late, of a real FCFS schedule.
"""

from __future__ import annotations

# The share of its FCFS wait a request may be held back: chosen on experiments/policies.toml as
# the share that keeps the p99 of the fewest cells above the FCFS baselines' without costing mean
# latency (the sweep: docs/decisions.md; tests do not depend on the value).
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
        self._due[request_id] = round_index + bound
        return bound

    def due(self, request_id: str) -> float | None:
        """The round past which the request may not be held back any more: its arrival plus its
        bound (None: never seen). Pure."""
        return self._due.get(request_id)

    def bound(self, request_id: str) -> float | None:
        """The rounds the request may be held back from its arrival (None: never seen). Pure."""
        return self._slack.get(request_id)

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
