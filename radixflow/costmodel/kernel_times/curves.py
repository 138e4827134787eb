"""Interpolation over measured kernel times: along one axis, over two, and across shapes.

A `Curve` holds one measured shape's times along one axis (GEMM's m, a sequence length, a batch
size). Inside the measured range it interpolates between the two neighbouring points; past the
last point it keeps the last point's efficiency (time grows with the roofline time of the
work); below the first point it keeps the first point's time (the launch floor: a smaller call
is not faster than the smallest measured one). A `Grid2` stacks curves along a second axis
(batch) whose curves need not cover the same range. `Sites` finds the measured shape nearest
an unmeasured one (in log2 space), whose efficiency the caller then borrows.

Lookups are a dict access and a bisect: cheap enough for every layer of every simulated round.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

EXACT = "exact"
INTERPOLATED = "interpolated"
EXTRAPOLATED = "extrapolated"

Roof1 = Callable[[float], float]  # axis value -> roofline seconds of that call
Roof2 = Callable[[float, float], float]  # (batch, axis value) -> roofline seconds
T = TypeVar("T")


def lerp(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def loglog(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    """A power law through both points (exact for time ∝ x^p between them)."""
    t = math.log(x / x0) / math.log(x1 / x0)
    return y0 * (y1 / y0) ** t


INTERPOLATIONS: dict[str, Callable[[float, float, float, float, float], float]] = {
    "linear": lerp,
    "loglog": loglog,
}


class Curve:
    """Measured times along one axis; ``mode`` names the interpolation (see INTERPOLATIONS)."""

    __slots__ = ("interp", "xs", "ys")

    def __init__(self, points: Iterable[tuple[float, float]], mode: str = "linear") -> None:
        pts = sorted(points)
        if not pts:
            raise ValueError("a curve needs at least one point")
        self.xs = [float(x) for x, _ in pts]
        self.ys = [float(y) for _, y in pts]
        if any(a >= b for a, b in zip(self.xs, self.xs[1:], strict=False)):
            raise ValueError(f"curve axis values repeat: {self.xs}")
        self.interp = INTERPOLATIONS[mode]

    def covers(self, x: float) -> bool:
        return self.xs[0] <= x <= self.xs[-1]

    def at(self, x: float, roof: Roof1) -> tuple[float, str]:
        xs, ys = self.xs, self.ys
        i = bisect_left(xs, x)
        if i < len(xs) and xs[i] == x:
            return ys[i], EXACT
        if i == 0:
            return ys[0], EXTRAPOLATED
        if i == len(xs):
            return ys[-1] * roof(x) / roof(xs[-1]), EXTRAPOLATED
        return self.interp(xs[i - 1], ys[i - 1], xs[i], ys[i], x), INTERPOLATED


class Grid2:
    """Measured times over (a, x): one `Curve` along x per measured a (a: batch size).

    Between two measured a whose curves both reach x: linear in a. Otherwise the nearest curve
    that reaches x lends its efficiency (roofline time / time) at (a', x): time scales with the
    roofline in a (below the smallest measured a, the time stays: the launch floor). If no curve
    reaches x (x past every measurement), the curve reaching furthest is extrapolated in x first.
    """

    __slots__ = ("as_", "curves", "spans")

    def __init__(self, points: Iterable[tuple[float, float, float]], mode: str = "linear") -> None:
        by_a: dict[float, list[tuple[float, float]]] = {}
        for a, x, y in points:
            by_a.setdefault(float(a), []).append((x, y))
        if not by_a:
            raise ValueError("a grid needs at least one point")
        self.as_ = sorted(by_a)
        self.curves = [Curve(by_a[a], mode) for a in self.as_]
        self.spans = [(c.xs[0], c.xs[-1]) for c in self.curves]

    def at(self, a: float, x: float, roof: Roof2) -> tuple[float, str]:
        lo = hi = None
        for i, (x0, x1) in enumerate(self.spans):
            if x0 <= x <= x1:
                if self.as_[i] <= a:
                    lo = i
                if hi is None and self.as_[i] >= a:
                    hi = i
        if lo is not None and lo == hi:
            return self.curves[lo].at(x, lambda v: roof(a, v))
        if lo is not None and hi is not None:
            y0, _ = self.curves[lo].at(x, lambda v: roof(self.as_[lo], v))
            y1, _ = self.curves[hi].at(x, lambda v: roof(self.as_[hi], v))
            return lerp(self.as_[lo], y0, self.as_[hi], y1, a), INTERPOLATED
        if lo is None and hi is None:
            j = max(range(len(self.as_)), key=lambda i: (self.curves[i].xs[-1], -i))
        else:
            j = lo if lo is not None else hi
        a_j = self.as_[j]
        y, _ = self.curves[j].at(x, lambda v: roof(a_j, v))
        if a < self.as_[0]:
            return y, EXTRAPOLATED  # the launch floor, as below a curve's first point
        return y * roof(a, x) / roof(a_j, x), EXTRAPOLATED


def bracket(values: Sequence[int], v: float) -> list[tuple[int, float]] | None:
    """``v`` as a log2-linear mix of its two neighbours in sorted ``values`` (itself if present);
    None outside the range."""
    i = bisect_left(values, v)
    if i < len(values) and values[i] == v:
        return [(values[i], 1.0)]
    if i == 0 or i == len(values):
        return None
    lo, hi = values[i - 1], values[i]
    w = math.log2(v / lo) / math.log2(hi / lo)
    return [(lo, 1.0 - w), (hi, w)]


class Sites(Generic[T]):
    """Measured shapes (tuples of positive ints) and what was measured at each.

    `nearest`: the closest shape by Euclidean distance of log2 coordinates (ties: the smaller).
    `corners`: the measured shapes around an unmeasured one on the grid of measured values of
    each coordinate, with log2-multilinear weights; None unless every corner was measured.
    """

    __slots__ = ("_corners", "_logs", "_nearest", "_values", "tables")

    def __init__(self, tables: dict[tuple[int, ...], T]) -> None:
        if not tables:
            raise ValueError("no measured shapes")
        self.tables = tables
        keys = sorted(tables)
        self._logs = [(tuple(math.log2(v) for v in key), key) for key in keys]
        self._values = [sorted({key[d] for key in keys}) for d in range(len(keys[0]))]
        self._nearest: dict[Hashable, tuple[int, ...]] = {}
        self._corners: dict[Hashable, list[tuple[tuple[int, ...], float]] | None] = {}

    def get(self, key: tuple[int, ...]) -> T | None:
        return self.tables.get(key)

    def nearest(self, key: Sequence[int]) -> tuple[int, ...]:
        found = self._nearest.get(tuple(key))
        if found is None:
            target = [math.log2(v) for v in key]

            def dist(entry: tuple[tuple[float, ...], tuple[int, ...]]) -> float:
                return sum((a - b) ** 2 for a, b in zip(entry[0], target, strict=True))

            found = min(self._logs, key=dist)[1]
            self._nearest[tuple(key)] = found
        return found

    def corners(self, key: Sequence[int]) -> list[tuple[tuple[int, ...], float]] | None:
        k = tuple(key)
        if k not in self._corners:
            self._corners[k] = self._find_corners(k)
        return self._corners[k]

    def _find_corners(self, key: tuple[int, ...]) -> list[tuple[tuple[int, ...], float]] | None:
        mixes = [bracket(values, v) for values, v in zip(self._values, key, strict=True)]
        if any(m is None for m in mixes):
            return None
        found: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
        for mix in mixes:
            found = [((*c, v), w * wv) for c, w in found for v, wv in mix or ()]
        if any(c not in self.tables for c, _ in found):
            return None
        return found
