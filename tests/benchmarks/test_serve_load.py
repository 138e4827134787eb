"""benchmarks/serve_load.py (its clients in `bench.serve_clients`, its figures in
`bench.serve_summary`): the summary of a load run's outcomes."""

from __future__ import annotations

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark

from radixflow.bench.metrics import percentile
from radixflow.bench.serve_clients import Outcome
from radixflow.bench.serve_summary import summarize


def _scores(latencies: list[float]) -> list[Outcome]:
    return [Outcome("score", f"r{i}", 200, [f"cmpl-r{i}"], lat) for i, lat in enumerate(latencies)]


def test_latency_percentiles_interpolate_as_every_other_figure_does():
    # the script took the nearest rank (p90 of 1..10 was 9.0) where the rest of radixflow
    # interpolates (`bench.metrics.percentile`: 9.1)
    lat = [float(x) for x in range(1, 11)]
    summary = summarize(_scores(lat), 1.0, {})
    figures = summary["by_kind"]["score"]["latency_s"]
    assert figures == {f"p{q}": percentile(lat, q) for q in (50, 90, 99)}
    assert figures["p90"] == pytest.approx(9.1)


@pytest.mark.parametrize(
    "flags",
    [
        ["--duration", "nan"],  # ran: nan <= 0 is false
        ["--duration", "inf"],
        ["--duration", "0", "--smoke"],  # --smoke set the duration before the check
        ["--chat-share", "1.5"],  # a share past 1 (or under 0, or nan) was taken
        ["--chat-share", "-0.1"],
        ["--chat-share", "nan"],
    ],
)
def test_a_bad_duration_or_share_is_refused_by_the_command_line(monkeypatch, capsys, flags):
    with monkeypatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        sl = load_benchmark("serve_load")
    monkeypatch.setattr("sys.argv", ["serve_load.py", *flags])
    with pytest.raises(SystemExit) as stopped:
        sl.parsed(sl.arguments())
    assert stopped.value.code == 2
    assert capsys.readouterr().err.count("error:") == 1


def test_a_machine_with_no_load_average_is_summarized_as_such(capsys):
    # serve_load records None where the platform has no load average (`spread.load_now`), and
    # the summary's line then raised TypeError formatting None as a float, after the whole run
    from radixflow.bench.serve_summary import show

    summary = summarize(
        _scores([0.1, 0.2]), 1.0, {"radixflow_reuse_rate": 0.5, "radixflow_rounds_total": 3.0}
    )
    summary["machine"] = {"cpus": 2, "load_1min_before": None, "load_1min_after": 1.5}
    show(summary)
    assert "2 CPUs, load average (1 min) n/a before, 1.50 after" in capsys.readouterr().out
