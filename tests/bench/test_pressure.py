"""Memory-pressure figures."""

from __future__ import annotations

import pytest

from radixflow.bench.metrics import percentile
from radixflow.bench.pressure import pressure_figures
from radixflow.scheduler import Request
from radixflow.scheduler.request import RequestStatus


def _done(rid: str, ttft_s: float) -> Request:
    r = Request(rid, (1, 2, 3), arrival_s=1.0)
    r.status, r.first_token_s, r.finish_s = RequestStatus.FINISHED, 1.0 + ttft_s, 1.0 + 2 * ttft_s
    return r


def test_ttft_percentiles_follow_the_one_rule_every_latency_percentile_does():
    # p95 took the nearest rank (rounded half to even) where p50 and every other percentile
    # interpolate: over five TTFTs of 1..5 ms it read 5 ms, not 4.8
    ttfts = [0.001, 0.002, 0.003, 0.004, 0.005]
    figures = pressure_figures([_done(str(i), t) for i, t in enumerate(ttfts)], None)
    assert figures["ttft_p95_ms"] == pytest.approx(1e3 * percentile(ttfts, 95))
    assert figures["ttft_p50_ms"] == pytest.approx(1e3 * percentile(ttfts, 50))
    assert figures["ttft_p95_ms"] < 5.0


def test_no_finished_request_gives_undefined_ttft_not_an_error():
    figures = pressure_figures([], None)
    assert figures["ttft_p50_ms"] is None and figures["ttft_p95_ms"] is None and figures["hit_rate"] is None
