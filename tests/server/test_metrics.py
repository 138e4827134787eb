"""The server's Prometheus figures (server/metrics.py) against counts made here."""

from __future__ import annotations

import pytest

from radixflow.scheduler.request import RequestStatus
from radixflow.server.metrics import REFUSED, REJECTIONS, ServerMetrics


def samples(metrics: ServerMetrics, name: str) -> dict[str, float]:
    """The series of a labelled metric, by its one label's value."""
    found = [s for m in metrics.registry.collect() for s in m.samples if s.name == name]
    return {next(iter(s.labels.values())): s.value for s in found}


def test_every_outcome_and_refusal_is_a_series_at_zero_before_the_first_one():
    """A series that appears only with its first event hides that event from rate() and
    increase(), which need two samples: every outcome and refusal reason is exported from the
    start (Prometheus: avoid missing metrics)."""
    metrics = ServerMetrics()
    done = [*(s.value for s in RequestStatus if s.done), REFUSED]
    assert samples(metrics, "radixflow_requests_total") == dict.fromkeys(done, 0.0)
    assert samples(metrics, "radixflow_requests_rejected_total") == dict.fromkeys(REJECTIONS, 0.0)
    text = metrics.render()[0].decode()
    assert 'radixflow_requests_total{outcome="aborted"} 0.0' in text


class _OpenLoop:
    """An engine loop that refuses nothing (`ServerState.admitting` asks it)."""

    def check_open(self, adding: int = 1, reading: int = 0) -> None:
        pass


def test_prompts_still_being_tokenized_have_a_gauge_of_their_own():
    """A 429 is decided on the requests pending and the prompts other requests are still
    tokenizing (`ServerState.admitting`), but only the first had a series: a server refusing
    with `radixflow_requests_pending` well below --max-pending looked wrong. Now the second is
    `radixflow_requests_tokenizing`; the two together are what the limit is checked against."""
    from types import SimpleNamespace

    from radixflow.server.state import Backend, ServerConfig, ServerState

    info = SimpleNamespace(max_context=64)
    backend = Backend("m", None, info, lambda r: None, lambda n: n, lambda m: _OpenLoop())  # type: ignore[arg-type]
    state = ServerState(backend, ServerConfig(tokenizer_threads=1, long_text_threads=1))
    gauge = state.metrics.registry.get_sample_value
    try:
        assert gauge("radixflow_requests_tokenizing") == 0
        with state.admitting(3), state.admitting(2):
            assert gauge("radixflow_requests_tokenizing") == 5
        assert gauge("radixflow_requests_tokenizing") == 0
    finally:
        state.close()


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        # a version no OpenMetrics has was echoed over a 1.0.0 body
        ("application/openmetrics-text; version=9.9.9", "application/openmetrics-text; version=1.0.0"),
        # a quoted version (HTTP allows one) or a malformed one: a 500 naming a TypeError
        ('application/openmetrics-text; version="1.0.0"', "application/openmetrics-text; version=1.0.0"),
        ("application/openmetrics-text; version=1.x", "application/openmetrics-text; version=1.0.0"),
        ("text/plain; version=abc", "text/plain; version=0.0.4"),
        # as before: what is asked where it is known, the text format where nothing else is
        ("application/openmetrics-text; version=1.0.0", "application/openmetrics-text; version=1.0.0"),
        ("application/openmetrics-text; version=0.0.1,text/plain;q=0.5", "text/plain; version=0.0.4"),
        ("text/plain; version=1.0.0", "text/plain; version=1.0.0"),
    ],
)
def test_metrics_answer_a_format_they_speak_whatever_version_is_asked(accept, content_type):
    """The Content-Type claims a version of the format the body is in, and an Accept header the
    client library cannot read gets a format rather than a 500."""
    body, got = ServerMetrics().render(accept)
    assert got.startswith(content_type + ";"), got
    assert (body.rstrip().endswith(b"# EOF")) == ("openmetrics" in got), body[-40:]
