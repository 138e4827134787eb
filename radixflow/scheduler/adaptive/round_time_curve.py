"""A round's time as a function of its size, read off the runner's predictor at a few sizes.

A policy weighs dozens of candidate chunks per round; the runner's predictor costs about half a
millisecond a call (it walks every kernel of the round). So the predictor is asked once per
size on a geometric grid, on first need, and sizes between grid points are interpolated. A
predictor that learns from the rounds it sees (the torch runner's) carries a ``revision`` that
changes when it does; the probes are then asked again.
Without a predictor (a real runner that models nothing) a round costs a fixed part worth
``FALLBACK_FIXED_SHARE`` of a full token budget plus its tokens, in arbitrary units: only
ratios of round times are ever compared. A predictor answering no usable time (NaN, infinite,
negative, or beyond ``MAX_ROUND_S``, where the costs built from it overflow) is treated as none
from then on, until its ``revision`` says it was refitted.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from functools import partial

from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk, SnapshotSpec
from radixflow.scheduler.scan import RoundPredictor

FALLBACK_FIXED_SHARE = 0.125  # the fixed cost of a worker call without a predictor, in budgets
GRID_RATIO = 1.25  # between neighbouring probed sizes: interpolation error stays a few percent
DECODE_CONTEXT = 1024  # context a probed decode step reads
MAX_ROUND_S = 1e12  # a longer predicted round is no time (costs summed from it would overflow)


class _NoTime(Exception):
    """The predictor answered a probe with no usable time."""


def _ids(n: int) -> tuple[int, ...]:
    """A probe chunk's token ids, ``0 .. n-1``, as a range: a predictor reads a chunk's positions,
    not its ids, and a whole budget's tuple of ids (`--token-budget` goes to 2**31) was gigabytes
    per probe. It measures, indexes and slices as the tuple a chunk holds does."""
    return range(n)  # type: ignore[return-value]


def _grid(low: int, high: int) -> list[int]:
    sizes, x = [], float(low)
    while x < high:
        sizes.append(int(x))
        x = max(x * GRID_RATIO, x + 1)
    return sorted({*sizes, high})


class RoundTimes:
    """Predicted seconds of a round from its prefill tokens and its decode steps."""

    def __init__(self, predict: RoundPredictor | None, config: SchedulerConfig) -> None:
        self._given = predict
        self._predict = predict  # None once it answered no usable time, until it is refitted
        self._budget = config.token_budget
        self._prefill_sizes = _grid(1, config.token_budget)
        self._decode_sizes = _grid(1, config.max_requests)
        self._prefill: dict[int, dict[int, float]] = {}  # chunk count -> size -> seconds
        self._decode: dict[int, float] = {}
        self._seen: dict[tuple[int, int], float] = {}  # (tokens, chunks) answered so far
        self._wave: float | None = None  # what a second wave costs, once asked
        self._block = config.block_size
        self._revision = getattr(predict, "revision", None)

    @property
    def in_seconds(self) -> bool:
        """Whether round times are the predictor's seconds (False: no predictor, or one that
        answered no usable time since its last refit; the units are then arbitrary). Mutates
        only the probe cache."""
        self._follow_predictor()
        return self._predict is not None

    def seconds(self, prefill_tokens: int, decode_steps: int = 0, chunks: int = 1) -> float:
        """A round computing ``prefill_tokens`` prompt positions in ``chunks`` chunks and
        ``decode_steps`` single-position steps. The chunk count matters: a predictor's kernels
        run several sequences of a round more efficiently than one long one, so a round is probed
        split as it will run (equal chunks, their count rounded down to a power of two, so a few
        curves serve every count). Mutates only the probe cache."""
        if prefill_tokens <= 0 and decode_steps <= 0:
            return 0.0
        self._follow_predictor()
        try:
            return self._seconds(prefill_tokens, decode_steps, chunks)
        except _NoTime:
            self._drop_predictor()
            return self._seconds(prefill_tokens, decode_steps, chunks)

    def _seconds(self, prefill_tokens: int, decode_steps: int, chunks: int) -> float:
        if prefill_tokens <= 0:
            return self._at(self._decode_sizes, self._decode, decode_steps, self._probe_decode)
        tokens = prefill_tokens + decode_steps
        split = 1 << (max(1, min(chunks, prefill_tokens)).bit_length() - 1)
        known = self._seen.get((tokens, split))
        if known is None:  # a policy asks for the same few sizes round after round
            curve = self._prefill.setdefault(split, {})
            probe = partial(self._probe_prefill, split)
            known = self._at(self._prefill_sizes, curve, max(tokens, split), probe)
            self._seen[(tokens, split)] = known
        return known

    def _follow_predictor(self) -> None:
        """Forget the probes when the predictor has been refitted since they were asked (and ask
        one that answered no usable time again)."""
        revision = getattr(self._given, "revision", None)
        if revision != self._revision:
            self._revision, self._predict = revision, self._given
            self._forget()

    def _drop_predictor(self) -> None:
        """Price rounds as without a predictor until it is refitted: it answered no usable time."""
        self._predict = None
        self._forget()

    def _forget(self) -> None:
        self._prefill.clear()
        self._decode.clear()
        self._seen.clear()
        self._wave = None

    def draft_seconds(self, chunks: Sequence[ScheduledChunk], extra_tokens: int = 0) -> float:
        """The round ``chunks`` plus ``extra_tokens`` more prompt tokens in a new chunk."""
        decodes = sum(1 for c in chunks if c.length == 1)  # as the cost models count them
        prefill = sum(c.length for c in chunks) - decodes + extra_tokens
        return self.seconds(prefill, decodes)

    def grows(self, tokens: int, decodes: int, extra: int) -> float:
        """How much longer a round of ``tokens`` (``decodes`` of them decode steps) runs with
        ``extra`` more prompt tokens. Mutates only the probe cache."""
        prefill = tokens - decodes
        return self.seconds(prefill + extra, decodes) - self.seconds(prefill, decodes)

    def second_wave(self) -> float:
        """What a round pays beyond its tokens when a follower restores state its producer saves
        in it (the runner's recurrent layers run the round in two waves): a half-budget producer
        and a one-block follower, with and without that dependency. Mutates only the cache."""
        self._follow_predictor()
        if self._wave is None:
            try:
                self._wave = 0.0 if self._predict is None else max(self._probe_wave(), 0.0)
            except _NoTime:
                self._drop_predictor()
                self._wave = 0.0
        return self._wave

    def _probe_wave(self) -> float:
        assert self._predict is not None
        lead = max(self._budget // 2 // self._block * self._block, self._block)
        seq = _ids(lead + self._block)
        saves = (SnapshotSpec(lead, 0),)
        producer = ScheduledChunk("probe", "probe", seq[:lead], 0, lead, (), None, saves, True)
        follower = ScheduledChunk("probe1", "probe", seq, lead, lead + self._block, (), 0, (), True)
        alone = ScheduledChunk("probe1", "probe", seq, lead, lead + self._block, (), None, (), True)
        return self._ask([producer, follower]) - self._ask([producer, alone])

    def _ask(self, chunks: list[ScheduledChunk]) -> float:
        """The predictor's seconds for a probe round; `_NoTime` for an answer that is none."""
        assert self._predict is not None
        seconds = self._predict(chunks)
        if not (math.isfinite(seconds) and 0.0 <= seconds <= MAX_ROUND_S):
            raise _NoTime
        return seconds

    def fixed(self) -> float:
        """A prefill round's fixed part: its time extrapolated to no tokens from a half and a full
        budget (a one-token round is costed as a decode step, so it is not the intercept)."""
        return max(2 * self.seconds(self._budget // 2) - self.seconds(self._budget), 0.0)

    def per_token(self) -> float:
        """Mean marginal seconds per prompt token over a full budget."""
        return max(self.seconds(self._budget) - self.seconds(1), 1e-12) / max(self._budget - 1, 1)

    def _at(self, sizes: list[int], cache: dict[int, float], n: int, probe: Callable[[int], float]) -> float:
        n = max(1, min(n, sizes[-1]))
        i = bisect.bisect_left(sizes, n)
        hi = sizes[i]
        if hi == n or i == 0:
            return self._cached(cache, hi, probe)
        lo = sizes[i - 1]
        t_lo, t_hi = self._cached(cache, lo, probe), self._cached(cache, hi, probe)
        return t_lo + (t_hi - t_lo) * (n - lo) / (hi - lo)

    @staticmethod
    def _cached(cache: dict[int, float], n: int, probe: Callable[[int], float]) -> float:
        if n not in cache:
            cache[n] = probe(n)
        return cache[n]

    def _probe_prefill(self, chunks: int, tokens: int) -> float:
        if self._predict is None:
            return FALLBACK_FIXED_SHARE * self._budget + tokens
        n = max(1, min(chunks, tokens))
        sizes = [tokens // n + (1 if i < tokens % n else 0) for i in range(n)]
        probes = [
            ScheduledChunk(f"probe{i}", "probe", _ids(size), 0, size, (), None, (), True)
            for i, size in enumerate(sizes)
        ]
        return self._ask(probes)

    def _probe_decode(self, steps: int) -> float:
        if self._predict is None:
            return FALLBACK_FIXED_SHARE * self._budget + steps
        seq = _ids(DECODE_CONTEXT + 1)
        chunks = [
            ScheduledChunk(f"probe{i}", "probe", seq, DECODE_CONTEXT, DECODE_CONTEXT + 1, (), None, (), True)
            for i in range(steps)
        ]
        return self._ask(chunks)
