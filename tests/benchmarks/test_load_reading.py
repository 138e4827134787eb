"""The machine's load, read one way by every benchmark script (`spread.loads_now`): a script that
read ``/proc/loadavg`` itself failed on macOS, which has none, before measuring anything."""

from __future__ import annotations

import os
import re
from pathlib import Path

from benchmark_utils import BENCHMARKS, load_benchmark

from radixflow.bench import paired_timing
from radixflow.bench.spread import loads_now

BENCH = Path(paired_timing.__file__).parent
PROC_LOADAVG = re.compile(r"""["']/proc/loadavg["']""")


def test_no_script_reads_proc_loadavg_itself():
    # per_candidate, score_many, runner_throughput and paired_timing opened /proc/loadavg:
    # FileNotFoundError on macOS
    scripts = [*BENCHMARKS.glob("*.py"), *BENCH.glob("*.py")]
    readers = [p.name for p in scripts if PROC_LOADAVG.search(p.read_text())]
    assert readers == []


def test_the_three_averages_or_none_where_the_platform_has_none(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 2.5, 3.25))
    assert loads_now() == (1.0, 2.5, 3.25)
    monkeypatch.delattr(os, "getloadavg")
    assert loads_now() is None


def test_generation_throughputs_load_is_the_shared_readers(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 2.5, 3.25))
    assert paired_timing.loadavg() == "1.00 2.50 3.25"
    monkeypatch.delattr(os, "getloadavg")
    assert paired_timing.loadavg() == "n/a"


def test_per_candidates_load_is_the_shared_readers(monkeypatch):
    candidates = load_benchmark("per_candidate")
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 2.5, 3.25))
    assert candidates.load() == [1.0, 2.5, 3.25]
    monkeypatch.delattr(os, "getloadavg")
    assert candidates.load() is None
