"""How the report writes a relative change: a signed percentage (or percentage points), a span's
median with its range."""

from __future__ import annotations

from radixflow.experiments.analysis import Span


def pct(x: float | None, points: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x * 100:+.1f} pp" if points else f"{x * 100:+.1f}%"


def show_span(s: Span | None, points: bool = False) -> str:
    if s is None:
        return "–"
    if s.n == 1:
        return pct(s.median, points)
    return f"{pct(s.median, points)} ({pct(s.low, points)} … {pct(s.high, points)})"
