"""benchmarks/oversized_bodies.py: the counts it refuses before the server starts."""

from __future__ import annotations

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
