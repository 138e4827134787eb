"""Whether to leave a ready request for a later round: Smith's rule on the fixed cost of a round.

A whole prompt (`Split`) that fits the round lengthens it by ``grows`` seconds, which every request
the round completes waits; leaving it costs the fixed part a round of its own adds,
``alone - grows``, to it and to every request served after it until the engine next idles, about
``(waiting + 1) / (1 - busy)`` at the engine's busy fraction. It is left when the completions pay
more. Only whole prompts (a budget-cut chunk needs a later round anyway, so leaving it saves no
fixed part) and only from rounds completing at least ``MIN_COMPLETIONS`` prompts (a consumer split
off a new producer delays that producer's own consumers, which are not counted yet).

A budget-cut chunk (`Cut`) is weighed only under a backlog that fills the next round anyway: then
it saves the requests behind (``waiting / (1 - load)``, ``load`` from the arrival rate) a share
``chunk / budget`` of one fixed part, against the time it adds to everything the round completes
or wakes; never past the round FCFS would have finished its request by. Why these limits and not
others: the measurements in docs/decisions.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from radixflow.scheduler.output import ScheduledChunk

# completions a round must hold before a request is left for a round of its own (see the docstring)
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

    def rate(self) -> float:
        """Arrivals per second: 0 until two arrivals at different times (a batch brings no more).
        The span runs from the window's first arrival to now, so once arrivals stop the rate
        decays. Pure."""
        if len(self._times) < 2:
            return 0.0
        span = max(self.now, self._times[-1]) - self._times[0]
        if span <= 0.0 or self.now - self._times[-1] >= span:
            return 0.0
        return (len(self._times) - 1) / span

    def load(self, seconds_per_token: float) -> float:
        """The offered load: the arrival rate times the mean prompt's seconds. Pure."""
        return self.rate() * self._mean_prompt * seconds_per_token


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
        self._value = 0.0  # recomputed once per round: every deferral decision reads it

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
