"""benchmarks/serve_load.py: the summary of a load run's outcomes."""

from __future__ import annotations

import pytest
from benchmark_utils import load_benchmark

from radixflow.bench.metrics import percentile


@pytest.fixture(scope="module")
def load():
    return load_benchmark("serve_load")


def _scores(load, latencies: list[float]) -> list:
    return [load.Outcome("score", f"r{i}", 200, [f"cmpl-r{i}"], lat) for i, lat in enumerate(latencies)]


def test_latency_percentiles_interpolate_as_every_other_figure_does(load):
    # the script took the nearest rank (p90 of 1..10 was 9.0) where the rest of radixflow
    # interpolates (`bench.metrics.percentile`: 9.1)
    lat = [float(x) for x in range(1, 11)]
    summary = load.summarize(_scores(load, lat), 1.0, {})
    figures = summary["by_kind"]["score"]["latency_s"]
    assert figures == {f"p{q}": percentile(lat, q) for q in (50, 90, 99)}
    assert figures["p90"] == pytest.approx(9.1)
