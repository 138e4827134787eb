"""What the policy tracks between its decisions: the round's draft so far, and the arrival rate.

`DraftTally` reads a round's draft incrementally, so each decision of a scan costs O(1) amortized;
`ArrivalRate` measures how fast requests arrive, which the round's cut counts as requests that
will wait behind the rounds it plans (`round_plan`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from radixflow.scheduler.output import ScheduledChunk

# arrivals the rate is measured over
ARRIVAL_WINDOW = 64


class ArrivalRate:
    """Arrivals per second over a window of recent arrivals."""

    def __init__(self, window: int = ARRIVAL_WINDOW) -> None:
        self._times: deque[float] = deque(maxlen=window)
        self.now = 0.0  # engine time of the last round's end

    def arrived(self, arrival_s: float) -> None:
        """A request arrived (mutates the window)."""
        self._times.append(arrival_s)

    def rate(self) -> float:
        """Arrivals per second: 0 until two arrivals at different times (a batch brings no more).
        The span runs from the window's first arrival to now, so once arrivals stop the rate
        decays. Pure."""
        span = self.span()
        return 0.0 if span <= 0.0 else (len(self._times) - 1) / span

    def span(self) -> float:
        """Seconds the rate is measured over (0: no rate yet). Pure."""
        if len(self._times) < 2:
            return 0.0
        span = max(self.now, self._times[-1]) - self._times[0]
        if span <= 0.0 or self.now - self._times[-1] >= span:
            return 0.0
        return span


class DraftTally:
    """What this round's draft holds so far: its tokens, decode steps and completed prompts.

    A draft only grows during a scan, so each look reads just the chunks appended since the last
    one: a decision costs O(1) amortized instead of a pass over the round per ready request.
    """

    def __init__(self) -> None:
        self.start()

    def start(self, continuing: int = 0) -> None:
        """A new round's scan begins; the draft's first ``continuing`` chunks are those of running
        requests (mutates the tally)."""
        self._seen = 0
        self._continuing = continuing
        self.tokens = 0
        self.fresh_tokens = 0  # tokens of the chunks of requests admitted from the queue
        self.decodes = 0
        self.completions = 0
        self.samples = 0  # chunks that sample a token (decode steps too)
        self.ends: dict[str, int] = {}  # request id -> where its chunk in the draft ends

    def advance(self, chunks: Sequence[ScheduledChunk], completes: Callable[[ScheduledChunk], bool]) -> None:
        """Count the chunks appended to ``chunks`` since the last call (mutates the tally)."""
        for i in range(self._seen, len(chunks)):
            chunk = chunks[i]
            self.tokens += chunk.length
            self.decodes += chunk.length == 1  # as the cost models count decode steps
            self.completions += completes(chunk)
            self.samples += chunk.sample
            self.fresh_tokens += chunk.length if i >= self._continuing else 0
            self.ends[chunk.request_id] = chunk.end
        self._seen = len(chunks)
