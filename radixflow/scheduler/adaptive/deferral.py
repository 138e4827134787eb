"""Take one more whole prompt into a round that already completes others, or give it a round of
its own: Smith's rule on the fixed cost of a round. And the same question for a budget-cut
chunk (`Cut`, at the end of this docstring).

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

A budget-cut chunk (part of a request that needs a later round anyway) is weighed differently,
and only under a backlog, when the work waiting beyond this round fills the next round whatever
happens to the chunk: the chunk then saves no round for its own request, it only fills the
budget, which saves the requests behind a share ``chunk / budget`` of one fixed part; taking it
delays everything the round completes or wakes by the time it adds. The requests behind are the
ones waiting now and those arriving before they drain, ``waiting / (1 - load)`` with ``load``
the offered load from the measured arrival rate (`ArrivalRate`; a batch brings no more, unlike
the busy fraction, which a batch's backlog holds at 1). Without the backlog condition the rule
lost up to 8% in light-load cells, where the next round has room and the chunk taken now
shortens it. Measured on the seed-0 grid (432 cells, `adaptive` with `lone` placement, against
taking every cut chunk): hybrid cells within 1% of the better baseline 351 -> 359, worst cell
+9.2% -> +1.7% (grouped batch cells at 1-3 ms, where `native` wins by starting the next
producer a round later), better than both 313 -> 316, p99 failures 2 both. The policy never
defers a request past the round FCFS would have finished it by (without that guard: p99
failures 3); a plain limit of deferrals per request instead lost the grouped cells (worst +4.1%
at 3 per request, +6.4% at 1), as every waiting producer is weighed in every round. Without
counting the arrivals (``load`` 0): p99 failures 7, worst +4.1%.
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
# arrivals the offered load is measured over (a cut chunk is weighed against it)
ARRIVAL_WINDOW = 64


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


@dataclass(frozen=True)
class Cut:
    """A budget-cut chunk under a backlog, and what taking it does to the round."""

    affected: int  # prompts the round completes plus consumers it wakes
    grows_s: float  # seconds the round grows by if it takes the chunk
    fixed_s: float  # the fixed part of a round's time
    share: float  # the chunk's tokens over the token budget: the part of a round it fills
    waiting: int  # requests waiting behind this round
    load: float  # the offered load: arrival rate x mean prompt x seconds per token

    @property
    def delayed(self) -> float:
        """Requests served after this round: those waiting and the arrivals before they drain."""
        return self.waiting / (1.0 - min(self.load, BUSY_CAP))


def defer_cut(cut: Cut) -> bool:
    """Leave the chunk for the next round: what the round's completions and wake-ups lose by the
    round growing exceeds the share of a fixed part the chunk saves those behind. Pure."""
    return cut.affected * cut.grows_s > cut.delayed * cut.fixed_s * cut.share


class Backlog:
    """Prompt tokens the waiting requests still need, each as of its last ranking."""

    def __init__(self) -> None:
        self._remaining: dict[str, int] = {}
        self.tokens = 0

    def set(self, request_id: str, remaining: int) -> None:
        """Record (or update) a waiting request's remaining tokens (mutates the backlog)."""
        self.tokens += remaining - self._remaining.get(request_id, 0)
        self._remaining[request_id] = remaining

    def drop(self, request_id: str) -> None:
        """The request left the queue (mutates the backlog)."""
        self.tokens -= self._remaining.pop(request_id, 0)

    def of(self, request_id: str) -> int:
        """A waiting request's remaining tokens as recorded (0: unknown). Pure."""
        return self._remaining.get(request_id, 0)


class ArrivalRate:
    """Arrivals per second and their mean prompt over a window of recent arrivals."""

    def __init__(self, window: int = ARRIVAL_WINDOW) -> None:
        self._times: deque[float] = deque(maxlen=window)
        self._mean_prompt = 0.0
        self.now = 0.0  # engine time of the last round's end

    def arrived(self, arrival_s: float, prompt_tokens: int) -> None:
        """A request arrived (mutates the window)."""
        first = not self._times
        self._times.append(arrival_s)
        self._mean_prompt = prompt_tokens if first else 0.9 * self._mean_prompt + 0.1 * prompt_tokens

    def load(self, seconds_per_token: float) -> float:
        """The offered load: 0 until two arrivals at different times (a batch brings no more).
        The span runs from the window's first arrival to now, so once arrivals stop the rate
        decays. Pure."""
        if len(self._times) < 2:
            return 0.0
        span = max(self.now, self._times[-1]) - self._times[0]
        if span <= 0.0 or self.now - self._times[-1] >= span:
            return 0.0
        return (len(self._times) - 1) / span * self._mean_prompt * seconds_per_token


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
