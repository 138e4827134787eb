"""Interpolation over measured kernel times: curves, two-axis grids, nearest and corner shapes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixflow.costmodel.kernel_times.curves import (
    EXACT,
    EXTRAPOLATED,
    INTERPOLATED,
    Curve,
    Grid2,
    Sites,
    bracket,
)


def linear_roof(x: float) -> float:
    return x * 1e-6


def test_curve_returns_the_measured_point_exactly():
    curve = Curve([(1, 5.0), (16, 7.0), (32, 9.0)])
    assert curve.at(16, linear_roof) == (7.0, EXACT)
    assert curve.at(1, linear_roof) == (5.0, EXACT)


@given(x=st.floats(min_value=1.0, max_value=32.0))
def test_curve_between_points_lies_between_its_neighbours(x):
    curve = Curve([(1, 5.0), (16, 7.0), (32, 9.0)])
    y, _ = curve.at(x, linear_roof)
    assert 5.0 <= y <= 9.0
    lo, hi = (5.0, 7.0) if x <= 16 else (7.0, 9.0)
    assert lo <= y <= hi


def test_loglog_is_exact_for_a_power_law():
    curve = Curve([(1024, 1024.0**2), (4096, 4096.0**2)], mode="loglog")
    y, how = curve.at(2048, linear_roof)
    assert how == INTERPOLATED
    assert y == pytest.approx(2048.0**2)


def test_past_the_last_point_the_efficiency_is_kept():
    curve = Curve([(1, 1.0), (100, 10.0)])
    y, how = curve.at(400, lambda x: x * 2.0)  # roofline 4x the last point's
    assert how == EXTRAPOLATED
    assert y == pytest.approx(40.0)


def test_below_the_first_point_the_launch_floor_is_kept():
    curve = Curve([(2, 3.0), (4, 5.0)])
    assert curve.at(1, linear_roof) == (3.0, EXTRAPOLATED)


def test_a_curve_rejects_repeated_axis_values_and_no_points():
    with pytest.raises(ValueError, match="repeat"):
        Curve([(1, 1.0), (1, 2.0)])
    with pytest.raises(ValueError, match="at least one"):
        Curve([])


def roof2(a: float, x: float) -> float:
    return a * x * 1e-6


def test_grid_is_linear_in_batch_between_measured_batches():
    grid = Grid2([(1, 10, 1.0), (1, 20, 2.0), (4, 10, 4.0), (4, 20, 8.0)])
    assert grid.at(4, 20, roof2) == (8.0, EXACT)
    y, how = grid.at(2, 10, roof2)
    assert how == INTERPOLATED
    assert y == pytest.approx(2.0)


def test_grid_borrows_efficiency_from_the_batch_whose_curve_reaches_x():
    # batch 8 was only measured to x=10: (8, 20) scales batch 4's time by the roofline
    grid = Grid2([(1, 10, 1.0), (1, 20, 2.0), (4, 10, 4.0), (4, 20, 8.0), (8, 10, 8.0)])
    y, how = grid.at(8, 20, roof2)
    assert how == EXTRAPOLATED
    assert y == pytest.approx(16.0)


def test_grid_past_every_curve_extrapolates_the_longest_one():
    grid = Grid2([(1, 10, 1.0), (1, 20, 2.0), (2, 10, 2.0)])
    y, how = grid.at(1, 40, roof2)
    assert how == EXTRAPOLATED
    assert y == pytest.approx(4.0)


def test_nearest_is_closest_in_log2_space():
    sites = Sites({(1024, 1024): "a", (4096, 4096): "b", (1024, 8192): "c"})
    assert sites.nearest((3000, 3000)) == (4096, 4096)
    assert sites.nearest((1024, 6000)) == (1024, 8192)


def test_bracket_mixes_neighbours_in_log2():
    assert bracket([1, 4], 2) == [(1, 0.5), (4, 0.5)]
    assert bracket([1, 4], 4) == [(4, 1.0)]
    assert bracket([1, 4], 8) is None
    assert bracket([1, 4], 0.5) is None


def test_corners_need_every_corner_measured():
    full = Sites({(a, b): None for a in (1, 4) for b in (1, 4)})
    corners = full.corners((2, 2))
    assert corners is not None
    assert sorted(c for c, _ in corners) == [(1, 1), (1, 4), (4, 1), (4, 4)]
    assert math.fsum(w for _, w in corners) == pytest.approx(1.0)
    holed = Sites({(1, 1): None, (1, 4): None, (4, 1): None})
    assert holed.corners((2, 2)) is None
    assert full.corners((8, 2)) is None  # outside the measured range
