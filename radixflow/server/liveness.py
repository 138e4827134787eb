"""Whether the engine loop makes progress: a thread alive but stuck (a worker call that never
returns, a deadlock) must not pass the health check while requests wait on it.

The engine thread reports each round it finishes and the bounded queue's count as it changes;
any thread asks `stalled`. A loop with no work is never stalled, however long since its last
round; one with work is stalled once no round has finished for longer than `bound_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from radixflow.engine.records import RoundRecord
from radixflow.problems import counted

# The bound is generous on purpose: a false alarm gets a working replica replaced by Ray Serve
# (its requests lost) or an engine taken out of a load balancer, while a late one only delays
# the alarm. 30 s is past any round the runners make (the token budget caps a round's work;
# torch warms its kernels up at load, before the loop starts) and past a slow machine's pauses.
STALL_FLOOR_S = 30.0
# A round takes about what the runner predicted for it (within tens of percent once its fit has
# learned); 20 of the longest predicted round leave room for a machine many times slower than
# the fit learned, and for a round larger than any seen before.
STALL_ROUNDS = 20.0
# Before any round has finished nothing tells this machine's speed: a real model's first
# full-budget prefill on a CPU takes minutes, and a replica called stuck then would be replaced
# before its first round ends, again and again. A first call that hangs is still caught. Until a
# round of the whole token budget is timed, the next may be one: the largest timed, scaled up to
# the budget (a round's time grows at most in proportion to its tokens: its fixed costs do not
# grow), bounds it, no further than this (a 1-token round scaled 2048 times says little).
STALL_FIRST_ROUND_S = 600.0


class Liveness:
    """Thread-safe: the engine thread writes, the health check and `/metrics` read."""

    def __init__(
        self,
        floor_s: float = STALL_FLOOR_S,
        rounds: float = STALL_ROUNDS,
        first_round_s: float = STALL_FIRST_ROUND_S,
        clock: Callable[[], float] = time.monotonic,
        budget_tokens: int | None = None,
    ) -> None:
        """``budget_tokens``: the most tokens a round computes (None: no round is scaled up)."""
        self.floor_s, self.rounds, self.first_round_s, self._clock = floor_s, rounds, first_round_s, clock
        self.budget_tokens = budget_tokens
        self._rounds_seen = False  # a round has finished (its time is evidence of the machine's speed)
        self._lock = threading.Lock()
        # the last round finished, or the moment work came to an idle loop (its wait starts then)
        self._since = clock()
        self._pending = 0
        self._longest = 0.0  # seconds: the longest round predicted (measured, where none was)
        self._largest = (0, 0.0)  # the round of the most tokens (the longer of those): tokens, seconds

    def on_round(self, record: RoundRecord) -> None:
        """A round finished (one whose worker call failed too: the loop moved on)."""
        # the prediction, not the measured call, where the fit has learned from measured rounds:
        # a round stuck for an hour that came back must not stretch the next stall's bound to 20
        # hours. Without one (a runner that predicts nothing, or a fit on its prior alone, a
        # cost model of another machine) the measured call is the evidence.
        predicted = record.predicted_s if record.predicted_from > 0 else None
        seconds = predicted if predicted is not None else record.wall_s or record.worker_call_s
        with self._lock:
            self._since = self._clock()
            if record.error is not None:  # rolled back, timed as 0 s: nothing of the machine's speed
                return
            self._longest = max(self._longest, seconds)
            self._largest = max(self._largest, (record.tokens, seconds))
            self._rounds_seen = True

    def on_pending(self, pending: int) -> None:
        """Accepted, unanswered requests: ``pending`` now."""
        with self._lock:
            if pending and not self._pending:  # idle until now: nothing was owed before
                self._since = self._clock()
            self._pending = pending

    @property
    def bound_s(self) -> float:
        """Seconds without a finished round, with work waiting, past which the loop is stalled."""
        with self._lock:
            if not self._rounds_seen:
                return max(self.floor_s, self.first_round_s)
            tokens, seconds = self._largest
            unseen = 0.0  # a round larger than any timed: as long as the largest, scaled up
            if self.budget_tokens is not None and tokens < self.budget_tokens:
                unseen = min(self.first_round_s, self.rounds * seconds * self.budget_tokens / max(tokens, 1))
            return max(self.floor_s, self.rounds * self._longest, unseen)

    def stalled(self) -> str | None:
        """Why the loop looks stuck (work waits and no round finished within `bound_s`); None
        while it makes progress or has nothing to do."""
        bound = self.bound_s
        with self._lock:
            waited, pending = self._clock() - self._since, self._pending
        if not pending or waited <= bound:
            return None
        return (
            f"the engine is stuck: no round finished for {waited:.0f} s with "
            f"{counted(pending, 'request')} waiting (limit {bound:.0f} s)"
        )
