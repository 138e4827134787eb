"""Take one more whole prompt into a round that already completes others, or give it a round of
its own: Smith's rule on the fixed cost of a round.

A round costs a fixed part plus its tokens (`round_time`). Taking a ready request whose whole
remaining prompt fits the round lengthens the round by ``grows`` seconds, which every request the
round completes waits. Leaving it for the next round costs the fixed part a round of its own adds,
``alone - grows``, to it and to every request served after it until the engine next idles: the
requests waiting now and those arriving while that backlog drains, about
``(waiting + 1) / (1 - busy)`` at the engine's busy fraction ``busy`` (each queued request's
service time brings ``busy / (1 - busy)`` more arrivals before the queue empties). The request is
left when the completions pay more than that count does.

Measured on the seed-0 grid of `experiments/policies.toml` (432 cells, against `adaptive`
taking every fitting request): hybrid cells better than both baselines by >1% 183 -> 194, within
1% of the better baseline 342 -> 343, worst cell +9.8% both, p99 failures 16 both. Two limits
come from the same measurements:

- only whole prompts are left: a budget-cut chunk needs a later round anyway, so leaving it
  saves no fixed part, it only moves work; leaving those too lost up to 8% in light-load
  interleaved and shuffled cells;
- only rounds completing at least ``MIN_COMPLETIONS`` prompts: splitting one consumer off a new
  producer delayed the producer's own consumers, which arrive next and are not counted yet
  (p99 +9% in a light-load grouped cell).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from radixflow.scheduler.output import ScheduledChunk

# completions a round must hold before a request is left for a round of its own (see above)
MIN_COMPLETIONS = 2
# rounds over which the busy fraction is measured: long enough to span a few idle gaps at light
# load (about one round in three is followed by one), short enough to follow a change of load
BUSY_WINDOW = 32
# the busy fraction used at most: a backlog that never drains (batch arrivals, overload) counts
# every waiting request 20 times, which leaves a request only for a round completing dozens
BUSY_CAP = 0.95


@dataclass(frozen=True)
class Split:
    """A ready request whose whole remaining prompt fits the round, and what the round holds."""

    completions: int  # prompts the round completes so far
    grows_s: float  # seconds the round grows by if it takes the request
    alone_s: float  # seconds of a round holding the request alone
    waiting: int  # requests waiting besides it
    busy: float  # the engine's busy fraction, in [0, 1]

    @property
    def extra_fixed_s(self) -> float:
        """What a round of its own costs beyond the tokens it computes."""
        return max(self.alone_s - self.grows_s, 0.0)

    @property
    def delayed(self) -> float:
        """Requests a round of its own delays: it, those waiting, and the arrivals before the
        backlog drains."""
        return (self.waiting + 1) / (1.0 - min(self.busy, BUSY_CAP))


def leave_for_later(split: Split) -> bool:
    """Leave the request for a round of its own: the completions lose more by the round growing
    than the delayed requests lose by one more fixed part. Pure."""
    if split.completions < MIN_COMPLETIONS:
        return False
    return split.completions * split.grows_s > split.delayed * split.extra_fixed_s


class BusyFraction:
    """Share of recent engine time spent in rounds.

    A round that starts while work remains starts when the previous one ends, so the whole span
    between their ends is busy; after the engine ran out of work it idled until an arrival, and
    only the round's predicted time counts.
    """

    def __init__(self, window: int = BUSY_WINDOW) -> None:
        self._spans: deque[tuple[float, float]] = deque(maxlen=window)  # (span, busy) per round
        self._last_end = 0.0
        self._work_left = False  # whether work remained when the last round ended
        self._value = 0.0  # recomputed once per round: every admission decision reads it

    def round_ended(self, now: float, predicted_s: float, work_left: bool) -> None:
        """A round ended at engine time ``now``; it was predicted to take ``predicted_s``;
        ``work_left``: requests still wait or run (mutates the window)."""
        span = max(now - self._last_end, 0.0)
        busy = span if self._work_left else min(span, max(predicted_s, 0.0))
        self._spans.append((span, busy))
        self._last_end, self._work_left = now, work_left
        total = sum(s for s, _ in self._spans)
        self._value = 0.0 if total <= 0.0 else min(sum(b for _, b in self._spans) / total, 1.0)

    @property
    def value(self) -> float:
        """The busy fraction over the window (0 before any round). Pure."""
        return self._value


class DraftTally:
    """What this round's draft holds so far: its tokens, decode steps and completed prompts.

    A draft only grows during a scan, so each look reads just the chunks appended since the last
    one: a decision costs O(1) amortized instead of a pass over the round per ready request.
    """

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        """A new round's scan begins (mutates the tally)."""
        self._seen = 0
        self.tokens = 0
        self.decodes = 0
        self.completions = 0

    def advance(self, chunks: Sequence[ScheduledChunk], completes: Callable[[ScheduledChunk], bool]) -> None:
        """Count the chunks appended to ``chunks`` since the last call (mutates the tally)."""
        for i in range(self._seen, len(chunks)):
            chunk = chunks[i]
            self.tokens += chunk.length
            self.decodes += chunk.length == 1  # as the cost models count decode steps
            self.completions += completes(chunk)
        self._seen = len(chunks)
