"""benchmarks/memory_pressure.py: the workloads it runs."""

from __future__ import annotations

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def pressure():
    return load_benchmark("memory_pressure")


def test_a_workload_the_runner_has_no_shape_for_is_refused(pressure, monkeypatch, tmp_path):
    # --runner torch has chat and mixed only: `candidates` was dropped without a word, and the
    # run wrote an empty table
    monkeypatch.setattr(pressure, "cells", lambda *args: pytest.fail("ran a cell"))
    argv = ["memory_pressure.py", "--runner", "torch", "--workloads", "chat", "candidates"]
    monkeypatch.setattr("sys.argv", [*argv, "--json", str(tmp_path / "o.json")])
    with pytest.raises(SystemExit) as exc:
        pressure.main()
    assert str(exc.value) == "--workloads: candidates has no shape for --runner torch (it has: chat, mixed)"
