"""The server's Prometheus figures (server/metrics.py) against counts made here."""

from __future__ import annotations

from radixflow.scheduler.request import RequestStatus
from radixflow.server.metrics import REJECTIONS, ServerMetrics


def samples(metrics: ServerMetrics, name: str) -> dict[str, float]:
    """The series of a labelled metric, by its one label's value."""
    found = [s for m in metrics.registry.collect() for s in m.samples if s.name == name]
    return {next(iter(s.labels.values())): s.value for s in found}


def test_every_outcome_and_refusal_is_a_series_at_zero_before_the_first_one():
    """A series that appears only with its first event hides that event from rate() and
    increase(), which need two samples: every outcome and refusal reason is exported from the
    start (Prometheus: avoid missing metrics)."""
    metrics = ServerMetrics()
    done = [s.value for s in RequestStatus if s.done]
    assert samples(metrics, "radixflow_requests_total") == dict.fromkeys(done, 0.0)
    assert samples(metrics, "radixflow_requests_rejected_total") == dict.fromkeys(REJECTIONS, 0.0)
    text = metrics.render()[0].decode()
    assert 'radixflow_requests_total{outcome="aborted"} 0.0' in text
