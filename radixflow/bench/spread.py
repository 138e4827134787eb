"""What a repeated bench's medians are read against: each policy's spread over its trials, and the
machine's load while they ran, and each policy's change from the first trial by trial (the
spread of the table's "vs" column). The table shows medians; a median without its spread and load
cannot say whether two policies differ (machines here are shared and noisy). And the order the
policies take their turns in, trial by trial (`rotated`), so that no one always runs first."""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Load:
    """The machine's 1-minute load average before and after a run: what else competed for it."""

    start: float
    end: float

    def to_json(self) -> dict[str, float]:
        return {"start": self.start, "end": self.end}

    def text(self) -> str:
        return f"machine load (1-minute average): {self.start:.2f} at the start, {self.end:.2f} at the end"


def loads_now() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages; None where the platform has none (Windows). Every
    script reads the load here: /proc/loadavg, read directly, is Linux's alone (not macOS's)."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        return None
    return one, five, fifteen


def loads_text(loads: Sequence[float] | None) -> str:
    """`loads_now`'s reading for the console: "0.51 0.60 0.70", or "n/a" where there is none."""
    return "n/a" if loads is None else " ".join(f"{x:.2f}" for x in loads)


def load_text(load: float | None) -> str:
    """`load_now`'s reading for the console: "0.51", or "n/a" where there is none."""
    return "n/a" if load is None else f"{load:.2f}"


def load_now() -> float | None:
    """The 1-minute load average; None where the platform has none (Windows)."""
    loads = loads_now()
    return None if loads is None else loads[0]


def load_between(start: float | None, end: float | None) -> Load | None:
    """The load over a run, None where either reading is missing."""
    return None if start is None or end is None else Load(start, end)


@dataclass(frozen=True)
class Spread:
    """One figure of one policy over its trials, in trial order (at least one); None where a trial
    has no such figure (a latency of a trial that completed no request)."""

    policy: str
    values: tuple[float | None, ...]

    def text(self, unit: str) -> str:
        defined = [v for v in self.values if v is not None]
        if not defined:
            return f"{self.policy}: none, no trial completed a request"
        low, high = min(defined), max(defined)
        text = f"{self.policy}: {low:.4f}–{high:.4f} {unit}, {_relative(low, high)}"
        missing = len(self.values) - len(defined)  # the range is over the others alone: say so
        return text if not missing else f"{text}; {missing} of {len(self.values)} trials completed nothing"


def _relative(low: float, high: float) -> str:
    """The range over its lowest value; none to give over a lowest of 0 (a trial whose every round
    was rolled back took no time), where 0% would read as trials that agreed."""
    if low > 0 or high == low:
        return f"spread {(high - low) / low if low > 0 else 0.0:.1%} of the lowest"
    return "the lowest 0: no spread relative to it"


def spread_lines(label: str, spreads: Sequence[Spread], unit: str) -> list[str]:
    """Lines for the console: ``label`` over N trials, then each policy's range. None printed for a
    single trial, where there is no spread to show."""
    trials = max((len(s.values) for s in spreads), default=0)
    if trials < 2:
        return []
    return [f"{label} over {trials} trials, min–max:", *(f"  {s.text(unit)}" for s in spreads)]


def ratio_lines(label: str, spreads: Sequence[Spread]) -> list[str]:
    """Lines for the console: each policy after the first against it, trial by trial. Trial t of
    every policy ran side by side (interleaved), under one load: its ratio is a paired measure,
    and the range of those says whether the table's percentage of two medians is evidence.
    None for a single trial or a single policy."""
    if len(spreads) < 2 or min(len(s.values) for s in spreads) < 2:
        return []
    first, others = spreads[0], spreads[1:]
    title = f"{label} against {first.policy}, trial by trial (ratios of trials run side by side):"
    return [title, *(f"  {_paired(first, s)}" for s in others)]


def paired_lines(label: str, trials: Mapping[str, Sequence[float | None]], first: str) -> list[str]:
    """`ratio_lines` for a script's figures kept as each name's trials in trial order: every other
    name against ``first`` trial by trial (trial t of each ran side by side)."""
    names = [first, *(name for name in trials if name != first)]
    return ratio_lines(label, [Spread(name, tuple(trials[name])) for name in names])


def _paired(first: Spread, other: Spread) -> str:
    """``other``'s change from ``first`` per trial both defined, over a first that took time."""
    pairs = zip(first.values, other.values, strict=False)  # a run cut short: the trials both finished
    changes = sorted(o / f - 1 for f, o in pairs if f is not None and o is not None and f > 0)
    if not changes:
        both = f"both completed a request and {first.policy} took time"
        return f"{other.policy}: none, no trial in which {both}"
    low, high = changes[0], changes[-1]
    text = f"{other.policy}: {low:+.1%} to {high:+.1%}, median {statistics.median(changes):+.1%}"
    pairs_said = "1 trial (one pair: no spread to read)" if len(changes) == 1 else f"{len(changes)} trials"
    text = f"{text} over {pairs_said}"
    return text if not low <= 0 <= high else f"{text}; the range spans 0: no difference shown"


def rotated(names: Sequence[T], trial: int) -> list[T]:
    """The order trial ``trial`` runs ``names`` in: each first in turn, so whatever the one before
    left (a warm cache, a busy spell, a grown heap) falls on each alike. Pure."""
    k = trial % len(names)
    return [*names[k:], *names[:k]]
