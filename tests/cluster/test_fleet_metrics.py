"""A fleet's `/metrics`: the engine series are the replicas' own, summed (or one per replica
where they do not add up), from what each replica reports with its routing stats. No Ray."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from radixflow.cluster.fleet_metrics import FleetFigures, engine_samples
from radixflow.engine.records import RoundRecord
from radixflow.server.metrics import ServerMetrics


def engine(rounds: int, kv: int, budget: int, namespaces: int, evicted: int) -> ServerMetrics:
    """A replica's own metrics after ``rounds`` rounds of 10 tokens and this cache."""
    m = ServerMetrics()
    for i in range(rounds):
        m.on_round(RoundRecord(i, 0.0, 0.01, 0.01, 10, 1, 2, 0, "budget", (), predicted_s=0.02))
    m.on_cache(
        namespaces, budget, {"kv": kv, "checkpoint": 5, "working": 0}, {"kv": evicted, "checkpoint": 0}
    )
    m.on_queues(1, 2)
    m.on_pending(3)
    return m


def samples(metrics: ServerMetrics) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render()[0].decode())
        for s in family.samples
    }


def ingress(reports: dict) -> tuple[ServerMetrics, FleetFigures]:
    metrics, figures = ServerMetrics(), FleetFigures()
    metrics.engine_from(figures)
    figures.update(reports)
    return metrics, figures


def test_the_ingress_reports_the_fleets_engine_figures_not_zeros():
    # the ingress runs no engine: its rounds, cache bytes, budget, evictions... read 0 while the
    # replicas worked, though docs/fleet.md says its /metrics is the single server's
    a, b = engine(3, 100, 1000, 2, 4), engine(5, 200, 1000, 1, 1)
    # the report travels with the routing stats: plain, picklable
    metrics, _ = ingress({"a": pickle.loads(pickle.dumps(engine_samples(a))), "b": engine_samples(b)})
    got = samples(metrics)
    assert got[("radixflow_rounds_total", ())] == 8
    assert got[("radixflow_round_tokens_total", ())] == 80
    assert got[("radixflow_bubble_tokens_total", ())] == 16
    assert got[("radixflow_cache_bytes", (("kind", "kv"),))] == 300
    assert got[("radixflow_cache_bytes", (("kind", "checkpoint"),))] == 10
    assert got[("radixflow_cache_budget_bytes", ())] == 2000
    assert got[("radixflow_cache_evictions_total", (("kind", "kv"),))] == 5
    assert got[("radixflow_requests_waiting", ())] == 2 and got[("radixflow_requests_running", ())] == 4
    assert got[("radixflow_round_prediction_relative_error_count", ())] == 8
    assert got[("radixflow_round_prediction_relative_error_bucket", (("le", "+Inf"),))] == 8
    # a namespace on two replicas is not two namespaces: one series per replica
    assert got[("radixflow_cache_namespaces", (("replica", "a"),))] == 2
    assert got[("radixflow_cache_namespaces", (("replica", "b"),))] == 1
    assert ("radixflow_cache_namespaces", ()) not in got
    # the ingress's own figures are still its own
    assert got[("radixflow_requests_pending", ())] == 0


def test_a_replaced_replicas_totals_stay_and_its_gauges_go():
    metrics, figures = ingress({"a": engine_samples(engine(3, 100, 1000, 2, 4)), "b": None})
    figures.update({"b": engine_samples(engine(1, 7, 500, 1, 0))})  # a was replaced by b
    got = samples(metrics)
    assert got[("radixflow_rounds_total", ())] == 4  # a counter never goes backwards
    assert got[("radixflow_cache_evictions_total", (("kind", "kv"),))] == 4
    assert got[("radixflow_cache_bytes", (("kind", "kv"),))] == 7  # what is held now
    assert got[("radixflow_cache_budget_bytes", ())] == 500
    assert ("radixflow_cache_namespaces", (("replica", "a"),)) not in got


def test_before_any_report_the_engine_series_have_no_samples():
    metrics, _ = ingress({"a": None})
    got = samples(metrics)
    assert not any(name.startswith(("radixflow_rounds", "radixflow_cache_")) for name, _ in got)
    assert got[("radixflow_requests_pending", ())] == 0  # the ingress's own series are there


def test_generated_tokens_are_the_replicas_count_aborted_requests_included():
    # the ingress counted the tokens of the answers it received: none for a request whose client
    # left or whose replica died mid-answer, though the replica generated them
    from radixflow.scheduler.request import Request, RequestStatus

    replica = engine(1, 0, 10, 0, 0)
    done = Request("r", (1, 2, 3))
    done.output, done.status = [7, 8, 9], RequestStatus.ABORTED
    replica.on_done(done, 0.1)
    metrics, _ = ingress({"a": engine_samples(replica)})
    left = Request("r", (1, 2, 3))  # what the ingress knows of it: its client went away
    left.status = RequestStatus.ABORTED
    metrics.on_done(left, 0.1)
    assert samples(metrics)[("radixflow_generation_tokens_total", ())] == 3


def test_a_fleet_with_no_replica_left_running_is_down_and_logs_why_once(caplog):
    # replicas that started once and then died are replaced by Serve, and a replacement that fails
    # to start is retried without end: the running set stayed empty, down() said None ("none has
    # reported yet") and every request waited in Serve's queue for a replica, without a word
    import logging

    figures = FleetFigures()
    assert figures.down() is None  # before Serve's first update: starting, not down
    figures.update({"a": None, "b": None})
    heard: list[str] = []
    figures.watch(heard.append)
    with caplog.at_level(logging.WARNING, logger="radixflow.cluster"):
        figures.update({})
        figures.update({})  # still none: said once
    why = figures.down()
    assert why is not None and why.startswith("no replica is running")
    assert heard == [why]
    said = [r.getMessage() for r in caplog.records if r.name == "radixflow.cluster"]
    assert len(said) == 1 and why in said[0] and "503" in said[0]
    assert said[0].startswith("radixflow: warning: the fleet serves nothing: ")
    figures.update({"c": None})  # a replacement started
    assert figures.down() is None


def test_a_fleet_serving_again_says_so_once(caplog):
    # the log said when the fleet went down (requests get a 503) but never that it came back, so
    # a reader of the log saw a fleet still down
    import logging

    figures = FleetFigures()
    figures.update({"a": None})
    figures.update({})  # down: said as a warning
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="radixflow.cluster"):
        figures.update({"b": None, "c": None})
        figures.update({"b": None, "c": None})  # still serving: said once
    said = [r.getMessage() for r in caplog.records if r.name == "radixflow.cluster"]
    assert said == ["radixflow: the fleet serves again: 2 replicas running"]


def test_a_fleet_serving_again_says_so_where_it_said_it_went_down():
    # `radixflow serve` configures no Python logging: warnings and above reach stderr, nothing
    # below; the line saying the fleet serves again was an info line, so it never showed
    import subprocess
    import sys

    from cli_utils import checkout_env

    script = (
        "from radixflow.cluster.fleet_metrics import FleetFigures\n"
        "figures = FleetFigures()\n"
        "figures.update({'a': None})\n"
        "figures.update({})\n"
        "figures.update({'b': None})\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=checkout_env())
    lines = run.stderr.splitlines()
    assert run.returncode == 0 and len(lines) == 2, run.stderr
    assert lines[0].startswith("radixflow: warning: the fleet serves nothing")  # named as the CLI's are
    assert lines[1] == "radixflow: the fleet serves again: 1 replica running"
