"""benchmarks/oversized_bodies.py: the counts it refuses before the server starts."""

from __future__ import annotations

from dataclasses import fields

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("oversized_bodies")


def test_zero_samples_is_one_line_before_the_server_starts(bench, monkeypatch, capsys):
    # --samples 0 started the server and the clients, then died on the median of no sample
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import salt_memory

    def no_server(*args: object) -> None:
        raise AssertionError("the server was started")

    monkeypatch.setattr(salt_memory, "start", no_server)
    monkeypatch.setattr("sys.argv", ["oversized_bodies.py", "--samples", "0"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    assert "argument --samples: must be positive, got 0" in capsys.readouterr().err


def test_the_ratio_to_idle_is_also_paired_sample_by_sample(bench):
    # only the ratio of two medians: each loaded sample has its idle one taken just after it (the
    # pair under one load), and the spread of those ratios was never given
    assert bench.paired_ratio([0.2, 0.9, 0.3], [0.1, 0.3, 0.3]) == [1.0, 2.0, 3.0]  # min, median, max
    assert bench.paired_ratio([0.2], [0.0]) == []  # an idle sample too short to time: no ratio
    assert "ratio_paired" in {f.name for f in fields(bench.Load)}
